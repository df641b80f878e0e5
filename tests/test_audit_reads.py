"""An auditor's reads of the log, over both logs: `replay_stream` (a replay given one
record at a time, holding a batch a partition, in `replay`'s order and with its filters,
and on with ``follow``), replays since and until a moment (read from and to where the
moment falls), `history_from_log` (the item's records alone), a tenant's `as_of` (its
records alone) and `MemoryHandle.replay`."""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from collections.abc import AsyncIterator

import msgspec
import pytest
from click.testing import CliRunner
from counting_log import CountingLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import folders.replay as replay_module
import laser_memory as lm
from folders.replay import LoggedRecord, replay, replay_stream
from laser_memory.cli import main
from laser_memory.log import LocalLog, OutgoingRecord
from laser_memory.log.port import LogRecord
from laser_memory.records import HEADER_NAMESPACE


async def _streamed(*args, **kwargs) -> list[LoggedRecord]:
    return [logged async for logged in replay_stream(*args, **kwargs)]


def _positions(records: list[LoggedRecord]) -> list[tuple[int, int]]:
    return [(r.log_record.partition, r.log_record.offset) for r in records]


async def _mixed_topic(laser: lm.Laser) -> lm.MemoryHandle:
    """Records of two tenants and two namespaces over every partition, feedback and
    named items among them, and one record nobody can decode."""
    rng = random.Random(7)
    acme = laser.memory("notes", tenant="acme")
    globex = laser.memory("notes", tenant="globex")
    elsewhere = laser.memory("elsewhere", tenant="acme")
    written = []
    for round_ in range(6):
        written += await acme.remember_many(
            [
                {"body": f"acme fact {round_}-{i}", "conversation": f"c{round_}-{i % 5}"}
                for i in range(rng.randint(5, 25))
            ]
        )
        await globex.remember_many([f"globex fact {round_}-{i}" for i in range(7)])
        await elsewhere.remember(f"elsewhere {round_}")
        await acme.improve(rng.choice(written), 1.5)
        await acme.set(f"profile:{round_}", {"round": round_})
    header = ((HEADER_NAMESPACE, acme.namespace.encode()),)
    await laser.log.append(acme.topic, OutgoingRecord(b"\xc1 no msgpack", key=b"x", headers=header))
    await acme.remember("the last fact")
    return acme


