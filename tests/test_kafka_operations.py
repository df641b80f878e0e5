"""Kafka as an operator expects it: existing topics are checked, a record too large for
its topic is refused before sending, a refused batch never poisons later appends, every
write has a deadline, and a broker killed during writes loses and duplicates nothing.

The last two need a broker this module can pause and kill, so it starts its own with
``docker/kafka-local`` (whatever broker the rest of the suite uses)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import signal
import socket
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

import laser_memory as lm
from kafka_broker import kafka_local
from laser_memory.log import KafkaLog, KafkaLogConfig, OutgoingRecord, connect_log
from log_conformance import following, read_all

pytestmark = pytest.mark.kafka


@contextlib.asynccontextmanager
async def admin(bootstrap: str):
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def nothing_left_behind() -> AsyncIterator[None]:
    """Fail the test if what ran inside left a future's exception unread or a client
    unclosed: as the event loop's exception handler hears of it, or as a ResourceWarning
    once what was let go of is collected."""
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    noticed: list[dict] = []
    loop.set_exception_handler(lambda _, context: noticed.append(context))
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", ResourceWarning)
            yield
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(before)
    left = [
        context["message"]
        for context in noticed
        if "never retrieved" in context.get("message", "")
        or "nclosed" in context.get("message", "")
    ]
    left += [str(w.message) for w in warned if issubclass(w.category, ResourceWarning)]
    assert not left, left


@contextlib.contextmanager
def paused(workdir: Path) -> Iterator[None]:
    """The broker of ``own_broker`` stopped (SIGSTOP) meanwhile: its connections stay
    open, and nothing answers."""
    os.kill(_pid(workdir), signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(_pid(workdir), signal.SIGCONT)


async def _topic_config(bootstrap: str, topic: str, name: str) -> str:
    return (await _topic_config_entry(bootstrap, topic, name))[1]


async def _topic_config_entry(bootstrap: str, topic: str, name: str) -> tuple:
    """(name, value, read only, source, sensitive, synonyms): source 1 is the topic's
    own setting, 5 the broker's default."""
    async with admin(bootstrap) as client:
        [described] = await client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})]
        )
    return {entry[0]: entry for entry in described.resources[0][4]}[name]


async def test_bootstrap_refuses_a_topic_stamped_with_producer_clocks(kafka_bootstrap):
    stream = f"s{os.urandom(5).hex()}"
    async with admin(kafka_bootstrap) as client:
        await client.create_topics(
            [
                NewTopic(
                    f"{stream}.agent.memory",
                    4,
                    1,
                    topic_configs={"message.timestamp.type": "CreateTime"},
                )
            ]
        )
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        with pytest.raises(lm.TopicConflict, match="LogAppendTime"):
            await laser.bootstrap(partitions=4)
        with pytest.raises(lm.TopicConflict, match="producer clocks"):
            await laser.memory("notes").remember("would carry a producer's clock")


