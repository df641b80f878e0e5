"""The log port: the one interface both logs implement.

A log holds topics; a topic holds partitions; a partition is an ordered,
append-only sequence of records at dense offsets 0, 1, 2, ... Each record has
the time the log appended it (milliseconds since the Unix epoch, never
decreasing within a partition), a key, a value and headers.

Both `LocalLog` and `KafkaLog` place a keyed record with Kafka's default
partitioner (murmur2 of the key), so a client knows a key's partition without
asking the log. The conformance suite in ``tests/log_conformance.py`` runs the
same tests over both.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "Appended",
    "Log",
    "LogRecord",
    "OutgoingRecord",
    "Position",
    "TopicInfo",
    "record_size",
]

#: The largest record (key, value and headers) either log takes unless configured
#: otherwise; Kafka topics are created to hold records this large.
DEFAULT_MAX_RECORD_BYTES = 2 << 20


class Position(msgspec.Struct, frozen=True, order=True):
    """Where a record sits: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


class OutgoingRecord(msgspec.Struct, frozen=True, gc=False):
    """A record to append. ``partition=None`` lets the partitioner place it by key.

    Untracked by the garbage collector (every write makes one per record; GC passes
    were a fifth of 1,000 concurrent remembers): its fields are bytes, an int and
    (str, bytes) pairs, which hold no cycle. Headers given as a list that contains
    the record itself would; appends refuse such headers, and the pair leaks."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None


def record_size(record: OutgoingRecord) -> int:
    """The bytes a record carries: key, value and headers (names and values)."""
    size = len(record.value) + (len(record.key) if record.key is not None else 0)
    headers = record.headers
    known = _CHECKED_HEADERS.get(id(headers))
    if known is not None and known[0] is headers:
        return size + known[1]
    for name, value in headers:
        size += _name_bytes(name) + len(value)
    return size


#: Header tuples already found well formed, by identity, with their size. The encoder
#: hands out the same tuple for every record of a conversation, so most records skip
#: the check. Each entry holds its tuple, so its id is not reused while it is here; a
#: tuple of (str, bytes) tuples cannot change.
_CHECKED_HEADERS: dict[int, tuple[tuple[tuple[str, bytes], ...], int]] = {}


def checked_headers_size(headers: object) -> int | None:
    """The bytes of well-formed headers (a tuple or list of (str, bytes) pairs), or
    None when they are not well formed."""
    known = _CHECKED_HEADERS.get(id(headers))
    if known is not None and known[0] is headers:
        return known[1]
    if not isinstance(headers, tuple | list):
        return None
    size = 0
    for header in headers:
        if (
            not isinstance(header, tuple)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not isinstance(header[1], bytes)
        ):
            return None
        size += _name_bytes(header[0]) + len(header[1])
    if type(headers) is tuple and all(type(header) is tuple for header in headers):
        if len(_CHECKED_HEADERS) >= 1 << 14:  # a set per tenant: tenants are many
            _CHECKED_HEADERS.clear()
        _CHECKED_HEADERS[id(headers)] = (headers, size)
    return size


@functools.lru_cache(maxsize=256)
def _name_bytes(name: str) -> int:
    # Header names are a few constants: measured once each, not on every record.
    return len(name.encode("utf-8", "surrogatepass"))


class Appended(msgspec.Struct, frozen=True, gc=False):
    """What an append returns for one record: its position, its append time, and the
    generation of the topic it went to (so a receipt from a topic that was since deleted
    and created again is told apart). Untracked by the garbage collector (strings and
    ints only): a large batch makes one per record."""

    topic: str
    partition: int
    offset: int
    append_time_ms: int
    generation: str = ""

    @property
    def position(self) -> Position:
        return Position(self.topic, self.partition, self.offset)


#: The header of a record a log holds but could not read back whole (the embedded log's
#: stored entry damaged on disk): its value is empty, its key None, and this header
#: holds what failed. A fold sets such a record aside, saying so, and goes on.
UNREADABLE_HEADER = "lm-unreadable"


class LogRecord(msgspec.Struct, frozen=True, gc=False):
    """A record read from the log."""

    topic: str
    partition: int
    offset: int
    append_time_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    @property
    def position(self) -> Position:
        return Position(self.topic, self.partition, self.offset)


class TopicInfo(msgspec.Struct, frozen=True):
    """A topic's shape. ``generation`` differs between a topic and a topic of the same
    name created after it was deleted: the local log uses the creation time in
    nanoseconds, Kafka the topic id."""

    name: str
    partitions: int
    retention_s: float | None
    generation: str


@runtime_checkable
class Log(Protocol):
    """A partitioned, append-only log.

    Use it as an async context manager, or call `start()` and `stop()` (both safe
    to call twice)::

        async with connect("local://./laser-data") as log:
            await log.create_topic("events", partitions=3)
            [receipt] = await log.append_batch("events", [OutgoingRecord(b"hello", key=b"k")])
            async for batch in log.read("events"):
                ...
    """

    @property
    def url(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def create_topic(
        self, topic: str, *, partitions: int, retention_s: float | None = None
    ) -> TopicInfo:
        """Create a topic, or return it if it exists with this partition count.
        A topic of that name with another partition count raises `TopicConflict`."""
        ...

    async def delete_topic(self, topic: str) -> None:
        """Delete a topic and its records; raises `UnknownTopic` if there is none."""
        ...

    async def describe_topic(self, topic: str) -> TopicInfo:
        """A topic's shape and generation; raises `UnknownTopic`."""
        ...

    async def append(self, topic: str, record: OutgoingRecord) -> Appended:
        """Append one record durably and return where it went."""
        ...

    async def append_batch(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Appended]:
        """Append records durably, in order per partition; one receipt per record."""
        ...

    async def end_offsets(self, topic: str) -> dict[int, int]:
        """For each partition, the offset the next record will get."""
        ...

    def read(
        self,
        topic: str,
        start: Mapping[int, int] | None = None,
        *,
        partitions: Sequence[int] | None = None,
        until: Mapping[int, int] | None = None,
        follow: bool = False,
        max_batch: int = 1000,
    ) -> AsyncIterator[list[LogRecord]]:
        """Read a topic in batches, each batch from one partition in offset order.

        ``start`` maps partitions to the first offset to read (others start at 0);
        ``partitions`` limits the read to those partitions (default: all). Without
        ``follow`` the read ends at ``until`` (partitions -> first offset not read; a
        partition it leaves out is not read), or at the end offsets taken when it
        began, or sooner where records are gone; with ``follow`` it waits for new
        records until cancelled, or, given ``until`` too, until it has read up to it.
        """
        ...


@runtime_checkable
class TimeIndexedLog(Log, Protocol):
    """A log that finds where a moment falls in each partition: a replay of what was
    appended since then starts there instead of at the log's start. Both logs are
    one; a log of your own need not be (a replay then reads from the start)."""

    #: Whether a partition's append times never step back (the embedded log's never do;
    #: a Kafka partition's can, after its leader moved to a broker whose clock was
    #: behind). Then no record from ``offsets_for_time(topic, t)`` on was appended
    #: before ``t``, and a read of what was appended up to a moment can stop there.
    ordered_times: bool

    async def offsets_for_time(self, topic: str, time_ms: int) -> dict[int, int]:
        """For each partition, the first offset whose record was appended at or after
        ``time_ms`` (milliseconds since the epoch), or the partition's end offset if
        none was: every record before it was appended earlier."""
        ...
