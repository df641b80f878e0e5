"""Replay for audit: read the log in order, and fold it as it stood at a past moment.

"What happened?" is `replay` (the records, gathered and sorted) and `replay_stream`
(the same one at a time, holding a batch a partition, and on to what is appended with
``follow``). "What did the agent know when it answered?" is `MemorySnapshot`: the fold
of every record up to a time or up to given positions, folded as it is read. "What
touched this item?" is `history_from_log`, which holds the item's records alone.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import re
from collections.abc import AsyncIterator, Callable, Mapping

import msgspec

from laser_memory.access import resolve_tenant
from laser_memory.embedding import Embedder
from laser_memory.errors import InvalidInput, UnknownTopic, shown
from laser_memory.ids import MemoryId, validate_name
from laser_memory.inputs import aware_millis, listing, receipt_fields
from laser_memory.items import HistoryEntry, MemoryItem, NamedItem
from laser_memory.kinds import MemoryKind
from laser_memory.log.port import Appended, Log, LogRecord, TimeIndexedLog
from laser_memory.named import validate_key
from laser_memory.recall import (
    query_text,
    query_vector,
    validate_limit,
    validate_min_similarity,
    validate_strategy,
)
from laser_memory.records import (
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
    Superseded,
    plain_tenant_header,
    read_headers,
)

from .state import (
    ItemFilter,
    MemoryState,
    _reason,
    decode_for_fold,
    history_entry,
    sort_key,
)

__all__ = [
    "AsOf",
    "LoggedRecord",
    "MemorySnapshot",
    "history_from_log",
    "item_history",
    "named_history",
    "replay",
    "replay_stream",
    "snapshot",
    "to_millis",
]

AsOf = dt.datetime | int | float | Mapping[int, int] | Appended | tuple[Appended, ...]


class LoggedRecord(msgspec.Struct, frozen=True):
    """A record of the log with its decoded memory record, or why it could not be decoded."""

    log_record: LogRecord
    record: MemoryRecord | None
    error: str | None


def to_millis(moment: dt.datetime | int | float) -> int:
    """Milliseconds since the epoch from an aware datetime (a naive one is refused, see
    `laser_memory.inputs.aware_millis`), or from seconds given as a float, or
    milliseconds given as an int."""
    if isinstance(moment, dt.datetime):
        millis = aware_millis(moment, "the moment", "datetime(2026, 5, 1, 9, tzinfo=timezone.utc)")
        if not 0 <= millis < 1 << 63:
            raise InvalidInput(
                "a moment must not fall before the epoch (1970-01-01T00:00:00Z), got "
                f"{moment.isoformat()}"
            )
        return millis
    if isinstance(moment, bool) or not isinstance(moment, int | float):
        raise InvalidInput(
            f"a moment is a datetime, seconds (float) or milliseconds (int): {shown(moment)}"
        )
    if isinstance(moment, float) and not math.isfinite(moment):
        raise InvalidInput(f"a moment must be a finite number of seconds, got {shown(moment)}")
    # Seconds past float range once multiplied (1e306 s) are out of range, not inf.
    millis = moment if isinstance(moment, int) else moment * 1000
    if not 0 <= millis < 1 << 63:
        raise InvalidInput(
            f"a moment must fall between the epoch and the year 292 million, got {shown(moment)}"
        )
    return int(millis)


def _tenant_or_none(tenant: object) -> str | None:
    return None if tenant is None else validate_name(tenant, "tenant", allow_empty=True)


def _millis_or_none(millis: object, name: str) -> int | None:
    """A bound of a replay in milliseconds since the epoch, or None. Compared with
    append times as it came, a str failed the replay with a raw TypeError and NaN let
    every record through."""
    if millis is None:
        return None
    if isinstance(millis, bool) or not isinstance(millis, int) or not 0 <= millis < 1 << 63:
        raise InvalidInput(
            f"{name} is milliseconds since the epoch, an int from 0 to 2**63-1 (to_millis "
            f"makes one from a datetime), got {shown(millis)}"
        )
    return int(millis)


def _records(records: object, what: str) -> list[LoggedRecord]:
    if not isinstance(records, list | tuple) or not all(
        isinstance(logged, LoggedRecord) for logged in records
    ):
        raise InvalidInput(f"{what} reads the LoggedRecords a replay returns, got {shown(records)}")
    return list(records)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Kept:
    """Which of a topic's records a replay keeps, as checked arguments: one namespace's
    and one tenant's (each if given), appended between two moments (both included)."""

    def __init__(
        self,
        namespace: str | None,
        tenant: str | None,
        since_ms: int | None,
        until_ms: int | None,
        until: Mapping[int, int] | None,
    ):
        self.namespace = None if namespace is None else validate_name(namespace, "namespace")
        self.tenant = _tenant_or_none(tenant)
        self._tenant_bytes = None if self.tenant is None else self.tenant.encode()
        self.since_ms = _millis_or_none(since_ms, "since_ms")
        self.until_ms = _millis_or_none(until_ms, "until_ms")
        if (
            self.since_ms is not None
            and self.until_ms is not None
            and self.since_ms > self.until_ms
        ):
            # Nothing could be in it: an empty answer would read as "no records then".
            raise InvalidInput(
                f"since_ms ({self.since_ms}) is after until_ms ({self.until_ms}): no record "
                "falls between"
            )
        if until is not None and not (
            isinstance(until, Mapping) and all(_whole(p) and _whole(o) for p, o in until.items())
        ):
            # Sorted as it came, a str among the partitions failed with a raw TypeError.
            raise InvalidInput(
                "until maps partitions to the first offset not to read (ints from 0), got "
                f"{shown(until)}"
            )

    def __call__(self, log_record: LogRecord) -> LoggedRecord | None:
        since_ms, until_ms = self.since_ms, self.until_ms
        if since_ms is not None and log_record.append_time_ms < since_ms:
            return None
        if until_ms is not None and log_record.append_time_ms > until_ms:
            return None
        namespace, tenant = self.namespace, self.tenant
        if tenant is not None:
            # Another tenant's record, told by its tenant header's bytes before the
            # headers are read in full (`MemoryState.apply` does the same).
            tenant_bytes = plain_tenant_header(log_record.headers)
            if tenant_bytes is not None and tenant_bytes != self._tenant_bytes:
                return None
        # A header that is no UTF-8 is read as bytes, which name no namespace or tenant.
        header, owner, _ = read_headers(log_record.headers)
        if namespace is not None and header is not None and header != namespace:
            return None
        if tenant is not None and owner is not None and owner != tenant:
            return None
        try:
            record = decode_for_fold(log_record)
        except Exception as exc:
            if tenant is None:
                return LoggedRecord(log_record, None, _reason(exc, log_record))
            return None
        if namespace is not None and record.ns != namespace:
            return None
        if tenant is not None and record.scope.tenant != tenant:
            return None
        return LoggedRecord(log_record, record, None)