async def _stream_with_memory_topic(kafka_bootstrap: str, configs: dict[str, str]) -> str:
    """A new stream whose memory topic someone else made (4 partitions, broker append
    times) with these topic configs."""
    stream = f"s{os.urandom(5).hex()}"
    async with admin(kafka_bootstrap) as client:
        await client.create_topics(
            [
                NewTopic(
                    f"{stream}.agent.memory",
                    4,
                    1,
                    topic_configs={"message.timestamp.type": "LogAppendTime", **configs},
                )
            ]
        )
    return stream


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
async def test_bootstrap_refuses_a_topic_kafka_compacts(kafka_bootstrap, policy):
    """Compaction keeps the newest record of each key, and a memory topic's keys are
    scopes: such a topic was accepted, and Kafka's cleaner would have dropped the older
    memories of each conversation without a word."""
    stream = await _stream_with_memory_topic(kafka_bootstrap, {"cleanup.policy": policy})
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        with pytest.raises(lm.TopicConflict, match=re.escape(f"cleanup.policy={policy}")):
            await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        with pytest.raises(lm.TopicConflict, match="older memories, feedback and forgets"):
            await memory.remember("would be compacted away")
        with pytest.raises(lm.TopicConflict, match=r"--add-config cleanup\.policy=delete"):
            await memory.recall(folded=True)
        with pytest.raises(lm.TopicConflict):
            await laser.log.end_offsets(memory.topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(
            [TopicPartition(f"{stream}.agent.memory", p) for p in range(4)]
        )
    finally:
        await consumer.stop()
    assert set(ends.values()) == {0}  # nothing was written


@pytest.mark.parametrize("limit", ["1048576", "0"])
async def test_bootstrap_refuses_a_topic_kafka_trims_by_size(kafka_bootstrap, limit):
    """retention.bytes deletes a partition's oldest records once it grows past the
    limit, whatever time retention the topic has: such a topic was accepted, and the
    oldest memories, feedback and forgets would have gone without a word. A limit of
    0 keeps nothing at all."""
    stream = await _stream_with_memory_topic(kafka_bootstrap, {"retention.bytes": limit})
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        with pytest.raises(lm.TopicConflict, match=rf"retention\.bytes={limit}:"):
            await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        with pytest.raises(lm.TopicConflict, match=r"--add-config retention\.bytes=-1"):
            await memory.remember("would be trimmed away")
        with pytest.raises(lm.TopicConflict):
            await memory.recall(folded=True)


async def test_a_topic_whose_batches_hold_no_record_is_refused(kafka_bootstrap):
    """A topic made elsewhere with a max.message.bytes below a batch's overhead took no
    record: every append was refused as "over the -15384 bytes this log takes". It is
    a TopicConflict saying what to raise it to; one a little larger takes what fits."""
    stream = await _stream_with_memory_topic(kafka_bootstrap, {"max.message.bytes": "1000"})
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        memory = laser.memory("notes")
        with pytest.raises(lm.TopicConflict, match=r"max\.message\.bytes=1000: no record fits"):
            await memory.remember("a small fact")
        with pytest.raises(lm.TopicConflict, match=r"--add-config max\.message\.bytes="):
            await laser.bootstrap(partitions=4)
    stream = await _stream_with_memory_topic(kafka_bootstrap, {"max.message.bytes": "20000"})
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        memory = laser.memory("notes")
        await memory.remember("a small fact")
        with pytest.raises(lm.RecordTooLarge, match="over the 3616 bytes"):
            await memory.remember("x" * 5000)
        assert [i.text for i in await memory.recall()] == ["a small fact"]


async def test_a_tombstone_on_a_memory_topic_is_set_aside_as_empty(kafka_bootstrap):
    """A null value another producer sent (a tombstone) is set aside, with its position
    and a reason that says it is empty, by the in-process fold and by a replay."""
    from folders.replay import replay

    stream = f"s{os.urandom(5).hex()}"
    async with lm.connect(f"kafka://{kafka_bootstrap}", stream=stream) as laser:
        await laser.bootstrap(partitions=2)
        memory = laser.memory("notes")
        await memory.remember("kept")
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            sent = await producer.send_and_wait(laser.memory_topic_name, value=None, key=b"k")
        finally:
            await producer.stop()
        assert [i.text for i in await memory.recall(folded=True)] == ["kept"]
        [aside] = memory.set_aside
        assert (aside.position.partition, aside.position.offset) == (sent.partition, sent.offset)
        assert "its value is empty" in aside.reason
        errors = [r.error for r in await replay(laser.log, laser.memory_topic_name)]
        assert [e for e in errors if e] == [aside.reason]


async def test_a_read_that_ends_while_the_log_stops_leaves_no_consumer_open(kafka_bootstrap):
    """A read's consumer released after `stop` began (the read ended meanwhile) is still
    stopped by that stop: it used to be dropped unstopped, and the garbage collector
    later warned of an unclosed AIOKafkaConsumer in whatever test ran then."""
    log = KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap))
    await log.start()
    consumer = await log._acquire_consumer()  # one read's, busy
    # Another read's consumer still connecting: the stop waits for it before it takes
    # the consumers to stop, and the first read ends meanwhile.
    other = asyncio.ensure_future(log._acquire_consumer())
    await asyncio.sleep(0)
    assert log._starting
    stopping = asyncio.ensure_future(log.stop())
    await asyncio.sleep(0)
    assert log._starting  # the stop is waiting for it
    log._release_consumer(consumer)
    await stopping
    assert consumer._closed
    with contextlib.suppress(Exception):
        await other