async def test_the_stream_gives_what_replay_gives_in_its_order(
    laser: lm.Laser, monkeypatch: pytest.MonkeyPatch
):
    # A stream holds little: 40 records over four partitions is ten a read, so each
    # partition is read in many batches and the merge runs across their edges.
    monkeypatch.setattr(replay_module, "STREAM_HELD_RECORDS", 40)
    acme = await _mixed_topic(laser)
    log, topic, ns = laser.log, acme.topic, acme.namespace
    every = await replay(log, topic)
    assert len(every) > 100 and {r.log_record.partition for r in every} == {0, 1, 2, 3}
    middle = sorted(r.log_record.append_time_ms for r in every)[len(every) // 2]
    ends = await log.end_offsets(topic)
    for filters in (
        {},
        {"namespace": ns},
        {"namespace": ns, "tenant": "acme"},
        {"tenant": "globex"},
        {"namespace": ns, "tenant": "nobody"},
        {"since_ms": middle},
        {"until_ms": middle, "tenant": "acme"},
        {"until": {0: ends[0] // 2, 2: ends[2]}},
        {"until": {1: 0}},
        {"since_ms": middle, "until": {0: ends[0], 3: ends[3] // 2}},
        {"until_ms": middle, "until": {0: ends[0], 3: ends[3] // 2}},
        {"until_ms": (1 << 63) - 1},  # the last millisecond: no bound past it to ask for
    ):
        expected = await replay(log, topic, **filters)
        assert _positions(await _streamed(log, topic, **filters)) == _positions(expected), filters
    # Both bounds at once, against a replay of everything filtered here: only the
    # partitions named, each up to its offset, and only what was appended by the moment.
    until = {0: ends[0], 3: ends[3] // 2}
    expected = [
        r
        for r in every
        if r.log_record.partition in until
        and r.log_record.offset < until[r.log_record.partition]
        and r.log_record.append_time_ms <= middle
    ]
    for read in (replay, _streamed):
        got = await read(log, topic, until_ms=middle, until=until)
        assert _positions(got) == _positions(expected)
    # The record nobody can decode is the operator's, with why, and no tenant's.
    streamed = await _streamed(log, topic, namespace=ns)
    [unreadable] = [r for r in streamed if r.record is None]
    assert "MessagePack data is malformed" in unreadable.error
    assert all(r.record is not None for r in await _streamed(log, topic, tenant="acme"))


async def test_the_stream_refuses_what_replay_refuses_before_reading(laser: lm.Laser):
    memory = laser.memory("notes", tenant="acme")
    await memory.remember("acme's fact")
    log, topic = laser.log, laser.memory_topic_name
    for kwargs, error in (
        ({"namespace": 5}, lm.InvalidName),
        ({"tenant": b"acme"}, lm.InvalidName),
        ({"since_ms": "2026"}, lm.InvalidInput),
        ({"until_ms": float("nan")}, lm.InvalidInput),
        ({"since_ms": 10, "until_ms": 9}, lm.InvalidInput),
        ({"until": 5}, lm.InvalidInput),
        # Sorted as they came, a str among the partitions was a raw TypeError.
        ({"until": {"0": 1, 1: 1}}, lm.InvalidInput),
        ({"until": {0: -1}}, lm.InvalidInput),
        ({"until": {0: True}}, lm.InvalidInput),
        ({"until": {99: 1}}, lm.UnknownTopic),  # a partition the topic lacks
    ):
        with pytest.raises(error):
            await _streamed(log, topic, **kwargs)
        with pytest.raises(error):
            await replay(log, topic, **kwargs)


async def test_the_stream_gives_its_first_record_before_reading_the_rest(
    tmp_path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(replay_module, "STREAM_HELD_RECORDS", 400)
    log = CountingLog(tmp_path / "log")
    async with lm.Laser(log, stream="s") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        for start in range(0, 4000, 1000):
            await memory.remember_many([f"fact {i}" for i in range(start, start + 1000)])
        log.handed_out = 0
        stream = replay_stream(log, memory.topic, namespace=memory.namespace)
        first = await anext(stream)
        # A batch a partition (400 over 4: 100 each), not the topic's 4,000 records.
        assert log.handed_out <= 400
        rest = [logged async for logged in stream]
        assert 1 + len(rest) == 4000 and log.handed_out == 4000
        assert _positions([first, *rest]) == _positions(
            await replay(log, memory.topic, namespace=memory.namespace)
        )


class _SteppedBackLog(LocalLog):
    """The embedded log, reading partition 0's offsets 3 and 4 as appended a minute
    earlier than the rest: as on Kafka, a partition whose leader moved to a broker with
    a clock behind."""

    async def read(self, *args, **kwargs) -> AsyncIterator[list[LogRecord]]:
        async for batch in super().read(*args, **kwargs):
            yield [
                msgspec.structs.replace(r, append_time_ms=r.append_time_ms - 60_000)
                if r.partition == 0 and r.offset in (3, 4)
                else r
                for r in batch
            ]


async def test_a_partition_whose_times_step_back_keeps_its_offset_order(tmp_path):
    log = _SteppedBackLog(tmp_path / "log")
    async with lm.Laser(log, stream="s") as laser:
        await laser.bootstrap(partitions=2)
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {i}" for i in range(40)])
        streamed = await _streamed(log, memory.topic)
        sorted_ = await replay(log, memory.topic)
    assert sorted(_positions(streamed)) == sorted(_positions(sorted_))
    # Each partition in the order its records were appended, the stepped-back ones too.
    for partition in (0, 1):
        offsets = [o for p, o in _positions(streamed) if p == partition]
        assert offsets == sorted(offsets)
    # replay sorts by time, so there the stepped-back records come first.
    assert _positions(sorted_)[:2] == [(0, 3), (0, 4)]
    assert _positions(streamed)[:2] != [(0, 3), (0, 4)]


async def test_the_cli_replay_prints_in_replays_order(laser: lm.Laser, monkeypatch):
    monkeypatch.setattr(replay_module, "STREAM_HELD_RECORDS", 40)
    acme = await _mixed_topic(laser)
    expected = await replay(laser.log, acme.topic, namespace=acme.namespace, tenant="acme")
    # The CLI runs its own event loop: on a thread.
    args = ["replay", "--url", laser.log.url, "--stream", laser.stream]
    args += ["--namespace", "notes", "--tenant", "acme", "--json"]
    result = await asyncio.to_thread(CliRunner().invoke, main, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(d["partition"], d["offset"]) for d in lines] == _positions(expected)


@pytest.mark.parametrize("seed", range(3))
async def test_history_from_the_log_is_what_a_replay_gives(laser: lm.Laser, seed: int):
    # The handle's history without a view holds only the item's records (its chain's),
    # read once, or twice when it has a chain: the same entries a replay of every record
    # gave, through item_history and chain_history, for every item and key, each tenant.
    from folders.replay import chain_history, history_from_log, item_history, named_history

    rng = random.Random(seed)
    handles = {t: laser.memory("notes", tenant=t) for t in ("acme", "globex")}
    ids: dict[str, list[lm.MemoryId]] = {"acme": [], "globex": []}
    for step in range(120):
        tenant = rng.choice(["acme", "acme", "globex"])
        memory, mine = handles[tenant], ids[tenant]
        choice = rng.random()
        if not mine or choice < 0.35:
            old = rng.choice(mine) if mine and rng.random() < 0.4 else None
            mine.append(
                await memory.remember(
                    f"fact {step}", conversation=rng.choice([None, "c1", "c2"]), supersedes=old
                )
            )
        elif choice < 0.5:
            await memory.improve(rng.choice(mine), rng.choice([-1.0, 0.5, 2.0]))
        elif choice < 0.6:
            await memory.forget(rng.choice(mine))
        elif choice < 0.7 and len(mine) > 1:
            # An item's later remember naming another it replaces: links out of order.
            a, b = rng.sample(mine, 2)
            await memory.append(a, f"more {step}", kind="fact", supersedes=b)
        elif choice < 0.85:
            await memory.set(f"key:{rng.randint(0, 3)}", {"step": step})
        else:
            await memory.update(f"key:{rng.randint(0, 3)}", {"also": step})
    log, topic, ns = laser.log, laser.memory_topic_name, handles["acme"].namespace
    for tenant, memory in handles.items():
        records = await replay(log, topic, namespace=ns, tenant=tenant)
        for mid in ids["acme"] + ids["globex"]:
            expected = chain_history(
                mid.bytes, lambda one, r=records, t=tenant: item_history(r, one, tenant=t)
            )
            assert await history_from_log(log, topic, ns, mid, tenant=tenant) == expected
            assert await memory.history(mid, folded=True) == expected
        for key in (f"key:{i}" for i in range(5)):
            expected = named_history(records, key, tenant=tenant)
            assert await history_from_log(log, topic, ns, key, tenant=tenant) == expected
    # Chains were read (entries of other items than the one asked for), not only items.
    chained = [await handles["acme"].history(m, folded=True) for m in ids["acme"]]
    assert any(e.item != str(m) for m, h in zip(ids["acme"], chained, strict=True) for e in h)
    # One tenant's history, always: None read every tenant's and showed the default's.
    for target in (ids["acme"][0], "key:0"):
        with pytest.raises(lm.InvalidName):
            await history_from_log(log, topic, ns, target, tenant=None)


async def test_history_from_the_log_follows_links_whatever_the_bodies_and_encodings(
    laser: lm.Laser,
):
    # The history passes over records by their bytes before decoding them. Links hide
    # from that behind nothing: bodies that hold the very bytes it looks for (a
    # remember's ``supersedes`` then nil) and a writer of one's own that encodes
    # ``supersedes`` at greater length (msgpack's bin16, as valid as bin8) are followed.
    from folders.replay import chain_history, history_from_log, item_history
    from laser_memory.records import Remember, Superseded, encode_record
    from laser_memory.scope import MemoryScope

    memory = laser.memory("notes", tenant="acme")
    first = await memory.remember("the first version")
    scope = MemoryScope(stream=laser.stream, tenant="acme")
    second, third = lm.MemoryId.new(), lm.MemoryId.new()
    decoy = b"supersedes\xc0 twice: supersedes\xc0"
    by_hand = [
        (Remember(ns=memory.namespace, scope=scope, id=second.bytes, kind=1, body=decoy,
                  supersedes=first.bytes), True),
        (Superseded(ns=memory.namespace, scope=scope, target=first.bytes, by=second.bytes),
         False),
        (Remember(ns=memory.namespace, scope=scope, id=third.bytes, kind=1,
                  body=b"supersedes\xc0" * 3, supersedes=second.bytes), False),
        (Superseded(ns=memory.namespace, scope=scope, target=second.bytes, by=third.bytes),
         False),
    ]  # fmt: skip
    for record, longer in by_hand:
        wire = encode_record(record)
        value = wire.value
        if longer:
            short = b"supersedes\xc4\x10" + record.supersedes
            assert value.count(short) == 1
            value = value.replace(short, b"supersedes\xc5\x00\x10" + record.supersedes)
            assert lm_decode(value) == record  # the same record, longer bytes
        await laser.log.append(
            memory.topic, OutgoingRecord(value, key=wire.key, headers=wire.headers)
        )
    await memory.improve(third, 2.0)
    log, topic = laser.log, laser.memory_topic_name
    records = await replay(log, topic, namespace=memory.namespace, tenant="acme")
    for mid in (first, second, third):
        expected = chain_history(mid.bytes, lambda one: item_history(records, one, tenant="acme"))
        got = await history_from_log(log, topic, memory.namespace, mid, tenant="acme")
        assert got == expected
        # The whole chain, from any of its items: entries of all three (from the third,
        # the first is reached only through the longer encoding's link).
        assert {e.item for e in got} == {str(first), str(second), str(third)}
    assert await memory.history(third, folded=True) == got


async def test_history_from_the_log_of_short_and_long_chains(laser: lm.Laser):
    # A chain of a few items is found by searching every record's bytes for each id; a
    # longer one by decoding every record. Both give what a replay of everything gives.
    from folders.replay import _SEARCHED_CHAIN, chain_history, history_from_log, item_history

    memory = laser.memory("notes", tenant="acme")
    chains = []
    for length in (_SEARCHED_CHAIN - 1, _SEARCHED_CHAIN + 3):
        chain = [await memory.remember(f"version 0 of {length}")]
        for version in range(1, length):
            await memory.remember(f"noise {length}-{version}", conversation="other")
            chain.append(
                await memory.remember(f"version {version} of {length}", supersedes=chain[-1])
            )
            await memory.improve(chain[-1], 1.0)
        chains.append(chain)
    records = await replay(laser.log, laser.memory_topic_name, namespace=memory.namespace,
                           tenant="acme")  # fmt: skip
    for chain in chains:
        for mid in chain:
            got = await history_from_log(
                laser.log, laser.memory_topic_name, memory.namespace, mid, tenant="acme"
            )
            assert got == chain_history(
                mid.bytes, lambda one: item_history(records, one, tenant="acme")
            )
            assert {e.item for e in got} == {str(m) for m in chain}


class _ViewingLog(CountingLog):
    """A log of one's own whose records' values are memoryviews, not bytes."""

    async def read(self, *args, **kwargs) -> AsyncIterator[list[LogRecord]]:
        async for batch in super().read(*args, **kwargs):
            yield [
                msgspec.structs.replace(r, value=memoryview(r.value))  # type: ignore[arg-type]
                for r in batch
            ]


async def test_history_from_a_log_handing_out_memoryviews(tmp_path):
    # `in` over a memoryview compares integers and finds no id: such values are decoded
    # rather than searched, so the history is the same as from the embedded log's bytes.
    from folders.replay import history_from_log

    async with lm.Laser(_ViewingLog(tmp_path / "log"), stream="s") as laser:
        memory = laser.memory("notes")
        first = await memory.remember("the first version")
        second = await memory.remember("the second", supersedes=first)
        await memory.improve(second, 1.0)
        await memory.set("profile", {"a": 1})
        plain = LocalLog(tmp_path / "log")
        async with plain:
            for target in (first, second, "profile"):
                got = await history_from_log(
                    laser.log, memory.topic, memory.namespace, target, tenant=""
                )
                assert got
                assert got == await history_from_log(
                    plain, memory.topic, memory.namespace, target, tenant=""
                )


def lm_decode(value: bytes):
    from laser_memory.records import decode_record

    return decode_record(value)


class _UntimedLog(CountingLog):
    """A log of one's own that cannot find where a moment falls (no `TimeIndexedLog`)."""

    offsets_for_time = None


@pytest.mark.parametrize("log_type", [CountingLog, _UntimedLog])
async def test_a_replay_since_a_moment_reads_from_there(tmp_path, log_type):
    # A replay of the last hour of a long log read the whole log to keep the hour: both
    # replays start each partition where the log's time index says the moment falls,
    # and give what a replay of everything, filtered, gives. A log without the index is
    # read from its start, with the same answer.
    from laser_memory.clock import SteppedClock
    from laser_memory.log import LocalLogConfig, TimeIndexedLog

    clock = SteppedClock(1_700_000_000_000)
    log = log_type(tmp_path / "log", LocalLogConfig(clock=clock))
    assert isinstance(log, TimeIndexedLog) == (log_type is CountingLog)
    async with lm.Laser(log, stream="s") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        for hour in range(4):
            await memory.remember_many([f"hour {hour} fact {i}" for i in range(1000)])
            clock.step(3_600_000)
        since = clock.now_ms() - 3_600_000 - 1  # the last hour's batch
        everything = await replay(log, memory.topic)
        expected = [r for r in everything if r.log_record.append_time_ms >= since]
        assert len(expected) == 1000
        for read in (replay, _streamed):
            log.handed_out = 0
            got = await read(log, memory.topic, since_ms=since)
            assert _positions(got) == _positions(expected)
            assert log.handed_out == (1000 if log_type is CountingLog else 4000)
        # With until too: the records between.
        got = await _streamed(log, memory.topic, since_ms=since, until_ms=since + 10)
        assert _positions(got) == _positions(expected)


async def test_a_stream_of_a_topic_created_again_meanwhile_ends_with_unknown_topic(
    laser: lm.Laser, monkeypatch: pytest.MonkeyPatch
):
    # Each batch is a read of its own: without a check, a stream went on reading the new
    # topic's records at the old topic's offsets, as if they were one log.
    monkeypatch.setattr(replay_module, "STREAM_HELD_RECORDS", 40)
    memory = laser.memory("notes")
    await memory.remember_many([f"old fact {i}" for i in range(200)])
    stream = replay_stream(laser.log, memory.topic)
    first = await anext(stream)
    assert first.record.body.startswith(b"old fact")
    info = await laser.log.describe_topic(memory.topic)
    await laser.log.delete_topic(memory.topic)
    await laser.log.create_topic(memory.topic, partitions=info.partitions)
    await memory.remember_many([f"new fact {i}" for i in range(200)])
    with pytest.raises(lm.UnknownTopic, match="deleted and created again"):
        async for logged in stream:
            assert logged.record.body.startswith(b"old fact")


async def test_a_followed_stream_gives_what_is_appended_after_it_began(laser: lm.Laser):
    # An operator's tail of the memory: the replay, then each record appended since, as
    # it comes, of the tenant and namespace asked for only.
    acme, globex = laser.memory("notes", tenant="acme"), laser.memory("notes", tenant="globex")
    before = await acme.remember("before the stream")
    stream = replay_stream(
        laser.log, acme.topic, namespace=acme.namespace, tenant="acme", follow=True
    )
    try:
        assert (await anext(stream)).record.id == before.bytes
        await globex.remember("globex's, never shown")
        later = [await acme.remember(f"later {i}", conversation=f"c{i}") for i in range(6)]
        seen = [(await asyncio.wait_for(anext(stream), 30)).record.id for _ in later]
        assert sorted(seen) == sorted(m.bytes for m in later)
    finally:
        await stream.aclose()
    log, topic = laser.log, acme.topic
    for kwargs in ({"until_ms": 5}, {"until": {0: 1}}, {"follow": "yes"}):
        with pytest.raises(lm.InvalidInput):
            await _streamed(log, topic, **({"follow": True} | kwargs))


async def test_a_followed_stream_of_a_topic_created_again_ends_with_unknown_topic(
    laser: lm.Laser,
):
    memory = laser.memory("notes")
    await memory.remember("before")
    stream = replay_stream(laser.log, memory.topic, follow=True)
    try:
        await anext(stream)
        info = await laser.log.describe_topic(memory.topic)
        await laser.log.delete_topic(memory.topic)
        await laser.log.create_topic(memory.topic, partitions=info.partitions)
        await memory.remember("in the new topic")
        with pytest.raises(lm.UnknownTopic):
            await asyncio.wait_for(anext(stream), 60)
    finally:
        await stream.aclose()


async def test_the_stream_merges_partitions_whose_first_records_come_in_any_order(tmp_path):
    # Partition 3's first record first, partition 0's last: the merge must order the
    # partitions' heads by time from the start, not by partition.
    from laser_memory.clock import SteppedClock
    from laser_memory.log import LocalLogConfig

    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path / "log", LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=4)
        for round_ in range(3):
            for partition in (3, 1, 2, 0) if round_ == 0 else (0, 2, 3, 1):
                await log.append("t", OutgoingRecord(b"x", partition=partition))
                clock.step(5)
        streamed = await _streamed(log, "t")
        gathered = await replay(log, "t")
    assert _positions(streamed)[:4] == [(3, 0), (1, 0), (2, 0), (0, 0)]
    assert _positions(streamed) == _positions(gathered)


class _RecreatedAfterOneRead(LocalLog):
    """The embedded log, deleting its topic and creating it again, with a record of its
    own, once the first read of it has ended: as if someone did while a history read."""

    reads = 0

    async def read(self, topic, *args, **kwargs) -> AsyncIterator[list[LogRecord]]:
        async for batch in super().read(topic, *args, **kwargs):
            yield batch
        self.reads += 1
        if self.reads == 1:
            info = await self.describe_topic(topic)
            await self.delete_topic(topic)
            await self.create_topic(topic, partitions=info.partitions)
            await self.append(topic, OutgoingRecord(b"of the new topic", key=b"k"))


async def test_a_history_whose_topic_is_created_again_between_its_reads_is_unknown_topic(
    tmp_path,
):
    from folders.replay import history_from_log

    log = _RecreatedAfterOneRead(tmp_path / "log")
    async with lm.Laser(log, stream="s") as laser:
        memory = laser.memory("notes")
        old = await memory.remember("the office is in Leeds")
        new = await memory.remember("the office is in York", supersedes=old)
        with pytest.raises(lm.UnknownTopic, match="while its history was being read"):
            await history_from_log(log, memory.topic, memory.namespace, new, tenant="")


async def test_a_handles_replay_is_its_tenants_records_with_its_read_grant(laser: lm.Laser):
    import datetime as dt

    from laser_memory.access import Principal

    acme, globex = laser.memory("notes", tenant="acme"), laser.memory("notes", tenant="globex")
    first = await acme.remember("acme's first")
    await globex.remember("globex's, never shown to acme")
    await asyncio.sleep(0.01)
    second = await acme.remember("acme's second", conversation="c1")
    await acme.set("profile", {"plan": "pro"})

    async def replayed(memory, **kwargs) -> list[LoggedRecord]:
        return [logged async for logged in memory.replay(**kwargs)]

    records = await replayed(acme)
    assert [r.record.scope.tenant for r in records] == ["acme"] * 3
    assert _positions(records) == _positions(
        await replay(laser.log, acme.topic, namespace=acme.namespace, tenant="acme")
    )
    since = dt.datetime.fromtimestamp(second.receipt.append_time_ms / 1000, dt.UTC)
    # Both in that millisecond or after (in one, the lower partition comes first).
    assert sorted(r.record.body for r in await replayed(acme, since=since)) == [
        b"acme's second",
        b'{"plan":"pro"}',
    ]
    until = first.receipt.append_time_ms  # milliseconds, as an int
    assert [r.record.body for r in await replayed(acme, until=until)] == [b"acme's first"]
    assert len(await replayed(acme, since=since.timestamp(), until=since)) >= 1
    # An unbound handle names its tenant, or reads the default one's.
    unbound = laser.memory("notes")
    assert len(await replayed(unbound, tenant="globex")) == 1
    assert await replayed(unbound) == []
    for memory, kwargs, error in (
        (acme, {"tenant": "globex"}, lm.AccessDenied),
        (acme, {"since": dt.datetime(2026, 1, 1)}, lm.InvalidInput),  # naive: local time?
        (acme, {"until": "yesterday"}, lm.InvalidInput),
        (acme, {"follow": True, "until": until}, lm.InvalidInput),
        (
            laser.memory(
                "notes", principal=Principal("agent", tenant="acme", grants={"publish:*"})
            ),
            {},
            lm.AccessDenied,
        ),
        (laser.memory("stream:nowhere/notes"), {}, lm.UnknownTopic),
    ):
        with pytest.raises(error):
            await replayed(memory, **kwargs)
    reader = laser.memory(
        "notes", principal=Principal("auditor", tenant="acme", grants={"kv:read:*"})
    )
    assert len(await replayed(reader)) == 3


@pytest.mark.kafka
async def test_a_stream_over_many_partitions_on_kafka_uses_one_consumer(
    kafka_bootstrap, monkeypatch: pytest.MonkeyPatch
):
    # Each batch is a read of its own, closed at once: its consumer goes back to the
    # log's idle ones before the next read takes one. Left to the garbage collector,
    # every partition's read held a consumer (a broker connection) of its own.
    monkeypatch.setattr(replay_module, "STREAM_HELD_RECORDS", 80)
    url, stream = f"kafka://{kafka_bootstrap}", f"s{random.getrandbits(40)}"
    async with lm.connect(url, stream=stream) as laser:
        await laser.bootstrap(partitions=8)
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {i}" for i in range(400)])
        log = laser.log
        before = len(log._idle_consumers)  # the end offsets' of the writes so far
        streamed = await _streamed(log, memory.topic)
        assert len(streamed) == 400
        assert not log._busy_consumers and len(log._idle_consumers) == max(before, 1)


async def test_a_tenants_snapshot_folds_its_records_alone_and_answers_the_same(
    laser: lm.Laser,
):
    # A bound handle's as_of folds only its tenant's records (it answers no other), and
    # gives what a snapshot of every tenant gives for that tenant.
    rng = random.Random(3)
    tenants = ("acme", "globex", "initech")
    written = {t: [] for t in tenants}
    for step in range(60):
        tenant = rng.choice(tenants)
        memory = laser.memory("notes", tenant=tenant)
        if written[tenant] and rng.random() < 0.3:
            await memory.improve(rng.choice(written[tenant]), 1.0)
        elif rng.random() < 0.2:
            await memory.set(f"k{step % 4}", {"step": step, "tenant": tenant})
        else:
            written[tenant].append(
                await memory.remember(f"{tenant} fact {step} node-{step % 7}", conversation="c")
            )
    moment = written["acme"][len(written["acme"]) // 2]
    everyone = await laser.memory("notes").as_of(moment)
    for tenant in tenants:
        bound = await laser.memory("notes", tenant=tenant).as_of(moment)
        assert bound._state.tenant == tenant
        assert bound._state.applied < everyone._state.applied  # the others' passed over
        for query in ({}, {"text": "node-3 fact"}, {"strategy": "recent"}):
            mine = await bound.recall(**query)
            theirs = await everyone.recall(tenant=tenant, **query)
            assert [(i.id, i.score) for i in mine] == [(i.id, i.score) for i in theirs]
        assert bound.named() == everyone.named(tenant=tenant)
        assert bound.positions == everyone.positions
        with pytest.raises(lm.AccessDenied):
            await bound.recall(tenant="nobody")


@pytest.mark.parametrize("log_type", [CountingLog, _UntimedLog])
async def test_reads_up_to_a_moment_stop_there_where_times_are_ordered(tmp_path, log_type):
    # On the embedded log a partition's times never step back, so a snapshot or replay
    # up to a moment stops where the moment falls: an early moment of a long log costs
    # the records before it, not the whole log. Answers as a full read's.
    from laser_memory.clock import SteppedClock
    from laser_memory.log import LocalLogConfig

    clock = SteppedClock(1_700_000_000_000)
    log = log_type(tmp_path / "log", LocalLogConfig(clock=clock))
    async with lm.Laser(log, stream="s") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        hours = []
        for hour in range(4):
            ids = await memory.remember_many([f"hour {hour} fact {i}" for i in range(1000)])
            hours.append((ids, clock.now_ms()))
            clock.step(3_600_000)
        moment = hours[1][1]  # the end of the second hour's batch
        log.handed_out = 0
        then = await memory.as_of(moment)
        assert log.handed_out == (2000 if log_type is CountingLog else 4000)
        newest = {i.id for i in await then.recall(limit=1000, strategy="recent")}
        assert newest == set(hours[1][0])  # the newest then: the second hour's
        for hour, expected in ((0, True), (2, False)):
            found = await then.recall(text=f"hour {hour} fact 5", strategy="keyword")
            assert (hours[hour][0][5] in {i.id for i in found}) is expected
        by_receipt = await memory.as_of(hours[0][0][-1])  # a receipt of the first hour
        assert {i.id for i in await by_receipt.recall(limit=1000)} == set(hours[0][0])
        for read in (replay, _streamed):
            log.handed_out = 0
            got = await read(log, memory.topic, until_ms=moment)
            assert len(got) == 2000
            assert log.handed_out == (2000 if log_type is CountingLog else 4000)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    writes=st.lists(
        st.tuples(
            st.integers(0, 3),  # the partition
            st.integers(-5, 20),  # the clock's step before it (back, still, on)
            st.integers(1, 4),  # records in the batch
        ),
        max_size=40,
    ),
    held=st.integers(4, 60),
    since=st.integers(-10, 200),
    span=st.integers(0, 200),
)
def test_any_log_streams_in_replays_order_within_its_bounds(writes, held, since, span):
    # Property: over any placement of records in partitions and any clock (stepping back
    # too: the embedded log keeps each partition's times from going back), a stream holding
    # any batch size gives what a replay gives, and both give what a plain read of the
    # log keeps between two moments, sorted by (time, partition, offset).
    from laser_memory.clock import SteppedClock
    from laser_memory.log import LocalLogConfig

    async def run() -> None:
        with tempfile.TemporaryDirectory() as path:
            base = 1_700_000_000_000
            clock = SteppedClock(base)
            async with LocalLog(path, LocalLogConfig(clock=clock)) as log:
                await log.create_topic("t", partitions=4)
                for partition, step, count in writes:
                    clock.step(step)
                    await log.append_batch("t", [OutgoingRecord(b"x", partition=partition)] * count)
                every = [r async for batch in log.read("t") for r in batch]
                bounds = {"since_ms": max(0, base + since), "until_ms": max(0, base + since + span)}
                expected = sorted(
                    (r.append_time_ms, r.partition, r.offset)
                    for r in every
                    if bounds["since_ms"] <= r.append_time_ms <= bounds["until_ms"]
                )
                kept = replay_module.STREAM_HELD_RECORDS
                replay_module.STREAM_HELD_RECORDS = held
                try:
                    for read in (replay, _streamed):
                        got = await read(log, "t", **bounds)
                        assert [
                            (r.log_record.append_time_ms, *_positions([r])[0]) for r in got
                        ] == expected
                finally:
                    replay_module.STREAM_HELD_RECORDS = kept

    asyncio.run(run())
