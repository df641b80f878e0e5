"""What callers pass to the memory API, checked and turned into record fields: origins,
producers, feedback weights and embeddings. Each raises `InvalidInput` (or
`InvalidWeight`) saying what was wrong, before anything is written.

>>> weight(2)
2.0
>>> producer(("extractor", "2")).version
'2'
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from .embedding import real_numbers
from .errors import BodyTooLarge, EmptyBody, InvalidInput, InvalidWeight, shown
from .ids import MemoryId, body_bytes, validate_name
from .items import Source
from .log.naming import MAX_PARTITIONS, validate_topic
from .log.port import Appended
from .records import MAX_DIMENSIONS, MAX_WEIGHT, Origin, Producer

__all__ = [
    "aware_millis",
    "body",
    "check_body",
    "embedding",
    "expiry",
    "origin",
    "producer",
    "wait_seconds",
    "wait_target",
    "weight",
]

#: The longest ttl: about 3,000 years, far inside the 2**63 milliseconds a record holds.
MAX_TTL_S = 1e11


def body(value: Any, max_bytes: int) -> bytes:
    """A remember's body: text (as UTF-8) or bytes, not empty, at most ``max_bytes``."""
    return check_body(body_bytes(value), max_bytes)


def aware_millis(moment: datetime.datetime, what: str, example: str) -> int:
    """Milliseconds since the epoch of an aware datetime. A naive one is refused, here
    for every call that takes a moment: Python reads it as local time and others as
    UTC, and which items a purge forgets or an audit shows must not depend on the
    machine's time zone. ``example`` shows the caller an aware one."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput(
            f"{what} {moment.isoformat()} has no timezone; give an aware datetime, e.g. {example}"
        )
    return int(moment.timestamp() * 1000)


def expiry(expires_at: Any, ttl: Any, now_ms: int) -> int | None:
    """When a remember expires, in milliseconds since the epoch, from ``expires_at`` (an
    aware `datetime`) or ``ttl`` (a `timedelta`, or seconds, from ``now_ms``); None for
    neither. Both at once, a naive datetime, a moment not after now, or a ttl that is
    not a positive finite number of seconds is refused."""
    if expires_at is None and ttl is None:
        return None
    if expires_at is not None and ttl is not None:
        raise InvalidInput("give expires_at or ttl, not both")
    if expires_at is not None:
        if not isinstance(expires_at, datetime.datetime):
            raise InvalidInput(
                f"expires_at is a timezone-aware datetime, got {type(expires_at).__name__} "
                "(for a duration use ttl=, in seconds or a timedelta)"
            )
        at = aware_millis(
            expires_at, "expires_at", "datetime.now(timezone.utc) + timedelta(days=1)"
        )
        if at <= now_ms:
            raise InvalidInput(
                f"expires_at {expires_at.isoformat()} is not after now: the item would never "
                "be seen"
            )
        return at
    if isinstance(ttl, datetime.timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        try:
            seconds = float(ttl)
        except OverflowError:
            seconds = math.inf
    else:
        raise InvalidInput(f"ttl is a timedelta or seconds, got {type(ttl).__name__}")
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_TTL_S:
        raise InvalidInput(f"ttl is from 0 (excluded) to {MAX_TTL_S:g} seconds, got {ttl!r:.80}")
    return now_ms + max(1, int(seconds * 1000))


def check_body(data: bytes, max_bytes: int) -> bytes:
    """An encoded body (a remember's, or a named item's after a patch), not empty and at
    most ``max_bytes``."""
    if not data:
        raise EmptyBody("the body is empty; there is nothing to remember")
    if len(data) > max_bytes:
        raise BodyTooLarge(
            f"the body is {len(data)} bytes, over the {max_bytes}-byte maximum; store large "
            "content elsewhere and remember a reference, or raise MemoryConfig.max_body_bytes"
        )
    return data


def _origin_of(value: Any) -> Origin:
    """An origin from an `Origin`, a `Source`, a receipt, a mapping or a tuple."""
    try:
        if isinstance(value, Origin):
            return value
        if isinstance(value, Source):
            return Origin(
                stream=value.stream,
                topic=value.topic,
                partition=value.partition,
                offset=value.offset,
                generation=value.generation,
            )
        if isinstance(value, Appended):
            # Its topic's generation too: without it an origin cannot tell a recreated
            # topic from the one the receipt came from (a receipt knows no stream).
            return Origin(
                topic=value.topic,
                partition=value.partition,
                offset=value.offset,
                generation=value.generation,
            )
        if isinstance(value, Mapping):
            # A `Source` as a mapping (``item.source._asdict()``) says its conversation too.
            given = _known_keys(value, Origin, "origin", also=("conversation",))
            given.pop("conversation", None)
            return msgspec.convert(given, Origin)
        if isinstance(value, tuple | list) and len(value) in (4, 5):
            stream, topic, partition, offset, *generation = value
            return Origin(
                stream=stream,
                topic=topic,
                partition=partition,
                offset=offset,
                generation=generation[0] if generation else "",
            )
    except (msgspec.ValidationError, TypeError) as exc:
        raise InvalidInput(f"origin is not a log position: {exc}") from None
    raise InvalidInput(
        "origin is a Source, a receipt, a mapping with topic, partition and offset, or a "
        f"tuple (stream, topic, partition, offset[, generation]); got {shown(value)}"
    )


def _known_keys(
    value: Mapping, struct: type[msgspec.Struct], what: str, also: tuple[str, ...] = ()
) -> dict:
    """A mapping given for ``struct`` as a dict, refused if it has a key the struct
    lacks (other than ``also``): msgspec passes unknown fields over (records must, for
    schema evolution), so a misspelt ``verison`` would be dropped without a word."""
    given = dict(value)
    unknown = [key for key in given if key not in struct.__struct_fields__ and key not in also]
    if unknown:
        raise InvalidInput(
            f"{what} has no field {shown(unknown[0])}; its fields are "
            f"{', '.join(struct.__struct_fields__)}"
        )
    return given


def origin(value: Any) -> Origin:
    """The log record an item came from, as a remember's ``origin`` (see `_origin_of`
    for what it may be given as), with every part checked."""
    found = _origin_of(value)
    found = msgspec.structs.replace(
        found,
        # Each refuses what is no str; plain text: no record carries a str subclass.
        topic=validate_topic(found.topic),
        stream=validate_name(found.stream, "origin stream", allow_empty=True),
        generation=validate_name(found.generation, "origin generation", allow_empty=True),
    )
    for name, number, bound in (
        ("partition", found.partition, 1 << 31),
        ("offset", found.offset, 1 << 63),
    ):
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < bound:
            raise InvalidInput(
                f"an origin's {name} is a whole number from 0 to {bound - 1}, got {shown(number)}"
            )
    return found


def producer(value: Any) -> Producer:
    """Who wrote an item: a name, a (name, version) pair, a mapping or a `Producer`."""
    found = _producer_of(value)
    name = validate_name(found.name, "producer name")  # each refuses what is no str
    version = validate_name(found.version, "producer version", allow_empty=True)
    if name is not found.name or version is not found.version:  # plain text for a subclass
        found = Producer(name=name, version=version)
    return found


def _producer_of(value: Any) -> Producer:
    if isinstance(value, Producer):
        return value
    if isinstance(value, str):
        return Producer(name=value)
    if isinstance(value, Mapping):
        given = _known_keys(value, Producer, "producer")
        try:
            return msgspec.convert(given, Producer)
        except msgspec.ValidationError as exc:
            raise InvalidInput(
                f"producer needs a 'name' and an optional 'version': {exc}"
            ) from None
    if isinstance(value, tuple) and len(value) == 2:
        return Producer(name=value[0], version=value[1])
    raise InvalidInput(
        f"producer is a name, a (name, version) pair or a mapping; got {shown(value)}"
    )


def weight(given: Any) -> float:
    """A feedback weight: a finite number within ±MAX_WEIGHT, so sums stay finite."""
    try:
        if isinstance(given, bool) or not isinstance(given, int | float):
            raise TypeError
        value = float(given)
    except (TypeError, OverflowError):
        value = math.nan
    if not math.isfinite(value) or abs(value) > MAX_WEIGHT:
        raise InvalidWeight(
            f"a feedback weight is a finite number from -{MAX_WEIGHT:g} to {MAX_WEIGHT:g}, "
            f"got {shown(given)}"
        )
    return value


def embedding(value: Any) -> bytes | None:
    """A vector given with a remember, as little-endian float32 bytes (None: none)."""
    if value is None:
        return None
    try:
        array = real_numbers(value)  # beyond float32: inf, refused below as not finite
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(f"an embedding is a list of numbers: {exc}") from None
    if array.ndim != 1 or array.size == 0:
        raise InvalidInput(
            f"an embedding is a non-empty flat list of numbers, got shape {array.shape}"
        )
    if array.size > MAX_DIMENSIONS:
        # The fold takes no more: a longer one was written, then set aside.
        raise InvalidInput(f"an embedding holds at most {MAX_DIMENSIONS} numbers, got {array.size}")
    if not np.all(np.isfinite(array)):
        raise InvalidInput(
            "an embedding must hold finite numbers within float32's range (about ±3.4e38)"
        )
    return array.astype("<f4").tobytes()


def wait_target(
    topic: str, after: Any, timeout: Any
) -> tuple[Appended | None, tuple[Appended, ...]]:
    """The receipts a read given ``after`` (a receipt, or the id a write returned) waits
    for on ``topic``, within ``timeout`` seconds; `InvalidInput` for anything else.
    Checked by every read that takes them, folded ones too (which never need to wait):
    a wrong argument is refused whichever path the read takes."""
    receipt = None
    others: tuple[Appended, ...] = ()
    if after is not None:
        if isinstance(after, MemoryId):
            receipt, others = after.receipt, after.also
        else:
            receipt = after
        if not isinstance(receipt, Appended):
            raise InvalidInput("after= takes a receipt returned by a write")
        for one in (receipt, *others):
            receipt_fields(one)
        if receipt.topic != topic:
            raise InvalidInput(
                f"the receipt is for topic {shown(receipt.topic)}, this handle reads {shown(topic)}"
            )
    wait_seconds(timeout)
    return receipt, others


_U63 = (1 << 63) - 1


def receipt_fields(receipt: Appended, partitions: int | None = None) -> Appended:
    """Refuse a receipt no write could have returned (msgspec Structs do not check
    field types when built): a partition, offset or time that is no whole number in
    range, a topic or generation that is no str; and, given the topic's ``partitions``,
    a partition it lacks. `InvalidInput`, never a raw error from comparing them later."""
    most = MAX_PARTITIONS if partitions is None else partitions
    for name, value, top in (
        ("partition", receipt.partition, most - 1),
        ("offset", receipt.offset, _U63),
        ("append time", receipt.append_time_ms, _U63),
    ):
        if type(value) is not int or not 0 <= value <= top:
            raise InvalidInput(
                f"the receipt's {name} is {shown(value)}: it is no receipt a write returned "
                f"to this topic{f' (it has {partitions} partitions)' if partitions else ''}; "
                "pass the receipt, or the MemoryId, that the write returned"
            )
    for name, value in (("topic", receipt.topic), ("generation", receipt.generation)):
        if type(value) is not str:
            raise InvalidInput(
                f"the receipt's {name} is {shown(value)}, not a str: it is no receipt a write "
                "returned; pass the receipt, or the MemoryId, that the write returned"
            )
    return receipt


def listing(prefix: Any, limit: Any) -> None:
    """Refuse a named-item listing's prefix that is no str and a limit that is no whole
    number from 0 (or None)."""
    if not isinstance(prefix, str):
        raise InvalidInput(f"prefix is a string, got {type(prefix).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInput(f"limit is a whole number, 0 or more, or None; got {shown(limit)}")


def wait_seconds(timeout: Any) -> float:
    """A wait's ``timeout``: a number of seconds from 0 to 1e9 (NaN, infinity, a string or
    a bool are refused with `InvalidInput`)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout < 1e9:
        raise InvalidInput(
            f"timeout is a number of seconds from 0 to below 1e9, got {shown(timeout)}"
        )
    return float(timeout)
