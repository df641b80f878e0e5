"""The log conformance suite: every log implementation must pass these same tests.

A test module subclasses `LogConformance` and provides a ``log_url`` fixture.
"""

from __future__ import annotations

import asyncio
import gc
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import AsyncIterator

import pytest

from laser_memory.errors import (
    InvalidInput,
    InvalidName,
    InvalidRecord,
    LogClosed,
    RecordTooLarge,
    TopicConflict,
    UnknownTopic,
)
from laser_memory.log import (
    Log,
    LogRecord,
    OutgoingRecord,
    TimeIndexedLog,
    connect_log,
    partition_for,
)
from laser_memory.log.batcher import AppendBatcher


async def read_all(log: Log, topic: str, **kwargs) -> list[LogRecord]:
    out: list[LogRecord] = []
    async for batch in log.read(topic, **kwargs):
        out.extend(batch)
    return out


async def following(log: Log, topic: str, until: int | None = None) -> tuple[asyncio.Task, list]:
    """A task following ``topic`` from its start (ending once it has seen ``until``
    records, if given), and the values it has seen so far; returned once it has seen
    the first."""
    seen: list[bytes] = []
    first = asyncio.Event()

    async def follow() -> None:
        async for batch in log.read(topic, follow=True):
            seen.extend(r.value for r in batch)
            first.set()
            if until is not None and len(seen) >= until:
                return

    task = asyncio.create_task(follow())
    await asyncio.wait_for(first.wait(), 20)
    return task, seen


def by_partition(records: list[LogRecord]) -> dict[int, list[LogRecord]]:
    out: dict[int, list[LogRecord]] = {}
    for record in records:
        out.setdefault(record.partition, []).append(record)
    return out


