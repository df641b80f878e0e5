"""The conformance suite over the embedded LMDB log, plus what only it promises."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading

import msgspec
import pytest

import laser_memory as lm
from folders.view import MemoryView
from laser_memory.clock import SteppedClock
from laser_memory.errors import InvalidInput, LogClosed, WriteTimeout
from laser_memory.log import LocalLog, LocalLogConfig, OutgoingRecord
from log_conformance import LogConformance, read_all


class TestLocalLog(LogConformance):
    @pytest.fixture
    def log_url(self, tmp_path) -> str:
        return f"local://{tmp_path / 'log'}"


async def test_concurrent_appends_share_durable_commits(tmp_path):
    async with LocalLog(tmp_path) as log:
        await log.create_topic("t", partitions=2)
        await asyncio.gather(*(log.append("t", OutgoingRecord(b"%d" % i)) for i in range(500)))
        assert sum((await log.end_offsets("t")).values()) == 500
        # Appends that arrive together ride one transaction (group commit).
        assert log.commits < 50


@pytest.mark.parametrize("config", [None, LocalLogConfig(sync=False)])
async def test_a_log_is_durable_unless_told_not_to_be(tmp_path, config):
    # An acknowledged append survives a power cut only if LMDB syncs its data and its
    # meta page at each commit: the default, which `connect` uses. A kill -9 test cannot
    # tell (the page cache outlives the process), so the setting itself is checked.
    log = LocalLog(tmp_path, config) if config else lm.connect(f"local://{tmp_path}").log
    async with log:
        flags = log._env.flags()
        durable = config is None
        assert (flags["sync"], flags["metasync"]) == (durable, durable)


async def test_an_append_past_its_write_timeout_says_it_may_have_landed(tmp_path):
    # Another process holds the environment's write lock, so the commit waits for it:
    # past write_timeout_s the caller is told, and the commit, once the lock is let go,
    # lands (the message says it may have), and the log goes on.
    async with LocalLog(tmp_path, LocalLogConfig(write_timeout_s=0.5)) as log:
        await log.create_topic("t", partitions=1)
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import lmdb, sys
                env = lmdb.open({str(tmp_path)!r}, max_dbs=4, map_size=64 << 30)
                txn = env.begin(write=True)
                print("holding", flush=True)
                sys.stdin.readline()
                txn.abort()
                """
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert await holder.stdout.readline() == b"holding\n"
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(WriteTimeout, match="may or may not have landed"):
                await asyncio.wait_for(log.append("t", OutgoingRecord(b"waited")), 10)
            assert asyncio.get_running_loop().time() - started < 5
        finally:
            holder.stdin.write(b"\n")
            await holder.stdin.drain()
            assert await holder.wait() == 0
        await log.append("t", OutgoingRecord(b"after"))
        assert [r.value for r in await read_all(log, "t")] == [b"waited", b"after"]


@pytest.mark.parametrize(
    ("sizes", "groups"),
    [
        # The first append's commit starts alone; the rest wait and go two records a commit.
        ([1] * 7, [[1], [1, 1], [1, 1], [1, 1]]),
        # The append that crosses the cap goes in the commit it crosses, and no more.
        ([1, 1, 2, 1, 1], [[1], [1, 2], [1, 1]]),
    ],
)
async def test_a_commit_takes_waiting_appends_up_to_max_group_records(tmp_path, sizes, groups):
    async with LocalLog(tmp_path, LocalLogConfig(max_group_records=2)) as log:
        await log.create_topic("t", partitions=1)
        receipts = await asyncio.gather(
            *(
                log.append_batch("t", [OutgoingRecord(b"%d" % i)] * size)
                for i, size in enumerate(sizes)
            )
        )
        assert log.commits == len(groups)
        # Every append lands whole, in call order.
        offsets = [r.offset for batch in receipts for r in batch]
        assert offsets == list(range(sum(sizes)))


