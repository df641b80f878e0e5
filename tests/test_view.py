"""The managed view over both logs: the folder service, readers, read-your-writes, replay."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import lmdb
import msgspec
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import laser_memory as lm
from folders.http import make_app
from folders.service import FolderConfig, ViewFolder
from folders.view import MemoryView
from laser_memory.cli import main
from laser_memory.clock import SteppedClock
from laser_memory.ids import MemoryId
from laser_memory.log import OutgoingRecord
from laser_memory.log.local import LocalLog, LocalLogConfig
from laser_memory.log.partitioner import partition_for
from laser_memory.records import Remember, encode_record
from laser_memory.scope import MemoryScope


@contextlib.asynccontextmanager
async def running_folder(laser: lm.Laser, view: Path) -> AsyncIterator[asyncio.Task]:
    task = asyncio.create_task(ViewFolder(laser.log, laser.memory_topic_name, view).run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def cli(*args: str):
    """Run the command line from an async test (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


async def catch_up(laser: lm.Laser, view: Path) -> int:
    return await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)


@pytest.fixture
async def viewed(laser: lm.Laser, tmp_path: Path) -> AsyncIterator[tuple[lm.Laser, Path]]:
    """The `laser` connection's log, reopened with a managed view folder."""
    view = tmp_path / "view"
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as connection:
        yield connection, view


def test_a_view_opened_twice_in_a_process_stays_open_until_both_close(tmp_path: Path):
    # A process opens each folder's environment once and shares it: closing one opener
    # must leave the other reading, and closing the last must let go of the files.
    path = tmp_path / "view"
    first = MemoryView.open(path)
    second = MemoryView.open(path)
    third = MemoryView.open(path)
    assert _files_held_under(path) > 0
    first.close()
    third.close()
    assert second.stats().items == 0  # still open, and readable
    second.close()
    assert _files_held_under(path) == 0


def _files_held_under(path: Path) -> int:
    """How many of this process's open files are under ``path``."""
    return sum(
        os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(path))
        for fd in os.listdir("/proc/self/fd")
    )


def test_a_view_dropped_open_warns(tmp_path: Path):
    # Its environment is shared per process: dropped open, it stays mapped for good.
    view = MemoryView.open(tmp_path / "view")
    with pytest.warns(ResourceWarning, match="was not closed; call close"):
        del view
        gc.collect()
    MemoryView.open(tmp_path / "view").close()  # closed: no warning


