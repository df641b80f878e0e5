"""Rules for topic names and shapes that both logs enforce alike."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence

from ..errors import (
    ConfigError,
    InvalidInput,
    InvalidName,
    InvalidRecord,
    RecordTooLarge,
    TopicConflict,
    UnknownTopic,
    shown,
)
from .port import OutgoingRecord, checked_headers_size

__all__ = [
    "MAX_PARTITIONS",
    "check_settings",
    "check_time_ms",
    "check_topic_name",
    "collides",
    "collision",
    "partitions_changed",
    "validate_outgoing",
    "validate_partitions",
    "validate_read",
    "validate_topic",
]

# Kafka's own rule, applied to the local log too so a topic name works on both; and not
# Kafka's internal topics (`__consumer_offsets`, `__transaction_state`: the `__` prefix
# is theirs), which a broker let this create as an ordinary topic, and read as memory.
_TOPIC = re.compile(r"(?!__)[A-Za-z0-9._-]{1,249}")


#: The most partitions a topic may have.
MAX_PARTITIONS = 10_000


def partitions_changed(
    topic: str, before: int, now: int, reader: str = "this read"
) -> TopicConflict:
    """The error for a topic given partitions (Kafka's ``kafka-topics --alter``) while
    ``reader`` followed it with the ones it had."""
    return TopicConflict(
        f"topic {shown(topic)} has {now} partitions now, {before} when {reader} began: "
        "partitions were added while it followed the topic, and it would never read the new "
        "ones. Start it again to read them all; but keys now go to other partitions than "
        "before, so a conversation's records sit on two (see 'Do not add partitions to a "
        "memory topic' in the README)"
    )


def collides(topic: str, other: str) -> bool:
    """Whether two topics' names collide on Kafka, which names a topic's metrics with its
    '.' read as '_': a broker refuses the second of such a pair, so both logs do."""
    return topic != other and topic.replace(".", "_") == other.replace(".", "_")


def collision(topic: str, other: str) -> TopicConflict:
    """The error for creating ``topic`` beside ``other``, whose name it collides with."""
    return TopicConflict(
        f"topic {shown(topic)} collides with the existing topic {shown(other)}: Kafka names "
        "a topic's metrics with its '.' read as '_', so the two cannot both exist; choose "
        "another name"
    )


def validate_topic(topic: str) -> str:
    if isinstance(topic, str) and type(topic) is not str:
        topic = str.__str__(topic)  # the text a subclass holds
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise InvalidName(
            f"{shown(topic)} is not a valid topic name: use 1 to 249 characters from "
            "letters, digits, '.', '_' and '-', not beginning with '__' (Kafka's internal "
            "topics)"
        )
    return topic


def check_settings(
    config: object,
    positive_ints: tuple[str, ...] = (),
    seconds: tuple[str, ...] = (),
    positive_seconds: tuple[str, ...] = (),
    bools: tuple[str, ...] = (),
    optional_seconds: tuple[str, ...] = (),
) -> None:
    """Refuse a config dataclass whose fields are of the wrong kind (`ConfigError`, naming
    the field): ``positive_ints`` are ints from 1, ``seconds`` finite numbers from 0,
    ``positive_seconds`` finite numbers above 0, ``optional_seconds`` finite numbers
    above 0 or None (no limit), ``bools`` True or False."""
    kind = type(config).__name__
    for name in positive_ints:
        value = getattr(config, name)
        if not _is_int(value) or value < 1:
            raise ConfigError(f"{kind}.{name} is a positive int, got {shown(value)}")
    for names, above in (
        (seconds, "from 0"),
        (positive_seconds, "above 0"),
        (optional_seconds, "above 0, or None for no limit"),
    ):
        for name in names:
            value = getattr(config, name)
            if value is None and names is optional_seconds:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                # Compared, not converted: an int past float's range raised OverflowError.
                or not abs(value) <= sys.float_info.max
                or value < 0
                or (value == 0 and names is not seconds)
            ):
                raise ConfigError(
                    f"{kind}.{name} is a number of seconds {above}, got {shown(value)}"
                )
    for name in bools:
        value = getattr(config, name)
        if not isinstance(value, bool):
            raise ConfigError(f"{kind}.{name} is True or False, got {shown(value)}")


#: Topic names found valid (plain str only: a subclass could claim to equal one), so an
#: append checked by a batcher and then by its log matches the pattern once, not twice.
_VALID_TOPICS: set[str] = set()
_MAX_VALID_TOPICS = 4096


def check_topic_name(topic: object) -> None:
    """Refuse a topic that is no valid name before it meets a lookup or a name's encoding:
    an empty name, or one LMDB cannot take as a key or UTF-8 cannot encode, raised a raw
    or misleading error there, and in an append failed the whole group commit, every
    other writer's appends with it."""
    if type(topic) is str and topic in _VALID_TOPICS:
        return
    if not isinstance(topic, str):
        raise InvalidName(f"a topic name is a str (such as 'memory.prod'), got {shown(topic)}")
    validate_topic(topic)
    if type(topic) is str and len(_VALID_TOPICS) < _MAX_VALID_TOPICS:
        _VALID_TOPICS.add(topic)


#: The longest retention, in seconds: Kafka's ``retention.ms`` is a signed 64-bit count.
MAX_RETENTION_S = ((1 << 63) - 1) // 1000


def validate_partitions(partitions: int, retention_s: float | None) -> None:
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise InvalidInput(f"a topic needs at least one partition, got {shown(partitions)}")
    if partitions > MAX_PARTITIONS:
        raise InvalidInput(
            f"{partitions} partitions is more than the {MAX_PARTITIONS} laser-memory allows"
        )
    if retention_s is not None and (
        isinstance(retention_s, bool)
        or not isinstance(retention_s, int | float)
        # Compared, not converted: an int past float's range raised OverflowError, and
        # one past 64 bits could not be stored. NaN compares False, so it is refused.
        or not 0 < retention_s <= MAX_RETENTION_S
    ):
        raise InvalidInput(
            f"retention must be a positive number of seconds up to {MAX_RETENTION_S} "
            f"(Kafka's longest), or None (keep forever); got {shown(retention_s)}"
        )


_MAX_OFFSET = (1 << 63) - 1  # Kafka's offsets are signed 64-bit


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_time_ms(time_ms: object) -> int:
    """A moment in milliseconds since the epoch, as a log's times are: an int from 0 to
    2**63-1 (`InvalidInput` otherwise)."""
    if not _is_int(time_ms) or not 0 <= time_ms <= _MAX_OFFSET:  # type: ignore[operator]
        raise InvalidInput(
            "a moment is milliseconds since the epoch, an int from 0 to 2**63-1, got "
            f"{shown(time_ms)}"
        )
    return int(time_ms)  # type: ignore[call-overload]


def validate_read(
    topic: str,
    count: int,
    start: Mapping[int, int] | None,
    partitions: Sequence[int] | None,
    until: Mapping[int, int] | None,
    max_batch: int,
    follow: bool = False,
) -> list[int]:
    """The partitions a read of ``topic`` (which has ``count``) goes over, after checking
    its arguments: partitions are ints the topic has (`UnknownTopic` otherwise), offsets
    ints from 0, ``max_batch`` an int from 1, ``follow`` a bool (`InvalidInput`)."""

    def check_partition(partition: object, what: str) -> None:
        if not _is_int(partition):
            raise InvalidInput(f"{what} names partition {shown(partition)}; a partition is an int")
        if not 0 <= partition < count:  # type: ignore[operator]
            raise UnknownTopic(f"topic {shown(topic)} has no partition {partition}; it has {count}")

    if not _is_int(max_batch) or max_batch < 1:
        raise InvalidInput(f"max_batch is an int of at least 1, got {shown(max_batch)}")
    if not isinstance(follow, bool):
        raise InvalidInput(f"follow is True or False, got {shown(follow)}")
    if partitions is None:
        chosen = list(range(count))
    else:
        if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence):
            raise InvalidInput(f"partitions is a sequence of ints or None, got {shown(partitions)}")
        chosen = list(partitions)
        for partition in chosen:
            check_partition(partition, "partitions")
    for what, positions in (("start", start), ("until", until)):
        if positions is None:
            continue
        if not isinstance(positions, Mapping):
            raise InvalidInput(f"{what} maps partitions to offsets, got {shown(positions)}")
        for partition, offset in positions.items():
            check_partition(partition, what)
            if not _is_int(offset) or not 0 <= offset <= _MAX_OFFSET:
                raise InvalidInput(
                    f"{what} gives partition {partition} the offset {shown(offset)}; an offset is "
                    f"an int from 0 to {_MAX_OFFSET}"
                )
    return chosen


