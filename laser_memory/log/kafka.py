"""`KafkaLog`: the log on Apache Kafka, through aiokafka.

- Topics are created with ``message.timestamp.type=LogAppendTime``, so every
  record's time is the broker's append time, not the producer's clock.
- One idempotent producer with ``acks=all`` carries every append; appends made
  together are batched by the producer (``linger_s``) and each future resolves
  to the record's position and append time. An append that gives a partition many
  records sends them as record batches of their own (see `KafkaLog._send`).
- Reads assign partitions explicitly and seek (no consumer group): a fold owns
  its positions. Idle consumers are pooled, so an incremental read costs a
  fetch, not a new connection.
- A topic's generation is its Kafka topic id, which changes when a topic is
  deleted and created again.
- Topics are created with ``max.message.bytes`` large enough for the largest
  record the log takes (``max_record_bytes``), and a record too large for its
  topic is refused before anything is sent. Every append has a deadline
  (``write_timeout_s``); past it the append raises `WriteTimeout` (it may or may
  not have landed). A producer that meets a non-retriable error is replaced,
  so one refused batch never poisons later appends.
- An existing topic is accepted only with ``LogAppendTime`` timestamps (and, on
  ``create_topic``, the retention asked for): ordering and forgets must never
  depend on producer clocks. Nor is one that Kafka compacts (``cleanup.policy``
  with ``compact``): compaction keeps only the newest record of each key, and a
  memory topic's keys are scopes, so it would drop older memories, feedback and
  forgets of a conversation without a word. Nor is one with a size limit
  (``retention.bytes``), which deletes a partition's oldest records by size, whatever
  time retention was asked for. Topics are created with ``cleanup.policy=delete`` and
  ``retention.bytes=-1``, whatever the broker's defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    ConsumerStoppedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from ..errors import (
    ConfigError,
    InvalidInput,
    InvalidName,
    InvalidRecord,
    LogClosed,
    LogUnavailable,
    TopicConflict,
    UnknownTopic,
    WriteTimeout,
    shown,
)
from ._kafka_topic_ids import TopicIdsRequest, topic_ids_from
from .deadlines import Deadlines
from .lifecycle import LogLifecycle
from .naming import (
    check_settings,
    check_time_ms,
    check_topic_name,
    collision,
    partitions_changed,
    validate_outgoing,
    validate_partitions,
    validate_read,
    validate_topic,
)
from .partitioner import partition_for
from .port import DEFAULT_MAX_RECORD_BYTES, Appended, LogRecord, OutgoingRecord, TopicInfo

__all__ = ["MAX_BOOTSTRAP_SERVERS", "KafkaLog", "KafkaLogConfig", "bootstrap_problem"]

_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36
_INVALID_TOPIC = 17
_INVALID_PARTITIONS = 37
# Invalid replication factor, invalid config, a create-topic policy's refusal.
_REFUSED_SETTINGS = frozenset({38, 40, 44})
# How a broker names the topic a new one collides with (its metrics' names).
_COLLIDES_WITH = re.compile(r"collides with existing topics?: ([A-Za-z0-9._-]+)")
# What a record batch adds to its records on the wire (batch header, record framing):
# a topic's max.message.bytes must leave room for it.
_BATCH_OVERHEAD = 16 << 10
# The fewest records one append sends to a partition as a record batch of its own.
_WHOLE_BATCH_MIN = 16

#: How long a reader's consumer may take to stop before its fetcher is cancelled again.
_FETCHER_RECANCEL_S = 0.5
#: How often a read that fetches nothing asks whether its topic is still there.
_TOPIC_CHECK_S = 1.0
#: How long an append past its deadline asks whether its topic was deleted.
_GONE_CHECK_S = 1.0


def _unassign(consumer: AIOKafkaConsumer) -> None:
    """Take a consumer's partitions away, leaving its metadata to the topics it read.

    ``consumer.assign([])`` also tells its client to track no topics, which aiokafka takes
    as every topic: each read's end then fetched and decoded the whole cluster's metadata
    (in Python), which on a broker of 1,560 topics made a read-heavy test 30 times slower.
    So the assignment is emptied alone (aiokafka's ``_subscription``); without it, the
    public call."""
    subscription = getattr(consumer, "_subscription", None)
    if subscription is not None and hasattr(subscription, "assign_from_user"):
        subscription.assign_from_user([])
    else:
        consumer.assign([])


async def _stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, which cancels the consumer's fetcher task and waits for it.

    aiokafka's fetcher can lose that cancel: when its partitions have just been
    unassigned (a read ended and released the consumer), it cancels its fetches and
    awaits them with CancelledError suppressed, and a cancel arriving then is suppressed
    with them. A log stopped within a loop turn or two of a follow read's end waited for
    that fetcher forever. So while the stop waits, the fetcher task is cancelled again
    (aiokafka keeps it as ``_fetcher._fetch_task``; without it, the stop just waits)."""
    stopping = asyncio.ensure_future(consumer.stop())
    try:
        while not (await asyncio.wait([stopping], timeout=_FETCHER_RECANCEL_S))[0]:
            fetch_task = getattr(getattr(consumer, "_fetcher", None), "_fetch_task", None)
            if fetch_task is not None and not fetch_task.done():
                fetch_task.cancel()
    except asyncio.CancelledError:
        stopping.cancel()
        raise
    stopping.result()


# host:port, the host a name, an IPv4 address or an IPv6 one in brackets. aiokafka read
# "h:-5" and "::1:1" as port 9092 of some host, so a typo reached another broker.
_BOOTSTRAP_SERVER = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})")
#: The most servers a bootstrap list takes. Any broker tells a client of all the others,
#: so a few are enough; aiokafka tries them one after another, each up to a request
#: timeout when it accepts and never answers, so thousands kept a start waiting for hours.
MAX_BOOTSTRAP_SERVERS = 100


