"""The fold: memory records in, memory state out.

`MemoryState` is the one place that says what a sequence of records means.
The in-process folder feeds it, the managed view stores the same state, and
the tests compare both with a plain reference model.

The rules, chosen so that the state does not depend on the order in which a
reader happens to visit partitions (only the order inside a partition is
fixed by the log):

- Records are ordered by their position key ``(append_time_ms, partition,
  offset)``: the broker append time, ties broken by the source position.
- An item is keyed by (tenant, id). A tombstone or feedback from another
  tenant never touches it.
- For each conversation an item was remembered in (``None`` for none) the
  state keeps the latest remember (they share one partition). That remember
  is *live* unless a later forget names the same conversation, or names none.
  "Later" is by offset when both records are in one partition; across
  partitions (a forget without a conversation of an item remembered in one) it
  is by append time, and a forget in the same millisecond counts as later.
- An item is visible to a read when a live remember matches the read's
  filters; the latest such remember gives its body, scope, lineage and source.
  Remembering an id again after a forget brings it back.
- Feedback without a conversation applies to the item in every conversation;
  feedback naming a conversation applies only where the item was remembered in
  that conversation. An item's weight sums the feedback that applies to the
  live remembers a read sees.
- A named item's writes share one partition, so they apply in offset order:
  set replaces the body, a patch merges into it (RFC 7386), remove clears it.
  Every write counts one version.
- A record that cannot be decoded is set aside with its position and the
  reason; the fold goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from laser_memory.errors import LaserError
from laser_memory.ids import MemoryId
from laser_memory.items import MemoryItem, NamedItem, Source
from laser_memory.kinds import MemoryKind
from laser_memory.log.port import LogRecord, Position
from laser_memory.named import apply_patch_bytes
from laser_memory.records import (
    HEADER_NAMESPACE,
    Feedback,
    Forget,
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
    decode_record,
    header_value,
)

__all__ = ["ItemFilter", "MemoryState", "SetAside", "SortKey"]

SortKey = tuple[int, int, int]


class SetAside(msgspec.Struct, frozen=True):
    """A record the fold could not use, where it is, and why."""

    position: Position
    append_time_ms: int
    reason: str


class ItemFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a read may see. Every field set narrows; the tenant always applies exactly."""

    tenant: str = ""
    conversation: str | None = None
    agent: str | None = None
    user: str | None = None
    application: str | None = None
    kind: MemoryKind | None = None

    def matches(self, record: Remember) -> bool:
        scope = record.scope
        return (
            (self.agent is None or scope.agent == self.agent)
            and (self.user is None or scope.user == self.user)
            and (self.application is None or scope.application == self.application)
            and (self.kind is None or record.kind == self.kind.code)
        )


@dataclass(slots=True)
class _Remembered:
    key: SortKey
    record: Remember
    source: Source


@dataclass(slots=True)
class _ItemState:
    remembers: dict[str | None, _Remembered] = field(default_factory=dict)
    forgets: dict[str | None, SortKey] = field(default_factory=dict)
    weights: dict[str | None, float] = field(default_factory=dict)

    def live(self, conversation: str | None) -> _Remembered | None:
        remembered = self.remembers.get(conversation)
        if remembered is None:
            return None
        for scope in (conversation, None) if conversation is not None else (None,):
            forgotten = self.forgets.get(scope)
            if forgotten is not None and _kills(forgotten, remembered.key):
                return None
        return remembered


def _kills(forget: SortKey, remember: SortKey) -> bool:
    """Whether a forget comes after a remember. In one partition the offsets say so.
    Across partitions only the append times can, and a forget in the same millisecond
    wins: a caller who forgets right after remembering means the item to be gone."""
    if forget[1] == remember[1]:
        return forget[2] > remember[2]
    return forget[0] >= remember[0]


@dataclass(slots=True)
class _NamedState:
    body: bytes | None
    version: int
    key: SortKey
    source: Source


