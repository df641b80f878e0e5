"""Search index snapshots beside a managed view: a new reading process starts from the
last one saved and catches up from the view's changes, answering exactly as a full
build would; a snapshot that cannot be used is passed over, never trusted."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import inspect
import os
import shutil
import signal
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

import folders.index_snapshots as index_snapshots
import folders.view as view_module
import laser_memory as lm
from folders.index_snapshots import IndexSnapshots
from folders.service import ViewFolder
from folders.state import ItemFilter
from folders.view import MemoryView
from laser_memory.clock import SteppedClock
from laser_memory.items import Source
from laser_memory.search_index import SearchIndex

QUERIES = [
    {"text": text, "strategy": strategy, **scope}
    for text in ("signing keys", "lunch noon", "node-7")
    for strategy in ("keyword", "hybrid", "semantic")
    for scope in ({}, {"conversation": "c1"})
] + [{"text": "keys", "strategy": "hybrid", "limit": 2}]


#: The items most tests fold: 40 about keys over conversations c0-c2, and one lunch in c1.
ENTRIES = [
    {"body": f"rotate signing keys on node-{i} monthly", "conversation": f"c{i % 3}"}
    for i in range(40)
] + [{"body": "lunch is served at noon", "conversation": "c1"}]


@pytest.fixture
def built(monkeypatch) -> list[int]:
    """How many items the view's readers read to build or update their indexes."""
    calls = [0]
    real = view_module.index_entry

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(view_module, "index_entry", counting)
    return calls


def calls_of(monkeypatch, owner: object, name: str) -> list[tuple]:
    """Patch ``owner.name`` to note the arguments of each call, then make it."""
    calls: list[tuple] = []
    real = getattr(owner, name)
    if inspect.iscoroutinefunction(real):

        async def noting(*args):
            calls.append(args)
            return await real(*args)
    else:

        def noting(*args):
            calls.append(args)
            return real(*args)

    monkeypatch.setattr(owner, name, noting)
    return calls


async def answers(url: str, view: Path, config: lm.MemoryConfig) -> list[list]:
    """Every query's answer from a reader that has just started (a new process)."""
    return (await answers_and_errors(url, view, config))[0]


async def answers_and_errors(
    url: str, view: Path, config: lm.MemoryConfig
) -> tuple[list[list], list[str]]:
    """`answers`, and why the reader could not use or save its snapshots."""
    async with lm.connect(
        url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
    ) as reader:
        memory = reader.memory("notes")
        opened = reader.managed_view()
        try:
            got = [[(i.id, i.score, i.signals) for i in await memory.recall(**q)] for q in QUERIES]
            return got, list(opened.snapshots.errors) if opened.snapshots else []
        finally:
            opened.close()


@contextlib.asynccontextmanager
async def folded(tmp_path: Path, entries: list[dict]) -> AsyncIterator[tuple]:
    """A connection to a new log at ``tmp_path/log`` holding ``entries`` in namespace
    notes, folded into the view at ``tmp_path/view``: (laser, memory)."""
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        await memory.remember_many(entries)
        await ViewFolder(laser.log, memory.topic, tmp_path / "view").run(until_caught_up=True)
        yield laser, memory


#: Readers that save a snapshot of every index they build, and readers that never do.
ALWAYS = lm.MemoryConfig(index_snapshots_from=1)
NEVER = lm.MemoryConfig(index_snapshots_from=None)


@contextlib.asynccontextmanager
async def writing(tmp_path: Path) -> AsyncIterator[tuple]:
    """A connection to a new log at ``tmp_path/log``, a handle on namespace notes, and a
    folder of its topic into the view at ``tmp_path/view``: (laser, memory, folder)."""
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        yield laser, memory, ViewFolder(laser.log, memory.topic, tmp_path / "view")


async def test_a_new_reader_starts_from_the_snapshot_and_catches_up(tmp_path: Path, built):
    view = tmp_path / "view"
    always, never = ALWAYS, NEVER
    async with writing(tmp_path) as (laser, memory, folder):
        items = await memory.remember_many(ENTRIES)
        await folder.run(until_caught_up=True)
        first = await answers(laser.log.url, view, always)
        assert any(name.endswith(".idx") for name in os.listdir(view / "search"))
        assert first == await answers(laser.log.url, view, never)

        # Later changes: a forget, feedback, new items; the snapshot predates them.
        await memory.forget(items[0])
        await memory.improve(items[5], 3.0)
        await memory.remember("keys rotate every week on node-7", conversation="c1")
        await folder.run(until_caught_up=True)
        built[0] = 0
        caught_up = await answers(laser.log.url, view, always)
        # Only the changed items were read, fewer than one full build reads: the rest
        # came from the snapshots.
        assert built[0] < 42
        built[0] = 0
        assert caught_up == await answers(laser.log.url, view, never)
        assert built[0] >= 2 * 42  # full builds read every item, for each read


async def test_a_snapshot_that_cannot_be_used_is_passed_over(tmp_path: Path):
    view = tmp_path / "view"
    always = lm.MemoryConfig(index_snapshots_from=1)
    entries = [{"body": f"signing keys for node-{i}", "conversation": "c1"} for i in range(10)]
    async with folded(tmp_path, entries) as (laser, memory):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        assert await answers(laser.log.url, view, always) == want
        search = view / "search"

        # Torn or foreign files: answered from the view, the reason kept.
        for name in os.listdir(search):
            path = search / name
            path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
        async with lm.connect(
            laser.log.url, stream="s", view=view, config=always, embedder=lm.WordHashEmbedder()
        ) as reader:
            # With the writer's embedder: its keyword recalls read the same (torn) index.
            opened = reader.managed_view()
            reader_memory = reader.memory("notes")
            got = [
                [(i.id, i.score, i.signals) for i in await reader_memory.recall(**q)]
                for q in QUERIES
                if q["strategy"] == "keyword"
            ]
            assert got == [
                w for w, q in zip(want, QUERIES, strict=True) if q["strategy"] == "keyword"
            ]
            assert any("snapshot" in reason for reason in opened.snapshots.errors)
            opened.close()

        # A rebuilt view (a new epoch) never reads the snapshots of the old one.
        assert await answers(laser.log.url, view, always) == want
        await memory.forget((await memory.recall(text="node-3", strategy="keyword"))[0].id)
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True, rebuild=True)
        # A rebuild removes the old view's snapshots (their lock files stay: a saver may
        # hold one, and a new file would let another save beside it).
        assert [name for name in os.listdir(search) if not name.endswith(".lock")] == []
        rebuilt = await answers(laser.log.url, view, always)
        assert rebuilt == await answers(
            laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None)
        )
        assert rebuilt != want


async def test_a_reader_that_caught_up_over_many_changes_saves_a_newer_snapshot(
    tmp_path: Path, built
):
    """From more than 1,000 changes behind (or a tenth of the index), a reader that
    caught up saves its index again, so the next process starts from there instead of
    reading every change since the first snapshot. Nothing tested it."""
    view = tmp_path / "view"
    async with writing(tmp_path) as (laser, memory, folder):
        await memory.remember_many(ENTRIES)
        await folder.run(until_caught_up=True)
        await answers(laser.log.url, view, ALWAYS)
        for first in range(0, 1_100, 100):
            await memory.remember_many(
                [f"rotate signing keys on host-{n}" for n in range(first, first + 100)]
            )
        await folder.run(until_caught_up=True)

        def behind() -> set[int | None]:
            with view_module.MemoryView.open(view, create=False) as opened:
                return {snapshot.behind for snapshot in opened.search_snapshots()}

        assert behind() == {1_100}
        caught_up = await answers(laser.log.url, view, ALWAYS)
        assert behind() == {0}
        built[0] = 0
        assert await answers(laser.log.url, view, ALWAYS) == caught_up
        assert built[0] == 0  # the newer snapshots needed no change read
        assert caught_up == await answers(laser.log.url, view, NEVER)