async def test_topics_are_made_for_the_largest_record_and_acks_all(kafka_bootstrap, topic_name):
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1)
    max_bytes = int(await _topic_config(kafka_bootstrap, topic_name, "max.message.bytes"))
    assert max_bytes > 2 << 20
    # One broker here: one copy, so at least one in sync (two of three on a real cluster).
    assert await _topic_config(kafka_bootstrap, topic_name, "min.insync.replicas") == "1"
    # Set on the topic itself (source 1, not the broker's default 5), so a broker whose
    # default policy is compact cannot leak it in.
    entry = await _topic_config_entry(kafka_bootstrap, topic_name, "cleanup.policy")
    assert entry[1] == "delete" and entry[3] == 1, entry
    # No size limit, set on the topic too: a broker's log.retention.bytes cannot leak in.
    entry = await _topic_config_entry(kafka_bootstrap, topic_name, "retention.bytes")
    assert entry[1] == "-1" and entry[3] == 1, entry


async def test_a_record_too_large_for_its_topic_is_refused_before_sending(
    kafka_bootstrap, topic_name
):
    async with admin(kafka_bootstrap) as client:
        await client.create_topics(
            [
                NewTopic(
                    topic_name,
                    1,
                    1,
                    topic_configs={
                        "message.timestamp.type": "LogAppendTime",
                        "max.message.bytes": "100000",
                    },
                )
            ]
        )
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.append(topic_name, OutgoingRecord(b"small"))
        with pytest.raises(lm.RecordTooLarge, match="nothing was written"):
            await log.append_batch(
                topic_name, [OutgoingRecord(b"a"), OutgoingRecord(b"x" * 200_000)]
            )
        await log.append(topic_name, OutgoingRecord(b"still fine"))
        assert [r.value for r in await read_all(log, topic_name)] == [b"small", b"still fine"]


async def _alter_behind_the_logs_back(bootstrap: str, topic: str, configs: dict) -> None:
    """Set the topic's configs as an operator would, without the log knowing.
    AlterConfigs replaces the topic's whole set: ``configs`` restates what it keeps."""
    async with admin(bootstrap) as client:
        await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])


async def _shrink_behind_the_logs_back(bootstrap: str, topic: str) -> None:
    """Lower the topic's max.message.bytes to 50,000 without the log knowing: it still
    believes the larger limit, so the broker is the one to refuse."""
    await _alter_behind_the_logs_back(
        bootstrap,
        topic,
        {
            "max.message.bytes": "50000",
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "-1",
        },
    )
    await asyncio.sleep(1.0)  # config changes reach the broker asynchronously


async def test_a_batch_the_broker_refuses_never_poisons_later_appends(kafka_bootstrap, topic_name):
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        await _shrink_behind_the_logs_back(kafka_bootstrap, topic_name)
        with pytest.raises(lm.LogUnavailable, match="refused"):
            await log.append(topic_name, OutgoingRecord(b"x" * 200_000))
        # Later appends to the same partition go through (before, the idempotent producer
        # failed them all with OutOfOrderSequenceNumber until restarted) ...
        for i in range(3):
            await log.append(topic_name, OutgoingRecord(f"after {i}".encode()))
        # ... and the log now knows the smaller limit and refuses before sending.
        with pytest.raises(lm.RecordTooLarge):
            await log.append(topic_name, OutgoingRecord(b"x" * 200_000))
        values = [r.value for r in await read_all(log, topic_name)]
        assert values == [b"before", b"after 0", b"after 1", b"after 2"]


def _producer_tasks() -> list[asyncio.Task]:
    """The tasks of started aiokafka producers: each runs a sender until stopped."""
    return [
        task
        for task in asyncio.all_tasks()
        if "_sender_routine" in repr(task.get_coro()) and not task.done()
    ]


