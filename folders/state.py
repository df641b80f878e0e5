"""The fold: memory records in, memory state out.

This module is the one place that says what a sequence of records means. The
in-process folder keeps `ItemState` and `NamedState` values in dicts, the
managed view keeps the very same values in LMDB, and the tests compare both
with a plain reference model.

The rules, chosen so that the state does not depend on the order in which a
reader happens to visit partitions (only the order inside a partition is
fixed by the log):

- Records are ordered by their position key ``(append_time_ms, partition,
  offset)``: the broker append time, ties broken by the source position.
- An item is keyed by (namespace, tenant, id). A tombstone or feedback from
  another tenant never touches it.
- For each conversation an item was remembered in (``None`` for none) the
  state keeps the latest remember (they share one partition, so "latest" is by
  offset). That remember is *live* unless a forget naming the same
  conversation, or naming none, was written after it. "After" never depends on
  a clock: a forget carries ``seen``, the end offset of every partition when
  its writer wrote it, and forgets exactly the remembers below those offsets,
  plus, in its own partition, those before it. A remember appended later, even
  with an earlier append time (a clock stepped back, brokers whose clocks
  disagree), is not forgotten: remembering an id again after a forget brings it
  back. Forgets of each conversation fold into one horizon (per partition, the
  highest such offset), an order-free maximum. Forgets written before ``seen``
  existed fall back to append times: across partitions, a forget in the same
  millisecond as a remember or later counts as after it.
- An item is visible to a read when a live remember matches the read's
  filters; the latest such remember gives its body, scope, lineage and source.
  Remembering an id again after a forget brings it back.
- Feedback without a conversation applies to the item in every conversation;
  feedback naming a conversation applies only where the item was remembered in
  that conversation. An item's weight sums the feedback that applies to the
  live remembers a read sees.
- An embedded record gives the item a vector of another model for the bodies
  with its digest, in its conversation (or any, without one); the latest by
  position key wins. A read asking for that model's vectors gets it where the
  remember's own vector is of another model.
- An item's version counts the records that targeted it (remember, feedback,
  forget, embedded) that the reader has folded; its last position is that of the latest
  of them by position key.
- A named item's writes share one partition, so they apply in offset order:
  set replaces the body, a patch merges into it (RFC 7386), remove clears it.
  Every write counts one version.
- A record that cannot be decoded, or that no writer of this version could
  have sent (names a record cannot hold, a non-finite or oversized weight, a
  patch that is not a JSON object, a named body that would outgrow
  `MAX_NAMED_BODY_BYTES` or nest too deep), is set aside with its position
  and the reason, whatever it raises; the fold goes on. Every fold path
  (folded recall, the managed view, ``as_of``, replay) follows this rule.
- Records a fold never saw are noted the same way (`missing_records`): when a
  partition it had read up to some offset goes on at a later one, the records
  between were gone from the log by the time it got there (the topic's
  retention deleted them while the fold was behind). The fold of folded recall
  and the managed view note it; a fold from a partition's start does not, since
  what retention took before it began is no part of what it folds.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import msgspec
import numpy as np

from laser_memory.embedding import is_label
from laser_memory.errors import InvalidBody, LaserError, RecordDecodeError, printable, shown
from laser_memory.ids import MemoryId, validate_name
from laser_memory.items import HistoryEntry, MemoryItem, NamedItem, Source
from laser_memory.kinds import MemoryKind, parse_kind
from laser_memory.log.naming import MAX_PARTITIONS
from laser_memory.log.port import UNREADABLE_HEADER, LogRecord, Position
from laser_memory.named import MAX_VERSION, apply_patch_bytes
from laser_memory.recall import rank, search_mode, with_ranking
from laser_memory.records import (
    MAX_DIMENSIONS,
    MAX_NAMED_PATHS,
    MAX_NAMED_VECTOR_BYTES,
    MAX_WEIGHT,
    NAMED_RECORDS,
    Embedded,
    Feedback,
    Forget,
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
    Retrieved,
    Superseded,
    body_digest,
    decode_record,
    header_value,
    plain_tenant_header,
    read_headers,
)
from laser_memory.scope import MemoryScope
from laser_memory.search_index import CACHE_BYTES, Owner, SearchIndex
from laser_memory.vector_clusters import ApproximateSearch

from .heap import give_back_after_search

__all__ = [
    "MAX_NAMED_BODY_BYTES",
    "MAX_SEARCH_INDEXES",
    "MAX_WEIGHT",
    "ItemFilter",
    "ItemState",
    "MemoryState",
    "NamedState",
    "SetAside",
    "SortKey",
    "apply_named",
    "checked_for_fold",
    "decode_for_fold",
    "history_entry",
    "kept",
    "named_unchanged",
    "remembered_entry",
    "sort_key",
    "source_of",
]

#: How many reads' search indexes a fold (or a view's reader) keeps at most.
MAX_SEARCH_INDEXES = 64
#: The largest body a named item may reach through patches; a patch past it is set aside.
MAX_NAMED_BODY_BYTES = 4 << 20

SortKey = tuple[int, int, int]
_MAX_EMBEDDING_BYTES = 4 * MAX_DIMENSIONS  # float32 values
_NO_CONVERSATION = ""  # conversation names are never empty, so "" stands for "none"


def sort_key(record: LogRecord) -> SortKey:
    return (record.append_time_ms, record.partition, record.offset)


def _conv(conversation: str | None) -> str:
    return _NO_CONVERSATION if conversation is None else conversation


class SetAside(msgspec.Struct, frozen=True):
    """A record the fold could not use, where it is, and why."""

    position: Position
    append_time_ms: int
    reason: str


def missing_records(batch: Sequence[LogRecord], next_offsets: Mapping[int, int]) -> list[SetAside]:
    """The notes for the records a fold reading ``batch`` never saw: for each record
    that comes after an offset the fold expected next (``next_offsets``: partition ->
    the offset after the last it read; absent or 0 when it read none of that partition
    yet), one `SetAside` at the first missing offset, with the found record's append
    time. A log's batch is one partition's records in offset order, mostly without a
    jump: that case costs two comparisons."""
    first, last = batch[0], batch[-1]
    if first.partition == last.partition and last.offset - first.offset + 1 == len(batch):
        expected = next_offsets.get(first.partition, 0)
        return [_missing(first, expected)] if 0 < expected < first.offset else []
    notes = []
    ahead = dict(next_offsets)
    for record in batch:
        expected = ahead.get(record.partition, 0)
        if 0 < expected < record.offset:
            notes.append(_missing(record, expected))
        ahead[record.partition] = record.offset + 1
    return notes


def _missing(found: LogRecord, expected: int) -> SetAside:
    return SetAside(
        Position(found.topic, found.partition, expected),
        found.append_time_ms,
        f"offsets {expected} to {found.offset - 1} of partition {found.partition} were gone "
        "from the log when the fold reached them (the topic's retention deleted them while "
        "the fold was behind): what they held is not in this fold, so an item whose later "
        "feedback or forget went with them shows as it stood before. Rebuild the view "
        "('laser-memory rebuild'; a new handle for folded recall) to fold only what the log "
        "holds now",
    )


class ItemFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a read may see. Every field set narrows; the tenant always applies exactly."""

    tenant: str = ""
    conversation: str | None = None
    agent: str | None = None
    user: str | None = None
    application: str | None = None
    kind: MemoryKind | None = None
    #: Whose vectors the read wants (an embedder label): an item then shows a vector of
    #: that model from an embedded record where its own is another model's.
    embedder: str | None = None
    #: The read's moment, in milliseconds since the epoch: remembers that expired by then
    #: are left out. None: expiry is not applied (the fold, history).
    now_ms: int | None = None
    #: Whether items a later remember replaced are seen too (an audit's read).
    superseded: bool = False

    def matches(self, record: Remember) -> bool:
        scope = record.scope
        return (
            (self.agent is None or scope.agent == self.agent)
            and (self.user is None or scope.user == self.user)
            and (self.application is None or scope.application == self.application)
            and (self.kind is None or record.kind == self.kind.code)
        )

    @classmethod
    def build(
        cls,
        *,
        tenant: str = "",
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        kind: str | MemoryKind | None = None,
        now_ms: int | None = None,
        include_superseded: bool = False,
    ) -> ItemFilter:
        """A filter from a caller's arguments; raises `InvalidName` or `UnknownKind`."""

        def optional(value: str | None, what: str) -> str | None:
            return None if value is None else validate_name(value, what)

        return cls(
            tenant=validate_name(tenant, "tenant", allow_empty=True),
            conversation=optional(conversation, "conversation"),
            agent=optional(agent, "agent"),
            user=optional(user, "user"),
            application=optional(application, "application"),
            kind=parse_kind(kind) if kind is not None else None,
            now_ms=now_ms,
            superseded=include_superseded,
        )

    @property
    def has_owner_filter(self) -> bool:
        return any(v is not None for v in (self.agent, self.user, self.application, self.kind))

    @property
    def owner(self) -> Owner | None:
        """The owner filters as a search index takes them (None: none set)."""
        if not self.has_owner_filter:
            return None
        kind = self.kind.code if self.kind is not None else None
        return (self.agent, self.user, self.application, kind)

    def read_by(
        self, embedder: str | None, strategy: str, text: str | None, vector: np.ndarray | None
    ) -> ItemFilter:
        """This read as a reader with ``embedder`` (its label) makes it: items show that
        model's vector, from an embedded record where their own is another model's. A
        keyword recall with text reads the same way, so it shares the search index of
        the reader's hybrid and semantic recalls (one index a namespace, not two)."""
        if embedder is None or (vector is None and not (strategy == "keyword" and text)):
            return self
        return msgspec.structs.replace(self, embedder=embedder)

    @property
    def of_index(self) -> ItemFilter:
        """The read a search index serves: this one without its owner filters, which
        the index applies itself."""
        if not self.has_owner_filter:
            return self
        return msgspec.structs.replace(self, agent=None, user=None, application=None, kind=None)


