"""Ranking by text and meaning over columns: one row per candidate.

Folded recall over a list of items, and the search index over its slots, both hand
their candidates here as arrays, so the two compute the same numbers with the same
operations whatever order their rows are in. The rules are those of
`laser_memory.recall` (keyword, semantic, hybrid), written once.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from .items import Signal
from .scoring import NEIGHBOUR_SHARE

__all__ = [
    "FEEDBACK_SHARE",
    "Columns",
    "Ranked",
    "rank_by_feedback",
    "rank_by_similarity",
    "rank_by_text",
]

#: How much feedback moves a text recall: weight w adds FEEDBACK_SHARE * tanh(w) to a
#: score whose best keyword-plus-meaning part is 1.
FEEDBACK_SHARE = 0.1


class Columns(msgspec.Struct, kw_only=True):
    """The candidates as arrays. ``alive`` rows are candidates (others are empty slots);
    ``allowed`` rows may be returned (not excluded); ``time``, ``partition``,
    ``offset`` are the position key (newer wins ties); ``before``/``after`` are the
    rows written just before and after in the same conversation (-1: none)."""

    keyword: np.ndarray
    semantic: np.ndarray | None
    has_vector: np.ndarray | None
    weight: np.ndarray
    time: np.ndarray
    partition: np.ndarray
    offset: np.ndarray
    before: np.ndarray
    after: np.ndarray
    alive: np.ndarray
    allowed: np.ndarray


class Ranked(msgspec.Struct, frozen=True):
    """A chosen row, its score and its signals, best first."""

    row: int
    score: float
    signals: tuple[Signal, ...]


#: Rows from which `_kth_largest` looks at blocks' maxima first, and their size.
_BLOCKS_FROM = 8192
_BLOCK = 256


def _kth_largest(values: np.ndarray, k: int) -> Any:
    """The ``k``-th largest of ``values`` (1 <= k < len), as
    ``np.partition(values, len - k)[len - k]`` gives it. Many values: only those at or
    above the ``k``-th largest of their blocks' maxima are partitioned (at least ``k``
    blocks hold a value that high, so every one of the ``k`` largest is among them): a
    partition of 100k scores took 1.0 ms of a 10 ms search, the maxima 0.05."""
    count = len(values)
    if count >= _BLOCKS_FROM and k * _BLOCK * 4 <= count:
        whole = count - count % _BLOCK
        maxima = values[:whole].reshape(-1, _BLOCK).max(axis=1)
        # A NaN (which a partition puts last, as if the largest) makes no cut: the long
        # way. A block's maximum is NaN when the block holds one.
        if not (np.isnan(maxima).any() or np.isnan(values[whole:]).any()):
            floor = np.partition(maxima, len(maxima) - k)[len(maxima) - k]
            near = values[values >= floor]
            return np.partition(near, len(near) - k)[len(near) - k]
    return np.partition(values, count - k)[count - k]


def _order(final: np.ndarray, keep: np.ndarray, c: Columns, limit: int) -> np.ndarray:
    """The kept rows, best first, equal scores newest first; at most ``limit``."""
    every = bool(keep.all())
    # Every row kept (a semantic or hybrid read: every item has a vector): the scores
    # are read as they are, not gathered by a list of all the rows first.
    rows = None if every else np.flatnonzero(keep)
    count = len(final) if every else len(rows)
    if limit == 0 or count == 0:
        return np.zeros(0, dtype=np.int64)
    if count > limit:
        values = final if every else final[rows]
        # Common words give many equal scores, where a partition is at its slowest: when
        # the best score alone fills the limit, it is the cut.
        top = values >= values.max()
        if np.count_nonzero(top) < limit:
            top = values >= _kth_largest(values, limit)
        rows = np.flatnonzero(top) if every else rows[top]
        if len(rows) > 4 * limit + 64:
            # Many rows tie at the cut (a recency read: every score is 0): of the tied
            # ones only the newest can make the limit.
            values = final[rows]
            cut = values.min()
            above, tied = rows[values > cut], rows[values == cut]
            need = limit - len(above)
            if need < len(tied):
                times = c.time[tied]
                tied = tied[times >= np.partition(times, len(tied) - need)[len(tied) - need]]
            rows = np.concatenate([above, tied])
    elif every:
        rows = np.arange(count)
    order = np.lexsort((-c.offset[rows], -c.partition[rows], -c.time[rows], -final[rows]))
    return rows[order][:limit]


def _newest(keep: np.ndarray, c: Columns, limit: int) -> np.ndarray:
    """The kept rows newest first; at most ``limit``. `_order` with every score equal,
    in a third of its passes over the rows: a recency read is the commonest read."""
    rows = np.flatnonzero(keep)
    if limit == 0 or len(rows) == 0:
        return rows[:0]
    if len(rows) > limit:
        times = c.time[rows]
        # Records written together share their millisecond, where a partition is at its
        # slowest: when the newest millisecond alone fills the limit, it is the cut.
        top = times >= times.max()
        if np.count_nonzero(top) < limit:
            top = times >= _kth_largest(times, limit)
        rows = rows[top]
    order = np.lexsort((-c.offset[rows], -c.partition[rows], -c.time[rows]))
    return rows[order][:limit]


def _by_feedback(keep: np.ndarray, c: Columns, limit: int) -> np.ndarray:
    """`_order` over the weights: the kept rows highest weight first, equal weights
    newest first; at most ``limit``. Weights are mostly zero, so the few weighted rows
    are ranked apart and the zero-weight ones by time alone: no pass gathers every
    row's weight."""
    weight = c.weight
    top = _order(weight, keep & (weight > 0), c, limit)
    if len(top) >= limit:
        return top
    newest = _newest(keep & (weight == 0), c, limit - len(top))
    if len(top) + len(newest) >= limit:
        return np.concatenate([top, newest])
    lowest = _order(weight, keep & (weight < 0), c, limit - len(top) - len(newest))
    return np.concatenate([top, newest, lowest])


