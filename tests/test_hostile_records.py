"""No record stops a fold: hostile records written straight to the log (past every check
the handle makes) are set aside with their position by every fold path — folded recall,
the managed view, ``as_of`` and replay — and the fold goes on. Over both logs."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import msgspec
import numpy as np
import pytest

import laser_memory as lm
from folders.replay import replay
from folders.service import ViewFolder
from folders.state import MAX_NAMED_BODY_BYTES, ItemFilter
from folders.view import MemoryView
from laser_memory.clock import SteppedClock
from laser_memory.log import OutgoingRecord
from laser_memory.log.naming import MAX_PARTITIONS
from laser_memory.named import MAX_VERSION
from laser_memory.records import (
    HEADER_NAMESPACE,
    HEADER_TENANT,
    HEADER_VERSION,
    MAX_DIMENSIONS,
    MAX_WEIGHT,
    Embedded,
    Feedback,
    Forget,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
    Superseded,
    decode_record,
    encode_record,
)
from laser_memory.scope import MemoryScope

DEEP = b"[" * 5000 + b"]" * 5000
NAN, INF = b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"  # float32, little-endian


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
            # Of the owner (scope, namespace, kind) of `first`, folded before them: the
            # fold's shortcut for remembers of an owner it knows must check them too.
            for bad in (
                {"embedding": b"\x00\x00\x80", "embedder": "test/three"},  # not float32s
                {"embedding": b"\x00\x00\x80?", "embedder": "no slash"},
                # NaN and an infinity: a NaN vector outranked every item in hybrid recall.
                {"embedding": NAN + b"\x00\x00\x80?", "embedder": "test/nan"},
                {"embedding": b"\x00\x00\x80?" + INF, "embedder": "test/inf"},
                # A label without a vector: no model's, yet checked all the same.
                {"embedder": "no slash"},
                {"expires_at": 1 << 63},
                {"supersedes": b"\x01" * 15},
            )
        ),
        (_outgoing(Remember(ns=ns, scope=scope, id=b"\x01" * 15, kind=1, body=b"v")), True),
        # Kind codes no writer has: no test sent one, and folded, every read meeting the
        # item would fail naming it.
        *(
            (
                _outgoing(
                    Remember(ns=ns, scope=scope, id=lm.MemoryId.new().bytes, kind=code, body=b"v")
                ),
                True,
            )
            for code in (99, -1, 1 << 40)
        ),
        # Forgets whose `seen` no log could have: offsets out of range, more partitions
        # than a topic may have (every item it names would carry them all).
        *(
            (_outgoing(Forget(ns=ns, scope=scope, target=target, seen=seen)), True)
            for seen in ((-1,), (0, 1 << 63), (0,) * (MAX_PARTITIONS + 1))
        ),
        # Another namespace's remember under this namespace's header.
        (
            OutgoingRecord(
                _outgoing(
                    Remember(
                        ns=ns + "-other", scope=scope, id=lm.MemoryId.new().bytes, kind=1, body=b"v"
                    )
                ).value,
                key=b"x",
                headers=((HEADER_NAMESPACE, ns.encode()),),
            ),
            True,
        ),
        *(
            (_outgoing(NamedSet(ns=ns, scope=scope, key="vec", body=b"{}", **bad)), True)
            for bad in (
                {"vectors": b"\x00\x00\x80", "embedder": "test/three"},  # not float32s
                {"vectors": b"\x00\x00\x80?"},  # vectors without their model's label
                {"vectors": b"\x00\x00\x80?", "embedder": "no slash"},
                {"vectors": b"\x00\x00\x80?" + NAN, "embedder": "test/nan"},
                {"index": ("ok", "")},  # an empty path
                {"index": tuple(f"p{i}" for i in range(65))},  # too many paths
            )
        ),
        (_outgoing(NamedRemove(ns=ns, scope=scope, key="vec", if_version=0)), True),
        (
            _outgoing(
                Embedded(
                    ns=ns,
                    scope=scope,
                    target=target,
                    body_digest=bytes(16),
                    embedding=b"\x00\x00\x80?" + INF,
                    embedder="test/inf",
                )
            ),
            True,
        ),
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
    assert await snapshot.recall(strategy="recent") == items
    every = await replay(log, topic, namespace=ns)
    assert {
        (r.log_record.partition, r.log_record.offset) for r in every if r.error is not None
    } == {p for p in aside if p not in _set_aside_by_fold_only(hostile, receipts)}
    assert all(r.record is not None for r in await replay(log, topic, namespace=ns, tenant=""))


async def test_each_check_of_the_fold_holds_to_its_bound(laser: lm.Laser, tmp_path: Path):
    """Each field a record may hold, written straight to the log just inside its bound and
    just past it: the one past is set aside by the fold in process and by the view, the
    one inside folded. (Ids of 15 bytes were the only wrong lengths sent: a check of
    "not 17 bytes" passed the suite; so did dropping the check of a named item's key.)"""
    memory = laser.memory("notes")
    ns, topic, log = memory.namespace, memory.topic, laser.log
    scope = MemoryScope(stream=laser.stream)
    target = (await memory.remember("an ordinary fact")).bytes

    def remember(**fields) -> OutgoingRecord:
        fields = {"id": lm.MemoryId.new().bytes, **fields}
        return _outgoing(Remember(ns=ns, scope=scope, kind=1, body=b"v", **fields))

    widest = np.ones(MAX_DIMENSIONS, "<f4").tobytes()
    checks = [  # (record, set aside?)
        (remember(id=b"\x01" * 17), True),
        (remember(supersedes=b"\x01" * 17), True),
        (_outgoing(Feedback(ns=ns, scope=scope, target=b"\x01" * 17, weight=1.0)), True),
        (_outgoing(Superseded(ns=ns, scope=scope, target=target, by=b"\x01" * 17)), True),
        (_outgoing(NamedSet(ns=ns, scope=scope, key="a\x00b", body=b"{}")), True),
        (remember(embedding=widest, embedder="test/widest"), False),
        (remember(embedding=widest + b"\x00\x00\x80?", embedder="test/wide"), True),
        (remember(embedding=b"", embedder="test/empty"), True),
        (remember(embedding=widest[:16], embedder="p/" + "m" * 253), False),  # 255 bytes
        (remember(embedding=widest[:16], embedder="p/" + "m" * 254), True),
        (remember(embedding=widest[:16], embedder="p/m\x00"), True),
        (remember(expires_at=0), False),
        (remember(expires_at=(1 << 63) - 1), False),
        (remember(expires_at=-1), True),
        (_outgoing(NamedRemove(ns=ns, scope=scope, key="k", if_version=MAX_VERSION)), False),
        (_outgoing(NamedRemove(ns=ns, scope=scope, key="k", if_version=MAX_VERSION + 1)), True),
        (_outgoing(Forget(ns=ns, scope=scope, target=target, seen=(0,) * MAX_PARTITIONS)), False),
        (_outgoing(Feedback(ns=ns, scope=scope, target=target, weight=MAX_WEIGHT)), False),
        (_outgoing(Feedback(ns=ns, scope=scope, target=target, weight=-MAX_WEIGHT * 1.01)), True),
        *(
            (_outgoing(Embedded(ns=ns, scope=scope, target=target, **{**embedded, **bad})), aside)
            for embedded in [
                {"body_digest": bytes(16), "embedding": widest, "embedder": "test/widest"}
            ]
            for bad, aside in [
                ({}, False),
                ({"body_digest": bytes(17)}, True),
                ({"embedding": b""}, True),
                ({"embedding": b"\x00\x00\x80"}, True),
                ({"embedding": widest + b"\x00\x00\x80?"}, True),
                ({"embedder": "no slash"}, True),
            ]
        ),
    ]
    receipts = [await log.append(topic, record) for record, _ in checks]
    aside = {(r.partition, r.offset) for r, (_, bad) in zip(receipts, checks, strict=True) if bad}
    # A namespace no writer can name, under its own header: a fold in process passes over
    # it by that header; the view, folding every namespace, sets it aside.
    wire = _outgoing(Remember(ns="bad\x00ns", scope=scope, id=target, kind=1, body=b"v"))
    bad_namespace = await log.append(topic, wire)

    folded = laser.memory("notes")
    await folded.recall(folded=True)
    assert {(a.position.partition, a.position.offset) for a in folded.set_aside} == aside
    await ViewFolder(log, topic, tmp_path / "view").run(until_caught_up=True)
    with MemoryView.open(tmp_path / "view") as view:
        found = {(a.position.partition, a.position.offset) for a in view.stats().set_aside_records}
    assert found == aside | {(bad_namespace.partition, bad_namespace.offset)}


async def test_a_reason_is_printable_and_at_most_a_thousand_characters(laser: lm.Laser):
    """msgspec names an unknown tag as it was sent: a megabyte tag made a megabyte reason,
    and a producer's escape sequences reached an operator's terminal."""
    memory = laser.memory("notes")
    value = msgspec.msgpack.encode({"op": "\x1b[31m" + "x" * 5000, "v": 1, "ns": memory.namespace})
    written = await laser.log.append(memory.topic, OutgoingRecord(value, key=b"k"))
    await memory.recall(folded=True)
    [aside] = memory.set_aside
    assert (aside.position.partition, aside.position.offset) == (written.partition, written.offset)
    assert aside.reason.startswith("not a memory record: ")  # a LaserError's own words
    assert len(aside.reason) == 1000 and aside.reason.endswith("\u2026")
    assert "\x1b" not in aside.reason and "\\x1b[31m" in aside.reason


async def test_a_record_under_another_namespaces_header_shows_in_no_read(
    laser: lm.Laser, tmp_path: Path
):
    """A fold in process passes over the records of other namespaces by their namespace
    header, unread: a record whose header names another namespace than its own must then
    show in no read of its own namespace either, folded or managed. The view sets it
    aside with its position."""
    memory = laser.memory("notes")
    ns, topic, log = memory.namespace, memory.topic, laser.log
    kept = await memory.remember("an ordinary fact")
    lying = await log.append(
        topic,
        OutgoingRecord(
            _outgoing(
                Remember(
                    ns=ns,
                    scope=MemoryScope(stream=laser.stream),
                    id=lm.MemoryId.new().bytes,
                    kind=1,
                    body=b"under another header",
                )
            ).value,
            key=b"x",
            headers=((HEADER_NAMESPACE, b"elsewhere"),),
        ),
    )
    folded = laser.memory("notes")
    assert [i.id for i in await folded.recall(folded=True)] == [kept]
    await ViewFolder(log, topic, tmp_path / "view").run(until_caught_up=True)
    with MemoryView.open(tmp_path / "view") as view:
        [aside] = view.stats().set_aside_records
        assert (aside.position.partition, aside.position.offset) == (
            lying.partition,
            lying.offset,
        )
        assert "namespace header says 'elsewhere'" in aside.reason
    async with lm.connect(log.url, stream=laser.stream, view=tmp_path / "view") as reader:
        assert [i.id for i in await reader.memory("notes").recall()] == [kept]


async def test_a_replay_keeps_headerless_records_of_its_own_and_leaves_out_others(
    laser: lm.Laser,
):
    """Without headers a record cannot be passed over unread: its own namespace and
    tenant, once decoded, decide (only the header was asked, by every test, and a replay
    of one namespace could list another's records that a writer sent without them)."""
    memory = laser.memory("notes", tenant="acme")
    kept = await memory.remember("an ordinary fact")
    for ns, tenant in ((memory.namespace + "-other", "acme"), (memory.namespace, "globex")):
        wire = encode_record(
            Remember(
                ns=ns,
                scope=MemoryScope(stream=laser.stream, tenant=tenant),
                id=lm.MemoryId.new().bytes,
                kind=1,
                body=b"headerless",
            )
        )
        await laser.log.append(memory.topic, OutgoingRecord(wire.value, key=wire.key))
    audit = await replay(laser.log, memory.topic, namespace=memory.namespace, tenant="acme")
    assert [r.log_record.offset for r in audit] == [kept.receipt.offset]
    operator = await replay(laser.log, memory.topic, namespace=memory.namespace)
    assert sorted(r.record.scope.tenant for r in operator) == ["acme", "globex"]
    # And one of its own stays in: the fold folds it, so the tenant's audit must show it
    # (a replay passing over every headerless record dropped it from the audit alone).
    own = Remember(
        ns=memory.namespace,
        scope=MemoryScope(stream=laser.stream, tenant="acme"),
        id=lm.MemoryId.new().bytes,
        kind=1,
        body=b"acme's headerless",
    )
    wire = encode_record(own)
    await laser.log.append(memory.topic, OutgoingRecord(wire.value, key=wire.key))
    audit = await replay(laser.log, memory.topic, namespace=memory.namespace, tenant="acme")
    assert [r.record.body for r in audit] == [b"an ordinary fact", b"acme's headerless"]
    assert own.id in {i.id.bytes for i in await memory.recall(folded=True)}


def test_a_header_that_is_no_utf8_names_no_namespace_or_tenant():
    """Read with replacement, a header b"\\xff" named "\\ufffd": a record of a namespace
    or tenant of that name under it was folded, while a replay (comparing bytes) skipped
    it. Such a header names nothing: the record is set aside."""
    from folders.state import MemoryState, check_owner_headers
    from laser_memory.log.port import LogRecord
    from laser_memory.records import HEADER_TENANT

    scope = MemoryScope(tenant="\ufffd")
    record = Remember(ns="\ufffd", scope=scope, id=lm.MemoryId.new().bytes, kind=1, body=b"x")
    wire = encode_record(record)
    for name in (HEADER_NAMESPACE, HEADER_TENANT):
        headers = tuple((k, b"\xff" if k == name else v) for k, v in wire.headers)
        with pytest.raises(lm.RecordDecodeError, match="header"):
            check_owner_headers(headers, record)
        state = MemoryState("\ufffd", topic="t", generation="g")
        state.apply(LogRecord("t", 0, 0, 1_000, wire.key, wire.value, headers))
        assert state.items(ItemFilter.build(tenant="\ufffd")) == []


@pytest.mark.parametrize(
    "headers",
    [
        5,
        (("lm-ns",),),
        (("lm-ns", "notes"),),  # text, not bytes
        [["lm-tenant", ["acme"]]],
        (("lm-v", ["1"]),),
    ],
)
def test_headers_that_are_no_name_and_bytes_pairs_set_the_record_aside(headers):
    """The log port hands headers as (name, bytes) pairs; a log of one's own may not.
    Reading them raised a raw TypeError or AttributeError out of the fold (it reads a
    record's headers before its guard), which stopped it for good."""
    from folders.state import MemoryState
    from laser_memory.log.port import LogRecord

    scope = MemoryScope(tenant="acme")
    good = encode_record(Remember(ns="notes", scope=scope, id=bytes(16), kind=1, body=b"x"))
    with pytest.raises(lm.RecordDecodeError, match=r"not \(name, bytes\) pairs"):
        decode_record(good.value, headers)
    bad = LogRecord("t", 0, 0, 1_000, good.key, good.value, headers)
    after = LogRecord("t", 0, 1, 1_001, good.key, good.value, good.headers)
    for tenant in (None, "acme"):
        state = MemoryState("notes", topic="t", generation="g", tenant=tenant)
        state.apply(bad)
        state.apply(after)
        assert [aside.position for aside in state.set_aside] == [bad.position]
        assert "(name, bytes) pairs" in state.set_aside[0].reason
        # Whose it is cannot be told: shown to unbound readers only.
        assert len(state.set_aside_for(tenant)) == (1 if tenant is None else 0)
        assert [i.text for i in state.items(ItemFilter.build(tenant="acme"))] == ["x"]
    with tempfile.TemporaryDirectory() as folder:
        view = MemoryView.open(folder)
        try:
            view.bind("t", "g")
            view.apply([[bad, after]], "g")
            stats = view.stats()
            assert [aside.position for aside in stats.set_aside_records] == [bad.position]
            assert stats.items == 1
        finally:
            view.close()


async def test_a_tenant_bound_handle_is_shown_only_its_tenants_records_set_aside(
    laser: lm.Laser,
):
    """A reason quotes what a record holds (here a name with a control character): a
    handle bound to acme was shown globex's records set aside, and another namespace's
    written without headers. Records whose tenant cannot be told go to unbound handles
    only, which may read every tenant."""
    acme = laser.memory("notes", tenant="acme")
    ns, topic, log = acme.namespace, acme.topic, laser.log
    await acme.remember("an ordinary fact")

    def bad(tenant: str, namespace: str = ns) -> OutgoingRecord:
        scope = MemoryScope(stream=laser.stream, tenant=tenant, agent=f"{tenant} payroll\x01")
        record = Remember(ns=namespace, scope=scope, id=lm.MemoryId.new().bytes, kind=1, body=b"x")
        return _outgoing(record)

    def bare(out: OutgoingRecord) -> OutgoingRecord:
        return OutgoingRecord(out.value, key=out.key, headers=())

    written = {}
    for name, out in [
        ("acme's", bad("acme")),
        ("globex's", bad("globex")),
        ("globex's, no headers", bare(bad("globex"))),
        ("no one's", OutgoingRecord(b"\xff not msgpack", key=b"k")),
        ("another namespace's, no headers", bare(bad("acme", ns + "-other"))),
    ]:
        written[name] = await log.append(topic, out)

    def shown(memory: lm.MemoryHandle) -> set[str]:
        at = {(r.partition, r.offset): name for name, r in written.items()}
        return {at[(a.position.partition, a.position.offset)] for a in memory.set_aside}

    seen = {}
    for tenant in ("acme", "globex", None):
        memory = laser.memory("notes", tenant=tenant)
        await memory.recall(folded=True)
        seen[tenant] = shown(memory)
    assert seen["acme"] == {"acme's"}
    assert seen["globex"] == {"globex's", "globex's, no headers"}
    assert seen[None] == {"acme's", "globex's", "globex's, no headers", "no one's"}
    await acme.recall(folded=True)
    [own] = acme.set_aside
    assert "acme payroll" in own.reason


async def test_a_tenant_bound_handle_folds_its_tenants_records_only(laser: lm.Laser):
    """A handle made per request for one tenant read and folded every tenant's records
    of the topic on its first recall: it folds its own tenant's only, passing over the
    others by their tenant header, and decoding those written without headers (another
    writer's) to learn whose they are. Its recalls are what an unbound handle gives
    for that tenant."""
    unbound = laser.memory("notes")
    ns, topic = unbound.namespace, unbound.topic
    written: dict[str, list[bytes]] = {"acme": [], "globex": []}
    for n in range(3):
        for tenant in written:
            mid = await unbound.remember(f"{tenant} fact {n}", tenant=tenant)
            record = Remember(
                ns=ns,
                scope=MemoryScope(stream=laser.stream, tenant=tenant),
                id=lm.MemoryId.new().bytes,
                kind=1,
                body=f"{tenant} fact {n}, no headers".encode(),
            )
            wire = encode_record(record)
            await laser.log.append(topic, OutgoingRecord(wire.value, key=wire.key, headers=()))
            written[tenant] += [mid.bytes, record.id]
    for tenant, ids in written.items():
        bound = laser.memory("notes", tenant=tenant)
        got = await bound.recall(folded=True)
        assert sorted(i.id.bytes for i in got) == sorted(ids)
        assert [i.id for i in got] == [i.id for i in await unbound.recall(tenant=tenant)]
        assert bound._reader._state.applied == len(ids)  # the other tenant's: not folded
        assert bound.set_aside == []
    assert unbound._reader._state.applied == 12


async def test_a_record_under_another_tenants_header_shows_in_no_read(
    laser: lm.Laser, tmp_path: Path
):
    """A replay for one tenant (an audit) passes over the records of others by their
    tenant header, unread: a record whose header names another tenant than its own must
    show in no recall either, or a tenant would recall what its audit never shows. A
    handle bound to the record's own tenant passes over it as its audit does (it folds
    its tenant's records only, by header); the folds that read it set it aside, with a
    reason that names neither tenant."""
    memory = laser.memory("notes", tenant="acme")
    ns, topic, log = memory.namespace, memory.topic, laser.log
    kept = await memory.remember("an ordinary fact")
    wire = _outgoing(
        Remember(
            ns=ns,
            scope=MemoryScope(stream=laser.stream, tenant="acme"),
            id=lm.MemoryId.new().bytes,
            kind=1,
            body=b"under another tenant's header",
        )
    )
    headers = tuple((k, b"globex" if k == HEADER_TENANT else v) for k, v in wire.headers)
    lying = await log.append(topic, OutgoingRecord(wire.value, key=wire.key, headers=headers))
    audit = await replay(log, topic, namespace=ns, tenant="acme")
    assert [r.log_record.offset for r in audit] == [kept.receipt.offset]
    for tenant in ("acme", "globex", None):
        folded = laser.memory("notes", tenant=tenant)
        got = await folded.recall(folded=True, tenant=tenant or "acme")
        assert [i.id for i in got] == ([kept] if tenant != "globex" else [])
        if tenant == "acme":
            assert folded.set_aside == []
            continue
        [aside] = folded.set_aside
        assert (aside.position.partition, aside.position.offset) == (
            lying.partition,
            lying.offset,
        )
        assert "acme" not in aside.reason and "globex" not in aside.reason
    await ViewFolder(log, topic, tmp_path / "view").run(until_caught_up=True)
    with MemoryView.open(tmp_path / "view") as view:
        assert view.stats().set_aside == 1
    async with lm.connect(log.url, stream=laser.stream, view=tmp_path / "view") as reader:
        assert [i.id for i in await reader.memory("notes", tenant="acme").recall()] == [kept]


def _set_aside_by_fold_only(hostile, receipts) -> set[tuple[int, int]]:
    """Patches are refused when folded (they need the item's state), not when decoded:
    replay, which only decodes, lists them as records."""
    return {
        (r.partition, r.offset)
        for r, (record, bad) in zip(receipts, hostile, strict=True)
        if bad and b"named.patch" in dict(record.headers).get("lm-op", b"")
    }


async def test_a_name_too_long_with_its_streams_prefix_is_refused_before_any_write(
    tmp_path: Path,
):
    """With a default stream the records carry ``stream:<stream>/<name>``: a name that
    fits alone but not with the prefix (254 bytes of letters, emoji and a combining mark)
    is refused when the handle is made, so nothing is written that every folder would
    set aside; one that fits with its prefix folds."""
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        prefix = len(b"stream:s/")
        too_long = "n" * 200 + "\U0001f600" * 13 + "\u0301"
        assert len(too_long.encode()) == 254
        with pytest.raises(lm.InvalidName, match=r"prefix 'stream:s/'.*shorten it"):
            laser.memory(too_long)
        fits = "n" * (255 - prefix - 54) + "\U0001f600" * 13 + "\u0301"
        memory = laser.memory(fits)
        assert len(memory.namespace.encode()) == 255
        written = await memory.remember("the longest name that fits")
        ends = await laser.log.end_offsets(memory.topic)
        await ViewFolder(laser.log, memory.topic, tmp_path / "view").run(until_caught_up=True)
        with MemoryView.open(tmp_path / "view") as view:
            stats = view.stats()
            assert stats.set_aside == 0 and stats.items == 1
        assert sum(ends.values()) == 1  # the refused name wrote nothing
        assert [i.id for i in await memory.recall(folded=True)] == [written]


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


async def test_a_folder_lock_that_is_no_regular_file_is_refused(tmp_path: Path):
    view = tmp_path / "view"
    view.mkdir()
    os.mkfifo(view / "folder.lock")  # opens for writing, and locks, like a file
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("a fact")
        folder = ViewFolder(laser.log, laser.memory_topic_name, view)
        fds = len(os.listdir("/proc/self/fd"))
        with pytest.raises(lm.ConfigError, match=r"folder\.lock is not a regular file; remove it"):
            await folder.run(until_caught_up=True)
        assert len(os.listdir("/proc/self/fd")) == fds
    assert not (view / "data.mdb").exists()


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


async def _delete_front(laser: lm.Laser, clock: SteppedClock, topic: str) -> None:
    """Make the log drop every record of ``topic``'s partition 0 written so far, as
    retention does: the embedded log by the clock passing the topic's retention (the
    next write expires them), Kafka by the admin API's DeleteRecords (what retention
    does, without waiting for the broker's next check)."""
    if laser.log.url.startswith("local:"):
        clock.step(60_000)
        return
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    end = (await laser.log.end_offsets(topic))[0]
    client = AIOKafkaAdminClient(bootstrap_servers=laser.log.url.removeprefix("kafka://"))
    await client.start()
    try:
        await client.delete_records({TopicPartition(topic, 0): RecordsToDelete(end)})
    finally:
        await client.close()


async def test_records_deleted_before_a_fold_reached_them_are_noted_where_they_were(
    any_log_url: str, stream_name: str, tmp_path: Path
):
    """A fold that was behind when the log dropped records (a folder down longer than
    the topic's retention) goes on from the first record left, and says so: a set-aside
    note at the first offset it never saw, naming the range, in the view's stats and
    the handle's ``set_aside``. It matters most for a lost forget: the item it ended
    still shows, and the note is how anyone can know. A fold from the start does not
    note what was deleted before it began."""
    clock = SteppedClock(1_800_000_000_000)
    view = tmp_path / "view"
    async with lm.connect(any_log_url, stream=stream_name, clock=clock) as laser:
        await laser.bootstrap(
            partitions=1, retention=10.0 if any_log_url.startswith("local:") else None
        )
        writer, behind = laser.memory("notes"), laser.memory("notes")
        early = [await writer.remember(f"early {i}") for i in range(5)]
        await ViewFolder(laser.log, writer.topic, view).run(until_caught_up=True)
        assert len(await behind.recall(folded=True)) == 5
        await writer.forget(early[0])
        for i in range(3):
            await writer.remember(f"middle {i}")
        await _delete_front(laser, clock, writer.topic)
        late = [await writer.remember(f"late {i}") for i in range(2)]
        await ViewFolder(laser.log, writer.topic, view).run(until_caught_up=True)
        behind_items = await behind.recall(folded=True)

        fresh = laser.memory("notes")
        fresh_items = await fresh.recall(folded=True)
        assert [i.body for i in fresh_items] == [b"late 1", b"late 0"]
        assert fresh.set_aside == []

    # The forget went with the deleted records: the item it ended still shows in folds
    # that had it, and the note says why.
    assert early[0] in [i.id for i in behind_items]
    [noted] = behind.set_aside
    with MemoryView.open(view) as opened:
        stats = opened.stats()
    assert stats.set_aside_records == [noted]
    assert (noted.position.partition, noted.position.offset) == (0, 5)
    # Offsets 5 to 8 held the forget and the middle items; the late ones start at 9.
    assert late[0].receipt.offset == 9
    assert "offsets 5 to 8 of partition 0 were gone" in noted.reason
    assert "retention" in noted.reason and "Rebuild" in noted.reason
    assert noted.append_time_ms == late[0].receipt.append_time_ms

    # A rebuild folds only what the log holds now, with nothing to note.
    async with lm.connect(any_log_url, stream=stream_name, clock=clock) as laser:
        await ViewFolder(laser.log, laser.memory("notes").topic, view).run(
            until_caught_up=True, rebuild=True
        )
    async with lm.connect(any_log_url, stream=stream_name, view=view) as reader:
        assert [i.body for i in await reader.memory("notes").recall()] == [b"late 1", b"late 0"]
    with MemoryView.open(view) as opened:
        assert opened.stats().set_aside_records == []


async def test_a_record_damaged_on_the_embedded_logs_disk_is_set_aside_by_every_fold(
    tmp_path: Path,
):
    """LMDB keeps no checksum: bytes of a stored record damaged on disk failed every
    read of the topic with a raw DecodeError, so folded recall failed and the folder
    stopped for good. Every fold now sets the record aside, with its position and what
    the log said of it, and goes on."""
    view = tmp_path / "view"
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.bootstrap(partitions=1)
        memory = laser.memory("notes")
        ids = [await memory.remember(f"fact {i}") for i in range(3)]
        with laser.log._env.begin(write=True) as txn:
            cursor = txn.cursor(db=laser.log._dbs["records"])
            assert cursor.first() and cursor.next()  # the second record: "fact 1"
            cursor.put(cursor.key(), b"\xc1" + bytes(cursor.value())[1:])
        after = await memory.remember("written after the damage")
        folded = laser.memory("notes")
        assert [i.text for i in await folded.recall(folded=True)] == [
            "written after the damage",
            "fact 2",
            "fact 0",
        ]
        [aside] = folded.set_aside
        assert (aside.position.partition, aside.position.offset) == (0, ids[1].receipt.offset)
        assert "stored bytes are damaged" in aside.reason and "restore the log" in aside.reason
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        audit = await replay(laser.log, memory.topic, namespace=memory.namespace)
    with MemoryView.open(view) as opened:
        stats = opened.stats()
        assert stats.items == 3 and stats.set_aside_records == [aside]
        assert opened.watermark() == {0: after.receipt.offset + 1}
    [unreadable] = [r for r in audit if r.record is None]
    assert unreadable.error == aside.reason
    assert unreadable.log_record.offset == ids[1].receipt.offset


async def test_a_producers_text_comes_into_a_reason_escaped_and_cut_short(
    laser: lm.Laser,
):
    # Any producer may send the header the embedded log marks an unreadable record with:
    # its text comes into the reason as a repr, never as it was (a reason is printed to
    # an operator's terminal: escape sequences, a megabyte of text).
    from laser_memory.log.port import UNREADABLE_HEADER

    memory = laser.memory("notes")
    await memory.remember("kept")
    hostile = "\x1b[2J\x1b[31mALL CLEAR\n" + "x" * 100_000
    await laser.log.append(
        memory.topic,
        OutgoingRecord(
            b"",
            key=b"k",
            headers=(
                (HEADER_NAMESPACE, memory.namespace.encode()),
                (UNREADABLE_HEADER, hostile.encode()),
            ),
        ),
    )
    # And a record whose operation tag is such text: the decoder's message quotes it.
    await laser.log.append(
        memory.topic,
        OutgoingRecord(
            msgspec.msgpack.encode({"op": hostile, "v": 1}),
            key=b"k",
            headers=((HEADER_NAMESPACE, memory.namespace.encode()),),
        ),
    )
    fresh = laser.memory("notes")
    assert [i.text for i in await fresh.recall(folded=True)] == ["kept"]
    assert len(fresh.set_aside) == 2
    for aside in fresh.set_aside:
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in aside.reason), aside.reason
        assert "\\x1b[2J" in aside.reason and len(aside.reason) <= 1000