@pytest.mark.parametrize("max_group_records", [50_000, 100])
async def test_stop_commits_every_append_made_before_it(tmp_path, max_group_records):
    log = LocalLog(tmp_path, LocalLogConfig(max_group_records=max_group_records))
    await log.start()
    await log.create_topic("t", partitions=2)
    # The first append's commit is under way when the rest come: they wait for the next,
    # or (at most 100 records a commit) for many more; stop waits for every one.
    appends = [
        asyncio.ensure_future(log.append_batch("t", [OutgoingRecord(b"%d" % i)] * (1 + i)))
        for i in range(50)
    ]
    await asyncio.sleep(0)
    await log.stop()
    receipts = await asyncio.gather(*appends)
    assert [len(r) for r in receipts] == [1 + i for i in range(50)]
    total = sum(1 + i for i in range(50))
    if max_group_records == 100:
        # A commit takes appends until it holds 100 records (the one that crosses it
        # goes too): 1,275 records need at least 12 commits, one a request at most.
        assert 12 <= log.commits <= 50
    else:
        assert 1 <= log.commits <= 2
    async with LocalLog(tmp_path) as again:
        assert sum((await again.end_offsets("t")).values()) == total


async def test_a_follower_sees_an_append_and_a_stop_at_once(tmp_path):
    # A follow read is woken by this process's commits and by the log's stop; it polls
    # only for other processes' records (here every 30 s), so it waited that long.
    log = LocalLog(tmp_path, LocalLogConfig(poll_interval_s=30.0))
    await log.start()
    await log.create_topic("t", partitions=1)
    seen: list[bytes] = []
    first = asyncio.Event()

    async def follow() -> None:
        async for batch in log.read("t", follow=True):
            seen.extend(r.value for r in batch)
            first.set()

    reading = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.2)  # the read has found nothing and waits
        await log.append("t", OutgoingRecord(b"now"))
        await asyncio.wait_for(first.wait(), 5)
        assert seen == [b"now"]
        await asyncio.sleep(0.2)
        await log.stop()
        with pytest.raises(LogClosed):
            await asyncio.wait_for(reading, 5)
    finally:
        reading.cancel()
        await log.stop()


async def test_a_cancelled_stop_fails_the_appends_no_commit_took(tmp_path):
    # A stop cancelled while it waits for appends still releases the log; appends that
    # were waiting for a commit then fail with LogClosed (they hung for ever), and the
    # one already committing lands and says so.
    log = LocalLog(tmp_path)
    await log.start()
    await log.create_topic("t", partitions=1)
    big = [OutgoingRecord(b"x" * 1000)] * 20_000
    committing = asyncio.ensure_future(log.append_batch("t", big))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(log.append("t", OutgoingRecord(b"late")))
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(log.stop())
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert len(await asyncio.wait_for(committing, 30)) == 20_000
    with pytest.raises(LogClosed, match="nothing of it was written"):
        await asyncio.wait_for(waiting, 30)
    with pytest.raises(LogClosed):
        await log.append("t", OutgoingRecord(b"after"))
    async with LocalLog(tmp_path) as again:
        assert await again.end_offsets("t") == {0: 20_000}


async def test_two_logs_on_one_folder_in_one_process_share_the_environment(tmp_path):
    async with LocalLog(tmp_path) as first, LocalLog(tmp_path) as second:
        await first.create_topic("t", partitions=1)
        await second.append("t", OutgoingRecord(b"from second"))
        assert (await first.end_offsets("t")) == {0: 1}
    async with LocalLog(tmp_path) as again:
        assert (await again.end_offsets("t")) == {0: 1}


async def test_a_topic_takes_up_to_ten_thousand_partitions(tmp_path):
    async with LocalLog(tmp_path) as log:
        with pytest.raises(InvalidInput, match="10001 partitions is more than the 10000"):
            await log.create_topic("t", partitions=10_001)
        info = await log.create_topic("t", partitions=10_000)
        assert info.partitions == 10_000
        [receipt] = await log.append_batch("t", [OutgoingRecord(b"last", partition=9_999)])
        assert (receipt.partition, receipt.offset) == (9_999, 0)


