"""Writes and the fold against their raw limits, measured in the same run.

    python -m benchmarks.fold [--items 100000]

- ``remember_many`` (batches of 1,000, 110-byte bodies over 100 conversations) against
  the raw limit: msgspec-encoding the same records and putting them into LMDB in one
  transaction per batch; and 1,000 concurrent ``remember`` calls at a time (up to 20,000
  items) against the same limit.
- The embedded log's share of ``remember_many``: `LocalLog.append_batch` given the very
  records ``remember_many`` sends (made and encoded before the clock starts), in the same
  batches, against the same raw limit. What is left between it and ``remember_many`` is
  making and checking the records.
- The asyncio floor: 1,000 gathered coroutines awaiting one future, the least any
  per-call async API costs, so the concurrent figure shows what is ours.
- The fold (`ViewFolder` rebuilding a view of the whole topic) against its raw limit:
  decoding every record with msgspec and putting one value per record into LMDB, in
  transactions as large as the folder's (`FolderConfig.max_transaction_records`: a
  rebuild reads faster than it folds, so its transactions are full). Fewer, larger
  commits are much of what a large transaction saves, so a raw limit in smaller ones
  would flatter the fold.
- The fold of a log whose every item is in a conversation of its own (a session per
  item), of one whose records come from 10,000 tenants interleaved (the same 100
  conversations in each), and of one whose every item is a tenant's own (more tenants
  than the fold's caches hold), against the fold above (100 conversations, one tenant);
  and the writes of each such log (`remember_many`, batches of 1,000), against
  ``remember_many`` of the 100 conversations.
- The view's layout floor: decoding each record and making the writes the fold makes for
  a new item (its put, only if it is new, and its two newest-first entries written as
  runs; one more put a transaction) with the simplest keys, against the same raw limit.
- Every raw loop puts through one cursor per table and transaction, as the log and the
  fold do: the fastest plain way (``txn.put`` costs about a third more a put).
- Size on disk: the view's bytes per item against the log's.
- Size in memory: what a fresh handle's in-process fold holds per item after its first
  folded recall (Python's allocations, traced), against the log's bytes on disk.

Each raw limit is the mean of one run just before and one just after what it bounds
(the concurrent calls have their own pair, on their 20,000 items): one run of a raw loop
moved 2x from run to run here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
import tracemalloc

import lmdb
import msgspec

import laser_memory as lm
from folders.recency import RUN
from folders.service import FolderConfig, ViewFolder
from laser_memory.log.port import OutgoingRecord
from laser_memory.records import Remember, decode_record, encode_record
from laser_memory.scope import MemoryScope

from .figures import Figure, rows


def bodies(items: int) -> list[dict]:
    return [
        {
            "body": f"fact {i:07d}: the deploy of service {i % 37} to region {i % 11} went "
            f"fine after retry {i % 5}",
            "conversation": f"c{i % 100}",
        }
        for i in range(items)
    ]


def disk_bytes(path: str) -> int:
    return sum(
        os.stat(os.path.join(root, name)).st_blocks * 512
        for root, _, names in os.walk(path)
        for name in names
    )


def raw_encode_put(entries: list[dict]) -> float:
    with tempfile.TemporaryDirectory() as path:
        env = lmdb.open(path, map_size=1 << 34)
        start = time.perf_counter()
        for batch in range(0, len(entries), 1000):
            with env.begin(write=True) as txn:
                put = txn.cursor().put
                for i, entry in enumerate(entries[batch : batch + 1000], batch):
                    record = Remember(
                        ns="stream:bench/notes",
                        scope=MemoryScope(stream="bench", conversation=entry["conversation"]),
                        id=i.to_bytes(16, "big"),
                        kind=1,
                        body=entry["body"].encode(),
                    )
                    wire = encode_record(record)
                    put(i.to_bytes(8, "big"), wire.value)
        elapsed = time.perf_counter() - start
        env.close()
    return len(entries) / elapsed


def raw_decode_put(values: list[bytes], batch: int) -> float:
    with tempfile.TemporaryDirectory() as path:
        env = lmdb.open(path, map_size=1 << 34)
        start = time.perf_counter()
        for first in range(0, len(values), batch):
            with env.begin(write=True) as txn:
                put = txn.cursor().put
                for value in values[first : first + batch]:
                    record = decode_record(value)
                    put(record.id, value)
        elapsed = time.perf_counter() - start
        env.close()
    return len(values) / elapsed


def view_puts(values: list[bytes], batch: int) -> float:
    """The least the view's layout costs: decoding each record, then what the fold
    writes for a new item (the item, put only if new, and its two newest-first entries,
    its kind's and its conversation's, gathered and written as runs of `RUN` entries a
    row) and for each transaction (one ``changes`` row of its items' keys), with keys
    made as simply as possible, in transactions of ``batch`` records. The fold cannot
    beat it without storing less per record."""
    with tempfile.TemporaryDirectory() as path:
        env = lmdb.open(path, map_size=1 << 34, max_dbs=4)
        items, index, changes = (env.open_db(name) for name in (b"items", b"index", b"changes"))
        owner = b"\x95\xa2c1\xc0\xc0\xc0\x01"
        encode = msgspec.msgpack.encode
        start = time.perf_counter()
        seq = 0
        for first in range(0, len(values), batch):
            with env.begin(write=True) as txn:
                changed = []
                gathered: dict[bytes, list[bytes]] = {}
                item_put, index_put = txn.cursor(db=items).put, txn.cursor(db=index).put
                for value in values[first : first + batch]:
                    record = decode_record(value)
                    key = b"S" + record.id
                    item_put(key, value, overwrite=False)
                    changed.append(key)
                    for tag in (b"Rk", b"Rc" + record.scope.conversation.encode()):
                        gathered.setdefault(tag, []).append(record.id)
                for tag, ids in gathered.items():
                    ids.sort()
                    for at in range(0, len(ids), RUN):
                        run = ids[at : at + RUN]
                        index_put(tag + run[-1], encode((b"".join(run), [owner] * len(run))))
                seq += len(changed)
                txn.put(seq.to_bytes(8, "big"), encode(changed), db=changes)
        elapsed = time.perf_counter() - start
        env.close()
    return len(values) / elapsed


async def made_topics(laser: lm.Laser) -> None:
    """The topics a first write would make, made before the clock starts: creating a
    topic (a durable commit of its own, 6-11 ms here) is no part of a write's cost, and
    the raw loops open their stores untimed too."""
    await laser.bootstrap(partitions=laser.config.default_partitions)


async def log_append(entries: list[dict]) -> float:
    """Records a second the embedded log appends when given the records
    ``remember_many`` sends for ``entries`` (keys, headers and values as its writer makes
    them), in batches of 1,000, each awaited: the log's own share of the write path."""
    with tempfile.TemporaryDirectory() as log_dir:
        async with lm.connect(f"local://{log_dir}", stream="bench") as laser:
            await made_topics(laser)
            scopes = {
                conversation: MemoryScope(stream="bench", conversation=conversation)
                for conversation in {e["conversation"] for e in entries}
            }
            outgoing = []
            for i, entry in enumerate(entries):
                wire = encode_record(
                    Remember(
                        ns="notes",
                        scope=scopes[entry["conversation"]],
                        id=i.to_bytes(16, "big"),
                        kind=1,
                        body=entry["body"].encode(),
                    )
                )
                outgoing.append(OutgoingRecord(wire.value, key=wire.key, headers=wire.headers))
            topic = laser.memory_topic_name
            start = time.perf_counter()
            for first in range(0, len(outgoing), 1000):
                await laser.log.append_batch(topic, outgoing[first : first + 1000])
            return len(outgoing) / (time.perf_counter() - start)


async def concurrent_remember(entries: list[dict]) -> float:
    """Items a second from 1,000 concurrent `remember` calls at a time (gathered: they
    share the log's group commits), on a log of their own."""
    with tempfile.TemporaryDirectory() as log_dir:
        async with lm.connect(f"local://{log_dir}", stream="bench") as laser:
            memory = laser.memory("notes")
            await made_topics(laser)
            start = time.perf_counter()
            for first in range(0, len(entries), 1000):
                await asyncio.gather(
                    *(
                        memory.remember(e["body"], conversation=e["conversation"])
                        for e in entries[first : first + 1000]
                    )
                )
            return len(entries) / (time.perf_counter() - start)


async def asyncio_floor(calls: int) -> float:
    """Calls a second of the cheapest async call gathered as `concurrent_remember` does:
    1,000 coroutines at a time, each awaiting one future that resolves on the next
    turn of the loop. No per-call API on asyncio can beat it."""
    loop = asyncio.get_running_loop()

    async def call(done: asyncio.Future[None]) -> None:
        await done

    start = time.perf_counter()
    for _ in range(0, calls, 1000):
        done = loop.create_future()
        loop.call_soon(done.set_result, None)
        await asyncio.gather(*(call(done) for _ in range(1000)))
    return calls / (time.perf_counter() - start)


async def folded_bytes(log_dir: str, items: int) -> float:
    """Bytes a fresh handle holds per item once its first folded recall is done: the
    fold of every record and the order its recall keeps (traced allocations, so
    the fold runs several times slower while they are measured)."""
    async with lm.connect(f"local://{log_dir}", stream="bench") as laser:
        memory = laser.memory("notes")
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            await memory.recall(folded=True, limit=10)
            gc.collect()
            return (tracemalloc.get_traced_memory()[0] - before) / items
        finally:
            tracemalloc.stop()


async def fold_of(entries: list[dict]) -> tuple[float, float]:
    """Items a second of writing ``entries`` (`remember_many` in batches of 1,000), and
    records a second of a rebuild of the log they make."""
    with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as view_dir:
        async with lm.connect(f"local://{log_dir}", stream="bench") as laser:
            memory = laser.memory("notes")
            await made_topics(laser)
            start = time.perf_counter()
            for first in range(0, len(entries), 1000):
                await memory.remember_many(entries[first : first + 1000])
            writes = len(entries) / (time.perf_counter() - start)
            start = time.perf_counter()
            await ViewFolder(laser.log, laser.memory_topic_name, view_dir).run(until_caught_up=True)
            return writes, len(entries) / (time.perf_counter() - start)


#: Tenants of the many-tenant fold: their records interleave, ten items a tenant at 100k.
TENANTS = 10_000


async def measure(items: int) -> dict[str, float]:
    """Each raw limit is the mean of a run just before and one just after what it is
    the limit of: on this machine a single run of the raw loop moved 2x from run to
    run, drifting with whatever else the host did."""
    entries = bodies(items)
    with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as view_dir:
        async with lm.connect(f"local://{log_dir}", stream="bench") as laser:
            memory = laser.memory("notes")
            await made_topics(laser)
            encode_before = raw_encode_put(entries)
            start = time.perf_counter()
            for first in range(0, items, 1000):
                await memory.remember_many(entries[first : first + 1000])
            writes = items / (time.perf_counter() - start)
            encode_after = raw_encode_put(entries)
            appends = await log_append(entries)
            append_after = raw_encode_put(entries)
            values = []
            async for batch in laser.log.read(laser.memory_topic_name):
                values.extend(record.value for record in batch)
            transaction = FolderConfig().max_transaction_records
            decode_before = raw_decode_put(values, transaction)
            start = time.perf_counter()
            await ViewFolder(laser.log, laser.memory_topic_name, view_dir).run(until_caught_up=True)
            fold = items / (time.perf_counter() - start)
            decode_after = raw_decode_put(values, transaction)
            in_memory = await folded_bytes(log_dir, items)
        # Before the folds of many owners below: the caches those fill (ten thousand
        # tenants' scopes, keys and header sets) are the process's, and a full collection
        # walks them, so after them these calls ran at 0.06-0.09x, not 0.09-0.11x. That is
        # another workload's state, not the write path's cost.
        concurrent_before = raw_encode_put(entries[: min(items, 20_000)])
        gathered = await concurrent_remember(entries[: min(items, 20_000)])
        floor = await asyncio_floor(min(items, 20_000))
        concurrent_after = raw_encode_put(entries[: min(items, 20_000)])
        # Every item in a conversation of its own (a session per item): each record a new
        # owner, whose orders and checked scope the fold makes afresh, where the main
        # figure's 100 conversations share theirs.
        # Their writes are timed too, against the 100 conversations' `remember_many`: a
        # new owner's scope is made and checked, where the main figure's are met again.
        per_item_writes, per_item = await fold_of(
            [{"body": e["body"], "conversation": f"session-{i}"} for i, e in enumerate(entries)]
        )
        # The same 100 conversations, in each of many tenants, their records interleaved.
        tenants_writes, tenants = await fold_of(
            [{**e, "tenant": f"tenant-{i % TENANTS}"} for i, e in enumerate(entries)]
        )
        # A tenant per item: past what the caches hold (16,384 entries each), owners met
        # once; the caches keep only what comes again once they overflow.
        tenant_each_writes, tenant_each = await fold_of(
            [{**e, "tenant": f"tenant-{i}"} for i, e in enumerate(entries)]
        )
        return {
            "remember_many items/s": writes,
            "concurrent remember items/s": gathered,
            "asyncio floor calls/s": floor,
            "raw encode+put items/s": (encode_before + encode_after) / 2,
            "log append items/s": appends,
            "raw encode+put around the log append items/s": (encode_after + append_after) / 2,
            "raw encode+put near them items/s": (concurrent_before + concurrent_after) / 2,
            "fold records/s": fold,
            "fold, a conversation per item records/s": per_item,
            f"fold, {TENANTS:,} tenants records/s": tenants,
            "fold, a tenant per item records/s": tenant_each,
            "remember_many, a conversation per item items/s": per_item_writes,
            f"remember_many, {TENANTS:,} tenants items/s": tenants_writes,
            "remember_many, a tenant per item items/s": tenant_each_writes,
            "raw decode+put records/s": (decode_before + decode_after) / 2,
            "view puts records/s": view_puts(values, transaction),
            "log bytes/item": disk_bytes(log_dir) / items,
            "view bytes/item": disk_bytes(view_dir) / items,
            "in-process fold bytes/item": in_memory,
        }


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``."""
    r = asyncio.run(measure(20_000 if quick else 100_000))
    values = {
        "raw encode+put": (r["raw encode+put items/s"], "items/s"),
        "remember_many": (r["remember_many items/s"], "items/s"),
        "raw encode+put, run around the log append": (
            r["raw encode+put around the log append items/s"],
            "items/s",
        ),
        "LocalLog append_batch (remember_many's records, made beforehand)": (
            r["log append items/s"],
            "items/s",
        ),
        "raw encode+put, run around the concurrent calls": (
            r["raw encode+put near them items/s"],
            "items/s",
        ),
        "1,000 concurrent remember": (r["concurrent remember items/s"], "items/s"),
        "asyncio floor (1,000 gathered awaits)": (r["asyncio floor calls/s"], "calls/s"),
        "raw decode+put": (r["raw decode+put records/s"], "records/s"),
        "view puts (the layout's floor)": (r["view puts records/s"], "records/s"),
        "fold (rebuild)": (r["fold records/s"], "records/s"),
        "fold (rebuild), a conversation per item": (
            r["fold, a conversation per item records/s"],
            "records/s",
        ),
        f"fold (rebuild), {TENANTS:,} tenants interleaved": (
            r[f"fold, {TENANTS:,} tenants records/s"],
            "records/s",
        ),
        "fold (rebuild), a tenant per item": (r["fold, a tenant per item records/s"], "records/s"),
        "remember_many, a conversation per item": (
            r["remember_many, a conversation per item items/s"],
            "items/s",
        ),
        f"remember_many, {TENANTS:,} tenants interleaved": (
            r[f"remember_many, {TENANTS:,} tenants items/s"],
            "items/s",
        ),
        "remember_many, a tenant per item": (
            r["remember_many, a tenant per item items/s"],
            "items/s",
        ),
        "log on disk": (r["log bytes/item"], "bytes/item"),
        "view on disk": (r["view bytes/item"], "bytes/item"),
        "in-process fold in memory": (r["in-process fold bytes/item"], "bytes/item"),
    }
    ratios = {
        "remember_many": "raw encode+put",
        "LocalLog append_batch (remember_many's records, made beforehand)": (
            "raw encode+put, run around the log append"
        ),
        "1,000 concurrent remember": "raw encode+put, run around the concurrent calls",
        "asyncio floor (1,000 gathered awaits)": "raw encode+put, run around the concurrent calls",
        "view puts (the layout's floor)": "raw decode+put",
        "fold (rebuild)": "raw decode+put",
        "fold (rebuild), a conversation per item": "fold (rebuild)",
        f"fold (rebuild), {TENANTS:,} tenants interleaved": "fold (rebuild)",
        "fold (rebuild), a tenant per item": "fold (rebuild)",
        "remember_many, a conversation per item": "remember_many",
        f"remember_many, {TENANTS:,} tenants interleaved": "remember_many",
        "remember_many, a tenant per item": "remember_many",
        "view on disk": "log on disk",
        "in-process fold in memory": "log on disk",
    }
    return rows("fold", values, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()
    r = asyncio.run(measure(args.items))
    print(f"{args.items} items, 110-byte bodies over 100 conversations")
    for name, value in r.items():
        print(f"  {name:<34} {value:12,.0f}")
    ratios = [
        ("remember_many / raw encode+put", "remember_many items/s", "raw encode+put items/s"),
        (
            "log append / raw encode+put",
            "log append items/s",
            "raw encode+put around the log append items/s",
        ),
        (
            "concurrent remember / raw",
            "concurrent remember items/s",
            "raw encode+put near them items/s",
        ),
        (
            "concurrent remember / asyncio floor",
            "concurrent remember items/s",
            "asyncio floor calls/s",
        ),
        ("fold / raw decode+put", "fold records/s", "raw decode+put records/s"),
        (
            "fold, a conversation per item / fold",
            "fold, a conversation per item records/s",
            "fold records/s",
        ),
        (
            f"fold, {TENANTS:,} tenants / fold",
            f"fold, {TENANTS:,} tenants records/s",
            "fold records/s",
        ),
        (
            "fold, a tenant per item / fold",
            "fold, a tenant per item records/s",
            "fold records/s",
        ),
        (
            "remember_many, a conversation per item / remember_many",
            "remember_many, a conversation per item items/s",
            "remember_many items/s",
        ),
        (
            f"remember_many, {TENANTS:,} tenants / remember_many",
            f"remember_many, {TENANTS:,} tenants items/s",
            "remember_many items/s",
        ),
        (
            "remember_many, a tenant per item / remember_many",
            "remember_many, a tenant per item items/s",
            "remember_many items/s",
        ),
        ("view puts / raw decode+put", "view puts records/s", "raw decode+put records/s"),
        ("fold / view puts", "fold records/s", "view puts records/s"),
        ("fold / remember_many", "fold records/s", "remember_many items/s"),
        ("view / log bytes per item", "view bytes/item", "log bytes/item"),
        ("in-process fold / log bytes", "in-process fold bytes/item", "log bytes/item"),
    ]
    for label, top, bottom in ratios:
        print(f"  {label:<32} {r[top] / r[bottom]:6.2f}x")


if __name__ == "__main__":
    main()
