"""`LocalLog`: the embedded default log, durable on one host, in one LMDB environment.

Layout of the environment (all integers big-endian, so LMDB's byte order is
offset order):

- ``topics``: topic name -> msgpack `_TopicMeta` (an internal topic number that
  is never reused, partition count, retention, generation).
- ``heads``: topic number (8 bytes) + partition (4) -> msgpack
  ``[next_offset, last_append_time_ms, first_offset]``.
- ``records``: topic number (8) + partition (4) + offset (8) -> msgpack
  ``[append_time_ms, key, value, headers]``.

Every append commits in one LMDB write transaction with ``sync`` on, so an
acknowledged record survives a process kill or power loss, and LMDB's
copy-on-write pages mean a reader never sees a torn record. Appends that arrive
together share one transaction (group commit): one durable commit costs far
more than thousands of puts inside it, so per-record commits would cap every
caller at the disk's sync rate.

Several processes on one host may open the same folder at once: LMDB
serialises writers with its lock file and readers never block. Within one
process all `LocalLog` objects on a folder share one environment, because
LMDB forbids opening an environment twice in a process.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import os
import struct
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb
import msgspec

from ..clock import SYSTEM_CLOCK, Clock, validate_clock
from ..doorkeeper import Doorkeeper
from ..errors import (
    ConfigError,
    InvalidRecord,
    LaserError,
    LogClosed,
    LogFull,
    LogUnavailable,
    TopicConflict,
    UnknownTopic,
    WriteTimeout,
    shown,
)
from ..lmdb_env import (
    SharedEnvironments,
    StaleReaders,
    check_map_size,
    folder_path,
    open_failure,
    real_folder,
    write_failure,
)
from .deadlines import Deadlines
from .lifecycle import LogLifecycle
from .naming import (
    check_settings,
    check_time_ms,
    check_topic_name,
    collides,
    collision,
    validate_outgoing,
    validate_partitions,
    validate_read,
    validate_topic,
)
from .partitioner import partition_for
from .port import (
    DEFAULT_MAX_RECORD_BYTES,
    UNREADABLE_HEADER,
    Appended,
    LogRecord,
    OutgoingRecord,
    TopicInfo,
)

__all__ = ["LocalLog", "LocalLogConfig"]

_U64 = 8
_OFFSET = struct.Struct(">Q").pack  # an offset as its key's last 8 bytes
_U32 = 4


@dataclass(frozen=True, slots=True)
class LocalLogConfig:
    """Settings of a `LocalLog`. Seconds are floats.

    ``map_size`` is the largest the environment may grow to (sparse on disk);
    ``poll_interval_s`` is how often a following reader checks for records written
    by other processes (records written in this process wake it at once);
    ``max_group_records`` caps how many records one group commit carries;
    ``max_record_bytes`` is the largest record (key, value, headers) an append takes;
    ``write_timeout_s`` is how long an append may wait for its commit before it raises
    `WriteTimeout` (None: no limit). With ``create=False`` a folder that holds no log
    is refused with `LogUnavailable` instead of made: readers pass it, so a mistyped
    path creates nothing. ``clock`` stamps append times (they never decrease within a
    partition, whatever it says) and drives retention; tests step it.
    """

    map_size: int = 64 << 30
    poll_interval_s: float = 0.05
    max_group_records: int = 50_000
    sync: bool = True
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    write_timeout_s: float | None = 30.0
    create: bool = True
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        check_settings(
            self,
            positive_ints=("map_size", "max_group_records", "max_record_bytes"),
            positive_seconds=("poll_interval_s",),
            bools=("sync", "create"),
            optional_seconds=("write_timeout_s",),
        )
        check_map_size(self.map_size, "LocalLogConfig.map_size")
        # Every reading checked: the commit stamps append times from it.
        object.__setattr__(self, "clock", validate_clock(self.clock))


class _TopicMeta(msgspec.Struct, frozen=True, array_like=True):
    number: int
    partitions: int
    retention_s: float | None
    generation: str


_meta_decoder = msgspec.msgpack.Decoder(_TopicMeta)
_head_decoder = msgspec.msgpack.Decoder(tuple[int, int, int])
# A read takes the headers' bytes as they are stored and decodes each distinct set once.
_read_decoder = msgspec.msgpack.Decoder(tuple[int, bytes | None, bytes, msgspec.Raw])
_headers_decoder = msgspec.msgpack.Decoder(tuple[tuple[str, bytes], ...])
_encoder = msgspec.msgpack.Encoder()
# Headers repeat (a topic's records carry a few namespaces and kinds): reads hand out
# one shared tuple per distinct set, by its stored bytes, so a batch waiting in a
# folder's queue holds no tuples of its own for the garbage collector to walk (which
# slowed the fold by a fifth), and a read makes no strings or tuples for a set it has met.
_SHARED_HEADERS: dict[bytes, tuple] = {}
# A set is one per namespace, record type and tenant: records of ten thousand tenants
# interleave on one topic, and 4,096 sets, cleared when full, were met afresh at nearly
# every record of them (the fold of such a log ran at half its rate). Sets over 1 KiB
# are not kept, so the sets kept hold at most about 20 MB.
_MAX_SHARED_HEADERS = 1 << 14
_MAX_SHARED_HEADER_BYTES = 1024
# Once the sets overflow, one is kept from its second reading on (one met once only made
# the collector's walks longer; see `laser_memory.doorkeeper`).
_SHARED_HEADERS_MET = Doorkeeper()
_NEXT_TOPIC_NUMBER = b"\x00next-topic-number"


@dataclass(slots=True)
class _AppendRequest:
    topic: str
    records: Sequence[OutgoingRecord]
    future: asyncio.Future[list[Appended]]


def _log_records(
    topic: str, partition: int, stored: Iterable[tuple[int, bytes]]
) -> list[LogRecord]:
    """The records of one partition from their offsets and stored envelopes."""
    out: list[LogRecord] = []
    append = out.append
    # Neighbours mostly carry the same headers: compared as stored (no copy, no hash)
    # with the last record's before they are looked up.
    last_raw: msgspec.Raw | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    append_time = 0
    for offset, value in stored:
        try:
            append_time, key, record_value, raw_headers = _read_decoder.decode(value)
            if raw_headers != last_raw:
                packed = bytes(raw_headers)
                headers = _SHARED_HEADERS.get(packed)
                if headers is None:
                    headers = _headers_decoder.decode(packed)
                    if len(packed) <= _MAX_SHARED_HEADER_BYTES:
                        _SHARED_HEADERS_MET.keep(
                            _SHARED_HEADERS, packed, headers, _MAX_SHARED_HEADERS
                        )
                last_raw = raw_headers
        except msgspec.DecodeError as exc:
            # Damaged on disk (LMDB keeps no checksum of what it stores): failing the
            # read stopped every fold of the topic for good, with a raw DecodeError.
            # Handed on empty with the reason, it is set aside as a bad record is. Its
            # own time is lost: its neighbour's stands in (times never go back in a
            # partition), so it sorts where it was.
            append(_unreadable(topic, partition, offset, append_time, exc))
            last_raw = None
            continue
        append(LogRecord(topic, partition, offset, append_time, key, record_value, headers))
    return out


def _unreadable(
    topic: str, partition: int, offset: int, append_time: int, exc: Exception
) -> LogRecord:
    return LogRecord(
        topic, partition, offset, append_time, None, b"", ((UNREADABLE_HEADER, str(exc).encode()),)
    )


def _stored_time(value: bytes) -> int | None:
    """A stored record's append time, or None if its bytes are damaged."""
    try:
        return _read_decoder.decode(value)[0]
    except msgspec.DecodeError:
        return None