async def test_deleting_a_topic_frees_its_records(tmp_path):
    # A topic's number is never given again, so records a delete left behind could never
    # be read, and would hold their space for good.
    async with LocalLog(tmp_path) as log:
        await log.create_topic("kept", partitions=1)
        await log.append("kept", OutgoingRecord(b"stays"))
        await log.create_topic("t", partitions=3)
        await log.append_batch("t", [OutgoingRecord(b"%d" % i) for i in range(3_000)])
        await log.delete_topic("t")
        with log._env.begin() as txn:
            assert txn.stat(log._dbs["records"])["entries"] == 1
            assert txn.stat(log._dbs["heads"])["entries"] == 1
        assert [r.value for r in await read_all(log, "kept")] == [b"stays"]


async def test_a_read_across_a_missing_record_keeps_each_offset(tmp_path):
    # Reads take a partition's records as one run of offsets; a log damaged outside
    # this code (a record gone from the middle) must still read true offsets.
    async with LocalLog(tmp_path) as log:
        await log.create_topic("t", partitions=2)
        await log.append_batch("t", [OutgoingRecord(b"%d" % i, partition=0) for i in range(10)])
        # The next partition's records follow partition 0's in the file: a read of
        # partition 0 that looks key by key must stop at them.
        await log.append_batch("t", [OutgoingRecord(b"p1 %d" % i, partition=1) for i in range(3)])
        with log._env.begin(write=True) as txn:
            cursor = txn.cursor(db=log._dbs["records"])
            assert cursor.first()
            for _ in range(4):
                assert cursor.next()
            assert cursor.delete()
        read = [(r.offset, r.value) async for batch in log.read("t", partitions=[0]) for r in batch]
        assert read == [(i, b"%d" % i) for i in range(10) if i != 4]
        other = [
            (r.offset, r.value) async for batch in log.read("t", partitions=[1]) for r in batch
        ]
        assert other == [(i, b"p1 %d" % i) for i in range(3)]
        batches = [
            [(r.offset, r.value) for r in batch]
            async for batch in log.read("t", {0: 3}, max_batch=3, partitions=[0])
        ]
        assert batches == [[(3, b"3"), (5, b"5"), (6, b"6")], [(7, b"7"), (8, b"8"), (9, b"9")]]


def test_unclosed_log_warns(tmp_path):
    async def leak() -> None:
        log = LocalLog(tmp_path)
        await log.start()

    with pytest.warns(ResourceWarning, match="not stopped"):
        asyncio.run(leak())
        gc.collect()


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from laser_memory.log import LocalLog, OutgoingRecord

    async def main(path):
        async with LocalLog(path) as log:
            await log.create_topic("t", partitions=3)
            i = 0
            while True:
                batch = [OutgoingRecord(b"%d-" % (i + j) + b"x" * 500, key=b"k%d" % ((i + j) % 7))
                         for j in range(20)]
                for receipt, record in zip(await log.append_batch("t", batch), batch):
                    print(receipt.partition, receipt.offset, record.value[:12].decode(), flush=True)
                i += 20

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5])
async def test_kill_9_loses_no_acknowledged_record_and_shows_no_torn_one(tmp_path, delay):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(tmp_path), stdout=subprocess.PIPE
    )
    first = await asyncio.wait_for(proc.stdout.readline(), 60)
    await asyncio.sleep(delay + random.random() * 0.3)
    proc.send_signal(signal.SIGKILL)
    out, _ = await proc.communicate()
    out = first + out
    acknowledged = {}
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 3:  # the last line may be cut by the kill
            acknowledged[(int(parts[0]), int(parts[1]))] = parts[2]
    assert acknowledged, "the writer acknowledged nothing before the kill"
    async with LocalLog(tmp_path) as log:
        records = [r for batch in [b async for b in log.read("t")] for r in batch]
        ends = await log.end_offsets("t")
        found = {(r.partition, r.offset): r for r in records}
        for position, prefix in acknowledged.items():
            assert found[position].value.decode().startswith(prefix)
        for partition in range(3):
            mine = sorted(o for p, o in found if p == partition)
            assert mine == list(range(ends[partition]))
        for record in records:
            assert record.value.endswith(b"x" * 500)
        # The log still takes appends after the crash.
        receipt = await log.append("t", OutgoingRecord(b"after"))
        assert receipt.offset == ends[receipt.partition]


