"""The embedded log's layout on disk keeps reading.

The embedded log is the record of everything remembered, so a log written by today's
code must open under every later version. `tests/fixtures/local-log-v1/entries.msgpack`
holds every key and value of the three LMDB tables of a log written with the layout of
version 1 (`laser_memory/log/local.py`'s module docstring), by `write_the_fixture_log`:
two topics, keyed and unkeyed records, empty and binary values, several header sets, a
clock stepping back, a retention that dropped a record, a deleted topic. LMDB keeps its
own file format; these are our bytes inside it.

To write the file again after an intended change of layout (a new version: keep the old
file, add a new one): ``python tests/test_log_format.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lmdb
import msgspec

from laser_memory.clock import SteppedClock
from laser_memory.log import LocalLog, LocalLogConfig, OutgoingRecord
from laser_memory.log.port import LogRecord

FIXTURE = Path(__file__).parent / "fixtures" / "local-log-v1" / "entries.msgpack"
TABLES = ("topics", "heads", "records")
START_MS = 1_796_000_000_000


async def write_the_fixture_log(path: Path) -> None:
    clock = SteppedClock(START_MS)
    async with LocalLog(path, LocalLogConfig(clock=clock)) as log:
        await log.create_topic("memory.v1", partitions=2)
        await log.create_topic("gone", partitions=1)
        await log.create_topic("kept", partitions=1, retention_s=60.0)
        await log.delete_topic("gone")  # its number is never given again
        await log.append_batch(
            "memory.v1",
            [
                OutgoingRecord(b"first", key=b"c-1", headers=(("op", b"remember"),)),
                OutgoingRecord(b"", key=None, partition=0),
                OutgoingRecord(
                    b"\x00\xff", key=b"c-2", headers=(("op", b"forget"), ("tenant", b"acme"))
                ),
            ],
        )
        clock.step(5)
        await log.append("memory.v1", OutgoingRecord(b"later", key=b"c-1", partition=1))
        clock.step(-3)  # append times never go back within a partition
        await log.append("memory.v1", OutgoingRecord(b"back", key=b"c-1", partition=1))
        await log.append("kept", OutgoingRecord(b"old", headers=(("op", b"remember"),)))
        clock.step(61_000)  # past the retention: the next append drops "old"
        await log.append("kept", OutgoingRecord(b"new", key=b"k"))


def dump(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    env = lmdb.open(str(path), max_dbs=len(TABLES) + 1, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return {
                name: list(txn.cursor(db=env.open_db(name.encode(), txn=txn))) for name in TABLES
            }
    finally:
        env.close()


def restore(entries: dict[str, list[tuple[bytes, bytes]]], path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=len(TABLES) + 1)
    try:
        with env.begin(write=True) as txn:
            for name in TABLES:
                db = env.open_db(name.encode(), txn=txn)
                for key, value in entries[name]:
                    txn.put(key, value, db=db)
    finally:
        env.close()


def without_generations(entries: dict) -> dict:
    """The entries with each topic's generation (its creation time in ns) left out."""
    topics = []
    for key, value in entries["topics"]:
        if key.startswith(b"\x00"):  # the next topic number
            topics.append((key, value))
        else:
            number, partitions, retention_s, _generation = msgspec.msgpack.decode(value)
            topics.append((key, (number, partitions, retention_s)))
    return {**entries, "topics": topics}


def fixture() -> dict[str, list[tuple[bytes, bytes]]]:
    raw = msgspec.msgpack.decode(FIXTURE.read_bytes())
    return {name: [(bytes(k), bytes(v)) for k, v in raw[name]] for name in TABLES}


def view(record: LogRecord) -> tuple:
    return (
        record.partition,
        record.offset,
        record.append_time_ms - START_MS,
        record.key,
        record.value,
        record.headers,
    )


async def read_all(log: LocalLog, topic: str) -> list[tuple]:
    out = []
    async for batch in log.read(topic):
        out.extend(view(record) for record in batch)
    return sorted(out)


async def test_a_log_written_by_version_1_reads_and_appends_on(tmp_path):
    restore(fixture(), tmp_path)
    generations = {
        key.decode(): msgspec.msgpack.decode(value)[3]
        for key, value in fixture()["topics"]
        if not key.startswith(b"\x00")
    }
    async with LocalLog(tmp_path, LocalLogConfig(clock=SteppedClock(START_MS + 100_000))) as log:
        memory = await log.describe_topic("memory.v1")
        assert (memory.partitions, memory.retention_s) == (2, None)
        assert memory.generation == generations["memory.v1"]
        kept = await log.describe_topic("kept")
        assert (kept.partitions, kept.retention_s) == (1, 60.0)
        assert await log.end_offsets("memory.v1") == {0: 2, 1: 3}
        assert await log.end_offsets("kept") == {0: 2}
        assert await read_all(log, "memory.v1") == [
            (0, 0, 0, None, b"", ()),
            (0, 1, 0, b"c-2", b"\x00\xff", (("op", b"forget"), ("tenant", b"acme"))),
            (1, 0, 0, b"c-1", b"first", (("op", b"remember"),)),
            (1, 1, 5, b"c-1", b"later", ()),
            (1, 2, 5, b"c-1", b"back", ()),
        ]
        # "old" went with the retention: the partition starts at offset 1.
        assert await read_all(log, "kept") == [(0, 1, 61_002, b"k", b"new", ())]
        # Appends go on from where version 1 left off, in new topics numbered past all.
        receipt = await log.append("memory.v1", OutgoingRecord(b"now", key=b"c-1"))
        assert (receipt.partition, receipt.offset) == (1, 3)
        assert receipt.append_time_ms == START_MS + 100_000
        assert receipt.generation == generations["memory.v1"]
        await log.create_topic("gone", partitions=3)
        assert await log.end_offsets("gone") == {0: 0, 1: 0, 2: 0}
        # The deleted topic's records never show under a topic of its name again.
        assert await read_all(log, "gone") == []


async def test_todays_log_writes_the_layout_of_version_1(tmp_path):
    await write_the_fixture_log(tmp_path)
    assert without_generations(dump(tmp_path)) == without_generations(fixture())


if __name__ == "__main__":
    if FIXTURE.exists() and "--overwrite" not in sys.argv:
        sys.exit(f"{FIXTURE} exists: a fixture is never rewritten (pass --overwrite if it must)")
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(write_the_fixture_log(Path(folder)))
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_bytes(msgspec.msgpack.encode(dump(Path(folder))))
    print(f"wrote {FIXTURE}")