async def test_create_topic_reads_a_retention_changed_behind_the_logs_back(
    kafka_bootstrap, topic_name
):
    # An operator lengthened the retention after this log had learned the topic: asked
    # for the old retention again, create_topic must see the topic as it is now, not as
    # this log first learned it.
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1, retention_s=3600)
        await log.append(topic_name, OutgoingRecord(b"learned"))
        await _alter_behind_the_logs_back(
            kafka_bootstrap,
            topic_name,
            {
                "retention.ms": "7200000",
                "message.timestamp.type": "LogAppendTime",
                "cleanup.policy": "delete",
                "retention.bytes": "-1",
            },
        )
        deadline = time.monotonic() + 10
        while await _topic_config(kafka_bootstrap, topic_name, "retention.ms") != "7200000":
            assert time.monotonic() < deadline, "the broker never took the new retention"
            await asyncio.sleep(0.2)
        with pytest.raises(lm.TopicConflict, match="exists with retention 7200s, not 3600s"):
            await log.create_topic(topic_name, partitions=1, retention_s=3600)


async def test_a_read_of_records_removed_by_retention_reads_what_is_left_and_ends(
    kafka_bootstrap, topic_name
):
    # Retention removes a partition's oldest records (here at once, by DeleteRecords):
    # a read from offset 0 starts where the partition now starts, and one whose every
    # record below the end it saw is gone ends with nothing instead of waiting for them.
    from aiokafka.admin import RecordsToDelete

    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=2)
        for n in range(5):
            await log.append(topic_name, OutgoingRecord(b"%d" % n, partition=0))
            await log.append(topic_name, OutgoingRecord(b"p1-%d" % n, partition=1))
        async with admin(kafka_bootstrap) as client:
            await client.delete_records(
                {
                    TopicPartition(topic_name, 0): RecordsToDelete(before_offset=3),
                    TopicPartition(topic_name, 1): RecordsToDelete(before_offset=5),
                }
            )
        left = await asyncio.wait_for(read_all(log, topic_name), 30)
        assert [(r.partition, r.offset, r.value) for r in left] == [(0, 3, b"3"), (0, 4, b"4")]

        async def partition_1() -> list:
            return [r async for batch in log.read(topic_name, partitions=[1]) for r in batch]

        assert await asyncio.wait_for(partition_1(), 30) == []


async def test_appends_refused_together_replace_the_producer_once(kafka_bootstrap, topic_name):
    # Every append the broker refused asks for a new producer; the first replaces it and
    # the rest find it replaced. Each replacing again made one more producer, and left
    # the one before it running after the log's stop.
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        await _shrink_behind_the_logs_back(kafka_bootstrap, topic_name)
        refused = await asyncio.gather(
            *(log.append(topic_name, OutgoingRecord(b"%d" % i + b"x" * 60_000)) for i in range(4)),
            return_exceptions=True,
        )
        assert all(isinstance(r, lm.LogUnavailable) for r in refused), refused
        await log.append(topic_name, OutgoingRecord(b"after"))
        assert len(_producer_tasks()) == 1
    assert _producer_tasks() == []


async def test_a_kafka_log_without_a_write_deadline_appends_and_stops(kafka_bootstrap, topic_name):
    # write_timeout_s=None is "no limit", as the config says: appends wait as long as
    # Kafka takes, and the stop has no deadline timer to close.
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, write_timeout_s=None)
    async with KafkaLog(config) as log:
        await log.create_topic(topic_name, partitions=1)
        receipts = await log.append_batch(topic_name, [OutgoingRecord(b"a"), OutgoingRecord(b"b")])
        assert [r.offset for r in receipts] == [0, 1]
    assert [r.value for r in await _read_with_new_log(kafka_bootstrap, topic_name)] == [b"a", b"b"]


async def _read_with_new_log(bootstrap: str, topic: str) -> list:
    async with connect_log(f"kafka://{bootstrap}") as log:
        return await read_all(log, topic)


async def test_a_record_batch_the_broker_refuses_never_poisons_later_ones(
    kafka_bootstrap, topic_name
):
    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1)
        before = [OutgoingRecord(b"before %d" % i) for i in range(20)]
        await log.append_batch(topic_name, before)
        await _shrink_behind_the_logs_back(kafka_bootstrap, topic_name)
        with pytest.raises(lm.LogUnavailable, match="refused"):
            await log.append_batch(
                topic_name, [OutgoingRecord(b"%d" % i + b"x" * 10_000) for i in range(20)]
            )
        after = [OutgoingRecord(b"after %d" % i) for i in range(20)]
        receipts = await log.append_batch(topic_name, after)
        assert [r.offset for r in receipts] == list(range(20, 40))
        values = [r.value for r in await read_all(log, topic_name)]
        assert values == [r.value for r in before + after]


