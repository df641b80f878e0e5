"""Expiry: an item remembered with ``ttl`` or ``expires_at`` leaves every recall at that
moment (folded, managed, by text and by meaning, before ranking), stays in history and in
the past, and the sweeper writes its forget. Over both logs, on a stepped clock."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

import laser_memory as lm
from folders.http import make_app
from folders.service import ViewFolder
from folders.view import MemoryView
from laser_memory.clock import SteppedClock
from laser_memory.inputs import MAX_TTL_S
from laser_memory.log import OutgoingRecord
from laser_memory.records import Remember, encode_record
from laser_memory.scope import MemoryScope

HOUR_MS = 3_600_000


@contextlib.asynccontextmanager
async def stepped(url: str, stream: str, tmp_path: Path) -> AsyncIterator[tuple]:
    clock = SteppedClock(time.time_ns() // 1_000_000)
    view = tmp_path / "view"
    async with lm.connect(
        url, stream=stream, clock=clock, view=view, embedder=lm.WordHashEmbedder()
    ) as laser:
        await laser.bootstrap(partitions=4)
        yield laser, clock, view


async def fold(laser: lm.Laser, view: Path) -> None:
    await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)


async def recalls(memory, **query) -> list[list[str]]:
    """The texts each way of reading returns: folded and managed, recent, keyword,
    hybrid and semantic."""
    out = []
    for folded in (True, False):
        for strategy, text in (
            ("recent", None),
            ("keyword", "door code"),
            ("hybrid", "door code"),
            ("semantic", "door code"),
        ):
            items = await memory.recall(
                strategy=strategy, text=text, folded=folded, limit=100, **query
            )
            out.append(sorted(i.text for i in items))
            # The limit counts items a read may see: an expired one takes no place.
            best = await memory.recall(
                strategy=strategy, text=text, folded=folded, limit=1, **query
            )
            assert best == items[:1], (strategy, folded)
    return out


async def test_an_expired_item_leaves_every_recall_at_once(any_log_url, stream_name, tmp_path):
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, view):
        memory = laser.memory("notes")
        short = await memory.remember("the door code is 4471", ttl=60, conversation="c1")
        at = dt.datetime.fromtimestamp((clock.now_ms() + HOUR_MS) / 1000, dt.UTC)
        await memory.remember("the door code is 9902", expires_at=at, conversation="c1")
        await memory.remember("the door code changes monthly", conversation="c2")
        await fold(laser, view)
        everything = [
            "the door code changes monthly",
            "the door code is 4471",
            "the door code is 9902",
        ]
        assert all(texts == everything for texts in await recalls(memory))
        [item] = await memory.recall(text="4471", strategy="keyword")
        assert item.expires_at_ms == clock.now_ms() + 60_000
        assert item.to_json()["expires_at_ms"] == item.expires_at_ms

        clock.step(60_000)  # exactly at its expiry: gone
        after = [t for t in everything if "4471" not in t]
        assert all(texts == after for texts in await recalls(memory))
        assert all(
            texts == ["the door code is 9902"] for texts in await recalls(memory, conversation="c1")
        )
        clock.step(HOUR_MS)
        assert all(texts == ["the door code changes monthly"] for texts in await recalls(memory))
        # Still in the log's past and in history.
        past = await (await memory.as_of(short)).recall(conversation="c1")
        assert [i.text for i in past] == ["the door code is 4471"]
        assert [h.op for h in await memory.history(short)] == ["remember"]

        # The sweeper makes it lasting: forgets, oldest expiry first, in pages.
        assert await memory.forget_expired(limit=1) == 1
        assert [h.op for h in await memory.history(short, folded=True)] == [
            "remember",
            "forget",
        ]
        assert await memory.forget_expired() == 1
        assert await memory.forget_expired() == 0
        await fold(laser, view)
        assert all(texts == ["the door code changes monthly"] for texts in await recalls(memory))


async def test_a_snapshot_judges_expiry_at_its_own_moment(tmp_path):
    # A snapshot at a moment hides what had expired by that moment, though no record was
    # appended between the expiry and the moment; one at positions judges at its newest
    # record's time. (Judged at the newest record's time, the first showed the item;
    # judged at no time, the second did.)
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path}", clock=clock) as laser:
        memory = laser.memory("notes")
        start = clock.now_ms()
        short = await memory.remember("the door code is 4471", ttl=10, conversation="c1")
        clock.step(60_000)
        later = await memory.remember("the door code changes monthly", conversation="c2")
        at_thirty = await memory.as_of(start + 30_000)
        assert [i.text for i in await at_thirty.recall()] == []
        assert [i.text for i in await (await memory.as_of(start + 5_000)).recall()] == [
            "the door code is 4471"
        ]
        everything = {later.receipt.partition: later.receipt.offset + 1}
        everything[short.receipt.partition] = short.receipt.offset + 1
        by_positions = await memory.as_of(everything)
        assert [i.text for i in await by_positions.recall()] == ["the door code changes monthly"]


async def test_a_ttl_under_a_millisecond_still_ends_after_the_write(
    any_log_url, stream_name, tmp_path
):
    # An expiry at the write's own millisecond would hide the item from its first read.
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, _):
        memory = laser.memory("notes")
        await memory.remember("a fleeting note", ttl=0.0004)
        [item] = await memory.recall(folded=True)
        assert item.expires_at_ms == clock.now_ms() + 1
        clock.step(1)
        assert await memory.recall(folded=True) == []


async def test_an_item_in_two_conversations_expires_in_one(any_log_url, stream_name, tmp_path):
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, view):
        memory = laser.memory("notes")
        mid = lm.MemoryId.new()
        await memory.append(mid, "the door code is 4471", kind="fact", conversation="c2")
        await memory.append(mid, "the door code is 4471", kind="fact", conversation="c1", ttl=60)
        await memory.improve(mid, 2.0, conversation="c1")
        await fold(laser, view)
        for folded in (True, False):
            [item] = await memory.recall(folded=folded, text="door", strategy="keyword")
            assert item.weight == 2.0 and item.conversation == "c1"
        clock.step(61_000)
        for folded in (True, False):
            # c1's remember expired: the item shows as remembered in c2, without c1's feedback.
            [item] = await memory.recall(folded=folded, text="door", strategy="keyword")
            assert (item.weight, item.conversation, item.expires_at_ms) == (0.0, "c2", None)
            assert await memory.recall(folded=folded, conversation="c1") == []
        assert await memory.forget_expired() == 1
        assert await memory.forget_expired() == 0
        [forget] = [h for h in await memory.history(mid, folded=True) if h.op == "forget"]
        assert forget.conversation == "c1"  # c2's remember stays
        assert [i.conversation for i in await memory.recall(folded=True)] == ["c2"]
        # A scoped handle sweeps its conversation only.
        scoped = memory.scoped("c3")
        await scoped.remember("c3 note", ttl=1)
        clock.step(2_000)
        assert await memory.scoped("c4").forget_expired() == 0
        assert await scoped.forget_expired() == 1


async def test_an_item_whose_feedback_outlived_a_remember_takes_one_place_of_the_limit(
    any_log_url, stream_name, tmp_path
):
    """A feedback-ranked recall loads the items with feedback whose remember expired as
    the read sees them, then the other weighted items: these still fill the limit, so an
    expired item ranking last never pushes out one ranking before it."""
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, view):
        memory = laser.memory("notes")
        faded = lm.MemoryId.new()
        await memory.append(faded, "kept in c2", kind="fact", conversation="c2")
        await memory.append(faded, "kept in c2", kind="fact", conversation="c1", ttl=60)
        await memory.improve(faded, 0.5)
        await memory.improve(faded, 5.0, conversation="c1")  # ranks it first, until c1 expires
        best = await memory.remember("best", conversation="c3")
        second = await memory.remember("second", conversation="c3")
        await memory.improve(best, 3.0)
        await memory.improve(second, 1.0)
        await fold(laser, view)
        for folded in (True, False):
            assert [i.id for i in await memory.recall(folded=folded, limit=1)] == [faded]
        # Exactly at its expiry, c1's remember is gone: the item is seen in c2 only, with
        # the feedback that was not c1's.
        clock.step(60_000)
        for folded in (True, False):
            got = [i.id for i in await memory.recall(folded=folded, limit=2)]
            assert got == [best, second], folded
            got = [i.id for i in await memory.recall(folded=folded, limit=3)]
            assert got == [best, second, faded], folded


async def test_expiry_input_is_checked_before_anything_is_written(laser: lm.Laser):
    memory = laser.memory("notes")
    now = dt.datetime.now(dt.UTC)
    for options, match in (
        ({"ttl": 60, "expires_at": now + dt.timedelta(hours=1)}, "not both"),
        ({"expires_at": dt.datetime.now() + dt.timedelta(hours=1)}, "no timezone"),
        ({"expires_at": now - dt.timedelta(seconds=1)}, "not after now"),
        ({"expires_at": 1_900_000_000}, "timezone-aware datetime"),
        ({"ttl": 0}, "ttl is from 0"),
        ({"ttl": -5}, "ttl is from 0"),
        ({"ttl": float("inf")}, "ttl is from 0"),
        ({"ttl": 10**400}, "ttl is from 0"),
        ({"ttl": 1e11 + 1}, "ttl is from 0"),  # the README's longest, and a second
        ({"ttl": True}, "ttl is a timedelta"),
        ({"ttl": "1h"}, "ttl is a timedelta"),
    ):
        with pytest.raises(lm.InvalidInput, match=match):
            await memory.remember("x", **options)
        with pytest.raises(lm.InvalidInput, match=f"entry 1: .*{match}"):
            await memory.remember_many(["fine", {"body": "x", **options}])
    assert await memory.recall(folded=True) == []
    await memory.remember("ok", ttl=dt.timedelta(days=1))
    assert MAX_TTL_S == 1e11  # as the README says
    await memory.remember("for ever, nearly", ttl=1e11)  # the longest ttl is taken
    assert len(await memory.recall(folded=True)) == 2


async def test_an_expiry_must_fall_after_now_to_the_millisecond(tmp_path):
    """An item expiring at the very moment it is written would never be seen: refused;
    a millisecond later is taken."""
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", clock=clock) as laser:
        memory = laser.memory("notes")
        now = dt.datetime.fromtimestamp(clock.now_ms() / 1000, dt.UTC)
        with pytest.raises(lm.InvalidInput, match="not after now"):
            await memory.remember("x", expires_at=now)
        assert await memory.recall(folded=True) == []
        await memory.remember("y", expires_at=now + dt.timedelta(milliseconds=1))
        assert [i.text for i in await memory.recall(folded=True)] == ["y"]


async def test_forget_expired_takes_the_oldest_expiry_first_and_one_expiring_this_moment(
    any_log_url, stream_name, tmp_path
):
    """Items are swept oldest expiry first whatever order they were written in, and an
    item whose moment is now is swept, as reads already leave it out."""
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, _):
        memory = laser.memory("notes")
        later = await memory.remember("expires in two minutes", ttl=120)
        sooner = await memory.remember("expires in one minute", ttl=60)
        clock.step(60_000)  # exactly sooner's moment
        assert await memory.forget_expired() == 1
        ops = {
            mid: [h.op for h in await memory.history(mid, folded=True)] for mid in (later, sooner)
        }
        assert ops == {later: ["remember"], sooner: ["remember", "forget"]}
        third = await memory.remember("expires in half a minute", ttl=30)  # before later
        clock.step(60_000)  # both left are past: the older expiry goes first
        assert await memory.forget_expired(limit=1) == 1
        assert [h.op for h in await memory.history(third, folded=True)] == ["remember", "forget"]
        assert [h.op for h in await memory.history(later, folded=True)] == ["remember"]
        assert await memory.forget_expired(limit=1) == 1
        assert await memory.forget_expired() == 0


async def test_a_hostile_expiry_on_the_log_is_set_aside_and_http_hides_expired(
    laser: lm.Laser, tmp_path: Path
):
    memory = laser.memory("notes")
    await memory.remember("still valid", ttl=3600)

    def raw(body: bytes, expires_at: int) -> OutgoingRecord:
        record = Remember(
            ns=memory.namespace,
            scope=MemoryScope(stream=laser.stream),
            id=lm.MemoryId.new().bytes,
            kind=1,
            body=body,
        )
        wire = encode_record(record)
        value = msgspec.msgpack.decode(wire.value)
        value["expires_at"] = expires_at
        return OutgoingRecord(msgspec.msgpack.encode(value), key=wire.key, headers=wire.headers)

    # A writer that skipped the checks: one expired long ago, one past 2**63; and one that
    # expired a minute ago (the server reads the wall clock in milliseconds for it).
    now_ms = time.time_ns() // 1_000_000
    await laser.log.append_batch(
        laser.memory_topic_name,
        [
            raw(b"expired", 1_000),
            raw(b"hostile", (1 << 64) - 1),
            raw(b"expired a minute ago", now_ms - 60_000),
        ],
    )
    assert [i.text for i in await memory.recall(folded=True)] == ["still valid"]
    assert any("expires_at" in aside.reason for aside in memory.set_aside)
    await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
        until_caught_up=True
    )
    with MemoryView.open(tmp_path / "view", create=False) as view:
        assert view.stats().set_aside == 1
        server = TestServer(make_app(view), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                for params in ({}, {"text": "expired valid", "strategy": "keyword"}):
                    async with http.get(
                        "/v1/recall", params={"namespace": memory.namespace, **params}
                    ) as r:
                        assert [i["body"] for i in await r.json()] == ["still valid"]
        finally:
            await server.close()


async def test_the_retention_driver_sweeps_expired_items(any_log_url, stream_name, tmp_path):
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, _):
        memory = laser.memory("notes")
        for n in range(3):
            await memory.remember(f"short {n}", ttl=1)
        await memory.remember("kept")
        clock.step(5_000)
        async with lm.RetentionDriver(memory, older_than=None, every=3600.0, limit=2) as driver:
            for _ in range(200):
                if driver.passes:
                    break
                await asyncio.sleep(0.01)
        assert (driver.expired, driver.purged, driver.failures) == (3, 0, [])
        [kept] = await memory.recall(folded=True)
        assert kept.text == "kept"
        assert [h.op for h in await memory.history(kept.id, folded=True)] == ["remember"]


async def test_a_clock_set_back_sees_what_had_not_expired_then(any_log_url, stream_name, tmp_path):
    async with stepped(any_log_url, stream_name, tmp_path) as (laser, clock, view):
        memory = laser.memory("notes")
        await memory.remember("the door code is 4471", ttl=1)
        await memory.remember("the door code changes monthly")
        await fold(laser, view)
        both = ["the door code changes monthly", "the door code is 4471"]
        assert all(texts == both for texts in await recalls(memory))
        clock.step(2_000)
        assert all(texts == both[:1] for texts in await recalls(memory))
        clock.step(-2_000)  # the search indexes dropped it: a read before then needs it back
        assert all(texts == both for texts in await recalls(memory))