@pytest.mark.parametrize("field", ["format", "epoch", "read", "analyzer"])
async def test_a_snapshot_of_another_format_epoch_read_or_analyzer_is_rebuilt(
    tmp_path: Path, built, field: str
):
    """An older release's snapshot (another format), one of the view before a restore
    (another epoch), or one whose index names another read or another analyzer of terms
    than its file name says, is never loaded: the index is built from the view and saved
    over it. Nothing reached that check before."""
    view = tmp_path / "view"
    async with folded(tmp_path, ENTRIES) as (laser, _):
        want = await answers(laser.log.url, view, ALWAYS)
        changed = {
            "format": lambda saved: saved.format - 1,
            "epoch": lambda saved: os.urandom(8),
            "read": lambda saved: msgspec.msgpack.encode(("other", "notes", None, None, False)),
            "analyzer": lambda saved: "terms 0",
        }[field]
        for path in (view / "search").glob("*.idx"):
            saved = index_snapshots._decoder.decode(path.read_bytes())
            setattr(saved, field, changed(saved))
            # Checksummed anew, so that each check is what refuses it, not the checksum.
            saved.checksum = index_snapshots._checksum(saved)
            path.write_bytes(index_snapshots._encoder.encode(saved))
        if field == "format":
            # Listed by no one either (what rebuild remakes, what stats shows), and not
            # reported as unreadable after an upgrade.
            listing = IndexSnapshots(str(view))
            assert listing.reads() == [] and not listing.errors
        built[0] = 0
        got, errors = await answers_and_errors(laser.log.url, view, ALWAYS)
        assert got == want
        if field == "analyzer":
            assert any("its terms are of 'terms 0'" in reason for reason in errors)
        else:
            assert errors == []  # stale, not damaged: nothing to report
        assert built[0] >= 2 * len(ENTRIES)  # built from the view
        built[0] = 0
        assert await answers(laser.log.url, view, ALWAYS) == want
        assert built[0] == 0  # and saved over the stale one


async def test_readers_whose_terms_differ_keep_a_snapshot_each(tmp_path: Path, built, monkeypatch):
    """A snapshot holds its items' terms, and they depend on the stemmer's release and
    Python's Unicode tables: loaded under another PyStemmer, keyword recalls of words
    whose stems changed would find nothing. A reader whose terms differ builds its own
    and saves it beside the other, so readers of both kinds load theirs from then on
    (saved over each other, each would rebuild at every start)."""
    view = tmp_path / "view"
    async with folded(tmp_path, ENTRIES) as (laser, _):
        want = await answers(laser.log.url, view, ALWAYS)
        with monkeypatch.context() as patched:
            patched.setattr(index_snapshots, "ANALYZER", "terms 1; another stemmer")
            built[0] = 0
            assert await answers_and_errors(laser.log.url, view, ALWAYS) == (want, [])
            assert built[0] >= 2 * len(ENTRIES)  # built from the view, not loaded
            built[0] = 0
            assert await answers(laser.log.url, view, ALWAYS) == want
            assert built[0] == 0  # its own, saved
        built[0] = 0
        assert await answers_and_errors(laser.log.url, view, ALWAYS) == (want, [])
        assert built[0] == 0  # the first kind's is still there


async def test_the_reader_that_saves_a_snapshot_serves_from_it_and_keeps_no_build(
    tmp_path: Path, monkeypatch
):
    """The reader that built and saved an index drops the build before loading the
    snapshot back (what the build left alive held its heap's pages: twice the memory of a
    reader that starts from the snapshot): its answers are the same, the words its build
    put in the stem cache are gone, and a snapshot that cannot be read back is built
    again, never left out."""
    from folders.index_snapshots import IndexSnapshots
    from laser_memory import terms

    view = tmp_path / "view"
    always = lm.MemoryConfig(index_snapshots_from=1)
    async with folded(tmp_path, ENTRIES[:40]) as (laser, _):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        terms.forget_stems()
        assert await answers(laser.log.url, view, always) == want
        # Only the queries' words are left: the bodies' were the build's.
        assert "monthly" not in terms._STEMS and "rotate" not in terms._STEMS
        assert "signing" in terms._STEMS

        for name in os.listdir(view / "search"):
            os.remove(view / "search" / name)
        monkeypatch.setattr(IndexSnapshots, "load", lambda self, slot, epoch: None)
        assert await answers(laser.log.url, view, always) == want


def test_index_snapshots_from_is_checked():
    with pytest.raises(lm.ConfigError, match="index_snapshots_from"):
        lm.MemoryConfig(index_snapshots_from=0)


async def test_vector_clusters_made_by_one_reader_are_saved_for_the_next(
    tmp_path: Path, monkeypatch
):
    """Making vector clusters moves every entry of an index; the reader that made them
    saves a new snapshot, so the next reader starts from the clusters instead of
    making them again, and both answer as readers that never saved anything."""
    view = tmp_path / "view"
    clustered = lm.ApproximateSearch(from_vectors=20, probe_share=0.5)
    always = lm.MemoryConfig(index_snapshots_from=1, approximate=clustered)
    never = lm.MemoryConfig(index_snapshots_from=None, approximate=clustered)
    query = {"text": "rotate keys node-7", "strategy": "semantic", "limit": 5}

    async def semantic(url: str, config: lm.MemoryConfig) -> tuple[list, bool]:
        async with lm.connect(
            url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
        ) as reader:
            found = await reader.memory("notes").recall(**query)
            opened = reader.managed_view()
            [(index, *_)] = [
                entry for slot, entry in opened._indexes.items() if slot[3] is not None
            ]
            made = index._clusters is not None
            opened.close()
            return [(i.id, i.score) for i in found], made

    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        await memory.remember_many(
            [f"rotate the keys of node-{i} in region {i % 5}" for i in range(60)]
        )
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        first, made = await semantic(laser.log.url, always)
        assert made
        made_again = calls_of(monkeypatch, SearchIndex, "_cluster")
        second, made = await semantic(laser.log.url, always)
        assert made and not made_again  # restored with its clusters
        assert first == second == (await semantic(laser.log.url, never))[0]


async def test_prepare_search_makes_and_saves_the_vector_clusters(tmp_path: Path, monkeypatch):
    """With approximate search on, `prepare_search` makes the clusters a semantic recall
    would and saves them: the next reader's first semantic recall makes none."""
    view = tmp_path / "view"
    clustered = lm.ApproximateSearch(from_vectors=20, probe_share=0.5)
    config = lm.MemoryConfig(index_snapshots_from=1, approximate=clustered)
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"rotate the keys of node-{i}" for i in range(60)])
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        url = laser.log.url
    async with lm.connect(
        url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
    ) as operator:
        assert (await operator.memory("notes").prepare_search()).snapshot is not None
        # Asked again with nothing changed, it saves nothing more: the saved clusters
        # are no longer news.
        saves = calls_of(monkeypatch, IndexSnapshots, "save")
        assert (await operator.memory("notes").prepare_search()).snapshot is not None
        assert saves == []
    made = calls_of(monkeypatch, SearchIndex, "_cluster")
    async with lm.connect(
        url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
    ) as reader:
        found = await reader.memory("notes").recall(
            text="rotate keys node-7", strategy="semantic", limit=3
        )
    assert found and not made


async def test_keyword_and_hybrid_recalls_of_a_handle_share_one_search_index(tmp_path: Path):
    """A handle with an embedder reads keyword recalls from the index its hybrid and
    semantic recalls use (one index a namespace in a reader, not two), ranking as a
    handle without an embedder does."""
    view = tmp_path / "view"
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder()
    ) as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"rotate the keys of node-{i}" for i in range(80)])
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    query = {"text": "keys node-7", "limit": 5}
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", view=view, embedder=lm.WordHashEmbedder()
    ) as reader:
        with_embedder = reader.memory("notes")
        keyword = await with_embedder.recall(strategy="keyword", **query)
        await with_embedder.recall(strategy="hybrid", **query)
        await with_embedder.recall(strategy="semantic", **query)
        opened = reader.managed_view()
        assert len(opened._indexes) == 1
        opened.close()
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", view=view) as plain:
        without = await plain.memory("notes").recall(strategy="keyword", **query)
        plain.managed_view().close()
    assert [(i.id, i.score, i.signals) for i in keyword] == [
        (i.id, i.score, i.signals) for i in without
    ]
    assert keyword


async def test_a_large_read_has_a_child_process_build_its_index(tmp_path: Path, built):
    """A read over many items with no snapshot yet has a child process build and save
    its index (a build's freed pages stay with the process that built it), and loads it:
    this process reads no item to build it, and answers as a reader that built it
    itself. A read of a conversation with fewer items is built here."""
    view = tmp_path / "view"
    apart = lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=20)
    async with folded(tmp_path, ENTRIES) as (laser, _):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        assert built[0] > 0
        built[0] = 0
        got, errors = await answers_and_errors(laser.log.url, view, apart)
        assert got == want and errors == []
        # Conversation c1's read (14 items) was built here, from the namespace's 41
        # items; the namespace's read (41) by the child.
        assert built[0] == 41


