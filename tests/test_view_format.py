"""The managed view's layout on disk is what its format number says.

A view is refused when its ``format`` is not `VIEW_FORMAT` (rebuild it), so a change of
what the view stores must bump the number; a change that did not would have every
reader of an existing view misread it, or fail on it as damaged. Nothing else notices:
every other test folds its own view with the code under test. So
``tests/fixtures/view-v<VIEW_FORMAT>/fixture.msgpack.gz`` keeps a view as a folder of the
current format wrote it (every key and value of its tables), the embedded log it folded,
and what reads of it answered when it was written. The tests restore both and check
that today's code reads the same answers from it, and that a folder resumes it to
exactly the view a rebuild makes.

After an intended change of layout: bump `VIEW_FORMAT`, delete the old fixture (views
of other formats are rebuilt, never read) and write the new one with
``python tests/test_view_format.py``. Never write it again to make a failure pass
without bumping the number: a failure here is what every existing view would meet. (A
deliberate change of what a read answers, its ordering say, is the one other reason.)

The fixture keeps the search index snapshots its reads saved too
(`folders.index_snapshots`, of their own format number): after a change of their
layout, bump that number and write the fixture again the same way.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import pytest

import folders.index_snapshots as index_snapshots
import folders.view as view_module
import laser_memory as lm
from folders.service import ViewFolder
from folders.view import VIEW_FORMAT, MemoryView
from laser_memory.clock import SteppedClock
from laser_memory.embedding import WordHashEmbedder
from laser_memory.log import OutgoingRecord
from laser_memory.records import Forget, encode_record
from laser_memory.scope import MemoryScope

FIXTURE = Path(__file__).parent / "fixtures" / f"view-v{VIEW_FORMAT}" / "fixture.msgpack.gz"
START_MS = 1_796_000_000_000
#: The moment reads are made at: before the expiring items expire.
READ_MS = START_MS + 3_600_000
NAMESPACE = "notes"
#: Readers that save every search index they build, and readers that never do.
SNAPSHOTS = lm.MemoryConfig(index_snapshots_from=1)
NO_SNAPSHOTS = lm.MemoryConfig(index_snapshots_from=None)


class OtherModel(WordHashEmbedder):
    """A second model, for the vectors `reembed` writes as records of their own."""

    label = "test/word-hash-other"


async def write_the_records(laser: lm.Laser, clock: SteppedClock) -> None:
    """Records of every kind the view folds, in both tenants: remembers in and out of
    conversations with owners and vectors, feedback both ways, forgets, a replacement,
    expiring items (one with feedback), vectors of another model, named items set,
    patched, removed and set again, and a record no fold can read."""
    embedder = WordHashEmbedder()
    for tenant in ("", "acme"):
        memory = laser.memory(NAMESPACE, tenant=tenant, embedder=embedder)
        first = await memory.remember(
            "the reporter prefers email over phone calls",
            kind="entity",
            conversation="c-1",
            user="u-1",
            durable=True,
        )
        clock.step(7)
        second = await memory.remember(
            "node-7 runs the billing database", conversation="c-2", agent="planner"
        )
        clock.step(3)
        third = await memory.remember("the office moved to the third floor", kind="procedure")
        clock.step(11)
        await memory.remember_many(
            [
                {"body": f"ticket {n} was closed by the support team", "conversation": "c-1"}
                for n in range(5)
            ]
        )
        await memory.improve(first, 2.5)
        await memory.improve(second, -1.0, conversation="c-2")
        await memory.forget(third)
        clock.step(5)
        await memory.remember(
            "node-7 runs the billing and the audit databases",
            conversation="c-2",
            agent="planner",
            supersedes=second,
        )
        lasting = await memory.remember("the door code is 4471", ttl=86_400.0)
        await memory.improve(lasting, 1.0)
        await memory.remember("the visitor badge expires tonight", ttl=7_200.0)
        await memory.set("profile", {"name": "Ada", "langs": ["en", "fr"]})
        await memory.update("profile", {"langs": None, "tz": "Europe/Paris"})
        await memory.set("draft", "a plain text body")
        await memory.remove("draft")
        await memory.set("draft", "written again")
        clock.step(13)
        await memory.reembed(OtherModel())
        # A forget as releases before `seen` wrote it: the item keeps it by append time.
        old = await memory.remember("a fact an older release forgot", conversation="c-3")
        clock.step(2)
        wire = encode_record(
            Forget(ns=memory.namespace, scope=MemoryScope(tenant=tenant), target=old.bytes)
        )
        await laser.log.append(
            memory.topic, OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)
        )
    bad = OutgoingRecord(b"\xc1 no record", key=b"c/c-1")
    await laser.log.append(laser.memory(NAMESPACE).topic, bad)


def _item(item: lm.MemoryItem) -> dict[str, Any]:
    """What a read shows of an item, but its score (ranking may change; the layout is
    what is checked here), with its vector as a digest."""
    out = item.to_json()
    del out["score"], out["signals"]
    out["embedder"] = item.embedder
    out["embedding"] = _digest(item.embedding)
    return out


def _digest(vector: bytes | None) -> str | None:
    return hashlib.sha256(vector).hexdigest() if vector else None


async def searches(laser: lm.Laser, tenant: str) -> dict[str, list[lm.MemoryItem]]:
    """Searches of a tenant's items by text and by vectors of both models, each through
    a search index a reader builds or loads from a snapshot."""
    out = {}
    for label, embedder in (("own", WordHashEmbedder()), ("other", OtherModel())):
        memory = laser.memory(NAMESPACE, tenant=tenant, embedder=embedder)
        for strategy in ("semantic", "keyword", "hybrid"):
            out[f"{strategy}/{label}"] = await memory.recall(
                text="which node runs the billing database", strategy=strategy, limit=100
            )
    return out


async def reads(laser: lm.Laser) -> dict[str, Any]:
    """Reads of every table of the view: its items through each index (newest first,
    feedback-ranked, by owner, expiring), vectors of both models, history (the audit
    table), named items and their versions, and the records set aside."""
    out: dict[str, Any] = {}
    for tenant in ("", "acme"):
        memory = laser.memory(NAMESPACE, tenant=tenant)
        for name, kwargs in {
            "recent": {"strategy": "recent"},
            "auto": {"strategy": "auto"},
            "c-1": {"strategy": "recent", "conversation": "c-1"},
            "planner": {"strategy": "recent", "agent": "planner"},
            "u-1": {"strategy": "recent", "user": "u-1"},
            "procedures": {"strategy": "recent", "kind": "procedure"},
            "superseded": {"strategy": "recent", "include_superseded": True},
        }.items():
            items = await memory.recall(limit=100, **kwargs)
            out[f"{tenant}/{name}"] = [_item(item) for item in items]
        for name, found in (await searches(laser, tenant)).items():
            # Sorted: which items a search finds is the view's; their order, ranking's.
            # Their other fields are the listings' above.
            out[f"{tenant}/{name}"] = sorted(
                (str(item.id), item.embedder, _digest(item.embedding)) for item in found
            )
        out[f"{tenant}/history"] = {
            row["id"]: [
                msgspec.to_builtins(entry)
                for entry in await memory.history(lm.MemoryId.parse(row["id"]))
            ]
            for row in out[f"{tenant}/superseded"]
        }
        out[f"{tenant}/named"] = msgspec.to_builtins(await memory.named())
        out[f"{tenant}/profile-v1"] = msgspec.to_builtins(await memory.fetch("profile", version=1))
        out[f"{tenant}/draft-history"] = [
            msgspec.to_builtins(entry) for entry in await memory.history("draft")
        ]
    stats = laser.managed_view().stats()
    out["stats"] = msgspec.to_builtins(
        (stats.watermark, stats.items, stats.named_items, stats.set_aside_records)
    )
    return out


def as_json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists, int keys as text)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def dump(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every key and value of every table of the LMDB environment at ``path``."""
    env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            names = [bytes(key) for key, _ in txn.cursor()]
            return {
                name.decode(): list(txn.cursor(db=env.open_db(name, txn=txn))) for name in names
            }
    finally:
        env.close()


