"""BM25 for keyword recall, and the constants of text ranking.

- `bm25`: Okapi BM25 (k1 = 1.2, b = 0.75) of each candidate for the query terms,
  with document frequencies and the average length from `TermStatistics`: those of
  the candidate set. `bm25_postings` is the same sum over posting lists, for an
  index that keeps them.
- ``NEIGHBOUR_SHARE``: in hybrid recall each item also gets this share of the
  scores of the items written just before and after it in its conversation. An
  answer is often split over turns ("what did she adopt?" - "a puppy!"), so a turn
  next to a strong match is worth reading too (see `laser_memory.text_ranking`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import msgspec
import numpy as np

__all__ = ["BM25_B", "BM25_K1", "NEIGHBOUR_SHARE", "TermStatistics", "bm25", "bm25_postings"]

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


def bm25_postings(
    query: Sequence[str],
    postings: Callable[[str], tuple[np.ndarray, np.ndarray]],
    lengths: np.ndarray,
    stats: TermStatistics,
) -> np.ndarray:
    """`bm25` from posting lists: ``postings(term)`` gives the rows holding the term and
    its count in each; rows are those of ``lengths``. Each row's score is computed
    with the same operations as `bm25`, so the two agree to the bit."""
    scores = np.zeros(len(lengths), dtype=np.float64)
    if stats.documents == 0:
        return scores
    average = max(stats.total_length / stats.documents, 1e-9)
    for term in dict.fromkeys(query):
        df = stats.document_frequency.get(term, 0)
        if df == 0:
            continue
        idf = math.log(1.0 + (stats.documents - df + 0.5) / (df + 0.5))
        rows, tf = postings(term)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[rows] / average)
        scores[rows] += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
    return scores