def index_entry(
    state: ItemState, raw_id: bytes, where: ItemFilter, topic: str, generation: str
) -> tuple:
    """(item, irregular) for `SearchIndex.put`: the item as the index's read sees it,
    and whether its live remembers have more than one owner."""
    item = state.visible(raw_id, where, topic, generation)
    return item, item is not None and state.irregular()


_KIND_CODES = frozenset(kind.code for kind in MemoryKind)


@functools.lru_cache(maxsize=1 << 12)
def _valid_namespace(namespace: str) -> None:
    # A fold meets the same few namespaces over and over; a refused one raises, and
    # raising is never cached.
    validate_name(namespace, "namespace")


def decode_for_fold(log_record: LogRecord) -> MemoryRecord:
    """Decode a record and check what the fold relies on; raises `LaserError`."""
    record = checked_for_fold(decode_record(log_record.value, log_record.headers))
    check_owner_headers(log_record.headers, record)
    return record


def check_owner_headers(headers: Sequence[tuple[str, bytes]], record: MemoryRecord) -> None:
    """Refuse (`RecordDecodeError`) a record whose namespace or tenant header names
    another than the record's own. Reads pass over records by these headers, unread (a
    fold in process those of other namespaces, a replay for one tenant those of others):
    folded as the record says, such a record would show in the managed view's recall
    and not in a folded one, or in a tenant's recall and not in its audit."""
    namespace, tenant, _ = read_headers(headers)
    if namespace is not None and namespace != record.ns:
        raise RecordDecodeError(
            f"its namespace header says {shown(namespace)}, but it is a record of namespace "
            f"{shown(record.ns)}: reads that pass over records by that header would miss it"
        )
    if tenant is not None and tenant != record.scope.tenant:
        # Neither tenant is named: the reason is listed to every tenant's fold.
        raise RecordDecodeError(
            "its tenant header names another tenant than the record's own: reads that pass "
            "over records by that header would miss it"
        )


