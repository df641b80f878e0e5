"""The embedded log, counting the records its reads hand out: what tests of reads that
must hold or read little assert on."""

from __future__ import annotations

from collections.abc import AsyncIterator

from laser_memory.log import LocalLog
from laser_memory.log.port import LogRecord


class CountingLog(LocalLog):
    """The embedded log, counting the records its reads hand out (``handed_out``)."""

    handed_out = 0

    async def read(self, *args, **kwargs) -> AsyncIterator[list[LogRecord]]:
        async for batch in super().read(*args, **kwargs):
            self.handed_out += len(batch)
            yield batch