def test_missing_records_notes_each_jump_once_and_nothing_before_a_first_read():
    from folders.state import missing_records
    from laser_memory.log.port import LogRecord

    def batch(*positions: tuple[int, int]) -> list[LogRecord]:
        return [LogRecord("t", p, o, 1_000 + o, None, b"", ()) for p, o in positions]

    def noted(records, next_offsets) -> list[tuple[int, int, int]]:
        return [
            (n.position.partition, n.position.offset, n.append_time_ms)
            for n in missing_records(records, next_offsets)
        ]

    run = batch((0, 7), (0, 8), (0, 9))
    assert noted(run, {0: 7}) == []  # goes on where expected
    assert noted(run, {}) == noted(run, {0: 0}) == []  # nothing read yet: nothing missed
    assert noted(run, {0: 4}) == [(0, 4, 1_007)]  # 4 to 6 went before the fold got there
    assert noted(run, {0: 1}) == [(0, 1, 1_007)]  # after offset 0 only: from 1
    # Jumps inside a batch (offsets a log skipped), and a batch of several partitions.
    assert noted(batch((0, 7), (0, 9), (0, 12)), {0: 7}) == [(0, 8, 1_009), (0, 10, 1_012)]
    assert noted(batch((0, 0), (0, 2)), {}) == [(0, 1, 1_002)]
    assert noted(batch((1, 5), (0, 3), (1, 7), (0, 4)), {1: 2}) == [(1, 2, 1_005), (1, 6, 1_007)]


