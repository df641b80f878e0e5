"""Supersession: ``remember(body, supersedes=id)`` stores a corrected fact. The old item
leaves default recall (folded, managed, by text, over HTTP) for good, stays in history,
audit and ``as_of``, and ``history`` follows the chain both ways. Over both logs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

import laser_memory as lm
from folders.http import make_app
from folders.service import ViewFolder
from folders.state import ItemFilter
from folders.view import MemoryView
from laser_memory.log import OutgoingRecord
from laser_memory.records import Remember, Superseded, encode_record
from laser_memory.scope import MemoryScope


@contextlib.asynccontextmanager
async def viewed(laser: lm.Laser, tmp_path: Path) -> AsyncIterator[lm.Laser]:
    async with lm.connect(laser.log.url, stream=laser.stream, view=tmp_path / "view") as reader:
        yield reader


async def fold(laser: lm.Laser, tmp_path: Path) -> None:
    await ViewFolder(laser.log, laser.memory_topic_name, tmp_path / "view").run(
        until_caught_up=True
    )


async def texts(memory, **query) -> list[list[str]]:
    out = []
    for folded in (True, False):
        for strategy, text in (("recent", None), ("auto", None), ("keyword", "office")):
            items = await memory.recall(strategy=strategy, text=text, folded=folded, **query)
            out.append(sorted(i.text for i in items))
    return out


async def test_a_corrected_fact_replaces_the_old_one(laser: lm.Laser, tmp_path: Path):
    memory = laser.memory("notes")
    # Apart in time: history orders records of several partitions by append time.
    old = await memory.remember("the office is in Leeds", conversation="c1", agent="a1")
    await asyncio.sleep(0.003)
    await memory.improve(old, 3.0)
    await memory.remember("the office parking is free", conversation="c2")
    await asyncio.sleep(0.003)
    new = await memory.remember("the office is in York", conversation="c2", supersedes=old)
    await asyncio.sleep(0.003)
    newer = await memory.remember("the office is in Hull", supersedes=str(new))
    await fold(laser, tmp_path)
    async with viewed(laser, tmp_path) as reader:
        managed = reader.memory("notes")
        current = ["the office is in Hull", "the office parking is free"]
        assert all(t == current for t in await texts(managed))
        assert all(t == [] for t in await texts(managed, agent="a1"))
        # A view read with a filter of one's own leaves them out too unless it asks.
        with MemoryView.open(tmp_path / "view", create=False) as view:
            read = view.recall(managed.namespace, ItemFilter(), limit=10)
            assert sorted(i.text for i in read) == sorted(current)
            audit = view.recall(managed.namespace, ItemFilter(superseded=True), limit=10)
            assert len(audit) == 4
        # The old items stay for an audit's read, saying what replaced them.
        for folded in (True, False):
            everything = await managed.recall(include_superseded=True, folded=folded)
            by_text = {i.text: i for i in everything}
            assert len(everything) == 4
            assert by_text["the office is in Leeds"].superseded_by == new
            assert by_text["the office is in Leeds"].weight == 3.0
            assert by_text["the office is in York"].supersedes == old
            assert by_text["the office is in York"].superseded_by == newer
            assert by_text["the office is in Hull"].superseded_by is None
            assert by_text["the office is in Hull"].to_json()["supersedes"] == str(new)

        # history follows the chain both ways, from any of its items.
        for folded in (True, False):
            for start in (old, new, newer):
                history = await managed.history(start, folded=folded)
                # In log order; a replacement's two records sit in two partitions.
                keys = [(h.append_time_ms, h.partition, h.offset) for h in history]
                assert keys == sorted(keys)
                mine = {
                    item: [(h.op, h.version) for h in history if h.item == str(item)]
                    for item in (old, new, newer)
                }
                assert mine == {
                    old: [("remember", 1), ("feedback", 2), ("superseded", 3)],
                    new: [("remember", 1), ("superseded", 2)],
                    newer: [("remember", 1)],
                }, (start, folded)
                by_op = {(h.op, h.item): h for h in history}
                assert by_op[("superseded", str(old))].superseded_by == str(new)
                assert by_op[("remember", str(new))].supersedes == str(old)
        # The past still knows the old fact.
        past = await memory.as_of(old)
        assert [i.text for i in await past.recall()] == ["the office is in Leeds"]
        before_hull = await memory.as_of(new)
        assert "the office is in York" in [i.text for i in await before_hull.recall()]
        assert "the office is in Leeds" not in [i.text for i in await before_hull.recall()]

        # Lasting: forgetting the correction does not bring the old fact back.
        await memory.forget(newer)
        await fold(laser, tmp_path)
        for folded in (True, False):
            assert [i.text for i in await managed.recall(folded=folded)] == [
                "the office parking is free"
            ]


async def test_supersession_stays_in_its_tenant(laser: lm.Laser, tmp_path: Path):
    memory = laser.memory("notes")
    theirs = await memory.remember("acme's office is in Leeds", tenant="acme")
    # Another tenant naming acme's id replaces nothing of acme's.
    await memory.remember("the office is in York", tenant="globex", supersedes=theirs)
    await fold(laser, tmp_path)
    async with viewed(laser, tmp_path) as reader:
        for folded in (True, False):
            items = await reader.memory("notes").recall(tenant="acme", folded=folded)
            assert [i.text for i in items] == ["acme's office is in Leeds"]
        server = TestServer(make_app(reader.managed_view()), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                params = {"namespace": memory.namespace, "tenant": "globex"}
                async with http.get("/v1/recall", params=params) as r:
                    assert [i["body"] for i in await r.json()] == ["the office is in York"]
                async with http.get(
                    "/v1/recall", params={**params, "include_superseded": "yes"}
                ) as r:
                    assert r.status == 400
                async with http.get(
                    "/v1/history",
                    params={"namespace": memory.namespace, "id": str(theirs), "tenant": "acme"},
                ) as r:
                    assert [h["op"] for h in await r.json()] == ["remember"]
        finally:
            await server.close()


async def test_bad_supersedes_is_refused_and_a_hostile_one_set_aside(
    laser: lm.Laser, tmp_path: Path
):
    memory = laser.memory("notes")
    mid = await memory.remember("a fact")
    with pytest.raises(lm.InvalidId):
        await memory.remember("x", supersedes="not an id")
    with pytest.raises(lm.InvalidInput, match="cannot supersede itself"):
        await memory.append(mid, "again", kind="fact", supersedes=mid)
    with pytest.raises(lm.InvalidInput, match="entry 1"):
        await memory.remember_many(["fine", {"body": "x", "supersedes": 42}])
    with pytest.raises(lm.InvalidInput):
        await memory.recall(include_superseded="yes")

    def raw(record, **fields) -> OutgoingRecord:
        wire = encode_record(record)
        value = {**msgspec.msgpack.decode(wire.value), **fields}
        return OutgoingRecord(msgspec.msgpack.encode(value), key=wire.key, headers=wire.headers)

    scope = MemoryScope(stream=laser.stream)
    remember = Remember(
        ns=memory.namespace, scope=scope, id=lm.MemoryId.new().bytes, kind=1, body=b"hostile"
    )
    replaced = Superseded(ns=memory.namespace, scope=scope, target=mid.bytes, by=mid.bytes)
    # A writer that skipped the checks: a short id to replace, an item replaced by itself,
    # or by a short id. Each is set aside; none hides the item.
    await laser.log.append_batch(
        laser.memory_topic_name,
        [raw(remember, supersedes=b"short"), raw(replaced), raw(replaced, by=b"short")],
    )
    assert [i.text for i in await memory.recall(folded=True)] == ["a fact"]
    assert len(memory.set_aside) == 3
    await fold(laser, tmp_path)
    with MemoryView.open(tmp_path / "view", create=False) as view:
        assert view.stats().set_aside == 3


async def test_the_http_view_shows_replaced_items_only_when_asked(laser: lm.Laser, tmp_path: Path):
    memory = laser.memory("notes")
    old = await memory.remember("the office is in Leeds", tenant="acme")
    new = await memory.remember("the office is in York", tenant="acme", supersedes=old)
    await fold(laser, tmp_path)
    async with viewed(laser, tmp_path) as reader:
        server = TestServer(make_app(reader.managed_view()), host="127.0.0.1")
        await server.start_server()
        try:
            async with ClientSession(base_url=str(server.make_url(""))) as http:
                params = {"namespace": memory.namespace, "tenant": "acme"}
                for flag, want in ((None, [str(new)]), ("false", [str(new)]),
                                   ("true", [str(new), str(old)])):  # fmt: skip
                    asked = params if flag is None else {**params, "include_superseded": flag}
                    async with http.get("/v1/recall", params=asked) as r:
                        found = await r.json()
                    assert [i["id"] for i in found] == want, flag
                assert found[1]["superseded_by"] == str(new)
        finally:
            await server.close()