async def test_a_batch_whose_sending_is_cancelled_cancels_its_callers(tmp_path):
    from laser_memory.log.batcher import AppendBatcher

    async with LocalLog(tmp_path) as log:
        await log.create_topic("t", partitions=1)
        batcher = AppendBatcher(log)
        waits = [
            asyncio.ensure_future(batcher.append_batch("t", [OutgoingRecord(b"%d" % i)]))
            for i in range(4)
        ]
        # The calls have joined the batch; its sending task has not run its first step.
        assert len(batcher._sending) == 1
        for sending in list(batcher._sending):  # as the loop's shutdown would
            sending.cancel()
        results = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), 10)
        # The first went to the log at once (nothing was under way); the three that
        # came while it was were batched, and their batch was cancelled.
        assert results[0][0].offset == 0
        assert all(isinstance(r, asyncio.CancelledError) for r in results[1:])
        await batcher.drain()
        # The cancelled batch is closed: the next append goes out on its own.
        [receipt] = await asyncio.wait_for(batcher.append_batch("t", [OutgoingRecord(b"x")]), 10)
        assert receipt.offset == 1


async def test_a_cancelled_batch_leaves_the_next_turn_a_batch_of_its_own(tmp_path):
    """Without ``at_once`` every append joins a turn's batch: a batch whose sending was
    cancelled must not be joined by the next turn's appends (they would wait for ever)."""
    from laser_memory.log.batcher import AppendBatcher

    async with LocalLog(tmp_path) as log:
        await log.create_topic("t", partitions=1)
        batcher = AppendBatcher(log, at_once=False)
        waits = [
            asyncio.ensure_future(batcher.append_batch("t", [OutgoingRecord(b"%d" % i)]))
            for i in range(3)
        ]
        for sending in list(batcher._sending):
            sending.cancel()
        results = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), 10)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        await batcher.drain()
        [receipt] = await asyncio.wait_for(batcher.append_batch("t", [OutgoingRecord(b"x")]), 10)
        assert receipt.offset == 0
        assert [r.value for r in await read_all(log, "t")] == [b"x"]


@pytest.mark.parametrize("at_once", [True, False])
async def test_a_batch_that_may_have_landed_is_never_sent_again(tmp_path, at_once: bool):
    """Only a refusal of the input (nothing written) sends a batch's callers apart: a
    batch that timed out may have landed, and sent again it would be written twice. Its
    callers all get the log's error."""
    from laser_memory.errors import WriteTimeout
    from laser_memory.log.batcher import AppendBatcher

    class TimingOutOnce(LocalLog):
        """The embedded log, its first append of several records timing out as a
        stalled disk's would."""

        calls = 0
        timed_out = False

        async def append_batch(self, topic, records):
            TimingOutOnce.calls += 1
            if len(records) > 1 and not self.timed_out:
                self.timed_out = True
                raise WriteTimeout("the append did not finish in time")
            return await super().append_batch(topic, records)

    async with TimingOutOnce(tmp_path) as log:
        await log.create_topic("t", partitions=1)
        batcher = AppendBatcher(log, at_once=at_once)
        results = await asyncio.gather(
            *(batcher.append_batch("t", [OutgoingRecord(b"%d" % i)]) for i in range(4)),
            return_exceptions=True,
        )
        # With at_once the first call went alone (nothing was under way), the rest
        # as one batch.
        batched = results[1:] if at_once else results
        assert [type(r) for r in batched] == [WriteTimeout] * len(batched)
        assert TimingOutOnce.calls == 1 + at_once  # nothing sent again
        assert [r.value for r in await read_all(log, "t")] == ([b"0"] if at_once else [])


