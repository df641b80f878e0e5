"""Approximate semantic search: clusters put the index's slots in another order, which
must change no ranking at all; probing every cluster finds exactly what a scan finds;
probing some finds most of it; and a handle searches exactly when asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.embedding import row_norms
from laser_memory.recall import rank, search_mode
from laser_memory.search_index import SearchIndex
from laser_memory.terms import terms
from laser_memory.vector_clusters import VectorClusters
from tests.test_search_index import LABEL, _index_of, _item, drop, put, queries

EVERY_CLUSTER = lm.ApproximateSearch(from_vectors=1, probe_share=1.0)
WORD_HASH = lm.WordHashEmbedder()
QUERY_VECTOR = np.asarray([1.0, 0.5, -0.25], dtype=np.float32)


def _apply(index: SearchIndex, live: dict, ops, offsets) -> None:
    for op in ops:
        if op[0] == "put":
            _, n, body, conversation, weight, vector, time, partition = op
            item = _item(n, body, conversation, weight, vector, (time, partition, next(offsets)))
            live[item.id.bytes] = item
            index.put(item.id.bytes, item)
        else:
            raw_id = op[1].to_bytes(16, "big")
            live.pop(raw_id, None)
            index.put(raw_id, None)


def _semantic(index: SearchIndex, approximate) -> list:
    return index.search(
        ["alpha"],
        strategy="semantic",
        query_vector=QUERY_VECTOR,
        min_similarity=None,
        limit=10,
        exclude=frozenset(),
        approximate=approximate,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.one_of(put, put, drop), min_size=1, max_size=20),
    after=st.lists(st.one_of(put, put, drop), max_size=20),
    query=queries,
)
def test_clustering_changes_no_ranking(before, after, query):
    index = SearchIndex(LABEL)
    live: dict = {}
    offsets = iter(range(10_000))
    _apply(index, live, before, offsets)
    _semantic(index, EVERY_CLUSTER)  # clusters the slots, when there are vectors
    _apply(index, live, after, offsets)
    strategy, text, limit, min_similarity, excluded = query
    exclude = frozenset(n.to_bytes(16, "big") for n in excluded)
    vector = QUERY_VECTOR if strategy != "keyword" else None
    want = rank(
        list(live.values()),
        strategy=strategy,
        text=text,
        limit=limit,
        query_vector=vector,
        embedder=LABEL,
        min_similarity=min_similarity,
        exclude=exclude,
    )
    mode = search_mode(strategy, text, vector)
    for approximate in (None, EVERY_CLUSTER):
        got = index.search(
            terms(text),
            strategy=mode,
            query_vector=vector if mode != "keyword" else None,
            min_similarity=min_similarity,
            limit=limit,
            exclude=exclude,
            approximate=approximate,
        )
        assert [(raw_id, r.score, r.signals) for raw_id, r in got] == [
            (i.id.bytes, i.score, i.signals) for i in want
        ], approximate
    for plain in ("recent", "auto"):
        want = rank(list(live.values()), strategy=plain, limit=limit, exclude=exclude)
        got = index.ordered(strategy=plain, limit=limit, exclude=exclude)
        assert [(raw_id, r.score, r.signals) for raw_id, r in got] == [
            (i.id.bytes, i.score, i.signals) for i in want
        ], plain
    assert len(index) == len(live)


def test_a_zero_query_vector_is_searched_exactly_by_an_approximate_search():
    """A query vector of zeros (an embedder of one's own may return one) is no
    nearer one item than another, so every item ties at 0 and the newest come first.
    Approximate search must not probe clusters by it (it has no direction: probing by
    the NaNs of its normalisation picked clusters at random and returned older items)."""
    items = [_item(n, "alpha", None, 0.0, [1.0 + n, -0.5, n % 3], (n, 0, n)) for n in range(300)]
    index = _index_of(items, LABEL)
    zero = np.zeros(3, dtype=np.float32)
    want = rank(
        items, strategy="semantic", text="alpha", limit=5, query_vector=zero, embedder=LABEL
    )
    assert [i.id for i in want] == [i.id for i in items[:-6:-1]]
    for approximate in (None, lm.ApproximateSearch(from_vectors=1, probe_share=0.1)):
        got = index.search(
            ["alpha"], strategy="semantic", query_vector=zero, min_similarity=None, limit=5,
            exclude=frozenset(), approximate=approximate,
        )  # fmt: skip
        assert [(raw_id, r.score) for raw_id, r in got] == [(i.id.bytes, i.score) for i in want]


def test_probing_the_nearest_clusters_finds_most_of_the_exact_best():
    """Vectors around 40 topics in 64 dimensions: the nearest fifth of the clusters
    holds nearly all of a query's exact top 10."""
    rng = np.random.default_rng(11)
    topics = rng.standard_normal((40, 64)).astype(np.float32)
    index = SearchIndex("test/topics")
    for n in range(4_000):
        vector = topics[n % 40] + 0.6 * rng.standard_normal(64).astype(np.float32)
        item = _item(n, "alpha", None, 0.0, vector, (n, 0, n))
        index.put(item.id.bytes, item.__replace__(embedder="test/topics"))
    approximate = lm.ApproximateSearch(from_vectors=1_000, probe_share=0.2)
    found = 0
    for q in range(20):
        query = topics[q % 40] + 0.6 * rng.standard_normal(64).astype(np.float32)

        def best(config, query=query):
            return {
                raw_id
                for raw_id, _ in index.search(
                    [],
                    strategy="semantic",
                    query_vector=query,
                    min_similarity=None,
                    limit=10,
                    exclude=frozenset(),
                    approximate=config,
                )
            }

        found += len(best(approximate) & best(None))
    assert found / 200 >= 0.9


def test_settings_are_checked():
    # Each refused when made, not as a raw TypeError at the first large recall: a
    # bool is no count or share, a share is at most all the vectors.
    for bad in (
        {"from_vectors": 0},
        {"from_vectors": 2.5},
        {"from_vectors": True},
        {"probe_share": 0},
        {"probe_share": True},
        {"probe_share": "0.5"},
        {"probe_share": 1.01},
    ):
        with pytest.raises(lm.ConfigError):
            lm.ApproximateSearch(**bad)
    with pytest.raises(lm.ConfigError, match="ApproximateSearch"):
        lm.MemoryConfig(approximate=0.1)
    assert lm.ApproximateSearch(from_vectors=1, probe_share=1).probe_share == 1


async def test_a_handle_searches_by_clusters_or_exactly_on_request(tmp_path: Path):
    view = tmp_path / "view"
    config = lm.MemoryConfig(approximate=lm.ApproximateSearch(from_vectors=50, probe_share=0.01))
    async with lm.connect(
        f"local://{tmp_path / 'log'}", stream="s", embedder=lm.WordHashEmbedder(), config=config
    ) as laser:
        memory = laser.memory("notes")
        rng = np.random.default_rng(5)
        words = [f"word{n:02d}" for n in range(40)] + ["keys", "rotate"]
        await memory.remember_many([{"body": " ".join(rng.choice(words, 4))} for _ in range(400)])
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        async with lm.connect(
            laser.log.url, stream="s", view=view, embedder=lm.WordHashEmbedder(), config=config
        ) as reader_laser:
            reader = reader_laser.memory("notes")
            query = {"text": "rotate keys", "strategy": "semantic", "limit": 10}
            exact = await memory.recall(folded=True, exact=True, **query)
            assert await reader.recall(exact=True, **query) == exact
            everything = list(await memory.recall(folded=True, limit=1000))
            assert exact == rank(
                everything,
                strategy="semantic",
                text="rotate keys",
                limit=10,
                query_vector=np.asarray(
                    lm.WordHashEmbedder().embed_many(["rotate keys"])[0], "<f4"
                ),
                embedder="test/word-hash",
            )
            # By clusters, the fold and the view agree: same index code, same items. At
            # 1% of 400 vectors, one cluster of about 20 is probed: not the exact top 10.
            by_clusters = await memory.recall(folded=True, **query)
            assert await reader.recall(**query) == by_clusters
            assert by_clusters != exact
            assert len(by_clusters) == 10
            with pytest.raises(lm.InvalidInput, match="exact"):
                await memory.recall(exact="yes", **query)


def _grouped(groups: int, per_group: int, dimensions: int = 48, seed: int = 3):
    """Vectors in ``groups`` tight groups around random unit directions, shuffled,
    with the direction each was drawn around."""
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((groups, dimensions)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    labels = rng.permutation(np.repeat(np.arange(groups), per_group))
    noise = 0.01 * rng.standard_normal((len(labels), dimensions)).astype(np.float32)
    # Different lengths: the training compares directions, not lengths.
    scale = rng.uniform(0.5, 3.0, (len(labels), 1)).astype(np.float32)
    return (directions[labels] + noise) * scale, directions, labels


def test_trained_centroids_sit_on_the_groups():
    # 400 vectors make 20 centroids (about their square root) for 4 tight groups: a
    # group may hold several centroids, but each centroid must be the mean direction
    # of members of one group, which only holds if each cluster's sum is of its own
    # members (one that took a neighbour's rows pulls a centroid between groups).
    vectors, directions, labels = _grouped(groups=4, per_group=100)
    rows = np.arange(len(vectors))
    centroids = VectorClusters.train(vectors, rows, np.linalg.norm(vectors, axis=1))
    assert centroids.shape == (20, vectors.shape[1])
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    closeness = centroids @ directions.T
    assert closeness.max(axis=1).min() > 0.99
    group_of_centroid = np.argmax(closeness, axis=1)
    assert set(group_of_centroid.tolist()) == {0, 1, 2, 3}
    # And each vector is assigned to a centroid of its own group.
    assigned = VectorClusters.assign(vectors, centroids)
    assert (group_of_centroid[assigned] == labels).all()


def test_rows_without_a_norm_are_left_out_and_training_is_deterministic():
    vectors, _, _ = _grouped(groups=4, per_group=25)
    vectors[::7] = 0.0
    rows = np.arange(len(vectors))
    norms = np.linalg.norm(vectors, axis=1)
    first = VectorClusters.train(vectors, rows, norms)
    assert np.isfinite(first).all()
    assert np.array_equal(first, VectorClusters.train(vectors, rows, norms))
    nothing = VectorClusters.train(np.zeros((5, 8), np.float32), np.arange(5), np.zeros(5))
    assert nothing.shape == (1, 8)


def test_rows_too_long_or_short_for_float32_go_to_their_directions_cluster():
    """Products of a vector of 1e38s (or 1e-40s) with the centroids overflowed (or all
    rounded to about 0) in float32, so the row went to whichever cluster came first
    (and numpy warned). Scaled first, it goes where its direction does; training on
    such rows stays finite."""
    import warnings

    from laser_memory.embedding import row_norms

    rng = np.random.default_rng(5)
    directions = rng.standard_normal((30, 16)).astype(np.float32)
    centroids = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    want = VectorClusters.assign(directions, centroids)
    for scale in (3e38, 1e38, 1e30, 1e-30, 1e-40):
        scaled = (directions.astype(np.float64) * scale / np.abs(directions).max()).astype(
            np.float32
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = VectorClusters.assign(scaled, centroids)
            trained = VectorClusters.train(scaled, np.arange(30), row_norms(scaled))
        assert np.array_equal(got, want), scale
        assert np.all(np.isfinite(trained))


def _unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_a_probe_takes_the_nearest_clusters_until_the_share_and_no_more():
    """Five clusters of 10, 0, 30, 20 and 40 rows (100): a query nearest cluster 3, then
    2, 0, 4, 1. A share of 0.2 is cluster 3 alone (20 rows); 0.21 adds cluster 2, whose
    rows run on from cluster 0's gap, and 0.6 adds cluster 0 too (60 rows), adjacent to
    cluster 2, merged into one range. An empty cluster is never a range."""
    centroids = np.stack(
        [_unit(1, 1, 0), _unit(-1, 0, 0), _unit(1, 2, 0), _unit(0, 1, 0), _unit(0, -1, 1)]
    )
    clusters = VectorClusters(centroids, np.asarray([0, 10, 10, 40, 60, 100]))
    query = _unit(0, 1, 0)
    assert clusters.rows == 100
    assert clusters.probe(query, 0.2) == [(40, 60)]
    assert clusters.probe(query, 0.21) == [(10, 60)]
    assert clusters.probe(query, 0.6) == [(0, 60)]
    assert clusters.probe(query, 0.61) == [(0, 100)]
    # Cluster 1 is empty and comes last: probing all of it adds no range.
    assert clusters.probe(query, 1.0) == [(0, 100)]
    # The nearest cluster always, however small the share.
    assert clusters.probe(_unit(0, -1, 1), 0.001) == [(60, 100)]
    # Two clusters apart stay two ranges. (A query as near the second as the third, as
    # (0, 1, 1) was, left their order to the last bit of one machine's product.)
    far = VectorClusters(centroids[[3, 1, 4]], np.asarray([0, 20, 50, 100]))
    assert far.probe(_unit(0, 1, 2), 0.7) == [(0, 20), (50, 100)]


def test_training_on_few_distinct_vectors_gives_unit_centroids_at_those_vectors():
    """300 rows that are three vectors repeated train 17 clusters, most of which lose
    their members: each restarts at a sample vector, so every centroid is one of the
    three vectors scaled to length 1, never a zero or NaN centroid that no query is
    near."""
    distinct = np.asarray([[3, 0, 0], [0, 2, 0], [1, 1, 1]], dtype=np.float32)
    vectors = np.repeat(distinct, 100, axis=0)
    rows = np.arange(len(vectors))
    centroids = VectorClusters.train(vectors, rows, np.linalg.norm(vectors, axis=1))
    assert centroids.shape == (17, 3)
    units = distinct / np.linalg.norm(distinct, axis=1)[:, None]
    nearest = np.abs(centroids @ units.T - 1).min(axis=1)
    assert np.all(nearest < 1e-6), centroids
    assert {int(i) for i in np.argmax(centroids @ units.T, axis=1)} == {0, 1, 2}


_TINY = float(np.finfo(np.float32).smallest_subnormal)


@pytest.mark.parametrize(
    ("row", "nearest"),
    [
        # Its float32 products with clusters 1 and 2 both overflow to inf: the first
        # inf won, cluster 1, where the row points exactly at cluster 2.
        ((3e38, 3e38, 3e38), 2),
        # Products of the smallest float32 numbers all round to the same two steps: a
        # tie the first cluster won, where cluster 1 is nearest (0.95 to 0.89 and 0.77).
        ((2 * _TINY, _TINY, 0.0), 1),
        ((2.0, 1.0, 0.0), 1),
    ],
)
@pytest.mark.parametrize("with_norms", [True, False])
def test_rows_too_long_or_short_for_float32_go_to_their_nearest_cluster(row, nearest, with_norms):
    """A row whose float32 products with the centroids overflow or lose their digits is
    scaled to length 1 and multiplied in float64, its norms given or not."""
    centroids = np.stack([_unit(1, 0, 0), _unit(1, 1, 0), _unit(1, 1, 1)])
    rows = np.asarray([row], dtype=np.float32)
    norms = row_norms(rows) if with_norms else None
    assert VectorClusters.assign(rows, centroids, norms).tolist() == [nearest]