async def test_partitions_added_under_a_follow_read_or_a_folder_are_an_error(
    kafka_bootstrap, stream_name, tmp_path
):
    """Partitions added to a topic (``kafka-topics --alter``) while a read or a folder
    follows it: they would never read the new partitions, so they stop with
    `TopicConflict` saying so; and a long-lived log describes the topic as it is now
    (it kept the count it learned first, and placed keys by it)."""
    from aiokafka.admin import NewPartitions

    from folders.service import ViewFolder

    url = f"kafka://{kafka_bootstrap}"
    async with lm.connect(url, stream=stream_name) as laser:
        await laser.bootstrap(partitions=2)
        memory = laser.memory("notes")
        await memory.remember("before")
        topic = laser.memory_topic_name
        read, _ = await following(laser.log, topic)
        folder = asyncio.create_task(ViewFolder(laser.log, topic, tmp_path / "view").run())
        async with lm.connect(url, stream=stream_name, view=tmp_path / "view") as reader:
            await reader.memory("notes").recall(after=await memory.remember("folded"), timeout=20)
        async with admin(kafka_bootstrap) as client:
            await client.create_partitions({topic: NewPartitions(total_count=4)})
        for task in (read, folder):
            with pytest.raises(lm.TopicConflict, match="has 4 partitions now, 2 when"):
                await asyncio.wait_for(task, 30)
        assert (await laser.log.describe_topic(topic)).partitions == 4


# -- a broker of our own, to pause and to kill ------------------------------------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    workdir = tmp_path_factory.mktemp("own-kafka")
    started = kafka_local("start", "--dir", str(workdir))
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield started.stdout.strip().splitlines()[-1], workdir
    finally:
        kafka_local("stop", "--dir", str(workdir))


def _pid(workdir: Path) -> int:
    return int((workdir / "pid").read_text())


@pytest.mark.parametrize(
    ("records", "write_timeout_s", "request_timeout_s"),
    [(1, 2.0, 3.0), (20, 2.0, 3.0), (1, 3.0, 1.5)],
    ids=["one record", "a whole batch", "the producer gives up first"],
)
async def test_an_append_to_a_topic_deleted_elsewhere_is_unknown_topic(
    kafka_bootstrap, topic_name, records, write_timeout_s, request_timeout_s
):
    """Deleted by another process after this log appended to it, a topic's appends
    waited out the whole deadline and ended `WriteTimeout` ("may or may not have
    landed"), every one of them, while the embedded log says `UnknownTopic` at once.
    aiokafka retries such a batch until the deadline, or gives it up first (a request
    timeout shorter than the deadline); then the topic is looked up: gone, the append
    is `UnknownTopic` once the producer has given the records up (it would send them to
    a topic made again meanwhile), they are on no topic, and the next append is told
    without waiting. Twenty records for one partition go as a record batch of their
    own, whose failure aiokafka leaves to its caller: no one read it, and asyncio
    printed "Future exception was never retrieved"."""
    async with nothing_left_behind():
        config = KafkaLogConfig(
            bootstrap_servers=kafka_bootstrap,
            write_timeout_s=write_timeout_s,
            request_timeout_s=request_timeout_s,
        )
        async with KafkaLog(config) as log, connect_log(f"kafka://{kafka_bootstrap}") as other:
            await log.create_topic(topic_name, partitions=1)
            await log.append(topic_name, OutgoingRecord(b"before"))
            await other.delete_topic(topic_name)
            with pytest.raises(lm.UnknownTopic, match="was deleted while this append waited"):
                await log.append_batch(
                    topic_name, [OutgoingRecord(b"after the delete %d" % i) for i in range(records)]
                )
            started = time.monotonic()
            with pytest.raises(lm.UnknownTopic, match="does not exist"):
                await log.append(topic_name, OutgoingRecord(b"again"))
            assert time.monotonic() - started < 1.0
            # Made again, the topic takes appends under its new generation, and holds
            # nothing of the appends refused.
            made = await other.create_topic(topic_name, partitions=1)
            receipt = await log.append(topic_name, OutgoingRecord(b"new"))
            assert receipt.generation == made.generation
            assert [r.value for r in await read_all(other, topic_name)] == [b"new"]


