"""The memory handle: every write becomes a record on the memory topic; recall folds them.

>>> memory = laser.memory("notes")                                     # doctest: +SKIP
>>> mid = await memory.remember("the reporter prefers email", conversation="c-1")  # doctest: +SKIP
>>> await memory.improve(mid, 1.0)                                     # doctest: +SKIP
>>> [item.text for item in await memory.recall(conversation="c-1")]    # doctest: +SKIP
['the reporter prefers email']
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import msgspec

from folders.index_build import BUILD_APART_FROM
from folders.index_snapshots import SNAPSHOTS_FROM
from folders.inprocess import FoldedReader
from folders.replay import (
    AsOf,
    LoggedRecord,
    MemorySnapshot,
    chain_history,
    history_from_log,
    replay_stream,
    snapshot,
    to_millis,
)
from folders.state import ItemFilter

from . import consolidation, inputs, retention
from .access import (
    Governor,
    Principal,
    bound_tenant,
    resolve_tenant,
    validate_governor,
)
from .consolidation import ConsolidationReport
from .custom import CustomMemory
from .embedding import Embedder, validate_embedder
from .errors import (
    BodyTooLarge,
    ConfigError,
    InvalidInput,
    NoView,
    UnknownTopic,
    shown,
)
from .ids import MemoryId, validate_name
from .items import HistoryEntry, MemoryItem, NamedItem, PreparedSearch
from .kinds import MemoryKind
from .log.naming import MAX_PARTITIONS, check_settings
from .log.port import Appended
from .named import (
    apply_patch_bytes,
    encode_body,
    encode_patch,
    validate_key,
    validate_version,
)
from .recall import (
    query_text,
    query_vector,
    search_mode,
    to_context_block,
    validate_block,
    validate_limit,
    validate_min_similarity,
    validate_strategy,
)
from .records import (
    Feedback,
    Forget,
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Origin,
    Producer,
)
from .retention import Age
from .scope import MemoryScope
from .search_index import CACHE_BYTES
from .vector_clusters import ApproximateSearch
from .writes import WRITE_DEPTH, RecordWriter, RememberBuilder

if TYPE_CHECKING:
    from .client import Laser
    from .rerank import RerankedMemory, Reranker, RerankFunction

__all__ = ["MemoryConfig", "MemoryHandle", "Receipt"]

Receipt = Appended
"""Where a write landed: topic, partition, offset and append time."""


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Settings of the memory API.

    ``max_body_bytes`` caps a body, and a named item's body after a patch (1 MiB by
    default); ``max_record_bytes`` caps the whole encoded record (key, value and
    headers: body, embedding, scope and lineage together), 1 MiB + 64 KiB by default.
    Both logs take records of up to 2 MiB unless configured otherwise, so raise
    theirs with these. On the embedded log a missing memory topic is created on
    first write with ``default_partitions``; on Kafka it must be created with
    ``bootstrap`` first. ``approximate`` says when a semantic recall over many vectors
    scores only the clusters nearest the query (`ApproximateSearch`; None: always
    exact, as is ``recall(..., exact=True)``). A managed view's reader saves search
    indexes of at least ``index_snapshots_from`` entries beside the view, and the next
    reading process starts from them (None: each process builds its own). A read
    over at least ``index_build_apart_from`` items that has no snapshot yet has a
    child process build and save its index, and loads it from the snapshot, so the
    reader keeps none of the build's heap (None: always build in this process; it
    does anyway where no Python can be started, or without snapshots).
    ``search_cache_bytes`` bounds each of a search index's two caches of per-term
    arrays that queries make (16 MB by default; more answers a reader's repeated
    common words faster and takes more memory: at a million items 64 MB took a reader
    from 88 to 134 MB). With ``shared_folds`` above 0 (a server making a handle per
    request wants about one per tenant it serves at once), the handles a connection
    makes on one namespace and tenant share one fold for folded recall while any of
    them lives, and the connection keeps the last ``shared_folds`` it handed out after
    their handles are gone, so a handle made per request reads only the records new
    since the last one read; each kept fold holds its tenant's items of its namespace.
    0, the default: each handle folds the log on its own.

    >>> MemoryConfig(max_body_bytes=2 << 20).max_body_bytes
    2097152
    """

    max_body_bytes: int = 1 << 20
    max_record_bytes: int = (1 << 20) + (64 << 10)
    default_partitions: int = 4
    # Frozen, so one shared default is safe.
    approximate: ApproximateSearch | None = ApproximateSearch()  # noqa: RUF009
    index_snapshots_from: int | None = SNAPSHOTS_FROM
    index_build_apart_from: int | None = BUILD_APART_FROM
    search_cache_bytes: int = CACHE_BYTES
    shared_folds: int = 0

    def __post_init__(self) -> None:
        # Checked here, not at the first write: a string or None compared with a size
        # there was a raw TypeError, and a bad partition count waited for the first
        # topic the log had to make.
        check_settings(
            self,
            positive_ints=(
                "max_body_bytes",
                "max_record_bytes",
                "default_partitions",
                "search_cache_bytes",
            ),
        )
        if (
            isinstance(self.shared_folds, bool)
            or not isinstance(self.shared_folds, int)
            or self.shared_folds < 0
        ):
            raise ConfigError(
                "MemoryConfig.shared_folds is how many folds a connection keeps for the "
                f"handles it makes next, an int from 0 (0: none shared), got "
                f"{shown(self.shared_folds)}"
            )
        if self.default_partitions > MAX_PARTITIONS:
            raise ConfigError(
                f"MemoryConfig.default_partitions is at most {MAX_PARTITIONS}, "
                f"got {self.default_partitions}"
            )
        for name, none in (
            ("index_snapshots_from", "never save search indexes"),
            ("index_build_apart_from", "always build them in this process"),
        ):
            entries = getattr(self, name)
            if entries is not None and (
                isinstance(entries, bool) or not isinstance(entries, int) or entries < 1
            ):
                raise ConfigError(
                    f"MemoryConfig.{name} is a positive number of entries, or None"
                    f" to {none} (got {shown(entries)})"
                )
        if self.approximate is not None and not isinstance(self.approximate, ApproximateSearch):
            raise ConfigError(
                "MemoryConfig.approximate is an ApproximateSearch, or None to search exactly"
            )


