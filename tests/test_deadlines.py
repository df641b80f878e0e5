"""One timer for many appends' deadlines: each waiter still expires on its own, at its
own deadline, and only if it is not done by then."""

from __future__ import annotations

import asyncio

from laser_memory.log.deadlines import Deadlines


class Waiter:
    def __init__(self) -> None:
        self.finished = False

    def done(self) -> bool:
        return self.finished


async def test_waiters_expire_at_their_own_deadline_unless_done():
    expired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    names: dict[int, str] = {}
    deadlines: Deadlines[Waiter] = Deadlines(
        0.2, lambda w: expired.append((names[id(w)], loop.time()))
    )
    first, second, third = Waiter(), Waiter(), Waiter()
    names.update({id(first): "first", id(second): "second", id(third): "third"})
    start = loop.time()
    deadlines.add(first)
    await asyncio.sleep(0.1)
    deadlines.add(second)
    deadlines.add(third)
    second.finished = True  # done before its deadline: never expires
    await asyncio.sleep(0.15)
    assert [name for name, _ in expired] == ["first"]
    await asyncio.sleep(0.15)
    assert [name for name, _ in expired] == ["first", "third"]
    (_, at_first), (_, at_third) = expired
    assert 0.2 <= at_first - start < 0.3 and 0.3 <= at_third - start < 0.4


async def test_done_waiters_leave_the_queue_as_new_ones_come():
    deadlines: Deadlines[Waiter] = Deadlines(30.0, lambda w: None)
    for _ in range(10_000):
        waiter = Waiter()
        deadlines.add(waiter)
        waiter.finished = True
    assert len(deadlines._queue) == 1  # only the last, not ten thousand
    deadlines.close()


async def test_closed_deadlines_expire_nothing():
    expired: list[Waiter] = []
    deadlines: Deadlines[Waiter] = Deadlines(0.05, expired.append)
    deadlines.add(Waiter())
    deadlines.close()
    await asyncio.sleep(0.1)
    assert expired == []
    later = Waiter()
    deadlines.add(later)  # usable again, as a log started once more
    await asyncio.sleep(0.1)
    assert expired == [later]
