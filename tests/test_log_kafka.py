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