def _ranks_of(scores: np.ndarray, mask: np.ndarray, rows: list[int], c: Columns) -> list[int]:
    """Where each of ``rows`` comes among the masked rows by descending score, ties
    newest first."""
    if not rows:
        return []
    values = scores[rows]
    # Only rows scoring at or above the lowest chosen score can be above or level with
    # one: the chosen rows are near the top, so these are few of the masked rows, mostly.
    candidates = np.flatnonzero(mask & (scores >= values.min()))
    pool = scores[candidates]
    out: list[int] = []
    tied: list[int] = []
    for start in range(0, len(rows), 16):  # 16 rows at a time bounds the comparison matrix
        chunk = values[start : start + 16]
        out.extend((pool[None, :] > chunk[:, None]).sum(axis=1).tolist())
        equal = (pool[None, :] == chunk[:, None]).sum(axis=1)
        tied.extend(start + int(i) for i in np.flatnonzero(equal > 1))
    for i in tied:
        row = rows[i]
        level = candidates[pool == values[i]]
        time, partition, offset = c.time[level], c.partition[level], c.offset[level]
        t, p, o = c.time[row], c.partition[row], c.offset[row]
        newer = (time > t) | ((time == t) & ((partition > p) | ((partition == p) & (offset > o))))
        out[i] += int(np.count_nonzero(newer))
    return out


def _fuse(keyword: np.ndarray, semantic: np.ndarray | None, alive: np.ndarray) -> np.ndarray:
    """BM25 divided by the best, cosine (negatives as 0) divided by the best, averaged.
    Dividing by the best keeps how far apart the scores are: stretching the cosines to
    0..1 would make a 0.01 lead among two items as strong as a perfect match."""
    best = float(keyword.max()) if len(keyword) else 0.0
    words = keyword / best if best > 0 else np.zeros_like(keyword)
    if semantic is None:
        return words
    # In place, in the order the plain expression takes (0.5 * words + 0.5 * meaning,
    # the halves exact): the same bits in half the passes over the rows.
    meaning = np.maximum(semantic, 0.0)
    high = float(np.max(meaning, where=alive, initial=0.0))
    if high > 0:
        meaning /= high
    else:
        meaning[:] = 0.0
    words *= 0.5
    meaning *= 0.5
    words += meaning
    return words


