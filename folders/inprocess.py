"""The in-process folder behind folded recall.

A `FoldedReader` belongs to one memory handle. It remembers, per partition,
how far it has read, so each recall reads only records appended since the
last one; a fresh reader reads the whole topic once. A recall scoped to one
conversation reads only the partitions that can hold records about it: the
conversation's own partition and the partition of the namespace's writes
without a conversation (see the partition keys in `laser_memory.records`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from laser_memory.log.partitioner import partition_for
from laser_memory.log.port import Log, TopicInfo
from laser_memory.search_index import CACHE_BYTES

from .state import MemoryState, missing_records

__all__ = ["FoldedReader"]


class FoldedReader:
    """Folds one namespace of one topic into a `MemoryState`, incrementally."""

    def __init__(
        self,
        log: Log,
        topic: str,
        namespace: str,
        *,
        search_cache_bytes: int = CACHE_BYTES,
        tenant: str | None = None,
    ) -> None:
        self._log = log
        # The one tenant folded (None: every tenant; see `MemoryState`).
        self.tenant = tenant
        self._search_cache_bytes = search_cache_bytes
        self._topic = topic
        self._namespace = namespace
        self._positions: dict[int, int] = {}
        self._info: TopicInfo | None = None
        self._state: MemoryState | None = None
        self._lock = asyncio.Lock()

    @property
    def positions(self) -> dict[int, int]:
        """Per partition, the next offset this reader will fold."""
        return dict(self._positions)

    async def topic_info(self) -> TopicInfo:
        if self._info is None:
            self._info = await self._log.describe_topic(self._topic)
        return self._info

    def partitions_for_conversation(self, conversation: str, partitions: int) -> set[int]:
        return {
            partition_for(f"c/{conversation}".encode(), partitions),
            partition_for(f"n/{self._namespace}".encode(), partitions),
        }

    def partition_for_key(self, key: str, partitions: int) -> int:
        return partition_for(f"{self._namespace}/{key}".encode(), partitions)

    async def catch_up(self, partitions: Iterable[int] | None = None) -> MemoryState:
        """Fold every record appended so far to the given partitions (default: all).
        A topic deleted and created again since the last catch-up (another generation)
        is folded afresh from its start."""
        async with self._lock:
            # Every catch-up asks for the generation: a recreated topic may already be
            # longer than the one folded, so the offsets alone cannot tell.
            self._info = await self._log.describe_topic(self._topic)
            info = self._info
            if self._state is None or self._state.generation != info.generation:
                self._positions = {}
                self._state = MemoryState(
                    self._namespace,
                    topic=self._topic,
                    generation=info.generation,
                    search_cache_bytes=self._search_cache_bytes,
                    tenant=self.tenant,
                )
            chosen = sorted(partitions) if partitions is not None else list(range(info.partitions))
            ends = await self._log.end_offsets(self._topic)
            behind = [p for p in chosen if self._positions.get(p, 0) < ends.get(p, 0)]
            if behind:
                async for batch in self._log.read(
                    self._topic,
                    {p: self._positions.get(p, 0) for p in behind},
                    partitions=behind,
                    until={p: ends[p] for p in behind},
                ):
                    if batch:
                        self._state.set_aside.extend(missing_records(batch, self._positions))
                    for record in batch:
                        # Apply and advance together: nothing is ever folded twice.
                        self._state.apply(record)
                        self._positions[record.partition] = record.offset + 1
            return self._state