def bootstrap_problem(servers: str) -> str | None:
    """What is wrong with a comma-separated ``host:port`` list, or None when nothing is.

    >>> bootstrap_problem("127.0.0.1:9092, [::1]:9093") is None
    True
    >>> bootstrap_problem("127.0.0.1:-5")
    "'127.0.0.1:-5' is not host:port with a port from 1 to 65535"
    """
    listed = servers.split(",")
    if len(listed) > MAX_BOOTSTRAP_SERVERS:
        return (
            f"{len(listed)} servers are more than the {MAX_BOOTSTRAP_SERVERS} a bootstrap list "
            "takes; list a few brokers, any one of them names the rest"
        )
    for server in listed:
        if not server.strip():
            return "an entry is empty (two commas together, or one at an end)"
        match = _BOOTSTRAP_SERVER.fullmatch(server.strip())
        if not match or not 0 < int(match.group(2)) < 65536:
            return f"{shown(server.strip())} is not host:port with a port from 1 to 65535"
    return None


@dataclass(frozen=True, slots=True)
class _TopicSettings:
    generation: str
    partitions: int
    retention_s: float | None
    max_message_bytes: int | None
    timestamp_type: str | None
    cleanup_policy: str | None = None
    retention_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class KafkaLogConfig:
    """Settings of a `KafkaLog`. Seconds are floats.

    ``replication_factor=None`` keeps three copies, or one per broker on a smaller
    cluster, and ``min.insync.replicas`` is one less than the copies (at least 1), so
    ``acks=all`` on a three-broker cluster means two brokers hold every acknowledged
    record. ``linger_s`` is how long the producer waits to fill a batch.
    ``max_record_bytes`` is the largest record (key, value, headers) an append takes;
    topics are created to hold it. ``write_timeout_s`` is the deadline of an append
    (None: no limit), after which it raises `WriteTimeout`.
    """

    bootstrap_servers: str
    client_id: str = "laser-memory"
    linger_s: float = 0.005
    request_timeout_s: float = 30.0
    write_timeout_s: float | None = 30.0
    fetch_wait_s: float = 0.1
    replication_factor: int | None = None
    max_batch_bytes: int = 1 << 20
    max_request_bytes: int = 8 << 20
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    extra_topic_configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("bootstrap_servers", "client_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"KafkaLogConfig.{name} is a non-empty str, got {shown(value)}")
        problem = bootstrap_problem(self.bootstrap_servers)
        if problem is not None:
            raise ConfigError(
                f"KafkaLogConfig.bootstrap_servers: {problem}; for example '127.0.0.1:9092'"
            )
        check_settings(
            self,
            positive_ints=("max_batch_bytes", "max_request_bytes", "max_record_bytes"),
            seconds=("linger_s", "fetch_wait_s"),
            positive_seconds=("request_timeout_s",),
            optional_seconds=("write_timeout_s",),
        )
        # Kafka's protocol carries these as int32 milliseconds and an int16 count: past
        # them aiokafka failed with a raw struct error at the first request.
        if self.request_timeout_s * 1000 > _INT32_MAX:
            raise ConfigError(
                f"KafkaLogConfig.request_timeout_s is at most {_INT32_MAX / 1000} seconds, "
                f"got {shown(self.request_timeout_s)}"
            )
        # A wait or a linger as long as the request's deadline fails every request, or
        # every lone append (which waits out the linger before it is sent); the
        # producer's stop waited out the linger too.
        for name in ("fetch_wait_s", "linger_s"):
            if getattr(self, name) >= self.request_timeout_s:
                raise ConfigError(
                    f"KafkaLogConfig.{name} ({shown(getattr(self, name))}s) must be shorter than "
                    f"request_timeout_s ({shown(self.request_timeout_s)}s)"
                )
        if self.write_timeout_s is not None and self.linger_s >= self.write_timeout_s:
            raise ConfigError(
                f"KafkaLogConfig.linger_s ({shown(self.linger_s)}s) must be shorter than "
                f"write_timeout_s ({shown(self.write_timeout_s)}s): a lone append waits out "
                "the linger before it is sent"
            )
        # Kafka's sizes are int32: a topic's max.message.bytes (the larger of a record and
        # a batch, with a batch's overhead) and a request's. Past them a topic's creation
        # failed at the broker, at the first write.
        for name, most in (
            ("max_batch_bytes", _INT32_MAX - _BATCH_OVERHEAD),
            ("max_record_bytes", _INT32_MAX - _BATCH_OVERHEAD),
            ("max_request_bytes", _INT32_MAX),
        ):
            if getattr(self, name) > most:
                raise ConfigError(
                    f"KafkaLogConfig.{name} is at most {most} (Kafka's sizes are 32-bit), got "
                    f"{shown(getattr(self, name))}"
                )
        if self.max_request_bytes < self.max_record_bytes + _BATCH_OVERHEAD:
            raise ConfigError(
                f"KafkaLogConfig.max_request_bytes ({self.max_request_bytes}) must exceed "
                f"max_record_bytes ({self.max_record_bytes}) by at least {_BATCH_OVERHEAD}: "
                "a request carries a batch of at least one record"
            )
        factor = self.replication_factor
        if factor is not None and (
            isinstance(factor, bool) or not isinstance(factor, int) or not 1 <= factor <= 32767
        ):
            raise ConfigError(
                "KafkaLogConfig.replication_factor is a positive int up to 32767, or None, "
                f"got {shown(factor)}"
            )
        if not isinstance(self.extra_topic_configs, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.extra_topic_configs.items()
        ):
            raise ConfigError("KafkaLogConfig.extra_topic_configs maps str names to str values")
        fixed = sorted(set(self.extra_topic_configs) & _FIXED_TOPIC_CONFIGS)
        if fixed:
            raise ConfigError(
                f"KafkaLogConfig.extra_topic_configs may not set {', '.join(fixed)}: the log "
                "sets them for what it guarantees (LogAppendTime stamps, no compaction, the "
                "retention create_topic is given, and no other)"
            )


_INT32_MAX = (1 << 31) - 1
# Topic configs the log sets itself; `extra_topic_configs` may not override them.
_FIXED_TOPIC_CONFIGS = frozenset(
    {"message.timestamp.type", "cleanup.policy", "retention.ms", "retention.bytes"}
)


def _millis(retention_s: float | None) -> int:
    return -1 if retention_s is None else int(retention_s * 1000)


def _seconds(retention_s: float | None) -> str:
    return "forever" if retention_s is None else f"{retention_s:g}s"


class _Append:
    """An append in flight, for `Deadlines`: the task sending it, which its deadline
    cancels, and how many cancels the task had pending before (as asyncio.timeout
    counts them, so a cancel from elsewhere is told apart)."""

    __slots__ = ("cancelling", "expired", "finished", "task")

    def __init__(self, task: asyncio.Task | None) -> None:
        assert task is not None, "an append runs in a task"
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False
        self.finished = False

    def done(self) -> bool:
        return self.finished

    def uncancel(self) -> bool:
        """Take back the deadline's cancel; whether no other cancel is pending."""
        return self.task.uncancel() <= self.cancelling


def _add_to(builder: Any, record: OutgoingRecord) -> bool:
    """Add ``record`` to an aiokafka batch builder; False when the batch is full."""
    added = builder.append(
        timestamp=None, key=record.key, value=record.value, headers=list(record.headers)
    )
    return added is not None


def _expire(append: _Append) -> None:
    append.expired = True
    append.task.cancel()


def _outcome_read(future: asyncio.Future) -> None:
    """Mark a whole batch's outcome as read. aiokafka leaves a failed batch's exception
    to the caller of its batch API; an append that stopped waiting (its deadline, or a
    cancel) never reads it, and asyncio printed "Future exception was never retrieved"
    once the batch failed, long after the append had said what happened."""
    if not future.cancelled():
        future.exception()


class KafkaLog(LogLifecycle):
    """The log on an Apache Kafka cluster.

    >>> async with KafkaLog(KafkaLogConfig("127.0.0.1:9092")) as log:   # doctest: +SKIP
    ...     await log.create_topic("events", partitions=3)
    """

    def __init__(self, config: KafkaLogConfig):
        if not isinstance(config, KafkaLogConfig):
            raise ConfigError(
                "a KafkaLog takes a KafkaLogConfig, such as KafkaLogConfig('127.0.0.1:9092'); "
                f"got {type(config).__name__}"
            )
        self._config = config
        self._admin: AIOKafkaAdminClient | None = None
        self._producer: AIOKafkaProducer | None = None
        self._idle_consumers: list[AIOKafkaConsumer] = []
        self._busy_consumers: set[AIOKafkaConsumer] = set()
        # Starts of new consumers under way (see `_acquire_consumer`).
        self._starting: set[asyncio.Future[None]] = set()
        # Appends and requests under way, and whether there are none (see `_close`).
        self._under_way = 0
        self._none_under_way = asyncio.Event()
        self._none_under_way.set()
        self._clients_closing = False
        self._topics: dict[str, _TopicSettings] = {}
        self._describing: dict[str, asyncio.Future[_TopicSettings]] = {}
        # The last record batch of our own sent to each (topic, partition): see `_send`.
        self._whole_batches: dict[tuple[str, int], asyncio.Future] = {}
        self._producer_lock = asyncio.Lock()
        # Appends in flight, by deadline: one timer for all of them (see `Deadlines`).
        self._deadlines: Deadlines[_Append] | None = (
            None if config.write_timeout_s is None else Deadlines(config.write_timeout_s, _expire)
        )

    @property
    def url(self) -> str:
        return f"kafka://{self._config.bootstrap_servers}"

    def _describe(self) -> str:
        return f"KafkaLog for {self._config.bootstrap_servers}"

    async def _open(self) -> None:
        """Connect the admin client and the producer."""
        cfg = self._config
        self._admin = AIOKafkaAdminClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=f"{cfg.client_id}-admin",
            request_timeout_ms=int(cfg.request_timeout_s * 1000),
        )
        self._producer = self._new_producer()
        self._clients_closing = False
        try:
            await self._admin.start()
            await self._producer.start()
        except BaseException as exc:
            # Cancelled (a timeout around the start) or failed: what did start is closed,
            # or its connections and tasks were left open with no one to close them.
            # The log stays new: started again once the broker answers, it opens anew
            # (it was marked stopped, so a retry was LogClosed, "make a new one").
            await self._close_clients()
            if not isinstance(exc, KafkaError):
                raise
            raise LogUnavailable(
                f"cannot reach Kafka at {cfg.bootstrap_servers}: {exc}; check the address "
                "and that the broker is up"
            ) from exc

    def _new_producer(self) -> AIOKafkaProducer:
        cfg = self._config
        return AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            acks="all",
            enable_idempotence=True,
            linger_ms=int(cfg.linger_s * 1000),
            max_batch_size=cfg.max_batch_bytes,
            max_request_size=cfg.max_request_bytes,
            request_timeout_ms=int(cfg.request_timeout_s * 1000),
        )

    async def _replace_producer(self, failed: AIOKafkaProducer) -> None:
        """Swap a producer that met a non-retriable error for a new one. An idempotent
        producer whose batch the broker refused keeps failing that partition with
        OutOfOrderSequenceNumber; a new producer gets a new producer id and starts clean."""
        async with self._producer_lock:
            if self._producer is not failed or self._state != "started":
                return  # another append replaced it already
            fresh = self._new_producer()
            try:
                await fresh.start()
            except KafkaError as exc:
                raise LogUnavailable(f"cannot restart the Kafka producer: {exc}") from exc
            self._producer = fresh
            # The failed producer's batches say nothing of what the new one has in flight.
            self._whole_batches.clear()
            with contextlib.suppress(Exception):
                await failed.stop()

    async def _close(self) -> None:
        """Finish the appends under way and the topic lookups reads began, then flush
        pending appends and close every connection."""
        try:
            # Writes made before the stop are drained, including those still learning
            # their topic, and the requests under way (a lookup a read began, a folder's
            # check of its topic, a topic made or described) end before the clients close.
            # Closed under them, their requests were cut: the caller got a CancelledError
            # no one had asked for (or a connection error for a log it had stopped), the
            # lookup's task and its connection were left pending, and an append that
            # resumed after the producer stopped could start another one.
            while self._under_way or self._describing:
                await self._none_under_way.wait()
                if self._describing:
                    await asyncio.wait(list(self._describing.values()))
                    await asyncio.sleep(0)  # their done callbacks
            await self._close_clients()
        finally:
            if self._deadlines is not None:
                self._deadlines.close()

    async def _close_clients(self) -> None:
        self._clients_closing = True
        # Consumers still starting land among the idle ones first (`_adopt`).
        while self._starting:
            await asyncio.wait(list(self._starting))
            await asyncio.sleep(0)  # their done callbacks
        consumers = self._idle_consumers + list(self._busy_consumers)
        self._idle_consumers, self._busy_consumers = [], set()
        for consumer in consumers:
            await _stop_consumer(consumer)
        if self._producer is not None:
            await self._producer.stop()
        if self._admin is not None:
            await self._admin.close()

    def _require_started(self) -> None:
        self._check_started()

    # -- topics --------------------------------------------------------------

    async def _topic_metadata(self, topic: str) -> tuple[str, int]:
        """(topic id, partition count) straight from a broker; `UnknownTopic` if absent."""
        assert self._admin is not None
        client = self._admin._client
        try:
            with self._counted():
                response = await client.send(client.get_random_node(), TopicIdsRequest([topic]))
        except KafkaError as exc:
            raise LogUnavailable(f"Kafka metadata request failed: {exc}") from exc
        error_code, topic_id, partitions = topic_ids_from(response)[topic]
        if error_code == _UNKNOWN_TOPIC:
            raise UnknownTopic(
                f"topic {shown(topic)} does not exist on Kafka at "
                f"{self._config.bootstrap_servers}; create it first (for the memory topic: "
                "'laser-memory bootstrap')"
            )
        if error_code != 0:
            raise LogUnavailable(f"Kafka reports error code {error_code} for topic {shown(topic)}")
        return topic_id, partitions

    async def create_topic(
        self, topic: str, *, partitions: int, retention_s: float | None = None
    ) -> TopicInfo:
        validate_topic(topic)
        validate_partitions(partitions, retention_s)
        self._require_started()
        assert self._admin is not None
        # Unset: 3 copies where the cluster has three brokers, else one per broker.
        replication = self._config.replication_factor
        if replication is None:
            try:
                with self._counted():
                    cluster = await self._admin.describe_cluster()
            except KafkaError as exc:
                raise LogUnavailable(f"Kafka could not describe the cluster: {exc}") from exc
            replication = min(3, max(1, len(cluster.get("brokers", []))))
        configs = {
            "message.timestamp.type": "LogAppendTime",
            # Said outright: a broker whose default (log.cleanup.policy) is compact
            # would otherwise make a topic that drops older records of each key.
            "cleanup.policy": "delete",
            "retention.ms": "-1" if retention_s is None else str(int(retention_s * 1000)),
            # Said outright too: a broker default (log.retention.bytes) would delete the
            # oldest records once a partition outgrew it, whatever retention was asked for.
            "retention.bytes": "-1",
            "max.message.bytes": str(
                max(self._config.max_record_bytes, self._config.max_batch_bytes) + _BATCH_OVERHEAD
            ),
            "min.insync.replicas": str(max(1, replication - 1)),
            **self._config.extra_topic_configs,
        }
        deadline = time.monotonic() + self._config.request_timeout_s
        while True:
            try:
                with self._counted():
                    response = await self._admin.create_topics(
                        [NewTopic(topic, partitions, replication, topic_configs=configs)]
                    )
            except TopicAlreadyExistsError:
                error_code = _TOPIC_ALREADY_EXISTS
            except KafkaError as exc:
                raise LogUnavailable(f"Kafka could not create topic {shown(topic)}: {exc}") from exc
            else:
                error_code = response.topic_errors[0][1]
                message = response.topic_errors[0][2] if len(response.topic_errors[0]) > 2 else ""
                if error_code == _INVALID_TOPIC:
                    # The broker's own rule, beyond the name check both logs make: a name
                    # colliding with another's metrics, say. Not the log being unavailable.
                    other = _COLLIDES_WITH.search(message or "")
                    if other is not None:
                        raise collision(topic, other.group(1))
                    raise InvalidName(f"Kafka refused the topic name {shown(topic)}: {message}")
                if error_code in _REFUSED_SETTINGS:
                    # Retrying cannot help: the broker refuses what this log asks of it.
                    raise ConfigError(
                        f"Kafka refused the settings of topic {shown(topic)}: error "
                        f"{error_code} {message}; check KafkaLogConfig.replication_factor "
                        "and extra_topic_configs against the cluster"
                    )
                if error_code == _INVALID_PARTITIONS:
                    raise InvalidInput(
                        f"Kafka refused {partitions} partitions for topic {shown(topic)}: {message}"
                    )
                if error_code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise LogUnavailable(
                        f"Kafka could not create topic {shown(topic)}: error {error_code} {message}"
                    )
            try:
                info = await self._wait_visible(topic, deadline)
            except UnknownTopic:
                # A topic marked for deletion still answers "already exists"; try again.
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
                continue
            if info.partitions != partitions:
                raise TopicConflict(
                    f"topic {shown(topic)} exists with {info.partitions} partitions, not "
                    f"{partitions}; use the existing count or delete the topic first"
                )
            # An existing topic must stamp broker times (checked on learning it) and keep
            # records as long as asked; its configs are read afresh for both.
            settings = await self._settings(topic, fresh=True)
            if error_code == _TOPIC_ALREADY_EXISTS and _millis(settings.retention_s) != _millis(
                retention_s
            ):
                raise TopicConflict(
                    f"topic {shown(topic)} exists with retention "
                    f"{_seconds(settings.retention_s)}, not "
                    f"{_seconds(retention_s)}; pass its retention, or change it with "
                    f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                    "--add-config retention.ms=..."
                )
            return info

    async def _wait_visible(self, topic: str, deadline: float) -> TopicInfo:
        """Metadata lags creation a little; wait until the topic answers with its partitions."""
        while True:
            try:
                return await self.describe_topic(topic)
            except UnknownTopic:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def delete_topic(self, topic: str) -> None:
        check_topic_name(topic)
        self._require_started()
        assert self._admin is not None
        await self._topic_metadata(topic)
        try:
            with self._counted():
                await self._admin.delete_topics([topic])
        except UnknownTopicOrPartitionError as exc:
            raise UnknownTopic(f"topic {shown(topic)} does not exist") from exc
        except KafkaError as exc:
            raise LogUnavailable(f"Kafka could not delete topic {shown(topic)}: {exc}") from exc
        self._topics.pop(topic, None)
        deadline = time.monotonic() + self._config.request_timeout_s
        while time.monotonic() < deadline:
            try:
                await self._topic_metadata(topic)
            except UnknownTopic:
                return
            await asyncio.sleep(0.05)

    async def describe_topic(self, topic: str) -> TopicInfo:
        check_topic_name(topic)
        settings = await self._describe_settings(topic)
        return TopicInfo(topic, settings.partitions, settings.retention_s, settings.generation)

    async def _describe_settings(self, topic: str) -> _TopicSettings:
        self._require_started()
        assert self._admin is not None
        topic_id, partitions = await self._topic_metadata(topic)
        if partitions == 0:
            raise UnknownTopic(f"topic {shown(topic)} has no partitions yet")
        known = self._topics.get(topic)
        if known is not None and (known.generation, known.partitions) == (topic_id, partitions):
            # Same topic as learned: its configs were read then (a reader checks the
            # generation on every catch-up; one metadata request is enough for that).
            return known
        if known is not None:
            # Deleted and created again elsewhere, or given partitions: appends must learn
            # the topic as it is (its checks, the generation their receipts carry, where
            # keys go) rather than go on as before.
            self._topics.pop(topic, None)
        wanted = (
            "retention.ms",
            "retention.bytes",
            "max.message.bytes",
            "message.timestamp.type",
            "cleanup.policy",
        )
        values: dict[str, str | None] = dict.fromkeys(wanted)
        try:
            with self._counted():
                [described] = await self._admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(wanted))]
                )
            for resource in described.resources:
                for entry in resource[4]:
                    if entry[0] in values:
                        values[entry[0]] = entry[1]
        except KafkaError as exc:
            raise LogUnavailable(f"Kafka could not describe topic {shown(topic)}: {exc}") from exc
        retention_s: float | None = None
        if values["retention.ms"] is not None and int(values["retention.ms"]) >= 0:
            retention_s = int(values["retention.ms"]) / 1000
        max_bytes = values["max.message.bytes"]
        retention_bytes = values["retention.bytes"]
        return _TopicSettings(
            generation=topic_id,
            partitions=partitions,
            retention_s=retention_s,
            max_message_bytes=int(max_bytes) if max_bytes is not None else None,
            timestamp_type=values["message.timestamp.type"],
            cleanup_policy=values["cleanup.policy"],
            retention_bytes=int(retention_bytes) if retention_bytes is not None else None,
        )

    async def end_offsets(self, topic: str) -> dict[int, int]:
        check_topic_name(topic)
        partitions = await self._partition_count(topic)
        consumer = await self._acquire_consumer()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            with self._counted():
                ends = await consumer.end_offsets(tps)
        except KafkaError as exc:
            raise LogUnavailable(
                f"Kafka could not list end offsets of {shown(topic)}: {exc}"
            ) from exc
        finally:
            self._release_consumer(consumer)
        return {tp.partition: offset for tp, offset in ends.items()}

    #: A partition's LogAppendTime can step back, after its leader moved to a broker
    #: whose clock was behind: see `TimeIndexedLog`.
    ordered_times = False

    async def offsets_for_time(self, topic: str, time_ms: int) -> dict[int, int]:
        """For each partition, the first offset whose record was appended at or after
        ``time_ms``, or its end offset if none was (see `TimeIndexedLog`): the broker's
        time index answers, by one request of a pooled consumer (and one for the end
        offsets, when a partition has no such record)."""
        check_topic_name(topic)
        time_ms = check_time_ms(time_ms)
        partitions = await self._partition_count(topic)
        consumer = await self._acquire_consumer()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            with self._counted():
                found = await consumer.offsets_for_times(dict.fromkeys(tps, time_ms))
                missing = [tp for tp in tps if found.get(tp) is None]
                ends = await consumer.end_offsets(missing) if missing else {}
        except KafkaError as exc:
            raise LogUnavailable(
                f"Kafka could not find where {time_ms} falls in {shown(topic)}: {exc}"
            ) from exc
        finally:
            self._release_consumer(consumer)
        return {
            tp.partition: hit.offset if (hit := found.get(tp)) is not None else ends[tp]
            for tp in tps
        }

    async def _topic_now(self, topic: str) -> tuple[str | None, int | None]:
        """(topic id, partition count) as a broker has them now; (None, None) for a topic
        that does not exist. `LogUnavailable` if no broker answers."""
        try:
            return await self._topic_metadata(topic)
        except UnknownTopic:
            return None, None

    async def _check_same_topic(self, topic: str, generation: str, partitions: int | None) -> None:
        """Raise `UnknownTopic` if ``topic`` is no longer the generation a read began on,
        and `TopicConflict` if it no longer has ``partitions`` (None: not asked). A broker
        that cannot answer now is asked again at the next check: an idle read outlives a
        broker's restart, as it did before it asked."""
        self._require_started()  # a log stopped under the read: LogClosed, as its reads say
        try:
            topic_id, now = await self._topic_now(topic)
        except LogUnavailable:
            return
        if topic_id == generation and partitions in (None, now):
            return
        self._topics.pop(topic, None)  # appends must learn the topic as it is now
        if topic_id is None:
            raise UnknownTopic(f"topic {shown(topic)} was deleted while it was being read")
        if topic_id != generation:
            raise UnknownTopic(
                f"topic {shown(topic)} was deleted and created again while it was being read; "
                "what was read came from the old topic"
            )
        raise partitions_changed(topic, partitions, now)

    async def _refuse_if_gone(
        self, topic: str, generation: str, producer: AIOKafkaProducer
    ) -> None:
        """Raise `UnknownTopic` if ``topic`` no longer exists and the producer has given
        up what it held for it. Created again, or not ``generation`` any more, its
        settings are learned afresh by the next append (the caller's error stands: the
        record may be on the new topic). A broker that cannot answer: nothing is said."""
        try:
            topic_id = await self._topic_id_soon(topic)
            if topic_id != generation:
                self._topics.pop(topic, None)
            if topic_id is not None:
                return
            # The producer still holds the records (it retries them until a batch with no
            # leader outlives its request timeout) and sends them should the topic be
            # made again meanwhile: "not on the log" is only true once it has given them
            # up. Its batches are all done within a request timeout of their making.
            async with asyncio.timeout(self._config.request_timeout_s + _GONE_CHECK_S):
                await producer.flush()
            gone = await self._topic_id_soon(topic) is None
        except (LogUnavailable, TimeoutError):
            return
        if gone:
            raise UnknownTopic(
                f"topic {shown(topic)} was deleted while this append waited for it, so the "
                "record is not on the log; create the topic again (for the memory topic: "
                "'laser-memory bootstrap') or write elsewhere"
            )

    async def _topic_id_soon(self, topic: str) -> str | None:
        """The topic's id now (None: it does not exist); `TimeoutError` if no broker
        answers within `_GONE_CHECK_S`. Asked past an append's deadline, or once its
        records were given up: a broker that does not answer at once (paused, or gone)
        must not hold the append's error back for its own request timeout."""
        async with asyncio.timeout(_GONE_CHECK_S):
            topic_id, _ = await self._topic_now(topic)
        return topic_id

    async def _partition_count(self, topic: str) -> int:
        return (await self._settings(topic)).partitions

    async def _settings(self, topic: str, *, fresh: bool = False) -> _TopicSettings:
        self._require_started()
        settings = None if fresh else self._topics.get(topic)
        if settings is not None:
            return settings
        # Concurrent first appends share one lookup and resume together, in the order
        # they came. The lookup also waits until the producer knows the topic: until it
        # does, its send() waits for metadata, and a later send could overtake an earlier
        # one that was still waiting.
        pending = self._describing.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self._learn_topic(topic))
            self._describing[topic] = pending
            pending.add_done_callback(lambda _: self._describing.pop(topic, None))
        return await asyncio.shield(pending)

    async def _learn_topic(self, topic: str) -> _TopicSettings:
        self._topics.pop(topic, None)  # read the configs afresh
        settings = await self._describe_settings(topic)
        if settings.timestamp_type not in (None, "LogAppendTime"):
            raise TopicConflict(
                f"topic {shown(topic)} stamps records with {settings.timestamp_type}, so "
                "their times would come from producer clocks; laser-memory needs the broker's "
                "append time: "
                f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                "--add-config message.timestamp.type=LogAppendTime"
            )
        if settings.cleanup_policy is not None and "compact" in settings.cleanup_policy:
            raise TopicConflict(
                f"topic {shown(topic)} has cleanup.policy={settings.cleanup_policy}: Kafka "
                "would keep only the newest record of each key, and a memory topic's keys "
                "are scopes, so older memories, feedback and forgets would vanish; "
                "laser-memory needs delete: "
                f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                "--add-config cleanup.policy=delete"
            )
        if settings.max_message_bytes is not None and settings.max_message_bytes <= _BATCH_OVERHEAD:
            # No record would fit beside a batch's overhead: every append was refused
            # as "over the -15384 bytes this log takes".
            raise TopicConflict(
                f"topic {shown(topic)} has max.message.bytes={settings.max_message_bytes}: "
                f"no record fits in a batch that small beside the {_BATCH_OVERHEAD} bytes "
                "laser-memory leaves for a batch's overhead; raise it: kafka-configs --alter "
                f"--entity-type topics --entity-name {topic} --add-config "
                f"max.message.bytes={self._config.max_record_bytes + _BATCH_OVERHEAD}"
            )
        if settings.retention_bytes is not None and settings.retention_bytes >= 0:
            raise TopicConflict(
                f"topic {shown(topic)} has retention.bytes={settings.retention_bytes}: Kafka "
                "would delete a partition's oldest records once it outgrew that, and a "
                "memory topic keeps its records for the retention it was made with (forever, "
                "or the seconds given): older memories, feedback and forgets would vanish; "
                "laser-memory needs -1: "
                f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                "--add-config retention.bytes=-1"
            )
        assert self._producer is not None
        try:
            await self._producer.partitions_for(topic)
        except KafkaError as exc:
            raise LogUnavailable(
                f"the producer could not learn topic {shown(topic)}: {exc}"
            ) from exc
        self._topics[topic] = settings
        return settings

    # -- appends -------------------------------------------------------------

    async def append(self, topic: str, record: OutgoingRecord) -> Appended:
        [receipt] = await self.append_batch(topic, [record])
        return receipt

    async def append_batch(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Appended]:
        check_topic_name(topic)
        self._require_started()
        validate_outgoing(records, self._config.max_record_bytes)
        with self._counted():  # a stop waits for the appends under way (see `_close`)
            return await self._append_batch(topic, records)

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """An append or a request under way: the log's stop waits until none is. Once
        the stop closes the clients, none begins: `LogClosed` (a request to a closed
        aiokafka client waited out its request timeout, 30 s, before failing)."""
        if self._clients_closing:
            raise LogClosed("the log is stopped; open a new one")
        self._under_way += 1
        self._none_under_way.clear()
        try:
            yield
        finally:
            self._under_way -= 1
            if not self._under_way:
                self._none_under_way.set()

    async def _append_batch(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Appended]:
        # A topic's settings are known after its first append: no coroutine to read them.
        settings = self._topics.get(topic) or await self._settings(topic)
        if (
            settings.max_message_bytes is not None
            and settings.max_message_bytes - _BATCH_OVERHEAD < self._config.max_record_bytes
        ):
            # The topic's own limit is lower than ours (a topic made elsewhere): refuse
            # before sending, since a refused batch would fail at the broker. (Checked
            # only then: a second pass over every record was a tenth of a batch's cost.)
            validate_outgoing(records, settings.max_message_bytes - _BATCH_OVERHEAD)
        partitions = settings.partitions
        placed = []
        for record in records:
            if record.partition is None:
                placed.append(partition_for(record.key, partitions))
            elif 0 <= record.partition < partitions:
                placed.append(record.partition)
            else:
                raise InvalidRecord(
                    f"partition {record.partition} does not exist; topic {shown(topic)} has "
                    f"{partitions} partitions (0 to {partitions - 1})"
                )
        producer = self._producer
        assert producer is not None
        append = None
        if self._deadlines is not None:
            append = _Append(asyncio.current_task())
            self._deadlines.add(append)
        try:
            metadata = await self._send(producer, topic, records, placed)
        except asyncio.CancelledError:
            # As asyncio.timeout decides: our deadline's cancel becomes WriteTimeout; a
            # cancel from elsewhere (counted apart) stays a cancel.
            if append is not None and append.expired and append.uncancel():
                # A topic deleted elsewhere after this log learned it: aiokafka retries
                # the batch until our deadline, so the deadline is where it shows. Said
                # as the embedded log says it, and forgotten, so the next append is told
                # at once rather than waiting out its own deadline.
                await self._refuse_if_gone(topic, settings.generation, producer)
                raise WriteTimeout(
                    f"Kafka did not acknowledge the append to {shown(topic)} within "
                    f"{self._config.write_timeout_s}s; it may or may not have landed: read "
                    "before writing it again"
                ) from None
            raise
        except UnknownTopicOrPartitionError as exc:
            self._topics.pop(topic, None)
            raise UnknownTopic(f"topic {shown(topic)} does not exist: {exc}") from exc
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            raise LogUnavailable(f"Kafka did not take the append: {exc}") from exc
        except KafkaError as exc:
            if not exc.retriable:
                self._topics.pop(topic, None)
                await self._replace_producer(producer)
            elif isinstance(exc, (NotLeaderForPartitionError, LeaderNotAvailableError)):
                # How the producer gives up a batch whose partition has had no leader
                # for its request timeout: a topic deleted elsewhere, when that timeout
                # is shorter than the append's deadline.
                await self._refuse_if_gone(topic, settings.generation, producer)
            raise LogUnavailable(f"Kafka refused the append: {exc}") from exc
        finally:
            if append is not None:
                append.finished = True
        generation = settings.generation
        return [Appended(topic, p, offset, time_ms, generation) for p, offset, time_ms in metadata]

    async def _send(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        records: Sequence[OutgoingRecord],
        placed: list[int],
    ) -> list[tuple[int, int, int]]:
        """Send ``records`` (to the partitions ``placed``); the (partition, offset,
        append time) of each, once acknowledged.

        A partition given many records here gets them as record batches of their own
        (aiokafka's batch API: one future a batch, not one a record, and a closed batch
        goes out without waiting out the linger): `remember_many` went from 0.73-1.19x
        raw aiokafka to 1.32-1.98x, and concurrent remembers, whose records
        `AppendBatcher` brings here together, from 0.55-0.71x to 1.48-1.61x. Only one
        such batch of ours is in flight per partition: aiokafka sends one request at a
        time to a broker, with one batch a partition in it, so a second batch of ours
        would wait for the first to be sent; appends that come meanwhile are sent
        record by record, into the producer's open batch, as before."""
        by_partition: dict[int, list[int]] = {}
        for index, partition in enumerate(placed):
            by_partition.setdefault(partition, []).append(index)
        in_flight = self._whole_batches
        batches: list[tuple[asyncio.Future, list[int]]] = []
        singles: list[int] = []
        for partition, indexes in by_partition.items():
            last = in_flight.get((topic, partition))
            if len(indexes) < _WHOLE_BATCH_MIN or (last is not None and not last.done()):
                singles.extend(indexes)  # in the order given: a partition's order holds
                continue
            builder, members = producer.create_batch(), []
            for index in indexes:
                record = records[index]
                if not _add_to(builder, record):
                    # Full: send it, and start the next with this record (a batch takes
                    # its first record whatever its size).
                    builder.close()
                    future = await producer.send_batch(builder, topic, partition=partition)
                    future.add_done_callback(_outcome_read)
                    batches.append((future, members))
                    builder, members = producer.create_batch(), []
                    if not _add_to(builder, record):
                        raise LogUnavailable(
                            f"aiokafka refused a record of {len(record.value)} bytes as the "
                            "first of a batch"
                        )
                members.append(index)
            builder.close()
            future = await producer.send_batch(builder, topic, partition=partition)
            future.add_done_callback(_outcome_read)
            batches.append((future, members))
            in_flight[(topic, partition)] = future
        sent = [
            await producer.send(
                topic,
                records[index].value,
                key=records[index].key,
                partition=placed[index],
                headers=list(records[index].headers),
            )
            for index in singles
        ]
        if not batches and len(sent) == 1:
            # One record is the common case: skip gather's bookkeeping for it.
            found = [await sent[0]]
        else:
            # A batch's future is aiokafka's shield over the batch: cancelled (as gather
            # cancels what it waits for when the append stops waiting), it lets go of
            # the batch, whose failure then goes unread. Shielded once more, it stays
            # to take the outcome, which `_outcome_read` reads.
            found = await asyncio.gather(*(asyncio.shield(future) for future, _ in batches), *sent)
        out: list[tuple[int, int, int]] = [(0, 0, 0)] * len(records)
        for (_, members), meta in zip(batches, found, strict=False):
            for relative, index in enumerate(members):
                out[index] = (meta.partition, meta.offset + relative, meta.timestamp)
        for index, meta in zip(singles, found[len(batches) :], strict=True):
            out[index] = (meta.partition, meta.offset, meta.timestamp)
        return out

    # -- reads ---------------------------------------------------------------

    async def _acquire_consumer(self) -> AIOKafkaConsumer:
        self._require_started()
        if self._idle_consumers:
            consumer = self._idle_consumers.pop()
        else:
            cfg = self._config
            consumer = AIOKafkaConsumer(
                bootstrap_servers=cfg.bootstrap_servers,
                client_id=f"{cfg.client_id}-reader",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=int(cfg.fetch_wait_s * 1000),
                request_timeout_ms=int(cfg.request_timeout_s * 1000),
            )
            # The start is never cut short: aiokafka cancelled while it connects leaves a
            # connection open that nothing closes. A read cancelled meanwhile leaves the
            # start to finish, and the consumer goes to the idle ones (`_adopt`).
            starting = asyncio.ensure_future(self._start_consumer(consumer))
            self._starting.add(starting)
            starting.add_done_callback(self._starting.discard)
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                if starting.done():
                    # The start ended in the loop turn the cancel came in: nothing else
                    # will take the consumer in.
                    self._adopt(consumer, starting)
                else:
                    starting.add_done_callback(functools.partial(self._adopt, consumer))
                raise
        self._busy_consumers.add(consumer)
        return consumer

    @staticmethod
    async def _start_consumer(consumer: AIOKafkaConsumer) -> None:
        try:
            await consumer.start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await _stop_consumer(consumer)
            if isinstance(exc, KafkaError):
                raise LogUnavailable(f"cannot reach Kafka for a read: {exc}") from exc
            raise

    def _adopt(self, consumer: AIOKafkaConsumer, starting: asyncio.Future[None]) -> None:
        """A consumer whose read was cancelled while it started: idle once started (a
        failed start stopped it already)."""
        if starting.cancelled() or starting.exception() is not None:
            return
        self._idle_consumers.append(consumer)  # stopped by `_close_clients` if stopping

    def _release_consumer(self, consumer: AIOKafkaConsumer) -> None:
        if self._state != "started":
            # Left among the busy ones: the stop under way stops it with them (or took
            # it already). Dropped from them, it was never stopped.
            return
        self._busy_consumers.discard(consumer)
        _unassign(consumer)
        self._idle_consumers.append(consumer)

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
        settings = await self._settings(topic)
        count, generation = settings.partitions, settings.generation
        chosen = validate_read(topic, count, start, partitions, until, max_batch, follow)
        if not follow:
            # A read that does not follow ends at the end offsets, even when asked for more.
            ends = await self.end_offsets(topic)
            until = ends if until is None else {p: min(o, ends.get(p, 0)) for p, o in until.items()}
        positions = {p: (start or {}).get(p, 0) for p in chosen}
        pending = [p for p in chosen if until is None or positions[p] < until.get(p, 0)]
        if not pending:
            return
        consumer = await self._acquire_consumer()
        try:
            tps = {p: TopicPartition(topic, p) for p in pending}
            consumer.assign(list(tps.values()))
            for p, tp in tps.items():
                consumer.seek(tp, positions[p])
            checked = time.monotonic()
            while pending:
                try:
                    fetched = await consumer.getmany(
                        *[tps[p] for p in pending],
                        timeout_ms=int(self._config.fetch_wait_s * 1000) or 1,
                        max_records=max_batch,
                    )
                except (KafkaError, ConsumerStoppedError) as exc:
                    # The log stopped under the read (its stop stops every consumer):
                    # LogClosed, as on the embedded log, not aiokafka's own error.
                    self._check_started()
                    raise LogUnavailable(f"Kafka read of {shown(topic)} failed: {exc}") from exc
                for tp, messages in fetched.items():
                    limit = None if until is None else until.get(tp.partition, 0)
                    batch = [
                        LogRecord(
                            m.topic,
                            m.partition,
                            m.offset,
                            m.timestamp,
                            m.key,
                            m.value if m.value is not None else b"",
                            tuple(m.headers),
                        )
                        for m in messages
                        if limit is None or m.offset < limit
                    ]
                    if batch:
                        positions[tp.partition] = batch[-1].offset + 1
                        yield batch
                if not fetched and time.monotonic() - checked >= _TOPIC_CHECK_S:
                    # Nothing came: is the topic still there? Deleted, aiokafka waits for
                    # it without end; created again, it would go on reading the new one;
                    # given partitions, a follow read would never read the new ones.
                    # (A stop under way lets its request finish; once the clients
                    # close, it is `LogClosed` at once: see `_counted`.)
                    await self._check_same_topic(topic, generation, count if follow else None)
                    checked = time.monotonic()
                if until is not None:
                    for p in list(pending):
                        if positions[p] >= until.get(p, 0):
                            pending.remove(p)
                            consumer.pause(tps[p])
                        elif not fetched.get(tps[p]):
                            # Below `until` but nothing came: records were removed by
                            # retention; the consumer's position says where the log starts.
                            with contextlib.suppress(Exception):
                                if await consumer.position(tps[p]) >= until.get(p, 0):
                                    pending.remove(p)
                                    consumer.pause(tps[p])
        finally:
            consumer.resume(*consumer.paused()) if consumer.paused() else None
            self._release_consumer(consumer)