def validate_outgoing(records: Sequence[OutgoingRecord], max_record_bytes: int) -> None:
    """Refuse a batch with any record a log could not store faithfully, or one larger
    than ``max_record_bytes``, before anything is written (msgspec Structs do not check
    field types when built)."""
    if type(records) is not list and (  # a list, the usual batch, skips the ABC check
        isinstance(records, str | bytes) or not isinstance(records, Sequence)
    ):
        raise InvalidRecord(f"records are a list of OutgoingRecord, got {type(records).__name__}")
    # A writer's records share one headers tuple per namespace, operation and tenant:
    # a tuple found well formed is measured again only when the next record's differs.
    last_headers: object = None
    headers_size = 0
    for index, record in enumerate(records):
        if type(record) is not OutgoingRecord and not isinstance(record, OutgoingRecord):
            raise InvalidRecord(
                f"record {index} is a {type(record).__name__}, not an OutgoingRecord"
            )
        value, key, headers = record.value, record.key, record.headers
        if type(value) is not bytes and not isinstance(value, bytes):
            raise InvalidRecord(
                f"record {index}: the value must be bytes, got {type(value).__name__}"
            )
        if key is not None and type(key) is not bytes and not isinstance(key, bytes):
            raise InvalidRecord(
                f"record {index}: the key must be bytes or None, got {type(key).__name__}"
            )
        if record.partition is not None and (
            not isinstance(record.partition, int) or isinstance(record.partition, bool)
        ):
            raise InvalidRecord(f"record {index}: the partition must be an int or None")
        if headers is not last_headers:
            checked = checked_headers_size(headers)
            if checked is None:
                bad = next(
                    (
                        header
                        for header in (headers if isinstance(headers, tuple | list) else ())
                        if not isinstance(header, tuple)
                        or len(header) != 2
                        or not isinstance(header[0], str)
                        or not isinstance(header[1], bytes)
                    ),
                    headers,
                )
                raise InvalidRecord(
                    f"record {index}: a header is a (str, bytes) pair, got {shown(bad)}"
                )
            headers_size = checked
            # Only a tuple is skipped next time: a list may change between records.
            last_headers = headers if type(headers) is tuple else None
        size = len(value) + (len(key) if key is not None else 0) + headers_size
        if size > max_record_bytes:
            raise RecordTooLarge(
                f"record {index} is {size} bytes (key, value and headers), over the "
                f"{max_record_bytes} bytes this log takes; nothing was written"
            )
