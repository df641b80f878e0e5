"""Append throughput of both logs, as ratios against a baseline measured in the same run.

    python -m benchmarks.log_append [--records N] [--concurrency C] [--kafka HOST:PORT]

- LocalLog, many concurrent appenders (group commit), against raw LMDB with one durable
  transaction per record on the same disk: what group commit buys.
- LocalLog against raw LMDB with all records in one transaction: the ceiling.
- Sequential `remember` calls (each awaited, so each a durable commit of its own) against
  raw LMDB with one durable transaction per record run on a worker thread and awaited
  (the fsync limit for an async call that never blocks its loop), which is itself shown
  against the same commits made inline.
- KafkaLog against raw aiokafka (same broker, idempotent, acks=all, same linger): what our
  layer costs; in alternating pairs (raw then ours, ours then raw), as means: 4 runs of
  the records given, 8 of at least 50,000 in the full run (20,000 records twice each
  moved the ratio from 0.83x to 1.06x from run to run here; ten pairs of 50,000, from
  0.90x to 1.06x).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid

import lmdb

from laser_memory.log import KafkaLog, KafkaLogConfig, LocalLog, OutgoingRecord

from .figures import NO_BROKER, Figure, NotMeasured, rows

VALUE = b"x" * 200


def raw_lmdb(records: int, per_record: bool) -> float:
    with tempfile.TemporaryDirectory() as path:
        env = lmdb.open(path, map_size=1 << 32)
        start = time.perf_counter()
        if per_record:
            for i in range(records):
                with env.begin(write=True) as txn:
                    txn.put(i.to_bytes(8, "big"), VALUE)
        else:
            with env.begin(write=True) as txn:
                for i in range(records):
                    txn.put(i.to_bytes(8, "big"), VALUE)
        elapsed = time.perf_counter() - start
        env.close()
    return records / elapsed


async def local_log(records: int, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as path:
        async with LocalLog(path) as log:
            await log.create_topic("bench", partitions=4)
            start = time.perf_counter()
            await _concurrent(log.append, "bench", records, concurrency)
            return records / (time.perf_counter() - start)


async def raw_lmdb_awaited(records: int) -> float:
    """Raw LMDB, one durable transaction per record, each run on a worker thread and
    awaited from the event loop: the least an async write that never blocks its loop
    costs (the commit plus a thread round trip)."""
    import concurrent.futures

    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as path, concurrent.futures.ThreadPoolExecutor(1) as pool:
        env = lmdb.open(path, map_size=1 << 32)

        def commit(i: int) -> None:
            with env.begin(write=True) as txn:
                txn.put(i.to_bytes(8, "big"), VALUE)

        start = time.perf_counter()
        for i in range(records):
            await loop.run_in_executor(pool, commit, i)
        elapsed = time.perf_counter() - start
        env.close()
    return records / elapsed


async def sequential_remember(records: int) -> float:
    """Items a second of `remember` calls made one after another, each awaited: every
    call is a durable commit of its own, so the limit is one LMDB commit per record."""
    import laser_memory as lm

    with tempfile.TemporaryDirectory() as path:
        async with lm.connect(f"local://{path}", stream="bench") as laser:
            memory = laser.memory("notes")
            await memory.remember("warm-up")
            start = time.perf_counter()
            for i in range(records):
                await memory.remember(f"fact {i}: the deploy went fine", conversation=f"c{i % 8}")
            return records / (time.perf_counter() - start)


async def _concurrent(append, topic: str, records: int, concurrency: int) -> None:
    queue = iter(range(records))

    async def worker() -> None:
        for i in queue:
            await append(topic, OutgoingRecord(VALUE, key=b"k%d" % (i % 64)))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def kafka_log(bootstrap: str, records: int, concurrency: int) -> float:
    async with KafkaLog(KafkaLogConfig(bootstrap)) as log:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        await log.create_topic(topic, partitions=4)
        start = time.perf_counter()
        await _concurrent(log.append, topic, records, concurrency)
        rate = records / (time.perf_counter() - start)
        await log.delete_topic(topic)
        return rate


async def raw_aiokafka(bootstrap: str, records: int, concurrency: int) -> float:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 4, 1)])
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    await producer.send_and_wait(topic, b"warm-up")
    queue = iter(range(records))

    async def worker() -> None:
        for i in queue:
            await (await producer.send(topic, VALUE, key=b"k%d" % (i % 64)))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rate = records / (time.perf_counter() - start)
    await producer.stop()
    await admin.delete_topics([topic])
    await admin.close()
    return rate


def kafka_pair(
    bootstrap: str, records: int, concurrency: int, pairs: int = 2
) -> tuple[float, float]:
    """Raw aiokafka and KafkaLog, ``pairs`` runs each, in pairs that alternate which
    goes first (raw then ours, ours then raw, ...), as means: whichever runs second
    on a broker runs slower."""
    raws: list[float] = []
    ours: list[float] = []
    for pair in range(pairs):
        for which in (raws, ours) if pair % 2 == 0 else (ours, raws):
            measure = raw_aiokafka if which is raws else kafka_log
            which.append(asyncio.run(measure(bootstrap, records, concurrency)))
    return sum(raws) / pairs, sum(ours) / pairs


def run(quick: bool = False, kafka: str | None = None, **_: object) -> list[Figure | NotMeasured]:
    """The figures for ``python -m benchmarks``; without a broker, a row saying the
    Kafka ones were not measured."""
    n, c = (5_000 if quick else 20_000), 200
    values = {
        "raw LMDB, a commit per record": (raw_lmdb(min(n, 3000), per_record=True), "records/s"),
        "raw LMDB, one transaction": (raw_lmdb(n, per_record=False), "records/s"),
        "LocalLog, concurrent appends": (asyncio.run(local_log(n, c)), "records/s"),
        "raw LMDB, a commit per record, awaited": (
            asyncio.run(raw_lmdb_awaited(min(n, 3000))),
            "records/s",
        ),
        "sequential remember": (asyncio.run(sequential_remember(min(n, 3000))), "items/s"),
    }
    ratios = {
        "LocalLog, concurrent appends": "raw LMDB, a commit per record",
        "raw LMDB, a commit per record, awaited": "raw LMDB, a commit per record",
        "sequential remember": "raw LMDB, a commit per record, awaited",
    }
    if kafka:
        raw, ours = kafka_pair(kafka, n if quick else max(n, 50_000), c, 2 if quick else 4)
        values["raw aiokafka"] = (raw, "records/s")
        values["KafkaLog"] = (ours, "records/s")
        ratios["KafkaLog"] = "raw aiokafka"
    figures: list[Figure | NotMeasured] = [*rows("log_append", values, ratios)]
    if not kafka:
        figures.append(NotMeasured(benchmark="log_append", name="KafkaLog", reason=NO_BROKER))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--kafka", default=os.environ.get("LASER_KAFKA_BOOTSTRAP"))
    args = parser.parse_args()
    n, c = args.records, args.concurrency

    per_record = raw_lmdb(min(n, 3000), per_record=True)
    one_txn = raw_lmdb(n, per_record=False)
    ours = asyncio.run(local_log(n, c))
    awaited = asyncio.run(raw_lmdb_awaited(min(n, 3000)))
    sequential = asyncio.run(sequential_remember(min(n, 3000)))
    print(f"records={n} concurrency={c}")
    print(f"raw LMDB, one durable txn per record : {per_record:12,.0f} rec/s (baseline)")
    print(f"raw LMDB, all records in one txn     : {one_txn:12,.0f} rec/s")
    print(f"LocalLog, concurrent appends         : {ours:12,.0f} rec/s")
    print(f"  ratio LocalLog / per-record commits : {ours / per_record:8.2f}x")
    print(f"  ratio LocalLog / single transaction : {ours / one_txn:8.3f}x")
    print(f"raw LMDB per record, on a thread     : {awaited:12,.0f} rec/s")
    print(f"  ratio to per-record commits         : {awaited / per_record:8.2f}x")
    print(f"sequential remember, each awaited    : {sequential:12,.0f} items/s")
    print(f"  ratio to per-record commits         : {sequential / per_record:8.2f}x")
    print(f"  ratio to them on a thread           : {sequential / awaited:8.2f}x")
    if args.kafka:
        raw, kafka = kafka_pair(args.kafka, n, c)
        print(f"raw aiokafka producer                : {raw:12,.0f} rec/s (baseline)")
        print(f"KafkaLog                             : {kafka:12,.0f} rec/s")
        print(f"  ratio KafkaLog / raw aiokafka       : {kafka / raw:8.2f}x")
    else:
        print("(no --kafka HOST:PORT or LASER_KAFKA_BOOTSTRAP: Kafka half not measured)")


if __name__ == "__main__":
    main()