async def test_a_view_closed_under_reads_on_other_threads_lets_them_finish(viewed):
    # Closed while a read ran on another thread (a connection stopped during its
    # prepare_search, the HTTP server's reads), LMDB's environment went from under the
    # read: it failed as if the view were damaged ("rebuild it"), where LMDB requires
    # every transaction ended before its environment closes. Reads under way finish;
    # later ones are LogClosed.
    laser, path = viewed
    notes = laser.memory("notes")
    for first in range(0, 3000, 1000):
        await notes.remember_many([{"body": f"fact {i}"} for i in range(first, first + 1000)])
    for i in range(300):
        await notes.set(f"k{i}", {"n": i})
    await catch_up(laser, path)

    read_once = threading.Event()

    def read(view: MemoryView, reading: threading.Barrier, counts: list, failures: list) -> None:
        reading.wait()
        while True:
            try:
                counts.append(view.stats().named_items)
            except lm.LogClosed:
                return
            except Exception as exc:
                failures.append(exc)
                return
            finally:
                read_once.set()

    for _ in range(5):
        read_once.clear()
        view = MemoryView.open(path, create=False)
        counts: list[int] = []
        failures: list[Exception] = []
        reading = threading.Barrier(5)
        threads = [
            threading.Thread(target=read, args=(view, reading, counts, failures)) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        reading.wait()
        # Closed once reads are going (on a loaded machine the threads may not have run
        # within a fixed sleep, and then no read ran under the close at all).
        await asyncio.to_thread(read_once.wait, 30)
        await asyncio.sleep(0.02)
        view.close()
        for thread in threads:
            await asyncio.to_thread(thread.join)
        assert failures == [] and counts and set(counts) == {300}, (failures, len(counts))
        # The last read let go of the files (the connection below holds none: it has
        # not opened its view).
        assert await asyncio.to_thread(_files_held_under, path) == 0
    with pytest.raises(lm.LogClosed, match="was closed"):
        view.stats()


async def test_a_view_closed_under_a_fold_on_another_thread_lets_it_commit(
    laser: lm.Laser, tmp_path: Path
):
    # A folder's transaction runs on a thread (as does a rebuild's emptying): closed
    # under it, the environment went from under the write. It commits; later ones are
    # LogClosed, and what was committed is in the view.
    notes = laser.memory("notes")
    for first in range(0, 6000, 1000):
        await notes.remember_many([{"body": f"fact {i}"} for i in range(first, first + 1000)])
    batches = [b async for b in laser.log.read(laser.memory_topic_name, max_batch=100)]
    generation = (await laser.log.describe_topic(laser.memory_topic_name)).generation

    def fold(view: MemoryView, applied: list, failures: list, started: threading.Event) -> None:
        for batch in batches:
            try:
                applied.append(view.apply([batch], generation))
            except lm.LogClosed:
                return
            except Exception as exc:
                failures.append(exc)
                return
            started.set()

    for attempt in range(3):
        path = tmp_path / f"view{attempt}"
        view = MemoryView.open(path)
        view.bind(laser.memory_topic_name, generation)
        applied: list[int] = []
        failures: list[Exception] = []
        started = threading.Event()

        thread = threading.Thread(target=fold, args=(view, applied, failures, started))
        thread.start()
        await asyncio.to_thread(started.wait)
        view.close()
        await asyncio.to_thread(thread.join)
        assert failures == [] and applied
        with MemoryView.open(path, create=False) as reopened:
            assert reopened.stats().items == sum(applied)


async def test_read_your_writes_while_a_folder_runs(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    async with running_folder(laser, view):
        for i in range(5):
            mid = await memory.remember(f"fact {i}", conversation="c1")
            items = await memory.recall(after=mid, strategy="recent", timeout=20)
            assert items[0].id == mid
        receipt = await memory.set("profile", {"channel": "email"})
        item = await memory.fetch("profile", after=receipt, timeout=20)
        assert item.json() == {"channel": "email"}
        receipt = await memory.update("profile", {"office": "Berlin"})
        assert (await memory.fetch("profile", after=receipt, timeout=20)).version == 2


async def test_waiting_for_a_write_no_folder_will_fold_times_out(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    await catch_up(laser, view)
    mid = await memory.remember("never folded")
    with pytest.raises(lm.WaitTimeout, match="is a folder running"):
        await memory.recall(after=mid, timeout=0.3)
    assert await memory.recall() == []
    assert [i.text for i in await memory.recall(folded=True)] == ["never folded"]


async def test_managed_reads_need_a_view(laser: lm.Laser):
    memory = laser.memory("notes")
    with pytest.raises(lm.NoView, match="view=PATH"):
        await memory.recall(folded=False)
    with pytest.raises(lm.NoView):
        await memory.fetch("k", version=1)


async def test_a_view_path_with_no_view_is_said_at_once_unless_a_write_is_awaited(
    laser: lm.Laser, tmp_path: Path
):
    # A mistyped --view is NoView at once, whatever the timeout; a read waiting for a
    # write waits for a folder to make the view, up to its timeout.
    async with lm.connect(laser.log.url, stream=laser.stream, view=tmp_path / "nope") as reader:
        memory = reader.memory("notes")
        written = await memory.remember("a fact")
        started = time.monotonic()
        with pytest.raises(lm.NoView, match="there is no view"):
            await memory.recall(timeout=30)
        assert time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(lm.NoView, match="there is no view"):
            await memory.recall(after=written, timeout=0.3)
        assert time.monotonic() - started >= 0.3
        # A folder that makes the view meanwhile (in this process too: the wait yields)
        # answers the read.
        waiting = asyncio.create_task(memory.recall(after=written, timeout=5))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await ViewFolder(laser.log, memory.topic, tmp_path / "nope").run(until_caught_up=True)
        assert [item.text for item in await asyncio.wait_for(waiting, 10)] == ["a fact"]


async def test_bad_records_are_set_aside_and_counted(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    topic = laser.memory_topic_name
    await memory.remember("before")
    bad = await laser.log.append(topic, OutgoingRecord(b"\xc1junk", headers=(("lm-ns", b"x"),)))
    newer = await laser.log.append(topic, OutgoingRecord(b"{}", headers=(("lm-v", b"7"),)))
    await memory.remember("after")
    await catch_up(laser, view)
    assert sorted(i.text for i in await memory.recall()) == ["after", "before"]
    stats = laser.managed_view().stats()
    assert stats.set_aside == 2
    where = {(a.position.partition, a.position.offset): a.reason for a in stats.set_aside_records}
    assert "not a memory record" in where[(bad.partition, bad.offset)]
    assert "schema version 7" in where[(newer.partition, newer.offset)]
    out = await cli("stats", "--view", str(view))
    assert "set aside:  2" in out.output and "schema version 7" in out.output
    assert "more" not in out.output  # both are shown: none left out
    # The count is of them all; the records shown are the first by position, up to the
    # limit (a flood of bad records is counted, not read in full).
    first = min((bad.partition, bad.offset), (newer.partition, newer.offset))
    shown = laser.managed_view().stats(aside_limit=1)
    assert shown.set_aside == 2
    assert [(a.position.partition, a.position.offset) for a in shown.set_aside_records] == [first]
    none = laser.managed_view().stats(aside_limit=0)
    assert none.set_aside == 2 and none.set_aside_records == []


async def test_stats_counts_every_record_set_aside_and_says_how_many_it_leaves_out(viewed):
    laser, view = viewed
    junk = OutgoingRecord(b"\xc1junk")
    await asyncio.gather(*(laser.log.append(laser.memory_topic_name, junk) for _ in range(103)))
    await catch_up(laser, view)
    stats = laser.managed_view().stats()
    assert stats.set_aside == 103 and len(stats.set_aside_records) == 100
    every = laser.managed_view().stats(aside_limit=10**30)  # past any count: all of them
    assert every.set_aside == len(every.set_aside_records) == 103
    out = await cli("stats", "--view", str(view))
    assert "set aside:  103" in out.output and "... and 3 more" in out.output
    assert out.output.count("not a memory record") == 100


async def test_stats_with_the_log_say_how_far_the_view_is_behind(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    await memory.remember("folded")
    await catch_up(laser, view)
    await memory.remember_many([{"body": f"new {i}", "conversation": f"c{i}"} for i in range(3)])
    url = laser.log.url
    out = await cli("stats", "--view", str(view), "--url", url)
    assert out.exit_code == 0, out.output
    assert "behind:     3 record(s)" in out.output
    report = json.loads((await cli("stats", "--view", str(view), "--url", url, "--json")).output)
    ends = await laser.log.end_offsets(laser.memory_topic_name)
    assert report["log"]["end_offsets"] == {str(p): o for p, o in ends.items()}
    assert sum(report["log"]["behind"].values()) == 3
    [printed] = [line for line in out.output.splitlines() if line.startswith("log ends:   ")]
    assert ast.literal_eval(printed.removeprefix("log ends:   ")) == ends
    await catch_up(laser, view)
    out = await cli("stats", "--view", str(view), "--url", url)
    assert "behind:     0 record(s) (caught up)" in out.output
    generation = (await laser.log.describe_topic(laser.memory_topic_name)).generation
    assert f"\ntopic:      {laser.memory_topic_name} (generation {generation})\n" in out.output
    report = json.loads((await cli("stats", "--view", str(view), "--url", url, "--json")).output)
    assert report["log"]["behind"] == {}  # only partitions behind are listed
    await laser.log.delete_topic(laser.memory_topic_name)
    await laser.bootstrap(partitions=4)
    out = await cli("stats", "--view", str(view), "--url", url)
    assert "recreated since the view was built" in out.output


async def test_one_folder_writes_a_view_at_a_time(viewed):
    laser, view = viewed
    await laser.memory("notes").remember("x")
    # A lock file a folder that died left behind, longer than the new holder's line.
    view.mkdir(exist_ok=True)
    (view / "folder.lock").write_text("pid 999999999999 (a folder long gone)")
    async with running_folder(laser, view) as first:
        await asyncio.sleep(0.3)
        fds = len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            # The refusal names the folder that holds the view, and nothing else.
            with pytest.raises(
                lm.ViewLocked,
                match=rf"being folded by pid {os.getpid()}; one folder writes a view at a time",
            ):
                await catch_up(laser, view)
        assert len(os.listdir("/proc/self/fd")) == fds  # each refused folder let go of its file
        assert not first.done()


async def test_a_view_refuses_another_topic_and_a_recreated_one(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    await memory.remember("x")
    await catch_up(laser, view)
    other = await laser.memory_topic(f"{laser.stream}-other", partitions=1)
    await other.remember("y")
    with pytest.raises(lm.ViewMismatch, match="folds topic"):
        await ViewFolder(laser.log, other.topic, view).run(until_caught_up=True)
    with pytest.raises(lm.ViewMismatch, match="folds topic"):
        await laser.memory_on_topic(other.topic).recall(folded=False)
    await laser.log.delete_topic(laser.memory_topic_name)
    await laser.bootstrap(partitions=4)
    with pytest.raises(lm.ViewMismatch, match="rebuild"):
        await catch_up(laser, view)
    await ViewFolder(laser.log, laser.memory_topic_name, view).run(
        until_caught_up=True, rebuild=True
    )
    assert await memory.recall() == []


async def test_a_running_folder_stops_when_its_topic_is_recreated_and_folds_none_of_it(viewed):
    """A topic deleted and created again by another process while a folder follows it:
    the folder stops with an error instead of folding the new topic's records into the
    old topic's view (Kafka read them on from the same offsets) or waiting for ever on
    a topic that is gone (the embedded log did)."""
    laser, view = viewed
    memory = laser.memory("notes")
    await memory.remember("old")
    folder = asyncio.create_task(ViewFolder(laser.log, laser.memory_topic_name, view).run())
    await memory.recall(after=await memory.remember("old, folded"))
    async with lm.connect(laser.log.url, stream=laser.stream) as other:
        await other.log.delete_topic(laser.memory_topic_name)
        await other.bootstrap(partitions=4)
        for i in range(3):
            await other.memory("notes").remember(f"new {i}")
    with pytest.raises((lm.ViewMismatch, lm.UnknownTopic), match="deleted"):
        await asyncio.wait_for(folder, 30)
    with MemoryView.open(view) as opened:
        assert opened.stats().items == 2
    with pytest.raises(lm.ViewMismatch, match="rebuild"):
        await catch_up(laser, view)


async def test_a_running_folder_stops_when_its_topic_is_deleted_and_keeps_its_view(viewed):
    """A topic deleted (and not made again) while a folder follows it: the folder stops,
    saying so, rather than wait for ever on a topic that is gone; the view keeps what it
    folded, and its readers go on reading it."""
    laser, view = viewed
    memory = laser.memory("notes")
    folder = asyncio.create_task(ViewFolder(laser.log, laser.memory_topic_name, view).run())
    await memory.recall(after=await memory.remember("folded before the deletion"))
    await laser.log.delete_topic(laser.memory_topic_name)
    with pytest.raises(lm.UnknownTopic, match="was deleted while"):
        await asyncio.wait_for(folder, 30)
    assert [i.text for i in await memory.recall()] == ["folded before the deletion"]


async def test_a_folder_asks_again_while_the_log_cannot_say_which_topic_it_holds(tmp_path):
    """Before each commit the folder asks the log which topic it holds; a log that cannot
    answer (a broker restarting) is asked again until it does, never taken as a change."""

    class Blinking(LocalLog):
        calls = 0

        async def describe_topic(self, topic: str):
            self.calls += 1
            if 2 <= self.calls <= 4:  # the folder's start asks first; then three failures
                raise lm.LogUnavailable("the log cannot answer just now")
            return await super().describe_topic(topic)

    url = f"local://{tmp_path / 'log'}"
    async with lm.connect(url, stream="s") as laser:
        await laser.memory("notes").remember_many(["a", "b", "c"])
        topic = laser.memory_topic_name
    async with Blinking(tmp_path / "log") as log:
        assert await ViewFolder(log, topic, tmp_path / "view").run(until_caught_up=True) == 3
        assert log.calls == 5
    with MemoryView.open(tmp_path / "view") as opened:
        assert opened.stats().items == 3


async def test_a_log_restored_from_an_older_copy_is_refused_by_the_folder(tmp_path, monkeypatch):
    """The embedded log's folder copied aside, written to, folded, then put back (a
    restore from a backup): its next writes take offsets the view holds as folded, so
    the folder would skip them for ever. It refuses to start instead, saying why."""
    import shutil

    import folders.service

    monkeypatch.setattr(folders.service, "_BEHIND_CHECKS", 1, raising=False)  # no second look
    log, copy, view = tmp_path / "log", tmp_path / "copy", tmp_path / "view"
    async with lm.connect(f"local://{log}", stream="s") as laser:
        await laser.memory("notes").remember("kept")
    shutil.copytree(log, copy)
    async with lm.connect(f"local://{log}", stream="s") as laser:
        await laser.memory("notes").remember_many(["lost 1", "lost 2"])
        await catch_up(laser, view)
    shutil.rmtree(log)
    shutil.copytree(copy, log)
    async with lm.connect(f"local://{log}", stream="s") as laser:
        await laser.memory("notes").remember("after the restore")
        with pytest.raises(lm.ViewMismatch, match="restored from an older copy"):
            await catch_up(laser, view)
        await ViewFolder(laser.log, laser.memory_topic_name, view).run(
            until_caught_up=True, rebuild=True
        )
    async with lm.connect(f"local://{log}", stream="s", view=view) as reader:
        bodies = [i.body for i in await reader.memory("notes").recall()]
        assert bodies == [b"after the restore", b"kept"]


async def test_read_replicas_are_identical(viewed, tmp_path):
    laser, view = viewed
    memory = laser.memory("notes")
    for i in range(30):
        mid = await memory.remember(f"fact {i}", conversation=f"c{i % 4}", user=f"u{i % 3}")
        if i % 5 == 0:
            await memory.improve(mid, i / 2)
        if i % 7 == 0:
            await memory.forget(mid)
    await memory.set("k", {"a": 1})
    await memory.update("k", {"b": 2})
    await catch_up(laser, view)
    await catch_up(laser, tmp_path / "replica")
    with MemoryView.open(tmp_path / "replica") as replica:
        assert replica.dump() == laser.managed_view().dump()


async def test_recall_cost_grows_with_the_limit_not_the_namespace(viewed, monkeypatch):
    laser, view = viewed
    memory = laser.memory("notes")
    ids = await memory.remember_many(
        [
            {
                "body": f"item {i} {'needle' if i % 100 == 0 else 'hay'}",
                "agent": f"a{i % 10}",
                "conversation": f"c{i % 20}",
                "kind": "fact" if i % 2 else "message",
            }
            for i in range(1000)
        ]
    )
    for mid in ids[:3]:
        await memory.improve(mid, 1.0)
    await memory.improve(ids[3], -1.0)
    # Feedback on a hundred items of agent a1: a read filtered to another agent must
    # not walk them.
    for mid in ids[11::10]:
        await memory.improve(mid, 2.0)
    await catch_up(laser, view)
    opened = laser.managed_view()
    loads = 0
    original = opened._load

    def counting(*args):
        nonlocal loads
        loads += 1
        return original(*args)

    monkeypatch.setattr(opened, "_load", counting)
    cases = [
        ({"strategy": "recent"}, 5),
        ({"strategy": "auto"}, 5 + 4),
        ({"strategy": "recent", "agent": "a3"}, 5),
        ({"strategy": "recent", "conversation": "c8", "kind": "message"}, 5),
        ({"strategy": "auto", "user": None, "kind": "fact"}, 5 + 4),
        ({"strategy": "auto", "agent": "a3"}, 5 + 1),
        ({"strategy": "auto", "agent": "a1"}, 5),
        ({"strategy": "keyword", "text": "needle"}, 10),
    ]
    for query, most in cases:
        loads = 0
        items = await memory.recall(limit=5, **{k: v for k, v in query.items() if v is not None})
        assert len(items) == 5, query
        assert loads <= most, (query, loads)
        folded = await memory.recall(
            limit=5, folded=True, **{k: v for k, v in query.items() if v is not None}
        )
        assert [(i.id, i.score, i.signals) for i in items] == [
            (i.id, i.score, i.signals) for i in folded
        ], query
        assert items == folded, query


async def test_recall_with_no_filter_takes_the_newest_of_every_kind(viewed):
    # The view lists items under their kind only; a read with no filter merges the
    # kinds' lists, and must take the newest items whatever their kinds.
    laser, view = viewed
    memory = laser.memory("notes")
    kinds = ["message", "fact", "fact", "summary", "message", "message", "fact", "entity"]
    for i, kind in enumerate(kinds):
        await memory.remember(f"note {i}", kind=kind)
    await catch_up(laser, view)
    newest_first = [f"note {i}".encode() for i in reversed(range(len(kinds)))]
    for limit in range(1, len(kinds) + 1):
        for strategy in ("recent", "auto"):
            items = await memory.recall(limit=limit, strategy=strategy)
            assert [item.body for item in items] == newest_first[:limit], (limit, strategy)


async def test_feedback_ties_in_a_conversation_go_to_the_newest(viewed):
    # Items of equal weight rank newest first; a feedback-ranked read of one
    # conversation that cuts through such a tie must keep the newest, as folded recall
    # does (its view entries once ran oldest first within a weight, so a limit took
    # the oldest). Names long enough to be stored as digests take the same path.
    laser, view = viewed
    memory = laser.memory("notes")
    for conversation in ("c-1", "c" * 255):
        ids = [await memory.remember(f"{conversation[:3]} {i}", conversation=conversation)
               for i in range(4)]  # fmt: skip
        for mid in ids:
            await memory.improve(mid, 2.0, conversation=conversation)
        await catch_up(laser, view)
        newest_first = [str(mid) for mid in reversed(ids)]
        for limit in range(1, 5):
            query = {"conversation": conversation, "strategy": "auto", "limit": limit}
            managed = await memory.recall(**query)
            assert [str(item.id) for item in managed] == newest_first[:limit], (limit, query)
            assert managed == await memory.recall(folded=True, **query)


async def test_negative_feedback_fills_what_is_left_of_the_limit_lowest_last(viewed):
    # A feedback-ranked read walks the positive weights, then the newest items with
    # none, then the negative ones, as far as the limit needs. Every negative item past
    # the first one the walk stops at must be read too (a mutant reading their ids one
    # byte off found none of them, and no test saw it: random sequences rarely leave
    # several negative items for the limit to reach).
    laser, view = viewed
    memory = laser.memory("notes")
    ids = {
        name: await memory.remember(name) for name in ("up", "plain", "down 1", "down 2", "down 3")
    }
    for name, weight in (("up", 2.0), ("down 1", -1.0), ("down 2", -2.0), ("down 3", -3.0)):
        await memory.improve(ids[name], weight)
    await catch_up(laser, view)
    expected = ["up", "plain", "down 1", "down 2", "down 3"]
    for limit in range(1, len(expected) + 1):
        managed = await memory.recall(strategy="auto", limit=limit)
        assert [item.body.decode() for item in managed] == expected[:limit], limit
        assert managed == await memory.recall(strategy="auto", limit=limit, folded=True)


@pytest.mark.parametrize(
    ("make", "error", "says"),
    [
        (lambda log, path: FolderConfig(max_transaction_records=0), lm.ConfigError, "positive"),
        (lambda log, path: FolderConfig(read_ahead=-1), lm.ConfigError, "read_ahead"),
        (lambda log, path: FolderConfig(max_read_batch="5"), lm.ConfigError, "max_read_batch"),
        (lambda log, path: FolderConfig(map_size=True), lm.ConfigError, "map_size"),
        (lambda log, path: ViewFolder(log, 5, path), lm.InvalidName, "topic name is a str"),
        (lambda log, path: ViewFolder(log, "t", None), lm.ConfigError, "view path"),
        # A folder over no log was taken, and failed with an AttributeError in run().
        (lambda log, path: ViewFolder("kafka://h:1", "t", path), lm.ConfigError, "reads a log"),
        (lambda log, path: ViewFolder(log, "t", path, {"map_size": 1}), lm.ConfigError, "Folder"),
        (lambda log, path: MemoryView.open(5), lm.ConfigError, "view path"),
        (lambda log, path: MemoryView.open(path, map_size=-1), lm.ConfigError, "map_size"),
        (lambda log, path: MemoryView.open(path, map_size=1 << 64), lm.ConfigError, "2\\*\\*64"),
        (lambda log, path: FolderConfig(map_size=1 << 70), lm.ConfigError, "2\\*\\*64"),
        (lambda log, path: MemoryView.open(f"{path}\x00"), lm.ConfigError, "NUL byte"),
        (lambda log, path: ViewFolder(log, "t", f"{path}\x00"), lm.ConfigError, "NUL byte"),
        # Names of bytes that are no UTF-8, which LMDB cannot open: a raw
        # UnicodeEncodeError once the folder (and its lock file) was made.
        (lambda log, path: ViewFolder(log, "t", f"{path}\udcff"), lm.ConfigError, "no UTF-8"),
        (
            lambda log, path: ViewFolder(log, "t", os.fsencode(path) + b"\xff"),
            lm.ConfigError,
            "no UTF-8",
        ),
        (lambda log, path: MemoryView.open(f"{path}\udcff"), lm.ConfigError, "no UTF-8"),
    ],
)
async def test_folder_and_view_settings_of_the_wrong_kind_are_clear_errors(
    laser: lm.Laser, tmp_path: Path, make, error, says
):
    with pytest.raises(error, match=says):
        make(laser.log, tmp_path / "view")
    assert [name for name in os.listdir(tmp_path) if name.startswith("view")] == []


async def test_a_view_folder_that_cannot_be_made_or_mapped_is_a_config_error(
    laser: lm.Laser, tmp_path: Path
):
    """Each was a raw OSError or lmdb.MemoryError: a view under a file, a folder name
    longer than the file system takes, a map larger than the free address space."""
    await laser.memory("notes").remember("a fact")
    topic = laser.memory_topic_name
    (tmp_path / "file").write_text("")
    for path in (tmp_path / "file" / "view", tmp_path / ("v" * 300)):
        with pytest.raises(lm.ConfigError, match="cannot make the view's folder"):
            await ViewFolder(laser.log, topic, path).run(until_caught_up=True)
    with pytest.raises(lm.ConfigError, match="lower map_size"):
        MemoryView.open(tmp_path / "huge", map_size=(1 << 64) - 1)
    huge_log = LocalLog(tmp_path / "huge-log", LocalLogConfig(map_size=(1 << 64) - 1))
    with pytest.raises(lm.ConfigError, match="lower map_size"):
        await huge_log.start()
    assert await ViewFolder(laser.log, topic, tmp_path / "view").run(until_caught_up=True) == 1


async def test_folder_run_flags_are_checked_before_it_folds(laser: lm.Laser, tmp_path: Path):
    await laser.memory("notes").remember("a fact")
    folder = ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view")
    with pytest.raises(lm.InvalidInput, match="until_caught_up"):
        await folder.run(until_caught_up="no")
    with pytest.raises(lm.InvalidInput, match="rebuild"):
        await folder.run(until_caught_up=True, rebuild=1)
    with pytest.raises(lm.InvalidInput, match="on_progress"):
        await folder.run(until_caught_up=True, on_progress=5)
    # An async callback was called into a coroutine no one awaited: it never ran, and
    # only a RuntimeWarning said so.
    reports: list[int] = []

    async def report(folded: int, positions: dict) -> None:
        reports.append(folded)

    with pytest.raises(lm.InvalidInput, match="on_progress is a plain function"):
        await folder.run(until_caught_up=True, on_progress=report)
    assert not (tmp_path / "view").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(lm.InvalidInput, match="on_progress is a plain function"):
            await folder.run(until_caught_up=True, on_progress=lambda *args: report(*args))
    assert reports == []
    assert await folder.run(until_caught_up=True, rebuild=True) == 1


async def test_a_folder_stopped_as_a_commit_ends_reports_what_it_committed(
    laser: lm.Laser, tmp_path: Path, monkeypatch
):
    # A folder stopped (SIGTERM, Ctrl-C: its task cancelled) while a transaction commits
    # waits the commit out. The records of that commit are folded and in the view, so
    # what it last reports (what `laser-memory fold` prints when stopped) counts them:
    # it reported the progress before them ("folded 0 records; watermark {}" over a view
    # holding both items). A commit that failed is raised, not hidden by the stop.
    memory = laser.memory("notes")
    await memory.remember_many(["one", "two"])
    topic = laser.memory_topic_name
    loop = asyncio.get_running_loop()
    apply = MemoryView.apply
    running: list[asyncio.Task] = []

    def apply_then_stop(self, *args, **kwargs):  # on the folder's writer thread
        count = apply(self, *args, **kwargs)
        loop.call_soon_threadsafe(running[0].cancel)
        time.sleep(0.2)  # the cancel lands while the folder waits for this commit
        return count

    monkeypatch.setattr(MemoryView, "apply", apply_then_stop)
    reports: list[tuple[int, dict[int, int]]] = []
    folder = ViewFolder(laser.log, topic, tmp_path / "view")
    running.append(asyncio.ensure_future(folder.run(on_progress=lambda *r: reports.append(r))))
    with pytest.raises(asyncio.CancelledError):
        await running[0]
    monkeypatch.undo()
    with MemoryView.open(tmp_path / "view") as view:
        watermark, items = view.watermark(), view.stats().items
    # (Both records are usually one transaction; on a broker they may come as two.)
    assert items >= 1
    assert reports and reports[-1] == (items, watermark)

    # A commit that fails as the folder is stopped: the stop does not hide the failure.
    def fail_then_stop(self, *args, **kwargs):
        loop.call_soon_threadsafe(running[-1].cancel)
        time.sleep(0.2)
        raise lm.ViewMismatch("the commit failed")

    await memory.remember("three")
    monkeypatch.setattr(MemoryView, "apply", fail_then_stop)
    running.append(asyncio.ensure_future(folder.run(on_progress=lambda *r: reports.append(r))))
    with pytest.raises(lm.ViewMismatch, match="the commit failed"):
        await running[-1]
    monkeypatch.undo()
    assert reports[-1] == (items, watermark)


async def test_named_items_keep_every_version(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    await memory.set("profile", {"name": "Ada"})
    await memory.update("profile", {"channel": "phone"})
    await memory.update("profile", {"channel": "email"})
    await memory.remove("profile")
    await memory.set("profile", "plain text")
    await catch_up(laser, view)
    bodies = [await memory.fetch("profile", version=n) for n in range(1, 6)]
    assert [b.json() for b in bodies[:3]] == [
        {"name": "Ada"},
        {"name": "Ada", "channel": "phone"},
        {"name": "Ada", "channel": "email"},
    ]
    assert bodies[3] is None and bodies[4].text == "plain text"
    assert await memory.fetch("profile", version=6) is None
    history = await memory.history("profile")
    assert [h.op for h in history] == [
        "named.set",
        "named.patch",
        "named.patch",
        "named.remove",
        "named.set",
    ]
    assert [h.version for h in history] == [1, 2, 3, 4, 5]
    assert history == await memory.history("profile", folded=True)
    with pytest.raises(lm.InvalidInput):
        await memory.fetch("profile", version=0)
    # A key that is no name is refused from the view as from the log (the view alone
    # answers an empty history for a key it could not hold, as though the key had none).
    for bad in ("", "a\x00b", 5, b"profile"):
        for folded in (False, True):
            with pytest.raises(lm.InvalidName, match="named item key"):
                await memory.history(bad, folded=folded)


def test_a_patch_may_make_a_named_body_exactly_as_large_as_the_limit():
    """The fold's limit of a named body is inclusive: a patch making exactly
    `MAX_NAMED_BODY_BYTES` applies, one byte more is set aside (no test held the
    boundary)."""
    from folders.state import MAX_NAMED_BODY_BYTES, NamedState, apply_named
    from laser_memory.items import Source
    from laser_memory.named import apply_patch_bytes
    from laser_memory.records import NamedPatch

    source = Source("", "t", 0, 0, "", None)

    def previous(size: int) -> NamedState:
        return NamedState(b'{"a":"' + b"x" * size + b'"}', 1, (1, 0, 0), source, "k")

    patch = NamedPatch(ns="notes", scope=lm.MemoryScope(), key="k", patch=b'{"b":1}')
    size = MAX_NAMED_BODY_BYTES - len(apply_patch_bytes(previous(0).body, patch.patch))
    assert len(apply_named(previous(size), patch, (2, 0, 1), source).body) == MAX_NAMED_BODY_BYTES
    with pytest.raises(lm.InvalidBody, match="over the 4194304-byte limit"):
        apply_named(previous(size + 1), patch, (2, 0, 1), source)


def test_named_versions_follow_the_partition_when_append_times_go_back(tmp_path: Path):
    """Kafka stamps records with the broker's clock, which can step back. A named item's
    writes share a partition, and its versions are those writes in offset order: in the
    view, and in an audit by replay (which reads in append-time order) alike."""
    from folders.replay import LoggedRecord, named_history
    from laser_memory.log.port import LogRecord
    from laser_memory.records import NamedPatch, NamedSet, decode_record

    scope = MemoryScope(stream="s")
    writes = [
        NamedSet(ns="notes", scope=scope, key="k", body=b'{"a": 1}'),
        NamedPatch(ns="notes", scope=scope, key="k", patch=b'{"b": 2}'),
        NamedSet(ns="notes", scope=scope, key="k", body=b'"plain"'),
    ]
    times = [5_000, 3_000, 4_000]  # the clock stepped back after the first write
    logged = [
        LogRecord("t", 0, offset, at, wire.key, wire.value, wire.headers)
        for offset, (at, wire) in enumerate(zip(times, map(encode_record, writes), strict=True))
    ]
    replayed = sorted(logged, key=lambda r: (r.append_time_ms, r.partition, r.offset))
    audit = named_history(
        [LoggedRecord(r, decode_record(r.value, r.headers), None) for r in replayed], "k"
    )
    assert [(h.op, h.offset, h.version) for h in audit] == [
        ("named.set", 0, 1),
        ("named.patch", 1, 2),
        ("named.set", 2, 3),
    ]
    with MemoryView.open(tmp_path / "view") as view:
        view.bind("t", "g")
        view.apply([logged], "g")
        assert view.named_history("notes", "k") == audit


def test_an_items_history_from_an_operators_replay_keeps_to_its_tenant():
    """`item_history` over a replay of every tenant (an operator's audit) gives the one
    tenant's records of the id, never another tenant's records of the same id."""
    from folders.replay import LoggedRecord, item_history
    from laser_memory.log.port import LogRecord
    from laser_memory.records import Feedback, decode_record

    raw = MemoryId.new().bytes
    writes = [
        Remember(ns="notes", scope=MemoryScope(tenant="acme"), id=raw, kind=1, body=b"ours"),
        Remember(ns="notes", scope=MemoryScope(tenant="globex"), id=raw, kind=1, body=b"theirs"),
        Feedback(ns="notes", scope=MemoryScope(tenant="globex"), target=raw, weight=1.0),
        Feedback(ns="notes", scope=MemoryScope(tenant="acme"), target=raw, weight=2.0),
    ]
    replayed = [
        LoggedRecord(LogRecord("t", 0, offset, 1_000, w.key, w.value, w.headers), record, None)
        for offset, (w, record) in enumerate(
            (w, decode_record(w.value, w.headers)) for w in map(encode_record, writes)
        )
    ]
    acme = item_history(replayed, raw, tenant="acme")
    assert [(h.op, h.offset, h.tenant, h.version) for h in acme] == [
        ("remember", 0, "acme", 1),
        ("feedback", 3, "acme", 2),
    ]
    assert [h.offset for h in item_history(replayed, raw, tenant="globex")] == [1, 2]
    assert item_history(replayed, raw) == []  # the untenanted scope holds none of them


async def test_audit_history_of_an_item(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    # These ride different partitions, which history orders by append time: keep the
    # writes a few milliseconds apart so that order is the order written here.
    mid = await memory.remember("fact", conversation="c1", dedup=True)
    await asyncio.sleep(0.005)
    await memory.remember("fact", conversation="c2", dedup=True)
    await asyncio.sleep(0.005)
    await memory.improve(mid, 2.0, conversation="c1")
    await asyncio.sleep(0.005)
    await memory.forget(mid, conversation="c2")
    await memory.remember("other")
    await catch_up(laser, view)
    history = await memory.history(mid)
    assert [(h.op, h.conversation) for h in history] == [
        ("remember", "c1"),
        ("remember", "c2"),
        ("feedback", "c1"),
        ("forget", "c2"),
    ]
    assert [h.version for h in history] == [1, 2, 3, 4]
    assert history[2].weight == 2.0 and history[0].body == b"fact"
    assert history == await memory.history(mid, folded=True)
    items = await memory.recall()  # "other" is newer, but "fact" has feedback
    assert [(i.text, i.version) for i in items] == [("fact", 4), ("other", 1)]
    out = await cli(
        "audit", str(mid), "--url", laser.log.url, "--stream", laser.stream,
        "--view", str(view), "--json",
    )  # fmt: skip
    assert [e["op"] for e in json.loads(out.output)] == [
        "remember",
        "remember",
        "feedback",
        "forget",
    ]


async def test_as_of_refuses_a_receipt_no_write_to_this_topic_returned(laser: lm.Laser):
    # Taken as it came, another topic's or an earlier generation's receipt answered with
    # a past of this topic it never named, and a partition past the topic's with a past
    # read by time alone.
    memory = laser.memory("notes")
    mid = await memory.remember("a fact")
    receipt = mid.receipt
    partitions = (await laser.log.describe_topic(memory.topic)).partitions
    replace = msgspec.structs.replace
    for bad, message in (
        (replace(receipt, topic=memory.topic + "-other"), "the receipt is for topic"),
        (replace(receipt, generation="an-earlier-one"), "which was deleted since"),
        (replace(receipt, partition=partitions), f"it has {partitions} partitions"),
        (replace(receipt, offset="0"), "the receipt's offset is '0'"),
    ):
        with pytest.raises(lm.InvalidInput, match=message):
            await memory.as_of(bad)
        with pytest.raises(lm.InvalidInput, match=message):
            await memory.as_of((receipt, bad))
    assert [i.text for i in await (await memory.as_of(receipt)).recall()] == ["a fact"]


async def test_as_of_a_receipt_takes_its_millisecond_in_other_partitions(tmp_path: Path):
    # As documented: exact in the write's partition, "at or before its append time" in
    # the others, so a write of another partition in the same millisecond is in; and
    # positions of offset 0 name an empty past of that partition, not a bad argument.
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path}", stream="s", clock=clock) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        conversations = {}
        for n in range(50):
            conversations.setdefault(partition_for(f"c/c{n}".encode(), 4), f"c{n}")
        (pa, a), (pb, b) = list(conversations.items())[:2]
        first = await memory.remember("first", conversation=a)
        same_ms = await memory.remember("same millisecond", conversation=b)
        clock.step(1)
        await memory.remember("a millisecond later", conversation=b)
        then = await memory.as_of(first)
        assert sorted(i.text for i in await then.recall()) == ["first", "same millisecond"]
        assert then.positions == {pa: first.receipt.offset + 1, pb: same_ms.receipt.offset + 1}
        empty = await memory.as_of({pa: 0, pb: 0})
        assert await empty.recall() == []
        assert empty.positions == {}


async def test_as_of_answers_what_was_known_then(laser: lm.Laser):
    memory = laser.memory("notes")
    first = await memory.remember("first", conversation="c1")
    await asyncio.sleep(0.01)
    await memory.set("profile", {"v": 1})
    await asyncio.sleep(0.01)
    second = await memory.remember("second", conversation="c1")
    await memory.forget(first, conversation="c1")
    await memory.update("profile", {"v": 2})
    then = await memory.as_of(second.receipt.append_time_ms - 1)
    assert [i.text for i in await then.recall()] == ["first"]
    assert then.as_of_ms == second.receipt.append_time_ms - 1
    assert then.fetch("profile").json() == {"v": 1}
    now = await memory.as_of(10**13)
    assert [i.text for i in await now.recall()] == ["second"]
    assert now.fetch("profile").json() == {"v": 2}
    by_position = await memory.as_of({first.receipt.partition: first.receipt.offset + 1})
    assert [i.text for i in await by_position.recall(conversation="c1")] == ["first"]
    assert by_position.as_of_ms is None  # positions, not a moment
    # What each snapshot folded: per partition, the first offset it did not.
    assert by_position.positions == {first.receipt.partition: first.receipt.offset + 1}
    just_after = await memory.as_of(second)
    assert just_after.positions[second.receipt.partition] == second.receipt.offset + 1
    assert just_after.as_of_ms == second.receipt.append_time_ms
    # No receipts, and an offset before the first, name no moment: refused, not an
    # empty past (nor a raw ValueError).
    with pytest.raises(lm.InvalidInput, match="a moment is a datetime"):
        await memory.as_of(())
    with pytest.raises(lm.InvalidInput, match="positions map each partition"):
        await memory.as_of({first.receipt.partition: -1})
    assert [i.text for i in await just_after.recall()] == ["second", "first"]
    import datetime as dt

    moment = dt.datetime.fromtimestamp((second.receipt.append_time_ms - 1) / 1000, tz=dt.UTC)
    assert [i.text for i in await (await memory.as_of(moment)).recall()] == ["first"]
    seconds = (second.receipt.append_time_ms - 1) / 1000  # a float is seconds
    assert [i.text for i in await (await memory.as_of(seconds)).recall()] == ["first"]
    elsewhere = moment.astimezone(dt.timezone(dt.timedelta(hours=-7)))
    assert [i.text for i in await (await memory.as_of(elsewhere)).recall()] == ["first"]
    with pytest.raises(lm.InvalidInput):
        await memory.as_of("yesterday")
    # A naive datetime was read as UTC here and as local time by purge: refused.
    with pytest.raises(lm.InvalidInput, match="has no timezone"):
        await memory.as_of(moment.replace(tzinfo=None))
    with pytest.raises(
        lm.InvalidInput, match=r"not fall before the epoch \(1970-01-01T00:00:00Z\)"
    ):
        await memory.as_of(dt.datetime(1969, 12, 31, tzinfo=dt.UTC))
    # The edges a log's append times hold, 0 and 2**63 - 1 milliseconds, are moments
    # (before everything, after everything); one past either is not.
    for before in (0, 0.0, dt.datetime(1970, 1, 1, tzinfo=dt.UTC)):
        assert await (await memory.as_of(before)).recall() == []
    assert [i.text for i in await (await memory.as_of((1 << 63) - 1)).recall()] == ["second"]
    for past in (1 << 63, -1, -0.001):
        with pytest.raises(lm.InvalidInput, match="between the epoch and the year 292 million"):
            await memory.as_of(past)
    # True was read as 1 ms (an empty memory), NaN and infinity as out of range.
    for flag in (True, False):
        with pytest.raises(lm.InvalidInput, match="a moment is a datetime, seconds"):
            await memory.as_of(flag)
    for endless in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(lm.InvalidInput, match="a moment must be a finite number"):
            await memory.as_of(endless)


@pytest.mark.parametrize(
    ("read", "error", "says"),
    [
        (lambda s: s.fetch(5), lm.InvalidName, "key must be a string"),
        (lambda s: s.fetch(None), lm.InvalidName, "key must be a string"),
        (lambda s: s.fetch(""), lm.InvalidName, "must not be empty"),
        (lambda s: s.recall(text=5), lm.InvalidInput, "text must be a string"),
    ],
)
async def test_a_snapshot_refuses_what_its_handle_refuses(tmp_path, read, error, says):
    # A snapshot's fetch of a key that is no name answered None (as if absent), and its
    # recall of a text that is no str raised a raw AttributeError.
    async with lm.connect(f"local://{tmp_path}") as laser:
        memory = laser.memory("notes")
        await memory.set("k", {"a": 1})
        snapshot = await memory.as_of(10**13)
        with pytest.raises(error, match=says):
            outcome = read(snapshot)
            if asyncio.iscoroutine(outcome):  # recall is async; fetch is not
                await outcome
        assert snapshot.fetch("k").json() == {"a": 1}


async def test_replay_prints_a_namespace_in_order(laser: lm.Laser):
    memory = laser.memory("notes")
    mid = await memory.remember("one", conversation="c1")
    await laser.memory("elsewhere").remember("not mine")
    await asyncio.sleep(0.005)  # other partitions: apart in time, so in this order
    await memory.improve(mid, 1.5)
    await asyncio.sleep(0.005)
    await memory.set("k", {"a": 1})
    common = ["--url", laser.log.url, "--stream", laser.stream]
    out = await cli("replay", *common, "--json")
    lines = [json.loads(line) for line in out.output.splitlines()]
    assert [line["op"] for line in lines] == ["remember", "feedback", "named.set"]
    assert lines[0]["id"] == str(mid) and lines[1]["weight"] == 1.5
    times = [line["append_time_ms"] for line in lines]
    assert times == sorted(times)
    later = await cli("replay", *common, "--since", str(times[1] + 1))
    assert "remember" not in later.output
    # An ISO time without a zone is UTC, as the CLI prints times.
    import datetime as dt

    since = dt.datetime.fromtimestamp((times[1] + 1) / 1000, dt.UTC)
    for text in (since.replace(tzinfo=None).isoformat(), since.isoformat()):
        later = await cli("replay", *common, "--since", text)
        assert later.exit_code == 0 and "remember" not in later.output, later.output
        assert "feedback" not in later.output and "named.set" in later.output
    human = await cli("replay", *common)
    assert str(mid) in human.output and "weight 1.5" in human.output
    bad = await cli("replay", *common, "--since", "last tuesday")
    assert bad.exit_code != 0 and "ISO 8601" in bad.output
    # An auditor's own replay without a namespace reads every namespace of the topic.
    from folders.replay import replay

    every = await replay(laser.log, memory.topic, tenant="")
    assert sorted({r.record.ns for r in every}) == sorted(
        {memory.namespace, laser.memory("elsewhere").namespace}
    )
    assert len(every) == 4
    mine = await replay(laser.log, memory.topic, namespace=memory.namespace, tenant="")
    assert [r.record.ns for r in mine] == [memory.namespace] * 3


async def test_http_server_serves_the_view(viewed):
    laser, view = viewed
    memory = laser.memory("notes")
    mid = await memory.remember("the reporter prefers email", conversation="c1", agent="triage")
    await asyncio.sleep(0.005)  # another partition: apart in time, so history keeps this order
    await memory.improve(mid, 1.0)
    await memory.set("profile", {"channel": "email"})
    await memory.remember("secret", tenant="acme")
    await catch_up(laser, view)
    server = TestServer(make_app(laser.managed_view()), host="127.0.0.1")
    await server.start_server()
    ns = memory.namespace
    try:
        async with ClientSession(base_url=str(server.make_url(""))) as http:
            async with http.get("/v1/recall", params={"namespace": ns, "agent": "triage"}) as r:
                assert r.status == 200
                items = await r.json()
                assert [(i["id"], i["weight"]) for i in items] == [(str(mid), 1.0)]
                assert items == [i.to_json() for i in await memory.recall(agent="triage")]
            async with http.get("/v1/recall", params={"namespace": ns}) as r:
                assert "secret" not in [i["body"] for i in await r.json()]
            async with http.get("/v1/recall", params={"namespace": ns, "tenant": "acme"}) as r:
                assert [i["body"] for i in await r.json()] == ["secret"]
            async with http.get("/v1/fetch", params={"namespace": ns, "key": "profile"}) as r:
                assert (await r.json())["version"] == 1
            async with http.get("/v1/fetch", params={"namespace": ns, "key": "nope"}) as r:
                assert r.status == 404
            async with http.get("/v1/history", params={"namespace": ns, "id": str(mid)}) as r:
                assert [e["op"] for e in await r.json()] == ["remember", "feedback"]
            async with http.get("/v1/stats") as r:
                assert (await r.json())["items"] == 2
            async with http.get("/v1/recall", params={"namespace": ns, "strategy": "graph"}) as r:
                assert r.status == 400 and (await r.json())["error"] == "InvalidInput"
            async with http.get("/v1/recall", params={"namespace": ns, "limit": "ten"}) as r:
                assert r.status == 400
            async with http.get("/v1/recall") as r:
                assert r.status == 400 and "namespace" in (await r.json())["message"]
    finally:
        await server.close()


def test_cli_fold_rebuild_and_managed_reads(any_log_url: str, stream_name: str, tmp_path):
    view = str(tmp_path / "view")
    common = ["--url", any_log_url, "--stream", stream_name]
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    run("bootstrap", *common)
    first = json.loads(run("remember", "alpha fact", *common, "--json"))
    run("remember", "beta fact", *common)
    run("set", "k", '{"a": 1}', *common)
    run("update", "k", '{"b": 2}', *common)
    run("fold", *common, "--view", view, "--exit-when-caught-up")
    managed = json.loads(run("recall", *common, "--view", view, "--json"))
    assert [i["body"] for i in managed] == ["beta fact", "alpha fact"]
    assert json.loads(run("fetch", "k", *common, "--view", view, "--version", "1", "--json"))[
        "body"
    ] == {"a": 1}
    rebuilt = run("rebuild", *common, "--view", view)
    assert "rebuilt" in rebuilt
    assert json.loads(run("recall", *common, "--view", view, "--json")) == managed
    assert "alpha fact" in run("audit", first["id"], *common, "--view", view)
    assert '"watermark"' in run("stats", "--view", view, "--json")


PRODUCER = textwrap.dedent(
    """
    import asyncio, random, sys
    import laser_memory as lm

    async def main(url, stream, seed, count):
        rng = random.Random(int(seed))
        async with lm.connect(url, stream=stream) as laser:
            memory = laser.memory("notes")
            ids = []
            for i in range(int(count)):
                op = rng.random()
                conversation = rng.choice([None, "c1", "c2", "c3"])
                if op < 0.55 or not ids:
                    ids.append(await memory.remember(
                        f"fact {rng.randrange(40)}", conversation=conversation,
                        dedup=rng.random() < 0.5, user=rng.choice([None, "u1"])))
                elif op < 0.7:
                    await memory.improve(rng.choice(ids), rng.choice([-1.0, 0.5, 2.0]),
                                         conversation=conversation)
                elif op < 0.8:
                    await memory.forget(rng.choice(ids), conversation=conversation)
                else:
                    await memory.update(f"k{rng.randrange(3)}", {f"f{rng.randrange(4)}": i})
    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_folder_killed_at_random_points_ends_identical_to_a_rebuild(
    any_log_url: str, stream_name: str, tmp_path
):
    async with lm.connect(any_log_url, stream=stream_name) as laser:
        await laser.bootstrap(partitions=3)
    view = tmp_path / "view"
    producers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRODUCER, any_log_url, stream_name, str(seed), "400"
        )
        for seed in (1, 2)
    ]
    fold = [
        sys.executable,
        "-m",
        "laser_memory.cli",
        "fold",
        "--url",
        any_log_url,
        "--stream",
        stream_name,
        "--view",
        str(view),
    ]
    kills = 0
    while any(p.returncode is None for p in producers) or kills < 3:
        folder = await asyncio.create_subprocess_exec(*fold, stderr=subprocess.DEVNULL)
        await asyncio.sleep(0.3 + random.random() * 0.9)
        folder.send_signal(signal.SIGKILL)
        await folder.wait()
        kills += 1
        for producer in producers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(producer.wait(), 0.01)
    assert all(p.returncode == 0 for p in producers)
    finish = await asyncio.create_subprocess_exec(*fold, "--exit-when-caught-up")
    assert await finish.wait() == 0
    async with lm.connect(any_log_url, stream=stream_name) as laser:
        ends = await laser.log.end_offsets(laser.memory_topic_name)
        await catch_up(laser, tmp_path / "clean")
    with MemoryView.open(view) as killed, MemoryView.open(tmp_path / "clean") as clean:
        # A partition that never got a record has no position in a view.
        ends = {partition: offset for partition, offset in ends.items() if offset}
        assert killed.watermark() == ends == clean.watermark()
        assert killed.dump() == clean.dump()
        assert killed.stats().items > 0


READER = textwrap.dedent(
    """
    import asyncio, sys
    import laser_memory as lm

    async def main(url, stream, view, body, topic, partition, offset):
        receipt = lm.Receipt(topic, int(partition), int(offset), 0)
        async with lm.connect(url, stream=stream, view=view) as laser:
            memory = laser.memory("notes")
            items = await memory.recall(text=body, strategy="keyword", after=receipt, timeout=30)
            print(" ".join(i.text for i in items))
    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_readers_in_other_processes_read_their_writers_writes(viewed):
    """A writer hands its receipt to readers in other processes; each reader's recall
    waits until the folder has folded that write, then sees it."""
    laser, view = viewed
    memory = laser.memory("notes")
    async with running_folder(laser, view):
        readers = []
        for n in range(3):
            for i in range(20):
                await memory.remember(f"filler {n}-{i}")
            mid = await memory.remember(f"marker{n}")
            receipt = mid.receipt
            readers.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    READER,
                    laser.log.url,
                    laser.stream,
                    str(view),
                    f"marker{n}",
                    receipt.topic,
                    str(receipt.partition),
                    str(receipt.offset),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        outputs = [await asyncio.wait_for(r.communicate(), 90) for r in readers]
    assert [out.decode().strip() for out, _ in outputs] == ["marker0", "marker1", "marker2"], [
        err.decode()[-2000:] for _, err in outputs
    ]


def test_serve_runs_as_a_process_bound_to_loopback(tmp_path):
    async def fill() -> None:
        async with lm.connect(f"local://{tmp_path / 'log'}", view=tmp_path / "view") as laser:
            await laser.memory("notes").remember("served fact")
            await catch_up(laser, tmp_path / "view")

    asyncio.run(fill())
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "laser_memory.cli",
            "serve",
            "--view",
            str(tmp_path / "view"),
            "--port",
            str(port),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                url = f"http://127.0.0.1:{port}/v1/recall?namespace=notes"
                with urllib.request.urlopen(url, timeout=2) as response:
                    items = json.loads(response.read())
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        assert [i["body"] for i in items] == ["served fact"]
        # The listening socket is on loopback only: never on every interface.
        assert _listening_addresses(port) == {"127.0.0.1"}
    finally:
        server.terminate()
        server.wait(10)


def _listening_addresses(port: int) -> set[str]:
    """The IPv4 and IPv6 addresses a socket listens on at this port, from /proc/net."""
    import ipaddress

    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(address)
                # /proc prints each 32-bit word in host (little-endian) order.
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(str(ipaddress.ip_address(raw)))
    return found


async def test_owner_filters_stay_exact_when_an_id_is_reused_with_another_owner(viewed):
    """An item remembered by user u1 in c1 and, under the same id, by nobody in c2: a
    read for u1 weighs only the c1 remember, so the feedback-ranked index (which weighs
    both) must not decide which items a limited read returns."""
    laser, view = viewed
    memory = laser.memory("notes")
    a = await memory.remember("a", user="u1", conversation="c1")
    b = await memory.remember("b", user="u1", conversation="c1")
    await memory.remember("c", user="u1", conversation="c1")
    x = await memory.remember("x", user="u1", conversation="c1")
    await memory.append(x, "x elsewhere", kind="fact", conversation="c2")
    await memory.improve(a, 1.0)
    await memory.improve(b, 0.5)
    await memory.improve(x, 2.0, conversation="c1")
    await memory.improve(x, -10.0, conversation="c2")
    await catch_up(laser, view)
    folded = [(i.id, i.weight) for i in await memory.recall(user="u1", limit=2, folded=True)]
    assert folded == [(x, 2.0), (a, 1.0)]
    assert [(i.id, i.weight) for i in await memory.recall(user="u1", limit=2)] == folded


async def test_every_owner_filter_at_once_holds_in_every_read(viewed):
    """Agent, user, application and kind together: an item matching all but one of them
    is never returned, by any strategy, folded or managed, though it is newer and its
    text matches as well (no test set all four at once)."""
    laser, view = viewed
    memory = laser.memory("notes")
    owner = {"agent": "a", "user": "u", "application": "p", "kind": "fact"}
    wanted = await memory.remember("the deploy went fine", **owner)
    for field, other in (("agent", "b"), ("user", "v"), ("application", "q"), ("kind", "entity")):
        await memory.remember(f"the deploy went fine for {field}", **{**owner, field: other})
    await catch_up(laser, view)
    for strategy in ("recent", "auto", "keyword", "semantic", "hybrid"):
        text = None if strategy == "recent" else "deploy"
        for folded in (True, False):
            found = await memory.recall(
                text=text, strategy=strategy, folded=folded, limit=1, **owner
            )
            assert [i.id for i in found] == [wanted], (strategy, folded)


async def test_history_keeps_every_remember_of_one_id_whatever_the_fold_meets_first(viewed):
    """The view stores a remember its item keeps only in the item; a remember the item
    does not keep (an older one of the same id and conversation, met first or later)
    gets an audit line of its own. Writers reusing an id with other bodies (past the
    handle's checks) on other partitions exercise both orders."""
    laser, view = viewed
    memory = laser.memory("notes")
    partitions = (await laser.log.describe_topic(memory.topic)).partitions
    keys = {}
    for n in range(1000):
        keys.setdefault(partition_for(f"k{n}".encode(), partitions), f"k{n}".encode())
    scope = MemoryScope(stream=laser.stream, conversation="c1")
    ids = []
    for order in (range(1, 4), range(3, 0, -1)):  # newest on the highest, then the lowest
        raw = MemoryId.new().bytes
        ids.append(MemoryId(raw))
        for body, partition in zip((b"first", b"second", b"third"), order, strict=True):
            wire = encode_record(
                Remember(ns=memory.namespace, scope=scope, id=raw, kind=1, body=body)
            )
            await laser.log.append(
                memory.topic,
                OutgoingRecord(wire.value, key=keys[partition % partitions], headers=wire.headers),
            )
            await asyncio.sleep(0.005)  # append times say the order
    await catch_up(laser, view)
    for mid in ids:
        history = await memory.history(mid)
        assert [h.body for h in history] == [b"first", b"second", b"third"]
        assert [h.version for h in history] == [1, 2, 3]
        assert history == await memory.history(mid, folded=True)
    assert {i.text for i in await memory.recall(conversation="c1")} == {"third"}


async def test_a_view_item_keeps_every_field_of_its_remember(viewed):
    """The view stores a remember as a compact array without its default fields: each
    field, set or not, must come back as the fold has it."""
    laser, view = viewed
    memory = laser.memory("notes")
    full = await memory.remember(
        "every field set",
        kind="summary",
        conversation="c1",
        agent="a",
        user="u",
        application="p",
        tenant="t",
        durable=True,
        origin={"topic": "chat", "partition": 2, "offset": 7},
        producer={"name": "extractor", "version": "2"},
        embedding=[0.5, -1.0],
    )
    await memory.remember("nothing set")
    await catch_up(laser, view)
    for tenant in ("t", ""):
        managed = await memory.recall(tenant=tenant)
        assert managed == await memory.recall(tenant=tenant, folded=True)
    [item] = await memory.recall(tenant="t")
    assert item.id == full and item.lifetime == "durable" and item.origin.offset == 7
    assert item.producer.name == "extractor" and item.embedding is not None


_names = st.text(alphabet="abcxyz-", min_size=1, max_size=8)
#: The fields of a remember that may differ between two remembers of one owner.
_own_fields = st.fixed_dictionaries(
    {
        "body": st.binary(min_size=1, max_size=40),
        "lifetime": st.sampled_from(["session", "durable"]),
        # Finite float32s: four random bytes were now and then a NaN or an infinity,
        # which the fold rightly sets aside, failing the test by chance.
        "embedding": st.one_of(
            st.none(),
            st.floats(width=32, allow_nan=False, allow_infinity=False).map(
                lambda x: struct.pack("<f", x) * 3
            ),
        ),
        "expires_at": st.one_of(st.none(), st.integers(0, 2**62)),
        "supersedes": st.one_of(st.none(), st.binary(min_size=16, max_size=16)),
        "origin": st.booleans(),
        "producer": st.one_of(st.none(), _names),
    }
)
_keys = st.tuples(st.integers(0, 2**50), st.integers(0, 63), st.integers(0, 2**40))


@settings(max_examples=200, deadline=None)
@given(
    conversation=st.one_of(st.none(), _names),
    agent=st.one_of(st.none(), _names),
    tenant=st.sampled_from(["", "acme"]),
    kind=st.integers(1, 5),
    own=st.lists(_own_fields, min_size=2, max_size=2),
    keys=st.lists(_keys, min_size=2, max_size=2),
)
def test_a_new_items_stored_state_decodes_as_its_item_state(
    conversation, agent, tenant, kind, own, keys
):
    """The fold writes a new item's state without making its structs, from pieces it
    encodes once for the item's owner: the bytes of two new items of one owner, folded
    by a view, must be `new_item_state`'s, which decode to the very state the structs
    would have encoded, and an item read from them names its source from the item's key
    and the view's binding. Bytes written by earlier builds, whose kept remembers
    carried a third element (a source, always nil), decode to the same state."""
    import tempfile

    from folders.state import (
        _KEPT_FIELDS,
        ItemFilter,
        ItemState,
        KeptRemember,
        Remembered,
        _conv,
        kept,
    )
    from folders.view import (
        _KEPT_ORDER,
        _encoder,
        _item_decoder,
        _new_state_encoder,
        new_item_state,
    )
    from laser_memory.items import Source
    from laser_memory.log.port import LogRecord
    from laser_memory.records import Origin, Producer, record_headers

    # The order the fold writes a kept remember's fields in is the struct's.
    assert _KEPT_ORDER == KeptRemember.__struct_fields__
    scope = MemoryScope(stream="s", tenant=tenant, agent=agent, conversation=conversation)
    records = [
        Remember(
            ns="stream:s/notes",
            scope=scope,
            id=bytes([number + 1]) * 16,
            kind=kind,
            body=fields["body"],
            lifetime=fields["lifetime"],
            origin=Origin(stream="s", topic="t", partition=1, offset=2)
            if fields["origin"]
            else None,
            producer=Producer(name=fields["producer"]) if fields["producer"] else None,
            embedding=fields["embedding"],
            embedder="test/three" if fields["embedding"] else None,
            expires_at=fields["expires_at"],
            supersedes=fields["supersedes"],
        )
        for number, fields in enumerate(own)
    ]
    conv = _conv(conversation)
    if keys[1][1] == keys[0][1] and keys[1][2] <= keys[0][2]:
        keys[1] = (keys[1][0], keys[1][1], keys[0][2] + 1)  # a partition only goes on
    log_records = [
        LogRecord("t", key[1], key[2], key[0], None, encode_record(r).value, record_headers(r))
        for r, key in zip(records, keys, strict=True)
    ]
    with tempfile.TemporaryDirectory() as path, MemoryView.open(path) as view:
        view.bind("t", "g")
        for log_record in log_records:
            view.apply([[log_record]], "g")
        folded = dict(view.dump()["items"])
    for record, key in zip(records, keys, strict=True):
        state = ItemState(remembers={conv: Remembered(key, kept(record))}, version=1, last=key)
        stored = new_item_state(conv, key, kept(record))
        [in_view] = [value for db_key, value in folded.items() if db_key.endswith(record.id)]
        assert in_view == stored
        assert _item_decoder.decode(stored) == state
        # A state the fold changed is stored as it is, and reads back the same.
        assert _item_decoder.decode(_encoder.encode(state)) == state
        # The kept fields as a tuple make the same bytes as the struct.
        assert new_item_state(conv, key, _KEPT_FIELDS(record)) == stored
        earlier = _new_state_encoder.encode(({conv: (key, _KEPT_FIELDS(record), None)}, 1, key))
        assert _item_decoder.decode(earlier) == state
        item = state.visible(record.id, ItemFilter(tenant=tenant, superseded=True), "t", "g")
        assert item is not None
        assert item.source == Source("s", "t", key[1], key[2], "g", conversation)
        assert type(item.source) is Source


async def test_a_log_and_a_view_never_share_a_folder(tmp_path):
    # A --view that names the log's folder (or the other way round) would mix the two
    # stores in one LMDB file, and deleting "the view" would delete the log.
    log_dir, view_dir, other_log = tmp_path / "log", tmp_path / "view", tmp_path / "other"
    async with lm.connect(f"local://{log_dir}", stream="s") as laser:
        await laser.memory("notes").remember("in the log")
    async with lm.connect(f"local://{other_log}", stream="s") as other:
        await other.memory("notes").remember("in another log")
        with pytest.raises(lm.ConfigError, match=r"holds a local log .*cannot also be a managed"):
            await ViewFolder(other.log, other.memory_topic_name, log_dir).run(until_caught_up=True)
        await ViewFolder(other.log, other.memory_topic_name, view_dir).run(until_caught_up=True)
    with pytest.raises(lm.ConfigError, match=r"holds a managed view .*cannot also be a local log"):
        async with lm.connect(f"local://{view_dir}", stream="s") as laser:
            await laser.memory("notes").remember("into the view's folder")
    # Both stores are as they were: nothing of the other was created in them.
    async with lm.connect(f"local://{log_dir}", stream="s") as laser:
        assert [i.text for i in await laser.memory("notes").recall()] == ["in the log"]
    with MemoryView.open(view_dir) as view:
        assert view.stats().items == 1

    def databases(folder: Path) -> set[str]:
        env = lmdb.open(str(folder), max_dbs=16, readonly=True, lock=False)
        with env.begin() as txn:
            present = {bytes(k).decode() for k in txn.cursor().iternext(values=False)}
        env.close()
        return present

    assert databases(log_dir) == {"topics", "heads", "records"}
    assert not databases(view_dir) & {"topics", "heads", "records"}


async def test_a_log_and_a_view_never_share_a_folder_open_in_one_process(tmp_path):
    # The same misuse as above while the other store is open here (the CLI's
    # `rebuild --view` naming the log it reads): it was a LogUnavailable saying the
    # folder "is open in this process with databases ...", a fault of the file to a
    # reader, where it is one of the settings.
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("in the log")
        with pytest.raises(lm.ConfigError, match=r"holds a local log .*cannot also be a managed"):
            await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "log").run(
                until_caught_up=True
            )
        with pytest.raises(lm.ConfigError, match=r"holds a local log .*cannot also be a managed"):
            MemoryView.open(tmp_path / "log")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
        with MemoryView.open(tmp_path / "view"):
            with pytest.raises(lm.ConfigError, match=r"holds a managed view .*cannot also be a"):
                async with lm.connect(f"local://{tmp_path / 'view'}", stream="s"):
                    pass
        assert [i.text for i in await laser.memory("notes").recall()] == ["in the log"]


async def test_a_folder_that_already_holds_a_log_and_a_view_keeps_its_log(tmp_path):
    # Made before the check above: its log must stay readable (its data lives there).
    async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
        await laser.memory("notes").remember("kept")
    env = lmdb.open(str(tmp_path), max_dbs=16)
    env.open_db(b"items")
    env.close()
    async with lm.connect(f"local://{tmp_path}", stream="s") as laser:
        assert [i.text for i in await laser.memory("notes").recall()] == ["kept"]


async def test_a_damaged_view_is_a_log_error_that_says_to_rebuild(tmp_path):
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember_many([f"fact {i}" for i in range(3000)])
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    data = tmp_path / "view" / "data.mdb"
    with open(data, "r+b") as file:  # noqa: ASYNC230 (damaging the file, nothing else runs)
        file.seek(data.stat().st_size // 2)
        file.write(b"\xff" * 16384)
    with MemoryView.open(tmp_path / "view") as view:
        with pytest.raises(lm.LogUnavailable, match=r"could not be read: .*rebuild it"):
            view.dump()


@pytest.mark.parametrize("cut", [0, 100])
async def test_a_view_whose_file_is_no_lmdb_file_says_to_rebuild_when_opened(tmp_path, cut):
    """Its first page gone (overwritten, or the file cut short): opening it failed in a
    way no test met. It is a `LogUnavailable` saying to rebuild, for readers and the
    folder alike."""
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("x")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
        data = tmp_path / "view" / "data.mdb"
        data.write_bytes(b"not an LMDB file " * 64 if not cut else data.read_bytes()[:cut])
        with pytest.raises(lm.LogUnavailable, match=r"cannot open the view .*rebuild it"):
            MemoryView.open(tmp_path / "view", create=False)
        with pytest.raises(lm.LogUnavailable, match="rebuild it"):
            await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
                until_caught_up=True
            )


#: A view's tables, and the reads that decode what each holds.
DAMAGED_TABLES = {
    "items": ["recall", "history"],
    "index": ["recall"],
    "named": ["fetch", "named"],
    "versions": ["fetch version", "history key"],
    "audit": ["history"],
}


@pytest.mark.parametrize("table", DAMAGED_TABLES)
async def test_a_view_value_damaged_in_place_says_to_rebuild_on_every_read_and_fold(
    tmp_path, table
):
    # LMDB keeps no checksum: a value changed on disk was a raw DecodeError from every
    # read that met it, and from the folder. Now LogUnavailable saying to rebuild, the
    # folder writes nothing, and a rebuild answers again.
    view = tmp_path / "view"
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        ids = await memory.remember_many(
            [{"body": f"fact {i}", "conversation": "c"} for i in range(3)]
        )
        await memory.improve(ids[0], 2.0)
        await memory.forget(ids[1])
        await memory.set("k", {"a": 1})
        await memory.update("k", {"b": 2})
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    env = lmdb.open(str(view), max_dbs=20)
    with env.begin(write=True, db=env.open_db(table.encode())) as txn:
        for key, value in list(txn.cursor()):
            txn.put(key, b"\xc1" + value[1:])
    env.close()
    reads = {
        "recall": lambda m: m.recall(),
        "history": lambda m: m.history(ids[0]),
        "fetch": lambda m: m.fetch("k"),
        "named": lambda m: m.named(),
        "fetch version": lambda m: m.fetch("k", version=1),
        "history key": lambda m: m.history("k"),
    }
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", view=view) as laser:
        memory = laser.memory("notes")
        for name in DAMAGED_TABLES[table]:
            with pytest.raises(lm.LogUnavailable, match=r"holds damaged data.*rebuild it"):
                await reads[name](memory)
        await memory.improve(ids[0], 1.0)
        await memory.remember("more", conversation="c")
        await memory.update("k", {"c": 3})
        # What the fold reads back to change an item or a named item: the view's own
        # state, damaged. A damaged named item set the update aside as a bad record, and
        # the folder went on without it.
        if table in ("items", "index", "named"):
            with pytest.raises(lm.LogUnavailable, match=r"holds damaged data.*rebuild it"):
                await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True, rebuild=True)
        assert [i.text for i in await memory.recall(strategy="recent")] == [
            "more",
            "fact 2",
            "fact 0",
        ]
        assert (await memory.fetch("k")).json() == {"a": 1, "b": 2, "c": 3}
        assert len(await memory.history("k")) == 3
        with MemoryView.open(view) as opened:
            assert opened.stats().set_aside == 0


async def test_a_stopped_connection_ends_managed_reads_and_waits_with_log_closed(tmp_path):
    # Before, a managed read after stop reopened the view the stop had closed (and
    # answered), and a read waiting for a receipt waited out its whole timeout.
    laser = lm.connect(f"local://{tmp_path / 'log'}", stream="s", view=tmp_path / "view")
    await laser.start()
    memory = laser.memory("notes")
    mid = await memory.remember("first")
    await ViewFolder(laser.log, memory.topic, tmp_path / "view").run(until_caught_up=True)
    assert [i.text for i in await memory.recall()] == ["first"]
    later = await memory.remember("not folded yet")
    waiting = asyncio.ensure_future(memory.recall(after=later, timeout=30))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await laser.stop()
    with pytest.raises(lm.LogClosed, match="stopped"):
        await asyncio.wait_for(waiting, 5)
    for read in (memory.recall, lambda: memory.fetch("k"), lambda: memory.history(mid)):
        with pytest.raises(lm.LogClosed):
            await read()


async def test_a_view_opened_before_a_fork_is_never_read_in_the_child(tmp_path):
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("a fact")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    with MemoryView.open(tmp_path / "view") as view:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                try:
                    view.stats()
                    os.write(write, b"read through the parent's environment")
                except lm.LogUnavailable as exc:
                    os.write(write, str(exc).encode())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)  # noqa: ASYNC222 (the forked child exits at once)
        with os.fdopen(read, "rb") as pipe:
            said = pipe.read().decode()
        assert "opened in the parent of this forked process" in said, said
        assert view.stats().items == 1


def test_a_search_gives_the_heap_back_once_the_process_grew(monkeypatch):
    """A search over a million entries frees score arrays the C library's heap keeps
    (98 MB of anonymous memory after one hybrid recall, 61 MB trimmed): a search trims
    the heap when the process's anonymous memory grew by 16 MB since the last trim (or
    since it was lowest), and only then, since trimming takes milliseconds."""
    from folders import heap

    mb = 1 << 20
    trims: list[int] = []
    readings = iter([110, 120, 101, 105, 90, 104, 107, 92] + [0] * 4)
    monkeypatch.setattr(heap, "_malloc_trim", lambda: trims.append)
    monkeypatch.setattr(heap, "anonymous_bytes", lambda: next(readings) * mb)
    monkeypatch.setattr(heap, "_after_trim", [100 * mb])
    heap.give_back_if_grown()  # 110: grew 10 MB, kept
    assert trims == []
    heap.give_back_if_grown()  # 120: grew 20 MB, trimmed (to 101)
    assert trims == [0]
    heap.give_back_if_grown()  # 105: grew 4 MB since the trim
    heap.give_back_if_grown()  # 90: lower, the new baseline
    heap.give_back_if_grown()  # 104: grew 14 MB
    assert trims == [0]
    heap.give_back_if_grown()  # 107: grew 17 MB, trimmed (to 92)
    assert trims == [0, 0]
    assert heap._after_trim == [92 * mb]


def test_only_large_semantic_and_hybrid_searches_read_the_growth(monkeypatch):
    """Reading the process's memory takes microseconds, a fifth of a small keyword
    recall: only searches that make arrays over every entry of a large index read it."""
    from folders import heap

    readings: list[str] = []
    monkeypatch.setattr(heap, "give_back_if_grown", lambda: readings.append("read"))
    heap.give_back_after_search("keyword", 5_000_000)
    heap.give_back_after_search("hybrid", heap.TRIM_FROM_ENTRIES - 1)
    assert readings == []
    heap.give_back_after_search("hybrid", heap.TRIM_FROM_ENTRIES)
    heap.give_back_after_search("semantic", 1_000_000)
    assert readings == ["read", "read"]


def test_anonymous_memory_is_read_from_the_process():
    import mmap

    from folders.heap import anonymous_bytes

    before = anonymous_bytes()
    if before is None:
        pytest.skip("no /proc/self/statm here: searches never trim")
    # 64 MB of private anonymous pages (a shared mapping counts as shared memory), each
    # written, mapped by us rather than by the allocator (whose own pages it may take or
    # free between two readings): they show while held, and go once unmapped. Half of
    # each is asked for, as other threads allocate too.
    size = 64 << 20
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, size, mmap.PAGESIZE):
        pages[offset] = 1
    holding = anonymous_bytes()
    assert holding - before >= size // 2
    pages.close()
    assert holding - anonymous_bytes() >= size // 2


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.05])
async def test_a_folder_whose_connection_stops_ends_with_log_closed_leaving_nothing_open(
    any_log_url, stream_name, tmp_path, delay
):
    # On Kafka the stop closed the admin client under a folder's check of its topic: the
    # folder ended with a connection error for a log its caller had stopped, and left a
    # connection open ("Unclosed AIOKafkaConnection"). The stop now waits for the
    # requests under way; the folder ends with LogClosed. And a request begun once the
    # stop had closed the clients waited out aiokafka's request timeout (the folder ended
    # 30 s after the stop): it is LogClosed at once now, so 10 s is ample.
    import gc
    import warnings

    from laser_memory.errors import LogClosed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        laser = lm.connect(any_log_url, stream=stream_name)
        await laser.start()
        try:
            await laser.bootstrap(partitions=4)
            memory = laser.memory("notes")
            for first in range(0, 3000, 1000):
                await memory.remember_many([f"fact {n}" for n in range(first, first + 1000)])
            folder = asyncio.create_task(
                ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run()
            )
            await asyncio.sleep(delay)
        finally:
            await laser.stop()
        with pytest.raises(LogClosed, match="stopped"):
            await asyncio.wait_for(folder, 10)
        del folder
        gc.collect()
        await asyncio.sleep(0.1)
    assert [str(w.message) for w in caught if "nclosed" in str(w.message)] == []


async def test_the_first_named_items_by_key_are_those_a_full_listing_starts_with(tmp_path):
    """`named_items(limit=n)` reads the keys in order only until ``n`` are found (the
    HTTP listing read every named item of the tenant for each request); keys too long to
    be their own part (digests, read apart), removed items and other tenants mixed in."""
    rng = random.Random(7)
    keys = sorted(
        {
            rng.choice(["a", "ab", "b", "é", "z", "a.b"])
            + "".join(rng.choice("ab.é") for _ in range(rng.choice([0, 1, 3, 70])))
            for _ in range(300)
        }
    )
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        memory = laser.memory("notes")
        for key in keys:
            await memory.set(key, "v")
            await memory.set(key, "other tenant's", tenant="globex")
        for key in rng.sample(keys, 40):
            await memory.remove(key)
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    assert sum(len(k.encode()) > 64 for k in keys) > 20  # digests among them
    with MemoryView.open(tmp_path / "view", create=False) as view:
        for prefix in ("", "a", "ab", "a.", "é", "z", "q", "a" * 80):
            full = [i.key for i in view.named_items(memory.namespace, prefix=prefix)]
            assert full == sorted(full)
            for limit in (0, 1, 2, 5, 17, 100, 1000):
                got = view.named_items(memory.namespace, prefix=prefix, limit=limit)
                assert [i.key for i in got] == full[:limit], (prefix, limit)
                assert all(i.text == "v" for i in got)
    # Over HTTP: `limit` given, and 1,000 when not (past 1,000 keys).
    url = f"local://{tmp_path / 'log'}"
    async with lm.connect(url) as laser:
        memory = laser.memory("notes")
        for n in range(1000):
            await memory.set(f"zz{n:04d}", "v")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    with MemoryView.open(tmp_path / "view", create=False) as view:
        everything = [i.key for i in view.named_items(memory.namespace)]
        assert len(everything) > 1000
        server = TestServer(make_app(view), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                for limit, want in (("3", everything[:3]), (None, everything[:1000])):
                    params = {"namespace": memory.namespace}
                    if limit is not None:
                        params["limit"] = limit
                    async with http.get("/v1/named", params=params) as r:
                        assert [i["key"] for i in await r.json()] == want, limit
        finally:
            await server.close()
    # A handle's `named(limit=)`, folded and managed alike; a bad limit is refused.
    async with lm.connect(url, view=tmp_path / "view") as laser:
        handle = laser.memory("notes")
        for prefix in ("", "a", "é"):
            full = [i.key for i in await handle.named(prefix, folded=True)]
            for limit in (0, 3, 1000, None):
                for folded in (True, False):
                    got = await handle.named(prefix, limit=limit, folded=folded)
                    assert [i.key for i in got] == full[:limit], (prefix, limit, folded)
        for bad in (-1, True, 2.0, "5"):
            with pytest.raises(lm.InvalidInput, match="limit is a whole number"):
                await handle.named(limit=bad)


def _filter(**fields):
    from folders.state import ItemFilter

    return ItemFilter(**fields)


VIEW_READS = [
    (lambda v: v.fetch(5, "k"), "namespace is a str"),
    (lambda v: v.fetch("notes", None), "key is a str"),
    (lambda v: v.fetch("notes", "k", tenant=None), "tenant is a str"),
    (lambda v: v.named_items("notes", prefix=5), "prefix is a str"),
    (lambda v: v.named_items("notes", limit=-1), "limit is a whole number"),
    (lambda v: v.named_items("notes", limit="3"), "limit is a whole number"),
    (lambda v: v.named_history("notes", b"k"), "key is a str"),
    (lambda v: v.item_history("notes", "01M91JEYVF17RHPYRNVNXH0NFP"), "raw id is bytes"),
    (lambda v: v.item_history(["notes"], bytes(16)), "namespace is a str"),
    (lambda v: v.stats(aside_limit="all"), "aside_limit is a whole number"),
    (lambda v: v.stats(aside_limit=-1), "aside_limit is a whole number"),
    (lambda v: v.recall("notes", None), "where is an ItemFilter"),
    (lambda v: v.recall("notes", {"tenant": ""}), "where is an ItemFilter"),
    (lambda v: v.recall(None, _filter()), "namespace is a str"),
    (lambda v: v.recall("notes", _filter(), text=5), "text must be a string"),
    (lambda v: v.recall("notes", _filter(), text="\udcff"), "not valid Unicode"),
    (lambda v: v.recall("notes", _filter(), exclude=[b"x"]), "exclude is a frozenset"),
    (lambda v: v.recall("notes", _filter(), limit=-1), "limit must be a whole number"),
    (lambda v: v.recall("notes", _filter(), limit=True), "limit must be a whole number"),
    (lambda v: v.recall("notes", _filter(), strategy="best"), "unknown recall strategy"),
    (lambda v: v.recall("notes", _filter(), strategy=None), "unknown recall strategy"),
    (lambda v: v.recall("notes", _filter(tenant=None)), "tenant is a str"),
    (lambda v: v.recall("notes", _filter(conversation=5)), "conversation is a str or None"),
    (lambda v: v.recall("notes", _filter(kind="fact")), "kind is a MemoryKind"),
    (lambda v: v.recall("notes", _filter(now_ms=1.5)), "now_ms is milliseconds"),
    (lambda v: v.recall("notes", _filter(superseded=1)), "superseded is True or False"),
    (lambda v: v.prepare_index("notes", _filter(agent=b"a")), "agent is a str or None"),
    (lambda v: v.has_passed(None), "a position is a Position"),
]


@pytest.mark.parametrize(("read", "says"), VIEW_READS)
async def test_every_read_of_the_view_refuses_arguments_of_the_wrong_kind(tmp_path, read, says):
    # A view's reads are public (`MemoryView.open(...).recall(...)`): each of these met a
    # key's encoding or a filter's field as a raw AttributeError or TypeError.
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        await laser.memory("notes").remember("hello")
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
            until_caught_up=True
        )
    with MemoryView.open(tmp_path / "view") as view:
        with pytest.raises(lm.LaserError, match=says):
            read(view)
        # The view still reads.
        assert [i.text for i in view.recall("notes", _filter())] == ["hello"]


async def test_an_items_history_keeps_each_remember_of_conversations_on_other_partitions(
    tmp_path: Path,
):
    """Remembers of one item in two conversations on two partitions, at the same offsets
    of each, then each replaced: the view keeps each replaced one as an audit line of its
    own (keyed by partition and offset), so its history is replay's, every remember."""

    async def partition_of(conversation: str) -> int:
        async with lm.connect(f"local://{tmp_path / 'probe'}") as probe:
            await probe.bootstrap(partitions=4)
            return (
                await probe.memory("notes").remember("x", conversation=conversation)
            ).receipt.partition

    first = await partition_of("c0")
    other = "c1"
    while await partition_of(other) == first:
        other += "1"
    async with lm.connect(f"local://{tmp_path / 'log'}", view=tmp_path / "view") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        mid = lm.MemoryId.new()
        writes = [
            await memory.append(mid, body, kind="fact", conversation=conversation)
            for body in ("a", "b")
            for conversation in ("c0", other)
        ]
        assert [(w.receipt.partition == first, w.receipt.offset) for w in writes] == [
            (True, 0), (False, 0), (True, 1), (False, 1)
        ]  # fmt: skip
        await catch_up(laser, tmp_path / "view")
        managed = await memory.history(mid)
        assert managed == await memory.history(mid, folded=True)
        assert sorted((e.partition, e.offset) for e in managed) == sorted(
            (w.receipt.partition, w.receipt.offset) for w in writes
        )


async def test_named_items_by_prefixes_at_the_length_the_view_keeps_keys_whole(tmp_path: Path):
    """Keys up to 64 bytes are their own part of the view's keys, longer ones a digest:
    prefixes and keys of 63, 64 and 65 bytes list the same items from the view as folded."""
    keys = ["k" * 63, "k" * 64, "k" * 65, "k" * 63 + "é"]  # the last is 65 bytes too
    async with lm.connect(f"local://{tmp_path / 'log'}", view=tmp_path / "view") as laser:
        memory = laser.memory("notes")
        for key in keys:
            await memory.set(key, {"length": len(key.encode())})
        await catch_up(laser, tmp_path / "view")
        for prefix in ("", "k" * 63, "k" * 64, "k" * 65, "k" * 63 + "é", "k" * 62 + "é"):
            want = sorted(key for key in keys if key.startswith(prefix))
            for folded in (True, False):
                listed = await memory.named(prefix, folded=folded)
                assert [item.key for item in listed] == want, (len(prefix), folded)
                for limit in (1, 2):
                    listed = await memory.named(prefix, folded=folded, limit=limit)
                    assert [item.key for item in listed] == want[:limit], (len(prefix), limit)


@pytest.mark.parametrize("conversation", ["", "c1", "é" * 31, "x" * 62, "x" * 63, "y" * 300])
@pytest.mark.parametrize(
    "owner", [(None, None, None, 1), ("a", "u", "app", 200), ("ü" * 100, None, None, 3)]
)
def test_a_new_owners_recency_prefixes_are_the_tag_prefixes_and_encoded_owner(conversation, owner):
    # A new owner's prefixes are made from its parts without the conversation (cached)
    # and the conversation's tag (not cached), its value from the owner encoded apart:
    # the same bytes as each tag's prefix and the whole owner encoded, long
    # conversations (whose tag is a digest) and empty ones (no tag) included.
    import msgspec

    import folders.view as view_module

    agent, user, application, kind = owner
    tags = view_module._owner_tags(agent, user, application, kind)
    if conversation:
        tags.append(f"c:{conversation}")
    expected = (
        tuple(view_module._tag_prefix(b"R", "acme", "stream:s/notes", t) for t in tags),
        msgspec.msgpack.encode((conversation, agent, user, application, kind)),
    )
    args = ("acme", "stream:s/notes", conversation, agent, user, application, kind)
    assert view_module._owner_prefixes(*args) == expected
    assert view_module._recency_prefixes(*args) == expected