async def test_an_append_to_a_topic_made_again_while_it_waits_is_no_unknown_topic(
    kafka_bootstrap, topic_name
):
    """A topic deleted elsewhere and made again after the append's deadline, while the
    producer still holds the record: the producer sends it to the new topic, so the
    append must not say `UnknownTopic` ("not on the log"); it is `WriteTimeout`, which
    says it may have landed, and it did."""
    config = KafkaLogConfig(
        bootstrap_servers=kafka_bootstrap, write_timeout_s=2.0, request_timeout_s=8.0
    )
    async with KafkaLog(config) as log, connect_log(f"kafka://{kafka_bootstrap}") as other:
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        await other.delete_topic(topic_name)

        async def made_again_past_the_deadline() -> None:
            await asyncio.sleep(3.0)
            await other.create_topic(topic_name, partitions=1)

        making = asyncio.create_task(made_again_past_the_deadline())
        with pytest.raises(lm.WriteTimeout, match="may or may not have landed"):
            await log.append(topic_name, OutgoingRecord(b"held by the producer"))
        await making
        assert [r.value for r in await read_all(other, topic_name)] == [b"held by the producer"]


async def test_every_write_has_a_deadline_kafka(own_broker, topic_name):
    bootstrap, workdir = own_broker
    config = KafkaLogConfig(bootstrap_servers=bootstrap, write_timeout_s=1.5)
    async with KafkaLog(config) as log:
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        with paused(workdir):
            started = time.monotonic()
            with pytest.raises(lm.WriteTimeout, match="may or may not have landed"):
                await log.append(topic_name, OutgoingRecord(b"while paused"))
            assert time.monotonic() - started < 5
            # Concurrent appends share one timer: each still times out on its own, and
            # one cancelled by its caller meanwhile stays cancelled (not a WriteTimeout).
            waiting = [
                asyncio.create_task(log.append(topic_name, OutgoingRecord(b"paused %d" % i)))
                for i in range(3)
            ]
            await asyncio.sleep(0.5)
            waiting[1].cancel()
            outcomes = await asyncio.gather(*waiting, return_exceptions=True)
            assert [type(o) for o in outcomes] == [
                lm.WriteTimeout,
                asyncio.CancelledError,
                lm.WriteTimeout,
            ]
            # Many records for one partition go as a record batch of their own: it has
            # the same deadline.
            started = time.monotonic()
            with pytest.raises(lm.WriteTimeout, match="may or may not have landed"):
                await log.append_batch(
                    topic_name, [OutgoingRecord(b"paused batch %d" % i) for i in range(20)]
                )
            assert time.monotonic() - started < 5
        receipt = await log.append(topic_name, OutgoingRecord(b"after"))
        values = [r.value for r in await read_all(log, topic_name)]
        # Paused writes may have landed once the broker woke; never twice.
        assert values[0] == b"before" and values[-1] == b"after"
        assert set(values[1:-1]) <= {
            b"while paused",
            *(b"paused %d" % i for i in range(3)),
            *(b"paused batch %d" % i for i in range(20)),
        }
        assert len(set(values)) == len(values)
        assert receipt.offset == len(values) - 1


async def test_an_idle_follow_read_outlives_a_paused_broker_kafka(own_broker, topic_name):
    """A follow read that fetches nothing asks every second whether its topic is still
    there; a broker that cannot answer (paused past the request timeout) is no answer,
    so the read goes on and sees what is written once the broker is back."""
    bootstrap, workdir = own_broker
    config = KafkaLogConfig(bootstrap_servers=bootstrap, request_timeout_s=1.0)
    async with KafkaLog(config) as log, KafkaLog(config) as writer:
        await log.create_topic(topic_name, partitions=1)
        await writer.append(topic_name, OutgoingRecord(b"before"))
        task, seen = await following(log, topic_name, until=2)
        with paused(workdir):
            await asyncio.sleep(3.5)  # several checks, each timing out
            assert not task.done()
        await writer.append(topic_name, OutgoingRecord(b"after"))
        await asyncio.wait_for(task, 60)
        assert seen == [b"before", b"after"]


