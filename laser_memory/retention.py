"""Retention: forgetting what was last written long ago, by hand (`MemoryHandle.purge`,
which runs `purge` here, as `MemoryHandle.forget_expired` runs `forget_expired`) or on a
timer (`RetentionDriver`).

A pass forgets, oldest first, the live items whose latest record (remember,
feedback, embedded vector) was appended before a cutoff, at most ``limit`` of them,
with ordinary forget records: the history keeps them, and ``as_of`` still shows what
was known before. Ages are measured against the connection's clock; on Kafka append
times are the broker's. There is no default age: keeping everything is the default.

>>> driver = RetentionDriver(memory, older_than=timedelta(days=30), every=3600.0)  # doctest: +SKIP
>>> async with driver:                                          # doctest: +SKIP
...     await serve_forever()
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any

import msgspec

from .access import resolve_tenant
from .clock import SYSTEM_CLOCK, Clock
from .errors import ConfigError, InvalidInput, shown
from .inputs import aware_millis
from .periodic import PeriodicPass
from .records import Forget

if TYPE_CHECKING:
    from .memory import MemoryHandle
    from .scope import MemoryScope

__all__ = [
    "MAX_AGE_S",
    "MAX_PURGE",
    "RetentionDriver",
    "cutoff_ms",
    "forget_expired",
    "purge",
    "validate_purge_limit",
]

#: The most items one pass forgets (its forgets go in one batch).
MAX_PURGE = 10_000
#: The oldest age a pass takes (about 3,000 years): beyond it milliseconds overflow.
MAX_AGE_S = 1e11

Age = datetime.timedelta | datetime.datetime | float | int


def cutoff_ms(older_than: Age, clock: Clock) -> int:
    """The cutoff in milliseconds since the epoch: ``older_than`` is an age (a
    `timedelta`, or seconds) counted back from the clock's now, or a moment (an aware
    `datetime`; one a little after now also takes what a broker whose clock runs ahead
    stamped later)."""
    if isinstance(older_than, datetime.datetime):
        return aware_millis(
            older_than, "older_than", "datetime.now(timezone.utc) - timedelta(days=90)"
        )
    if isinstance(older_than, datetime.timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, int | float) and not isinstance(older_than, bool):
        try:
            seconds = float(older_than)
        except OverflowError:
            seconds = math.inf
    else:
        raise InvalidInput(
            "older_than is an age (a timedelta, or seconds) or a moment (a datetime), got "
            f"{shown(older_than)}"
        )
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_AGE_S:
        raise InvalidInput(
            f"older_than is an age from 0 to {MAX_AGE_S:g} seconds, got {older_than!r:.80}"
        )
    return clock.now_ms() - int(seconds * 1000)


def validate_purge_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PURGE:
        raise InvalidInput(f"limit is a whole number from 1 to {MAX_PURGE}, got {shown(limit)}")
    return limit


async def _folded_for_forgets(
    memory: MemoryHandle, tenant: str | None, limit: int
) -> tuple[MemoryScope, Any, tuple[int, ...]] | None:
    """What a pass that writes forgets starts from, once the caller's grants and the
    arguments are checked and before anything is read: the scope it acts in, the
    handle's fold caught up, and how far that fold had read each partition (each
    forget ends only what it saw). None when the topic does not exist yet."""
    validate_purge_limit(limit)
    scope = memory._scope(tenant=tenant)
    info = await memory._topic_info()
    if info is None:
        return None
    state = await memory._reader.catch_up()
    return scope, state, memory._folded(info.partitions)


async def purge(memory: MemoryHandle, older_than: Age, *, tenant: str | None, limit: int) -> int:
    """`MemoryHandle.purge`: forget ``memory``'s items last written before the cutoff,
    oldest first, at most ``limit``; returns how many."""
    memory._check_read()
    memory._check_publish()
    before_ms = cutoff_ms(older_than, memory._laser.clock)
    folded = await _folded_for_forgets(memory, tenant, limit)
    if folded is None:
        return 0
    scope, state, seen = folded
    oldest = state.last_written(
        scope.tenant, before_ms=before_ms, limit=limit, conversation=scope.conversation
    )
    if not oldest:
        return 0
    await memory._write(
        [
            Forget(ns=memory.namespace, scope=scope, target=raw_id, seen=seen, only_seen=True)
            for raw_id in oldest
        ]
    )
    return len(oldest)


async def forget_expired(memory: MemoryHandle, *, tenant: str | None, limit: int) -> int:
    """`MemoryHandle.forget_expired`: write the forgets of ``memory``'s items whose
    remembers expired, oldest expiry first, at most ``limit``; returns how many."""
    memory._check_read()
    memory._check_publish()
    folded = await _folded_for_forgets(memory, tenant, limit)
    if folded is None:
        return 0
    scope, state, seen = folded
    due = state.expired(
        scope.tenant,
        now_ms=memory._laser.clock.now_ms(),
        limit=limit,
        conversation=scope.conversation,
    )
    forgets = [
        Forget(
            ns=memory.namespace,
            scope=msgspec.structs.replace(scope, conversation=conversation),
            target=raw_id,
            seen=seen,
            only_seen=True,
        )
        for raw_id, conversations in due
        for conversation in conversations
    ]
    if forgets:
        await memory._write(forgets)
    return len(due)


class RetentionDriver(PeriodicPass):
    """Every ``every`` seconds (the first pass at start) forgets the expired items
    (`MemoryHandle.forget_expired`) and, with ``older_than``, purges what was last
    written before that age (`MemoryHandle.purge`); each repeated while it forgets a
    whole ``limit``. There is no default age: ``older_than=None`` sweeps expired items
    only. A pass that fails is kept in `failures` and the next one still runs;
    `expired` and `purged` count what was forgotten.

    ``start``/``stop`` are safe to call twice; ``async with`` does both.

    >>> async with RetentionDriver(memory, older_than=90 * 86_400, every=3600.0):  # doctest: +SKIP
    ...     await serve_forever()
    """

    name = "laser-retention"

    def __init__(
        self,
        memory: MemoryHandle,
        *,
        older_than: Age | None,
        every: float,
        tenant: str | None = None,
        limit: int = 1000,
    ) -> None:
        super().__init__(every=every)
        if not all(callable(getattr(memory, m, None)) for m in ("purge", "forget_expired")):
            raise ConfigError(
                f"a retention driver runs over a memory handle (laser.memory(...)), got "
                f"{shown(memory)}"
            )
        if isinstance(older_than, datetime.datetime):
            raise ConfigError("a retention driver takes an age (older_than=timedelta or seconds)")
        if older_than is not None:
            cutoff_ms(older_than, SYSTEM_CLOCK)  # refuses a bad age now, not in every pass
        # A tenant or principal that refuses the passes would fail every one into
        # `failures`: refused now, with the error each pass would raise.
        resolve_tenant(getattr(memory, "tenant", None), tenant)
        principal = getattr(memory, "principal", None)
        if principal is not None:
            principal.check_read(getattr(memory, "namespace", None))
            principal.check_publish(getattr(memory, "topic", None))
        self.memory = memory
        self.older_than = older_than
        self.tenant = tenant
        self.limit = validate_purge_limit(limit)
        self.expired = 0
        self.purged = 0

    async def run_once(self) -> int:
        """One pass: forget expired items, then purge, each until a call forgets less
        than ``limit``; returns how many items were forgotten."""
        expired = await self._repeat(
            lambda: self.memory.forget_expired(tenant=self.tenant, limit=self.limit)
        )
        self.expired += expired
        purged = 0
        if self.older_than is not None:
            older_than = self.older_than
            purged = await self._repeat(
                lambda: self.memory.purge(older_than, tenant=self.tenant, limit=self.limit)
            )
            self.purged += purged
        return expired + purged

    async def _repeat(self, call) -> int:
        total = 0
        while True:
            forgotten = await call()
            total += forgotten
            if forgotten < self.limit:
                return total