def _head_key(number: int, partition: int) -> bytes:
    return number.to_bytes(_U64, "big") + partition.to_bytes(_U32, "big")


def _record_key(number: int, partition: int, offset: int) -> bytes:
    return _head_key(number, partition) + offset.to_bytes(_U64, "big")


class LocalLog(LogLifecycle):
    """The embedded log: partitioned topics in an LMDB environment in ``path``.

    >>> async with LocalLog("./laser-data") as log:       # doctest: +SKIP
    ...     await log.create_topic("events", partitions=4)
    """

    def __init__(self, path: str | os.PathLike[str], config: LocalLogConfig | None = None):
        what = "a local log's path"
        self._path = real_folder(folder_path(path, what), what)
        if config is not None and not isinstance(config, LocalLogConfig):
            raise ConfigError(f"config is a LocalLogConfig or None, got {type(config).__name__}")
        self._config = config or LocalLogConfig()
        self._env: lmdb.Environment | None = None
        self._dbs: dict = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # Appends not yet in a commit, and whether a commit is under way on the writer
        # thread (see `_start_commit`); `_idle` is set when neither is left.
        self._pending: collections.deque[_AppendRequest] = collections.deque()
        self._committing = False
        self._idle: asyncio.Event | None = None
        self._appended = asyncio.Event()
        self._commits = 0
        # Appends waiting for their commit, by deadline (one timeout for all: in order),
        # and the one timer that fails those past it.
        self._deadlines: Deadlines[asyncio.Future] | None = (
            None
            if self._config.write_timeout_s is None
            else Deadlines(self._config.write_timeout_s, self._expire_append)
        )

    @property
    def url(self) -> str:
        return f"local://{self._path}"

    @property
    def path(self) -> str:
        return self._path

    @property
    def commits(self) -> int:
        """Append transactions this log committed; less than the appends when they were
        grouped."""
        return self._commits

    def _describe(self) -> str:
        return f"LocalLog at {self._path}"

    async def _open(self) -> None:
        """Open the environment and start the group-commit writer."""
        # One stat, where opening LMDB right after blocks far longer.
        data_file = os.path.join(self._path, "data.mdb")
        if not self._config.create and not os.path.isfile(data_file):  # noqa: ASYNC240
            raise LogUnavailable(
                f"there is no log at {self._path}; check the path in the URL (a read never "
                "creates a log; the first write does)"
            )
        try:
            self._env, self._dbs = SharedEnvironments.acquire(
                self._path,
                ("topics", "heads", "records"),
                map_size=self._config.map_size,
                sync=self._config.sync,
                what="a local log",
            )
        except (lmdb.Error, OSError) as exc:
            raise LogUnavailable(
                f"cannot open the local log at {self._path}: "
                f"{open_failure(exc, 'restore the folder from a copy')}"
            ) from exc
        self._stale_readers = StaleReaders(self._env)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="laser-local-log"
        )
        self._idle = asyncio.Event()
        self._idle.set()

    async def _close(self) -> None:
        """Finish pending appends, stop the writer and release the environment."""
        assert self._idle is not None
        try:
            await self._idle.wait()
        finally:
            # Only if this wait was cancelled are appends left: they are never written.
            self._fail_pending()
            if self._deadlines is not None:
                self._deadlines.close()
            assert self._executor is not None
            self._executor.shutdown(wait=True)
            SharedEnvironments.release(self._path)
            self._env = None
            self._appended.set()

    def _abandon(self) -> None:
        # The loop that started the log has ended, and with it every caller waiting for
        # an append. The thread and the environment are this process's, released here.
        self._pending.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._env is not None:
            SharedEnvironments.release(self._path)
            self._env = None

    def _require_started(self) -> lmdb.Environment:
        self._check_started()
        assert self._env is not None
        return self._env

    # -- topics --------------------------------------------------------------

    def _meta(self, txn: lmdb.Transaction, topic: str) -> _TopicMeta:
        raw = txn.get(topic.encode(), db=self._dbs["topics"])
        if raw is None:
            raise UnknownTopic(
                f"topic {shown(topic)} does not exist in the local log at {self._path}; "
                "create it first (for the memory topic: 'laser-memory bootstrap')"
            )
        return self._stored(_meta_decoder, raw, topic)

    def _stored(
        self,
        decoder: msgspec.msgpack.Decoder,
        raw: bytes | None,
        topic: str,
        partition: int | None = None,
    ) -> Any:
        """What the log stores of a topic (its entry) or of one of its partitions (its
        head), decoded; damaged bytes (LMDB keeps no checksum) are `LogUnavailable`, not
        a raw DecodeError from every read and write of the topic. The message is made
        only then: this runs on every append and read."""
        try:
            return decoder.decode(raw)
        except (msgspec.DecodeError, TypeError) as exc:
            what = (
                f"the entry of topic {shown(topic)}"
                if partition is None
                else f"the head of partition {partition} of topic {shown(topic)}"
            )
            raise LogUnavailable(
                f"the local log at {self._path} could not read {what}: {exc}; its file may "
                "be damaged: restore the folder from a copy"
            ) from None

    def _info(self, topic: str, meta: _TopicMeta) -> TopicInfo:
        return TopicInfo(topic, meta.partitions, meta.retention_s, meta.generation)

    async def create_topic(
        self, topic: str, *, partitions: int, retention_s: float | None = None
    ) -> TopicInfo:
        validate_topic(topic)
        validate_partitions(partitions, retention_s)
        self._require_started()
        return await self._run_write(self._create_topic_txn, topic, partitions, retention_s)

    def _create_topic_txn(
        self, topic: str, partitions: int, retention_s: float | None
    ) -> TopicInfo:
        assert self._env is not None
        with self._env.begin(write=True) as txn:
            raw = txn.get(topic.encode(), db=self._dbs["topics"])
            if raw is not None:
                meta = self._stored(_meta_decoder, raw, topic)
                if meta.partitions != partitions:
                    raise TopicConflict(
                        f"topic {shown(topic)} exists with {meta.partitions} partitions, not "
                        f"{partitions}; use the existing count or delete the topic first"
                    )
                if meta.retention_s != retention_s:
                    kept = "forever" if meta.retention_s is None else f"{meta.retention_s:g}s"
                    raise TopicConflict(
                        f"topic {shown(topic)} exists with retention {kept}, not "
                        f"{'forever' if retention_s is None else f'{retention_s:g}s'}; pass "
                        "its retention, or delete the topic first"
                    )
                return self._info(topic, meta)
            for name in txn.cursor(db=self._dbs["topics"]).iternext(values=False):
                other = bytes(name).decode("utf-8", "replace")
                if collides(topic, other):
                    raise collision(topic, other)
            counter = txn.get(_NEXT_TOPIC_NUMBER, db=self._dbs["topics"])
            number = int(counter) if counter is not None else 1
            txn.put(_NEXT_TOPIC_NUMBER, str(number + 1).encode(), db=self._dbs["topics"])
            meta = _TopicMeta(number, partitions, retention_s, str(time.time_ns()))
            txn.put(topic.encode(), _encoder.encode(meta), db=self._dbs["topics"])
            for partition in range(partitions):
                txn.put(
                    _head_key(number, partition),
                    _encoder.encode((0, 0, 0)),
                    db=self._dbs["heads"],
                )
            return self._info(topic, meta)

    async def delete_topic(self, topic: str) -> None:
        check_topic_name(topic)
        self._require_started()
        await self._run_write(self._delete_topic_txn, topic)

    def _delete_topic_txn(self, topic: str) -> None:
        assert self._env is not None
        with self._env.begin(write=True) as txn:
            meta = self._meta(txn, topic)
            txn.delete(topic.encode(), db=self._dbs["topics"])
            prefix = meta.number.to_bytes(_U64, "big")
            for db in (self._dbs["records"], self._dbs["heads"]):
                cursor = txn.cursor(db=db)
                if cursor.set_range(prefix):
                    while cursor.key().startswith(prefix):
                        if not cursor.delete():
                            break

    @contextlib.contextmanager
    def _reading(self) -> Iterator[lmdb.Transaction]:
        """A read transaction; LMDB's failures in it (a damaged file) as `LogUnavailable`."""
        env = self._require_started()
        try:
            with env.begin() as txn:
                yield txn
        except lmdb.Error as exc:
            raise LogUnavailable(
                f"the local log at {self._path} could not be read: {exc}; its file may be "
                "damaged: restore the folder from a copy"
            ) from exc

    async def describe_topic(self, topic: str) -> TopicInfo:
        check_topic_name(topic)
        with self._reading() as txn:
            return self._info(topic, self._meta(txn, topic))

    async def end_offsets(self, topic: str) -> dict[int, int]:
        check_topic_name(topic)
        with self._reading() as txn:
            meta = self._meta(txn, topic)
            return {
                p: self._stored(
                    _head_decoder,
                    txn.get(_head_key(meta.number, p), db=self._dbs["heads"]),
                    topic,
                    p,
                )[0]
                for p in range(meta.partitions)
            }

    #: A partition's append times never step back here (each is the latest of the clock
    #: and the one before): see `TimeIndexedLog`.
    ordered_times = True

    async def offsets_for_time(self, topic: str, time_ms: int) -> dict[int, int]:
        """For each partition, the first offset whose record was appended at or after
        ``time_ms``, or its end offset if none was (see `TimeIndexedLog`). Append times
        never go back in a partition here, so each partition is a binary search of its
        offsets: a few reads, however long it is."""
        check_topic_name(topic)
        time_ms = check_time_ms(time_ms)
        with self._reading() as txn:
            meta = self._meta(txn, topic)
            out = {}
            for partition in range(meta.partitions):
                raw_head = txn.get(_head_key(meta.number, partition), db=self._dbs["heads"])
                head, last_time, low = self._stored(_head_decoder, raw_head, topic, partition)
                if last_time < time_ms:  # after the partition's last record: nothing to search
                    out[partition] = head
                    continue
                cursor = txn.cursor(db=self._dbs["records"])
                # The answer lies in [low, high]; every record from high on is at or after.
                high = head
                while low < high:
                    middle = (low + high) // 2
                    found = self._readable_time(cursor, meta, partition, middle, high)
                    if found is None or found[1] >= time_ms:
                        # Damaged records (their time unknown) between the middle and the
                        # first readable one are taken as later: a replay keeps them.
                        high = middle
                    else:
                        low = found[0] + 1
                out[partition] = low
            return out

    @staticmethod
    def _readable_time(
        cursor: lmdb.Cursor, meta: _TopicMeta, partition: int, first: int, end: int
    ) -> tuple[int, int] | None:
        """The offset and append time of the first record from ``first`` to ``end``
        whose time can be read, or None."""
        prefix = _head_key(meta.number, partition)
        if not cursor.set_range(_record_key(meta.number, partition, first)):
            return None
        for key, value in cursor:
            offset = int.from_bytes(key[-_U64:], "big")
            if not key.startswith(prefix) or offset >= end:
                return None
            append_time = _stored_time(value)
            if append_time is not None:
                return offset, append_time
        return None

    # -- appends -------------------------------------------------------------

    async def append(self, topic: str, record: OutgoingRecord) -> Appended:
        [receipt] = await self.append_batch(topic, [record])
        return receipt

    async def append_batch(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Appended]:
        check_topic_name(topic)
        self._require_started()
        validate_outgoing(records, self._config.max_record_bytes)
        if not records:
            return []
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Appended]] = loop.create_future()
        self._pending.append(_AppendRequest(topic, list(records), future))
        if not self._committing:
            self._start_commit(loop)
        if self._deadlines is not None:
            # One timer for every waiting append (one each cost a fifth of a small
            # append): past its deadline an append fails; a commit under way finishes.
            self._deadlines.add(future)
        return await future

    def _expire_append(self, future: asyncio.Future) -> None:
        future.set_exception(
            WriteTimeout(
                f"the local log at {self._path} did not commit the append within "
                f"{self._config.write_timeout_s}s; it may or may not have landed: "
                "read before writing it again"
            )
        )

    async def _run_write(self, fn, *args):
        """Run a write transaction on the writer thread, where LMDB's write lock lives."""
        assert self._executor is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except lmdb.Error as exc:
            raise self._write_error(exc) from exc

    def _write_error(self, exc: lmdb.Error) -> LaserError:
        if isinstance(exc, lmdb.MapFullError):
            # Not "unavailable": a retry fails the same way until the map is larger.
            map_size = self._env.info()["map_size"] if self._env is not None else "its"
            return LogFull(
                f"the local log at {self._path} is full: it reached its map size of "
                f"{map_size} bytes, and nothing of this write was written. Open "
                "it with a larger map (LocalLog(path, LocalLogConfig(map_size=BYTES))); the "
                "map is sparse on disk, so a larger one costs nothing until it is used"
            )
        return LogUnavailable(f"local log at {self._path} failed: {write_failure(self._path, exc)}")

    # Group commit. The appends waiting when a commit starts go into it together; those
    # made while it runs wait for the next, started the moment it ends. A commit is
    # handed to the writer thread by the append that finds none under way, and the
    # thread hands its outcome straight back to the loop (`_committed`), which resolves
    # the appends' futures: a writer task between them cost a sequential durable
    # append two more turns of the loop, a fifth of its time.

    def _start_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the waiting appends, up to ``max_group_records`` records, to the writer
        thread as one commit."""
        assert self._executor is not None and self._idle is not None
        pending = self._pending
        group = [pending.popleft()]
        count = len(group[0].records)
        while pending and count < self._config.max_group_records:
            request = pending.popleft()
            group.append(request)
            count += len(request.records)
        self._committing = True
        self._idle.clear()
        self._executor.submit(self._commit_on_thread, loop, group)

    def _commit_on_thread(self, loop: asyncio.AbstractEventLoop, group: list) -> None:
        outcome: list[list[Appended] | Exception] | BaseException
        try:
            outcome = self._commit_group(group)
        except BaseException as exc:  # handed to the callers, never lost
            outcome = exc
        # Nothing here may raise before the hand-over: a commit never handed back would
        # leave its appends, and stop(), waiting for ever.
        try:
            loop.call_soon_threadsafe(self._committed, group, outcome)
        except RuntimeError:
            # The loop has closed: every caller that waited for this commit is gone.
            pass

    def _committed(
        self, group: list[_AppendRequest], outcome: list[list[Appended] | Exception] | BaseException
    ) -> None:
        """On the loop: a commit ended. The next starts before this one's callers are
        told, so the disk does not wait for them."""
        self._committing = False
        if self._pending:
            if self._env is None:  # stopped under a cancelled stop(): nothing more is written
                self._fail_pending()
            else:
                self._start_commit(asyncio.get_running_loop())
        if isinstance(outcome, BaseException):
            if isinstance(outcome, lmdb.Error):
                cause, outcome = outcome, self._write_error(outcome)
                outcome.__cause__ = cause
            for request in group:
                if not request.future.done():
                    request.future.set_exception(outcome)
        else:
            for request, result in zip(group, outcome, strict=True):
                if request.future.done():
                    continue
                if isinstance(result, BaseException):
                    request.future.set_exception(result)
                else:
                    request.future.set_result(result)
            self._commits += 1
            self._appended.set()
            self._appended = asyncio.Event()
        if not self._committing and self._idle is not None:
            self._idle.set()

    def _fail_pending(self) -> None:
        """Fail the appends no commit took: the log stopped (a stop() that was cancelled
        while it waited for them), so they are never written."""
        exc = LogClosed(
            f"the local log at {self._path} was stopped before this append was committed; "
            "nothing of it was written"
        )
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(exc)

    def _commit_group(self, group: list[_AppendRequest]) -> list[list[Appended] | Exception]:
        """One durable transaction for every request in the group."""
        assert self._env is not None
        self._stale_readers.clear()
        results: list[list[Appended] | Exception] = []
        heads_db, records_db = self._dbs["heads"], self._dbs["records"]
        # The loops below run once per record of every write, and a group of concurrent
        # remembers is a thousand requests of one record: what they need is looked up
        # once per topic (its head and key prefix once per partition), as the rest of
        # an append costs about as much as the put.
        with self._env.begin(write=True) as txn:
            topics: dict[str, tuple[_TopicMeta, dict[int, tuple[list[int], bytes]]] | Exception]
            topics = {}
            heads: dict[tuple[int, int], list[int]] = {}
            now_ms = self._config.clock.now_ms()
            # A cursor kept for the transaction: its put skips the argument parsing and
            # cursor set-up of each ``txn.put`` (about a third of a put's cost).
            put, encode = txn.cursor(db=records_db).put, _encoder.encode
            # Each distinct headers tuple encoded once a group (a writer shares one per
            # namespace, operation and tenant), then copied into every envelope as is.
            packed: dict[int, msgspec.Raw] = {}
            for request in group:
                topic, records = request.topic, request.records
                state = topics.get(topic)
                if state is None:
                    try:
                        state = (self._meta(txn, topic), {})
                    except (UnknownTopic, LogUnavailable) as exc:  # this topic's writers only
                        state = exc
                    topics[topic] = state
                if isinstance(state, Exception):
                    results.append(state)
                    continue
                meta, at = state
                try:
                    by_partition = self._placed(records, meta)
                except InvalidRecord as exc:
                    results.append(exc)
                    continue
                number, generation = meta.number, meta.generation
                receipts: list = [None] * len(records)
                # A partition's records at a time: its head, key prefix and append time
                # (the same for all of them: the clock is read once a commit) are looked
                # up once, and each record costs its envelope, its put and its receipt.
                for partition, indexes in by_partition.items():
                    known = at.get(partition)
                    if known is None:
                        head = heads[(number, partition)] = list(
                            self._stored(
                                _head_decoder,
                                txn.get(_head_key(number, partition), db=heads_db),
                                topic,
                                partition,
                            )
                        )
                        known = at[partition] = (head, _head_key(number, partition))
                    head, prefix = known
                    offset = head[0]
                    append_time = now_ms if now_ms > head[1] else head[1]
                    last_headers: object = None
                    raw_headers = None
                    for index in indexes:
                        record = records[index]
                        headers = record.headers
                        if headers is not last_headers:
                            raw_headers = packed.get(id(headers))
                            if raw_headers is None:
                                raw_headers = packed[id(headers)] = msgspec.Raw(encode(headers))
                            last_headers = headers
                        put(
                            prefix + _OFFSET(offset),
                            encode((append_time, record.key, record.value, raw_headers)),
                        )
                        receipts[index] = Appended(
                            topic, partition, offset, append_time, generation
                        )
                        offset += 1
                    head[0] = offset
                    head[1] = append_time
                results.append(receipts)
            for state in topics.values():
                if isinstance(state, tuple) and state[0].retention_s is not None:
                    self._expire(txn, state[0], heads, now_ms)
            for (number, partition), head in heads.items():
                txn.put(_head_key(number, partition), _encoder.encode(tuple(head)), db=heads_db)
        return results

    @staticmethod
    def _placed(records: list[OutgoingRecord], meta: _TopicMeta) -> dict[int, list[int]]:
        """The records' indexes by the partition each goes to, in record order. Records
        of a batch mostly share a key object (a writer's are cached), placed once."""
        partitions = meta.partitions
        out: dict[int, list[int]] = {}
        last_key: object = out  # no key is this
        partition = 0
        for index, record in enumerate(records):
            if record.partition is None:
                key = record.key
                if key is not last_key or key is None:
                    partition = partition_for(key, partitions)
                    last_key = key
                placed = partition
            else:
                placed = record.partition
                if not 0 <= placed < partitions:
                    raise InvalidRecord(
                        f"partition {placed} does not exist; the topic has "
                        f"{partitions} partitions (0 to {partitions - 1})"
                    )
            indexes = out.get(placed)
            if indexes is None:
                out[placed] = [index]
            else:
                indexes.append(index)
        return out

    def _expire(
        self,
        txn: lmdb.Transaction,
        meta: _TopicMeta,
        heads: dict[tuple[int, int], list[int]],
        now_ms: int,
    ) -> None:
        """Drop records older than the retention from the partitions this commit touched.
        Bounded per commit so one commit never turns into a long cleanup."""
        assert meta.retention_s is not None
        cutoff = now_ms - int(meta.retention_s * 1000)
        for (number, partition), head in heads.items():
            if number != meta.number:
                continue
            cursor = txn.cursor(db=self._dbs["records"])
            budget = 10_000
            prefix = _head_key(number, partition)
            if not cursor.set_range(_record_key(number, partition, head[2])):
                continue
            while budget and cursor.key().startswith(prefix):
                append_time = _stored_time(cursor.value())
                if append_time is None:
                    # A damaged record: no older than the next one that can be read
                    # (times never go back in a partition). Failing the decode here
                    # failed every commit to the topic from then on.
                    append_time = self._time_after(txn, cursor.key(), prefix, now_ms)
                if append_time >= cutoff:
                    break
                head[2] = int.from_bytes(cursor.key()[-_U64:], "big") + 1
                if not cursor.delete():
                    break
                budget -= 1

    def _time_after(self, txn: lmdb.Transaction, key: bytes, prefix: bytes, now_ms: int) -> int:
        """The append time of the first readable record after ``key`` in its partition,
        or ``now_ms`` if there is none."""
        cursor = txn.cursor(db=self._dbs["records"])
        if cursor.set_key(key):
            while cursor.next() and cursor.key().startswith(prefix):
                found = _stored_time(cursor.value())
                if found is not None:
                    return found
        return now_ms

    # -- reads ---------------------------------------------------------------

    async def read(
        self,
        topic: str,
        start: Mapping[int, int] | None = None,
        *,
        partitions: Sequence[int] | None = None,
        until: Mapping[int, int] | None = None,
        follow: bool = False,
        max_batch: int = 1000,
    ) -> AsyncIterator[list[LogRecord]]:
        check_topic_name(topic)
        with self._reading() as txn:
            meta = self._meta(txn, topic)
        chosen = validate_read(topic, meta.partitions, start, partitions, until, max_batch, follow)
        positions = {p: (start or {}).get(p, 0) for p in chosen}
        if not follow and until is None:
            until = await self.end_offsets(topic)
        while True:
            wake = self._appended
            progressed = False
            for partition in chosen:
                limit = None if until is None else until.get(partition, 0)
                if limit is not None and positions[partition] >= limit:
                    continue
                batch = self._read_partition(
                    meta, topic, partition, positions[partition], limit, max_batch
                )
                if batch:
                    positions[partition] = batch[-1].offset + 1
                    progressed = True
                    yield batch
            if until is not None and all(positions[p] >= until.get(p, 0) for p in chosen):
                return
            if not progressed:
                self._require_started()
                self._check_same_topic(topic, meta)
                if until is not None and not follow:
                    # Records below `until` are gone (retention deleted them).
                    return
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancel that races the wake-up, and a cancelled folder would never stop.
                try:
                    async with asyncio.timeout(self._config.poll_interval_s):
                        await wake.wait()
                except TimeoutError:
                    pass

    def _check_same_topic(self, topic: str, meta: _TopicMeta) -> None:
        """Raise `UnknownTopic` if the topic a read began on was deleted (and maybe
        created again: a topic of that name with another generation is another topic).
        A read that finds nothing asks: it would otherwise wait on a topic that is gone
        (following, for ever) or end early as if retention had dropped the rest."""
        with self._reading() as txn:
            raw = txn.get(topic.encode(), db=self._dbs["topics"])
        if (
            raw is not None
            and self._stored(_meta_decoder, raw, topic).generation == meta.generation
        ):
            return
        again = " and created again" if raw is not None else ""
        raise UnknownTopic(
            f"topic {shown(topic)} was deleted{again} while it was being read from the local "
            f"log at {self._path}; what was read came from the old topic"
        )

    def _read_partition(
        self,
        meta: _TopicMeta,
        topic: str,
        partition: int,
        offset: int,
        limit: int | None,
        max_batch: int,
    ) -> list[LogRecord]:
        prefix = _head_key(meta.number, partition)
        with self._reading() as txn:
            # A partition holds every offset from its first kept one to its head (an
            # append takes the next offset, retention drops the oldest first): a batch
            # is a run of values, read without their keys (a key and its offset parsed
            # for each record were a third of a read).
            raw_head = txn.get(prefix, db=self._dbs["heads"])
            if raw_head is None:
                return []
            head, _, low = self._stored(
                _head_decoder,
                raw_head,
                topic,
                partition,
            )
            first = max(offset, low)
            end = head if limit is None else min(head, limit)
            count = min(max_batch, end - first)
            if count <= 0:
                return []
            cursor = txn.cursor(db=self._dbs["records"])
            values: list[bytes] = []
            if cursor.set_key(_record_key(meta.number, partition, first)):
                values = list(itertools.islice(cursor.iternext(keys=False), count))
            if len(values) == count and cursor.key() == _record_key(
                meta.number, partition, first + count - 1
            ):
                return _log_records(topic, partition, enumerate(values, first))
            # Not a run (a log damaged outside this code): each key says its offset.
            return _log_records(
                topic, partition, self._scan(cursor, meta, partition, first, end, count)
            )

    @staticmethod
    def _scan(
        cursor: lmdb.Cursor, meta: _TopicMeta, partition: int, first: int, end: int, count: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``count`` (offset, value) pairs of the partition from ``first`` to
        ``end``, each offset read from its key."""
        prefix = _head_key(meta.number, partition)
        found: list[tuple[int, bytes]] = []
        if not cursor.set_range(_record_key(meta.number, partition, first)):
            return found
        for key, value in cursor:
            record_offset = int.from_bytes(key[-_U64:], "big")
            if not key.startswith(prefix) or record_offset >= end:
                break
            found.append((record_offset, value))
            if len(found) >= count:
                break
        return found
