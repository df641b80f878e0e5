"""What a memory holds never depends on a clock: a forget forgets exactly the remembers
its writer could see, on both logs, with clocks stepped back and writes in one
millisecond; append times, retention and receipts behave as documented."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.clock import SteppedClock
from laser_memory.log import KafkaLogConfig, LocalLog, LocalLogConfig, OutgoingRecord
from log_conformance import read_all

SECOND = 1000


async def _everywhere(laser: lm.Laser, tmp_path: Path, **query) -> dict[str, list[str]]:
    """What folded recall (fresh handle), managed recall and as_of(now) each return."""
    memory = laser.memory("notes")
    view = tmp_path / f"view-{random.getrandbits(32)}"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as reader:
        managed = [i.text for i in await reader.memory("notes").recall(**query)]
    snapshot = await memory.as_of(await laser.log.end_offsets(memory.topic))
    return {
        "folded": [i.text for i in await laser.memory("notes").recall(folded=True, **query)],
        "managed": managed,
        "as_of": [i.text for i in await snapshot.recall(**query)],
    }


def _agree(results: dict[str, list[str]], expected: list[str]) -> None:
    assert results == dict.fromkeys(results, expected)


@contextlib.asynccontextmanager
async def stepped(tmp_path: Path):
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", clock=clock) as laser:
        await laser.bootstrap(partitions=4)
        yield laser, clock


async def test_a_clock_stepped_back_cannot_resurrect_a_forgotten_item(tmp_path):
    async with stepped(tmp_path) as (laser, clock):
        memory = laser.memory("notes")
        secret = await memory.remember("the door code is 4021", conversation="c1")
        clock.step(-20)  # the forget, in another partition, gets an earlier append time
        forget = await memory.forget(secret)  # no conversation: every conversation
        assert forget.partition != secret.receipt.partition
        assert forget.append_time_ms < secret.receipt.append_time_ms
        _agree(await _everywhere(laser, tmp_path), [])


async def test_a_remember_after_a_forget_brings_it_back_even_with_an_earlier_time(tmp_path):
    async with stepped(tmp_path) as (laser, clock):
        memory = laser.memory("notes")
        mid = await memory.remember("node-7 is in eu-west", conversation="c1")
        await memory.forget(mid)
        clock.step(-50)
        again = await memory.append(mid, "node-7 is in eu-west", kind="fact", conversation="c1")
        assert again.receipt.append_time_ms < mid.receipt.append_time_ms + 1
        _agree(await _everywhere(laser, tmp_path), ["node-7 is in eu-west"])


async def test_writes_in_one_millisecond_keep_their_order(tmp_path):
    async with stepped(tmp_path) as (laser, _frozen):
        memory = laser.memory("notes")
        a = await memory.remember("a", conversation="c1")
        b = await memory.remember("b", conversation="c2")
        await memory.forget(a)
        await memory.append(a, "a again", kind="fact", conversation="c2")
        await memory.forget(b, conversation="c2")
        results = await _everywhere(laser, tmp_path, strategy="recent")
        _agree(results, ["a again"])
        # A receipt names one write exactly in its partition, where a time cannot: the
        # millisecond holds every write of this test.
        c = await memory.remember("c", conversation="c3")
        gone = await memory.forget(c, conversation="c3")
        assert c.receipt.append_time_ms == gone.append_time_ms
        assert [i.text for i in await (await memory.as_of(c)).recall(conversation="c3")] == ["c"]
        assert await (await memory.as_of(gone)).recall(conversation="c3") == []


async def test_a_forget_forgets_only_what_was_written_before_it(laser: lm.Laser, tmp_path):
    """Over both logs, as fast as the log takes writes (often one millisecond apart)."""
    memory = laser.memory("notes")
    for round_ in range(5):
        mid = await memory.remember(f"fact {round_}", conversation=f"c{round_}")
        await memory.forget(mid)
        await memory.append(mid, f"fact {round_} again", kind="fact", conversation="other")
        await memory.forget(mid, conversation=f"c{round_}")  # that conversation only
    expected = [f"fact {r} again" for r in reversed(range(5))]
    _agree(await _everywhere(laser, tmp_path, strategy="recent"), expected)


async def test_a_forget_from_before_seen_existed_still_uses_append_times(tmp_path):
    """Forgets written by earlier releases carry no `seen`: across partitions, one in
    the same millisecond as a remember counts as after it, an earlier one does not."""
    from laser_memory.records import Forget, encode_record

    async with stepped(tmp_path) as (laser, clock):
        memory = laser.memory("notes")
        kept = await memory.remember("kept", conversation="c1")
        gone = await memory.remember("gone", conversation="c1")

        async def legacy_forget(mid: lm.MemoryId) -> None:
            record = Forget(ns=memory.namespace, scope=lm.MemoryScope(stream="s"), target=mid.bytes)
            wire = encode_record(record)
            await laser.log.append(
                memory.topic, OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)
            )

        clock.step(-1)
        await legacy_forget(kept)  # a millisecond earlier: before the remember
        clock.step(1)
        await legacy_forget(gone)  # the same millisecond: after it
        _agree(await _everywhere(laser, tmp_path), ["kept"])


async def test_a_forget_from_before_seen_existed_follows_offsets_in_its_partition(tmp_path):
    """In the forget's own partition its offset says what came before it, whatever the
    clock: a remember written after it in the same millisecond stays, one written before
    it goes. (Only the first case tells offsets from append times, and no test had it.)"""
    from laser_memory.records import Forget, encode_record

    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", clock=clock) as laser:
        await laser.bootstrap(partitions=1)
        memory = laser.memory("notes")

        async def legacy_forget(mid: lm.MemoryId) -> None:
            record = Forget(ns=memory.namespace, scope=lm.MemoryScope(stream="s"), target=mid.bytes)
            wire = encode_record(record)
            await laser.log.append(
                memory.topic, OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)
            )

        gone = await memory.remember("gone", conversation="c1")
        await legacy_forget(gone)
        renewed = lm.MemoryId.new()
        await legacy_forget(renewed)
        await memory.append(renewed, "renewed", kind="fact", conversation="c1")
        _agree(await _everywhere(laser, tmp_path), ["renewed"])


async def test_a_forget_that_saw_fewer_partitions_spares_the_ones_it_did_not_see(tmp_path):
    """A forget written before partitions were added lists the offsets of the partitions
    there were: remembers in the others are after it (no test had such a forget; the
    check that keeps a read from looking past its list could go unseen)."""
    from laser_memory.records import Forget, encode_record

    async with stepped(tmp_path) as (laser, _):
        memory = laser.memory("notes")
        mid = lm.MemoryId.new()
        placed = {}
        for conversation in (f"c{n}" for n in range(40)):
            receipt = await memory.append(mid, conversation, kind="fact", conversation=conversation)
            placed.setdefault(receipt.receipt.partition, conversation)
            if {0, 1} <= placed.keys():
                break
        ends = await laser.log.end_offsets(memory.topic)
        # Seen when the topic had one partition: it ends partition 0's remembers only.
        record = Forget(
            ns=memory.namespace, scope=lm.MemoryScope(stream="s"), target=mid.bytes, seen=(ends[0],)
        )
        wire = encode_record(record)
        await laser.log.append(
            memory.topic,
            OutgoingRecord(wire.value, key=wire.key, headers=wire.headers, partition=0),
        )
        _agree(await _everywhere(laser, tmp_path, conversation=placed[0]), [])
        _agree(await _everywhere(laser, tmp_path, conversation=placed[1]), [placed[1]])


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("sweep", ["forget_expired", "purge", "consolidate"])
async def test_a_forget_decided_on_a_fold_leaves_a_renewal_written_meanwhile(
    tmp_path, monkeypatch, sweep, partitions
):
    """Expiry, purge and consolidation forget what their handle's fold showed them. A
    remember of the same item written after that fold and before their forgets (a
    renewal) was forgotten with it: purge and consolidation forgot up to the log's end,
    and in the forget's own partition (always, with one partition) every forget ended
    what came before it. It stays now, in every read."""
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", clock=clock) as laser:
        await laser.bootstrap(partitions=partitions)
        memory = laser.memory("notes")
        mid = await memory.append(
            lm.MemoryId.new(),
            "door code 4471",
            kind="message",
            conversation="c1",
            ttl=1.0 if sweep == "forget_expired" else None,
        )
        clock.step(10 * SECOND)
        other = laser.memory("notes")

        async def renew() -> None:
            await other.append(mid, "door code 5582", kind="message", conversation="c1")

        if sweep == "consolidate":

            async def summarize(bodies: list[bytes]) -> str:
                await renew()  # a slow summarizer: the message is renewed meanwhile
                return "a summary"

            report = await memory.consolidate(
                0, conversation="c1", summarizer=summarize, prune_summarized=True
            )
            assert report.pruned == 1
            expected = ["a summary", "door code 5582"]
        else:
            catch_up = memory._reader.catch_up

            async def renewed_after_the_fold(*args, **kwargs):
                state = await catch_up(*args, **kwargs)
                await renew()
                return state

            monkeypatch.setattr(memory._reader, "catch_up", renewed_after_the_fold)
            sweeping = memory.forget_expired() if sweep == "forget_expired" else memory.purge(5.0)
            assert await sweeping == 1
            expected = ["door code 5582"]
        _agree(await _everywhere(laser, tmp_path, conversation="c1", strategy="recent"), expected)
        # The forget is in the item's history, and the first remember stays forgotten.
        ops = [h.op for h in await laser.memory("notes").history(mid, folded=True)]
        assert ops.count("forget") == 1 and ops.count("remember") == 2


async def test_a_message_remembered_again_while_a_pass_summarized_stays(laser: lm.Laser, tmp_path):
    """Over both logs: a consolidation's forgets end what its pass read, so a message
    remembered again while the summarizer ran is kept (it was pruned with the rest), even
    when the handle itself recalled it meanwhile."""
    memory = laser.memory("notes")
    mid = await memory.append(
        lm.MemoryId.new(), "the printer jams", kind="message", conversation="c1"
    )
    other = laser.memory("notes")

    async def summarize(bodies: list[bytes]) -> str:
        await other.append(mid, "the printer jams again", kind="message", conversation="c1")
        # A recall of the consolidating handle meanwhile folds the renewal too.
        assert "the printer jams again" in [i.text for i in await memory.recall(folded=True)]
        return "printer trouble"

    report = await memory.consolidate(
        0, conversation="c1", summarizer=summarize, prune_summarized=True
    )
    assert (report.summarized, report.pruned) == (1, 1)
    _agree(
        await _everywhere(laser, tmp_path, conversation="c1", strategy="recent"),
        ["printer trouble", "the printer jams again"],
    )


async def test_as_of_a_receipt_takes_other_partitions_up_to_its_millisecond(tmp_path):
    # Just after a write: exact in its partition; elsewhere, the records appended at or
    # before its append time: one of the same millisecond is in, one a millisecond
    # later is not.
    async with stepped(tmp_path) as (laser, clock):
        memory = laser.memory("notes")
        same_time = await memory.remember("same millisecond", conversation="c1")
        receipt = await memory.remember("the write asked about", conversation="c2")
        assert same_time.receipt.partition != receipt.receipt.partition
        clock.step(1)
        await memory.remember("a millisecond later", conversation="c1")
        then = await memory.as_of(receipt)
        assert sorted(i.text for i in await then.recall()) == [
            "same millisecond",
            "the write asked about",
        ]
        by_time = await memory.as_of(receipt.receipt.append_time_ms)
        assert sorted(i.text for i in await by_time.recall()) == sorted(
            i.text for i in await then.recall()
        )


async def test_append_times_never_decrease_within_a_partition(tmp_path):
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path / "log", LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=2)
        first = await log.append("t", OutgoingRecord(b"1", partition=0))
        clock.step(-5 * SECOND)
        second = await log.append("t", OutgoingRecord(b"2", partition=0))
        other = await log.append("t", OutgoingRecord(b"3", partition=1))
        assert second.append_time_ms == first.append_time_ms
        # Another partition has no earlier record to stay after: it takes the clock.
        assert other.append_time_ms == first.append_time_ms - 5 * SECOND


async def test_retention_is_counted_in_seconds(tmp_path):
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path / "log", LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=1, retention_s=3600)
        await log.append("t", OutgoingRecord(b"old"))
        clock.step(3599 * SECOND)
        await log.append("t", OutgoingRecord(b"hour"))  # a write is what expires records
        assert [r.value for r in await read_all(log, "t")] == [b"old", b"hour"]
        clock.step(1 * SECOND)  # exactly the retention old: kept, as Kafka keeps it
        await log.append("t", OutgoingRecord(b"at"))
        assert [r.value for r in await read_all(log, "t")] == [b"old", b"hour", b"at"]
        clock.step(1)  # a millisecond past it: gone
        await log.append("t", OutgoingRecord(b"new"))
        assert [r.value for r in await read_all(log, "t")] == [b"hour", b"at", b"new"]


async def test_retention_drops_at_most_ten_thousand_records_a_partition_a_commit(tmp_path):
    # Each commit drops what expired in the partitions it writes to, bounded so that one
    # append never turns into a long cleanup (and a partition written to no more keeps
    # its old records); the next appends go on where it stopped.
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path / "log", LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=2, retention_s=60)
        await log.append_batch("t", [OutgoingRecord(b"old", partition=0)] * 25_000)
        await log.append("t", OutgoingRecord(b"other", partition=1))
        clock.step(61 * SECOND)
        for left in (15_001, 5_002, 3):
            await log.append("t", OutgoingRecord(b"new", partition=0))
            assert len(await read_all(log, "t", partitions=[0])) == left
        assert [r.value for r in await read_all(log, "t", partitions=[1])] == [b"other"]


async def test_a_folder_stops_when_cancelled_in_the_middle_of_appends(tmp_path):
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        await memory.remember("first")
        stop = asyncio.Event()

        async def write() -> None:
            while not stop.is_set():
                await memory.remember("more")
                await asyncio.sleep(0)

        writer = asyncio.create_task(write())
        try:
            for attempt in range(30):
                folder = ViewFolder(laser.log, memory.topic, tmp_path / "view")
                task = asyncio.create_task(folder.run())
                await asyncio.sleep(random.uniform(0, 0.06))
                task.cancel()
                done, _ = await asyncio.wait([task], timeout=10)
                assert done, f"the folder ignored its cancel (attempt {attempt})"
                with contextlib.suppress(asyncio.CancelledError):
                    task.result()
        finally:
            stop.set()
            await writer


async def test_a_long_lived_handle_follows_a_recreated_longer_topic(laser: lm.Laser):
    memory = laser.memory("notes")
    await memory.remember("from the old topic")
    assert [i.text for i in await memory.recall()] == ["from the old topic"]
    await laser.log.delete_topic(memory.topic)
    await laser.log.create_topic(memory.topic, partitions=4)
    for i in range(3):  # longer than before: offsets alone cannot tell
        await memory.remember(f"new {i}", conversation=None)
    assert [i.text for i in await memory.recall(strategy="recent")] == ["new 2", "new 1", "new 0"]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, pytest.param(10**400, id="1e400")])
def test_a_bad_write_deadline_is_refused(tmp_path, bad):
    # By the config itself, as its other settings are (it was InvalidInput, raised only
    # when a log was made with it).
    with pytest.raises(lm.ConfigError, match="write_timeout_s"):
        LocalLogConfig(write_timeout_s=bad)
    with pytest.raises(lm.ConfigError, match="write_timeout_s"):
        KafkaLogConfig("127.0.0.1:9092", write_timeout_s=bad)


async def test_an_embedded_append_has_a_deadline_too(tmp_path):
    import threading

    async with LocalLog(tmp_path / "log", LocalLogConfig(write_timeout_s=0.3)) as log:
        await log.create_topic("t", partitions=1)
        held, release = threading.Event(), threading.Event()

        def hold_the_write_lock() -> None:
            with log._env.begin(write=True):  # what another process's long commit does
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold_the_write_lock)
        holder.start()
        held.wait(5)
        try:
            with pytest.raises(lm.WriteTimeout, match="may or may not have landed"):
                await log.append("t", OutgoingRecord(b"blocked"))
            # Appends waiting together each get their deadline (one timer serves all).
            late = asyncio.get_running_loop().create_task(log.append("t", OutgoingRecord(b"b2")))
            await asyncio.sleep(0.1)
            outcomes = await asyncio.gather(
                late, log.append("t", OutgoingRecord(b"b3")), return_exceptions=True
            )
            assert [type(o) for o in outcomes] == [lm.WriteTimeout, lm.WriteTimeout]
        finally:
            release.set()
            holder.join()
        await log.append("t", OutgoingRecord(b"after"))
        # The late appends landed once the lock was free; never twice.
        assert [r.value for r in await read_all(log, "t")] == [b"blocked", b"b2", b"b3", b"after"]