def checked_for_fold(record: MemoryRecord) -> MemoryRecord:
    """A decoded record, after checking what the fold relies on; raises `LaserError`."""
    # Names become parts of view keys: refuse what a writer could never have sent.
    _valid_namespace(record.ns)
    record.scope.validated()
    kind = type(record)
    if kind is Remember:
        # The common record first, checked without isinstance: the fold's hot path.
        if len(record.id) != 16:
            MemoryId(record.id)  # raises InvalidId, saying why
        if record.kind not in _KIND_CODES:
            MemoryKind.from_code(record.kind)  # raises UnknownKind, saying why
        if record.embedding is not None and (
            not record.embedding
            or len(record.embedding) % 4
            or len(record.embedding) > _MAX_EMBEDDING_BYTES
        ):
            raise RecordDecodeError(
                f"remember.embedding must be 1 to {MAX_DIMENSIONS} float32 values"
            )
        if record.embedding is not None:
            _check_finite(record.embedding, "remember.embedding")
        if record.embedder is not None:
            _check_label(record.embedder, "remember.embedder")
        if record.expires_at is not None and not 0 <= record.expires_at < 1 << 63:
            raise RecordDecodeError("remember.expires_at must be from 0 to 2**63-1 milliseconds")
        if record.supersedes is not None and len(record.supersedes) != 16:
            MemoryId(record.supersedes)  # raises InvalidId, saying why
        return record
    if type(record) in NAMED_RECORDS:
        validate_name(record.key, "named item key")
        if kind is NamedSet:
            _check_named_index(record)
        elif kind is NamedRemove and record.if_version is not None:
            if not 1 <= record.if_version <= MAX_VERSION:
                raise RecordDecodeError("named.remove.if_version must be from 1 to 2**63-1")
    elif len(record.target) != 16:  # Feedback, Forget, Embedded
        MemoryId(record.target)  # raises InvalidId, saying why
    # Exact types, as for Remember above (isinstance against Struct types is slow).
    if kind is Embedded:
        _check_embedded(record)
    if kind is Superseded:
        if len(record.by) != 16:
            MemoryId(record.by)  # raises InvalidId, saying why
        if record.by == record.target:
            raise RecordDecodeError("an item cannot be superseded by itself")
    if (
        kind is Forget
        and record.seen is not None
        and (
            len(record.seen) > MAX_PARTITIONS or any(not 0 <= end < 1 << 63 for end in record.seen)
        )
    ):
        raise RecordDecodeError(
            f"forget.seen must list at most {MAX_PARTITIONS} offsets from 0 to 2**63-1"
        )
    if kind is Feedback and not (math.isfinite(record.weight) and abs(record.weight) <= MAX_WEIGHT):
        raise RecordDecodeError(
            f"feedback weight {shown(record.weight)} is not a finite number within ±{MAX_WEIGHT:g}"
        )
    return record


def _check_embedded(record: Embedded) -> None:
    if len(record.body_digest) != 16:
        raise RecordDecodeError("embedded.body_digest must be 16 bytes")
    if (
        not record.embedding
        or len(record.embedding) % 4
        or len(record.embedding) > _MAX_EMBEDDING_BYTES
    ):
        raise RecordDecodeError(f"embedded.embedding must be 1 to {MAX_DIMENSIONS} float32 values")
    _check_finite(record.embedding, "embedded.embedding")
    _check_label(record.embedder, "embedded.embedder")


def _check_finite(raw: bytes, what: str) -> None:
    """Refuse a vector holding NaN or an infinity: the API never writes one (it refuses
    them), and folded, such a vector scored ``nan`` against every query, which hybrid
    recall ranked first."""
    if not np.isfinite(np.frombuffer(raw, dtype="<f4")).all():
        raise RecordDecodeError(f"{what} holds a NaN or an infinite value")


def _check_named_index(record: NamedSet) -> None:
    if record.index is not None:
        if len(record.index) > MAX_NAMED_PATHS:
            raise RecordDecodeError(f"named.set.index lists over {MAX_NAMED_PATHS} paths")
        for path in record.index:
            validate_name(path, "named.set.index path")
    if record.vectors is not None:
        if len(record.vectors) % 4 or len(record.vectors) > MAX_NAMED_VECTOR_BYTES:
            raise RecordDecodeError(
                f"named.set.vectors must be float32 values, at most {MAX_NAMED_VECTOR_BYTES} bytes"
            )
        if record.embedder is None:
            raise RecordDecodeError("named.set.vectors came without the embedder's label")
        _check_finite(record.vectors, "named.set.vectors")
    if record.embedder is not None:
        _check_label(record.embedder, "named.set.embedder")


def _check_label(label: str, what: str) -> None:
    if not is_label(label):  # what the writers check: nothing they take is set aside here
        raise RecordDecodeError(f"{what} {shown(label[:80])} is no '<provider>/<model>'")


def _reason(exc: BaseException, log_record: LogRecord) -> str:
    """Why a record was set aside, for `SetAside.reason`: what the log said of a record
    it could not read back, else what decoding or checking it raised."""
    try:
        unreadable = header_value(log_record.headers, UNREADABLE_HEADER)
    except (TypeError, ValueError):  # headers that are no pairs: the error says so
        unreadable = None
    if type(unreadable) is bytes and not log_record.value:
        # Shown as a repr: any producer may send the header (on Kafka), and a reason is
        # printed to an operator's terminal.
        return (
            "the embedded log could not read this record back (its stored bytes are "
            f"damaged: {shown(unreadable.decode('utf-8', 'replace'))}); restore the log from "
            "a copy to read it"
        )
    message = str(exc) or type(exc).__name__
    if not isinstance(exc, LaserError):
        message = f"{type(exc).__name__}: {message}"
    return _printable(message)


#: The longest reason kept: a reason quotes what a producer wrote.
MAX_REASON_CHARS = 1000


def _printable(reason: str) -> str:
    """A reason as it may be printed: control characters escaped, at most
    `MAX_REASON_CHARS`. A decoder's message quotes what a record holds (msgspec names an
    unknown tag as it was sent): a producer's escape sequences reached an operator's
    terminal through `laser-memory stats`, and a megabyte tag made a megabyte reason."""
    reason = printable(reason)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "\u2026"
    return reason


def _kept_fields() -> list[tuple]:
    fields = msgspec.structs.fields(Remember)
    required = [(f.name, f.type) for f in fields if f.required]
    optional = [(f.name, f.type, f.default) for f in fields if not f.required]
    # The fields most remembers leave at their defaults last (see KeptRemember).
    optional.sort(key=lambda f: f[0] not in ("v", "ns", "scope"))
    return required + optional


#: A `Remember` as the view stores it inside its item: the same fields, as an array
#: (field names and empty lineage as a map were a third of an item). msgspec writes
#: every field of an array-like struct, defaults too (``omit_defaults`` serves only
#: map-like ones, msgspec issue 720), so an empty field costs its one byte. Read by
#: attribute, it stands in for the Remember everywhere a fold reads one.
KeptRemember = msgspec.defstruct(
    "KeptRemember",
    _kept_fields(),
    array_like=True,
    frozen=True,
    omit_defaults=True,
    gc=False,
)
_KEPT_FIELDS = operator.attrgetter(*(field[0] for field in _kept_fields()))


def kept(record: Remember) -> KeptRemember:
    """The compact form of a remember, for storing."""
    return KeptRemember(*_KEPT_FIELDS(record))


