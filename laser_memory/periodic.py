"""Passes on a timer: the first when started, one every ``every`` seconds after,
until stopped. A failed pass is kept in `failures` and the next one still runs.

`laser_memory.retention.RetentionDriver` and `ConsolidationDriver` are the two; an
agent runner gives each agent its own.

>>> async with ConsolidationDriver(Compact(), every=60.0):        # doctest: +SKIP
...     await serve()
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import warnings
from typing import Any

from .consolidation import ConsolidationReport, Consolidator
from .errors import ConfigError, shown
from .latest import Latest

__all__ = ["ConsolidationDriver", "PeriodicPass"]


class PeriodicPass:
    """The timer: subclasses define `run_once`. ``start``/``stop`` are safe to call
    twice; ``async with`` does both. The task lives in a task group this object owns."""

    name = "laser-pass"

    def __init__(self, *, every: float) -> None:
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise ConfigError(f"every is a positive number of seconds, got {shown(every)}")
        if not every <= sys.float_info.max:  # compared: an int past float's range raised
            raise ConfigError(f"every is a finite number of seconds, got {shown(every)}")
        self.every = float(every)
        self.passes = 0
        #: The latest failed passes' errors (`Latest`: ``failures.total`` counts all).
        self.failures: Latest[Exception] = Latest()
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task | None = None

    async def run_once(self) -> Any:
        raise NotImplementedError

    async def start(self) -> None:
        if self._group is not None:
            return
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._task = self._group.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._group is None:
            return
        group, self._group = self._group, None
        if self._task is not None:
            self._task.cancel()
        await group.__aexit__(None, None, None)

    async def __aenter__(self) -> PeriodicPass:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __del__(self) -> None:
        # Dropped while started: its task would be destroyed pending, a pass cut short
        # wherever it stood, with no more than asyncio's log line to say so.
        if getattr(self, "_group", None) is not None:
            warnings.warn(
                f"{type(self).__name__} was never stopped; await stop() or use 'async with'",
                ResourceWarning,
                stacklevel=1,
            )

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
                self.passes += 1
            except Exception as exc:  # a failed pass must not stop the later ones
                self.failures.keep(exc)
            await asyncio.sleep(self.every)


class ConsolidationDriver(PeriodicPass):
    """Runs ``consolidator.consolidate(scope)`` (sync or async, an `lm.Consolidator`)
    on a timer; `reports` keeps what each pass returned.

    >>> class Compact:
    ...     async def consolidate(self, scope):
    ...         return await memory.consolidate(500)
    >>> driver = ConsolidationDriver(Compact(), every=60.0)     # doctest: +SKIP
    """

    name = "laser-consolidation"

    def __init__(self, consolidator: Consolidator, *, every: float, scope: Any = None) -> None:
        if not callable(getattr(consolidator, "consolidate", None)):
            raise ConfigError(
                "a consolidation driver needs a consolidator: an object with consolidate(scope)"
            )
        super().__init__(every=every)
        self.consolidator = consolidator
        self.scope = scope
        #: The latest passes' reports (`Latest`: ``reports.total`` counts all).
        self.reports: Latest[ConsolidationReport | None] = Latest()

    async def run_once(self) -> ConsolidationReport | None:
        report = self.consolidator.consolidate(self.scope)
        if inspect.isawaitable(report):
            report = await report
        self.reports.keep(report)
        return report