async def replay(
    log: Log,
    topic: str,
    *,
    namespace: str | None = None,
    tenant: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    until: Mapping[int, int] | None = None,
) -> list[LoggedRecord]:
    """The topic's records (of one namespace and one tenant, if given) in position-key
    order: broker append time, then partition, then offset. ``until`` maps partitions
    to the first offset *not* to read; partitions it leaves out are not read.

    ``tenant=None`` reads every tenant: that is for an operator, never for a reader
    acting for one tenant. With a tenant, a record that cannot be decoded is left out
    too (nobody can tell whose it is). ``since_ms`` and ``until_ms`` (milliseconds since
    the epoch, both included) keep the records appended between them; with
    ``since_ms`` each partition is read from where the log's time index puts it (a
    `TimeIndexedLog`, as both logs are), not from its start.

    It holds every record it keeps until it has sorted them (about 1.4 KB a record);
    `replay_stream` gives them one at a time, holding a batch a partition.

    >>> audit = await replay(laser.log, memory.topic, namespace="notes", tenant="acme")
    ...                                                             # doctest: +SKIP
    """
    kept = _Kept(namespace, tenant, since_ms, until_ms, until)
    start = await _starts(log, topic, kept.since_ms)
    ends = _within(until, await _ends_at(log, topic, kept.until_ms))
    reading = (
        log.read(topic, start)
        if ends is None
        else log.read(topic, start, partitions=sorted(ends), until=ends)
    )
    out: list[LoggedRecord] = []
    async for batch in reading:
        for log_record in batch:
            logged = kept(log_record)
            if logged is not None:
                out.append(logged)
    out.sort(key=lambda r: sort_key(r.log_record))
    return out