class LogConformance:
    @pytest.fixture
    async def log(self, log_url: str) -> AsyncIterator[Log]:
        async with connect_log(log_url) as log:
            yield log

    async def test_per_key_order_and_partition_placement(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=4)
        keys = [f"conversation-{i}".encode() for i in range(6)]
        for round_ in range(5):
            await log.append_batch(
                topic_name,
                [OutgoingRecord(f"{k.decode()}:{round_}".encode(), key=k) for k in keys],
            )
        records = await read_all(log, topic_name)
        assert len(records) == 30
        for key in keys:
            mine = [r for r in records if r.key == key]
            assert {r.partition for r in mine} == {partition_for(key, 4)}
            assert [r.value for r in mine] == [f"{key.decode()}:{i}".encode() for i in range(5)]

    async def test_offsets_dense_and_append_times_non_decreasing(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=3)
        for i in range(40):
            await log.append(topic_name, OutgoingRecord(b"v%d" % i, key=b"k%d" % (i % 7)))
        parts = by_partition(await read_all(log, topic_name))
        assert sum(len(v) for v in parts.values()) == 40
        ends = await log.end_offsets(topic_name)
        for partition, records in parts.items():
            assert [r.offset for r in records] == list(range(len(records)))
            times = [r.append_time_ms for r in records]
            assert times == sorted(times)
            assert ends[partition] == len(records)
        assert set(ends) == {0, 1, 2}

    async def test_offsets_for_time_find_where_a_moment_falls(self, log: Log, topic_name: str):
        # What a replay --since starts from: in each partition, the first record appended
        # at or after the moment (its end offset if none was), so that nothing before it
        # was; a moment before them all is the start, one after them all the end.
        assert isinstance(log, TimeIndexedLog)
        # Only a log whose partitions' times never step back may stop a read there.
        assert log.ordered_times is (type(log).__name__ == "LocalLog")
        await log.create_topic(topic_name, partitions=3)
        assert await log.offsets_for_time(topic_name, 0) == {0: 0, 1: 0, 2: 0}
        for round_ in range(6):
            await log.append_batch(
                topic_name,
                [OutgoingRecord(b"r%d-%d" % (round_, i), key=b"k%d" % i) for i in range(5)],
            )
            await asyncio.sleep(0.003)  # rounds in milliseconds of their own
        records = await read_all(log, topic_name)
        ends = await log.end_offsets(topic_name)
        times = sorted({r.append_time_ms for r in records})
        for moment in [0, times[0] - 1, *times, times[-1] + 1, (1 << 63) - 1]:
            expected = {
                p: min(
                    (r.offset for r in records if r.partition == p and r.append_time_ms >= moment),
                    default=ends[p],
                )
                for p in range(3)
            }
            assert await log.offsets_for_time(topic_name, moment) == expected, moment
        for bad in (-1, 1 << 63, 1.5, "0", True, None):
            with pytest.raises(InvalidInput, match="milliseconds since the epoch"):
                await log.offsets_for_time(topic_name, bad)
        with pytest.raises(UnknownTopic):
            await log.offsets_for_time(topic_name + "-missing", 0)
        with pytest.raises(InvalidName):
            await log.offsets_for_time("__bad", 0)

    async def test_headers_and_binary_values_round_trip(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=1)
        value = bytes(range(256)) * 3
        headers = (("lm-ns", b"notes"), ("raw", b"\x00\xff\xfe"), ("empty", b""))
        receipt = await log.append(topic_name, OutgoingRecord(value, key=b"\x00k", headers=headers))
        empty = await log.append(topic_name, OutgoingRecord(b"", key=None))
        [first, second] = await read_all(log, topic_name)
        assert (first.value, first.key, first.headers) == (value, b"\x00k", headers)
        assert (second.value, second.key, second.headers) == (b"", None, ())
        assert (first.offset, second.offset) == (receipt.offset, empty.offset)
        assert first.append_time_ms == receipt.append_time_ms

    async def test_each_record_of_a_batch_keeps_its_own_headers(self, log: Log, topic_name: str):
        # A batch's records mostly share one headers tuple, which a log may encode once:
        # the ones that do not must still read back with their own.
        await log.create_topic(topic_name, partitions=1)
        shared = (("lm-op", b"remember"),)
        sets = [shared, shared, (("lm-op", b"forget"),), shared, (), (("a", b"1"), ("b", b""))]
        await log.append_batch(
            topic_name, [OutgoingRecord(b"%d" % i, headers=h) for i, h in enumerate(sets)]
        )
        assert [r.headers for r in await read_all(log, topic_name)] == sets

    async def test_read_from_any_position_and_until(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=2)
        receipts = await log.append_batch(
            topic_name, [OutgoingRecord(b"%d" % i, partition=i % 2) for i in range(20)]
        )
        assert [r.partition for r in receipts] == [i % 2 for i in range(20)]
        tail = await read_all(log, topic_name, start={0: 7, 1: 9})
        assert [r.value for r in tail if r.partition == 0] == [b"14", b"16", b"18"]
        assert [r.value for r in tail if r.partition == 1] == [b"19"]
        middle = await read_all(log, topic_name, partitions=[1], start={1: 2}, until={1: 4})
        assert [(r.partition, r.offset, r.value) for r in middle] == [(1, 2, b"5"), (1, 3, b"7")]
        # A partition `until` leaves out is read up to offset 0: not at all.
        one = await asyncio.wait_for(read_all(log, topic_name, until={1: 2}), 20)
        assert [(r.partition, r.offset) for r in one] == [(1, 0), (1, 1)]
        small = []
        async for batch in log.read(topic_name, max_batch=3):
            assert 1 <= len(batch) <= 3
            assert len({r.partition for r in batch}) == 1
            small.extend(batch)
        assert len(small) == 20
        ones = [batch async for batch in log.read(topic_name, max_batch=1)]
        assert [len(batch) for batch in ones] == [1] * 20

    async def test_batch_receipts_match_what_is_read(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=3)
        records = [OutgoingRecord(b"item-%d" % i, key=b"key-%d" % i) for i in range(100)]
        receipts = await log.append_batch(topic_name, records)
        assert len(receipts) == 100
        read = {(r.partition, r.offset): r for r in await read_all(log, topic_name)}
        for record, receipt in zip(records, receipts, strict=True):
            found = read[(receipt.partition, receipt.offset)]
            assert found.value == record.value
            assert found.append_time_ms == receipt.append_time_ms
            assert receipt.topic == topic_name

    async def test_large_and_small_appends_together_keep_receipts_and_order(
        self, log: Log, topic_name: str
    ):
        # Many records for one partition and a few for another in one append, large
        # records that fill several producer batches, and appends to the same
        # partition while the first is still in flight.
        await log.create_topic(topic_name, partitions=2)
        big = b"x" * (150 << 10)
        first = [OutgoingRecord(b"a%02d" % i + big, partition=0) for i in range(20)] + [
            OutgoingRecord(b"b%d" % i, partition=1) for i in range(3)
        ]
        later = [
            [OutgoingRecord(b"c%d.%02d" % (n, i), partition=0) for i in range(20)] for n in range(3)
        ]
        results = await asyncio.gather(
            log.append_batch(topic_name, first),
            *(log.append_batch(topic_name, batch) for batch in later),
        )
        read = {(r.partition, r.offset): r.value for r in await read_all(log, topic_name)}
        sent = [first, *later]
        for records, receipts in zip(sent, results, strict=True):
            assert [(r.partition, read[(r.partition, r.offset)]) for r in receipts] == [
                (record.partition, record.value) for record in records
            ]
        in_partition_0 = [read[key] for key in sorted(read) if key[0] == 0]
        assert in_partition_0 == [r.value for records in sent for r in records if r.partition == 0]

    async def test_concurrent_appends_are_all_kept(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=2)
        receipts = await asyncio.gather(
            *(log.append(topic_name, OutgoingRecord(b"%d" % i, key=b"k%d" % i)) for i in range(200))
        )
        assert len({(r.partition, r.offset) for r in receipts}) == 200
        assert sorted(int(r.value) for r in await read_all(log, topic_name)) == list(range(200))

    async def test_concurrent_appends_of_one_key_keep_call_order(
        self, log: Log, log_url: str, topic_name: str
    ):
        await log.create_topic(topic_name, partitions=3)
        # A fresh connection: its first appends must not overtake each other while it
        # learns the topic's shape.
        async with connect_log(log_url) as fresh:
            await asyncio.gather(
                *(
                    fresh.append(topic_name, OutgoingRecord(b"%d" % i, key=b"same"))
                    for i in range(100)
                )
            )
        assert [int(r.value) for r in await read_all(log, topic_name)] == list(range(100))

    async def test_follow_sees_records_appended_later(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        seen: list[bytes] = []

        async def follow() -> None:
            async for batch in log.read(topic_name, follow=True):
                seen.extend(r.value for r in batch)
                if len(seen) >= 3:
                    return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.3)
        await log.append(topic_name, OutgoingRecord(b"after-1"))
        await log.append(topic_name, OutgoingRecord(b"after-2"))
        await asyncio.wait_for(task, 20)
        assert seen == [b"before", b"after-1", b"after-2"]

    async def test_reopen_after_close_keeps_records(self, log_url: str, topic_name: str):
        async with connect_log(log_url) as log:
            await log.create_topic(topic_name, partitions=2)
            await log.append_batch(
                topic_name, [OutgoingRecord(b"a", key=b"1"), OutgoingRecord(b"b", key=b"2")]
            )
            info = await log.describe_topic(topic_name)
        async with connect_log(log_url) as log:
            assert await log.describe_topic(topic_name) == info
            assert sorted(r.value for r in await read_all(log, topic_name)) == [b"a", b"b"]
            await log.append(topic_name, OutgoingRecord(b"c", key=b"1"))
            assert len(await read_all(log, topic_name)) == 3

    async def test_a_log_used_from_a_second_event_loop_says_so_and_stops(
        self, log_url: str, topic_name: str
    ):
        # Each asyncio.run() is a new loop, and the first one's end cancelled the log's
        # tasks: an append from the second waited for them forever, and so did stop.
        script = textwrap.dedent(
            """
            import asyncio, sys
            from laser_memory.errors import LogClosed
            from laser_memory.log import connect_log, OutgoingRecord
            url, topic = sys.argv[1:]
            log = connect_log(url)

            async def first():
                await log.start()
                await log.create_topic(topic, partitions=1)
                await log.append(topic, OutgoingRecord(b"from the first loop"))

            async def second():
                try:
                    await asyncio.wait_for(log.append(topic, OutgoingRecord(b"lost?")), 20)
                except LogClosed as exc:
                    print("refused:", exc)
                await asyncio.wait_for(log.stop(), 20)
                try:
                    await log.append(topic, OutgoingRecord(b"after the stop"))
                except LogClosed as exc:
                    print("after the stop:", exc)
                # What the first loop's log held that no task owns is released too.
                import threading
                print("threads:", [t.name for t in threading.enumerate() if "laser" in t.name])
                async with connect_log(url) as fresh:
                    records = [r.value async for b in fresh.read(topic) for r in b]
                    print("records:", records)

            asyncio.run(first())
            asyncio.run(second())
            """
        )
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, log_url, topic_name,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(done.communicate(), 120)
        assert done.returncode == 0, err.decode()[-2000:]
        assert "refused: this" in out.decode() and "another event loop" in out.decode()
        assert "records: [b'from the first loop']" in out.decode(), out.decode()
        assert "threads: []" in out.decode(), out.decode()
        assert "after the stop: the log is stopped" in out.decode(), out.decode()

    async def test_a_log_whose_loop_still_runs_is_stopped_only_from_it(
        self, log_url: str, topic_name: str
    ):
        # Stopped from another loop, it would close what the tasks of its own, still
        # running, use: refused, and it goes on serving that loop.
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever)
        thread.start()

        def there(coro):
            return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

        try:
            log = connect_log(log_url)
            there(log.start())
            with pytest.raises(LogClosed, match="another event loop, which is still open"):
                await log.stop()
            there(log.create_topic(topic_name, partitions=1))
            there(log.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
            loop.close()
        with pytest.raises(LogClosed, match="stopped"):
            await log.end_offsets(topic_name)

    async def test_a_log_stopped_once_never_starts_again(self, log_url: str):
        never_started = connect_log(log_url)
        await never_started.stop()
        with pytest.raises(LogClosed, match="was stopped"):
            await never_started.start()
        once = connect_log(log_url)
        await once.start()
        await once.stop()
        with pytest.raises(LogClosed, match="was stopped"):
            await once.start()

    async def test_two_processes_append_at_once(self, log_url: str, topic_name: str):
        async with connect_log(log_url) as log:
            await log.create_topic(topic_name, partitions=3)
        script = textwrap.dedent(
            """
            import asyncio, sys
            from laser_memory.log import connect_log, OutgoingRecord
            async def main(url, topic, who):
                async with connect_log(url) as log:
                    for start in range(0, 300, 30):
                        await asyncio.gather(*(
                            log.append(topic, OutgoingRecord(
                                f"{who}-{i}".encode(), key=f"k{i % 5}".encode()))
                            for i in range(start, start + 30)
                        ))
            asyncio.run(main(*sys.argv[1:]))
            """
        )
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                script,
                log_url,
                topic_name,
                who,
                stderr=subprocess.PIPE,
            )
            for who in ("p1", "p2")
        ]
        for proc in procs:
            _, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode == 0, err.decode()
        async with connect_log(log_url) as log:
            records = await read_all(log, topic_name)
        values = [r.value.decode() for r in records]
        assert len(values) == 600
        assert set(values) == {f"{w}-{i}" for w in ("p1", "p2") for i in range(300)}
        for partition, mine in by_partition(records).items():
            assert [r.offset for r in mine] == list(range(len(mine)))
            for who in ("p1", "p2"):
                order = [
                    int(r.value.decode().split("-")[1])
                    for r in mine
                    if r.value.startswith(who.encode())
                ]
                per_key: dict[int, list[int]] = {}
                for i in order:
                    per_key.setdefault(i % 5, []).append(i)
                assert all(v == sorted(v) for v in per_key.values()), partition

    async def test_generation_changes_when_topic_is_recreated(self, log: Log, topic_name: str):
        first = await log.create_topic(topic_name, partitions=2)
        assert first.generation
        assert (await log.describe_topic(topic_name)).generation == first.generation
        await log.append(topic_name, OutgoingRecord(b"old"))
        await log.delete_topic(topic_name)
        with pytest.raises(UnknownTopic):
            await log.describe_topic(topic_name)
        second = await log.create_topic(topic_name, partitions=2)
        assert second.generation != first.generation
        assert await read_all(log, topic_name) == []

    @pytest.mark.parametrize("again", [False, True], ids=["deleted", "recreated"])
    async def test_a_follow_read_of_a_topic_deleted_under_it_says_so(
        self, log_url: str, topic_name: str, again: bool
    ):
        """Deleted by another process while followed (and maybe created again), a topic
        ends the read with `UnknownTopic`: it used to wait for ever (both logs), or go
        on reading the new topic from the old offsets (Kafka)."""
        async with connect_log(log_url) as log, connect_log(log_url) as other:
            await log.create_topic(topic_name, partitions=1)
            await log.append(topic_name, OutgoingRecord(b"old"))
            task, seen = await following(log, topic_name)
            await other.delete_topic(topic_name)
            if again:
                await other.create_topic(topic_name, partitions=1)
            # Which of the two it was: a deleted topic said "created again" in a mutant.
            said = "deleted and created again" if again else "deleted while"
            with pytest.raises(UnknownTopic, match=said):
                await asyncio.wait_for(task, 20)
            assert seen == [b"old"]
            if again:
                # What the read found, the log's appends know: they go to the new topic
                # and their receipts say so.
                receipt = await log.append(topic_name, OutgoingRecord(b"new"))
                new = await other.describe_topic(topic_name)
                assert receipt.generation == new.generation

    async def test_receipts_name_a_topic_created_again_elsewhere_once_described(
        self, log_url: str, topic_name: str
    ):
        """A topic another process deleted and created again: once this log has described
        it (every folded recall does), its appends carry the new generation, not the
        one it learned first."""
        async with connect_log(log_url) as log, connect_log(log_url) as other:
            await log.create_topic(topic_name, partitions=1)
            first = await log.append(topic_name, OutgoingRecord(b"old"))
            await other.delete_topic(topic_name)
            second = await other.create_topic(topic_name, partitions=1)
            assert (await log.describe_topic(topic_name)).generation == second.generation
            receipt = await log.append(topic_name, OutgoingRecord(b"new"))
            assert receipt.generation == second.generation != first.generation

    async def test_create_topic_is_idempotent_and_refuses_another_shape(
        self, log: Log, topic_name: str
    ):
        info = await log.create_topic(topic_name, partitions=3, retention_s=3600)
        assert (info.name, info.partitions, info.retention_s) == (topic_name, 3, 3600)
        assert await log.create_topic(topic_name, partitions=3, retention_s=3600) == info
        with pytest.raises(TopicConflict, match="3 partitions"):
            await log.create_topic(topic_name, partitions=5)
        # Records of a topic kept an hour must never silently become a topic kept forever,
        # nor the other way round.
        with pytest.raises(TopicConflict, match="retention 3600s"):
            await log.create_topic(topic_name, partitions=3, retention_s=None)

    async def test_a_topic_whose_metrics_would_collide_is_a_conflict(
        self, log: Log, topic_name: str
    ):
        # Kafka reads a name's '.' as '_' in its metrics and refuses the second of such a
        # pair (it answered LogUnavailable, as if the broker were down); the embedded log
        # made both, so a memory moved from one log to the other could not be.
        dotted, underscored = f"{topic_name}-a.b", f"{topic_name}-a_b"
        await log.create_topic(dotted, partitions=1)
        try:
            with pytest.raises(TopicConflict, match="collides with the existing topic"):
                await log.create_topic(underscored, partitions=1)
            with pytest.raises(UnknownTopic):
                await log.describe_topic(underscored)
            assert (await log.create_topic(dotted, partitions=1)).partitions == 1
        finally:
            await log.delete_topic(dotted)
        assert (await log.create_topic(underscored, partitions=1)).partitions == 1
        await log.delete_topic(underscored)

    @pytest.mark.parametrize(
        "retention_s",
        # Past 64 bits (it failed to encode after the checks) or float's range (a raw
        # OverflowError); True is no number of seconds.
        [
            0,
            -1.0,
            float("nan"),
            float("inf"),
            True,
            2**64,
            pytest.param(10**400, id="1e400"),
            "3600",
        ],
    )
    async def test_a_bad_retention_makes_no_topic(self, log: Log, topic_name: str, retention_s):
        with pytest.raises(InvalidInput, match="retention"):
            await log.create_topic(topic_name, partitions=1, retention_s=retention_s)
        with pytest.raises(UnknownTopic):
            await log.describe_topic(topic_name)

    async def test_the_largest_record_is_taken_a_larger_one_writes_nothing(
        self, log: Log, topic_name: str
    ):
        from laser_memory.log.port import DEFAULT_MAX_RECORD_BYTES, record_size

        await log.create_topic(topic_name, partitions=1)
        largest = OutgoingRecord(b"x" * (DEFAULT_MAX_RECORD_BYTES - 20), key=b"k" * 20)
        assert record_size(largest) == DEFAULT_MAX_RECORD_BYTES
        [receipt] = await log.append_batch(topic_name, [largest])
        over = OutgoingRecord(b"x" * (DEFAULT_MAX_RECORD_BYTES - 19), key=b"k" * 20)
        with pytest.raises(RecordTooLarge, match="nothing was written"):
            await log.append_batch(topic_name, [OutgoingRecord(b"small"), over])
        # The partition keeps taking writes after a refused batch.
        [after] = await log.append_batch(topic_name, [OutgoingRecord(b"after")])
        assert after.offset == receipt.offset + 1
        assert [r.value[:5] for r in await read_all(log, topic_name)] == [b"xxxxx", b"after"]

    async def test_receipts_carry_the_topic_generation(self, log: Log, topic_name: str):
        info = await log.create_topic(topic_name, partitions=2)
        receipts = await log.append_batch(topic_name, [OutgoingRecord(b"a"), OutgoingRecord(b"b")])
        assert {r.generation for r in receipts} == {info.generation}

    async def test_unknown_topic_is_a_clear_error(self, log: Log, topic_name: str):
        with pytest.raises(UnknownTopic, match=topic_name):
            await log.describe_topic(topic_name)
        with pytest.raises(UnknownTopic, match=topic_name):
            await log.append(topic_name, OutgoingRecord(b"x"))
        with pytest.raises(UnknownTopic, match=topic_name):
            await log.end_offsets(topic_name)
        with pytest.raises(UnknownTopic, match=topic_name):
            await read_all(log, topic_name)
        with pytest.raises(UnknownTopic):
            await log.delete_topic(topic_name)

    async def test_a_topic_this_log_deleted_is_unknown_to_its_appends(
        self, log: Log, topic_name: str
    ):
        # The log forgets what it learned of a topic it deletes: an append to it then
        # said UnknownTopic on the embedded log, and waited out its 30 s deadline on
        # Kafka when the log kept the deleted topic's settings.
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        await log.delete_topic(topic_name)
        for append in (
            lambda: log.append(topic_name, OutgoingRecord(b"after")),
            lambda: log.append_batch(topic_name, [OutgoingRecord(b"a"), OutgoingRecord(b"b")]),
        ):
            with pytest.raises(UnknownTopic, match=topic_name):
                await asyncio.wait_for(append(), 10)

    @pytest.mark.parametrize(
        ("arguments", "error"),
        [
            ({"start": {0: -1}}, InvalidInput),
            ({"start": {0: "3"}}, InvalidInput),
            ({"start": {0: 1.5}}, InvalidInput),
            ({"start": {0: True}}, InvalidInput),
            ({"start": {0: 1 << 64}}, InvalidInput),
            ({"start": {2: 0}}, UnknownTopic),
            ({"start": {"0": 0}}, InvalidInput),
            ({"start": [0, 1]}, InvalidInput),
            ({"until": {1: -5}}, InvalidInput),
            ({"until": {9: 1}}, UnknownTopic),
            ({"partitions": ["0"]}, InvalidInput),
            ({"partitions": [True]}, InvalidInput),
            ({"partitions": 0}, InvalidInput),
            ({"max_batch": 0}, InvalidInput),
            ({"max_batch": 2.0}, InvalidInput),
            ({"follow": "yes"}, InvalidInput),
        ],
    )
    async def test_bad_read_arguments_are_clear_errors(
        self, log: Log, topic_name: str, arguments: dict, error: type[Exception]
    ):
        await log.create_topic(topic_name, partitions=2)
        await log.append(topic_name, OutgoingRecord(b"x", key=b"k"))
        with pytest.raises(error):
            async for _ in log.read(topic_name, **arguments):
                pass

    @staticmethod
    async def refuses_every_call(log: Log, topic: object, says: str) -> None:
        """Every call of ``log`` naming ``topic`` raises `InvalidName` saying ``says``."""

        async def read() -> None:
            async for _ in log.read(topic):
                pass

        for call in (
            lambda: log.create_topic(topic, partitions=1),
            lambda: log.describe_topic(topic),
            lambda: log.end_offsets(topic),
            lambda: log.delete_topic(topic),
            lambda: log.append(topic, OutgoingRecord(b"x")),
            read,
        ):
            with pytest.raises(InvalidName, match=says):
                await call()

    @pytest.mark.parametrize("topic", [5, None, b"t", ["t"], 1.5])
    async def test_a_topic_that_is_no_str_is_a_clear_error(self, log: Log, topic):
        await self.refuses_every_call(log, topic, "topic name is a str|not a valid topic name")

    @pytest.mark.parametrize(
        "topic", ["", "a" * 600, "\udcff", "a/b", "a\x00b", "..", "__consumer_offsets", "__x"]
    )
    async def test_a_topic_name_no_topic_may_have_is_invalid_and_fails_alone(
        self, log: Log, topic_name: str, topic: str
    ):
        # Such names reached the lookup: an empty or over-long one raised LMDB's bad key
        # size as LogUnavailable ("the file may be damaged") and a surrogate a raw
        # UnicodeEncodeError, and in an append it failed every appended with it. A name of
        # Kafka's internal topics ('__' first) made a broker create '__consumer_offsets'
        # as an ordinary topic, where consumer groups keep their offsets.
        await self.refuses_every_call(log, topic, "not a valid topic name")
        await log.create_topic(topic_name, partitions=1)
        results = await asyncio.gather(
            *(log.append(topic_name, OutgoingRecord(b"%d" % i)) for i in range(3)),
            log.append(topic, OutgoingRecord(b"bad topic")),
            *(log.append(topic_name, OutgoingRecord(b"%d" % i)) for i in range(3, 6)),
            return_exceptions=True,
        )
        assert isinstance(results[3], InvalidName)
        assert sorted(r.value for r in await read_all(log, topic_name)) == [
            b"%d" % i for i in range(6)
        ]

    async def test_a_bad_append_fails_alone(self, log: Log, topic_name: str):
        # Appends that arrive together may share a commit: one with a bad topic or bad
        # records must fail on its own, and the others land.
        await log.create_topic(topic_name, partitions=1)
        results = await asyncio.gather(
            *(log.append(topic_name, OutgoingRecord(b"%d" % i)) for i in range(5)),
            log.append(7, OutgoingRecord(b"bad topic")),
            log.append_batch(topic_name, None),
            log.append(topic_name, OutgoingRecord(b"5")),
            return_exceptions=True,
        )
        assert [type(r) for r in results[5:7]] == [InvalidName, InvalidRecord]
        assert sorted(r.value for r in await read_all(log, topic_name)) == [
            b"%d" % i for i in range(6)
        ]

    async def test_bad_partition_writes_nothing(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=2)
        with pytest.raises(InvalidRecord, match="partition 2"):
            await log.append_batch(
                topic_name,
                [OutgoingRecord(b"ok", partition=0), OutgoingRecord(b"bad", partition=2)],
            )
        assert await log.end_offsets(topic_name) == {0: 0, 1: 0}

    @pytest.mark.parametrize(
        "bad",
        [
            OutgoingRecord("text, not bytes"),
            OutgoingRecord(b"v", key="text key"),
            OutgoingRecord(b"v", headers=(("h", "text"),)),
            OutgoingRecord(b"v", headers=(("only-a-name",),)),
            OutgoingRecord(b"v", headers=None),
            OutgoingRecord(b"v", headers="h"),
            OutgoingRecord(b"v", partition="0"),
            b"raw bytes",
        ],
    )
    async def test_badly_typed_records_write_nothing(self, log: Log, topic_name: str, bad):
        await log.create_topic(topic_name, partitions=1)
        with pytest.raises(InvalidRecord):
            await log.append_batch(topic_name, [OutgoingRecord(b"fine"), bad])
        assert await log.end_offsets(topic_name) == {0: 0}

    async def test_headers_seen_before_still_count_toward_the_size_limit(
        self, log: Log, topic_name: str
    ):
        # A log may remember a headers tuple it checked; the size it remembers must be
        # the tuple's, whatever value comes with it next.
        await log.create_topic(topic_name, partitions=1)
        headers = (("big", b"h" * (1 << 20)),)
        await log.append(topic_name, OutgoingRecord(b"v" * (1 << 19), headers=headers))
        with pytest.raises(RecordTooLarge):
            await log.append(topic_name, OutgoingRecord(b"v" * (1 << 20) + b"v", headers=headers))
        with pytest.raises(InvalidRecord):
            await log.append(topic_name, OutgoingRecord(b"v", headers=(*headers, ("h", "t"))))
        assert await log.end_offsets(topic_name) == {0: 1}

    async def test_closed_log_is_a_clear_error(self, log_url: str, topic_name: str):
        log = connect_log(log_url)

        def calls():
            yield lambda: log.create_topic(topic_name, partitions=1)
            yield lambda: log.describe_topic(topic_name)
            yield lambda: log.end_offsets(topic_name)
            yield lambda: log.append(topic_name, OutgoingRecord(b"x"))
            yield lambda: log.append_batch(topic_name, [OutgoingRecord(b"x")])
            yield lambda: read_all(log, topic_name)
            yield lambda: log.delete_topic(topic_name)

        for call in calls():
            with pytest.raises(LogClosed, match="not started"):
                await call()
        await log.start()
        await log.start()
        await log.create_topic(topic_name, partitions=1)
        await log.stop()
        await log.stop()
        for call in calls():
            with pytest.raises(LogClosed, match="stopped"):
                await call()
        # Said of this log, by where it is: a process holds several.
        where = log_url.split("://", 1)[1].removeprefix("~")
        with pytest.raises(LogClosed, match=f"{type(log).__name__} .*{re.escape(where)}"):
            await log.start()
        # Nothing was written or deleted by the calls refused.
        async with connect_log(log_url) as again:
            assert await again.end_offsets(topic_name) == {0: 0}

    async def test_starts_and_stops_at_once_leave_nothing_open(self, log_url: str, topic_name: str):
        # On Kafka two starts at once each opened a producer and an admin client, and
        # the first's were never closed; a stop during a start returned, and the start
        # then left the log started with no one to stop it; a cancelled start (a timeout
        # around it) left what it had opened open.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            log = connect_log(log_url)
            await asyncio.gather(log.start(), log.start())
            await log.create_topic(topic_name, partitions=1)
            [receipt] = await log.append_batch(topic_name, [OutgoingRecord(b"x")])
            assert receipt.offset == 0
            await asyncio.gather(log.stop(), log.stop())

            stopped_while_starting = connect_log(log_url)
            starting = asyncio.create_task(stopped_while_starting.start())
            await asyncio.sleep(0)  # the start is under way
            await stopped_while_starting.stop()
            await starting
            with pytest.raises(LogClosed, match="stopped"):
                await stopped_while_starting.end_offsets(topic_name)

            cancelled = connect_log(log_url)
            starting = asyncio.create_task(cancelled.start())
            await asyncio.sleep(0)
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            # Whether or not the cancel came in time, it can be started and used.
            async with cancelled:
                assert await cancelled.end_offsets(topic_name) == {0: 1}
            del log, stopped_while_starting, cancelled, starting
            gc.collect()
            await asyncio.sleep(0.1)  # anything left open would show as its tasks end
            gc.collect()
        assert [str(w.message) for w in caught if w.category is ResourceWarning] == []

    async def test_reads_under_way_when_the_log_stops_end_with_log_closed(
        self, log_url: str, topic_name: str
    ):
        # On Kafka a follow read raised aiokafka's own ConsumerStoppedError when the log
        # stopped under it, where the embedded log raised LogClosed.
        log = connect_log(log_url)
        await log.start()
        try:
            await log.create_topic(topic_name, partitions=2)
            await log.append_batch(topic_name, [OutgoingRecord(b"a", partition=0)])
            reader, seen = await following(log, topic_name)
            assert seen == [b"a"]
        finally:
            await log.stop()
        with pytest.raises(LogClosed, match="stopped"):
            await asyncio.wait_for(reader, 20)

    async def test_appends_and_reads_begun_as_the_log_stops_end_cleanly(
        self, log: Log, log_url: str, topic_name: str
    ):
        # A stop at each loop turn of a first append (or read) to a topic on a second log:
        # on Kafka, the stop closed the clients under the append's lookup of the topic,
        # which raised a CancelledError no one had asked for, or a connection error,
        # and left its task and a connection pending. An append under way is drained (it
        # lands); one the stop came before is LogClosed; a read ends with LogClosed.
        import gc
        import warnings

        await log.create_topic(topic_name, partitions=2)
        landed = 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            for turns in range(12):
                other = connect_log(log_url)
                await other.start()
                append = asyncio.create_task(other.append(topic_name, OutgoingRecord(b"x")))
                read = asyncio.create_task(read_all(other, topic_name, follow=True))
                for _ in range(turns):
                    await asyncio.sleep(0)
                await other.stop()
                try:
                    await asyncio.wait_for(append, 20)
                    landed += 1
                except LogClosed:
                    pass
                with pytest.raises(LogClosed):
                    await asyncio.wait_for(read, 20)
            gc.collect()
            await asyncio.sleep(0.1)
        assert [str(w.message) for w in caught if "nclosed" in str(w.message)] == []
        assert sum((await log.end_offsets(topic_name)).values()) == landed > 0

    async def test_read_until_beyond_the_end_stops_at_the_end(self, log: Log, topic_name: str):
        await log.create_topic(topic_name, partitions=2)
        await log.append(topic_name, OutgoingRecord(b"only", partition=0))
        records = await asyncio.wait_for(read_all(log, topic_name, until={0: 5, 1: 3}), 20)
        assert [r.value for r in records] == [b"only"]

    async def test_a_follow_read_with_until_waits_for_the_records_up_to_it_and_ends(
        self, log: Log, topic_name: str
    ):
        # Following, a read ends once it has read up to `until`, however long the
        # records take to come; without follow it ends at once at the end (above).
        await log.create_topic(topic_name, partitions=2)
        await log.append(topic_name, OutgoingRecord(b"first", partition=0))
        got: list[bytes] = []

        async def read() -> None:
            async for batch in log.read(topic_name, follow=True, until={0: 2, 1: 1}):
                got.extend(r.value for r in batch)

        reading = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        assert got == [b"first"] and not reading.done()  # waiting for the rest
        await log.append(topic_name, OutgoingRecord(b"second", partition=0))
        await log.append(topic_name, OutgoingRecord(b"other", partition=1))
        await log.append(topic_name, OutgoingRecord(b"past until", partition=0))
        await asyncio.wait_for(reading, 20)
        assert sorted(got) == [b"first", b"other", b"second"]

    # -- appends batched by turn (AppendBatcher, what memory writes go through) ----------

    @pytest.mark.parametrize("at_once", [True, False])
    async def test_batched_callers_each_get_the_receipts_of_their_own_records(
        self, log: Log, topic_name: str, at_once: bool
    ):
        await log.create_topic(topic_name, partitions=3)
        batcher = AppendBatcher(log, at_once=at_once)
        calls = [
            [OutgoingRecord(b"%d.%d" % (i, j), key=b"k%d" % (i % 4)) for j in range(i % 3 + 1)]
            for i in range(60)
        ]
        results = await asyncio.gather(*(batcher.append_batch(topic_name, c) for c in calls))
        read = {(r.partition, r.offset): r.value for r in await read_all(log, topic_name)}
        assert len(read) == sum(len(c) for c in calls)
        for call, receipts in zip(calls, results, strict=True):
            assert [read[(r.partition, r.offset)] for r in receipts] == [o.value for o in call]
        # One key's records land in the order the calls were made.
        same_key = [r.value for r in await read_all(log, topic_name) if r.key == b"k1"]
        expected = [o.value for c in calls for o in c if o.key == b"k1"]
        assert same_key == expected

    @pytest.mark.parametrize("at_once", [True, False])
    async def test_a_refused_caller_in_a_batch_fails_alone(
        self, log: Log, topic_name: str, at_once: bool
    ):
        await log.create_topic(topic_name, partitions=2)
        batcher = AppendBatcher(log, at_once=at_once)
        results = await asyncio.gather(
            batcher.append_batch(topic_name, [OutgoingRecord(b"a")]),
            batcher.append_batch(
                topic_name, [OutgoingRecord(b"b"), OutgoingRecord(b"c", partition=9)]
            ),
            batcher.append_batch(topic_name, [OutgoingRecord("not bytes")]),
            batcher.append_batch(topic_name, [OutgoingRecord(b"d"), OutgoingRecord(b"e")]),
            return_exceptions=True,
        )
        assert [type(r) for r in results[1:3]] == [InvalidRecord, InvalidRecord]
        assert "partition 9" in str(results[1])
        assert len(results[0]) == 1 and len(results[3]) == 2
        # The refused callers wrote nothing, not even their good records.
        assert sorted(r.value for r in await read_all(log, topic_name)) == [b"a", b"d", b"e"]

    @pytest.mark.parametrize("at_once", [True, False])
    async def test_a_cancelled_caller_leaves_the_batch_to_the_others(
        self, log: Log, topic_name: str, at_once: bool
    ):
        await log.create_topic(topic_name, partitions=1)
        batcher = AppendBatcher(log, at_once=at_once)
        tasks = [
            asyncio.ensure_future(batcher.append_batch(topic_name, [OutgoingRecord(b"%d" % i)]))
            for i in range(5)
        ]
        await asyncio.sleep(0)  # every call has joined the turn's batch
        tasks[2].cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[2], asyncio.CancelledError)
        assert all(len(done[i]) == 1 for i in (0, 1, 3, 4))
        # Cancelling a wait does not take back a record already handed to the log.
        await batcher.drain()
        assert sorted(r.value for r in await read_all(log, topic_name)) == [
            b"%d" % i for i in range(5)
        ]

    async def test_after_a_burst_a_lone_append_goes_at_once_again(self, log: Log, topic_name: str):
        """A burst's batches are forgotten once sent: a later lone append goes to the log
        at once (a coroutine of its own), not into a batch a turn later, and no sent
        batch is kept."""
        await log.create_topic(topic_name, partitions=2)
        batcher = AppendBatcher(log)
        for _ in range(3):
            await asyncio.gather(
                *(batcher.append_batch(topic_name, [OutgoingRecord(b"%d" % i)]) for i in range(20))
            )
            for _ in range(3):  # the sending task ends a turn or two after its callers
                await asyncio.sleep(0)
            alone = batcher.append_batch(topic_name, [OutgoingRecord(b"alone")])
            assert not asyncio.isfuture(alone)  # sent by its caller, not joined to a batch
            assert len(await alone) == 1
        assert len(await read_all(log, topic_name)) == 63

    async def test_batched_appends_keep_the_logs_errors(self, log: Log, topic_name: str):
        batcher = AppendBatcher(log)
        results = await asyncio.gather(
            *(batcher.append_batch(topic_name, [OutgoingRecord(b"x")]) for _ in range(3)),
            return_exceptions=True,
        )
        assert [type(r) for r in results] == [UnknownTopic] * 3
        # The topic and the list are checked at the call, before anything is batched
        # (not when awaited: nothing is returned to await).
        with pytest.raises(InvalidName, match="topic name is a str"):
            batcher.append_batch(["t"], [OutgoingRecord(b"x")])
        with pytest.raises(InvalidName, match="not a valid topic name"):
            batcher.append_batch("", [OutgoingRecord(b"x")])
        with pytest.raises(InvalidRecord, match="list of OutgoingRecord"):
            batcher.append_batch(topic_name, None)
        assert await batcher.append_batch(topic_name, []) == []
        await log.create_topic(topic_name, partitions=1)
        [receipt] = await batcher.append_batch(topic_name, (OutgoingRecord(b"a tuple"),))
        assert receipt.offset == 0

    @pytest.mark.parametrize("at_once", [True, False])
    async def test_drain_waits_for_the_batches_under_way(
        self, log: Log, topic_name: str, at_once: bool
    ):
        await log.create_topic(topic_name, partitions=2)
        batcher = AppendBatcher(log, at_once=at_once)
        first = asyncio.ensure_future(batcher.append_batch(topic_name, [OutgoingRecord(b"0")]))
        waits = [
            asyncio.ensure_future(batcher.append_batch(topic_name, [OutgoingRecord(b"%d" % i)]))
            for i in range(1, 20)
        ]
        await asyncio.sleep(0)
        for wait in waits:
            wait.cancel()  # nobody waits for the receipts: drain still sees the batch sent
        await batcher.drain()
        await first
        assert sum((await log.end_offsets(topic_name)).values()) == 20