@pytest.mark.parametrize(
    "change",
    [
        {"partition": "0"},
        {"partition": True},
        {"partition": 99},
        {"offset": -1},
        {"offset": 2**63},
        {"append_time_ms": None},
        {"generation": 5},
    ],
    ids=str,
)
async def test_a_forged_receipt_is_refused_not_waited_on(laser: lm.Laser, tmp_path, change):
    """A receipt no write could have returned (msgspec does not check a Struct's field
    types when it is made): an `InvalidInput` from every read that takes one, at once.
    A string partition was a raw TypeError deep in the wait; a partition the topic
    lacks was waited on until the timeout; a negative offset passed as folded."""
    memory = laser.memory("notes")
    written = await memory.remember("x")
    forged = msgspec.structs.replace(written.receipt, **change)
    view = tmp_path / "view"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as reader:
        managed = reader.memory("notes")
        calls = [
            lambda: managed.recall(after=forged, timeout=30),
            lambda: managed.fetch("k", after=forged, timeout=30),
            lambda: managed.named(after=forged, timeout=30),
            lambda: managed.as_of(forged),
        ]
        if "partition" not in change or change["partition"] != 99:
            # Folded reads never wait, so they do not ask how many partitions there are.
            calls.append(lambda: managed.recall(after=forged, folded=True))
        for call in calls:
            with pytest.raises(lm.InvalidInput, match="receipt"):
                await asyncio.wait_for(call(), 10)