async def test_a_full_log_refuses_the_write_whole_and_a_larger_map_takes_it(tmp_path):
    from laser_memory.errors import LogFull, UnknownTopic
    from laser_memory.log.local import LocalLogConfig

    small = LocalLogConfig(map_size=1 << 20)
    async with LocalLog(tmp_path, small) as log:
        await log.create_topic("t", partitions=2)
        batch = [OutgoingRecord(b"x" * 2000, key=b"%d" % i) for i in range(8)]
        with pytest.raises(LogFull, match=r"map size of 1048576 bytes.*nothing of this write"):
            for _ in range(1000):
                await log.append_batch("t", batch)
        ends = await log.end_offsets("t")
        # Nothing of the refused batch landed: each partition holds whole batches only.
        assert sum(ends.values()) % len(batch) == 0
        with pytest.raises(LogFull):
            await log.append_batch("t", batch)
        assert await log.end_offsets("t") == ends
        # Making a topic is a write too: refused whole, not reported made.
        with pytest.raises(LogFull, match="nothing of this write"):
            await log.create_topic("more", partitions=10_000)
        with pytest.raises(UnknownTopic):
            await log.describe_topic("more")
    async with LocalLog(tmp_path, LocalLogConfig(map_size=4 << 20)) as log:
        receipts = await log.append_batch("t", batch)
        # The new records follow the old ones in each partition.
        assert all(r.offset >= ends[r.partition] for r in receipts)
        assert sum((await log.end_offsets("t")).values()) == sum(ends.values()) + len(batch)


def _damaged_log(path, damage) -> None:
    """A local log of 2,000 records at ``path``, then ``damage(data_file)``."""

    async def write() -> None:
        async with LocalLog(path) as log:
            await log.create_topic("t", partitions=2)
            for first in range(0, 2000, 500):
                await log.append_batch(
                    "t",
                    [
                        OutgoingRecord(b"record %d" % i, key=b"%d" % i)
                        for i in range(first, first + 500)
                    ],
                )

    asyncio.run(write())
    damage(path / "data.mdb")


