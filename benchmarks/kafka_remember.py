"""The remember path on Kafka against raw aiokafka sending the same bytes, with the same
producer settings, to the same broker, in the same run.

    python -m benchmarks.kafka_remember --kafka HOST:PORT [--records N] [--concurrency C]

- ``C`` tasks each calling `remember` one item at a time (they share the producer's
  batches), against ``C`` tasks each sending one record and awaiting its delivery.
- `remember_many` in batches of 1,000, against sending 1,000 records and awaiting them
  all.

Each side runs twice (raw, ours, ours, raw) on topics of its own; the figures are means.

The raw side sends what the remember path would: each item's record encoded as
laser-memory encodes it, with its key and headers, from an idempotent producer with
``acks=all`` and `KafkaLogConfig`'s defaults (5 ms linger, 1 MiB batches, 8 MiB requests).
Without ``--kafka`` (or ``LASER_KAFKA_BOOTSTRAP``) nothing runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import laser_memory as lm
from laser_memory.log import KafkaLogConfig
from laser_memory.records import Remember, encode_record
from laser_memory.scope import MemoryScope

from .figures import NO_BROKER, Figure, NotMeasured, rows

BATCH = 1000


def _entries(records: int) -> list[dict]:
    return [
        {
            "body": f"fact {i:07d}: the deploy of service {i % 37} went fine",
            "conversation": f"c{i % 64}",
        }
        for i in range(records)
    ]


def _wire(entries: list[dict], stream: str, namespace: str) -> list[tuple[bytes, bytes, list]]:
    """What the remember path sends for ``entries``: (value, key, headers)."""
    out = []
    for i, entry in enumerate(entries):
        record = Remember(
            ns=f"stream:{stream}/{namespace}",
            scope=MemoryScope(stream=stream, conversation=entry["conversation"]),
            id=(i + 1).to_bytes(16, "big"),
            kind=1,
            body=entry["body"].encode(),
        )
        wire = encode_record(record)
        out.append((wire.value, wire.key, list(wire.headers)))
    return out


async def _ours(bootstrap: str, entries: list[dict], concurrency: int) -> tuple[float, float]:
    """Items a second of concurrent `remember` calls, then of `remember_many` batches."""
    stream = f"bench{uuid.uuid4().hex[:8]}"
    async with lm.connect(f"kafka://{bootstrap}", stream=stream) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        await memory.remember("warm-up")
        queue = iter(entries)

        async def worker() -> None:
            for entry in queue:
                await memory.remember(entry["body"], conversation=entry["conversation"])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        single = len(entries) / (time.perf_counter() - start)
        start = time.perf_counter()
        for first in range(0, len(entries), BATCH):
            await memory.remember_many(entries[first : first + BATCH])
        batched = len(entries) / (time.perf_counter() - start)
        await laser.log.delete_topic(laser.memory_topic_name)
    return single, batched


async def _raw(bootstrap: str, entries: list[dict], concurrency: int) -> tuple[float, float]:
    """The same two figures for raw aiokafka sending the same records."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    config = KafkaLogConfig(bootstrap)
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    sent = _wire(entries, "bench", "notes")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 4, 1)])
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=int(config.linger_s * 1000),
        max_batch_size=config.max_batch_bytes,
        max_request_size=config.max_request_bytes,
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up")
        queue = iter(sent)

        async def worker() -> None:
            for value, key, headers in queue:
                await (await producer.send(topic, value, key=key, headers=headers))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        single = len(sent) / (time.perf_counter() - start)
        start = time.perf_counter()
        for first in range(0, len(sent), BATCH):
            futures = [
                await producer.send(topic, value, key=key, headers=headers)
                for value, key, headers in sent[first : first + BATCH]
            ]
            await asyncio.gather(*futures)
        batched = len(sent) / (time.perf_counter() - start)
    finally:
        await producer.stop()
        await admin.delete_topics([topic])
        await admin.close()
    return single, batched


def measure(bootstrap: str, records: int, concurrency: int) -> dict[str, float]:
    """Each side twice, in the order raw, ours, ours, raw, and the mean of its two runs:
    whichever runs second on a broker runs slower (measured here: remember_many at
    0.65-0.83x raw when raw ran first, 1.04x when it ran second)."""
    entries = _entries(records)
    runs = [
        asyncio.run(side(bootstrap, entries, concurrency)) for side in (_raw, _ours, _ours, _raw)
    ]
    raw_single, raw_batched = ((a + b) / 2 for a, b in zip(runs[0], runs[3], strict=True))
    single, batched = ((a + b) / 2 for a, b in zip(runs[1], runs[2], strict=True))
    return {
        "raw aiokafka, concurrent sends": raw_single,
        "concurrent remember": single,
        "raw aiokafka, batches of 1,000": raw_batched,
        "remember_many, batches of 1,000": batched,
    }


def run(quick: bool = False, kafka: str | None = None, **_: object) -> list[Figure | NotMeasured]:
    """The figures for ``python -m benchmarks``; without a broker, a row saying so."""
    if not kafka:
        return [NotMeasured(benchmark="kafka_remember", name="remember on Kafka", reason=NO_BROKER)]
    result = measure(kafka, 5_000 if quick else 20_000, 200)
    return rows(
        "kafka_remember",
        {name: (value, "items/s") for name, value in result.items()},
        {
            "concurrent remember": "raw aiokafka, concurrent sends",
            "remember_many, batches of 1,000": "raw aiokafka, batches of 1,000",
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kafka", default=os.environ.get("LASER_KAFKA_BOOTSTRAP"))
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    if not args.kafka:
        parser.error("give a broker: --kafka HOST:PORT (or LASER_KAFKA_BOOTSTRAP)")
    result = measure(args.kafka, args.records, args.concurrency)
    print(f"{args.records} items, {args.concurrency} concurrent callers, same broker and settings")
    for name, value in result.items():
        print(f"  {name:<34} {value:12,.0f} items/s")
    single = result["concurrent remember"] / result["raw aiokafka, concurrent sends"]
    batched = result["remember_many, batches of 1,000"] / result["raw aiokafka, batches of 1,000"]
    print(f"  concurrent remember / raw          {single:8.2f}x")
    print(f"  remember_many / raw                {batched:8.2f}x")


if __name__ == "__main__":
    main()
