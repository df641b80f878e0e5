"""No record stops a fold: hostile records written straight to the log (past every check
the handle makes) are set aside with their position by every fold path — folded recall,
the managed view, ``as_of`` and replay — and the fold goes on. Over both logs."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import laser_memory as lm
from folders.replay import replay
from folders.service import ViewFolder
from folders.state import MAX_NAMED_BODY_BYTES
from folders.view import MemoryView
from laser_memory.log import OutgoingRecord
from laser_memory.records import (
    HEADER_NAMESPACE,
    HEADER_VERSION,
    Feedback,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
    encode_record,
)
from laser_memory.scope import MemoryScope

DEEP = b"[" * 5000 + b"]" * 5000


def _outgoing(record) -> OutgoingRecord:
    wire = encode_record(record)
    return OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)


async def test_every_fold_path_sets_hostile_records_aside_and_goes_on(
    laser: lm.Laser, tmp_path: Path
):
    memory = laser.memory("notes")
    ns, topic, log = memory.namespace, memory.topic, laser.log
    scope = MemoryScope(stream=laser.stream)
    first = await memory.remember("the first ordinary fact")
    target = first.bytes
    patch_size = 3 * MAX_NAMED_BODY_BYTES // 8  # the third patch outgrows the limit
    # (record, set aside?) in write order
    hostile = [
        (
            OutgoingRecord(
                b"\xff\x00 not msgpack", key=b"x", headers=((HEADER_NAMESPACE, ns.encode()),)
            ),
            True,
        ),
        (
            OutgoingRecord(
                encode_record(Feedback(ns=ns, scope=scope, target=target, weight=1.0)).value,
                key=b"x",
                headers=((HEADER_NAMESPACE, ns.encode()), (HEADER_VERSION, b"abc")),
            ),
            True,
        ),
        (_outgoing(Feedback(ns=ns, scope=scope, target=target, weight=float("nan"))), True),
        (_outgoing(Feedback(ns=ns, scope=scope, target=target, weight=1e300)), True),
        (
            _outgoing(
                Remember(
                    ns=ns,
                    scope=MemoryScope(conversation="a\x00b"),
                    id=lm.MemoryId.new().bytes,
                    kind=1,
                    body=b"x",
                )
            ),
            True,
        ),
        *(
            (
                _outgoing(
                    Remember(
                        ns=ns, scope=scope, id=lm.MemoryId.new().bytes, kind=1, body=b"v", **bad
                    )
                ),
                True,
            )
            for bad in (
                {"embedding": b"\x00\x00\x80", "embedder": "test/three"},  # not float32s
                {"embedding": b"\x00\x00\x80?", "embedder": "no slash"},
            )
        ),
        *(
            (_outgoing(NamedSet(ns=ns, scope=scope, key="vec", body=b"{}", **bad)), True)
            for bad in (
                {"vectors": b"\x00\x00\x80", "embedder": "test/three"},  # not float32s
                {"vectors": b"\x00\x00\x80?"},  # vectors without their model's label
                {"vectors": b"\x00\x00\x80?", "embedder": "no slash"},
                {"index": ("ok", "")},  # an empty path
                {"index": tuple(f"p{i}" for i in range(65))},  # too many paths
            )
        ),
        (_outgoing(NamedRemove(ns=ns, scope=scope, key="vec", if_version=0)), True),
        (_outgoing(NamedSet(ns=ns, scope=scope, key="deep", body=DEEP)), False),
        (_outgoing(NamedPatch(ns=ns, scope=scope, key="deep", patch=b'{"a":1}')), False),
        (
            _outgoing(
                NamedPatch(ns=ns, scope=scope, key="k", patch=b'{"a":' * 5000 + b"1" + b"}" * 5000)
            ),
            True,
        ),
        (_outgoing(NamedPatch(ns=ns, scope=scope, key="k", patch=b"not json")), True),
        (_outgoing(NamedPatch(ns=ns, scope=scope, key="k", patch=b"[1]")), True),
        (_outgoing(NamedPatch(ns=ns, scope=scope, key="k", patch=b'{"a": NaN}')), True),
        (
            _outgoing(
                NamedPatch(
                    ns=ns, scope=scope, key="big", patch=b'{"a":"' + b"x" * patch_size + b'"}'
                )
            ),
            False,
        ),
        (
            _outgoing(
                NamedPatch(
                    ns=ns, scope=scope, key="big", patch=b'{"b":"' + b"x" * patch_size + b'"}'
                )
            ),
            False,
        ),
        (
            _outgoing(
                NamedPatch(
                    ns=ns, scope=scope, key="big", patch=b'{"c":"' + b"x" * patch_size + b'"}'
                )
            ),
            True,
        ),
    ]
    receipts = [await log.append(topic, record) for record, _ in hostile]
    aside = {(r.partition, r.offset) for r, (_, bad) in zip(receipts, hostile, strict=True) if bad}
    # Accepted by the handle, and hostile to a view whose keys hold user data: one word
    # longer than LMDB's key limit, a 255-byte tenant in a 255-byte namespace.
    word = "w" * 600
    long_word = await memory.remember(f"a body with one enormous word {word} in it")
    prefix = f"stream:{laser.stream}/"
    wide_ns = laser.memory(prefix + "n" * (255 - len(prefix)))
    assert len(wide_ns.namespace.encode()) == 255
    wide = await wide_ns.remember("in a wide namespace", tenant="t" * 255)
    last = await memory.remember("the last ordinary fact")

    # Folded recall, by a fresh handle.
    folded = laser.memory("notes")
    items = await folded.recall(strategy="recent", folded=True)
    assert [i.id for i in items] == [last, long_word, first]
    assert items[2].weight == 0.0  # the hostile feedback never applied
    assert {(a.position.partition, a.position.offset) for a in folded.set_aside} == aside
    assert [i.id for i in await folded.recall(text=word, strategy="keyword")] == [long_word]
    assert (await folded.fetch_folded("deep")).json() == {"a": 1}
    assert set((await folded.fetch_folded("big")).json()) == {"a", "b"}
    assert await folded.fetch_folded("k") is None

    # The managed view: the folder folds everything, sets the same records aside.
    view_path = tmp_path / "view"
    await ViewFolder(log, topic, view_path).run(until_caught_up=True)
    with MemoryView.open(view_path) as view:
        stats = view.stats()
        ends = await log.end_offsets(topic)
        assert stats.watermark == {p: offset for p, offset in ends.items() if offset}
        assert {(a.position.partition, a.position.offset) for a in stats.set_aside_records} == aside
    async with lm.connect(log.url, stream=laser.stream, view=view_path) as reader:
        managed = reader.memory("notes")
        assert await managed.recall(strategy="recent") == items
        assert [i.id for i in await managed.recall(text=word, strategy="keyword")] == [long_word]
        assert (await managed.fetch("big")).body == (await folded.fetch_folded("big")).body
        assert [i.id for i in await reader.memory(wide_ns.namespace).recall(tenant="t" * 255)] == [
            wide
        ]
    rebuilt = tmp_path / "rebuilt"
    await ViewFolder(log, topic, rebuilt).run(until_caught_up=True, rebuild=True)
    with MemoryView.open(view_path) as one, MemoryView.open(rebuilt) as other:
        assert one.dump() == other.dump()

    # as_of and replay.
    snapshot = await memory.as_of(await log.end_offsets(topic))
    assert snapshot.recall(strategy="recent") == items
    every = await replay(log, topic, namespace=ns)
    assert {
        (r.log_record.partition, r.log_record.offset) for r in every if r.error is not None
    } == {p for p in aside if p not in _set_aside_by_fold_only(hostile, receipts)}
    assert all(r.record is not None for r in await replay(log, topic, namespace=ns, tenant=""))


def _set_aside_by_fold_only(hostile, receipts) -> set[tuple[int, int]]:
    """Patches are refused when folded (they need the item's state), not when decoded:
    replay, which only decodes, lists them as records."""
    return {
        (r.partition, r.offset)
        for r, (record, bad) in zip(receipts, hostile, strict=True)
        if bad and b"named.patch" in dict(record.headers).get("lm-op", b"")
    }


async def test_a_full_view_stops_the_folder_with_what_to_do(tmp_path: Path):
    from folders.service import FolderConfig

    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {i} " + "x" * 2000 for i in range(400)])
        small = FolderConfig(map_size=256 << 10)
        folder = ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view", small)
        with pytest.raises(lm.ViewFull, match="--map-size"):
            await folder.run(until_caught_up=True)
        # Restarted with a larger map, the folder resumes and finishes.
        big = FolderConfig(map_size=64 << 20)
        await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view", big).run(
            until_caught_up=True
        )
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", view=tmp_path / "view") as r:
        assert len(await r.memory("notes").recall(limit=1000)) == 400


async def test_a_view_in_another_format_is_refused_until_rebuilt(tmp_path: Path):
    from folders.view import VIEW_FORMAT

    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("a fact")
        view = tmp_path / "view"
        await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        with MemoryView.open(view) as opened:
            with opened._env.begin(write=True) as txn:
                txn.put(b"format", b"1", db=opened._dbs["meta"])
        with pytest.raises(lm.ViewMismatch, match=f"reads format {VIEW_FORMAT}; rebuild"):
            MemoryView.open(view)
        folder = ViewFolder(laser.log, laser.memory_topic_name, view)
        with pytest.raises(lm.ViewMismatch):
            await folder.run(until_caught_up=True)
        await folder.run(until_caught_up=True, rebuild=True)
        with MemoryView.open(view) as opened:
            assert opened.stats().items == 1


async def test_the_folder_lock_never_follows_a_link(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    view = tmp_path / "view"
    view.mkdir()
    (view / "folder.lock").symlink_to(victim)
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("a fact")
        folder = ViewFolder(laser.log, laser.memory_topic_name, view)
        with pytest.raises(lm.ConfigError, match="regular file"):
            await folder.run(until_caught_up=True)
    assert victim.read_text() == "precious"


async def test_a_receipt_of_an_earlier_topic_generation_is_refused(laser: lm.Laser, tmp_path):
    memory = laser.memory("notes")
    old = await memory.remember("before the topic was recreated")
    info = await laser.log.describe_topic(memory.topic)
    assert old.receipt.generation == info.generation != ""
    await laser.log.delete_topic(memory.topic)
    await laser.log.create_topic(memory.topic, partitions=4)
    new = await memory.remember("after")
    assert new.receipt.generation not in ("", old.receipt.generation)
    view = tmp_path / "view"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as reader:
        managed = reader.memory("notes")
        assert [i.id for i in await managed.recall(after=new)] == [new]
        with pytest.raises(lm.ViewMismatch, match="generation"):
            await managed.recall(after=old, timeout=0.5)


def test_set_aside_reasons_survive_encoding():
    from folders.state import SetAside
    from laser_memory.log.port import Position

    aside = SetAside(Position("t", 0, 1), 5, "RecursionError: too deep")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(aside), type=SetAside) == aside