#: What a fold keeps of a remember: the `Remember` itself in process memory, a
#: `KeptRemember` in the view (`ItemState[KeptRemember]` is what the view decodes).
R = TypeVar("R")


class Remembered(msgspec.Struct, Generic[R], array_like=True, gc=False):
    """The remember an item keeps for a conversation, with its position key.

    It keeps no `Source`: the key gives the partition and offset, the record its
    stream and conversation, and the fold's topic and generation the rest, so a read
    makes it (`source`). A `Source` is a tuple subclass, which the garbage collector
    tracks: one kept per item made each full collection walk every item of a fold,
    more than half of a fresh handle's fold. (Views of earlier builds stored a third
    element, always nil; decoding ignores it.)"""

    key: SortKey
    record: R

    def source(self, topic: str, generation: str) -> Source:
        """Where the kept remember sits on the log, as a read reports it."""
        scope = self.record.scope  # type: ignore[attr-defined]
        key = self.key
        return _new_tuple(
            Source, (scope.stream, topic, key[1], key[2], generation, scope.conversation)
        )


class _NoEntries(dict):
    """The one empty map the new items of an in-process fold share for the fields
    they leave empty (feedback, forgets, vectors): four empty dicts an item were a
    fifth of its memory. It refuses every change, so a change made without first
    giving the item a map of its own (`ItemState.apply` does) raises rather than
    reaching every other item. It encodes, compares and reads as ``{}``."""

    __slots__ = ()

    def _refused(self, *args: object, **kwargs: object) -> None:
        raise TypeError("the shared empty map of the fold cannot change")

    __setitem__ = __delitem__ = __ior__ = _refused  # type: ignore[assignment]
    update = setdefault = pop = popitem = clear = _refused  # type: ignore[assignment]


_NO_ENTRIES: dict = _NoEntries()
_force_setattr = msgspec.structs.force_setattr
_SCOPES_SHARED = 1 << 14  # scope objects the fold shares among items: tenants are many


class ItemState(
    msgspec.Struct, Generic[R], kw_only=True, array_like=True, omit_defaults=True, gc=False
):
    """Everything the fold knows about one (namespace, tenant, id).

    ``forgets`` maps a conversation ("" for none) to its forget horizon: for each
    partition in order, the first offset its forgets spare. ``forgets_at`` holds forgets
    written without ``seen``, by position key.

    The view stores it as an array (one per item: field names would be a fifth of
    it); each empty field costs one byte, as msgspec writes an array-like struct's
    defaults too. A new field goes at the end (with a `VIEW_FORMAT` bump)."""

    remembers: dict[str, Remembered[R]] = msgspec.field(default_factory=dict)
    version: int = 0
    last: SortKey = (-1, -1, -1)
    weights: dict[str, float] = msgspec.field(default_factory=dict)
    forgets: dict[str, list[int]] = msgspec.field(default_factory=dict)
    forgets_at: dict[str, SortKey] = msgspec.field(default_factory=dict)
    #: Vectors from embedded records: "<conversation>\0<label>\0<body digest hex>" ->
    #: (position key, float32 bytes).
    vectors: dict[str, tuple[SortKey, bytes]] = msgspec.field(default_factory=dict)
    #: The remembers that replaced this item: (position key, id), oldest first. A
    #: tuple, not a list: an empty list per item is an object the garbage collector
    #: tracks (see `Remembered`).
    superseded_by: tuple[tuple[SortKey, bytes], ...] = ()

    def apply(
        self,
        record: Remember | Forget | Feedback | Embedded | Superseded | Retrieved,
        key: SortKey,
    ) -> None:
        conversation = _conv(record.scope.conversation)
        self.version += 1
        # Exact types: isinstance against Struct types costs about 100 ns a test.
        kind = type(record)
        if kind is Retrieved:
            return  # for history only: a read is not a write of the item
        self.last = max(self.last, key)
        if kind is Superseded:
            # Lasting: forgetting the replacement does not bring this item back.
            replaced = list(self.superseded_by)
            bisect.insort(replaced, (key, record.by))
            self.superseded_by = tuple(replaced)
        elif kind is Remember:
            current = self.remembers.get(conversation)
            if current is None or current.key < key:
                self.remembers[conversation] = Remembered(key, record)
        # A map still the shared empty one (`_NO_ENTRIES`) is the item's own from its
        # first entry on.
        elif kind is Forget:
            if record.seen is None:
                if self.forgets_at.get(conversation, (-1, -1, -1)) < key:
                    if self.forgets_at is _NO_ENTRIES:
                        self.forgets_at = {}
                    self.forgets_at[conversation] = key
                return
            reach = list(record.seen) + [0] * (key[1] + 1 - len(record.seen))
            if not record.only_seen:
                # In its own partition the forget follows everything before its offset.
                reach[key[1]] = max(reach[key[1]], key[2])
            if self.forgets is _NO_ENTRIES:
                self.forgets = {}
            self.forgets[conversation] = _highest(self.forgets.get(conversation, []), reach)
        elif kind is Embedded:
            slot = f"{conversation}\x00{record.embedder}\x00{record.body_digest.hex()}"
            current = self.vectors.get(slot)
            if current is None or current[0] < key:
                if self.vectors is _NO_ENTRIES:
                    self.vectors = {}
                self.vectors[slot] = (key, record.embedding)
        else:
            if self.weights is _NO_ENTRIES:
                self.weights = {}
            self.weights[conversation] = self.weights.get(conversation, 0.0) + record.weight

    def vector(self, conversation: str, record: Remember, label: str) -> bytes | None:
        """The item's vector of model ``label`` for this remember: its own, else the
        latest embedded one for its body in its conversation or in none."""
        if record.embedder == label:
            return record.embedding
        digest = body_digest(record.body).hex()
        found = [
            self.vectors.get(f"{scope}\x00{label}\x00{digest}")
            for scope in {conversation, _NO_CONVERSATION}
        ]
        found = [f for f in found if f is not None]
        return max(found)[1] if found else None

    def live(self, conversation: str) -> Remembered | None:
        """The live remember in a conversation ("" for none), or None."""
        remembered = self.remembers.get(conversation)
        if remembered is None:
            return None
        _, partition, offset = remembered.key
        scopes = (conversation, _NO_CONVERSATION) if conversation else (_NO_CONVERSATION,)
        for scope in scopes:
            horizon = self.forgets.get(scope)
            if horizon is not None and partition < len(horizon) and offset < horizon[partition]:
                return None
            forgotten = self.forgets_at.get(scope)
            if forgotten is not None and _kills(forgotten, remembered.key):
                return None
        return remembered

    def irregular(self) -> bool:
        """Whether the live remembers have more than one owner (agent, user,
        application, kind): owner filters then see the item differently."""
        if len(self.remembers) < 2:
            return False
        owners = {
            (r.record.scope.agent, r.record.scope.user, r.record.scope.application, r.record.kind)
            for r in self.live_conversations().values()
        }
        return len(owners) > 1

    def live_conversations(self) -> dict[str, Remembered]:
        out = {}
        for conversation in self.remembers:
            live = self.live(conversation)
            if live is not None:
                out[conversation] = live
        return out

    def weight(self, conversations: list[str]) -> float:
        """The feedback that applies to an item seen in these conversations."""
        total = self.weights.get(_NO_CONVERSATION, 0.0)
        for conversation in conversations:
            if conversation:
                total += self.weights.get(conversation, 0.0)
        return total

    def plain(self, where: ItemFilter) -> Remembered | None:
        """The one remember the item shows this read, if that is all it shows: one
        remember, in the read's conversation if it names one, that never expires and
        matches the filter, with no forget, feedback or replacement. None otherwise
        (``visible`` then says what the read sees). An index puts such an item from
        the remember alone (`SearchIndex.put_plain`)."""
        if (
            self.forgets
            or self.forgets_at
            or self.weights
            or self.superseded_by
            or len(self.remembers) != 1
        ):
            return None
        [(conversation, remembered)] = self.remembers.items()
        record = remembered.record
        if (
            record.expires_at is not None
            or (where.conversation is not None and _conv(where.conversation) != conversation)
            or not where.matches(record)
        ):
            return None
        return remembered

    def visible(
        self, raw_id: bytes, where: ItemFilter, topic: str, generation: str
    ) -> MemoryItem | None:
        """The item as a read with this filter sees it, or None; ``topic`` and
        ``generation`` are the folded topic's, for the item's `Source`."""
        if self.superseded_by and not where.superseded:
            return None
        remembers = self.remembers
        conversations = remembers if where.conversation is None else (_conv(where.conversation),)
        # A search index's build asks this of every item: most items have one remember,
        # no forget and no feedback, so the loop makes no lists and no call it can skip.
        forgotten = self.forgets or self.forgets_at
        latest: Remembered | None = None
        latest_conversation = ""
        seen_conversations: list[str] = []
        now, expires = where.now_ms, None
        for conversation in conversations:
            live = self.live(conversation) if forgotten else remembers.get(conversation)
            if live is None or not where.matches(live.record):
                continue
            ends = live.record.expires_at
            if ends is not None:
                if now is not None and ends <= now:
                    continue
                expires = ends if expires is None else min(expires, ends)
            seen_conversations.append(conversation)
            if latest is None or live.key > latest.key:
                latest, latest_conversation = live, conversation
        if latest is None:
            return None
        record = latest.record
        embedding, embedder = record.embedding, record.embedder
        if where.embedder is not None and embedder != where.embedder:
            found = self.vector(latest_conversation, record, where.embedder)
            if found is not None:
                embedding, embedder = found, where.embedder
        return MemoryItem(
            id=MemoryId._of(raw_id),  # checked when its record was folded
            kind=MemoryKind.from_code(record.kind),
            body=record.body,
            scope=record.scope,
            lifetime=record.lifetime,
            append_time_ms=latest.key[0],
            source=latest.source(topic, generation),
            weight=self.weight(seen_conversations) if self.weights else 0.0,
            version=self.version,
            last_position=Position(topic, self.last[1], self.last[2]),
            origin=record.origin,
            producer=record.producer,
            embedding=embedding,
            embedder=embedder,
            expires_at_ms=expires,
            supersedes=MemoryId(record.supersedes) if record.supersedes else None,
            superseded_by=MemoryId(self.superseded_by[-1][1]) if self.superseded_by else None,
        )


