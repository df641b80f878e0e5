"""The conformance suite over a real Apache Kafka broker."""

from __future__ import annotations

import pytest

from laser_memory.log import OutgoingRecord
from log_conformance import LogConformance

pytestmark = pytest.mark.kafka


class TestKafkaLog(LogConformance):
    @pytest.fixture
    def log_url(self, kafka_bootstrap: str) -> str:
        return f"kafka://{kafka_bootstrap}"


async def test_append_times_are_the_brokers_not_the_producers(kafka_bootstrap, topic_name):
    from aiokafka import AIOKafkaProducer

    from laser_memory.log import connect_log

    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=1)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            # A producer claiming the year 2001 does not set the record's time.
            await producer.send_and_wait(topic_name, b"v", timestamp_ms=1_000_000_000_000)
        finally:
            await producer.stop()
        receipt = await log.append(topic_name, OutgoingRecord(b"w"))
        [first, second] = [r async for batch in log.read(topic_name) for r in batch]
        assert first.append_time_ms > 1_700_000_000_000
        assert first.append_time_ms <= second.append_time_ms == receipt.append_time_ms


@pytest.mark.parametrize("turns", [0, 1, 2])
async def test_a_log_stopped_just_after_a_follow_read_ends_stops(
    kafka_bootstrap, topic_name, turns
):
    # The read's end hands its consumer back (unassigned), and aiokafka's fetcher,
    # busy with that, swallowed the cancel of a stop made within a turn or two: the stop
    # waited forever.
    import asyncio

    from laser_memory.log import connect_log

    log = connect_log(f"kafka://{kafka_bootstrap}")
    await log.start()
    await log.create_topic(topic_name, partitions=1)
    await log.append(topic_name, OutgoingRecord(b"before"))
    seen = []

    async def follow() -> None:
        async for batch in log.read(topic_name, follow=True):
            seen.extend(batch)
            if len(seen) >= 2:
                return

    reader = asyncio.create_task(follow())
    await asyncio.sleep(0.3)  # the read waits on the broker for more
    await log.append(topic_name, OutgoingRecord(b"after"))
    await asyncio.wait_for(reader, 20)
    for _ in range(turns):
        await asyncio.sleep(0)
    stopping = asyncio.ensure_future(log.stop())
    stopped, _ = await asyncio.wait([stopping], timeout=10)
    if not stopped:  # free the stuck fetcher, so one failure does not hang the run
        for task in asyncio.all_tasks():
            if "_fetch_requests_routine" in repr(task.get_coro()):
                task.cancel()
        await stopping
    assert stopped, "stop() waited for the read's consumer for 10 s"


async def test_a_finished_read_leaves_its_consumer_tracking_only_the_topic_it_read(
    kafka_bootstrap, topic_name
):
    # aiokafka takes "no topics" as every topic: a consumer handed back with assign([])
    # fetched and decoded the whole cluster's metadata at each read's end, which on a
    # broker of 1,560 topics made a read-heavy test 30 times slower.
    from laser_memory.log import connect_log

    async with connect_log(f"kafka://{kafka_bootstrap}") as log:
        await log.create_topic(topic_name, partitions=2)
        await log.append(topic_name, OutgoingRecord(b"x"))
        assert [r.value async for batch in log.read(topic_name) for r in batch] == [b"x"]
        [idle] = log._idle_consumers
        assert idle.assignment() == set()
        assert idle._client._topics == {topic_name}
        # Handed out again, it reads another topic as a fresh one would.
        other = f"{topic_name}-b"
        await log.create_topic(other, partitions=1)
        await log.append(other, OutgoingRecord(b"y"))
        assert [r.value async for batch in log.read(other) for r in batch] == [b"y"]
        assert log._idle_consumers == [idle] and idle._client._topics == {other}