def rank_by_text(
    c: Columns, *, hybrid: bool, min_similarity: float | None, limit: int
) -> list[Ranked]:
    """Keyword (and, with ``semantic``, meaning) scores fused; in hybrid recall spread
    to neighbouring rows; nudged by feedback; best ``limit`` rows with their signals."""
    fused = _fuse(c.keyword, c.semantic, c.alive)
    spread = fused
    if hybrid:
        # A row with no neighbour (-1) takes the 0 after the last row: a gather each
        # side, no masks (two masked gathers and adds took 1.5 ms at 100k rows).
        padded = np.append(fused, 0.0)
        spread = fused + NEIGHBOUR_SHARE * padded[c.before]
        spread += NEIGHBOUR_SHARE * padded[c.after]
    if c.semantic is None:
        keep = spread > 0
    else:
        keep = c.has_vector | (spread > 0)
        if min_similarity is not None:
            keep &= (c.semantic >= min_similarity) | (c.keyword > 0)
    keep &= c.alive & c.allowed
    # Only rows with feedback move (x + FEEDBACK_SHARE * tanh(0) is x): most have none,
    # and a tanh of every row was 0.3 ms of a search at 100k.
    final = spread + 0.0
    moved = np.flatnonzero(c.weight)
    if len(moved):
        final[moved] = spread[moved] + FEEDBACK_SHARE * np.tanh(c.weight[moved])
    chosen = _order(final, keep, c, limit)
    label = "hybrid" if hybrid else "keyword"
    matched = c.alive & (c.keyword > 0)
    returned = np.zeros(len(final), dtype=bool)
    returned[chosen] = True
    weighted = returned & (c.weight != 0)
    rows = chosen.tolist()
    keyword_rows = [r for r in rows if hybrid and matched[r]]
    keyword_rank = dict(
        zip(keyword_rows, _ranks_of(c.keyword, matched, keyword_rows, c), strict=True)
    )
    semantic_rank: dict[int, int] = {}
    if c.semantic is not None:
        with_vector = c.alive & c.has_vector
        vector_rows = [r for r in rows if c.has_vector[r]]
        ranks = _ranks_of(c.semantic, with_vector, vector_rows, c)
        semantic_rank = dict(zip(vector_rows, ranks, strict=True))
    weighted_rows = [r for r in rows if weighted[r]]
    weight_rank = dict(
        zip(weighted_rows, _ranks_of(c.weight, weighted, weighted_rows, c), strict=True)
    )
    out = []
    for position, row in enumerate(rows):
        signals = [Signal(label, position, float(final[row]))]
        if row in keyword_rank:
            signals.append(Signal("keyword", keyword_rank[row], float(c.keyword[row])))
        if row in semantic_rank:
            signals.append(Signal("semantic", semantic_rank[row], float(c.semantic[row])))
        if row in weight_rank:
            signals.append(Signal("auto", weight_rank[row], float(c.weight[row])))
        out.append(Ranked(row, float(final[row]), tuple(signals)))
    return out


def rank_by_similarity(c: Columns, *, min_similarity: float | None, limit: int) -> list[Ranked]:
    """Rows with a vector by cosine similarity, ties newest first."""
    keep = c.alive & c.allowed & c.has_vector
    if min_similarity is not None:
        keep &= c.semantic >= min_similarity
    chosen = _order(c.semantic, keep, c, limit)
    return [
        Ranked(row, float(c.semantic[row]), (Signal("semantic", i, float(c.semantic[row])),))
        for i, row in enumerate(chosen.tolist())
    ]


def rank_by_feedback(c: Columns, *, strategy: str, limit: int) -> list[Ranked]:
    """Without text: ``recent`` newest first; any other strategy feedback first (higher
    weight first), then newest, with an ``auto`` signal for items with feedback."""
    keep = c.alive & c.allowed
    if strategy == "recent":
        chosen = _newest(keep, c, limit)
        seconds = [int(c.time[row]) / 1000 for row in chosen.tolist()]
        return [
            Ranked(row, at, (Signal("recent", i, at),))
            for i, (row, at) in enumerate(zip(chosen.tolist(), seconds, strict=True))
        ]
    chosen = _by_feedback(keep, c, limit)
    returned = np.zeros(len(keep), dtype=bool)
    returned[chosen] = True
    weighted = returned & (c.weight != 0)
    out = []
    rows = chosen.tolist()
    weighted_rows = [r for r in rows if strategy != "auto" and weighted[r]]
    weight_rank = dict(
        zip(weighted_rows, _ranks_of(c.weight, weighted, weighted_rows, c), strict=True)
    )
    for i, row in enumerate(rows):
        weight = float(c.weight[row])
        signals = [Signal(strategy, i, weight)]
        if row in weight_rank:
            signals.append(Signal("auto", weight_rank[row], weight))
        out.append(Ranked(row, weight, tuple(signals)))
    return out
