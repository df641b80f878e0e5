"""Rules for topic names and shapes that both logs enforce alike."""

from __future__ import annotations

import math
import re

from ..errors import InvalidInput, InvalidName

__all__ = ["validate_partitions", "validate_topic"]

# Kafka's own rule, applied to the local log too so a topic name works on both.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def validate_topic(topic: str) -> str:
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise InvalidName(
            f"{topic!r} is not a valid topic name: use 1 to 249 characters from "
            "letters, digits, '.', '_' and '-'"
        )
    return topic


def validate_partitions(partitions: int, retention_s: float | None) -> None:
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise InvalidInput(f"a topic needs at least one partition, got {partitions!r}")
    if partitions > 10_000:
        raise InvalidInput(f"{partitions} partitions is more than the 10000 laser-memory allows")
    if retention_s is not None and (
        not isinstance(retention_s, int | float)
        or not math.isfinite(retention_s)
        or retention_s <= 0
    ):
        raise InvalidInput(
            f"retention must be a positive number of seconds or None (keep forever), "
            f"got {retention_s!r}"
        )
