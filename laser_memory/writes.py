"""A memory handle's write path: the records its calls ask for, checked, then sent.

- `RememberBuilder` makes the `Remember` records of ``remember``, ``remember_many`` and
  ``append`` from their arguments, checking every option, and adds each body's vector
  (one embedder batch for a whole ``remember_many``).
- `RecordWriter` sends records to the handle's topic: each encoded and measured before
  any is sent, the governor asked about all of them, so a refused batch writes nothing.

`laser_memory.memory.MemoryHandle` owns one of each; they hold no state a call depends
on but a cache of checked scopes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import msgspec

from . import inputs
from .access import Governor, Principal, ProposedWrite, check_governor
from .embedding import Embedder, embed_texts
from .errors import InvalidInput, RecordTooLarge
from .ids import MemoryId, new_id_bytes
from .kinds import MemoryKind, parse_kind
from .log.port import Appended, OutgoingRecord, checked_headers_size, record_size
from .records import (
    NAMED_RECORDS,
    MemoryRecord,
    Origin,
    Producer,
    Remember,
    Superseded,
    encode_value,
    partition_key,
    record_headers,
)
from .scope import MemoryScope

if TYPE_CHECKING:
    from .client import Laser

__all__ = ["ENTRY_KEYS", "REMEMBER_OPTIONS", "WRITE_DEPTH", "RecordWriter", "RememberBuilder"]

#: How many writes the running task is inside (`Laser._write_under_way`): a connection's
#: stop refuses a write that begins after it, never the steps of one begun before (its
#: append after its embedding, its topic made and its append again).
WRITE_DEPTH: ContextVar[int] = ContextVar("laser_memory_write_depth", default=0)

# A record's partition key, headers and their size in bytes.
_Framing = tuple[bytes, tuple[tuple[str, bytes], ...], int]

#: The options of ``remember`` (and of a ``remember_many`` entry, with ``body``).
REMEMBER_OPTIONS = frozenset(
    {
        "kind",
        "conversation",
        "agent",
        "user",
        "application",
        "tenant",
        "durable",
        "dedup",
        "origin",
        "producer",
        "embedding",
        "expires_at",
        "ttl",
        "supersedes",
    }
)
ENTRY_KEYS = frozenset({*REMEMBER_OPTIONS, "body"})
# An entry that is a body alone (a tuple: `A | B` makes a union object each call).
_BODY_TYPES = (str, bytes, bytearray)
# The keys of an entry that gives only its body, kind and owner (read first).
_PLAIN_KEYS = frozenset({"body", "kind", "conversation", "agent", "user", "application", "tenant"})
_FACT_CODE = MemoryKind.FACT.code
# The owner of an entry that gives none, as the builder's scopes are keyed (`_scope_of`).
_NO_OWNER = (None, None, None, None, None)


class RememberBuilder:
    """Makes a handle's `Remember` records: ``make_scope`` turns a call's conversation,
    tenant and owner into the checked scope the handle allows (its bound tenant and
    conversation)."""

    def __init__(
        self,
        laser: Laser,
        *,
        namespace: str,
        stream: str,
        origin: Origin | None,
        producer: Producer | None,
        embedder: Embedder | None,
        make_scope: Callable[..., MemoryScope],
    ) -> None:
        self._laser = laser
        self.namespace = namespace
        self.stream = stream
        self._origin = origin
        self._producer = producer
        self._embedder = embedder
        self._make_scope = make_scope
        # Scopes made for remembers, by (conversation, tenant, agent, user, application).
        self._scopes: dict[tuple, MemoryScope] = {}

    def record(
        self,
        entry: str | bytes | Mapping[str, Any],
        memory_id: MemoryId | None = None,
        new_id: bytes | None = None,
    ) -> Remember:
        """The `Remember` an entry asks for, checked. ``new_id``: the 16 bytes of the id
        for a new item (a batch draws every id's random part at once), else drawn here;
        ``memory_id`` (and ``dedup``) take precedence."""
        if isinstance(entry, _BODY_TYPES):
            entry = {"body": entry}
        if (type(entry) is not dict and not isinstance(entry, Mapping)) or "body" not in entry:
            raise InvalidInput("an entry is a body, or a mapping with a 'body' key")
        # Most entries give a body and who it belongs to: the other options are read
        # only when an entry has any (a batch's per-entry cost is the write path's).
        options = not _PLAIN_KEYS.issuperset(entry)
        if options:
            unknown = entry.keys() - ENTRY_KEYS
            if unknown:
                raise InvalidInput(
                    f"unknown option(s) {', '.join(sorted(unknown))}; remember takes "
                    f"{', '.join(sorted(REMEMBER_OPTIONS))}"
                )
        get = entry.get
        if not options and memory_id is None:
            return self.plain(
                entry["body"],
                get("kind"),
                get("conversation"),
                get("tenant"),
                get("agent"),
                get("user"),
                get("application"),
                new_id,
            )
        data = inputs.body(entry["body"], self._laser.config.max_body_bytes)
        given_kind = get("kind")
        kind = MemoryKind.FACT if given_kind is None else parse_kind(given_kind)
        scope = self._scope_of(
            (get("conversation"), get("tenant"), get("agent"), get("user"), get("application"))
        )
        durable, dedup = get("durable"), get("dedup")
        for flag, value in (("durable", durable), ("dedup", dedup)):
            if value is not None and type(value) is not bool:
                raise InvalidInput(f"{flag} is True or False, got a {type(value).__name__}")
        if memory_id is None:
            if dedup:
                memory_id = MemoryId.content(
                    kind,
                    data,
                    stream=scope.stream,
                    tenant=scope.tenant,
                    agent=scope.agent,
                    user=scope.user,
                    application=scope.application,
                )
            elif new_id is None:
                memory_id = MemoryId.new(self._laser.clock)
            else:
                memory_id = MemoryId._of(new_id)
        origin, producer = get("origin"), get("producer")
        expires_at, ttl = get("expires_at"), get("ttl")
        return Remember(
            ns=self.namespace,
            scope=scope,
            id=memory_id.bytes,
            kind=kind.code,
            body=data,
            lifetime="durable" if durable else "session",
            origin=inputs.origin(origin) if origin is not None else self._origin,
            producer=inputs.producer(producer) if producer is not None else self._producer,
            embedding=inputs.embedding(get("embedding")),
            expires_at=(
                None
                if expires_at is None and ttl is None
                else inputs.expiry(expires_at, ttl, self._laser.clock.now_ms())
            ),
            supersedes=self._supersedes(get("supersedes"), memory_id),
        )

    def batch(self, entries: Sequence[Any], new_ids: Sequence[bytes]) -> list[Remember]:
        """The `Remember` of each entry (as `record` makes it, ``new_ids[i]`` the new id
        of entry ``i``), checked; a bad entry raises `InvalidInput` naming its index.

        An entry that is a body, or a dict with a text body and only its kind and
        owner (most of a ``remember_many``), is made here without the calls `record`
        and `plain` cost each (a fifth of a batch's records)."""
        max_bytes = self._laser.config.max_body_bytes
        scopes = self._scopes
        namespace, origin, producer = self.namespace, self._origin, self._producer
        out: list[Remember] = []
        append = out.append
        for index, entry in enumerate(entries):
            body = entry.get("body") if type(entry) is dict else entry
            scope = owner = None
            if type(body) is str and type(entry) is dict and _PLAIN_KEYS.issuperset(entry):
                # Each get written out: `tuple(map(entry.get, ...))` took three times as long.
                owned = (
                    conversation := entry.get("conversation"),
                    tenant := entry.get("tenant"),
                    agent := entry.get("agent"),
                    user := entry.get("user"),
                    application := entry.get("application"),
                )
                # Only plain strings are looked up: a str subclass's own hash and equality
                # could claim another owner's scope (`record` takes its plain text).
                if (
                    (conversation is None or type(conversation) is str)
                    and (tenant is None or type(tenant) is str)
                    and (agent is None or type(agent) is str)
                    and (user is None or type(user) is str)
                    and (application is None or type(application) is str)
                ):
                    owner = owned
                    scope = scopes.get(owner)
                kind = entry.get("kind")
            elif type(body) is str and type(entry) is str:
                owner = _NO_OWNER
                scope = scopes.get(owner)
                kind = None
            if owner is None or (kind is not None and (type(kind) is not str or kind != "fact")):
                try:
                    append(self.record(entry, new_id=new_ids[index]))
                except InvalidInput as exc:
                    raise type(exc)(f"entry {index}: {exc}") from None
                continue
            try:
                data = body.encode("utf-8")
            except UnicodeEncodeError:
                data = b""  # `record` raises the body's own error
            if not data or len(data) > max_bytes:
                try:
                    append(self.record(entry, new_id=new_ids[index]))
                except InvalidInput as exc:
                    raise type(exc)(f"entry {index}: {exc}") from None
                continue
            if scope is None:
                # A new owner (a conversation per item meets one each entry): its scope
                # made and checked here, after the body, as `record` would; going
                # through `record` and `plain` for it cost a third of such a batch.
                try:
                    scope = self._scope_of(owner)
                except InvalidInput as exc:
                    raise type(exc)(f"entry {index}: {exc}") from None
            append(
                Remember(
                    ns=namespace,
                    scope=scope,
                    id=new_ids[index],
                    kind=_FACT_CODE,
                    body=data,
                    origin=origin,
                    producer=producer,
                )
            )
        return out

    def plain(
        self,
        body: Any,
        kind: Any = None,
        conversation: Any = None,
        tenant: Any = None,
        agent: Any = None,
        user: Any = None,
        application: Any = None,
        new_id: bytes | None = None,
    ) -> Remember:
        """The `Remember` of a body given with only its kind and owner, checked: the
        common entry, made without a mapping (``remember``'s calls give their arguments
        so; ``new_id`` as for `record`)."""
        data = inputs.body(body, self._laser.config.max_body_bytes)
        code = _FACT_CODE if kind is None else parse_kind(kind).code
        scope = self._scope_of((conversation, tenant, agent, user, application))
        if new_id is None:
            new_id = new_id_bytes(self._laser.clock)
        return Remember(
            ns=self.namespace,
            scope=scope,
            id=new_id,
            kind=code,
            body=data,
            origin=self._origin,
            producer=self._producer,
        )

    def _scope_of(self, owner: tuple) -> MemoryScope:
        """The checked scope of (conversation, tenant, agent, user, application)."""
        # Entries of a batch, and a handle's calls, mostly share their scope: made and
        # checked once.
        for field in owner:
            if field is not None and type(field) is not str:
                # A str subclass, taken as the plain text it holds, or no string at all
                # (`_make_scope` says so): never looked up as given, since its own hash
                # and equality could claim another owner's cached scope.
                owner = tuple(str.__str__(f) if isinstance(f, str) else f for f in owner)
                plain = all(f is None or type(f) is str for f in owner)
                scope = self._scopes.get(owner) if plain else None
                break
        else:
            scope = self._scopes.get(owner)
        if scope is None:
            scope = self._make_scope(
                conversation=owner[0],
                tenant=owner[1],
                agent=owner[2],
                user=owner[3],
                application=owner[4],
            )
            # Owners by the ten thousand (tenants' writes through one handle): 1,024,
            # cleared when full, made nearly every scope afresh.
            if len(self._scopes) >= 1 << 14:
                self._scopes.clear()
            self._scopes[owner] = scope  # every field is a plain str or None: checked
        return scope

    def replacements(self, records: list[Remember]) -> list[Superseded]:
        """The `Superseded` record of each remember that replaces an item: without a
        conversation, so every fold of the namespace reads it, in the same batch."""
        return [
            Superseded(
                ns=self.namespace,
                scope=MemoryScope(stream=self.stream, tenant=record.scope.tenant),
                target=record.supersedes,
                by=record.id,
            )
            for record in records
            if record.supersedes is not None
        ]

    @staticmethod
    def _supersedes(value: Any, memory_id: MemoryId) -> bytes | None:
        if value is None:
            return None
        replaced = MemoryId.parse(value)
        if replaced == memory_id:
            raise InvalidInput(f"item {memory_id} cannot supersede itself")
        return replaced.bytes

    async def embedded(self, records: list[Remember]) -> list[Remember]:
        """The records with their bodies' vectors and the embedder's label: one batch
        for the bodies that came without an embedding. Without an embedder, unchanged.
        Called inside `Laser._write_under_way` (with the append that follows), so a stop
        waits for the embedding."""
        embedder = self._embedder
        if embedder is None:
            return records
        for index, record in enumerate(records):
            given = record.embedding
            if given is not None and len(given) != 4 * embedder.dimensions:
                where = f"entry {index}: " if len(records) > 1 else ""
                raise InvalidInput(
                    f"{where}the embedding has {len(given) // 4} values; {embedder.label} "
                    f"makes {embedder.dimensions}"
                )
        missing = [i for i, record in enumerate(records) if record.embedding is None]
        vectors = None
        if missing:
            vectors = await embed_texts(
                embedder, [records[i].body.decode("utf-8", "replace") for i in missing]
            )
        made = dict(zip(missing, vectors if vectors is not None else [], strict=True))
        return [
            msgspec.structs.replace(
                record,
                embedding=record.embedding
                if record.embedding is not None
                else made[index].astype("<f4").tobytes(),
                embedder=embedder.label,
            )
            for index, record in enumerate(records)
        ]


class RecordWriter:
    """Sends records to one topic for one namespace, on behalf of ``principal`` (whose
    publish right is checked on every write), asking ``governor`` first."""

    def __init__(
        self,
        laser: Laser,
        *,
        namespace: str,
        topic: str,
        principal: Principal | None,
        governor: Governor | None,
    ) -> None:
        self._laser = laser
        self.namespace = namespace
        self.topic = topic
        self.principal = principal
        self._governor = governor
        # Each scope's framing (see `_framing`), by the scope object's id; each entry
        # holds its scope, so the id is not reused while the entry is here.
        self._framings: dict[int, tuple[MemoryScope, type, str, _Framing]] = {}

    def _framing(self, record: MemoryRecord) -> _Framing:
        """The record's partition key and headers, and their size in bytes. They depend
        on its scope, namespace and type alone (but for a named item's key), and the
        records a handle writes share the scopes its builder keeps: so they are made
        once per scope, not per record (they were a third of encoding a remember)."""
        scope, kind, namespace = record.scope, type(record), record.ns
        known = self._framings.get(id(scope))
        if known is not None and known[0] is scope and known[1] is kind and known[2] is namespace:
            return known[3]
        key, headers = partition_key(record), record_headers(record)
        # Measured as the log's check of a batch measures them, which then finds them
        # measured: a tenant per item met a new header set at each record, and checked
        # and measured it twice.
        headers_size = checked_headers_size(headers)
        if headers_size is None:  # never: `record_headers` makes (str, bytes) pairs
            headers_size = record_size(OutgoingRecord(b"", headers=headers))
        framing = (key, headers, len(key) + headers_size)
        if kind not in NAMED_RECORDS:  # a named item's key is its own
            if len(self._framings) >= 1 << 14:  # as many as the scopes above
                self._framings.clear()
            self._framings[id(scope)] = (scope, kind, namespace, framing)
        return framing

    @property
    def governed(self) -> bool:
        """Whether a governor is asked about each write (`write` asks it)."""
        return self._governor is not None

    async def write(self, records: Sequence[MemoryRecord]) -> list[Appended]:
        outgoing = self.outgoing(records)
        if self.principal is not None:
            self.principal.check_publish(self.topic)
        with self._laser._write_under_way():
            if self._governor is not None:
                await check_governor(
                    self._governor,
                    [
                        ProposedWrite(
                            op=type(record).__struct_config__.tag,
                            namespace=self.namespace,
                            topic=self.topic,
                            tenant=record.scope.tenant,
                            principal=self.principal,
                            body=getattr(record, "body", None) or getattr(record, "patch", None),
                            record=out.value,
                        )
                        for record, out in zip(records, outgoing, strict=True)
                    ],
                )
            laser = self._laser
            return await laser._append_making_topic(laser._appends, self.topic, outgoing)

    def outgoing(self, records: Sequence[MemoryRecord]) -> list[OutgoingRecord]:
        """The records as the log takes them. Every record is encoded and measured
        before any is sent: a batch refused for bad input writes nothing."""
        limit = self._laser.config.max_record_bytes
        outgoing = []
        framing = self._framing
        for index, record in enumerate(records):
            value = encode_value(record)
            key, headers, framing_size = framing(record)
            out = OutgoingRecord(value, key=key, headers=headers)
            size = len(value) + framing_size
            if size > limit:
                where = f"entry {index}: " if len(records) > 1 else ""
                raise RecordTooLarge(
                    f"{where}the encoded record is {size} bytes, over the {limit}-byte maximum "
                    "(body, embedding, scope and lineage together); shorten it, or raise "
                    "MemoryConfig.max_record_bytes and the log's max_record_bytes"
                )
            outgoing.append(out)
        return outgoing
