"""Recall latency: managed view against folded recall, and against itself as the
namespace grows, as ratios measured in the same run.

    python -m benchmarks.recall [--sizes 10000 100000] [--limit 10] [--repeat 200]

For each namespace size it writes that many items (with some feedback) to a fresh
embedded log, folds a view, warms a folded handle, then times recall with
``limit`` for: folded recall (warm, nothing new to read), managed recall newest
first, managed recall feedback-ranked, managed recall filtered by agent. Warm folded
recall at the larger size is a ratio to the smaller (the target: within 2x).

It also times a fresh handle's first recall (a connection of its own, so nothing is
cached: it reads the topic's partitions once and folds them) against one plain read
of the same partitions, the least that recall could cost; and the same for a handle
bound to one tenant of ten sharing the topic (as a server makes one per request), which
folds that tenant's records only, and for one bound to a tenant of a topic whose every
item is a tenant's own (it passes over all but one record, each under a header set of
its own).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.memory import MemoryConfig

from .figures import Figure, rows


async def measure(size: int, limit: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as view_dir:
        async with lm.connect(f"local://{log_dir}", view=view_dir) as laser:
            memory = laser.memory("bench")
            for start in range(0, size, 5000):
                ids = await memory.remember_many(
                    [
                        {"body": f"fact {i} about node-{i % 97}", "agent": f"a{i % 10}",
                         "conversation": f"c{i % 50}"}
                        for i in range(start, min(size, start + 5000))
                    ]
                )  # fmt: skip
                for mid in ids[::500]:
                    await memory.improve(mid, 1.0)
            await ViewFolder(laser.log, laser.memory_topic_name, view_dir).run(until_caught_up=True)
            start = time.perf_counter()
            async for _ in laser.log.read(laser.memory_topic_name):
                pass
            one_read = time.perf_counter() - start
            async with lm.connect(f"local://{log_dir}") as fresh:
                handle = fresh.memory("bench")
                start = time.perf_counter()
                await handle.recall(folded=True, limit=limit)
                first_recall = time.perf_counter() - start
            await memory.recall(folded=True)

            async def timed(**query) -> float:
                samples = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    await memory.recall(limit=limit, **query)
                    samples.append(time.perf_counter() - start)
                return statistics.median(samples)

            figures = {
                "folded": await timed(folded=True),
                "managed recent": await timed(strategy="recent"),
                "managed auto": await timed(),
                "managed agent": await timed(agent="a3"),
                FIRST: first_recall,
                ONE_READ: one_read,
            }
    (
        figures[FIRST_BOUND],
        figures[ONE_READ_TENANTS],
        figures[NEXT_REQUEST],
    ) = await first_bound_recall(size, limit)
    figures[FIRST_BOUND_EACH], figures[ONE_READ_EACH], _ = await first_bound_recall(
        size, limit, tenants=size
    )
    return figures


async def first_bound_recall(
    size: int, limit: int, tenants: int = 10
) -> tuple[float, float, float]:
    """A fresh handle bound to one of ``tenants`` tenants: its first recall, one read of
    the topic they share, and the first recall of the next handle a connection sharing
    its folds makes for that tenant after the first is gone (a server's next request)."""
    with tempfile.TemporaryDirectory() as log_dir:
        async with lm.connect(f"local://{log_dir}") as laser:
            memory = laser.memory("bench")
            for start in range(0, size, 5000):
                await memory.remember_many(
                    [
                        {"body": f"fact {i} about node-{i % 97}", "tenant": f"t{i % tenants}",
                         "conversation": f"c{i % 50}"}
                        for i in range(start, min(size, start + 5000))
                    ]
                )  # fmt: skip
            start = time.perf_counter()
            async for _ in laser.log.read(laser.memory_topic_name):
                pass
            one_read = time.perf_counter() - start
        # A server's connection: its handles share their folds (`shared_folds`).
        config = MemoryConfig(shared_folds=8)
        async with lm.connect(f"local://{log_dir}", config=config) as fresh:
            start = time.perf_counter()
            await fresh.memory("bench", tenant="t3").recall(folded=True, limit=limit)
            first = time.perf_counter() - start
            start = time.perf_counter()
            await fresh.memory("bench", tenant="t3").recall(folded=True, limit=limit)
            return first, one_read, time.perf_counter() - start


#: A fresh handle's first recall, and its baseline: one read of the topic.
FIRST = "first recall, fresh handle"
ONE_READ = "one read of the topic"
FIRST_BOUND = "first recall, fresh handle of 1 of 10 tenants"
ONE_READ_TENANTS = "one read of the 10 tenants' topic"
NEXT_REQUEST = "first recall, next handle of that tenant"
FIRST_BOUND_EACH = "first recall, fresh handle of 1 of a tenant per item"
ONE_READ_EACH = "one read of the topic of a tenant per item"


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``."""
    sizes = (2_000, 5_000) if quick else (10_000, 100_000)
    values: dict[str, tuple[float, str]] = {}
    ratios: dict[str, str] = {}
    for size in sizes:
        timings = asyncio.run(measure(size, 10, 20 if quick else 100))
        for name, seconds in timings.items():
            once = (
                FIRST, ONE_READ, FIRST_BOUND, ONE_READ_TENANTS, NEXT_REQUEST,
                FIRST_BOUND_EACH, ONE_READ_EACH,
            )  # fmt: skip
            unit = "ms" if name in once else "ms p50"
            values[f"{name} @{size}"] = (seconds * 1e3, unit)
            if name.startswith("managed"):
                ratios[f"{name} @{size}"] = f"folded @{size}"
        ratios[f"{FIRST} @{size}"] = f"{ONE_READ} @{size}"
        ratios[f"{FIRST_BOUND} @{size}"] = f"{ONE_READ_TENANTS} @{size}"
        ratios[f"{NEXT_REQUEST} @{size}"] = f"{ONE_READ_TENANTS} @{size}"
        ratios[f"{FIRST_BOUND_EACH} @{size}"] = f"{ONE_READ_EACH} @{size}"
    # The target: warm folded recall at the larger size within 2x of the smaller.
    ratios[f"folded @{sizes[1]}"] = f"folded @{sizes[0]}"
    return rows("recall", values, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    results = {size: asyncio.run(measure(size, args.limit, args.repeat)) for size in args.sizes}
    smallest = args.sizes[0]
    print(f"median recall latency, limit={args.limit}")
    for size, timings in results.items():
        print(f"namespace of {size} items:")
        for name, seconds in timings.items():
            line = f"  {name:<46} {seconds * 1e3:9.3f} ms"
            if name == FIRST:
                line += f"   {seconds / timings[ONE_READ]:7.1f}x one read of the topic"
            elif name in (FIRST_BOUND, NEXT_REQUEST):
                line += f"   {seconds / timings[ONE_READ_TENANTS]:7.3f}x one read of the topic"
            elif name == FIRST_BOUND_EACH:
                line += f"   {seconds / timings[ONE_READ_EACH]:7.3f}x one read of the topic"
            elif name.startswith("managed"):
                line += f"   {timings['folded'] / seconds:7.1f}x faster than folded"
            if size != smallest:
                line += f"   {seconds / results[smallest][name]:5.2f}x the {smallest}-item time"
            print(line)


if __name__ == "__main__":
    main()
