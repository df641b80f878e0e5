"""Approximate vector search for large namespaces: vectors grouped into clusters
(an inverted file), and a search that scores only the clusters nearest the query.

An exact semantic recall reads every vector of the candidate set, which at a million
384-d vectors is 1.5 GB of memory per query. Grouping the vectors by their nearest of
about sqrt(N) centroids (spherical k-means on a sample) and scoring the clusters whose
centroids are nearest the query, until `ApproximateSearch.probe_share` of the vectors
has been scored, reads that share instead. The items found are scored exactly; what
can be missed is an item in a cluster that was not probed, which is why the share is a
setting and `recall(..., exact=True)` skips this path.

The search index (`laser_memory.search_index`) keeps its slots in cluster order, so a
cluster is one contiguous block of its vector matrix and no vector is stored twice.

>>> config = ApproximateSearch(from_vectors=200_000, probe_share=0.12)
>>> centroids = VectorClusters.train(vectors, rows, norms)  # doctest: +SKIP
>>> nearest = VectorClusters.assign(vectors, centroids)      # doctest: +SKIP
>>> # ... rows sorted by nearest, bounds where each cluster starts ...
>>> VectorClusters(centroids, bounds).probe(unit_query, 0.12)  # doctest: +SKIP
[(0, 812), (3301, 4022), ...]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .embedding import beyond_float32, quiet_overflow, row_norms
from .errors import ConfigError, shown

__all__ = ["ApproximateSearch", "VectorClusters"]

#: k-means rounds over the training sample; the assignment barely moves after these.
_ROUNDS = 10
#: Training sample: this many vectors per cluster (the rest are only assigned).
_SAMPLE_PER_CLUSTER = 32
#: Vectors scored against the centroids at a time (bounds the scores matrix).
_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class ApproximateSearch:
    """When a semantic recall may use clusters instead of reading every vector.

    ``from_vectors``: candidate sets with at least this many vectors of the recall's
    embedder search by clusters (smaller ones are always exact). ``probe_share``:
    the share of those vectors a search scores, nearest clusters first; more finds
    more of the exact top items and costs proportionally more. Measured on vectors
    with the statistics of MiniLM embeddings of conversation turns at 1M, 0.12 found
    about 95% of the exact top 10 (see the README's Speed section).

    >>> lm.connect("local://./log", config=lm.MemoryConfig(
    ...     approximate=ApproximateSearch(from_vectors=500_000)))   # doctest: +SKIP
    """

    from_vectors: int = 200_000
    probe_share: float = 0.12

    def __post_init__(self) -> None:
        if isinstance(self.from_vectors, bool) or not isinstance(self.from_vectors, int):
            raise ConfigError("ApproximateSearch.from_vectors is a whole number of vectors")
        if self.from_vectors < 1:
            raise ConfigError(
                f"ApproximateSearch.from_vectors is a positive number of vectors (got"
                f" {self.from_vectors}); to always search exactly, set"
                " MemoryConfig.approximate to None"
            )
        share = self.probe_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(
                f"ApproximateSearch.probe_share is a share of the vectors, above 0 and at"
                f" most 1 (got {shown(share)})"
            )


@dataclass(frozen=True, slots=True)
class VectorClusters:
    """Unit centroids and, for vectors sorted by cluster, where each cluster's rows
    start: cluster ``c`` holds rows ``bounds[c]`` to ``bounds[c + 1]``."""

    centroids: np.ndarray
    bounds: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.bounds[-1])

    @staticmethod
    def train(vectors: np.ndarray, rows: np.ndarray, norms: np.ndarray, *, seed: int = 0):
        """Unit centroids for the vectors of ``rows`` (rows with a zero norm are left
        out): about sqrt(N) of them, by spherical k-means on a sample. Deterministic
        for the same rows in the same order."""
        rng = np.random.default_rng(seed)
        usable = rows[norms[rows] > 0]
        if len(usable) == 0:
            return np.zeros((1, vectors.shape[1]), dtype=np.float32)  # one cluster for all
        count = max(1, min(len(usable), round(math.sqrt(len(usable)))))
        take = min(len(usable), count * _SAMPLE_PER_CLUSTER)
        chosen = usable[np.sort(rng.choice(len(usable), take, replace=False))]
        # Scaled by the norms given (`row_norms`, float64): a row's own float32 norm
        # is 0 or inf for a row too short or too long to square in float32.
        sample = (vectors[chosen] / norms[chosen, None]).astype(np.float32)
        centroids = sample[rng.choice(take, count, replace=False)].copy()
        for _ in range(_ROUNDS):
            nearest = np.argmax(sample @ centroids.T, axis=1)
            # Sum each cluster's members: sorted, a cluster's rows are one run, summed
            # one run at a time (`np.add.reduceat` along rows took 25x as long: 29 ms
            # against 1.1 a round at 100k vectors, most of the training).
            order = np.argsort(nearest, kind="stable")
            members = sample[order]
            bounds = np.searchsorted(nearest[order], np.arange(count + 1)).tolist()
            sums = np.empty_like(centroids)
            for cluster in range(count):
                run = members[bounds[cluster] : bounds[cluster + 1]]
                np.add.reduce(run, axis=0, out=sums[cluster])
            lengths = np.linalg.norm(sums, axis=1)
            empty = lengths == 0
            # An empty cluster restarts at a random sample vector instead of dying.
            sums[empty] = sample[rng.choice(take, int(empty.sum()))]
            lengths[empty] = 1.0
            centroids = (sums / lengths[:, None]).astype(np.float32)
        return centroids

    @staticmethod
    def assign(
        vectors: np.ndarray, centroids: np.ndarray, norms: np.ndarray | None = None
    ) -> np.ndarray:
        """The nearest centroid of each row (by cosine: the rows need no normalising,
        as the argmax over centroids is the same for any positive row scale). Reads
        the rows a block at a time, never copying the matrix. ``norms``: each row's
        `row_norms`, if known (else computed a block at a time)."""
        out = np.empty(len(vectors), dtype=np.int64)
        for start in range(0, len(vectors), _CHUNK):
            block = vectors[start : start + _CHUNK]
            with quiet_overflow():  # rescaled just below
                products = block @ centroids.T
            # A row too long or too short for float32 products with a unit centroid
            # (they overflow, or lose their digits) is scaled to length 1 first: any
            # positive scale keeps its nearest centroid.
            lengths = norms[start : start + _CHUNK] if norms is not None else row_norms(block)
            odd = beyond_float32(lengths)  # the centroids have length 1
            if len(odd):
                scaled = block[odd].astype(np.float64) / lengths[odd, None]
                products[odd] = scaled @ centroids.T.astype(np.float64)
            out[start : start + _CHUNK] = np.argmax(products, axis=1)
        return out

    def probe(self, unit_query: np.ndarray, share: float) -> list[tuple[int, int]]:
        """Row ranges of the clusters nearest the query until ``share`` of the rows is
        covered (at least one cluster), adjacent ranges merged, in row order."""
        sizes = np.diff(self.bounds)
        nearest = np.argsort(-(self.centroids @ unit_query), kind="stable")
        covered = np.cumsum(sizes[nearest])
        count = int(np.searchsorted(covered, share * self.rows)) + 1
        chosen = np.sort(nearest[:count])
        ranges: list[tuple[int, int]] = []
        for cluster in chosen.tolist():
            start, stop = int(self.bounds[cluster]), int(self.bounds[cluster + 1])
            if start == stop:
                continue
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], stop)
            else:
                ranges.append((start, stop))
        return ranges