def _highest(one: list[int], other: list[int]) -> list[int]:
    """Elementwise maximum of two horizons (the shorter one padded with zeros)."""
    if len(one) < len(other):
        one, other = other, one
    return [max(a, other[i]) if i < len(other) else a for i, a in enumerate(one)]


def _kills(forget: SortKey, remember: SortKey) -> bool:
    """Whether a forget written without ``seen`` comes after a remember. In one
    partition the offsets say so. Across partitions only the append times can, and a
    forget in the same millisecond wins."""
    if forget[1] == remember[1]:
        return forget[2] > remember[2]
    return forget[0] >= remember[0]


class NamedState(msgspec.Struct, array_like=True, gc=False):
    """A named item after some writes: body (None once removed), version, last write,
    its key, when its current life began (the first set after none or a removal), and
    the search paths and vectors of its last set (kept by patches)."""

    body: bytes | None
    version: int
    key: SortKey
    source: Source
    name: str = ""
    created_ms: int = 0
    index: tuple[str, ...] | None = None
    vectors: bytes | None = None
    embedder: str | None = None

    def to_item(self, name: str | None = None) -> NamedItem | None:
        if self.body is None:
            return None
        return NamedItem(
            key=self.name if name is None else name,
            body=self.body,
            version=self.version,
            source=self.source,
            append_time_ms=self.key[0],
            created_ms=self.created_ms,
            index=self.index,
            vectors=self.vectors,
            embedder=self.embedder,
        )


def named_unchanged(previous: NamedState | None, record: MemoryRecord) -> bool:
    """Whether a record leaves a named item as it is: a conditional remove of a version
    the item is no longer at (or never was)."""
    return (
        type(record) is NamedRemove
        and record.if_version is not None
        and (previous is None or previous.version != record.if_version)
    )


def apply_named(
    previous: NamedState | None,
    record: NamedSet | NamedPatch | NamedRemove,
    key: SortKey,
    source: Source,
) -> NamedState:
    """The named item after one more write (see `named_unchanged` first)."""
    live = previous is not None and previous.body is not None
    created = previous.created_ms if live else key[0]
    index = previous.index if live else None
    vectors = previous.vectors if live else None
    embedder = previous.embedder if live else None
    body: bytes | None
    if isinstance(record, NamedSet):
        body = record.body
        index, vectors, embedder = record.index, record.vectors, record.embedder
    elif isinstance(record, NamedPatch):
        body = apply_patch_bytes(previous.body if previous else None, record.patch)
        if len(body) > MAX_NAMED_BODY_BYTES:
            raise InvalidBody(
                f"the patch would make the named item {len(body)} bytes, over the "
                f"{MAX_NAMED_BODY_BYTES}-byte limit of a named body"
            )
    else:
        body = None
        index = vectors = embedder = None
    return NamedState(
        body,
        (previous.version if previous else 0) + 1,
        key,
        source,
        record.key,
        created,
        index,
        vectors,
        embedder,
    )


