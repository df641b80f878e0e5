"""The start/stop life of a log, shared by both logs (the aiokafka model)."""

from __future__ import annotations

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

    async def _open(self) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    def _describe(self) -> str:
        return type(self).__name__

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the log. Safe to call twice; a stopped log cannot start again."""
        if self._state == "started":
            return
        if self._state == "stopped":
            raise LogClosed(f"this {self._describe()} was stopped; make a new one to open it again")
        await self._open()
        self._state = "started"

    async def stop(self) -> None:
        """Finish pending appends and release everything. Safe to call twice."""
        if self._state != "started":
            self._state = "stopped"
            return
        self._state = "stopping"
        try:
            await self._close()
        finally:
            self._state = "stopped"

    def _check_started(self) -> None:
        if self._state != "started":
            if self._state == "new":
                raise LogClosed("the log is not started; call 'await log.start()' first")
            raise LogClosed("the log is stopped; open a new one")

    def __del__(self) -> None:
        if self._state == "started":
            warnings.warn(
                f"{self._describe()} was not stopped; call stop() or use 'async with'",
                ResourceWarning,
                stacklevel=1,
            )
