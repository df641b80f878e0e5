"""Recall latency: managed view against folded recall, and against itself as the
namespace grows, as ratios measured in the same run.

    python -m benchmarks.recall [--sizes 2000 20000] [--limit 10] [--repeat 200]

For each namespace size it writes that many items (with some feedback) to a fresh
embedded log, folds a view, warms a folded handle, then times recall with
``limit`` for: folded recall (warm, nothing new to read), managed recall newest
first, managed recall feedback-ranked, managed recall filtered by agent.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import laser_memory as lm
from folders.service import ViewFolder

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
            await memory.recall(folded=True)

            async def timed(**query) -> float:
                samples = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    await memory.recall(limit=limit, **query)
                    samples.append(time.perf_counter() - start)
                return statistics.median(samples)

            return {
                "folded": await timed(folded=True),
                "managed recent": await timed(strategy="recent"),
                "managed auto": await timed(),
                "managed agent": await timed(agent="a3"),
            }


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``."""
    sizes = (2_000, 5_000) if quick else (2_000, 20_000)
    out: list[Figure] = []
    for size in sizes:
        timings = asyncio.run(measure(size, 10, 20 if quick else 100))
        values = {f"{name} @{size}": (seconds * 1e3, "ms p50") for name, seconds in timings.items()}
        ratios = {f"{name} @{size}": f"folded @{size}" for name in timings if name != "folded"}
        out.extend(rows("recall", values, ratios))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    results = {size: asyncio.run(measure(size, args.limit, args.repeat)) for size in args.sizes}
    smallest = args.sizes[0]
    print(f"median recall latency, limit={args.limit}")
    for size, timings in results.items():
        print(f"namespace of {size} items:")
        for name, seconds in timings.items():
            line = f"  {name:<15} {seconds * 1e3:8.3f} ms"
            if name != "folded":
                line += f"   {timings['folded'] / seconds:7.1f}x faster than folded"
            if size != smallest:
                line += f"   {seconds / results[smallest][name]:5.2f}x the {smallest}-item time"
            print(line)


if __name__ == "__main__":
    main()