async def test_reads_cancelled_while_their_consumers_start_leave_nothing_open(
    kafka_bootstrap, topic_name
):
    # A read cancelled while its new consumer was starting (an agent stopped just after
    # it started) left that consumer open, or, cancelled inside aiokafka's connect, one
    # of its connections: "Unclosed AIOKafkaConsumer" / "Unclosed AIOKafkaConnection"
    # when collected. Cancelled at every loop turn of a start, nothing is left open.
    import asyncio
    import gc
    import logging
    import warnings

    from laser_memory.log import connect_log

    reported: list[str] = []

    class Report(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reported.append(record.getMessage())

    handler = Report()
    logging.getLogger("asyncio").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            async with connect_log(f"kafka://{kafka_bootstrap}") as log:
                await log.create_topic(topic_name, partitions=1)

                async def follow() -> None:
                    async for _ in log.read(topic_name, follow=True):
                        pass

                for turns in range(40):
                    reader = asyncio.create_task(follow())
                    for _ in range(turns):
                        await asyncio.sleep(0)
                    reader.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await reader
                    del reader
                # What the cancelled reads started serves the next read.
                await log.append(topic_name, OutgoingRecord(b"after"))
                [[record]] = [batch async for batch in log.read(topic_name)]
                assert record.value == b"after"
            gc.collect()
            await asyncio.sleep(0.1)
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    unclosed = [str(w.message) for w in caught if "Unclosed" in str(w.message)]
    unclosed += [message for message in reported if "Unclosed" in message or "destroyed" in message]
    assert unclosed == []


async def test_a_read_cancelled_in_the_turn_its_consumer_started_leaves_nothing_open(
    kafka_bootstrap, topic_name, monkeypatch
):
    # The start ended in the loop turn the read's cancel came in: the read saw the
    # cancel with the start already done, so it handed the consumer to neither the busy
    # nor the idle ones, and nothing stopped it ("Unclosed AIOKafkaConsumer" once
    # collected; the test above failed so, now and then). Made to happen every time.
    import asyncio
    import gc
    import warnings

    from laser_memory.log import connect_log
    from laser_memory.log.kafka import KafkaLog

    real_start = KafkaLog._start_consumer
    reader: asyncio.Task | None = None

    async def start_then_cancel_the_read(consumer) -> None:
        await real_start(consumer)
        assert reader is not None
        reader.cancel()

    async def follow(log) -> None:
        async for _ in log.read(topic_name, follow=True):
            pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with connect_log(f"kafka://{kafka_bootstrap}") as log:
            await log.create_topic(topic_name, partitions=1)
            monkeypatch.setattr(
                KafkaLog, "_start_consumer", staticmethod(start_then_cancel_the_read)
            )
            reader = asyncio.create_task(follow(log))
            with pytest.raises(asyncio.CancelledError):
                await reader
            monkeypatch.undo()
            reader = None
            # The consumer serves the next read.
            await log.append(topic_name, OutgoingRecord(b"after"))
            [[record]] = [batch async for batch in log.read(topic_name)]
            assert record.value == b"after"
        gc.collect()
        await asyncio.sleep(0.1)
    assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []


async def test_a_log_stopped_while_a_reads_consumer_starts_closes_it_and_says_so(
    kafka_bootstrap, topic_name, monkeypatch
):
    # The log stops while a read's new consumer is starting: the read ends with LogClosed
    # (it raised aiokafka's ConsumerStoppedError), and the consumer is stopped with the
    # log, not left open.
    import asyncio
    import gc
    import warnings

    from laser_memory.errors import LogClosed
    from laser_memory.log import connect_log
    from laser_memory.log.kafka import KafkaLog

    real_start = KafkaLog._start_consumer
    started: list = []
    starting = asyncio.Event()

    async def recorded_start(consumer) -> None:
        started.append(consumer)
        starting.set()
        await real_start(consumer)

    async def follow(log) -> None:
        async for _ in log.read(topic_name, follow=True):
            pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        log = connect_log(f"kafka://{kafka_bootstrap}")
        await log.start()
        await log.create_topic(topic_name, partitions=1)
        await log.append(topic_name, OutgoingRecord(b"x"))
        monkeypatch.setattr(KafkaLog, "_start_consumer", staticmethod(recorded_start))
        reader = asyncio.create_task(follow(log))
        await starting.wait()
        await log.stop()
        with pytest.raises(LogClosed, match="stopped"):
            await asyncio.wait_for(reader, 20)
        assert len(started) == 1 and started[0]._closed
        del reader
        gc.collect()
        await asyncio.sleep(0.1)
    assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []


async def test_a_request_begun_after_the_stop_closed_the_clients_is_log_closed_at_once(
    kafka_bootstrap, topic_name
):
    # An operation under way at the stop that went on to its next request after the
    # clients closed (a folder checking its topic) waited out aiokafka's request timeout,
    # 30 s, on the closed admin client: its folder ended half a minute after the stop.
    import asyncio

    from laser_memory.errors import LogClosed
    from laser_memory.log import connect_log

    log = connect_log(f"kafka://{kafka_bootstrap}")
    await log.start()
    await log.create_topic(topic_name, partitions=1)
    await log.stop()
    with pytest.raises(LogClosed, match="stopped"):
        await asyncio.wait_for(log._topic_metadata(topic_name), 10)


@pytest.mark.parametrize(
    "settings",
    [
        {"replication_factor": 1000},
        {"extra_topic_configs": {"segment.bytes": "1"}},
        {"extra_topic_configs": {"no.such.config": "1"}},
    ],
)
async def test_settings_the_broker_refuses_are_a_config_error(
    kafka_bootstrap, topic_name, settings
):
    # They came back as LogUnavailable, as if the broker were down: a retry can never
    # succeed, and what to change is the log's config.
    import laser_memory as lm
    from laser_memory.log import KafkaLog, KafkaLogConfig

    async with KafkaLog(KafkaLogConfig(kafka_bootstrap, **settings)) as log:
        with pytest.raises(lm.ConfigError, match="Kafka refused the settings of topic"):
            await log.create_topic(topic_name, partitions=1)
        with pytest.raises(lm.UnknownTopic):
            await log.describe_topic(topic_name)
