"""Scores for text recall: BM25, score fusion and neighbouring items, in numpy.

Pure functions over arrays, so folded and managed recall score alike and the
benchmarks can measure each part alone.

- `bm25`: Okapi BM25 (k1 = 1.2, b = 0.75) of each candidate for the query terms,
  with document frequencies and the average length taken from the *statistics*
  (`TermStatistics`) of the tenant's namespace, as search engines take them from
  the index rather than from the filtered hits.
- `fuse`: keyword and semantic scores on one scale (BM25 divided by its best,
  cosine stretched to 0..1 over the candidates) and averaged. Measured on LoCoMo it
  beats reciprocal-rank fusion: ranks throw away how far ahead the best hit is.
- `with_neighbours`: each item also gets ``NEIGHBOUR_SHARE`` of the scores of the
  items written just before and after it in its conversation. An answer is often
  split over turns ("what did she adopt?" - "a puppy!"), so a turn next to a strong
  match is worth reading too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec
import numpy as np

__all__ = [
    "BM25_B",
    "BM25_K1",
    "NEIGHBOUR_SHARE",
    "TermStatistics",
    "bm25",
    "fuse",
    "with_neighbours",
]

BM25_K1 = 1.2
BM25_B = 0.75
NEIGHBOUR_SHARE = 0.3


class TermStatistics(msgspec.Struct, frozen=True):
    """What BM25 needs to know of the collection: how many documents, their total
    length in terms, and per query term how many documents hold it."""

    documents: int
    total_length: int
    document_frequency: dict[str, int]

    @classmethod
    def of(cls, documents: Iterable[tuple[dict[str, int], int]], query: Iterable[str]):
        wanted = set(query)
        frequency = dict.fromkeys(wanted, 0)
        count = total = 0
        for counts, length in documents:
            count += 1
            total += length
            for term in wanted & counts.keys():
                frequency[term] += 1
        return cls(count, total, frequency)


def bm25(
    query: Sequence[str], documents: Sequence[tuple[dict[str, int], int]], stats: TermStatistics
) -> np.ndarray:
    """Okapi BM25 of each document for the query terms (a term repeated in the query
    counts once)."""
    scores = np.zeros(len(documents), dtype=np.float64)
    if not documents or stats.documents == 0:
        return scores
    average = max(stats.total_length / stats.documents, 1e-9)
    lengths = np.fromiter((length for _, length in documents), dtype=np.float64)
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / average)
    for term in dict.fromkeys(query):
        df = stats.document_frequency.get(term, 0)
        if df == 0:
            continue
        idf = math.log(1.0 + (stats.documents - df + 0.5) / (df + 0.5))
        tf = np.fromiter((counts.get(term, 0) for counts, _ in documents), dtype=np.float64)
        scores += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
    return scores


def fuse(keyword: np.ndarray, semantic: np.ndarray) -> np.ndarray:
    """Keyword and semantic scores on one 0..1 scale, averaged."""
    best = float(keyword.max()) if len(keyword) else 0.0
    words = keyword / best if best > 0 else np.zeros_like(keyword)
    if len(semantic) == 0:
        return words
    low, high = float(semantic.min()), float(semantic.max())
    meaning = (semantic - low) / (high - low) if high > low else np.zeros_like(semantic)
    return 0.5 * words + 0.5 * meaning


def with_neighbours(scores: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Add to each score ``NEIGHBOUR_SHARE`` of its neighbours' scores. ``groups`` lists,
    per conversation, the indexes of its items in the order they were written."""
    out = scores.copy()
    for group in groups:
        if len(group) < 2:
            continue
        index = np.asarray(group)
        own = scores[index]
        out[index[1:]] += NEIGHBOUR_SHARE * own[:-1]
        out[index[:-1]] += NEIGHBOUR_SHARE * own[1:]
    return out