async def test_vector_clusters_are_made_by_the_child_that_builds_the_index(
    tmp_path: Path, monkeypatch
):
    """The child makes the vector clusters the reader's semantic recalls would make, so
    the reader loads them with the index and never makes them itself."""
    view = tmp_path / "view"
    clustered = lm.ApproximateSearch(from_vectors=20, probe_share=0.5)
    apart = lm.MemoryConfig(
        index_snapshots_from=1, index_build_apart_from=30, approximate=clustered
    )
    never = lm.MemoryConfig(index_snapshots_from=None, approximate=clustered)
    query = {"text": "rotate keys node-7", "strategy": "semantic", "limit": 5}
    entries = [f"rotate the keys of node-{i} in region {i % 5}" for i in range(60)]
    async with folded(tmp_path, entries) as (laser, _):
        async with lm.connect(
            laser.log.url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=never
        ) as reader:
            want = [(i.id, i.score) for i in await reader.memory("notes").recall(**query)]
            reader.managed_view().close()
        made = []
        monkeypatch.setattr(SearchIndex, "_cluster", lambda self: made.append(self))
        async with lm.connect(
            laser.log.url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=apart
        ) as reader:
            got = [(i.id, i.score) for i in await reader.memory("notes").recall(**query)]
            opened = reader.managed_view()
            [(index, *_)] = opened._indexes.values()
            assert index._clusters is not None and made == []
            opened.close()
        assert got == want


async def test_a_child_that_fails_leaves_the_build_to_the_reader(
    tmp_path: Path, built, monkeypatch
):
    """A child that fails (here its first line exits with a message) leaves the build
    to the reader, which answers the same and keeps the child's reason. Where no
    snapshot could be saved (the snapshot folder is a file) no child is started."""
    import folders.index_build as index_build

    view = tmp_path / "view"
    apart = lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=5)
    entries = [{"body": f"signing keys for node-{i}", "conversation": "c1"} for i in range(10)]

    async with folded(tmp_path, entries) as (laser, _):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        monkeypatch.setattr(index_build, "_BOOT", "import sys; sys.exit('no room to build')")
        children = calls_of(monkeypatch, view_module, "build_apart_async")
        children_here = calls_of(monkeypatch, view_module, "build_apart")
        built[0] = 0
        got, errors = await answers_and_errors(laser.log.url, view, apart)
        assert got == want
        assert built[0] > 0
        failed = [e for e in errors if "the process that built the search index failed" in e]
        # One child a read (the namespace's and c1's), never a second for the same read.
        assert len(failed) == 2
        assert len(children) + len(children_here) == 2
        assert all("(1): no room to build" in e for e in failed)

        started = []

        async def start_async(request):
            started.append(request)

        monkeypatch.setattr(view_module, "build_apart", started.append)
        monkeypatch.setattr(view_module, "build_apart_async", start_async)
        for name in os.listdir(view / "search"):
            os.remove(view / "search" / name)
        os.rmdir(view / "search")
        (view / "search").write_bytes(b"not a folder")
        got, errors = await answers_and_errors(laser.log.url, view, apart)
        assert got == want and started == []
        assert any("not saved" in e for e in errors)


async def test_a_child_that_fails_a_views_own_recall_is_not_started_again(
    tmp_path: Path, monkeypatch
):
    """`MemoryView.recall` called from no event loop (a thread of a server) starts the
    child itself: when it fails, the reader builds, keeps the reason once, and starts no
    child again for that read."""
    import folders.index_build as index_build

    entries = [{"body": f"signing keys for node-{i}", "conversation": "c1"} for i in range(10)]
    async with folded(tmp_path, entries) as (_, memory):
        namespace = memory.namespace
    monkeypatch.setattr(index_build, "_BOOT", "import sys; sys.exit('no room to build')")
    started = calls_of(monkeypatch, view_module, "build_apart")
    where = ItemFilter()
    with MemoryView.open(tmp_path / "view", snapshots_from=1, build_apart_from=5) as view:
        for _ in range(2):
            found = view.recall(namespace, where, strategy="keyword", text="keys node-3")
            assert found[0].text == "signing keys for node-3"
        assert len(started) == 1
        failed = [e for e in view.snapshots.errors if "(1): no room to build" in e]
        assert len(failed) == 1


def test_only_a_python_is_started_to_build_an_index(monkeypatch):
    """A frozen application, or an embedding server whose executable is not Python,
    builds in its own process: starting ``sys.executable`` would start the application."""
    from folders.index_build import can_build_apart

    assert can_build_apart()
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert not can_build_apart()
    monkeypatch.delattr(sys, "frozen")
    monkeypatch.setattr(sys, "executable", "/bin/sh")
    assert not can_build_apart()
    monkeypatch.setattr(sys, "executable", "")
    assert not can_build_apart()


def test_index_build_apart_from_is_checked():
    for wrong in (0, -1, True, 1.5, "100"):
        with pytest.raises(lm.ConfigError, match="index_build_apart_from"):
            lm.MemoryConfig(index_build_apart_from=wrong)
    assert lm.MemoryConfig(index_build_apart_from=None).index_build_apart_from is None


async def test_the_event_loop_runs_on_while_a_child_builds_the_index(tmp_path: Path):
    """A recall whose index a child process builds waits for the child without blocking
    the event loop; concurrent recalls of the same read wait for one child."""
    view = tmp_path / "view"
    apart = lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=5)
    entries = [f"rotate the signing keys of node-{i}" for i in range(20)]
    async with folded(tmp_path, entries) as (laser, _):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        started = []
        real = view_module.build_apart_async

        async def counted(request):
            started.append(request)
            return await real(request)

        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.create_task(tick())
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(view_module, "build_apart_async", counted)
                got, errors = await answers_and_errors(laser.log.url, view, apart)
                # A fresh reader: three recalls of one read at once.
                async with lm.connect(
                    laser.log.url,
                    stream="s",
                    view=view,
                    embedder=lm.WordHashEmbedder(),
                    config=lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=5),
                ) as reader:
                    for name in os.listdir(view / "search"):
                        os.remove(view / "search" / name)
                    memory = reader.memory("notes")
                    together = await asyncio.gather(
                        *(memory.recall(text="signing keys", strategy="keyword") for _ in range(3))
                    )
                    reader.managed_view().close()
        finally:
            ticker.cancel()
        assert got == want and errors == []
        # The child took an interpreter's start at least; the loop ticked meanwhile.
        assert ticks >= 5
        assert len(started) == 2  # one for the first reader, one for the three recalls
        assert together[0] and together[0] == together[1] == together[2]


async def test_a_child_that_cannot_start_leaves_the_build_to_the_reader(
    tmp_path: Path, monkeypatch
):
    """No Python to start (an executable gone since the reader started): the reader
    builds the index itself, answers as ever, and keeps why no child built it."""
    import folders.index_build as index_build

    view = tmp_path / "view"
    apart = lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=5)
    entries = [{"body": f"signing keys for node-{i}", "conversation": "c1"} for i in range(10)]
    async with folded(tmp_path, entries) as (laser, _):
        want = await answers(laser.log.url, view, lm.MemoryConfig(index_snapshots_from=None))
        monkeypatch.setattr(index_build, "_command", lambda: [str(tmp_path / "no-python")])
        got, errors = await answers_and_errors(laser.log.url, view, apart)
    assert got == want
    # One a read that would start a child (the namespace's and c1's, as above).
    unstarted = [e for e in errors if "could not start a process to build the search index" in e]
    assert len(unstarted) == 2, errors


async def test_a_cancelled_recall_stops_the_child_building_its_index(tmp_path: Path, monkeypatch):
    """Cancelling a recall that waits for a child process kills the child (here one that
    would sleep for a minute) and waits for it: no process is left behind."""
    import folders.index_build as index_build

    view = tmp_path / "view"
    apart = lm.MemoryConfig(index_snapshots_from=1, index_build_apart_from=5)
    entries = [f"rotate the signing keys of node-{i}" for i in range(20)]
    async with folded(tmp_path, entries) as (laser, _):
        monkeypatch.setattr(index_build, "_BOOT", "import time; time.sleep(60)")
        children = []
        started = asyncio.Event()
        real = asyncio.create_subprocess_exec

        async def recorded(*args, **kwargs):
            children.append(await real(*args, **kwargs))
            started.set()
            return children[-1]

        monkeypatch.setattr(index_build.asyncio, "create_subprocess_exec", recorded)
        async with lm.connect(
            laser.log.url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=apart
        ) as reader:
            recall = asyncio.create_task(reader.memory("notes").recall(text="signing keys"))
            await started.wait()
            recall.cancel()
            with pytest.raises(asyncio.CancelledError):
                await recall
            assert children[0].returncode == -signal.SIGKILL  # killed, not slept out, and reaped
            reader.managed_view().close()