def source_of(record: MemoryRecord, log_record: LogRecord, generation: str) -> Source:
    scope = record.scope
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, a fifth of this.
    return _new_tuple(
        Source,
        (
            scope.stream,
            log_record.topic,
            log_record.partition,
            log_record.offset,
            generation,
            scope.conversation,
        ),
    )


_new_tuple = tuple.__new__


class MemoryState:
    """The folded state of one namespace on one topic, in process memory.

    With a ``tenant`` it folds that tenant's records only, for a reader bound to it:
    the others are passed over by their tenant header unread (decoded first when they
    carry none), so neither their items nor their records set aside are kept.

    >>> state = MemoryState("notes", topic="t", generation="g")        # doctest: +SKIP
    >>> state.apply(log_record)                              # doctest: +SKIP
    >>> state.items(ItemFilter(conversation="c-1"))          # doctest: +SKIP
    """

    def __init__(
        self,
        namespace: str,
        *,
        topic: str,
        generation: str,
        search_cache_bytes: int = CACHE_BYTES,
        tenant: str | None = None,
    ) -> None:
        self.namespace = namespace
        #: The one tenant folded (None: every tenant).
        self.tenant = tenant
        self._tenant_bytes = tenant.encode() if tenant is not None else None
        self.topic = topic
        self.search_cache_bytes = search_cache_bytes
        self.generation = generation
        self._items: dict[tuple[str, bytes], ItemState] = {}
        self._named: dict[tuple[str, str], NamedState] = {}
        self.set_aside: list[SetAside] = []
        # The tenant of each record set aside (None: it cannot be told); a note of records
        # missing from the log names none and has no entry.
        self._aside_tenants: dict[Position, str | None] = {}
        self.applied = 0
        # The (tenant, id) of every item record folded since the search index furthest
        # behind last caught up, in fold order; _changed_before counts the ones dropped.
        # Nothing is kept until a search builds an index.
        self._changes: list[tuple[str, bytes]] = []
        self._changed_before = 0
        # (tenant, conversation, embedder, superseded seen) -> (index, changes seen).
        self._indexes: dict[tuple, tuple[SearchIndex, int]] = {}
        self._scopes: dict[MemoryScope, MemoryScope] = {}

    def set_aside_for(self, tenant: str | None) -> list[SetAside]:
        """The records this fold set aside, and its notes of records missing from the
        log, as a reader bound to ``tenant`` may see them: the records of that tenant
        only (a reason quotes what a record holds), or every one for ``None``."""
        if tenant is None:
            return list(self.set_aside)
        owners = self._aside_tenants
        return [
            aside
            for aside in self.set_aside
            if owners.get(aside.position, tenant) == tenant  # a missing-records note: none
        ]

    def apply(self, log_record: LogRecord) -> None:
        """Fold one log record; records of other namespaces are skipped by header."""
        only = self.tenant
        if only is not None:
            # Another tenant's record, told by its tenant header's bytes: a handle bound
            # to one tenant of many passes over most records, and reading each one's
            # headers in full (a set of its own for each of 100,000 tenants of an item
            # each) was most of its first recall. Skipped below all the same.
            tenant_bytes = plain_tenant_header(log_record.headers)
            if tenant_bytes is not None and tenant_bytes != self._tenant_bytes:
                return
        # The headers' reading is kept for `check_owner_headers`.
        named, owner, _ = read_headers(log_record.headers)
        if named is not None and named != self.namespace:
            return
        if only is not None and owner is not None and owner != only:
            # Another tenant's, by its header (a header that is no UTF-8 names none): a
            # reader bound to a tenant never shows it, so a handle made per request
            # folds its own tenant's records only. One whose record names this tenant
            # under another's header is set aside by the folds that read it.
            return
        # Whatever one record raises, it is set aside and the fold goes on; nothing
        # changes before the record has been fully checked.
        record = None
        checking_headers = False
        try:
            record = decode_record(log_record.value, log_record.headers)
            if record.ns != self.namespace and named is None:
                # Another namespace's record without headers: its own fold judges it (set
                # aside here, its reason quoted it to every reader of this namespace).
                return
            if only is not None and owner is None and record.scope.tenant != only:
                return  # another tenant's record without headers, as above
            shared = None
            if (
                type(record) is Remember
                and record.embedding is None
                and record.embedder is None
                and record.expires_at is None
                and record.supersedes is None
                and len(record.id) == 16
                and record.kind in _KIND_CODES
                and record.ns == self.namespace
            ):
                # A plain remember of a scope an item folded already holds: all that
                # `checked_for_fold` would check of it is checked (the scope, when that
                # item folded; the namespace is this fold's, which folded it). Checking it
                # again was a tenth of a fresh handle's first recall.
                shared = self._scopes.get(record.scope)
            if shared is None:
                checked_for_fold(record)
            checking_headers = True
            check_owner_headers(log_record.headers, record)
            checking_headers = False
            key = sort_key(log_record)
            tenant = record.scope.tenant
            if type(record) in NAMED_RECORDS:
                slot = (tenant, record.key)
                previous = self._named.get(slot)
                if named_unchanged(previous, record):
                    self.applied += 1
                    return
                source = source_of(record, log_record, self.generation)
                named = apply_named(previous, record, key, source)
        except Exception as exc:
            self.set_aside.append(
                SetAside(log_record.position, log_record.append_time_ms, _reason(exc, log_record))
            )
            # Whose record it is, as far as can be told (the tenant header, else the
            # record's own): a reason quotes what the record holds, so a reader bound to
            # a tenant is shown its tenant's only (`set_aside_for`). Headers naming
            # another owner than the record's are said in words naming neither: every
            # tenant's reader is shown that one.
            if not checking_headers:
                if type(owner) is not str:
                    owner = getattr(getattr(record, "scope", None), "tenant", None)
                self._aside_tenants[log_record.position] = owner if type(owner) is str else None
            return
        if type(record) in NAMED_RECORDS:
            self._named[slot] = named
        else:
            if type(record) is Remember:
                target = record.id
                state = self._items.get((tenant, target))
                if state is None:
                    # A new item, the most common record: its state is what
                    # `ItemState().apply` makes of this remember, made at once.
                    scope = record.scope
                    if shared is None:
                        shared = self._scopes.get(scope)
                    if shared is None:
                        # Kept even when met once: its item holds it anyway, and
                        # asking a doorkeeper first cost more than the entry.
                        if len(self._scopes) >= _SCOPES_SHARED:
                            self._scopes.clear()
                        self._scopes[scope] = scope
                    else:
                        _force_setattr(record, "scope", shared)
                    _force_setattr(record, "ns", self.namespace)
                    self._items[(tenant, target)] = ItemState(
                        remembers={_conv(record.scope.conversation): Remembered(key, record)},
                        version=1,
                        last=key,
                        weights=_NO_ENTRIES,
                        forgets=_NO_ENTRIES,
                        forgets_at=_NO_ENTRIES,
                        vectors=_NO_ENTRIES,
                    )
                else:
                    state.apply(record, key)
            else:
                target = record.target
                self._items.setdefault((tenant, target), ItemState()).apply(record, key)
            if self._indexes:
                self._changes.append((tenant, target))
        self.applied += 1

    def items(self, where: ItemFilter) -> list[MemoryItem]:
        """Every visible item the filter allows, in no particular order."""
        out = []
        for (tenant, raw_id), state in self._items.items():
            if tenant != where.tenant:
                continue
            item = state.visible(raw_id, where, self.topic, self.generation)
            if item is not None:
                out.append(item)
        return out

    def _index_for(self, where: ItemFilter, *, ordering: bool = False) -> SearchIndex:
        """The search index of this read, caught up with the items changed since it
        last served one. For a read without text (``ordering``) an index without terms
        or vectors will do, and is made if there is none: the first newest-first recall
        of a fresh handle does not tokenise every body. The first search by text or
        meaning makes the whole index, which serves both from then on."""
        where = where.of_index
        binding = (self.topic, self.generation)
        slot = (where.tenant, where.conversation, where.embedder, where.superseded)
        index, seen = self._indexes.pop(slot, (None, 0))
        if index is not None and where.now_ms is not None and index.went_back(where.now_ms):
            index = None
        if index is not None and index.ordering_only and not ordering:
            index = None
        if index is None:
            index = SearchIndex(
                where.embedder, ordering_only=ordering, cache_bytes=self.search_cache_bytes
            )
            states = (
                (raw_id, state)
                for (tenant, raw_id), state in self._items.items()
                if tenant == where.tenant
            )
            if ordering:
                states = self._put_plain(index, where, states)
            index.put_many(
                (raw_id, *index_entry(state, raw_id, where, *binding)) for raw_id, state in states
            )
        else:
            changed = {
                raw_id
                for tenant, raw_id in self._changes[seen - self._changed_before :]
                if tenant == where.tenant
            }
            index.put_many(
                (raw_id, *index_entry(self._items[(where.tenant, raw_id)], raw_id, where, *binding))
                for raw_id in changed
            )
        if where.now_ms is not None:
            for raw_id in index.due(where.now_ms):
                item, irregular = index_entry(
                    self._items[(where.tenant, raw_id)], raw_id, where, *binding
                )
                index.put(raw_id, item, irregular=irregular)
        # Most recently used last; past MAX_SEARCH_INDEXES the least recently used goes
        # (a fold that serves many conversations keeps the busy ones).
        self._indexes[slot] = (index, self._changed_before + len(self._changes))
        while len(self._indexes) > MAX_SEARCH_INDEXES:
            del self._indexes[next(iter(self._indexes))]
        # Forget what every index has seen.
        oldest = min(seen for _, seen in self._indexes.values())
        if oldest > self._changed_before:
            del self._changes[: oldest - self._changed_before]
            self._changed_before = oldest
        return index

    @staticmethod
    def _put_plain(
        index: SearchIndex, where: ItemFilter, states: Iterable[tuple[bytes, ItemState]]
    ) -> list[tuple[bytes, ItemState]]:
        """Put the items that show one remember and nothing else (`ItemState.plain`)
        into a new ordering-only index as columns; the others, returned, go through
        `visible` as ever."""
        raw_ids: list[bytes] = []
        keys = array("q")
        owners = []
        others = []
        for raw_id, state in states:
            remembered = state.plain(where)
            if remembered is None:
                others.append((raw_id, state))
                continue
            raw_ids.append(raw_id)
            keys.extend(remembered.key)
            record = remembered.record
            scope = record.scope
            owners.append((scope.agent, scope.user, scope.application, record.kind))
        index.put_plain(raw_ids, keys, owners)
        return others

    def _found(self, where: ItemFilter, found) -> list[MemoryItem]:
        return [
            with_ranking(
                self._items[(where.tenant, raw_id)].visible(
                    raw_id, where, self.topic, self.generation
                ),
                ranked,
            )
            for raw_id, ranked in found
        ]

    def search(
        self,
        where: ItemFilter,
        *,
        text: str,
        mode: str,
        query_vector: np.ndarray | None,
        min_similarity: float | None,
        limit: int,
        exclude: frozenset[bytes],
        approximate: ApproximateSearch | None = None,
    ) -> list[MemoryItem] | None:
        """A text recall from the fold's search index for this read; None when only a
        scan of `items` ranks it exactly (see `SearchIndex.find`). ``approximate``
        lets a large semantic recall score only the nearest clusters."""
        index = self._index_for(where)
        found = index.find(
            text,
            mode=mode,
            query_vector=query_vector,
            min_similarity=min_similarity,
            limit=limit,
            exclude=exclude,
            approximate=approximate,
            owner=where.owner,
        )
        give_back_after_search(mode, len(index))  # large arrays freed (see `heap`)
        return None if found is None else self._found(where, found)

    def ordered(
        self, where: ItemFilter, *, strategy: str, limit: int, exclude: frozenset[bytes]
    ) -> list[MemoryItem] | None:
        """A recall without text (``recent``, or feedback then newest) from the search
        index, so its cost follows the limit and the changes, not the namespace; None
        when only a scan orders it exactly (owner filters over items of several
        owners)."""
        found = self._index_for(where, ordering=True).ordered(
            strategy=strategy, limit=limit, exclude=exclude, owner=where.owner
        )
        return None if found is None else self._found(where, found)

    def recall(
        self,
        where: ItemFilter,
        *,
        strategy: str = "auto",
        text: str | None = None,
        limit: int = 50,
        query_vector: np.ndarray | None = None,
        embedder: str | None = None,
        min_similarity: float | None = None,
        exclude: frozenset[bytes] = frozenset(),
        approximate: ApproximateSearch | None = None,
    ) -> list[MemoryItem]:
        """Folded recall: the same arguments, order and signals as `MemoryView.recall`.
        From the search index when it ranks the read exactly, else by a scan."""
        mode = search_mode(strategy, text, query_vector)
        if mode is None:
            items = self.ordered(where, strategy=strategy, limit=limit, exclude=exclude)
        else:
            items = self.search(
                where,
                text=text,
                mode=mode,
                query_vector=query_vector,
                min_similarity=min_similarity,
                limit=limit,
                exclude=exclude,
                approximate=approximate,
            )
        if items is not None:
            return items
        return rank(
            self.items(where),
            strategy=strategy,
            text=text,
            limit=limit,
            query_vector=query_vector,
            embedder=embedder,
            min_similarity=min_similarity,
            exclude=exclude,
        )

    def last_written(
        self, tenant: str, *, before_ms: int, limit: int, conversation: str | None = None
    ) -> list[bytes]:
        """Ids of the tenant's live items (live in ``conversation``, if given) whose
        latest record was appended before ``before_ms``, oldest first, at most
        ``limit``: what a retention pass forgets."""
        found: list[tuple[SortKey, bytes]] = []
        for (item_tenant, raw_id), state in self._items.items():
            if item_tenant != tenant or state.last[0] >= before_ms:
                continue
            live = state.live_conversations()
            if conversation is not None:
                live = {c: r for c, r in live.items() if c == _conv(conversation)}
            if live:
                found.append((state.last, raw_id))
        found.sort()
        return [raw_id for _, raw_id in found[:limit]]

    def expired(
        self, tenant: str, *, now_ms: int, limit: int, conversation: str | None = None
    ) -> list[tuple[bytes, list[str | None]]]:
        """For each of the tenant's items with a live remember that expired by
        ``now_ms`` (in ``conversation``, if given), oldest expiry first, at most
        ``limit`` items: the conversations whose forgets end the expired remembers
        (None: one forget of the whole item), by item id.

        A forget without a conversation ends the item in every conversation, so it is
        written only when every live remember of the item expired; otherwise an expired
        remember without a conversation is left to the reads, which skip it."""
        found: list[tuple[int, bytes, list[str | None]]] = []
        wanted = None if conversation is None else _conv(conversation)
        for (item_tenant, raw_id), state in self._items.items():
            if item_tenant != tenant:
                continue
            live = state.live_conversations()
            if wanted is not None:
                live = {c: r for c, r in live.items() if c == wanted}
            ended = {
                c: r.record.expires_at
                for c, r in live.items()
                if r.record.expires_at is not None and r.record.expires_at <= now_ms
            }
            if not ended:
                continue
            if len(ended) == len(live) and wanted is None:
                targets: list[str | None] = [None]
            else:
                targets = [c for c in ended if c]
                if not targets:
                    continue
            found.append((min(ended.values()), raw_id, targets))
        found.sort(key=lambda entry: (entry[0], entry[1]))
        return [(raw_id, targets) for _, raw_id, targets in found[:limit]]

    def missing_vectors(self, tenant: str, label: str) -> list[tuple[bytes, Remember]]:
        """(id, remember) of every live remember of the tenant without a vector of the
        model ``label``, one per distinct body and conversation, oldest first."""
        out: list[tuple[SortKey, bytes, Remember]] = []
        for (item_tenant, raw_id), state in self._items.items():
            if item_tenant != tenant:
                continue
            for conversation, remembered in state.live_conversations().items():
                if state.vector(conversation, remembered.record, label) is None:
                    out.append((remembered.key, raw_id, remembered.record))
        out.sort(key=lambda entry: entry[0])
        return [(raw_id, record) for _, raw_id, record in out]

    def named_item(self, key: str, *, tenant: str = "") -> NamedItem | None:
        """A named item's current value, or None when it was never set or was removed."""
        named = self._named.get((tenant, key))
        return named.to_item(key) if named is not None else None

    def named_items(self, *, tenant: str = "", prefix: str = "") -> list[NamedItem]:
        """The tenant's present named items whose key starts with ``prefix``, by key."""
        out = []
        for (owner, name), named in self._named.items():
            if owner == tenant and name.startswith(prefix):
                item = named.to_item(name)
                if item is not None:
                    out.append(item)
        out.sort(key=lambda item: item.key)
        return out


