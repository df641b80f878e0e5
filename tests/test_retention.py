"""Retention: `purge` forgets, oldest first, the items last written before a cutoff,
with ordinary forgets (history and as_of keep them), and a driver runs it on a timer.
Over both logs."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest

import laser_memory as lm
from laser_memory.clock import SteppedClock
from laser_memory.retention import MAX_AGE_S, MAX_PURGE


async def _spaced(memory, bodies, **scope) -> list[lm.MemoryId]:
    """Remember each body a few milliseconds after the last: append times order them."""
    ids = []
    for body in bodies:
        ids.append(await memory.remember(body, **scope))
        await asyncio.sleep(0.005)
    return ids


def _moment(mid: lm.MemoryId) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(mid.receipt.append_time_ms / 1000, datetime.UTC)


async def test_purge_forgets_the_oldest_first_up_to_the_limit(laser: lm.Laser):
    memory = laser.memory("notes")
    old = await _spaced(memory, [f"old fact {n}" for n in range(5)])
    kept = await _spaced(memory, ["new fact"])
    await memory.improve(old[1], 1.0)  # feedback is a write: it keeps old[1]
    cutoff = _moment(kept[0])
    assert await memory.purge(cutoff, limit=1) == 1  # the smallest limit: one a pass
    assert await memory.purge(cutoff, limit=1) == 1
    left = {i.id for i in await memory.recall(folded=True, limit=100)}
    assert left == {old[1], old[3], old[4], kept[0]}  # old[0] and old[2] went first
    assert await memory.purge(cutoff, limit=2) == 2
    assert await memory.purge(cutoff, limit=2) == 0  # call again while it returns limit
    left = {i.id for i in await memory.recall(folded=True, limit=100)}
    assert left == {old[1], kept[0]}
    assert MAX_AGE_S == 1e11  # about 3,000 years, as its docstring says
    assert await memory.purge(1e11, limit=1) == 0  # the oldest age taken: none so old
    # Ordinary forgets: the history keeps the item and what happened to it.
    assert [h.op for h in await memory.history(old[0], folded=True)] == ["remember", "forget"]


async def test_purge_takes_the_oldest_across_partitions(laser: lm.Laser):
    # Conversations land on different partitions, and a fold meets them partition by
    # partition, not in the order they were written: the oldest must still go first.
    memory = laser.memory("notes")
    ids = []
    for n in range(8):
        ids += await _spaced(memory, [f"fact {n}"], conversation=f"c{n}")
    [kept] = await _spaced(memory, ["new fact"])
    by_partition = sorted(ids, key=lambda m: (m.receipt.partition, m.receipt.offset))
    assert by_partition != ids  # the test needs the two orders to differ
    assert await memory.purge(_moment(kept), limit=3) == 3
    left = {i.id for i in await memory.recall(folded=True, limit=100)}
    assert left == {*ids[3:], kept}


async def test_purge_stays_in_its_tenant_and_conversation(laser: lm.Laser):
    memory = laser.memory("notes")
    [mine] = await _spaced(memory, ["tenant a's fact"], tenant="a")
    [theirs] = await _spaced(memory, ["tenant b's fact"], tenant="b")
    [here, there] = [
        (await _spaced(memory, [f"fact in {c}"], conversation=c))[0] for c in ("c1", "c2")
    ]
    cutoff = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)
    assert await memory.purge(cutoff, tenant="a") == 1
    assert [i.id for i in await memory.recall(tenant="b", folded=True)] == [theirs]
    assert await memory.scoped("c1").purge(cutoff) == 1
    assert {i.id for i in await memory.recall(folded=True)} == {there}
    assert mine not in {i.id for i in await memory.recall(tenant="a", folded=True)}
    assert here not in {i.id for i in await memory.recall(conversation="c1", folded=True)}


async def test_an_age_counts_back_from_the_connections_clock(tmp_path: Path):
    clock = SteppedClock(1_000_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        first = await memory.remember("written at t")
        clock.step(60_000)
        second = await memory.remember("written a minute later")
        clock.step(30_000)
        assert await memory.purge(datetime.timedelta(seconds=100)) == 0
        assert await memory.purge(90.0) == 0  # the first was written at the cutoff, not before
        assert await memory.purge(89.999) == 1  # a millisecond later: the first only
        assert [i.id for i in await memory.recall(folded=True)] == [second]
        assert first not in {i.id for i in await memory.recall(folded=True)}


async def test_purge_and_forget_expired_take_1000_items_a_call_by_default(tmp_path: Path):
    """The README's default: at most 1,000 items a call, so a caller loops while a call
    returns 1,000 (a larger default would be one long batch nobody asked for)."""
    clock = SteppedClock(1_000_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        await memory.remember_many([{"body": f"old {n}"} for n in range(1001)])
        await memory.remember_many([{"body": f"brief {n}", "ttl": 1.0} for n in range(1001)])
        clock.step(60_000)
        assert [await memory.forget_expired() for _ in range(3)] == [1000, 1, 0]
        assert [await memory.purge(30.0) for _ in range(3)] == [1000, 1, 0]
        assert await memory.recall(folded=True) == []


async def test_a_moment_without_a_timezone_is_refused(tmp_path: Path):
    """A naive datetime was read as local time here and as UTC by as_of: which items a
    purge forgot depended on the machine's time zone."""
    clock = SteppedClock(1_000_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        await memory.remember("written at t")
        clock.step(60_000)
        now = datetime.datetime.fromtimestamp(clock.now_ms() / 1000, datetime.UTC)
        ends = await laser.log.end_offsets(memory.topic)

        class NoOffset(datetime.tzinfo):  # a zone that gives no offset: naive in effect
            def utcoffset(self, dt):
                return None

        for call in (memory.purge, memory.scoped("c1").purge):
            for naive in (now.replace(tzinfo=None), now.replace(tzinfo=NoOffset())):
                with pytest.raises(lm.InvalidInput, match="has no timezone; give an aware"):
                    await call(naive)
        assert await laser.log.end_offsets(memory.topic) == ends
        # The same moment, aware and past, purges; one in another zone names the same instant.
        assert await memory.purge(now - datetime.timedelta(seconds=30)) == 1
        later = now.astimezone(datetime.timezone(datetime.timedelta(hours=5)))
        assert await memory.purge(later) == 0


@pytest.mark.parametrize(
    "older_than, limit",
    [
        (-1.0, 10), (float("nan"), 10), ("30d", 10), (True, 10), (60.0, 0), (60.0, 10_001),
        (1e11 + 1, 10),  # past MAX_AGE_S
        (10**400, 10),  # past a float's range
    ],
)  # fmt: skip
async def test_bad_retention_arguments_write_nothing(laser: lm.Laser, older_than, limit):
    memory = laser.memory("notes")
    await memory.remember("a fact")
    ends = await laser.log.end_offsets(memory.topic)
    with pytest.raises(lm.InvalidInput):
        await memory.purge(older_than, limit=limit)
    if older_than == 60.0:  # a bad limit: the expiry sweep refuses it too
        with pytest.raises(lm.InvalidInput, match="limit is a whole number from 1 to"):
            await memory.forget_expired(limit=limit)
    assert await laser.log.end_offsets(memory.topic) == ends


async def test_retention_takes_a_limit_up_to_its_bound(laser: lm.Laser):
    memory = laser.memory("notes")
    await memory.remember("a fact")
    for limit in (1, MAX_PURGE):  # nothing is an hour old, or expires
        assert await memory.purge(3600.0, limit=limit) == 0
        assert await memory.forget_expired(limit=limit) == 0
    assert [i.text for i in await memory.recall()] == ["a fact"]


async def test_retention_on_a_namespace_never_written_forgets_nothing(tmp_path: Path):
    async with lm.connect(f"local://{tmp_path}") as laser:
        memory = laser.memory("notes")
        assert await memory.purge(0) == 0
        assert await memory.forget_expired() == 0
        await laser.memory("other").remember("a fact")  # the topic now exists
        assert await memory.purge(0) == 0
        assert await memory.forget_expired() == 0


async def test_a_retention_driver_purges_on_a_timer_and_stops(tmp_path: Path):
    clock = SteppedClock(1_000_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {n}" for n in range(5)])
        clock.step(10_000)
        driver = lm.RetentionDriver(memory, older_than=5.0, every=0.02, limit=2)
        async with driver:
            for _ in range(200):
                if driver.purged == 5:
                    break
                await asyncio.sleep(0.01)
            assert driver.purged == 5  # the first pass forgets all five, two at a time
            fresh = await memory.remember("written after the purge")
            await asyncio.sleep(0.1)
            assert [i.id for i in await memory.recall(folded=True)] == [fresh]
        passes = driver.passes
        await asyncio.sleep(0.1)
        assert driver.passes == passes and driver.failures == []  # stopped
        await driver.stop()  # twice is fine


async def test_one_retention_pass_repeats_while_it_forgets_a_whole_limit(tmp_path: Path):
    """A pass sweeps the expired items, then purges, each again and again while a call
    forgets ``limit``: one pass leaves nothing due, and the driver counts each kind."""
    clock = SteppedClock(1_000_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {n}" for n in range(5)])
        for n in range(3):
            await memory.remember(f"door code {n}", ttl=1.0)
        clock.step(10_000)
        driver = lm.RetentionDriver(memory, older_than=5.0, every=60.0, limit=2)
        assert await driver.run_once() == 8
        assert (driver.expired, driver.purged) == (3, 5)
        assert await memory.recall(folded=True) == []
        assert await driver.run_once() == 0
        assert (driver.expired, driver.purged) == (3, 5)


@pytest.mark.parametrize(
    "options",
    [
        {"every": 0},
        {"every": -1.0},
        {"every": float("inf")},
        {"every": 10**400},  # past float's range: a raw OverflowError before
        {"every": "1h"},
        {"limit": 0},
        {"older_than": -1.0},  # refused when made, not in every pass
        {"older_than": float("nan")},
        {"older_than": "30d"},
        # A moment, not an age: every pass would purge before the same fixed moment.
        {"older_than": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
    ],
)
async def test_a_retention_driver_refuses_bad_settings(tmp_path: Path, options):
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        settings = {"older_than": 60.0, "every": 1.0, **options}
        with pytest.raises((lm.ConfigError, lm.InvalidInput)):
            lm.RetentionDriver(laser.memory("notes"), **settings)


def test_a_retention_driver_over_no_memory_handle_is_refused():
    # It was taken, and each pass then failed into `failures` with an AttributeError.
    with pytest.raises(lm.ConfigError, match="over a memory handle"):
        lm.RetentionDriver("notes", older_than=60.0, every=1.0)  # type: ignore[arg-type]


async def test_a_retention_driver_whose_passes_would_all_be_refused_is_refused(tmp_path: Path):
    """A tenant the handle is not bound to or no name at all, or a principal that may
    not read or may not write: each pass failed into `failures`, for the driver's life.
    Refused when made, with the error a pass would raise."""
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        acme = laser.memory("notes", tenant="acme")
        topic = acme.topic
        refused = [
            (acme, {"tenant": "globex"}, lm.AccessDenied, "bound to tenant 'acme'"),
            (laser.memory("notes"), {"tenant": "a\x00b"}, lm.InvalidName, "control character"),
            (
                laser.memory("notes", principal=lm.Principal("r", grants={"kv:read:notes"})),
                {},
                lm.AccessDenied,
                f"publish:{topic}",
            ),
            (
                laser.memory("notes", principal=lm.Principal("w", grants={f"publish:{topic}"})),
                {},
                lm.AccessDenied,
                "kv:read:notes",
            ),
        ]
        for memory, options, error, says in refused:
            with pytest.raises(error, match=says):
                lm.RetentionDriver(memory, older_than=60.0, every=1.0, **options)
        both = lm.Principal("rw", grants={"kv:read:notes", f"publish:{topic}"})
        for memory, tenant in ((acme, "acme"), (laser.memory("notes", principal=both), None)):
            async with lm.RetentionDriver(memory, older_than=60.0, every=60.0, tenant=tenant) as d:
                for _ in range(2000):  # the first pass runs when it starts
                    if d.passes + len(d.failures):
                        break
                    await asyncio.sleep(0.01)
            assert d.passes == 1 and d.failures == []