async def test_a_snapshot_has_room_for_at_most_a_quarter_more_than_its_items(tmp_path: Path):
    # An index grows by doubling, so it may hold as many spare rows as items; its
    # snapshot keeps at most a quarter more (room for a reader's later puts), whatever
    # other tenants hold. A reader that loads it and then takes in more new items than
    # that room answers as a full build does.
    view = tmp_path / "view"
    always, never = ALWAYS, NEVER
    async with writing(tmp_path) as (laser, memory, folder):
        await memory.remember_many(
            [{"body": f"rotate signing keys on node-{i}", "conversation": "c1"} for i in range(300)]
            + [{"body": f"keys of c2, {i}", "conversation": "c2"} for i in range(200)]
            + [{"body": f"other tenant's keys {i}", "tenant": "b"} for i in range(700)]
        )
        await folder.run(until_caught_up=True)
        first = await answers(laser.log.url, view, always)
        opened = view_module.MemoryView.open(view)
        try:
            with opened._read() as txn:
                epoch = opened._changes(txn)[1]
            # The reads of the queries: every conversation of tenant "", and c1's.
            label = lm.WordHashEmbedder().label
            [everything, c1] = [
                opened.snapshots.load(("", memory.namespace, conversation, label, False), epoch)
                for conversation in (None, "c1")
            ]
        finally:
            opened.close()
        assert everything is not None and c1 is not None
        assert len(everything[0]) == 500
        assert everything[0].snapshot()[1]["_time"].shape[0] <= 500 + 500 // 4
        assert len(c1[0]) == 300
        assert c1[0].snapshot()[1]["_time"].shape[0] == 300 + 300 // 4  # built: 512
        assert first == await answers(laser.log.url, view, never)

        await memory.remember_many(
            [{"body": f"keys rotate weekly on node-{i}", "conversation": "c2"} for i in range(80)]
        )
        await folder.run(until_caught_up=True)
        assert await answers(laser.log.url, view, always) == await answers(
            laser.log.url, view, never
        )


def _small_index(words: str) -> SearchIndex:
    index = SearchIndex(None)
    for n in range(40):
        item = lm.MemoryItem(
            id=lm.MemoryId(n.to_bytes(16, "big")),
            kind=lm.MemoryKind.FACT,
            body=f"{words} {n}".encode(),
            scope=lm.MemoryScope(),
            lifetime="session",
            append_time_ms=n,
            source=Source("", "t", 0, n, "", None),
        )
        index.put(item.id.bytes, item)
    return index


READ = ("", "stream:s/notes", None, None, False)


def test_processes_saving_one_read_at_once_leave_a_snapshot_that_loads(tmp_path, monkeypatch):
    # A save removes the read's older array files once its index names its own. Another
    # process saving the same read in the middle of a save used to remove the first's
    # array file, whose index then named a file no longer there (seen with six readers
    # starting at once): now the second waits for the first's lock.
    first = IndexSnapshots(str(tmp_path), keep_from=1)
    second = IndexSnapshots(str(tmp_path), keep_from=1)  # another process's
    real_write = IndexSnapshots._write
    others: list[threading.Thread] = []

    def interleaved(self, name, write):
        real_write(self, name, write)
        if self is first and name.endswith(".arrays") and not others:
            others.append(
                threading.Thread(target=second.save, args=(READ, b"e", 2, _small_index("beta")))
            )
            others[0].start()
            others[0].join(timeout=0.5)  # it waits for this save's lock

    monkeypatch.setattr(IndexSnapshots, "_write", interleaved)
    assert first.save(READ, b"e", 1, _small_index("alpha"))
    others[0].join()
    loaded = IndexSnapshots(str(tmp_path)).load(READ, b"e")
    assert loaded is not None and loaded[1] == 2, first.errors
    arrays = [name for name in os.listdir(tmp_path / "search") if name.endswith(".arrays")]
    assert len(arrays) == 1


@pytest.mark.parametrize("replaced", [1, 2])
def test_a_snapshot_replaced_while_it_is_loaded_is_read_again_once(tmp_path, monkeypatch, replaced):
    """Another process may save the read's snapshot between a load's reading of the
    index file and its mapping of the arrays that file names (a save removes the older
    array file): the load reads the new index file again. Replaced again meanwhile, it
    is passed over, saying why, and the reader builds its index."""
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    other = IndexSnapshots(str(tmp_path), keep_from=1)  # another process's
    assert other.save(READ, b"e", 1, _small_index("alpha"))
    real_file = IndexSnapshots._file
    seq = iter(range(2, 2 + replaced))

    def then_replaced(self, read, epoch):
        found = real_file(self, read, epoch)
        following = next(seq, None)
        if self is snapshots and following is not None:
            assert other.save(READ, b"e", following, _small_index("beta"))
        return found

    monkeypatch.setattr(IndexSnapshots, "_file", then_replaced)
    loaded = snapshots.load(READ, b"e")
    if replaced == 1:
        assert loaded is not None and loaded[1] == 2 and not snapshots.errors
        assert len(loaded[0]) == 40
    else:
        assert loaded is None
        assert len(snapshots.errors) == 1 and "unusable" in snapshots.errors[0]


