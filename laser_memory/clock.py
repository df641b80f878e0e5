"""The clock port: where laser-memory reads the time.

The embedded log stamps append times from a `Clock`, and random `MemoryId`s take
their millisecond prefix from one, so tests can step time forward and back. On
Kafka append times are the broker's and no clock here is read for them. Nothing
that decides what a memory holds depends on a clock: a forget carries the log
positions its writer had seen (see `folders.state`).

>>> clock = SteppedClock(1_000)
>>> clock.step(-20)
>>> clock.now_ms()
980
"""

from __future__ import annotations

import inspect
import time
from typing import Protocol, runtime_checkable

from .errors import ConfigError, shown

__all__ = ["MAX_MS", "SYSTEM_CLOCK", "Clock", "SteppedClock", "SystemClock", "validate_clock"]


@runtime_checkable
class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class SteppedClock:
    """A clock that moves only when told to: for tests of skew, steps back and ties."""

    def __init__(self, start_ms: int | None = None) -> None:
        self._now = time.time_ns() // 1_000_000 if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._now

    def step(self, millis: int) -> None:
        """Move the clock by ``millis`` (negative steps it back)."""
        self._now += millis

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    def __repr__(self) -> str:
        return f"SteppedClock({self._now})"


SYSTEM_CLOCK = SystemClock()


#: The latest moment a clock may give: append times and position keys are int64.
MAX_MS = (1 << 63) - 1


class _CheckedClock:
    """A caller's clock whose every reading is checked: one that gave a float, a bool, or
    a moment before the epoch or past int64 milliseconds failed later with a raw
    TypeError or OverflowError, or stamped an append time no fold could read."""

    __slots__ = ("clock",)

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now_ms(self) -> int:
        try:
            value = self.clock.now_ms()
        except Exception as exc:  # as the other hooks' failures are: a LaserError
            raise ConfigError(
                f"the clock {shown(self.clock)} raised {type(exc).__name__} from now_ms(): {exc}"
            ) from exc
        if type(value) is not int or not 0 <= value <= MAX_MS:
            raise ConfigError(
                f"the clock {shown(self.clock)} gave {shown(value)} from now_ms(); a clock gives "
                "whole milliseconds since the epoch (an int from 0 to 2**63-1), as "
                "time.time_ns() // 1_000_000 does"
            )
        return value

    def __repr__(self) -> str:
        return repr(self.clock)

    def __eq__(self, other: object) -> bool:
        return type(other) is _CheckedClock and other.clock == self.clock

    def __hash__(self) -> int:
        return hash(self.clock)


def validate_clock(clock: object) -> Clock:
    """``clock`` as laser-memory reads it: a `Clock` (has ``now_ms()``), each of whose
    readings is checked (`ConfigError` for one that is no int of milliseconds from 0 to
    2**63-1), else `ConfigError`: a clock is first read inside a commit, where a bad one
    would fail other writers' appends.

    >>> validate_clock(SteppedClock(5)).now_ms()
    5
    """
    if clock is SYSTEM_CLOCK or type(clock) is _CheckedClock:
        return clock  # type: ignore[return-value]
    if not callable(getattr(clock, "now_ms", None)):
        raise ConfigError(
            f"a clock has a now_ms() method giving milliseconds since the epoch, got "
            f"{type(clock).__name__}"
        )
    if inspect.iscoroutinefunction(clock.now_ms):  # type: ignore[attr-defined]
        # Each reading failed, and left a coroutine never awaited behind it.
        raise ConfigError(
            f"the clock {shown(clock)} has an async now_ms(); a clock's is a plain method: it "
            "is read inside a log's commit, where nothing can be awaited"
        )
    return _CheckedClock(clock)  # type: ignore[arg-type]