class MemoryHandle:
    """Reads and writes one memory namespace on one topic.

    Get one from `Laser.memory`, `Laser.memory_on_topic`, `Laser.memory_topic` or
    a conversation context. A handle keeps its own fold of the log for folded recall:
    the first reads the whole topic, later ones only new records (with
    `MemoryConfig.shared_folds`, the connection's handles on one namespace and tenant
    share one).

    >>> memory = laser.memory("notes")                                  # doctest: +SKIP
    >>> mid = await memory.remember("ticket 42 is a login bug", conversation="c1")  # doctest: +SKIP
    >>> [i.text for i in await memory.recall(text="login")]             # doctest: +SKIP
    ['ticket 42 is a login bug']
    """

    def __init__(
        self,
        laser: Laser,
        *,
        namespace: str,
        topic: str,
        stream: str,
        conversation: str | None = None,
        origin: Origin | None = None,
        producer: Producer | None = None,
        reader: FoldedReader | None = None,
        embedder: Embedder | None = None,
        tenant: str | None = None,
        principal: Principal | None = None,
        governor: Governor | None = None,
    ) -> None:
        if principal is not None and not isinstance(principal, Principal):
            raise ConfigError(f"principal is a Principal, got {type(principal).__name__}")
        self._laser = laser
        #: The tenant every call acts in (None: unbound, chosen per call).
        self.tenant = bound_tenant(tenant, principal)
        self.principal = principal
        self._governor = validate_governor(governor) if governor is not None else None
        self._embedder = validate_embedder(embedder) if embedder is not None else None
        self.namespace = namespace
        self.topic = topic
        self.stream = stream
        self.conversation = conversation
        self._origin = origin
        self._producer = producer
        if reader is None or reader.tenant not in (None, self.tenant):
            # A handle bound to a tenant folds that tenant's records only; the
            # connection's other handles on it share the fold (see `Laser._fold_for`).
            reader = laser._fold_for(topic, namespace, self.tenant)
        self._reader = reader
        self.last_receipt: Receipt | None = None
        self._remembers = RememberBuilder(
            laser,
            namespace=namespace,
            stream=stream,
            origin=origin,
            producer=producer,
            embedder=self._embedder,
            make_scope=self._scope,
        )
        self._writer = RecordWriter(
            laser, namespace=namespace, topic=topic, principal=principal, governor=self._governor
        )

    @staticmethod
    def custom(backend: Any) -> CustomMemory:
        """The memory API over your own store, without a connection (see
        `laser_memory.custom`)."""
        return CustomMemory(backend)

    def __repr__(self) -> str:
        scoped = f", conversation={shown(self.conversation)}" if self.conversation else ""
        if self.tenant is not None:
            scoped += f", tenant={shown(self.tenant)}"
        return f"MemoryHandle(namespace={shown(self.namespace)}, topic={shown(self.topic)}{scoped})"

    # -- derived handles ---------------------------------------------------------

    def _derive(self, **changes: Any) -> MemoryHandle:
        fields = {
            "namespace": self.namespace,
            "topic": self.topic,
            "stream": self.stream,
            "conversation": self.conversation,
            "origin": self._origin,
            "producer": self._producer,
            "reader": self._reader,
            "embedder": self._embedder,
            "tenant": self.tenant,
            "principal": self.principal,
            "governor": self._governor,
        }
        fields.update(changes)
        return MemoryHandle(self._laser, **fields)

    def scoped(self, conversation: str) -> MemoryHandle:
        """A handle that always passes this conversation (it shares this handle's fold).

        >>> support = memory.scoped("support-42")                       # doctest: +SKIP
        >>> await support.recall()    # only support-42's items         # doctest: +SKIP
        """
        conversation = validate_name(conversation, "conversation")
        if self.conversation is not None and conversation != self.conversation:
            raise InvalidInput(
                f"this handle is scoped to conversation {shown(self.conversation)}; "
                f"it cannot be rescoped to {shown(conversation)}"
            )
        return self._derive(conversation=conversation)

    def reranker(self, reranker: Reranker | RerankFunction, *, depth: int = 50) -> RerankedMemory:
        """This handle with its text recalls reranked: the best ``depth`` items of each
        are ordered again by ``reranker`` (see `laser_memory.rerank`).

        >>> reranked = memory.reranker(my_cross_encoder, depth=30)   # doctest: +SKIP
        """
        from .rerank import RerankedMemory

        return RerankedMemory(self, reranker, depth)

    async def reembed(
        self,
        embedder: Embedder,
        *,
        tenant: str | None = None,
        batch_size: int = 64,
        progress: Callable[[int, int], object] | None = None,
    ) -> int:
        """Give every live item of the namespace (in ``tenant``) a vector of
        ``embedder``, as `Embedded` records; returns how many were written. See
        `laser_memory.reembed`.

        >>> await memory.reembed(MiniLMEmbedder())                   # doctest: +SKIP
        """
        from .reembed import reembed

        tenant = self._tenant(tenant)
        self._check_read()
        self._check_publish()
        return await reembed(
            self, embedder, tenant=tenant, batch_size=batch_size, progress=progress
        )

    def with_lineage(self, origin: Any = None, producer: Any = None) -> MemoryHandle:
        """A handle that stamps every item it remembers with this origin and producer.

        >>> facts = memory.with_lineage(producer={"name": "fact-extractor", "version": "2"})
        ... # doctest: +SKIP
        """
        return self._derive(
            origin=inputs.origin(origin) if origin is not None else self._origin,
            producer=inputs.producer(producer) if producer is not None else self._producer,
        )

    # -- writes ------------------------------------------------------------------

    async def remember(
        self,
        body: str | bytes,
        *,
        kind: str | MemoryKind = "fact",
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        durable: bool = False,
        dedup: bool = False,
        origin: Any = None,
        producer: Any = None,
        embedding: Sequence[float] | None = None,
        expires_at: datetime.datetime | None = None,
        ttl: datetime.timedelta | float | None = None,
        supersedes: MemoryId | str | bytes | None = None,
    ) -> MemoryId:
        """Remember a body; returns its id, whose ``receipt`` says where it landed.

        With ``dedup=True`` the id is the content id of the owner scope, kind and
        body, so remembering the same fact twice stores it once. ``expires_at`` (an
        aware datetime) or ``ttl`` (a timedelta, or seconds from the connection's
        clock) makes it leave every recall at that moment; the retention sweeper
        (`forget_expired`, `RetentionDriver`) then writes its forget.
        ``supersedes=id`` stores a corrected fact: the new item replaces that one, which
        leaves default recall for good and stays in history, audit and ``as_of``.

        >>> mid = await memory.remember("node-7 sits in eu-west", agent="planner")  # doctest: +SKIP
        """
        self._check_publish()
        defaults = (
            durable is False
            and dedup is False
            and origin is None
            and producer is None
            and embedding is None
            and expires_at is None
            and ttl is None
            and supersedes is None
        )
        if defaults and self._embedder is None and not self._writer.governed:
            # The common call, made with no mapping, no list of records and no coroutine
            # of the writer's: many concurrent calls pay for each object (and for the
            # garbage collector walking them while they wait).
            record = self._remembers.plain(
                body, kind, conversation, tenant, agent, user, application
            )
            outgoing = self._writer.outgoing((record,))
            # `Laser._write_under_way`, inlined on this path: a stop meanwhile waits for
            # it, so its topic, missing on a fresh embedded log, is made and the record
            # written, not refused as the log closes under it; begun after a stop, it is
            # refused (a task writing on would hold the stop for ever).
            laser = self._laser
            laser._one_write_begins()
            try:
                [receipt] = await laser._appends.append_batch(self.topic, outgoing)
            except UnknownTopic:
                # The writer makes the topic, if it may, and writes again: a step of this
                # write, which a stop since it began lets finish.
                token = WRITE_DEPTH.set(WRITE_DEPTH.get() + 1)
                try:
                    [receipt] = await self._writer.write((record,))
                finally:
                    WRITE_DEPTH.reset(token)
            finally:
                laser._one_write_ended()
            self.last_receipt = receipt
            mid = MemoryId._of(record.id)
            mid.receipt = receipt
            return mid
        entry = {
            "body": body,
            "kind": kind,
            "conversation": conversation,
            "agent": agent,
            "user": user,
            "application": application,
            "tenant": tenant,
        }
        # Options left at their defaults are left out: a plain entry is made quicker.
        if not defaults:
            entry.update(
                durable=durable,
                dedup=dedup,
                origin=origin,
                producer=producer,
                embedding=embedding,
                expires_at=expires_at,
                ttl=ttl,
                supersedes=supersedes,
            )
        record = self._remembers.record(entry)
        with self._laser._write_under_way():  # one write: its embedding, then its append
            if self._embedder is not None:
                [record] = await self._remembers.embedded([record])
            if record.supersedes is None:
                # `_write` inlined: one coroutine less for each of many concurrent calls.
                [receipt] = await self._writer.write([record])
                self.last_receipt = receipt
                also: list[Receipt] = []
            else:
                replacing = [record, *self._remembers.replacements([record])]
                [receipt, *also] = await self._write(replacing)
        mid = MemoryId._of(record.id)
        mid.receipt, mid.also = receipt, tuple(also)
        return mid

    async def remember_many(
        self, entries: Sequence[str | bytes | Mapping[str, Any]]
    ) -> list[MemoryId]:
        """Remember several items in one batch. Every entry is checked before anything is
        written, so one bad entry writes nothing.

        Each entry is a body, or a mapping with ``body`` and any of remember's options.
        New ids of one batch share its millisecond (their order within it is random).

        >>> await memory.remember_many(["a", {"body": "b", "kind": "summary"}])  # doctest: +SKIP
        """
        self._check_publish()
        if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
            raise InvalidInput("remember_many takes a list of bodies or of mappings with 'body'")
        # One system call for the random part of every new id in the batch, and one
        # clock read for their time part (ids order by millisecond, then at random).
        randomness = os.urandom(10 * len(entries))
        millis = (self._laser.clock.now_ms() % (1 << 48)).to_bytes(6, "big")
        records = self._remembers.batch(
            entries, [millis + randomness[at : at + 10] for at in range(0, len(randomness), 10)]
        )
        with self._laser._write_under_way():  # one write: its embedding, then its append
            embedded = await self._remembers.embedded(records)
            receipts = await self._write([*embedded, *self._remembers.replacements(embedded)])
        also = iter(receipts[len(records) :])
        ids = []
        make = object.__new__
        for record, receipt in zip(embedded, receipts, strict=False):
            # `MemoryId._of` written out, with its receipt: a tenth of a batch's own time.
            mid = make(MemoryId)
            mid._bytes, mid.receipt = record.id, receipt
            mid.also = () if record.supersedes is None else (next(also),)
            ids.append(mid)
        return ids

    async def append(
        self,
        id: MemoryId | str | bytes,
        body: str | bytes,
        *,
        kind: str | MemoryKind,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        durable: bool = False,
        origin: Any = None,
        producer: Any = None,
        embedding: Sequence[float] | None = None,
        expires_at: datetime.datetime | None = None,
        ttl: datetime.timedelta | float | None = None,
        supersedes: MemoryId | str | bytes | None = None,
    ) -> MemoryId:
        """Typed append: remember a body under an id and kind that you supply.

        >>> mid = memory_id_content("entity", b"node-7", agent="planner")   # doctest: +SKIP
        >>> await memory.append(mid, b"node-7", kind="entity", agent="planner")  # doctest: +SKIP
        """
        self._check_publish()
        mid = MemoryId.parse(id)
        record = self._remembers.record(
            {
                "body": body,
                "kind": kind,
                "conversation": conversation,
                "agent": agent,
                "user": user,
                "application": application,
                "tenant": tenant,
                "durable": durable,
                "origin": origin,
                "producer": producer,
                "embedding": embedding,
                "expires_at": expires_at,
                "ttl": ttl,
                "supersedes": supersedes,
            },
            memory_id=mid,
        )
        with self._laser._write_under_way():  # one write: its embedding, then its append
            [record] = await self._remembers.embedded([record])
            replacing = [record, *self._remembers.replacements([record])]
            [mid.receipt, *also] = await self._write(replacing)
        mid.also = tuple(also)
        return mid

    async def improve(
        self,
        target: MemoryId | str | bytes,
        weight: float,
        *,
        conversation: str | None = None,
        tenant: str | None = None,
    ) -> Receipt:
        """Add a feedback weight to an item. With a conversation (always, on a scoped
        handle) it applies only to the item as remembered in that conversation.

        >>> await memory.improve(mid, 2.0)   # ranks higher in auto recall  # doctest: +SKIP
        """
        self._check_publish()
        target_id = MemoryId.parse(target)
        value = inputs.weight(weight)
        scope = self._scope(conversation=conversation, tenant=tenant)
        return await self._write_one(
            Feedback(ns=self.namespace, scope=scope, target=target_id.bytes, weight=value)
        )

    async def forget(
        self,
        id: MemoryId | str | bytes,
        *,
        conversation: str | None = None,
        tenant: str | None = None,
    ) -> Receipt:
        """Write a tombstone for an item. With a conversation (always, on a scoped
        handle) it forgets only the item as remembered in that conversation.

        It forgets every remember of the id already in the log, and no later one: the
        record carries the topic's end offsets, read just before it is written, so the
        rule never depends on clocks (see ``folders/state.py``).

        >>> await memory.forget(mid)                                  # doctest: +SKIP
        """
        self._check_publish()
        target_id = MemoryId.parse(id)
        scope = self._scope(conversation=conversation, tenant=tenant)
        # What the log holds now is what this forget forgets: the fold compares offsets
        # with these, never clocks (see folders/state.py).
        info = await self._topic_info()
        if info is None:
            seen: tuple[int, ...] = ()
        else:
            seen = await self._seen_now(info.partitions)
        return await self._write_one(
            Forget(ns=self.namespace, scope=scope, target=target_id.bytes, seen=seen)
        )

    async def purge(self, older_than: Age, *, tenant: str | None = None, limit: int = 1000) -> int:
        """Forget the items last written before a cutoff, oldest first, at most
        ``limit`` (1 to 10,000) of them; returns how many. Call again while it returns
        ``limit``. ``older_than`` is an age (a `timedelta`, or seconds, counted back
        from the connection's clock) or a moment (a `datetime`). An item's last write is
        its latest record: feedback keeps it. On a scoped handle, only items of that
        conversation, and only there. See `laser_memory.retention`.

        >>> await memory.purge(timedelta(days=90))                    # doctest: +SKIP
        1000
        """
        return await retention.purge(self, older_than, tenant=tenant, limit=limit)

    async def forget_expired(self, *, tenant: str | None = None, limit: int = 1000) -> int:
        """Write the forgets of items whose remembers expired (``expires_at`` or
        ``ttl``), oldest expiry first, at most ``limit`` (1 to 10,000) items; returns
        how many. Call again while it returns ``limit``. Reads leave expired items out
        already; this makes it lasting, in the log, so history shows when. Each forget
        ends exactly the records this process had folded, so a remember written since
        (a renewal) stays. On a scoped handle, only that conversation.

        >>> await memory.remember("door code 4471", ttl=3600)        # doctest: +SKIP
        >>> await memory.forget_expired()                              # doctest: +SKIP
        0
        """
        return await retention.forget_expired(self, tenant=tenant, limit=limit)

    async def consolidate(
        self,
        max_items: int,
        *,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        summarizer: Any = None,
        prune_summarized: bool = False,
    ) -> ConsolidationReport:
        """One consolidation pass over a scope (see `laser_memory.consolidation`): keep
        the newest ``max_items`` of its newest 10,000 items and forget the rest; with a
        ``summarizer`` (a callable ``(bodies) -> body`` or an object with
        ``summarize(bodies)``, sync or async), first remember one durable ``summary``
        per conversation of the window's messages, and with ``prune_summarized``
        forget those messages too. One batch, written once every summary is made.

        >>> report = await memory.consolidate(100, conversation="c-1")  # doctest: +SKIP
        """
        return await consolidation.consolidate(
            self,
            max_items,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            tenant=tenant,
            summarizer=summarizer,
            prune_summarized=prune_summarized,
        )

    async def set(
        self, key: str, body: str | bytes | dict | list, *, tenant: str | None = None
    ) -> Receipt:
        """Set a named item to a body (objects and lists are stored as JSON).

        >>> await memory.set("profile", {"name": "Ada"})                # doctest: +SKIP
        >>> (await memory.fetch("profile")).json()                      # doctest: +SKIP
        {'name': 'Ada'}
        """
        self._check_publish()
        data = self._check_body(encode_body(body))
        return await self._write_one(
            NamedSet(
                ns=self.namespace,
                scope=self._scope(tenant=tenant),
                key=validate_key(key),
                body=data,
            )
        )

    async def update(
        self, key: str, patch: str | bytes | dict, *, tenant: str | None = None
    ) -> Receipt:
        """Apply an RFC 7386 JSON merge patch to a named item: fields overwrite, ``null``
        removes. The patch itself is the record, so concurrent updates all apply in
        log order.

        >>> await memory.update("profile", {"channel": "email", "name": None})  # doctest: +SKIP
        """
        self._check_publish()
        key = validate_key(key)
        data = self._check_body(encode_patch(patch))
        record = NamedPatch(
            ns=self.namespace, scope=self._scope(tenant=tenant), key=key, patch=data
        )
        # The merged body must fit too: fold the key's partition (this handle's fold is
        # incremental) and try the patch on the current value before writing it.
        current = await self._fetch_folded(key, record.scope.tenant)
        merged = apply_patch_bytes(current.body if current is not None else None, data)
        if len(merged) > self._laser.config.max_body_bytes:
            raise BodyTooLarge(
                f"after this patch the named item would be {len(merged)} bytes, over the "
                f"{self._laser.config.max_body_bytes}-byte maximum; remove fields, or set a "
                "smaller value with set()"
            )
        return await self._write_one(record)

    async def remove(
        self, key: str, *, tenant: str | None = None, if_version: int | None = None
    ) -> Receipt:
        """Remove a named item; removing an absent key succeeds. With ``if_version=n``
        the remove applies only if the item is still at version ``n`` when it is
        folded: a remove decided on what was read never undoes a newer write.

        >>> item = await memory.fetch("draft")                              # doctest: +SKIP
        >>> await memory.remove("draft", if_version=item.version)           # doctest: +SKIP
        """
        self._check_publish()
        if if_version is not None:
            # Up to what the fold takes: a larger one was written, then set aside.
            validate_version(if_version, "if_version")
        return await self._write_one(
            NamedRemove(
                ns=self.namespace,
                scope=self._scope(tenant=tenant),
                key=validate_key(key),
                if_version=if_version,
            )
        )

    # -- reads -------------------------------------------------------------------

    async def fetch_folded(self, key: str, *, tenant: str | None = None) -> NamedItem | None:
        """A named item's current value, folded from the topic in this process
        (reading only the key's partition), or None if it is absent.

        >>> item = await memory.fetch_folded("profile")                 # doctest: +SKIP
        """
        key = validate_key(key)
        tenant = self._tenant(tenant)
        self._check_read()
        return await self._fetch_folded(key, tenant)

    async def _fetch_folded(self, key: str, tenant: str) -> NamedItem | None:
        info = await self._topic_info()
        if info is None:
            return None
        partition = self._reader.partition_for_key(key, info.partitions)
        state = await self._reader.catch_up([partition])
        return state.named_item(key, tenant=tenant)

    async def fetch(
        self,
        key: str,
        *,
        tenant: str | None = None,
        version: int | None = None,
        folded: bool | None = None,
        after: Receipt | MemoryId | None = None,
        timeout: float = 10.0,
    ) -> NamedItem | None:
        """A named item's value, or None if absent. Reads the managed view when the
        connection has one (``folded=False``, the default then), else folds the topic
        like `fetch_folded`. ``version=n`` returns the value after its n-th write (view
        only); ``after=receipt`` first waits until the view has folded that write.

        >>> receipt = await memory.update("profile", {"channel": "email"})   # doctest: +SKIP
        >>> await memory.fetch("profile", after=receipt)                      # doctest: +SKIP
        """
        key = validate_key(key)
        tenant = self._tenant(tenant)
        self._check_read()
        if version is not None:
            validate_version(version, "version")
        inputs.wait_target(self.topic, after, timeout)
        if not self._managed(folded):
            if version is not None:
                raise NoView("fetch(version=) reads the managed view; connect with view=PATH")
            return await self.fetch_folded(key, tenant=tenant)
        view = await self._laser.view_after(self.topic, after, timeout)
        if view is None:
            return None
        return view.fetch(self.namespace, key, tenant=tenant, version=version)

    async def named(
        self,
        prefix: str = "",
        *,
        tenant: str | None = None,
        limit: int | None = None,
        folded: bool | None = None,
        after: Receipt | MemoryId | None = None,
        timeout: float = 10.0,
    ) -> list[NamedItem]:
        """Every present named item of the namespace whose key starts with ``prefix``
        (the first ``limit`` when given), ordered by key, from the managed view when there
        is one (``after=receipt`` waits for a write), else folded from every partition of
        the topic. Without a limit it reads all the namespace's named items: meant for
        hundreds of thousands, not billions; the view reads keys in order only until a
        limit is met.

        >>> [item.key for item in await memory.named("user:", limit=2)]   # doctest: +SKIP
        ['user:1', 'user:2']
        """
        inputs.listing(prefix, limit)
        tenant = self._tenant(tenant)
        self._check_read()
        inputs.wait_target(self.topic, after, timeout)
        if self._managed(folded):
            view = await self._laser.view_after(self.topic, after, timeout)
            if view is None:
                return []
            return view.named_items(self.namespace, tenant=tenant, prefix=prefix, limit=limit)
        if await self._topic_info() is None:
            return []
        state = await self._reader.catch_up(None)
        items = state.named_items(tenant=tenant, prefix=prefix)
        return items if limit is None else items[:limit]

    async def _read_token(self, folded: bool | None = None, timeout: float = 10.0) -> tuple:
        """What a read of this handle would see now, as a value to compare: while it
        stays equal, no record was folded (by the managed view, or by this handle's
        fold), so a read gives what it gave. A caller that keeps what a read gave
        takes the token first, then reads: the read may be newer than its token,
        never older. (`LaserStore` keeps its listings so.)"""
        self._check_read()
        if self._managed(folded):
            view = await self._laser.view_after(self.topic, None, timeout)
            if view is None:
                return ("no view",)
            return ("view", view.path, id(view), view.topic(), sorted(view.watermark().items()))
        if await self._topic_info() is None:
            return ("no topic",)
        state = await self._reader.catch_up(None)
        return ("fold", id(state), state.generation, sorted(self._reader.positions.items()))

    async def history(
        self, target: MemoryId | str, *, tenant: str | None = None, folded: bool | None = None
    ) -> list[HistoryEntry]:
        """Every record that touched an item (a `MemoryId`: remember, feedback, forget)
        or a named item (a key: set, patch, remove), oldest first, with positions,
        append times and the version after each. An item's history follows its chain
        of replacements both ways (``supersedes``): each entry's ``item`` names its
        item. From the managed view when there is one, else by replaying the log.

        >>> [e.op for e in await memory.history(mid)]                   # doctest: +SKIP
        ['remember', 'feedback', 'forget']
        """
        tenant = self._tenant(tenant)
        self._check_read()
        if isinstance(target, MemoryId):
            raw_id: bytes | None = target.bytes
        else:
            target = validate_key(target)
            raw_id = None
        if self._managed(folded):
            view = await self._laser.view_after(self.topic, None, 0)
            if view is None:
                return []
            if raw_id is not None:
                return chain_history(
                    raw_id, lambda one: view.item_history(self.namespace, one, tenant=tenant)
                )
            return view.named_history(self.namespace, target, tenant=tenant)
        if await self._topic_info() is None:
            return []
        # Holds the item's records (its chain's), not every record of the tenant.
        return await history_from_log(
            self._laser.log, self.topic, self.namespace, target, tenant=tenant
        )

    async def replay(
        self,
        *,
        since: datetime.datetime | int | float | None = None,
        until: datetime.datetime | int | float | None = None,
        tenant: str | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LoggedRecord]:
        """This namespace's records of one tenant (the handle's), from the log, in order
        (append time, partition, offset), each with its decoded record: what an auditor
        acting for a tenant reads, with this handle's read grant and no access to the log
        itself. ``since`` and ``until`` (a datetime, seconds as a float, milliseconds as
        an int; both included) keep the records appended between them, ``since`` read
        from where the log's time index puts it. ``follow=True`` goes on with what is
        appended, until you stop iterating. It holds a batch a partition, never the
        whole replay (see `folders.replay.replay_stream`). A handle scoped to a
        conversation replays the whole namespace too: records such as a replacement's
        name no conversation.

        >>> async for logged in memory.replay(since=datetime(2026, 5, 1, tzinfo=UTC)):
        ...     print(logged.log_record.append_time_ms, logged.record)     # doctest: +SKIP
        """
        tenant = self._tenant(tenant)
        self._check_read()
        since_ms = None if since is None else to_millis(since)
        until_ms = None if until is None else to_millis(until)
        async for logged in replay_stream(
            self._laser.log,
            self.topic,
            namespace=self.namespace,
            tenant=tenant,
            since_ms=since_ms,
            until_ms=until_ms,
            follow=follow,
        ):
            yield logged

    async def as_of(self, at: AsOf | MemoryId) -> MemorySnapshot:
        """This namespace's memory as it stood at a past moment. ``at`` is a write's
        receipt (or the `MemoryId` a remember returned): just after that write, exact in
        its partition; or positions (partition -> first offset not included): exactly
        those records; or a datetime, seconds since the epoch (float) or milliseconds
        (int): records appended at or before it (two records in one millisecond are told
        apart only by a receipt or positions). The snapshot's `recall` and `fetch`
        answer what an agent could have known then; its `recall` ranks as this handle's
        folded recall does, by meaning too with this handle's embedder.

        >>> mid = await memory.remember("node-9 rotates keys monthly")   # doctest: +SKIP
        >>> await (await memory.as_of(mid)).recall(text="key rotation")  # doctest: +SKIP
        """
        self._check_read()
        if isinstance(at, MemoryId):
            if at.receipt is None:
                raise InvalidInput(
                    f"as_of takes the MemoryId a remember returned, with a receipt; {at} has "
                    "none (an id parsed or recalled): give a recalled item's append_time_ms, "
                    "or a write's receipt"
                )
            at = (at.receipt, *at.also) if at.also else at.receipt
        try:
            return await snapshot(
                self._laser.log,
                self.topic,
                self.namespace,
                at,
                tenant=self.tenant,
                embedder=self._embedder,
            )
        except UnknownTopic:
            if await self._topic_info() is not None:
                raise
            raise UnknownTopic(
                f"topic {shown(self.topic)} does not exist: there is no past to read"
            ) from None

    def _managed(self, folded: bool | None) -> bool:
        if folded is not None and not isinstance(folded, bool):
            raise InvalidInput(f"folded is True, False or None, got a {type(folded).__name__}")
        if folded is None:
            return self._laser.view_path is not None
        return not folded

    @overload
    async def recall(
        self,
        *,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        kind: str | MemoryKind | None = None,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        folded: bool | None = None,
        after: Receipt | MemoryId | None = None,
        timeout: float = 10.0,
        block: Literal[False] = False,
        token_budget: int | None = None,
        min_similarity: float | None = None,
        exclude: Sequence[MemoryId | str | bytes] | Set[MemoryId | str | bytes] = (),
        exact: bool = False,
        include_superseded: bool = False,
    ) -> list[MemoryItem]: ...

    @overload
    async def recall(
        self,
        *,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        kind: str | MemoryKind | None = None,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        folded: bool | None = None,
        after: Receipt | MemoryId | None = None,
        timeout: float = 10.0,
        block: Literal[True],
        token_budget: int | None = None,
        min_similarity: float | None = None,
        exclude: Sequence[MemoryId | str | bytes] | Set[MemoryId | str | bytes] = (),
        exact: bool = False,
        include_superseded: bool = False,
    ) -> str: ...

    async def recall(
        self,
        *,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        kind: str | MemoryKind | None = None,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        folded: bool | None = None,
        after: Receipt | MemoryId | None = None,
        timeout: float = 10.0,
        block: bool = False,
        token_budget: int | None = None,
        min_similarity: float | None = None,
        exclude: Sequence[MemoryId | str | bytes] | Set[MemoryId | str | bytes] = (),
        exact: bool = False,
        include_superseded: bool = False,
    ) -> list[MemoryItem] | str:
        """Recall items in scope. Every field you set narrows; a field you leave out
        widens, except ``tenant``, which always applies exactly (unset: the handle's
        bound tenant, or ``""`` on an unbound handle).

        Reads the managed view when the connection has one (``folded=False``, the
        default then), else folds the topic in this process (``folded=True``). Order
        and signals are the same either way. A fresh write takes a moment to reach the
        view: ``after=receipt`` waits (up to ``timeout`` seconds) until it has.
        With ``block=True`` returns the items formatted by `to_context_block`.

        ``strategy="semantic"`` with text ranks by the cosine similarity of the handle's
        embedder's vectors (``min_similarity`` drops weaker matches), comparing only
        vectors of that embedder, over every item the filters allow; without an
        embedder it keeps items sharing a word, like ``keyword``. ``exclude`` ids are
        never returned. Over a very large candidate set (`MemoryConfig.approximate`)
        a semantic recall scores only the vectors nearest the query and may miss a few
        of the exact best; ``exact=True`` scores them all. ``include_superseded=True``
        shows items a later remember replaced (``supersedes``), for an audit.

        >>> items = await memory.recall(conversation="c-1", strategy="recent", limit=5)
        ... # doctest: +SKIP
        """
        tenant = self._tenant(tenant)
        self._check_read()
        strategy = validate_strategy(strategy)
        validate_limit(limit)
        text = query_text(text)
        validate_min_similarity(min_similarity, strategy)
        if not isinstance(exact, bool):
            raise InvalidInput(f"exact is True or False, got {shown(exact)}")
        # Checked whichever path the read takes (a folded one never waits, and only a
        # block is budgeted): a wrong one is refused, never ignored.
        validate_block(block, token_budget)
        inputs.wait_target(self.topic, after, timeout)
        if not isinstance(include_superseded, bool):
            raise InvalidInput(
                f"include_superseded is True or False, got {shown(include_superseded)}"
            )
        if isinstance(exclude, str | bytes) or not isinstance(exclude, Sequence | Set):
            raise InvalidInput("exclude is a list or set of memory ids")
        excluded = frozenset(MemoryId.parse(item).bytes for item in exclude)
        conversation = self._conversation(conversation)
        where = self._where(
            tenant, conversation, agent, user, application, kind, include_superseded
        )
        # Embed the query only once every argument has been checked.
        vector = await query_vector(self._embedder, strategy, text)
        label = self._embedder.label if self._embedder is not None else None
        where = where.read_by(label, strategy, text, vector)
        ranking = {
            "query_vector": vector,
            "embedder": label,
            "min_similarity": min_similarity,
            "exclude": excluded,
        }
        approximate = None if exact else self._laser.config.approximate
        if self._managed(folded):
            view = await self._laser.view_after(self.topic, after, timeout)
            if view is not None and search_mode(strategy, text, vector) is not None:
                # A large index no process has built yet is built by a child process:
                # waited for here, so the event loop runs on meanwhile.
                await view.build_index_apart(self.namespace, where, approximate)
            items = (
                []
                if view is None
                else view.recall(
                    self.namespace,
                    where,
                    strategy=strategy,
                    text=text,
                    limit=limit,
                    approximate=approximate,
                    **ranking,
                )
            )
        elif (info := await self._topic_info()) is None:
            items = []
        else:
            partitions = (
                self._reader.partitions_for_conversation(conversation, info.partitions)
                if conversation is not None
                else None
            )
            state = await self._reader.catch_up(partitions)
            items = state.recall(
                where,
                strategy=strategy,
                text=text,
                limit=limit,
                approximate=approximate,
                **ranking,
            )
        if block:
            return to_context_block(items, token_budget)
        return items

    async def prepare_search(
        self,
        *,
        conversation: str | None = None,
        tenant: str | None = None,
        include_superseded: bool = False,
    ) -> PreparedSearch:
        """Make ready the managed view's search index that this handle's text recalls
        with these filters read, and save its snapshot beside the view, so that neither
        this process's first text recall nor the next process's builds it (at a million
        items a build takes about a minute; loading the snapshot, under a second). Run
        it when a reading service starts (``laser-memory rebuild`` remakes the snapshots
        readers had saved). The agent, user,
        application and kind filters of a recall share their index with a recall
        without them, so they need no index of their own. Indexes smaller than
        `MemoryConfig.index_snapshots_from` are made but not saved (each process builds
        them in milliseconds); `PreparedSearch.reason` says why none was saved.

        >>> prepared = await memory.prepare_search()  # doctest: +SKIP
        >>> prepared.entries, prepared.snapshot  # doctest: +SKIP
        (120000, '/srv/view/search/3f...idx')
        """
        tenant = self._tenant(tenant)
        self._check_read()
        conversation = self._conversation(conversation)
        if not isinstance(include_superseded, bool):
            raise InvalidInput(
                f"include_superseded is True or False, got {shown(include_superseded)}"
            )
        if self._laser.view_path is None:
            raise NoView(
                "prepare_search makes a managed view's search index ready, and this handle "
                "reads no view: connect with view=PATH (the folder's --view)"
            )
        where = self._where(tenant, conversation, None, None, None, None, include_superseded)
        if self._embedder is not None:
            # As a text recall of this handle reads (see `recall`).
            where = msgspec.structs.replace(where, embedder=self._embedder.label)
        view = await self._laser.view_after(self.topic, None, 0.0)
        if view is None:
            return PreparedSearch(
                namespace=self.namespace,
                tenant=tenant,
                conversation=conversation,
                embedder=where.embedder,
                entries=0,
                changes=0,
                snapshot=None,
                reason="the view has folded nothing yet: start its folder ('laser-memory fold')",
            )
        approximate = self._laser.config.approximate
        await view.build_index_apart(self.namespace, where, approximate)
        # On a thread: a build below the child's size still takes seconds.
        return await asyncio.to_thread(view.prepare_index, self.namespace, where, approximate)

    async def context(
        self,
        conversation: str | None = None,
        *,
        token_budget: int | None = None,
        limit: int = 50,
        tenant: str | None = None,
    ) -> str:
        """Recall a conversation's items and format them as one prompt block.

        >>> prompt = await memory.context("support-42", token_budget=500)  # doctest: +SKIP
        """
        return await self.recall(
            conversation=conversation,
            tenant=tenant,
            limit=limit,
            block=True,
            token_budget=token_budget,
        )

    @property
    def set_aside(self) -> list:
        """Records this handle's fold could not read, with their positions and reasons: on
        a handle bound to a tenant, only those of that tenant (and notes of records missing
        from the log), since a reason quotes what the record holds."""
        state = self._reader._state
        return state.set_aside_for(self.tenant) if state is not None else []

    # -- internals ---------------------------------------------------------------

    def _conversation(self, conversation: str | None) -> str | None:
        if conversation is not None:
            conversation = validate_name(conversation, "conversation")
        if self.conversation is None:
            return conversation
        if conversation is not None and conversation != self.conversation:
            raise InvalidInput(
                f"this handle is scoped to conversation {shown(self.conversation)}; it cannot act "
                f"on conversation {shown(conversation)}"
            )
        return self.conversation

    def _where(
        self,
        tenant: str,
        conversation: str | None,
        agent: str | None,
        user: str | None,
        application: str | None,
        kind: str | MemoryKind | None = None,
        include_superseded: bool = False,
    ) -> ItemFilter:
        """What a read of this handle may see, now (expired remembers left out)."""
        return ItemFilter.build(
            tenant=tenant,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            kind=kind,
            now_ms=self._laser.clock.now_ms(),
            include_superseded=include_superseded,
        )

    def _tenant(self, tenant: str | None) -> str:
        return resolve_tenant(self.tenant, tenant)

    def _check_read(self) -> None:
        if self.principal is not None:
            self.principal.check_read(self.namespace)

    def _check_publish(self) -> None:
        if self.principal is not None:
            self.principal.check_publish(self.topic)

    def _scope(
        self, *, conversation: str | None = None, tenant: str | None = None, **owner: Any
    ) -> MemoryScope:
        try:
            return MemoryScope(
                stream=self.stream,
                # Checked as the scope is (`validated`), when the handle is bound to none:
                # checked here too, a tenant or conversation per item paid twice at each
                # new scope.
                tenant=(
                    tenant if self.tenant is None and tenant is not None else self._tenant(tenant)
                ),
                conversation=(
                    conversation if self.conversation is None else self._conversation(conversation)
                ),
                **owner,
            ).validated()
        except TypeError as exc:
            raise InvalidInput(f"bad scope: {exc}") from None

    def _check_body(self, data: bytes) -> bytes:
        return inputs.check_body(data, self._laser.config.max_body_bytes)

    async def _seen_now(self, partitions: int) -> tuple[int, ...]:
        """The topic's end offsets, partition by partition: what a forget written now
        forgets (the fold compares offsets with these, never clocks)."""
        ends = await self._laser.log.end_offsets(self.topic)
        return tuple(ends.get(p, 0) for p in range(partitions))

    def _folded(self, partitions: int) -> tuple[int, ...]:
        """What this handle's fold has read, partition by partition: the ``seen`` of a
        forget decided on that fold (written with ``only_seen``), which so ends exactly
        what the decision saw; a renewal written since, in any partition, stays."""
        folded = self._reader.positions
        return tuple(folded.get(p, 0) for p in range(partitions))

    async def _topic_info(self):
        """The topic's shape, or None if it does not exist. Reads never create a topic:
        the embedded log creates a missing memory topic on the first write only."""
        try:
            return await self._reader.topic_info()
        except UnknownTopic:
            return None

    async def _write_one(self, record: MemoryRecord) -> Receipt:
        [receipt] = await self._write([record])
        return receipt

    async def _write(self, records: Sequence[MemoryRecord]) -> list[Receipt]:
        """Send ``records`` (see `RecordWriter`), keeping the last receipt."""
        receipts = await self._writer.write(records)
        if receipts:
            self.last_receipt = receipts[-1]
        return receipts
