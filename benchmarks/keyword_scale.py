"""Keyword recall as the namespace grows tenfold: the search index alone (the one folded
and managed recall use), so the figures are the ranking's, not the log's or the view's.

    python -m benchmarks.keyword_scale [--sizes 100000 1000000] [--rounds 6]

Each size fills an index with `benchmarks.search`'s corpus (12-word items from a Zipf
vocabulary, an identifier ``node-N`` in each), then times keyword searches, limit 10:
a rare word (three items of the smaller size hold it), an identifier whose part
``node`` is in every item, one common word, only common English words, and 40 random
queries of two to four of the 30 commonest words (the hard case: their best groups
grow with the namespace). Every query runs once to warm the index's caches, then
``--rounds`` rounds of all of them, sizes in turn; a figure is the median over rounds
of each round's median. The larger size's figures are ratios against the smaller's:
the target is within 3x for ten times the items.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

from laser_memory.ids import MemoryId
from laser_memory.items import MemoryItem, Source
from laser_memory.kinds import MemoryKind
from laser_memory.scope import MemoryScope
from laser_memory.search_index import SearchIndex
from laser_memory.terms import terms

from .figures import Figure, rows
from .search import corpus


def filled(size: int) -> SearchIndex:
    """An index of ``size`` items of the search corpus, made as a view's build makes it."""

    def entries():
        for n, text in enumerate(corpus(size)):
            raw_id = n.to_bytes(16, "big")
            item = MemoryItem(
                id=MemoryId(raw_id),
                kind=MemoryKind.FACT,
                body=text.encode(),
                scope=MemoryScope(),
                lifetime="session",
                append_time_ms=n,
                source=Source("", "bench", 0, n, "", None),
            )
            yield raw_id, item, False

    index = SearchIndex(None)
    index.put_many(entries())
    return index


def rare_word(size: int) -> str:
    """A word three items of the ``size``-item corpus hold (about 30 of ten times as many)."""
    counts = Counter(word for text in corpus(size) for word in text.split()[:-1])
    return min(word for word, count in counts.items() if count == 3)


def queries(rare: str, seed: int = 3) -> dict[str, list[list[str]]]:
    """Named query sets, each a list of term lists."""
    rng = random.Random(seed)
    common = [
        " ".join(f"w{rng.randrange(30)}" for _ in range(rng.randint(2, 4))) for _ in range(40)
    ]
    named = {
        "a rare word": [rare],
        "an identifier with a common part (node-5)": ["node-5"],
        "one common word": ["w1"],
        "only common English words": ["what did the"],
        "two to four common words (40 queries)": common,
    }
    return {name: [terms(text) for text in texts] for name, texts in named.items()}


def search(index: SearchIndex, query: list[str]) -> None:
    index.search(
        query, strategy="keyword", query_vector=None, min_similarity=None, limit=10,
        exclude=frozenset(),
    )  # fmt: skip


def measure(sizes: list[int], rounds: int) -> dict[int, dict[str, float]]:
    """Seconds per query, per size and query set (median over rounds of round medians)."""
    indexes = {size: filled(size) for size in sizes}
    named = queries(rare_word(min(sizes)))
    for index in indexes.values():
        for query_set in named.values():
            for query in query_set:
                search(index, query)
    samples: dict[int, dict[str, list[float]]] = {s: {n: [] for n in named} for s in sizes}
    for _ in range(rounds):
        for size, index in indexes.items():
            for name, query_set in named.items():
                times = []
                for query in query_set * (1 if len(query_set) > 1 else 20):
                    start = time.perf_counter()
                    search(index, query)
                    times.append(time.perf_counter() - start)
                samples[size][name].append(statistics.median(times))
    return {
        size: {name: statistics.median(values) for name, values in by_name.items()}
        for size, by_name in samples.items()
    }


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``."""
    small, large = (10_000, 100_000) if quick else (100_000, 1_000_000)
    timings = measure([small, large], 3 if quick else 6)
    values = {}
    ratios = {}
    for name in timings[small]:
        values[f"{name} @{small}"] = (timings[small][name] * 1e3, "ms p50")
        values[f"{name} @{large}"] = (timings[large][name] * 1e3, "ms p50")
        ratios[f"{name} @{large}"] = f"{name} @{small}"
    return rows("keyword_scale", values, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs=2, default=[100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    small, large = args.sizes
    timings = measure([small, large], args.rounds)
    print(f"| keyword query | {small:,} items | {large:,} items | ratio |")
    print("| --- | --- | --- | --- |")
    for name in timings[small]:
        a, b = timings[small][name], timings[large][name]
        print(f"| {name} | {a * 1e3:.2f} ms | {b * 1e3:.2f} ms | {b / a:.1f}x |")


if __name__ == "__main__":
    main()