@pytest.mark.parametrize("preadv", [True, False], ids=["preadv", "no-preadv"])
@pytest.mark.parametrize("threads", [1, 3])
def test_an_array_file_is_checked_chunk_by_chunk_on_threads(tmp_path, monkeypatch, threads, preadv):
    # Small chunks and reads, so that a file of a few KB spans many of each: one byte
    # changed in any chunk (the first, a middle one, the last, the last one's last byte)
    # is found, on one thread or several, and so is a file cut short or grown. Without
    # os.preadv (macOS's Python has none) it reads with os.pread.
    if not preadv:
        monkeypatch.setattr(index_snapshots, "_PREADV", None)
    monkeypatch.setattr(index_snapshots, "_CHECK_CHUNK", 1024)
    monkeypatch.setattr(index_snapshots, "_CHECK_READ", 300)
    monkeypatch.setattr(index_snapshots, "_CHECK_THREADS", threads)
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    [arrays] = (tmp_path / "search").glob("*.arrays")
    pristine = arrays.read_bytes()
    saved = snapshots._file(READ, b"e")
    assert len(saved.chunks) == -(-len(pristine) // 1024) > 3
    assert snapshots.load(READ, b"e")[1] == 1
    for at in (0, 1500, len(pristine) // 2, len(pristine) - 1):
        damaged = bytearray(pristine)
        damaged[at] ^= 0x10
        arrays.write_bytes(bytes(damaged))
        assert snapshots.load(READ, b"e") is None, at
        assert "checksum does not match" in snapshots.errors[-1]
    for changed in (pristine[:-1], pristine + b"\0"):
        arrays.write_bytes(changed)
        assert snapshots.load(READ, b"e") is None
    arrays.write_bytes(pristine)
    assert snapshots.load(READ, b"e")[1] == 1


def test_a_reader_whose_array_file_was_replaced_reads_the_index_again(tmp_path, monkeypatch):
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    stale = snapshots._file(READ, b"e")
    assert snapshots.save(READ, b"e", 2, _small_index("beta"))  # removes the first's arrays
    real_file, calls = IndexSnapshots._file, []

    def first_stale(self, read, epoch):
        calls.append(read)
        return stale if len(calls) == 1 else real_file(self, read, epoch)

    monkeypatch.setattr(IndexSnapshots, "_file", first_stale)
    loaded = snapshots.load(READ, b"e")
    assert loaded is not None and loaded[1] == 2
    assert len(calls) == 2


def test_a_save_gives_up_on_a_lock_another_process_keeps(tmp_path, monkeypatch):
    monkeypatch.setattr(index_snapshots, "SAVE_WAIT_S", 0.2)
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    [lock] = [name for name in os.listdir(tmp_path / "search") if name.endswith(".lock")]
    holder = os.open(tmp_path / "search" / lock, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert not snapshots.save(READ, b"e", 2, _small_index("beta"))
        assert "another process held its lock" in snapshots.errors[-1]
        assert snapshots.load(READ, b"e")[1] == 1  # the one before stands
    finally:
        os.close(holder)
    assert snapshots.save(READ, b"e", 2, _small_index("beta"))
    assert snapshots.load(READ, b"e")[1] == 2
    assert lock in os.listdir(tmp_path / "search")
    assert snapshots.remove_all() == []
    assert os.listdir(tmp_path / "search") == [lock]  # a saver may hold it


def test_a_save_removes_what_saves_killed_midway_left_of_its_read(tmp_path):
    # A reader killed while it saved (out of memory, a deploy) left its temporary files,
    # as large as the snapshot, and no later save removed them. The next save of that
    # read holds its lock, so no other is writing them: it removes them, and leaves
    # other reads' files alone.
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    search = tmp_path / "search"
    [index_file] = [name for name in os.listdir(search) if name.endswith(".idx")]
    name = index_file.removesuffix(".idx")
    other = "f" * 32 if name != "f" * 32 else "e" * 32
    left = [
        f"{name}-{'1' * 16}.arrays.4242.139.tmp",
        f"{name}.idx.4242.139.tmp",
    ]
    others = [f"{other}-{'2' * 16}.arrays.4242.139.tmp", f"{other}.idx.4242.139.tmp"]
    for planted in left + others:
        (search / planted).write_bytes(b"half a snapshot")
    assert snapshots.save(READ, b"e", 2, _small_index("beta"))
    remaining = set(os.listdir(search))
    assert not remaining & set(left)
    assert set(others) <= remaining
    assert snapshots.load(READ, b"e")[1] == 2


def test_a_save_removes_the_snapshot_releases_before_format_5_made_of_its_read(tmp_path):
    """Those named a read's snapshot without the terms' analyzer: after an upgrade no
    reader lists or loads them, and they stayed for ever (a couple of GB at a million
    items). A save of the read removes them; other reads' stay. Until then a listing
    passes over them without calling them unreadable (their fields are not this
    format's: every listing said so after the upgrade)."""
    import hashlib

    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    search = tmp_path / "search"
    search.mkdir()
    legacy = hashlib.blake2b(msgspec.msgpack.encode(READ), digest_size=16).hexdigest()
    other = hashlib.blake2b(msgspec.msgpack.encode(("t", "other")), digest_size=16).hexdigest()
    planted = {
        f"{legacy}.idx": True,
        f"{legacy}-{'1' * 16}.arrays": True,
        f"{other}.idx": False,
        f"{other}-{'2' * 16}.arrays": False,
    }
    for name in planted:
        (search / name).write_bytes(b"a snapshot of format 4")
    # Format 4's index file: format, read, epoch, seq, arrays, layout, index, chunks, CRC.
    (search / f"{legacy}.idx").write_bytes(
        msgspec.msgpack.encode(
            [
                4,
                msgspec.msgpack.encode(READ),
                b"e",
                3,
                f"{legacy}-{'1' * 16}.arrays",
                [],
                b"",
                [],
                0,
            ]
        )
    )
    del planted[f"{other}.idx"]
    (search / f"{other}.idx").unlink()
    assert snapshots.saved() == [] and list(snapshots.errors) == []
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    remaining = set(os.listdir(search))
    assert {name for name, gone in planted.items() if not gone} <= remaining
    assert not {name for name, gone in planted.items() if gone} & remaining
    assert snapshots.load(READ, b"e")[1] == 1


def test_removing_the_snapshots_removes_only_files_snapshots_make(tmp_path):
    # A view made in a folder of the user's that had a `search/` of its own: a rebuild
    # removed every file in it, the user's with ours.
    search = tmp_path / "search"
    search.mkdir()
    theirs = ["notes.txt", "0123456789abcdef0123456789abcdef", "report.idx", "x-1.arrays"]
    for name in theirs:
        (search / name).write_text("the user's own")
    snapshots = IndexSnapshots(str(tmp_path), keep_from=1)
    assert snapshots.save(READ, b"e", 1, _small_index("alpha"))
    assert snapshots.save(READ, b"e", 2, _small_index("beta"))  # its older arrays go
    ours = set(os.listdir(search)) - set(theirs)
    assert {name.rsplit(".", 1)[1] for name in ours} == {"idx", "arrays", "lock"}
    assert len(ours) == 3
    assert snapshots.remove_all() == []
    locks = [name for name in ours if name.endswith(".lock")]  # a saver may hold one
    assert sorted(os.listdir(search)) == sorted([*theirs, *locks])
    assert all((search / name).read_text() == "the user's own" for name in theirs)


async def test_prepare_search_saves_the_index_the_next_reader_loads(tmp_path: Path, built):
    """`prepare_search` makes and saves the index of the reads it is given, so that a
    later reading process's first text recalls of them build nothing and answer as a
    reader without snapshots does; each tenant's index holds that tenant's items only."""
    view = tmp_path / "view"
    # The whole namespace (41 items) is built by a child process, as at 100,000 items
    # by default; a conversation (14) in this one.
    config = lm.MemoryConfig(index_snapshots_from=10, index_build_apart_from=20)
    async with folded(tmp_path, ENTRIES) as (laser, memory):
        other = laser.memory("notes", tenant="acme")
        await other.remember_many([{"body": f"acme keys {i}"} for i in range(12)])
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        url = laser.log.url
    async with lm.connect(
        url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
    ) as operator:
        notes = operator.memory("notes")
        built[0] = 0
        whole = await notes.prepare_search()
        assert built[0] == 0  # the child read the items
        one = await notes.prepare_search(conversation="c1")
        acme = await operator.memory("notes", tenant="acme").prepare_search()
        # A conversation's build passes over its whole namespace (41), acme's holds 12.
        assert built[0] == 41 + 12
    assert (whole.entries, one.entries, acme.entries) == (41, 14, 12)
    assert whole.embedder == lm.WordHashEmbedder().label and whole.tenant == ""
    assert (one.conversation, acme.tenant) == ("c1", "acme")
    saved = set(os.listdir(view / "search"))
    for prepared in (whole, one, acme):
        assert prepared.reason is None and prepared.changes == 41 + 12
        assert prepared.snapshot is not None
        assert Path(prepared.snapshot).parent == view / "search"
        assert Path(prepared.snapshot).name in saved
    reads = [q for q in QUERIES if q.get("conversation") in (None, "c1")]

    async def answered(config: lm.MemoryConfig) -> list:
        async with lm.connect(
            url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
        ) as reader:
            memory, acme_memory = reader.memory("notes"), reader.memory("notes", tenant="acme")
            got = [[(i.id, i.score) for i in await memory.recall(**q)] for q in reads]
            got.append([i.text for i in await acme_memory.recall(text="keys", limit=50)])
            reader.managed_view().close()
            return got

    built[0] = 0
    loaded = await answered(config)
    assert built[0] == 0  # every read started from its snapshot
    assert loaded == await answered(NEVER)
    assert built[0] >= 41 + 14 + 12
    assert sorted(loaded[-1]) == sorted(f"acme keys {i}" for i in range(12))


async def test_prepare_search_says_why_it_saved_no_snapshot(tmp_path: Path):
    view = tmp_path / "view"
    async with folded(tmp_path, [{"body": f"fact {i}"} for i in range(30)]) as (laser, _):
        url = laser.log.url
    async with lm.connect(url, stream="s", view=view) as small:  # the default threshold
        prepared = await small.memory("notes").prepare_search()
    assert prepared.entries == 30 and prepared.snapshot is None and prepared.embedder is None
    assert "fewer than index_snapshots_from (1000)" in prepared.reason
    async with lm.connect(url, stream="s", view=view, config=NEVER) as off:
        prepared = await off.memory("notes").prepare_search()
        assert off.managed_view().search_snapshots() == []  # none listed, nothing raised
    assert prepared.snapshot is None and "snapshots are off" in prepared.reason
    assert not (view / "search").exists()
    # A view no folder has written yet holds no index.
    empty = tmp_path / "empty"
    view_module.MemoryView.open(empty).close()
    async with lm.connect(url, stream="s", view=empty, config=ALWAYS) as early:
        prepared = await early.memory("notes").prepare_search()
    assert prepared.entries == 0 and prepared.snapshot is None
    assert "folded nothing" in prepared.reason


async def _thirty_each_for_two_tenants(tmp_path: Path) -> tuple[str, Path]:
    """A log whose namespace holds 30 items of tenant '' and 30 of acme, and its view
    folded: (the log's URL, the view's path)."""
    view = tmp_path / "view"
    async with folded(tmp_path, [{"body": f"fact {i}"} for i in range(30)]) as (laser, memory):
        await laser.memory("notes", tenant="acme").remember_many(
            [{"body": f"acme fact {i}"} for i in range(30)]
        )
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        return laser.log.url, view


async def test_a_prepare_after_a_single_failure_reports_none_of_it(tmp_path: Path):
    """`prepare_search` reports the failures since the last one it saw: after a lone
    earlier failure (the first in the reader's list: a torn snapshot passed over), a
    prepare that saves reports none. A search of that list that stopped one short of its
    start passed the test below, whose failed read leaves two."""
    url, view = await _thirty_each_for_two_tenants(tmp_path)
    config = lm.MemoryConfig(index_snapshots_from=30, index_build_apart_from=None)
    async with lm.connect(url, stream="s", view=view, config=config) as first:
        saved = Path((await first.memory("notes").prepare_search()).snapshot)
    # The next reader passes it over, once, and saves anew.
    await asyncio.to_thread(saved.write_bytes, b"torn")
    async with lm.connect(url, stream="s", view=view, config=config) as reader:
        torn = await reader.memory("notes").prepare_search()
        assert "unreadable" in torn.reason and torn.reason.count("snapshot") == 1, torn.reason
        assert len(reader.managed_view().snapshots.errors) == 1
        acme = await reader.memory("notes", tenant="acme").prepare_search()
        assert acme.snapshot is not None and acme.reason is None, acme.reason


async def test_prepare_search_saves_from_the_threshold_and_reports_only_its_own_failure(
    tmp_path: Path, monkeypatch
):
    """An index of exactly `index_snapshots_from` entries is saved. A read whose snapshot
    cannot be written says why; the next read that saves reports no failure of the one
    before it, and asked again once the way is clear it saves."""
    url, view = await _thirty_each_for_two_tenants(tmp_path)
    config = lm.MemoryConfig(index_snapshots_from=30, index_build_apart_from=None)
    async with lm.connect(url, stream="s", view=view, config=config) as first:
        prepared = await first.memory("notes").prepare_search()
    assert prepared.entries == 30 and prepared.reason is None
    name = Path(prepared.snapshot).name
    # Where that snapshot goes, a folder now stands: it can be neither loaded nor saved.
    for other in os.listdir(view / "search"):
        if not other.endswith(".lock"):
            os.remove(view / "search" / other)
    (view / "search" / name).mkdir()
    (view / "search" / name / "kept").write_bytes(b"")
    async with lm.connect(url, stream="s", view=view, config=config) as second:
        failed = await second.memory("notes").prepare_search()
        acme = await second.memory("notes", tenant="acme").prepare_search()
        assert failed.snapshot is None, failed.reason
        # Both of its failures: the load passed over, then the save.
        assert f"snapshot {name} unreadable" in failed.reason, failed.reason
        assert f"snapshot {name[:-4]} not saved" in failed.reason
        assert acme.entries == 30 and acme.snapshot is not None and acme.reason is None
        # Once what stood in the way is gone, asking again saves it: the failed save
        # is not taken for a saved snapshot while this process keeps the index.
        shutil.rmtree(view / "search" / name)
        again = await second.memory("notes").prepare_search()
        assert again.snapshot == prepared.snapshot and again.reason is None, again.reason
    async with lm.connect(url, stream="s", view=view, config=config) as third:
        built = calls_of(monkeypatch, view_module.MemoryView, "_built")
        loaded = await third.memory("notes").prepare_search()
    assert loaded.snapshot == prepared.snapshot and built == []


async def test_a_read_tries_a_failed_save_again_only_after_as_many_changes_as_a_saved_one(
    tmp_path: Path, monkeypatch
):
    """Each try writes the whole index: a reader whose save failed (a full disk) does not
    try again at every read of a view past 1,000 changes, only once as many changes have
    come as a saved snapshot waits for; `prepare_search` tries at once."""
    view = tmp_path / "view"
    async with folded(tmp_path, [{"body": f"fact {i}"} for i in range(1_100)]) as (laser, _):
        url = laser.log.url
    config = lm.MemoryConfig(index_snapshots_from=30, index_build_apart_from=None)
    async with lm.connect(url, stream="s", view=view, config=config) as first:
        name = Path((await first.memory("notes").prepare_search()).snapshot).name
    for other in os.listdir(view / "search"):
        if not other.endswith(".lock"):
            os.remove(view / "search" / other)
    (view / "search" / name).mkdir()  # where the snapshot goes: it cannot be saved
    saves = calls_of(monkeypatch, IndexSnapshots, "save")
    async with lm.connect(url, stream="s", view=view, config=config) as reader:
        memory = reader.memory("notes")
        for _ in range(3):
            assert await memory.recall(text="fact 7", strategy="keyword", limit=1)
        assert len(saves) == 1  # the build's
        assert (await memory.prepare_search()).snapshot is None
        assert len(saves) == 2


async def test_reads_noted_as_unsaved_are_bounded_as_the_kept_indexes_are(tmp_path: Path):
    """A serving reader of many conversations keeps at most `MAX_SEARCH_INDEXES` indexes;
    the reads it notes as built and not saved (here: too small to save) go with them."""
    from folders.state import MAX_SEARCH_INDEXES

    view = tmp_path / "view"
    conversations = [f"c{i}" for i in range(MAX_SEARCH_INDEXES + 5)]
    entries = [{"body": f"fact in {c}", "conversation": c} for c in conversations]
    async with folded(tmp_path, entries) as (laser, _):
        url = laser.log.url
    async with lm.connect(url, stream="s", view=view) as reader:
        memory = reader.memory("notes")
        for c in conversations:
            [item] = await memory.recall(conversation=c, text="fact", strategy="keyword")
            assert item.conversation == c
        opened = reader.managed_view()
        assert len(opened._indexes) == MAX_SEARCH_INDEXES
        assert opened._unsaved and opened._unsaved <= set(opened._indexes)


async def test_prepare_search_refuses_bad_input_and_handles_without_a_view(tmp_path: Path):
    async with folded(tmp_path, [{"body": "one fact"}]) as (laser, memory):
        with pytest.raises(lm.NoView, match="view=PATH"):
            await memory.prepare_search()
        url = laser.log.url
    async with lm.connect(url, stream="s", view=tmp_path / "view", config=ALWAYS) as reader:
        notes = reader.memory("notes")
        for kwargs, error in (
            ({"include_superseded": "yes"}, lm.InvalidInput),
            ({"tenant": "a\tb"}, lm.InvalidName),
            ({"conversation": ""}, lm.InvalidName),
            ({"conversation": 5}, lm.InvalidInput),
        ):
            with pytest.raises(error):
                await notes.prepare_search(**kwargs)
        with pytest.raises(lm.InvalidInput, match="scoped to conversation"):
            await notes.scoped("c1").prepare_search(conversation="c2")
    # Nothing was saved by the refused calls.
    assert not (tmp_path / "view" / "search").exists()


def test_a_rebuild_makes_again_the_snapshots_its_readers_had(tmp_path: Path, built):
    """``laser-memory rebuild`` empties the view, which removes its search snapshots (they
    are of the old view); it then makes each again, so the readers' first text recalls
    after it build nothing, and answer as readers without snapshots do."""
    from click.testing import CliRunner

    from laser_memory.cli import main

    view = tmp_path / "view"
    url = f"local://{tmp_path / 'log'}"
    embedder = lm.WordHashEmbedder()

    async def setup() -> None:
        async with lm.connect(url, stream="s", embedder=embedder) as laser:
            await laser.memory("notes").remember_many(
                [
                    {"body": f"rotate keys on node-{i}", "conversation": f"c{i % 3}"}
                    for i in range(1100)
                ]
            )
            await laser.memory("notes", tenant="acme").remember_many(
                [f"acme keys {i}" for i in range(1050)]
            )
            await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        # Readers save the snapshots of what they search: the handle's embedder's read,
        # and another tenant's keyword read (no embedder).
        async with lm.connect(url, stream="s", view=view, embedder=embedder) as reader:
            await reader.memory("notes").recall(text="keys", strategy="hybrid")
        async with lm.connect(url, stream="s", view=view) as reader:
            await reader.memory("notes", tenant="acme").recall(text="keys", strategy="keyword")

    async def answers(config: lm.MemoryConfig) -> list:
        async with lm.connect(url, stream="s", view=view, embedder=embedder, config=config) as r:
            got = [
                [(i.id, i.score) for i in await r.memory("notes").recall(text=q, strategy=s)]
                for q in ("keys node-7", "rotate")
                for s in ("hybrid", "semantic", "keyword")
            ]
        async with lm.connect(url, stream="s", view=view, config=config) as r:
            acme = r.memory("notes", tenant="acme")
            got.append([(i.text, i.score) for i in await acme.recall(text="keys 7")])
        return got

    asyncio.run(setup())
    saved = IndexSnapshots(str(view)).reads()
    assert sorted(saved) == [
        ("", "stream:s/notes", None, embedder.label, False),
        ("acme", "stream:s/notes", None, None, False),
    ]
    result = CliRunner().invoke(
        main, ["rebuild", "--url", url, "--stream", "s", "--view", str(view)]
    )
    assert result.exit_code == 0, result.output
    assert "making 2 search index snapshot(s)" in result.stderr  # progress, as the rest
    assert "stream:s/notes (tenant 'acme'): 1050 entries, saved" in result.stderr
    assert sorted(IndexSnapshots(str(view)).reads()) == sorted(saved)
    built[0] = 0
    after = asyncio.run(answers(lm.MemoryConfig()))
    assert built[0] == 0  # every read loaded the snapshot the rebuild made
    assert after == asyncio.run(answers(NEVER))
    assert all(text.startswith("acme keys") for text, _ in after[-1])
    # `stats` lists each read's snapshot, by what sets the read apart, as up to date.
    stats = CliRunner().invoke(main, ["stats", "--view", str(view)])
    assert stats.exit_code == 0, stats.output
    assert "\nsearch:     2 index snapshot(s)\n" in stats.output, stats.output
    for read in ("(tenant 'acme')", f"(embedder '{embedder.label}')"):
        assert f"  stream:s/notes {read}: at change " in stats.output, stats.output
    assert stats.output.count(", 0 change(s) behind") == 2


async def test_listing_snapshots_passes_over_files_planted_among_them(tmp_path: Path):
    """`IndexSnapshots.reads` (what rebuild remakes, what stats lists) reads every
    ``*.idx`` in the folder, not one named from a read: a link, a device, a pipe, a
    directory or garbage there is passed over with its reason, never followed, read
    without end or waited on."""
    view = tmp_path / "view"
    async with folded(tmp_path, [{"body": f"fact {i}"} for i in range(20)]) as (laser, _):
        await answers(laser.log.url, view, ALWAYS)
    snapshots = IndexSnapshots(str(view))
    real = snapshots.reads()
    assert real  # the reader saved its reads
    search = view / "search"
    one = next(name for name in os.listdir(search) if name.endswith(".idx"))
    (search / "garbage.idx").write_bytes(b"\x01\x02")
    (search / "-listed-first.idx").write_bytes(b"")  # before any snapshot's hex name
    (search / "folder.idx").mkdir()
    os.mkfifo(search / "pipe.idx")
    os.symlink("/dev/zero", search / "zero.idx")
    os.symlink(search / one, search / "copy.idx")
    # A snapshot's bytes under a name that is not its read's.
    (search / "renamed.idx").write_bytes((search / one).read_bytes())
    listing = IndexSnapshots(str(view))
    assert sorted(listing.reads()) == sorted(real)
    reasons = "\n".join(listing.errors)
    for name in ("garbage", "-listed-first", "folder", "pipe", "zero", "copy"):
        assert f"snapshot {name}.idx unreadable" in reasons, reasons


async def two_reads_saved(tmp_path: Path) -> tuple[str, Path, list[list]]:
    """A view whose reader saved the snapshots of two reads (the namespace's and
    conversation c1's): the log's url, the view, and the reader's answers."""
    view = tmp_path / "view"
    entries = [{"body": f"fact {i} about keys", "conversation": f"c{i % 2}"} for i in range(20)]
    async with folded(tmp_path, entries) as (laser, _):
        url = laser.log.url
        want = await answers(url, view, ALWAYS)
    return url, view, want


async def test_a_reader_passes_over_a_snapshot_planted_as_a_link_or_a_pipe(tmp_path: Path):
    """A reader opens ``<read>.idx`` and the array file it names as regular files only:
    one replaced by a link (to ``/dev/zero``, read without end before) or by a pipe
    (waited on before) is passed over with its reason, and the reader builds."""
    url, view, want = await two_reads_saved(tmp_path)
    search = view / "search"
    indexes = sorted(name for name in os.listdir(search) if name.endswith(".idx"))
    arrays = sorted(name for name in os.listdir(search) if name.endswith(".arrays"))
    assert len(indexes) == len(arrays) == 2  # the namespace's read and c1's
    # One read's index file becomes a link, the other's array file a pipe.
    os.unlink(search / indexes[0])
    os.symlink("/dev/zero", search / indexes[0])
    other = next(name for name in arrays if not name.startswith(indexes[0][: -len(".idx")]))
    os.unlink(search / other)
    os.mkfifo(search / other)
    # Readers that load snapshots but save none, so the planted files stay.
    got, errors = await answers_and_errors(url, view, lm.MemoryConfig(index_snapshots_from=10**9))
    assert got == want
    reasons = "\n".join(errors)
    assert f"snapshot {indexes[0]} unreadable" in reasons, reasons
    assert f"{other} is not a regular file" in reasons, reasons


def _replanned(saved, name: str, case: str, other_arrays: str):
    """``saved`` (the index file ``name``.idx) with its array file's name or layout
    changed as ``case`` says."""
    layout = list(saved.layout)
    first = layout[0]
    if case == "arrays outside":  # <search>/<name>-/../../<arrays>: <view>/<arrays>
        outside = os.sep.join((f"{name}-", "..", "..", saved.arrays))
        return msgspec.structs.replace(saved, arrays=outside)
    if case == "arrays of another read":
        return msgspec.structs.replace(saved, arrays=other_arrays)
    layout[0] = {
        "object dtype": lambda: msgspec.structs.replace(first, dtype="|O"),
        "negative shape": lambda: msgspec.structs.replace(first, shape=(-1, *first.shape[1:])),
        "negative offset": lambda: msgspec.structs.replace(first, offset=-64),
    }[case]()
    return msgspec.structs.replace(saved, layout=layout)


@pytest.mark.parametrize(
    "case",
    [
        "arrays outside",
        "arrays of another read",
        "object dtype",
        "negative shape",
        "negative offset",
    ],
)
async def test_a_snapshot_naming_arrays_not_its_own_or_an_unknown_layout_is_passed_over(
    tmp_path: Path, case: str
):
    """An index file is trusted for nothing its checksum cannot vouch for (anyone who
    writes the folder can checksum what they write): it may name only its own read's
    array file in the folder, and arrays of the types and places a save writes."""
    url, view, want = await two_reads_saved(tmp_path)
    search = view / "search"
    indexes = sorted(name for name in os.listdir(search) if name.endswith(".idx"))
    arrays = sorted(name for name in os.listdir(search) if name.endswith(".arrays"))
    for index_name in indexes:
        saved = index_snapshots._decoder.decode((search / index_name).read_bytes())
        other = next(name for name in arrays if name != saved.arrays)
        # Where an array file outside the folder would be found, the read's own.
        (search / f"{index_name[:-4]}-").mkdir()
        shutil.copy(search / saved.arrays, view / saved.arrays)
        changed = _replanned(saved, index_name[:-4], case, other)
        changed = msgspec.structs.replace(changed, checksum=index_snapshots._checksum(changed))
        (search / index_name).write_bytes(index_snapshots._encoder.encode(changed))
    got, errors = await answers_and_errors(url, view, lm.MemoryConfig(index_snapshots_from=10**9))
    assert got == want
    reason = "is not this read's" if case.startswith("arrays") else "has an unknown layout"
    assert sum(reason in error for error in errors) >= len(indexes), errors


def test_snapshots_kept_from_none_or_more_entries_than_an_index_has_save_nothing(tmp_path):
    index = _small_index("alpha")  # 40 entries
    for keep_from in (None, 41):
        assert not IndexSnapshots(str(tmp_path), keep_from=keep_from).save(READ, b"e", 1, index)
        assert not (tmp_path / "search").exists()
    assert IndexSnapshots(str(tmp_path), keep_from=40).save(READ, b"e", 1, index)
    assert IndexSnapshots(str(tmp_path)).load(READ, b"e")[1] == 1


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists open files by /proc")
def test_a_planted_file_refused_as_no_regular_file_is_closed(tmp_path: Path):
    """A pipe or a folder where a snapshot's file should be is refused without leaving
    its descriptor open: a reader passing over one at every recall would run out."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    before = sorted(os.listdir("/proc/self/fd"))
    for name in ("pipe", "folder") * 5:
        with pytest.raises(OSError, match="is not a regular file"):
            index_snapshots._open_regular(str(tmp_path / name))
    assert sorted(os.listdir("/proc/self/fd")) == before


async def test_a_snapshot_damaged_in_place_is_passed_over(tmp_path: Path):
    """A snapshot whose bytes were changed in place (the disk's bit rot, a stray write)
    looks whole: nothing of its files' shape tells. Each array damaged in turn, and the
    index file's change number, the reader passes the snapshot over and answers as a
    full build would. Before the checksum a damaged vector or weight changed answers, a
    damaged posting generation failed the recall with a raw IndexError, and a change
    number moved ahead skipped the changes made after the snapshot."""
    view = tmp_path / "view"
    entries = [
        {"body": f"signing keys for node-{i} rotate {'weekly' if i % 3 else 'daily'}",
         "conversation": f"c{i % 2}"}
        for i in range(30)
    ]  # fmt: skip
    async with folded(tmp_path, entries) as (laser, memory):
        url = laser.log.url
        await answers(url, view, ALWAYS)
        # Changes after the snapshots, which a reader catches up on from the view.
        await memory.forget((await memory.recall(text="node-4", strategy="keyword"))[0].id)
        await memory.remember("signing keys for node-99 rotate hourly", conversation="c1")
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        want = await answers(url, view, NEVER)
    search = view / "search"
    pristine = {name: (search / name).read_bytes() for name in os.listdir(search)}
    snapshots = IndexSnapshots(str(view))
    # The namespace's read with vectors (the keyword-only reads have none).
    [read] = [r for r in snapshots.reads() if r[2] is None and r[3] is not None]
    index_name = os.path.basename(snapshots.file_of(read))
    saved = index_snapshots._decoder.decode(pristine[index_name])

    def damaged(name: str, data: bytes) -> None:
        for other, pristine_data in pristine.items():
            (search / other).write_bytes(pristine_data)
        (search / name).write_bytes(data)

    assert {"ids", "_generation", "_weight", "posting_generations"} <= {
        at.name for at in saved.layout
    }
    cases = []
    for at in saved.layout:
        if 0 in at.shape:
            continue
        data = bytearray(pristine[saved.arrays])
        data[at.offset : at.offset + 8] = bytes(255 - b for b in data[at.offset : at.offset + 8])
        cases.append((at.name, saved.arrays, bytes(data)))
    ahead = msgspec.structs.replace(saved, seq=saved.seq + 2)
    cases.append(("seq", index_name, index_snapshots._encoder.encode(ahead)))
    # Readers that load snapshots but save none, so the damaged files stay.
    reader = lm.MemoryConfig(index_snapshots_from=10**9)
    for what, name, data in cases:
        damaged(name, data)
        got, errors = await answers_and_errors(url, view, reader)
        assert got == want, what
        assert any("checksum does not match" in error for error in errors), (what, errors)


def test_a_save_never_writes_through_a_link_planted_at_its_temporary_name(tmp_path: Path):
    """A save writes each file under a temporary name first: a link planted there (to a
    file elsewhere) is removed and the file made anew, its target left as it was."""
    snapshots = IndexSnapshots(str(tmp_path / "view"))
    os.makedirs(snapshots.path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    final = os.path.join(snapshots.path, "x.idx")
    temporary = f"{final}.{os.getpid()}.{threading.get_ident()}.tmp"
    os.symlink(victim, temporary)
    snapshots._write("x.idx", lambda file: file.write(b"snapshot"))
    assert victim.read_text() == "precious"
    assert Path(final).read_bytes() == b"snapshot" and not os.path.lexists(temporary)


def test_a_write_that_fails_leaves_neither_its_file_nor_its_temporary_one(tmp_path: Path):
    """A save that fails half-way (a full disk) leaves the folder as it was: no file of
    part of a snapshot, which would hold its space for ever, and nothing under the name."""
    snapshots = IndexSnapshots(str(tmp_path / "view"))
    os.makedirs(snapshots.path)

    def failing(file) -> None:
        file.write(b"part of a snapshot")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        snapshots._write("x.idx", failing)
    assert os.listdir(snapshots.path) == []


async def _answers_of(memory: lm.MemoryHandle) -> list[list]:
    return [[(i.id, i.score, i.signals) for i in await memory.recall(**q)] for q in QUERIES]


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple]:
    """`writing` with `ENTRIES` folded, and a reader of the view that keeps its search
    indexes between reads, as a server does, saving no snapshot: (laser, memory, folder,
    ids of the entries, the reader's connection)."""
    async with writing(tmp_path) as (laser, memory, folder):
        items = await memory.remember_many(ENTRIES)
        await folder.run(until_caught_up=True)
        async with lm.connect(
            laser.log.url,
            stream="s",
            view=tmp_path / "view",
            embedder=lm.WordHashEmbedder(),
            config=NEVER,
        ) as reader:
            yield laser, memory, folder, items, reader


async def test_a_reader_that_kept_its_index_across_a_rebuild_answers_from_the_new_view(
    tmp_path: Path,
):
    """A serving reader (an HTTP server) keeps its search index while `rebuild` empties
    and folds the view again in place: its next recalls answer from the rebuilt view (a
    new epoch), never from the old view's index, even where the rebuilt view has made
    fewer changes than the old one had."""
    async with serving(tmp_path) as (laser, memory, folder, items, reader):
        kept = reader.memory("notes")
        before = await _answers_of(kept)
        # Each forget folds in a transaction of its own: the old view's changes
        # outnumber the rebuild's, which folds all in one.
        for mid in items[:10]:
            await memory.forget(mid)
            await folder.run(until_caught_up=True)
        await folder.run(until_caught_up=True, rebuild=True)
        after = await _answers_of(kept)
        assert after == await answers(laser.log.url, tmp_path / "view", NEVER)
        assert after != before


async def test_a_readers_index_takes_in_no_other_tenants_changes(tmp_path: Path):
    """The changes a reader catches up from name every tenant's items: its index takes
    its own tenant's only, so another tenant's better matches never take the places of
    its own answers."""
    view = tmp_path / "view"
    async with serving(tmp_path) as (laser, _, folder, _, reader):
        await _answers_of(reader.memory("notes"))  # built before the other tenant writes
        # Tenant names as long as the reader's ("" against "b" would differ in
        # length): their items' keys are as long as the reader's.
        mine = laser.memory("notes", tenant="a")
        theirs = laser.memory("notes", tenant="b")
        await mine.remember_many(ENTRIES)
        await folder.run(until_caught_up=True)
        reading = reader.memory("notes", tenant="a")
        await _answers_of(reading)
        await theirs.remember_many(
            [{"body": f"signing keys node-7 noon lunch keys {i}"} for i in range(30)]
        )
        await folder.run(until_caught_up=True)
        got = await _answers_of(reading)
        async with lm.connect(
            laser.log.url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=NEVER
        ) as fresh:
            assert got == await _answers_of(fresh.memory("notes", tenant="a"))
        assert all(len(answer) > 0 for answer in got)


async def test_a_snapshot_ahead_of_a_restored_view_is_passed_over(tmp_path: Path):
    """A view restored from an older copy (same epoch, fewer changes) beside snapshots
    saved later: a reader must not start from a snapshot of changes the view no longer
    holds."""
    view = tmp_path / "view"
    async with writing(tmp_path) as (laser, memory, folder):
        items = await memory.remember_many(ENTRIES)
        await folder.run(until_caught_up=True)
        shutil.copy(view / "data.mdb", tmp_path / "older.mdb")
        await memory.forget(items[0])
        await memory.remember("keys rotate every week on node-7", conversation="c1")
        await folder.run(until_caught_up=True)
        await answers(laser.log.url, view, ALWAYS)  # saves snapshots of the newer view
        assert any(name.endswith(".idx") for name in os.listdir(view / "search"))
        shutil.copy(tmp_path / "older.mdb", view / "data.mdb")
        # Listed as of no view a reader would load it for, never as changes behind.
        with MemoryView.open(view, create=False) as opened:
            listed = opened.search_snapshots()
        assert listed and all(snapshot.behind is None for snapshot in listed), listed
        restored = await answers(laser.log.url, view, ALWAYS)
        assert restored == await answers(laser.log.url, view, NEVER)
        assert items[0] in {mid for answer in restored for mid, _, _ in answer}


async def test_a_serving_readers_index_takes_in_each_change_folded_alone(tmp_path: Path):
    """A serving reader keeps its index and catches it up from the view's changes at each
    read: a transaction that changed one item (a single remember or forget, folded as it
    came) must be taken in like a larger one, by keyword, hybrid and semantic recall."""
    async with serving(tmp_path) as (_, memory, folder, _, reader):
        reading = reader.memory("notes")
        await _answers_of(reading)  # its index, built now and kept
        for word in ("quartz", "basalt", "granite"):
            mid = await memory.remember(f"the {word} shipment arrived")
            await folder.run(until_caught_up=True)
            for strategy in ("keyword", "hybrid", "semantic"):
                found = await reading.recall(text=word, strategy=strategy, limit=1)
                assert [i.id for i in found] == [mid], (word, strategy)
            await memory.forget(mid)
            await folder.run(until_caught_up=True)
            assert mid not in [
                i.id for i in await reading.recall(text=word, strategy="keyword", limit=5)
            ], word


async def test_a_read_at_an_earlier_moment_than_a_snapshot_does_not_load_it(tmp_path: Path):
    """Readers whose clocks differ (two hosts, or a clock set back): a snapshot saved by a
    reader past an item's expiry has left the item out for good, so a reader at a moment
    before the expiry builds its own index and finds the item."""
    view, start = tmp_path / "view", 1_700_000_000_000
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", clock=SteppedClock(start)
    ) as laser:
        memory = laser.memory("notes")
        await memory.remember_many(ENTRIES)
        mid = await memory.remember("the quartz shipment arrived", ttl=60)
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        url = laser.log.url

    async def found(now_ms: int) -> list[lm.MemoryId]:
        async with lm.connect(
            url, stream="s", view=view, config=ALWAYS, clock=SteppedClock(now_ms)
        ) as reader:
            recalled = await reader.memory("notes").recall(text="quartz", strategy="keyword")
            reader.managed_view().close()
            return [i.id for i in recalled]

    assert await found(start + 120_000) == []  # past the expiry; saves its snapshot
    assert any(name.endswith(".idx") for name in os.listdir(view / "search"))
    assert await found(start + 1_000) == [mid]
    assert await found(start + 120_000) == []
