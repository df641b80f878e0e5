"""The start/stop life of a log, shared by both logs (the aiokafka model)."""

from __future__ import annotations

import asyncio
import os
import warnings
from typing import Self

from ..errors import LogClosed

__all__ = ["LogLifecycle"]


class LogLifecycle:
    """``start()`` and ``stop()`` are safe to call twice, ``async with`` starts and stops,
    use before ``start()`` or after ``stop()`` raises `LogClosed`, and an object
    dropped while started warns with a `ResourceWarning`.

    Subclasses implement ``_open`` and ``_close``.
    """

    _state = "new"
    #: Held while a start or a stop is under way: a second start waits for the first
    #: (two starts both opened clients, and the first's were never closed), and a stop
    #: for the start it came during (it returned, and the start then left the log
    #: started with no one to stop it). Made on first use, as no subclass calls an
    #: ``__init__`` of this class.
    _changing: asyncio.Lock | None = None
    #: The event loop and process that started the log: its tasks, threads and
    #: connections live there.
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0

    async def _open(self) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    def _describe(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _change(self) -> asyncio.Lock:
        if self._changing is None:
            self._changing = asyncio.Lock()
        return self._changing

    async def start(self) -> None:
        """Open the log. Safe to call twice, also at once (the second waits for the
        first); a stopped log cannot start again. A start that fails or is cancelled
        leaves nothing open, and the log can be started again."""
        if self._state == "started":
            return
        async with self._change():
            if self._state == "started":
                return
            if self._state == "stopped":
                raise LogClosed(
                    f"this {self._describe()} was stopped; make a new one to open it again"
                )
            await self._open()
            self._loop = asyncio.get_running_loop()
            self._pid = os.getpid()
            self._state = "started"

    async def stop(self) -> None:
        """Finish pending appends and release everything. Safe to call twice, also at
        once; a stop during a start waits for it, then stops. Once the event loop that
        started it has ended (a second ``asyncio.run``), whose end cancelled the log's
        tasks, it releases what it can from any loop; while that loop is open, only it
        may stop the log."""
        if self._state == "started" and os.getpid() != self._pid:
            # A forked child's copy: the parent's resources are the parent's to release.
            self._state = "stopped"
            return
        async with self._change():
            await self._stop()

    async def _stop(self) -> None:
        if self._state != "started":
            self._state = "stopped"
            return
        if self._loop is not asyncio.get_running_loop():
            if self._loop is not None and not self._loop.is_closed():
                raise LogClosed(
                    f"this {self._describe()} runs in another event loop, which is still "
                    "open: stop it from that loop"
                )
            self._state = "stopped"
            self._abandon()
            return
        self._state = "stopping"
        try:
            await self._close()
        finally:
            self._state = "stopped"

    def _abandon(self) -> None:
        """Release what needs no task of the loop that started the log (that loop has
        ended). Subclasses with such resources override it."""

    def _check_started(self) -> None:
        if self._state != "started":
            if self._state == "new":
                raise LogClosed(
                    "the log is not started; call 'await log.start()' first (through a "
                    "connection: 'async with laser_memory.connect(...)', or 'await "
                    "laser.start()')"
                )
            raise LogClosed("the log is stopped; open a new one")
        if os.getpid() != self._pid:
            # Threads do not survive a fork: its writer and connections are the parent's.
            raise LogClosed(
                f"this {self._describe()} was started in the parent of this forked process, "
                "and serves only that process; start a new one here"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous caller off the loop (a worker thread)
            return
        if running is not self._loop:
            # Its tasks and connections belong to that loop: used from this one, a write
            # waited for a writer task that no longer runs, forever.
            raise LogClosed(
                f"this {self._describe()} was started in another event loop (each "
                "asyncio.run() is a new one), and serves only that loop; start a new one "
                "in this loop"
            )

    def __del__(self) -> None:
        if self._state == "started":
            warnings.warn(
                f"{self._describe()} was not stopped; call stop() or use 'async with'",
                ResourceWarning,
                stacklevel=1,
            )