async def test_a_read_that_cannot_reach_the_broker_is_log_unavailable_kafka(own_broker, topic_name):
    """A read starts a consumer of its own (or takes an idle one): one that cannot
    reach the broker (paused past the request timeout) is `LogUnavailable` within that
    timeout, stopped, not left open for the garbage collector to find, and the log
    reads again once the broker is back."""
    bootstrap, workdir = own_broker
    config = KafkaLogConfig(bootstrap_servers=bootstrap, request_timeout_s=1.0)
    async with nothing_left_behind(), KafkaLog(config) as log:
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"before"))
        with paused(workdir):
            started = time.monotonic()
            with pytest.raises(lm.LogUnavailable, match="cannot reach Kafka for a read"):
                async for _ in log.read(topic_name, follow=True):
                    pytest.fail("a paused broker handed records over")
            assert time.monotonic() - started < 5
        assert [r.value for r in await read_all(log, topic_name)] == [b"before"]


async def test_a_log_that_cannot_reach_kafka_says_so_and_starts_once_it_can(own_broker, topic_name):
    """A start with no broker answering (a port nothing listens on; a broker paused
    past the request timeout) is `LogUnavailable` naming the address, leaves nothing
    open, and, as every log's start promises, the log can be started again: it was
    marked stopped, so a retry once the broker answered was `LogClosed` ("make a new
    one")."""
    bootstrap, workdir = own_broker
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{probe.getsockname()[1]}"
    async with nothing_left_behind():
        unreachable = KafkaLog(KafkaLogConfig(bootstrap_servers=nowhere))
        with pytest.raises(lm.LogUnavailable, match=f"cannot reach Kafka at {nowhere}"):
            await unreachable.start()
        log = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, request_timeout_s=1.0))
        with paused(workdir):
            started = time.monotonic()
            with pytest.raises(lm.LogUnavailable, match=f"cannot reach Kafka at {bootstrap}"):
                await log.start()
            assert time.monotonic() - started < 5
        await log.start()
        try:
            await log.create_topic(topic_name, partitions=1)
            await log.append(topic_name, OutgoingRecord(b"once it can"))
            assert [r.value for r in await read_all(log, topic_name)] == [b"once it can"]
        finally:
            await log.stop()


async def test_a_broker_killed_during_writes_loses_and_duplicates_nothing_kafka(
    own_broker, topic_name
):
    bootstrap, workdir = own_broker
    config = KafkaLogConfig(bootstrap_servers=bootstrap, write_timeout_s=5.0)
    acknowledged: list[bytes] = []
    unsure: list[bytes] = []
    async with KafkaLog(config) as log:
        await log.create_topic(topic_name, partitions=3)
        stop = asyncio.Event()

        async def write(writer: int) -> None:
            i = 0
            while not stop.is_set():
                value = f"w{writer}-{i}".encode()
                i += 1
                try:
                    await log.append(topic_name, OutgoingRecord(value, key=value))
                except (lm.LogUnavailable, lm.WriteTimeout):
                    unsure.append(value)
                    await asyncio.sleep(0.2)
                else:
                    acknowledged.append(value)

        writers = [asyncio.create_task(write(n)) for n in range(4)]
        await asyncio.sleep(1.0)
        os.kill(_pid(workdir), signal.SIGKILL)
        await asyncio.sleep(0.5)
        restarted = await asyncio.to_thread(kafka_local, "start", "--dir", str(workdir))
        assert restarted.returncode == 0, restarted.stderr[-3000:]
        assert restarted.stdout.strip().splitlines()[-1] == bootstrap  # same address
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*writers)
        values = [r.value for r in await read_all(log, topic_name)]
    assert len(acknowledged) > 50
    lost = set(acknowledged) - set(values)
    duplicated = {v for v in values if values.count(v) > 1}
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert not duplicated, f"{len(duplicated)} writes duplicated"
    assert set(values) <= set(acknowledged) | set(unsure)