def restore(tables: dict[str, list[tuple[bytes, bytes]]], path: Path) -> None:
    path.mkdir(parents=True)
    env = lmdb.open(str(path), max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            for name, entries in tables.items():
                db = env.open_db(name.encode(), txn=txn)
                for key, value in entries:
                    txn.put(key, value, db=db)
    finally:
        env.close()


async def write_the_fixture(path: Path) -> dict[str, Any]:
    clock = SteppedClock(START_MS)
    log, view = path / "log", path / "view"
    async with lm.connect(f"local://{log}", clock=clock) as laser:
        await write_the_records(laser, clock)
        await ViewFolder(laser.log, laser.memory(NAMESPACE).topic, view).run(until_caught_up=True)
    async with lm.connect(
        f"local://{log}", view=view, clock=SteppedClock(READ_MS), config=SNAPSHOTS
    ) as laser:
        expected = await reads(laser)
    return {
        "format": VIEW_FORMAT,
        "log": dump(log),
        "view": dump(view),
        "expected": expected,
        "snapshot format": index_snapshots._FORMAT,
        "analyzer": index_snapshots.ANALYZER,
        # The search indexes the reads saved (their lock files left out).
        "search": {
            path.name: path.read_bytes()
            for path in sorted((view / "search").iterdir())
            if not path.name.endswith(".lock")
        },
    }


def fixture() -> dict[str, Any]:
    if not FIXTURE.exists():
        pytest.fail(
            f"no view fixture of format {VIEW_FORMAT} (VIEW_FORMAT changed?): write one "
            "with 'python tests/test_view_format.py' (see this module's docstring)"
        )
    raw = msgspec.msgpack.decode(gzip.decompress(FIXTURE.read_bytes()))
    if raw["snapshot format"] != index_snapshots._FORMAT:
        pytest.fail(
            f"the view fixture's search snapshots are of format {raw['snapshot format']}, "
            f"and snapshots are now format {index_snapshots._FORMAT}: write the fixture "
            "again with 'python tests/test_view_format.py'"
        )
    for part in ("log", "view"):
        raw[part] = {
            name: [(bytes(k), bytes(v)) for k, v in entries] for name, entries in raw[part].items()
        }
    return raw


@pytest.fixture
def restored(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    written = fixture()
    assert written["format"] == VIEW_FORMAT
    restore(written["log"], tmp_path / "log")
    restore(written["view"], tmp_path / "view")
    (tmp_path / "view" / "search").mkdir()
    for name, data in written["search"].items():
        (tmp_path / "view" / "search" / name).write_bytes(data)
    return tmp_path / "log", tmp_path / "view", written["expected"]


async def test_a_view_of_the_current_format_reads_as_it_was_written(restored):
    log, view, expected = restored
    async with lm.connect(f"local://{log}", view=view, clock=SteppedClock(READ_MS)) as laser:
        assert as_json(await reads(laser)) == as_json(expected)
    # The fixture holds what it says: items, vectors of both models, feedback, forgets,
    # expiry and replacements, named versions, and a record set aside.
    assert [len(expected[f"acme/{name}"]) for name in ("recent", "superseded")] == [9, 10]
    assert {embedder for _, embedder, _ in expected["acme/semantic/other"]} == {OtherModel.label}
    assert [item["key"] for item in expected["acme/named"]] == ["draft", "profile"]
    assert len(expected["stats"][3]) == 1  # the record no fold can read


async def test_search_snapshots_of_the_current_format_load_and_answer_as_a_build(
    restored, monkeypatch
):
    """A snapshot is bytes laid out as its format says; one misread (two arrays of one
    type swapped, say) passes its CRC-32s and answers wrongly. Loaded, the fixture's
    snapshots give every search what an index built from the view gives, scores and
    all, and no item is read to build one."""
    log, view, _ = restored
    built = [0]
    real = view_module.index_entry

    def counting(*args: Any, **kwargs: Any) -> Any:
        built[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(view_module, "index_entry", counting)
    # Terms made with another Python's Unicode tables are rebuilt, as they should be
    # (test_index_snapshots checks that): this test is about the layout.
    monkeypatch.setattr(index_snapshots, "ANALYZER", fixture()["analyzer"])
    answers = {}
    for config in (SNAPSHOTS, NO_SNAPSHOTS):
        built[0] = 0
        async with lm.connect(
            f"local://{log}", view=view, clock=SteppedClock(READ_MS), config=config
        ) as laser:
            answers[config] = [
                [(item.id, item.score, item.signals) for item in found]
                for tenant in ("", "acme")
                for found in (await searches(laser, tenant)).values()
            ]
            if config is SNAPSHOTS:
                assert list(laser.managed_view().snapshots.errors) == []
                assert built[0] == 0  # every index came from its snapshot
    assert built[0] > 0  # and those of the reader that saves none were built
    assert answers[SNAPSHOTS] == answers[NO_SNAPSHOTS]
    assert all(answers[SNAPSHOTS])


async def test_a_folder_resumes_a_view_of_the_current_format(restored, tmp_path):
    """A folder of this release goes on from a view an earlier folder of the same format
    wrote, to exactly the view a rebuild of the whole log makes."""
    log, view, _ = restored
    async with lm.connect(f"local://{log}", clock=SteppedClock(READ_MS)) as laser:
        memory = laser.memory(NAMESPACE, tenant="acme")
        items = await memory.recall(folded=True, limit=100)
        await memory.improve(items[0].id, 3.0)
        await memory.forget(items[1].id)
        await memory.remember("a record folded onto the restored view", conversation="c-1")
        await memory.update("profile", {"name": "Ada L."})
        topic = laser.memory(NAMESPACE).topic
        await ViewFolder(laser.log, topic, view).run(until_caught_up=True)
        await ViewFolder(laser.log, topic, tmp_path / "rebuilt").run(until_caught_up=True)
    with (
        MemoryView.open(view, create=False) as resumed,
        MemoryView.open(tmp_path / "rebuilt", create=False) as rebuilt,
    ):
        assert resumed.dump() == rebuilt.dump()


if __name__ == "__main__":
    # Writes the fixture of the current format (see the module's docstring).
    with tempfile.TemporaryDirectory() as folder:
        written = asyncio.run(write_the_fixture(Path(folder)))
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_bytes(gzip.compress(msgspec.msgpack.encode(written), mtime=0))
    sys.stdout.write(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)\n")