def test_a_log_file_cut_short_is_refused_not_a_crash(tmp_path):
    # LMDB maps the file: reading a page past its end killed the process with SIGBUS.
    def cut(data):
        with open(data, "r+b") as file:
            file.truncate(data.stat().st_size // 2)

    _damaged_log(tmp_path, cut)
    script = textwrap.dedent(
        f"""
        import asyncio
        from laser_memory.errors import LogUnavailable
        from laser_memory.log import LocalLog

        async def main():
            try:
                async with LocalLog({str(tmp_path)!r}) as log:
                    async for batch in log.read("t"):
                        pass
            except LogUnavailable as exc:
                print("refused:", exc)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "refused:" in done.stdout and "shorter than the" in done.stdout, done.stdout


async def test_a_damaged_log_file_is_a_log_error_on_reading(tmp_path):
    def overwrite(data):
        with open(data, "r+b") as file:
            file.seek(data.stat().st_size // 2)
            file.write(b"\xff" * 8192)

    await asyncio.to_thread(_damaged_log, tmp_path, overwrite)
    from laser_memory.errors import LogUnavailable

    with pytest.raises(LogUnavailable, match=r"could not be read: .*damaged"):
        async with LocalLog(tmp_path) as log:
            async for _ in log.read("t"):
                pass


def _damage_record(log: LocalLog, index: int, damage) -> None:
    """Replace the stored bytes of the ``index``-th record of the log (in key order)
    with ``damage(bytes)``: a bit flipped on disk, which LMDB does not notice."""
    with log._env.begin(write=True) as txn:
        cursor = txn.cursor(db=log._dbs["records"])
        assert cursor.first()
        for _ in range(index):
            assert cursor.next()
        assert cursor.put(cursor.key(), damage(bytes(cursor.value())))


#: Ways a stored record is damaged: a byte its encoding never starts with, its end cut
#: off, its headers of the wrong shape.
DAMAGES = {
    "garbled": lambda stored: b"\xc1" + stored[1:],
    "cut short": lambda stored: stored[: len(stored) // 2],
    # The last header's value, bin8 b"v", made the str "vv": the same length, another type.
    "headers": lambda stored: stored[:-3] + b"\xa2vv",
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
async def test_a_record_damaged_on_disk_is_read_as_unreadable_not_a_failed_read(tmp_path, damage):
    # Failing the read with a raw DecodeError stopped every fold of the topic for good.
    # The record comes back in its place, empty, saying why; the rest read as written.
    from laser_memory.log.port import UNREADABLE_HEADER

    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=1)
        for i in range(4):
            await log.append("t", OutgoingRecord(b"%d" % i, key=b"k", headers=(("h", b"v"),)))
            clock.step(10)
        _damage_record(log, 2, damage)
        records = await read_all(log, "t")
    assert [r.offset for r in records] == [0, 1, 2, 3]
    assert [r.value for r in records] == [b"0", b"1", b"", b"3"]
    assert records[3].headers == records[0].headers == (("h", b"v"),)
    damaged = records[2]
    assert damaged.key is None
    assert [name for name, _ in damaged.headers] == [UNREADABLE_HEADER]
    assert damaged.headers[0][1]  # what failed: the decoder's own message
    # Its own time if that much could be read, else its neighbour's: in order either way.
    assert records[1].append_time_ms <= damaged.append_time_ms < records[3].append_time_ms


async def test_offsets_for_time_over_damaged_records_and_retention(tmp_path):
    # A binary search of a partition's offsets by their times: a damaged record, whose
    # time cannot be read, is taken as later than the moment (a replay from there keeps
    # it, set aside), and records retention removed are not searched.
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=1, retention_s=60)
        times = []
        for i in range(50):
            await log.append("t", OutgoingRecord(b"%d" % i))
            times.append(clock.now_ms())
            clock.step(1000)
        for damaged in (10, 11, 12, 30):
            _damage_record(log, damaged, DAMAGES["garbled"])
        found = {moment: (await log.offsets_for_time("t", moment))[0] for moment in times}
        for offset, moment in enumerate(times):
            # Each moment finds its own record, or a damaged run just before it.
            if offset in (11, 12, 13):
                assert found[moment] == 10, offset
            elif offset == 31:
                assert found[moment] == 30
            else:
                assert found[moment] == offset, (offset, found[moment])
        assert await log.offsets_for_time("t", times[-1] + 1) == {0: 50}
        clock.step(25_000)  # the first 15 records past the retention
        await log.append("t", OutgoingRecord(b"now"))
        [first, *_] = await read_all(log, "t")
        assert await log.offsets_for_time("t", 0) == {0: first.offset} and first.offset > 0


async def test_retention_passes_a_damaged_record_as_old_as_the_next(tmp_path):
    # Retention read each expired record's time: a damaged one failed the commit of
    # every append to the topic from then on. It is as old as the record after it at
    # most (times never go back in a partition), and goes with it.
    second = 1000
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=1, retention_s=60)
        await log.append_batch("t", [OutgoingRecord(b"old")] * 3)
        clock.step(30 * second)
        await log.append("t", OutgoingRecord(b"newer"))
        _damage_record(log, 0, DAMAGES["garbled"])
        _damage_record(log, 3, DAMAGES["cut short"])  # the newest: nothing readable after
        clock.step(31 * second)  # the first three past the retention, "newer" not
        await log.append("t", OutgoingRecord(b"now"))
        assert [r.value for r in await read_all(log, "t")] == [b"", b"now"]
        clock.step(60 * second)  # the damaged newest is taken as now: kept till then
        await log.append("t", OutgoingRecord(b"later"))
        assert [r.value for r in await read_all(log, "t")] == [b"", b"now", b"later"]
        clock.step(1)
        await log.append("t", OutgoingRecord(b"last"))
        assert [r.value for r in await read_all(log, "t")] == [b"later", b"last"]


async def test_retention_of_one_topic_never_reaches_another_in_the_same_commit(tmp_path):
    """Appends to several topics share a commit, and the commit runs each retention
    topic's cleanup over the partitions it touched: a topic kept for ever must lose
    nothing to a neighbour's retention of a minute. No test made such a commit, so the
    check that keeps each cleanup to its own topic could go unseen."""
    minute = 60_000
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("brief", partitions=2, retention_s=60)
        await log.create_topic("forever", partitions=2)
        for topic in ("brief", "forever"):
            await log.append_batch(topic, [OutgoingRecord(b"old", partition=p) for p in (0, 1)])
        clock.step(2 * minute)
        # Many appends to both at once: they go in a few commits, each with both topics.
        await asyncio.gather(
            *(
                log.append(topic, OutgoingRecord(b"new", partition=n % 2))
                for n in range(50)
                for topic in ("brief", "forever")
            )
        )
        forever = [r.value for r in await read_all(log, "forever")]
        assert forever.count(b"old") == 2 and forever.count(b"new") == 50
        assert {r.value for r in await read_all(log, "brief")} == {b"new"}


async def test_retention_drops_at_most_ten_thousand_records_a_partition_a_commit(tmp_path):
    """An append after a long quiet spell never turns into a long cleanup: each commit
    drops at most 10,000 expired records of a partition it writes to, and the next
    commits take the rest (no test held the bound)."""
    clock = SteppedClock(1_700_000_000_000)
    async with LocalLog(tmp_path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("t", partitions=1, retention_s=60)
        await log.append_batch("t", [OutgoingRecord(b"old")] * 10_050)
        clock.step(61_000)
        await log.append("t", OutgoingRecord(b"new"))
        assert [r.value for r in await read_all(log, "t")] == [b"old"] * 50 + [b"new"]
        await log.append("t", OutgoingRecord(b"newer"))
        assert [r.value for r in await read_all(log, "t")] == [b"new", b"newer"]


async def test_a_topics_damaged_entry_or_head_is_a_log_error_for_that_topic(tmp_path):
    # What the log keeps of a topic and of each partition, damaged on disk: every read
    # and write of the topic was a raw DecodeError. Now LogUnavailable saying what to do,
    # and appends to other topics in the same commit land.
    from laser_memory.errors import LogUnavailable

    async with LocalLog(tmp_path) as log:
        for topic in ("damaged", "headless", "fine"):
            await log.create_topic(topic, partitions=1)
            await log.append(topic, OutgoingRecord(b"x"))
        with log._env.begin(write=True) as txn:
            topics = log._dbs["topics"]
            txn.put(b"damaged", b"\xc1" + txn.get(b"damaged", db=topics)[1:], db=topics)
            cursor = txn.cursor(db=log._dbs["heads"])
            number = msgspec.msgpack.decode(txn.get(b"headless", db=topics))[0]
            key = number.to_bytes(8, "big") + (0).to_bytes(4, "big")
            assert cursor.set_key(key)
            cursor.put(key, b"\xc1")
        damaged_calls = [
            log.describe_topic("damaged"),
            log.end_offsets("damaged"),
            read_all(log, "damaged"),
            log.create_topic("damaged", partitions=1),
            # Its entry reads; its partition's head does not.
            log.end_offsets("headless"),
            read_all(log, "headless"),
        ]
        for call in damaged_calls:
            with pytest.raises(LogUnavailable, match="restore the folder from a copy") as raised:
                await call
            assert "the entry of topic 'damaged'" in str(
                raised.value
            ) or "the head of partition 0 of topic 'headless'" in str(raised.value)
        assert (await log.describe_topic("headless")).partitions == 1
        results = await asyncio.gather(
            log.append("damaged", OutgoingRecord(b"y")),
            log.append("fine", OutgoingRecord(b"y")),
            return_exceptions=True,
        )
        assert isinstance(results[0], LogUnavailable)
        assert [r.value for r in await read_all(log, "fine")] == [b"x", b"y"]
        with pytest.raises(LogUnavailable, match="the head of partition 0"):
            await log.append("headless", OutgoingRecord(b"y"))


async def test_a_forked_child_never_uses_the_parents_environment(tmp_path):
    # LMDB allows a fork only if the child never uses what the parent opened (reader
    # slots carry the opener's pid). The child used to write through the parent's
    # environment, which happened to work.
    from laser_memory.errors import LogClosed, LogUnavailable

    async with LocalLog(tmp_path / "shared") as log:
        await log.create_topic("t", partitions=1)
        await log.append("t", OutgoingRecord(b"parent"))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what each attempt did, then leave at once
            outcomes = []

            async def attempts() -> None:
                try:
                    await log.append("t", OutgoingRecord(b"through the parent's log"))
                    outcomes.append("inherited: written")
                except LogClosed as exc:
                    outcomes.append(f"inherited: {exc}")
                await log.stop()  # the child's copy stops, leaving the parent's log be
                try:
                    await log.append("t", OutgoingRecord(b"after the stop"))
                    outcomes.append("stopped: written")
                except LogClosed as exc:
                    outcomes.append(f"stopped: {exc}")
                try:
                    async with LocalLog(tmp_path / "shared") as again:
                        await again.append("t", OutgoingRecord(b"reopened"))
                    outcomes.append("reopened: written")
                except LogUnavailable as exc:
                    outcomes.append(f"reopened: {exc}")
                async with LocalLog(tmp_path / "own") as own:
                    await own.create_topic("t", partitions=1)
                    await own.append("t", OutgoingRecord(b"child"))
                outcomes.append("own: written")

            try:
                # A new loop on a thread of its own: this one is the parent's, copied.
                worker = threading.Thread(target=lambda: asyncio.run(attempts()))
                worker.start()
                worker.join(30)
                os.write(write, "\n".join(outcomes).encode())
            finally:
                os._exit(0)
        os.close(write)
        await asyncio.to_thread(os.waitpid, pid, 0)
        with os.fdopen(read, "rb") as pipe:
            outcomes = pipe.read().decode().splitlines()
        assert [line.split(":")[0] for line in outcomes] == [
            "inherited", "stopped", "reopened", "own"
        ]  # fmt: skip
        assert "started in the parent of this forked process" in outcomes[0]
        assert outcomes[1] == "stopped: the log is stopped; open a new one"
        assert "cannot open it again after a fork" in outcomes[2]
        assert outcomes[3] == "own: written"
        await log.append("t", OutgoingRecord(b"parent again"))
        assert [r.value for r in await read_all(log, "t")] == [b"parent", b"parent again"]


@pytest.mark.parametrize("under", ["", "sub"])
async def test_a_path_that_is_a_file_says_so(tmp_path, under):
    """A log or a view named at a file said only "File exists" (or "Not a directory")."""
    (tmp_path / "afile").write_bytes(b"not a folder")
    path = tmp_path / "afile" / under if under else tmp_path / "afile"
    with pytest.raises(lm.LogUnavailable, match="is a file, not a folder: name a folder"):
        async with lm.connect(f"local://{path}", stream="s") as laser:
            await laser.memory("notes").remember("x")
    with pytest.raises(lm.LogUnavailable, match="is a file, not a folder: name a folder"):
        MemoryView.open(str(path))
    assert (tmp_path / "afile").read_bytes() == b"not a folder"
