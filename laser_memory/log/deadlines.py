"""One timer for many waits of the same length: the appends a log has in flight.

`asyncio.timeout` around every append puts a timer in the event loop's heap per call
(pushed, then cancelled); with hundreds of concurrent appends the heap's comparisons
(in Python) were a fifth of a `remember` on Kafka. Waits of one length end in the order
they began, so their deadlines are a queue, and one timer, set for the oldest deadline
not yet passed, serves them all.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Deadlines"]


class _Waiter(Protocol):
    def done(self) -> bool: ...


W = TypeVar("W", bound=_Waiter)


class Deadlines(Generic[W]):
    """Deadlines ``seconds`` after each `add`; a waiter not ``done()`` by its deadline is
    handed to ``expire`` (on the event loop, once). Done waiters are dropped as new ones
    come, so the queue holds about the waits in flight."""

    __slots__ = ("_expire", "_queue", "_seconds", "_timer")

    def __init__(self, seconds: float, expire: Callable[[W], None]) -> None:
        self._seconds = seconds
        self._expire = expire
        self._queue: collections.deque[tuple[float, W]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, waiter: W) -> None:
        """Give ``waiter`` a deadline ``seconds`` from now."""
        loop = asyncio.get_running_loop()
        queue = self._queue
        while queue and queue[0][1].done():
            queue.popleft()
        queue.append((loop.time() + self._seconds, waiter))
        if self._timer is None:
            self._timer = loop.call_at(queue[0][0], self._fire)

    def close(self) -> None:
        """Forget every deadline (the log is stopping: its waits end otherwise)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        queue = self._queue
        while queue and (queue[0][0] <= now or queue[0][1].done()):
            _, waiter = queue.popleft()
            if not waiter.done():
                self._expire(waiter)
        if queue:
            self._timer = loop.call_at(queue[0][0], self._fire)