def remembered_entry(remembered: Remembered, topic: str) -> HistoryEntry:
    """The audit line of a remember the fold keeps (version 0: numbered on reading)."""
    record = remembered.record
    return HistoryEntry(
        op="remember",
        topic=topic,
        partition=remembered.key[1],
        offset=remembered.key[2],
        append_time_ms=remembered.key[0],
        tenant=record.scope.tenant,
        conversation=record.scope.conversation,
        version=0,
        body=record.body,
        kind=MemoryKind.from_code(record.kind).value,
        supersedes=str(MemoryId(record.supersedes)) if record.supersedes else None,
    )


def history_entry(record: MemoryRecord, log_record: LogRecord, version: int) -> HistoryEntry:
    """The audit line for one record."""
    body: bytes | None = None
    kind: str | None = None
    weight: float | None = None
    key: str | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    if isinstance(record, Remember):
        body, kind = record.body, MemoryKind.from_code(record.kind).value
        if record.supersedes is not None:
            supersedes = str(MemoryId(record.supersedes))
    elif isinstance(record, Superseded):
        superseded_by = str(MemoryId(record.by))
    elif isinstance(record, Retrieved):
        body = record.query.encode()
    elif isinstance(record, Feedback):
        weight = record.weight
    elif isinstance(record, NamedSet):
        body, key = record.body, record.key
    elif isinstance(record, NamedPatch):
        body, key = record.patch, record.key
    elif isinstance(record, NamedRemove):
        key = record.key
    return HistoryEntry(
        op=type(record).__struct_config__.tag,
        topic=log_record.topic,
        partition=log_record.partition,
        offset=log_record.offset,
        append_time_ms=log_record.append_time_ms,
        tenant=record.scope.tenant,
        conversation=record.scope.conversation,
        version=version,
        body=body,
        kind=kind,
        weight=weight,
        key=key,
        supersedes=supersedes,
        superseded_by=superseded_by,
    )