class MemoryState:
    """The folded state of one namespace on one topic.

    >>> state = MemoryState("notes", stream="", generation="g")   # doctest: +SKIP
    >>> state.apply(record)                                         # doctest: +SKIP
    >>> state.items(ItemFilter(conversation="c-1"))                 # doctest: +SKIP
    """

    def __init__(self, namespace: str, *, stream: str, generation: str) -> None:
        self.namespace = namespace
        self.stream = stream
        self.generation = generation
        self._encoded_namespace = namespace.encode()
        self._items: dict[tuple[str, bytes], _ItemState] = {}
        self._named: dict[tuple[str, str], _NamedState] = {}
        self.set_aside: list[SetAside] = []
        self.applied = 0

    # -- writing ---------------------------------------------------------------

    def apply(self, log_record: LogRecord) -> None:
        """Fold one log record; records of other namespaces are skipped by header."""
        header = header_value(log_record.headers, HEADER_NAMESPACE)
        if header is not None and header != self._encoded_namespace:
            return
        try:
            record = decode_record(log_record.value, log_record.headers)
            if record.ns != self.namespace:
                return
            self._apply(record, log_record)
        except LaserError as exc:
            self.set_aside.append(
                SetAside(log_record.position, log_record.append_time_ms, str(exc))
            )
            return
        self.applied += 1

    def _source(self, log_record: LogRecord, conversation: str | None) -> Source:
        return Source(
            self.stream,
            log_record.topic,
            log_record.partition,
            log_record.offset,
            self.generation,
            conversation,
        )

    def _apply(self, record: MemoryRecord, log_record: LogRecord) -> None:
        key = (log_record.append_time_ms, log_record.partition, log_record.offset)
        tenant = record.scope.tenant
        conversation = record.scope.conversation
        if isinstance(record, Remember):
            MemoryId(record.id)
            MemoryKind.from_code(record.kind)
            state = self._items.setdefault((tenant, record.id), _ItemState())
            current = state.remembers.get(conversation)
            if current is None or current.key < key:
                state.remembers[conversation] = _Remembered(
                    key, record, self._source(log_record, conversation)
                )
        elif isinstance(record, Forget):
            MemoryId(record.target)
            state = self._items.setdefault((tenant, record.target), _ItemState())
            if state.forgets.get(conversation, (-1, -1, -1)) < key:
                state.forgets[conversation] = key
        elif isinstance(record, Feedback):
            MemoryId(record.target)
            state = self._items.setdefault((tenant, record.target), _ItemState())
            state.weights[conversation] = state.weights.get(conversation, 0.0) + record.weight
        else:
            self._apply_named(record, key, log_record)

    def _apply_named(
        self, record: NamedSet | NamedPatch | NamedRemove, key: SortKey, log_record: LogRecord
    ) -> None:
        slot = (record.scope.tenant, record.key)
        named = self._named.get(slot)
        previous = named.body if named else None
        if isinstance(record, NamedSet):
            body: bytes | None = record.body
        elif isinstance(record, NamedPatch):
            body = apply_patch_bytes(previous, record.patch)
        else:
            body = None
        version = named.version + 1 if named else 1
        self._named[slot] = _NamedState(
            body, version, key, self._source(log_record, record.scope.conversation)
        )

    # -- reading ---------------------------------------------------------------

    def items(self, where: ItemFilter) -> list[MemoryItem]:
        """Every visible item the filter allows, in no particular order."""
        out = []
        for (tenant, raw_id), state in self._items.items():
            if tenant != where.tenant:
                continue
            item = self._visible(raw_id, state, where)
            if item is not None:
                out.append(item)
        return out

    def _visible(self, raw_id: bytes, state: _ItemState, where: ItemFilter) -> MemoryItem | None:
        conversations = (
            [where.conversation] if where.conversation is not None else list(state.remembers)
        )
        seen: list[_Remembered] = []
        weight = state.weights.get(None, 0.0)
        for conversation in conversations:
            live = state.live(conversation)
            if live is None or not where.matches(live.record):
                continue
            seen.append(live)
            if conversation is not None:
                weight += state.weights.get(conversation, 0.0)
        if not seen:
            return None
        latest = max(seen, key=lambda r: r.key)
        record = latest.record
        return MemoryItem(
            id=MemoryId(raw_id),
            kind=MemoryKind.from_code(record.kind),
            body=record.body,
            scope=record.scope,
            lifetime=record.lifetime,
            append_time_ms=latest.key[0],
            source=latest.source,
            weight=weight,
            origin=record.origin,
            producer=record.producer,
            embedding=record.embedding,
        )

    def named_item(self, key: str, *, tenant: str = "") -> NamedItem | None:
        """A named item's current value, or None when it was never set or was removed."""
        named = self._named.get((tenant, key))
        if named is None or named.body is None:
            return None
        return NamedItem(
            key=key,
            body=named.body,
            version=named.version,
            source=named.source,
            append_time_ms=named.key[0],
        )
