"""Search latency: keyword, semantic and hybrid recall as the namespace grows, against
baselines measured in the same run.

    python -m benchmarks.search [--sizes 10000 100000] [--dims 384] [--repeat 20]

Each size gets a fresh embedded log with that many items: sentences of 12 words drawn
from a Zipf-distributed vocabulary of 20,000 words (so some words are in most items
and most words in few), with an identifier such as ``node-123`` in each, and a
deterministic pseudo-random vector of ``--dims`` dimensions per item (a stand-in
model: the point is the ranking's cost, not the model's). A view is folded, then the
median latency of each query, limit 10:

- keyword: a rare word, an identifier (``node-5``: its part ``node`` is in every
  item), a common word, only stop words; managed, and the rare word folded;
- semantic and hybrid, managed; hybrid folded;
- baseline: one numpy matrix-vector product over all the items' vectors (the least
  an exact semantic search can do), and the fold's own speed in records/s.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import time

import numpy as np

import laser_memory as lm
from folders.service import ViewFolder

from .figures import Figure, rows


class StandInEmbedder:
    """Pseudo-random unit vectors seeded by the text: same text, same vector."""

    label = "bench/stand-in"

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    def embed_many(self, texts):
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimensions)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def corpus(size: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(20_000)]
    ranks = np.minimum(rng.zipf(1.2, size=(size, 12)) - 1, len(vocabulary) - 1)
    return [
        " ".join(vocabulary[r] for r in row) + f" node-{i % 997}" for i, row in enumerate(ranks)
    ]


async def timed(call, repeat: int) -> float:
    await call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def measure(size: int, dims: int, repeat: int) -> dict[str, float]:
    embedder = StandInEmbedder(dims)
    texts = corpus(size)
    with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as view_dir:
        async with lm.connect(f"local://{log_dir}", view=view_dir, embedder=embedder) as laser:
            memory = laser.memory("bench")
            started = time.perf_counter()
            for start in range(0, size, 5000):
                await memory.remember_many(texts[start : start + 5000])
            write_rate = size / (time.perf_counter() - started)
            started = time.perf_counter()
            await ViewFolder(laser.log, laser.memory_topic_name, view_dir).run(until_caught_up=True)
            fold_rate = size / (time.perf_counter() - started)
            vectors = np.stack(embedder.embed_many(texts[:size]))
            query = embedder.embed_many(["w1 w2 w3"])[0]

            async def matvec() -> None:
                (vectors @ query).argpartition(-10)[-10:]

            def recall(**query):
                return lambda: memory.recall(limit=10, **query)

            queries = {
                "keyword rare word": recall(text="w12345", strategy="keyword"),
                "keyword identifier": recall(text="node-5", strategy="keyword"),
                "keyword common word": recall(text="w1", strategy="keyword"),
                "keyword stop words": recall(text="what did the", strategy="keyword"),
                "semantic": recall(text="w1 w2 w3", strategy="semantic"),
                "hybrid": recall(text="w1 w2 w3", strategy="hybrid"),
                "folded keyword rare": recall(text="w12345", strategy="keyword", folded=True),
                "folded hybrid": recall(text="w1 w2 w3", strategy="hybrid", folded=True),
            }
            out = {"numpy mat-vec (baseline)": await timed(matvec, repeat)}
            for name, call in queries.items():
                out[name] = await timed(call, repeat)
            out["fold records/s"] = fold_rate
            out["writes items/s"] = write_rate
            return out


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``."""
    out: list[Figure] = []
    for size in (2_000, 10_000) if quick else (10_000, 100_000):
        timings = asyncio.run(measure(size, 384, 5))
        fold = timings.pop("fold records/s")
        writes = timings.pop("writes items/s")
        values = {f"{name} @{size}": (seconds * 1e3, "ms p50") for name, seconds in timings.items()}
        base = f"numpy mat-vec (baseline) @{size}"
        out.extend(rows("search", values, {name: base for name in values if name != base}))
        # The fold against the writes that made its records (embedding included): a
        # view that folds slower than they write falls behind.
        written = f"remember_many with the embedder @{size}"
        out.extend(
            rows(
                "search",
                {written: (writes, "items/s"), f"fold with vectors @{size}": (fold, "records/s")},
                {f"fold with vectors @{size}": written},
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    results = {size: asyncio.run(measure(size, args.dims, args.repeat)) for size in args.sizes}
    smallest = args.sizes[0]
    print(f"median recall latency, limit 10, {args.dims}-d vectors")
    for size, timings in results.items():
        fold, writes = timings.pop("fold records/s"), timings.pop("writes items/s")
        print(
            f"namespace of {size} items (remember_many with the embedder: {writes:,.0f} items/s;"
            f" fold: {fold:,.0f} records/s, {fold / writes:.2f}x the writes):"
        )
        baseline = timings["numpy mat-vec (baseline)"]
        for name, seconds in timings.items():
            line = f"  {name:<26} {seconds * 1e3:9.3f} ms   {seconds / baseline:8.1f}x mat-vec"
            if size != smallest:
                line += f"   {seconds / results[smallest][name]:6.2f}x the {smallest}-item time"
            print(line)


if __name__ == "__main__":
    main()