async def test_a_receipt_for_the_partition_after_the_last_is_refused(laser: lm.Laser, tmp_path):
    """The first partition a topic lacks (its count) is refused like any past it: a
    waiting read would wait on it until its timeout."""
    memory = laser.memory("notes")
    written = await memory.remember("x")
    partitions = (await laser.log.describe_topic(memory.topic)).partitions
    view = tmp_path / "view"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as reader:
        managed = reader.memory("notes")
        past = msgspec.structs.replace(written.receipt, partition=partitions)
        with pytest.raises(lm.InvalidInput, match="receipt"):
            await asyncio.wait_for(managed.recall(after=past, timeout=30), 10)


def test_a_view_never_folds_a_record_twice_when_the_log_goes_back(tmp_path: Path):
    """Records at offsets the view holds as folded, handed to it again (a log that went
    back under its folder): folding them twice would count feedback twice, so the batch
    is refused whole and the view stays as it was."""
    from laser_memory.ids import MemoryId
    from laser_memory.log.port import LogRecord
    from laser_memory.records import Feedback

    scope = MemoryScope(stream="s")
    target = MemoryId.new().bytes
    records = [
        Remember(ns="notes", scope=scope, id=target, kind=1, body=b"x"),
        Feedback(ns="notes", scope=scope, target=target, weight=1.0),
        Feedback(ns="notes", scope=scope, target=target, weight=2.0),
    ]
    logged = [
        LogRecord("t", 0, offset, 1_000 + offset, wire.key, wire.value, wire.headers)
        for offset, wire in enumerate(map(encode_record, records))
    ]
    with MemoryView.open(tmp_path / "view") as view:
        view.bind("t", "g")
        assert view.apply([logged], "g") == 3
        before = view.dump()
        with pytest.raises(lm.ViewMismatch, match="went back"):
            view.apply([logged[1:]], "g")
        assert view.dump() == before
        assert view.watermark() == {0: 3}


def test_set_aside_reasons_survive_encoding():
    from folders.state import SetAside
    from laser_memory.log.port import Position

    aside = SetAside(Position("t", 0, 1), 5, "RecursionError: too deep")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(aside), type=SetAside) == aside