async def _starts(log: Log, topic: str, since_ms: int | None) -> dict[int, int] | None:
    """Where a replay of what was appended since ``since_ms`` starts reading each
    partition: every record before it was appended earlier. None (the start) for a
    replay of everything, or a log that cannot tell."""
    if since_ms is None or not isinstance(log, TimeIndexedLog):
        return None
    return await log.offsets_for_time(topic, since_ms)


def _within(
    until: Mapping[int, int] | None, bounds: dict[int, int] | None
) -> dict[int, int] | None:
    """A read's ``until``: the positions asked for, each no further than its bound."""
    if bounds is None:
        return None if until is None else dict(until)
    if until is None:
        return bounds
    return {p: min(o, bounds.get(p, o)) for p, o in until.items()}


async def _ends_at(log: Log, topic: str, until_ms: int | None) -> dict[int, int] | None:
    """Where a read of what was appended up to ``until_ms`` can stop in each partition:
    on a log whose append times never step back in a partition, the first offset
    appended after it. None (read to the end and keep what falls before) otherwise."""
    if (
        until_ms is None
        or until_ms >= _LAST_MS
        or not isinstance(log, TimeIndexedLog)
        or not log.ordered_times
    ):
        return None
    return await log.offsets_for_time(topic, until_ms + 1)


_LAST_MS = (1 << 63) - 1


#: Records a partition's read brings at a time in `replay_stream`, shared by its
#: partitions: what the stream holds at most, besides one decoded record a partition.
STREAM_HELD_RECORDS = 100_000


