"""Approximate semantic search: latency and recall@10 against exact search, at sizes
where reading every vector is what costs.

    python -m benchmarks.approximate [--sizes 100000 1000000] [--locomo PATH]

Random vectors are the wrong test for an approximate index (they have no neighbours
worth finding, so every method fails on them alike), and embedding a million texts
with the local model takes hours here. So the vectors are drawn from a Gaussian with
the mean and covariance of real all-MiniLM-L6-v2 embeddings: of the turns of the
LoCoMo files in ``--locomo PATH`` (first 1,000), or else of 1,000 short sentences made
from templates below. Each size fills a search index (the one folded and managed
recall use) with that many vectors, then reports, over 50 queries from the same
distribution, limit 10:

- baseline: one numpy matrix-vector product over all the vectors;
- exact semantic search through the index, and exact hybrid search with the words of a
  sentence like the bodies (template sentences: who did what, when);
- approximate search at three probe shares, with its recall@10 against exact
  (the share of the exact top 10 it returns);
- the time to make the clusters (once per index, on its first approximate search).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import laser_memory as lm
from laser_memory.ids import MemoryId
from laser_memory.items import MemoryItem, Source
from laser_memory.kinds import MemoryKind
from laser_memory.scope import MemoryScope
from laser_memory.search_index import SearchIndex
from laser_memory.terms import terms

from .figures import Figure, NotMeasured, rows
from .models import minilm_or_reason

LABEL = "bench/minilm-statistics"
SHARES = (0.06, 0.12, 0.25)
QUERIES = 50

_WHO = "Alice Bob Carol Dan Erin Frank Grace Heidi Ivan Judy the team my sister our manager".split()
_DID = [
    "moved", "cancelled", "talked about", "fixed", "painted", "booked", "forgot",
    "asked about", "finished", "started", "loved", "sold", "found", "lost", "planned",
]  # fmt: skip
_WHAT = [
    "the deploy", "a trip to Lisbon", "the kitchen", "her violin lessons", "the quarterly report",
    "a dentist appointment", "the garden fence", "his marathon training", "the database migration",
    "a birthday party", "the car insurance", "an adoption interview", "the support ticket",
    "a camping weekend", "the new puppy", "a pottery class", "the server outage", "our rent",
]  # fmt: skip
_WHEN = ["on Friday", "last week", "yesterday", "in May", "after lunch", "at night", "again", ""]


def _sentences(count: int, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"{rng.choice(_WHO)} {rng.choice(_DID)} {rng.choice(_WHAT)} {rng.choice(_WHEN)}".strip()
        for _ in range(count)
    ]


def _source_texts(locomo: str | None) -> tuple[list[str], str]:
    if locomo:
        from .recall_quality import load, turns_of

        texts = [text for _, c in load(Path(locomo)) for _, text in turns_of(c)][:1000]
        return texts, f"LoCoMo turns in {locomo}"
    return _sentences(1000), "1,000 template sentences"


class GaussianLike:
    """Vectors with the mean and covariance of some real embeddings."""

    def __init__(self, real: np.ndarray, seed: int = 7) -> None:
        real = real.astype(np.float64)
        self.mean = real.mean(axis=0)
        values, axes = np.linalg.eigh(np.cov((real - self.mean).T))
        self.scale = (axes * np.sqrt(np.clip(values, 0, None))).astype(np.float32)
        self.rng = np.random.default_rng(seed)

    def sample(self, count: int) -> np.ndarray:
        out = self.mean.astype(np.float32) + (
            self.rng.standard_normal((count, len(self.mean)), dtype=np.float32) @ self.scale.T
        )
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _bodies(count: int, seed: int) -> list[bytes]:
    """``count`` template sentences as bodies (drawn at once: a draw a word took 12 s at
    1M)."""
    rng = np.random.default_rng(seed)
    picks = [rng.integers(len(words), size=count) for words in (_WHO, _DID, _WHAT, _WHEN)]
    return [
        f"{_WHO[a]} {_DID[b]} {_WHAT[c]} {_WHEN[d]}".strip().encode()
        for a, b, c, d in zip(*(p.tolist() for p in picks), strict=True)
    ]


def _fill(index: SearchIndex, vectors: np.ndarray, start: int) -> None:
    bodies = _bodies(len(vectors), seed=start)
    for n, (vector, body) in enumerate(zip(vectors, bodies, strict=True), start):
        raw_id = n.to_bytes(16, "big")
        index.put(
            raw_id,
            MemoryItem(
                id=MemoryId(raw_id),
                kind=MemoryKind.FACT,
                body=body,
                scope=MemoryScope(),
                lifetime="session",
                append_time_ms=n,
                source=Source("", "t", 0, n, "", None),
                embedding=vector.astype("<f4").tobytes(),
                embedder=LABEL,
            ),
        )


def _median_ms(call, queries) -> float:
    times = []
    for query in queries:
        started = time.perf_counter()
        call(query)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(
    sizes: list[int], locomo: str | None, embedder: lm.MiniLMEmbedder
) -> tuple[list[Figure], str]:
    texts, source = _source_texts(locomo)
    print(f"  embedding {len(texts)} texts ({source}) with MiniLM ...", file=sys.stderr)
    real = np.asarray(embedder.embed_many(texts), dtype=np.float32)
    generator = GaussianLike(real)
    queries = list(generator.sample(QUERIES))
    # Each with the terms of a sentence of the bodies' kind, for hybrid search.
    hybrid_queries = [
        (query, terms(body.decode()))
        for query, body in zip(queries, _bodies(QUERIES, seed=99), strict=True)
    ]
    index = SearchIndex(LABEL)
    matrix = np.zeros((0, real.shape[1]), dtype=np.float32)
    figures: list[Figure] = []
    for size in sizes:
        started = time.perf_counter()
        fresh = generator.sample(size - len(matrix))
        _fill(index, fresh, len(matrix))
        matrix = np.concatenate([matrix, fresh])
        print(f"  {size} vectors in {time.perf_counter() - started:.0f} s", file=sys.stderr)

        def search(query, config, strategy="semantic", words=()):
            return index.search(
                list(words),
                strategy=strategy,
                query_vector=query,
                min_similarity=None,
                limit=10,
                exclude=frozenset(),
                approximate=config,
            )

        exact = [{raw_id for raw_id, _ in search(q, None)} for q in queries]
        values = {
            f"mat-vec @{size}": (_median_ms(lambda q, m=matrix: m @ q, queries), "ms"),
            f"exact semantic @{size}": (_median_ms(lambda q: search(q, None), queries), "ms"),
            # Hybrid recall stays exact at any size: every vector read, every posting
            # list of the query's words scored.
            f"exact hybrid @{size}": (
                _median_ms(lambda qw: search(qw[0], None, "hybrid", qw[1]), hybrid_queries),
                "ms",
            ),
        }
        ratios = {
            f"exact semantic @{size}": f"mat-vec @{size}",
            f"exact hybrid @{size}": f"mat-vec @{size}",
        }
        for share in SHARES:
            config = lm.ApproximateSearch(from_vectors=1, probe_share=share)
            if share == SHARES[0]:
                started = time.perf_counter()
                search(queries[0], config)  # makes the clusters
                values[f"cluster build @{size}"] = (time.perf_counter() - started, "s")
            name = f"approximate {share:.2f} @{size}"
            values[name] = (_median_ms(lambda q, c=config: search(q, c), queries), "ms")
            ratios[name] = f"mat-vec @{size}"
            found = sum(
                len({raw_id for raw_id, _ in search(q, config)} & want)
                for q, want in zip(queries, exact, strict=True)
            )
            values[f"recall@10 {share:.2f} @{size}"] = (found / (10 * len(queries)), "recall")
        figures.extend(rows("approximate", values, ratios))
    return figures, source


def run(quick: bool = False, locomo: str | None = None, **_: object) -> list[Figure | NotMeasured]:
    """The figures for ``python -m benchmarks``: 100k quick, 100k and 1M in full; not
    measured without the local model, whose embeddings give the vectors' statistics."""
    embedder, why = minilm_or_reason()
    if embedder is None:
        return [
            NotMeasured(benchmark="approximate", name="approximate semantic recall", reason=why)
        ]
    figures, _ = measure([100_000] if quick else [100_000, 1_000_000], locomo, embedder)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--locomo", default=None, help="a folder of LoCoMo files")
    args = parser.parse_args()
    embedder, why = minilm_or_reason()
    if embedder is None:
        raise SystemExit(why)
    figures, source = measure(sorted(args.sizes), args.locomo, embedder)
    print(f"vectors with the statistics of MiniLM embeddings of {source}, limit 10")
    for figure in figures:
        ratio = f"  {figure.ratio:.2f}x {figure.baseline}" if figure.ratio is not None else ""
        print(f"{figure.name:34} {figure.value:10.3f} {figure.unit}{ratio}")


if __name__ == "__main__":
    main()