async def replay_stream(
    log: Log,
    topic: str,
    *,
    namespace: str | None = None,
    tenant: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    until: Mapping[int, int] | None = None,
    follow: bool = False,
) -> AsyncIterator[LoggedRecord]:
    """`replay`'s records one at a time, as they are read, holding at most a batch of
    each partition (1,000 records, fewer when there are over 100 partitions): for a
    replay of more records than fit in memory. It reads the log up to its end offsets
    when it starts (or to ``until``), each partition in offset order, and takes the
    earliest head of them each time: `replay`'s order (append time, partition,
    offset) wherever a partition's append times never step back, which they never do
    on the embedded log. On Kafka a partition's leader that moved to a broker whose
    clock was behind can append later records at earlier times; there each partition
    keeps its offset order (the order its records were appended in), where `replay`'s
    sort would put them by their times.

    Arguments as `replay`'s; bad ones are refused before anything is read. Each read
    of a batch is a read of the log of its own (on Kafka a fetch, by one consumer at a
    time), so a stream left unfinished holds no consumer between them.

    ``follow=True`` goes on past the end: the records appended since the stream began,
    as they come (each partition in offset order, partitions as their records arrive),
    until the caller stops iterating. It takes no ``until`` or ``until_ms``.

    >>> async for logged in replay_stream(laser.log, memory.topic, tenant="acme"):
    ...     print(logged.log_record.offset, logged.record)              # doctest: +SKIP
    """
    kept = _Kept(namespace, tenant, since_ms, until_ms, until)
    if not isinstance(follow, bool):
        raise InvalidInput(f"follow is True or False, got {shown(follow)}")
    if follow and (until is not None or until_ms is not None):
        raise InvalidInput(
            "a replay that follows the log has no end: give it since_ms, not until or until_ms"
        )
    generation = (await log.describe_topic(topic)).generation
    ends = _within(until, await _ends_at(log, topic, kept.until_ms))
    if ends is None:
        ends = await log.end_offsets(topic)
    start = await _starts(log, topic, kept.since_ms) or {}
    chosen = sorted(ends)
    batch_size = max(10, min(1000, STREAM_HELD_RECORDS // max(1, len(chosen))))
    cursors = [
        _PartitionCursor(log, topic, generation, p, start.get(p, 0), ends[p], batch_size)
        for p in chosen
    ]
    heads: list[tuple[tuple[int, int, int], int, LoggedRecord]] = []
    # Every partition's first kept record is read before any is given: bad arguments
    # (a partition the topic lacks in ``until``) are refused before the first record.
    for index, cursor in enumerate(cursors):
        logged = await cursor.next_kept(kept)
        if logged is not None:
            heads.append((sort_key(logged.log_record), index, logged))
    heapq.heapify(heads)
    while heads:
        _, index, logged = heads[0]
        yield logged
        following = await cursors[index].next_kept(kept)
        if following is None:
            heapq.heappop(heads)
        else:
            heapq.heapreplace(heads, (sort_key(following.log_record), index, following))
    if follow:
        async for logged in _followed(log, topic, generation, ends, kept):
            yield logged


async def _close(reading: AsyncIterator[list[LogRecord]]) -> None:
    """End a read now: on Kafka its consumer goes back to the log's idle ones. (The port
    promises an async iterator; a backend's may have no ``aclose``.)"""
    close = getattr(reading, "aclose", None)
    if close is not None:
        await close()


async def _check_generation(log: Log, topic: str, generation: str) -> None:
    if (await log.describe_topic(topic)).generation != generation:
        raise UnknownTopic(
            f"topic {shown(topic)} was deleted and created again while it was being replayed"
        )


async def _followed(
    log: Log, topic: str, generation: str, ends: Mapping[int, int], kept: _Kept
) -> AsyncIterator[LoggedRecord]:
    """What ``kept`` keeps of the records appended from ``ends`` on, as they come."""
    # The read checks the topic it began on from then on; that it begins on the stream's
    # topic, not one created again since, is checked here: before it (a read of the new
    # topic at the old one's offsets waited for records that might never come), and at
    # its first batch, for a topic created again in between.
    await _check_generation(log, topic, generation)
    reading = log.read(topic, dict(ends), follow=True)
    checked = False
    try:
        async for batch in reading:
            if not checked:
                await _check_generation(log, topic, generation)
                checked = True
            for log_record in batch:
                logged = kept(log_record)
                if logged is not None:
                    yield logged
    finally:
        await _close(reading)


class _PartitionCursor:
    """One partition of a `replay_stream`: a batch of its records read at a time."""

    def __init__(
        self,
        log: Log,
        topic: str,
        generation: str,
        partition: int,
        start: int,
        end: int,
        batch_size: int,
    ):
        self._log = log
        self._topic = topic
        self._generation = generation
        self._partition = partition
        self._end = end
        self._batch_size = batch_size
        self._position = start
        self._batch: list[LogRecord] = []
        self._index = 0
        self._done = False

    async def next_kept(self, kept: _Kept) -> LoggedRecord | None:
        while True:
            while self._index < len(self._batch):
                log_record = self._batch[self._index]
                self._index += 1
                logged = kept(log_record)
                if logged is not None:
                    return logged
            if self._done:
                return None
            await self._read()

    async def _read(self) -> None:
        # One batch, and the read closed at once: on Kafka its consumer goes back to
        # the log's idle ones, so a stream of many partitions holds one at a time.
        partition = self._partition
        reading = self._log.read(
            self._topic,
            {partition: self._position},
            partitions=[partition],
            until={partition: self._end},
            max_batch=self._batch_size,
        )
        try:
            batch: list[LogRecord] = await anext(reading, [])
        finally:
            await _close(reading)
        if batch:
            # Each batch is a read of its own: one of a topic deleted and created again
            # since the stream began would read the new topic's records at the old one's
            # offsets, as if they were the same log.
            await _check_generation(self._log, self._topic, self._generation)
        self._batch, self._index = batch, 0
        if batch:
            self._position = batch[-1].offset + 1
        else:
            # Read up to the end, or what was left was removed by retention meanwhile.
            self._done = True


def item_history(
    records: list[LoggedRecord], raw_id: bytes | MemoryId | str, *, tenant: str = ""
) -> list[HistoryEntry]:
    """Every replayed record that targeted an item, with the version after it. ``raw_id``
    is the item's id (its 16 bytes, a `MemoryId` or its printed form)."""
    records = _records(records, "item_history")
    raw_id = MemoryId.parse(raw_id).bytes
    tenant = validate_name(tenant, "tenant", allow_empty=True)
    out = []
    for logged in records:
        record = logged.record
        if record is None or record.scope.tenant != tenant:
            continue
        if isinstance(record, NamedSet | NamedPatch | NamedRemove):
            continue
        target = record.id if isinstance(record, Remember) else record.target
        if target == raw_id:
            out.append(history_entry(record, logged.log_record, len(out) + 1))
    return out


def chain_history(
    raw_id: bytes, history_of: Callable[[bytes], list[HistoryEntry]]
) -> list[HistoryEntry]:
    """An item's history together with the histories of the items it replaced and that
    replaced it, following ``supersedes`` back and ``superseded`` forward, in position
    order; each entry names its item, and versions count within their item."""
    out: list[HistoryEntry] = []
    seen: set[bytes] = set()
    todo = [raw_id]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        name = str(MemoryId(current))
        for entry in history_of(current):
            out.append(msgspec.structs.replace(entry, item=name))
            for linked in (entry.supersedes, entry.superseded_by):
                if linked is not None:
                    todo.append(MemoryId.parse(linked).bytes)
    out.sort(key=lambda e: (e.append_time_ms, e.partition, e.offset, e.op == "superseded"))
    return out


def named_history(records: list[LoggedRecord], key: str, *, tenant: str = "") -> list[HistoryEntry]:
    """Every write to a named item, in offset order (they share a partition)."""
    records = _records(records, "named_history")
    key = validate_key(key)
    tenant = validate_name(tenant, "tenant", allow_empty=True)
    mine = [
        logged
        for logged in records
        if isinstance(logged.record, NamedSet | NamedPatch | NamedRemove)
        and logged.record.key == key
        and logged.record.scope.tenant == tenant
    ]
    mine.sort(key=lambda logged: (logged.log_record.partition, logged.log_record.offset))
    out: list[HistoryEntry] = []
    for logged in mine:
        record = logged.record
        # A conditional remove the item had moved past changed nothing, as in the fold.
        if isinstance(record, NamedRemove) and record.if_version not in (None, len(out)):
            continue
        out.append(history_entry(record, logged.log_record, len(out) + 1))
    return out


async def history_from_log(
    log: Log,
    topic: str,
    namespace: str,
    target: MemoryId | str,
    *,
    tenant: str,
) -> list[HistoryEntry]:
    """An item's history with its chain of replacements (`chain_history`), or a named
    item's (``target`` a key: `named_history`), read from the log: what `replay`,
    then `item_history` or `named_history`, give, holding only the records of the
    item (or of the items of its chain) and the links between items, not every record
    the replay keeps. One read of the log, and a second when the item was replaced or
    replaced another (the first read learns the chain).

    >>> await history_from_log(laser.log, memory.topic, "notes", mid, tenant="")
    ...                                                             # doctest: +SKIP
    """
    # One tenant's history, always (None here read every tenant's records and showed
    # the default tenant's): as item_history and named_history refuse None.
    tenant = validate_name(tenant, "tenant", allow_empty=True)
    kept = _Kept(namespace, tenant, None, None, None)
    if not isinstance(target, MemoryId):
        key = validate_key(target)
    # Both reads end where the first began: the chain is learnt of the records read.
    generation = (await log.describe_topic(topic)).generation
    ends = await log.end_offsets(topic)
    if not isinstance(target, MemoryId):
        # The key's UTF-8 is in the value of every record of it (a str in msgpack is its
        # bytes): a record without them is passed over undecoded.
        key_bytes = key.encode()
        mine = [
            logged
            async for logged in _kept_records(
                log, topic, ends, kept, lambda value: key_bytes in value
            )
            if isinstance(logged.record, NamedSet | NamedPatch | NamedRemove)
            and logged.record.key == key
        ]
        return named_history(mine, key, tenant=tenant)
    raw_id = target.bytes
    # Each item to the items its own records name (the one its remember replaced, the
    # one that replaced it): the links `chain_history` follows.
    links: dict[bytes, set[bytes]] = {}
    mine = []
    async for logged in _kept_records(
        log, topic, ends, kept, lambda value: raw_id in value or _MAY_LINK(value) is not None
    ):
        record = logged.record
        if record is None or isinstance(record, NamedSet | NamedPatch | NamedRemove):
            continue
        if isinstance(record, Remember):
            item = record.id
            if record.supersedes is not None:
                links.setdefault(item, set()).add(record.supersedes)
        else:
            item = record.target
            if isinstance(record, Superseded):
                links.setdefault(item, set()).add(record.by)
        if item == raw_id:
            mine.append(logged)
    chain = {raw_id}
    todo = [raw_id]
    while todo:
        for linked in links.get(todo.pop(), ()):
            if linked not in chain:
                chain.add(linked)
                todo.append(linked)
    if len(chain) > 1:
        mine = []
        # A search of the bytes for each item of the chain costs about what a decode
        # does once the chain is long (a fact corrected every hour for a year is a chain
        # of thousands): then every record is decoded, as it was before the search.
        in_chain = (
            (lambda value: any(one in value for one in chain))
            if len(chain) <= _SEARCHED_CHAIN
            else (lambda value: True)
        )
        async for logged in _kept_records(log, topic, ends, kept, in_chain):
            record = logged.record
            if record is None or isinstance(record, NamedSet | NamedPatch | NamedRemove):
                continue
            if (record.id if isinstance(record, Remember) else record.target) in chain:
                mine.append(logged)
        if (await log.describe_topic(topic)).generation != generation:
            # The second read was of a topic created again since the first.
            raise UnknownTopic(
                f"topic {shown(topic)} was deleted and created again while its history "
                "was being read"
            )
    mine.sort(key=lambda logged: sort_key(logged.log_record))
    # Each item's records apart, in that order: `item_history` of every item of the
    # chain over all of them took the square of the chain's length (a status corrected
    # 3,000 times: 6.5 s).
    by_item: dict[bytes, list[LoggedRecord]] = {}
    for logged in mine:
        record = logged.record
        item = record.id if isinstance(record, Remember) else record.target
        by_item.setdefault(item, []).append(logged)
    return chain_history(raw_id, lambda one: item_history(by_item.get(one, []), one, tenant=tenant))


#: Whether a record's value may link two items (a `Superseded`, or a `Remember` whose
#: ``supersedes`` is set), judged from its bytes; never None for one that does. Field
#: names and tags are in a value as their UTF-8, and a remember that replaces none has
#: ``supersedes`` followed by msgpack's nil (a body may hold the same bytes, which only
#: costs a decode). One search: two were twice its time, most of a history's.
_MAY_LINK = re.compile(rb"supersede(?:d|s(?!\xc0))").search


#: The longest chain of replacements whose records a history finds by searching the
#: bytes of every record for each item's id: a search takes about an eighth of what
#: decoding and checking a record does.
_SEARCHED_CHAIN = 4


async def _kept_records(
    log: Log,
    topic: str,
    ends: Mapping[int, int],
    kept: _Kept,
    may_be_wanted: Callable[[bytes], bool],
) -> AsyncIterator[LoggedRecord]:
    """The records ``kept`` keeps, up to ``ends``, each partition in offset order, of
    those whose value ``may_be_wanted`` (a test of the bytes that never refuses a
    wanted one: the rest are passed over undecoded, most of a history's time)."""
    async for batch in log.read(topic, partitions=sorted(ends), until=dict(ends)):
        for log_record in batch:
            value = log_record.value
            # Only bytes are searched: a log of one's own that hands out memoryviews
            # (whose `in` compares integers, and so finds nothing) has every record
            # decoded and judged so.
            if type(value) is bytes and not may_be_wanted(value):
                continue
            logged = kept(log_record)
            if logged is not None:
                yield logged


class MemorySnapshot:
    """A namespace's memory as it stood at a past moment (see `MemoryHandle.as_of`).

    ``positions`` maps each partition it read to the first offset it did not fold (what
    an auditor cites as "the log up to here"); ``as_of_ms`` is the moment asked for, or
    None for positions. Its `recall` ranks as a folded recall of the handle that took it
    does: by meaning too, with that handle's embedder (None: by words alone).
    """

    def __init__(
        self,
        state: MemoryState,
        *,
        as_of_ms: int | None,
        positions: dict[int, int],
        tenant: str | None = None,
        now_ms: int | None = None,
        embedder: Embedder | None = None,
    ):
        self._state = state
        self._embedder = embedder
        # Expiry is judged at the snapshot's moment (its newest record's time, for
        # positions), so an item that expired since still shows.
        self._now_ms = now_ms
        #: The tenant of the handle that took the snapshot (None: chosen per call).
        self.tenant = tenant
        self.as_of_ms = as_of_ms
        self.positions = positions

    def __repr__(self) -> str:
        return (
            f"MemorySnapshot(namespace={shown(self._state.namespace)}, "
            f"as_of_ms={self.as_of_ms}, positions={self.positions})"
        )

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
        min_similarity: float | None = None,
    ) -> list[MemoryItem]:
        """What a recall with these arguments would have returned at the snapshot's
        moment: the same order, scores and signals as the handle's folded recall then.

        >>> then = await memory.as_of(receipt)                          # doctest: +SKIP
        >>> await then.recall(text="who rotates keys?", strategy="hybrid")  # doctest: +SKIP
        """
        where = ItemFilter.build(
            tenant=resolve_tenant(self.tenant, tenant),
            now_ms=self._now_ms,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
            kind=kind,
        )
        strategy = validate_strategy(strategy)
        validate_limit(limit)
        text = query_text(text)
        validate_min_similarity(min_similarity, strategy)
        vector = await query_vector(self._embedder, strategy, text)
        label = self._embedder.label if self._embedder is not None else None
        return self._state.recall(
            where.read_by(label, strategy, text, vector),
            strategy=strategy,
            text=text,
            limit=limit,
            query_vector=vector,
            embedder=label,
            min_similarity=min_similarity,
        )

    def fetch(self, key: str, *, tenant: str | None = None) -> NamedItem | None:
        return self._state.named_item(validate_key(key), tenant=resolve_tenant(self.tenant, tenant))

    def named(
        self, prefix: str = "", *, tenant: str | None = None, limit: int | None = None
    ) -> list[NamedItem]:
        """The named items whose key starts with ``prefix`` as they stood at the
        snapshot's moment, by key (the first ``limit`` when given), as the handle's
        `named` lists them now.

        >>> [item.key for item in (await memory.as_of(receipt)).named("user:")]  # doctest: +SKIP
        ['user:1']
        """
        listing(prefix, limit)
        items = self._state.named_items(tenant=resolve_tenant(self.tenant, tenant), prefix=prefix)
        return items if limit is None else items[:limit]


async def snapshot(
    log: Log,
    topic: str,
    namespace: str,
    at: AsOf,
    *,
    tenant: str | None = None,
    embedder: Embedder | None = None,
) -> MemorySnapshot:
    """Fold a namespace up to a moment:

    - a receipt (`Appended`): just after that write. Exact in the write's partition
      (everything up to and including it); in other partitions, the records appended
      at or before its append time.
    - positions (partition -> first offset not folded): exactly those records;
      partitions left out are not read.
    - a datetime, seconds (float) or milliseconds (int): the records appended at or
      before it. Two records in one millisecond are told apart only by a receipt or
      positions.
    """
    namespace = validate_name(namespace, "namespace")
    tenant = _tenant_or_none(tenant)
    by_receipt = isinstance(at, Appended) or (
        isinstance(at, tuple) and bool(at) and all(isinstance(r, Appended) for r in at)
    )
    # What needs no topic is checked before the topic is asked for: bad input is told
    # what is wrong with it, not that the topic does not exist.
    # (A receipt's fields are checked against the topic's shape, below.)
    as_of_ms: int | None = None
    if isinstance(at, Mapping):
        for partition, offset in at.items():
            if (
                not isinstance(partition, int)
                or not isinstance(offset, int)
                or isinstance(offset, bool)
                or offset < 0
            ):
                raise InvalidInput(
                    "positions map each partition (an int) to the first offset not included "
                    f"(an int from 0), got {shown(dict(at))}"
                )
    elif not by_receipt:
        as_of_ms = to_millis(at)
    last: dict[int, int] = {}  # a receipt's partitions -> its last offset folded
    info = await log.describe_topic(topic)
    # A snapshot for one tenant folds that tenant's records only (it answers no other),
    # passing over the rest by their tenant header as a bound handle's fold does.
    state = MemoryState(namespace, topic=topic, generation=info.generation, tenant=tenant)
    if by_receipt:
        # One write's receipts (a remember that supersedes has two): exact in their
        # partitions, by the latest of their times elsewhere.
        receipts = (at,) if isinstance(at, Appended) else at
        for receipt in receipts:
            if receipt.topic != topic:
                raise InvalidInput(
                    f"the receipt is for topic {shown(receipt.topic)}, not {shown(topic)}"
                )
            receipt_fields(receipt, info.partitions)
            if receipt.generation and receipt.generation != info.generation:
                raise InvalidInput(
                    f"the receipt is for generation {receipt.generation} of {shown(topic)}, which "
                    "was deleted since; there is no past of it to read"
                )
        as_of_ms = max(r.append_time_ms for r in receipts)
        for receipt in receipts:
            last[receipt.partition] = max(last.get(receipt.partition, -1), receipt.offset)
    if isinstance(at, Mapping):
        reading = log.read(topic, partitions=sorted(at), until=dict(at))
    else:
        # Where the log can tell, the read stops at the moment: a snapshot of an early
        # moment of a long log reads what came before it, not the whole log.
        bounds = await _ends_at(log, topic, as_of_ms)
        if bounds is None:
            reading = log.read(topic)
        else:
            for partition, offset in last.items():
                bounds[partition] = offset + 1
            reading = log.read(topic, partitions=sorted(bounds), until=bounds)
    # Folded as read, each partition in offset order as every fold reads it: the state
    # is the same whatever order partitions come in, and nothing but it is held (the
    # records were gathered and sorted first, 1.4 KB each).
    positions: dict[int, int] = {}
    newest = None
    async for batch in reading:
        for log_record in batch:
            header, _, _ = read_headers(log_record.headers)
            if header is not None and header != namespace:
                continue
            if log_record.partition in last:  # a receipt's partition: exact
                if log_record.offset > last[log_record.partition]:
                    continue
            elif as_of_ms is not None and log_record.append_time_ms > as_of_ms:
                continue
            state.apply(log_record)
            positions[log_record.partition] = log_record.offset + 1
            if newest is None or log_record.append_time_ms > newest:
                newest = log_record.append_time_ms
    return MemorySnapshot(
        state,
        as_of_ms=as_of_ms,
        positions=positions,
        tenant=tenant,
        now_ms=as_of_ms if as_of_ms is not None else newest,
        embedder=embedder,
    )
