"""Recall by meaning: an embedder's vectors go in the records, and a semantic recall
ranks by cosine similarity inside the candidate set the caller may see, the same in
folded and managed recall, over both logs."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.embedding import WordHashEmbedder
from laser_memory.records import decode_record
from log_conformance import read_all


def test_word_hash_vectors_are_the_specified_ones():
    from laser_memory.embedding import _fnv1a_32

    # FNV-1a 32-bit test vectors from the algorithm's authors.
    assert [_fnv1a_32(b""), _fnv1a_32(b"a"), _fnv1a_32(b"foobar")] == [
        0x811C9DC5,
        0xE40C292C,
        0xBF9CF968,
    ]
    [vector] = WordHashEmbedder().embed_many(["FOOBAR, foobar! a bc xyz"])
    expected = [0.0] * 64
    expected[0xBF9CF968 % 64] = 2.0  # words shorter than four characters do not count
    expected[0] += 0.01
    assert vector == pytest.approx(expected)


async def _both_ways(laser: lm.Laser, tmp_path: Path, **query) -> list[lm.MemoryItem]:
    """Semantic recall folded and from a view: the two must agree exactly."""
    memory = laser.memory("notes")
    folded = await memory.recall(folded=True, **query)
    view = tmp_path / "view"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(
        laser.log.url, stream=laser.stream, view=view, embedder=laser.embedder
    ) as reader:
        managed = await reader.memory("notes").recall(**query)
    assert managed == folded
    return folded


@pytest.fixture
async def embedded(any_log_url: str, stream_name: str):
    async with lm.connect(any_log_url, stream=stream_name, embedder=WordHashEmbedder()) as laser:
        await laser.bootstrap(partitions=4)
        yield laser


@pytest.mark.parametrize(
    ("texts", "says"),
    [
        ("one text", "a list of str, got 'one text'"),
        (5, "a list of str, got 5"),
        ([b"bytes"], "one is b'bytes'"),
        (["fine", None], "one is None"),
    ],
)
def test_the_word_hash_embedder_refuses_what_is_no_list_of_texts(texts, says):
    # A str was embedded a character at a time; the others raised a raw error.
    with pytest.raises(lm.InvalidInput, match=says):
        lm.WordHashEmbedder().embed_many(texts)


def test_the_word_hash_embedder_reads_a_str_subclass_as_its_text():
    class Loud(str):
        def lower(self):
            raise RuntimeError("asked")

    assert lm.WordHashEmbedder().embed_many([Loud("rotate keys")]) == (
        lm.WordHashEmbedder().embed_many(["rotate keys"])
    )


def test_an_embedders_label_is_at_most_255_bytes():
    from laser_memory.embedding import validate_embedder

    class Labelled(lm.WordHashEmbedder):
        def __init__(self, label: str) -> None:
            self.label = label

    assert validate_embedder(Labelled("p/" + "m" * 253)).label == "p/" + "m" * 253
    with pytest.raises(lm.InvalidInput, match="at most 255 bytes"):
        validate_embedder(Labelled("p/" + "m" * 254))


@pytest.mark.parametrize("strategy", ["semantic", "hybrid", "keyword", "auto"])
async def test_a_query_that_is_no_valid_unicode_is_refused(embedded: lm.Laser, strategy):
    # With a model it failed as the embedder's fault (EmbeddingFailed from the
    # tokenizer); by keyword it matched nothing, as no body can hold it.
    memory = embedded.memory("notes")
    await memory.remember("alpha one")
    with pytest.raises(lm.InvalidInput, match="not valid Unicode"):
        await memory.recall(text="alpha \udcff", strategy=strategy)


async def test_vectors_and_their_label_go_in_the_records(embedded: lm.Laser):
    memory = embedded.memory("notes")
    mid = await memory.remember("rotate the signing keys monthly")
    await memory.remember_many(["one", {"body": "two", "embedding": [0.5] * 64}])
    typed = await memory.append(lm.MemoryId.new(), "node-7 in eu-west", kind="entity")
    records = [
        decode_record(r.value, r.headers) for r in await read_all(embedded.log, memory.topic)
    ]
    assert {r.embedder for r in records} == {"test/word-hash"}
    [appended] = [r for r in records if r.id == typed.bytes]
    expected = np.asarray(WordHashEmbedder().embed_many(["node-7 in eu-west"])[0])
    assert np.frombuffer(appended.embedding, dtype="<f4") == pytest.approx(expected)
    records = [r for r in records if r.id != typed.bytes]
    [first] = [r for r in records if r.id == mid.bytes]
    expected = np.asarray(WordHashEmbedder().embed_many(["rotate the signing keys monthly"])[0])
    assert np.frombuffer(first.embedding, dtype="<f4") == pytest.approx(expected)
    assert np.frombuffer(records[-1].embedding, dtype="<f4") == pytest.approx([0.5] * 64)


async def test_semantic_recall_ranks_by_meaning_folded_and_managed(embedded, tmp_path):
    memory = embedded.memory("notes")
    keys = await memory.remember("rotate signing keys every month", conversation="c1")
    await memory.remember("the cafeteria serves lunch at noon", conversation="c1")
    pool = await memory.remember("node-7 sits in the eu-west pool", conversation="c2")
    items = await _both_ways(embedded, tmp_path, text="when do we rotate keys", strategy="semantic")
    assert items[0].id == keys
    assert items[0].signals[0].strategy == "semantic"
    assert [i.score for i in items] == sorted((i.score for i in items), reverse=True)
    # Filters narrow before ranking; min_similarity and exclude apply.
    scoped = await _both_ways(
        embedded, tmp_path, text="which pool is node-7 in", strategy="semantic", conversation="c2"
    )
    assert [i.id for i in scoped] == [pool]
    strict = await memory.recall(text="rotate keys", strategy="semantic", min_similarity=0.5)
    assert [i.id for i in strict] == [keys]
    assert keys not in [
        i.id for i in await memory.recall(text="rotate keys", strategy="semantic", exclude=[keys])
    ]
    # A set of ids excludes as a list does (it was refused); a lone id or text is not one.
    shown = {keys: "seen", str(pool): "seen"}
    for ids in ({keys, str(pool)}, frozenset([keys, str(pool)]), shown.keys()):
        found = await memory.recall(text="rotate keys", strategy="semantic", exclude=ids)
        assert {i.id for i in found} & {keys, pool} == set()
    for bad in (keys, str(keys), {keys: "seen"}, (i for i in [keys])):
        with pytest.raises(lm.InvalidInput, match="exclude is a list or set of memory ids"):
            await memory.recall(text="rotate keys", exclude=bad)


@pytest.mark.parametrize("strategy", ["semantic", "keyword", "hybrid", "auto"])
async def test_another_tenants_best_matches_never_crowd_out_this_tenants(
    embedded, tmp_path, strategy
):
    memory = embedded.memory("notes")
    for i in range(30):  # the global top hits all belong to another tenant...
        await memory.remember(f"rotate signing keys monthly {i}", tenant="other")
    # ...or to another conversation or agent of this one.
    for i in range(30):
        await memory.remember(f"rotate signing keys monthly {i}", tenant="ours", agent="bot")
    ours = await memory.remember(
        "signing keys are rotated by the platform team", tenant="ours", agent="ops"
    )
    await memory.remember("the cafeteria serves lunch", tenant="ours", agent="ops")
    query = {"text": "rotate signing keys", "strategy": strategy, "limit": 5}
    items = await _both_ways(embedded, tmp_path, tenant="ours", agent="ops", **query)
    assert items[0].id == ours
    assert all(i.scope.tenant == "ours" and i.scope.agent == "ops" for i in items)
    assert all(i.scope.tenant == "ours" for i in await memory.recall(tenant="ours", **query))
    assert await memory.recall(tenant="nobody", **query) == []


async def test_hybrid_finds_an_error_code_that_vectors_alone_miss(embedded, tmp_path):
    """The word-hash embedder ignores words under four letters, as real models blur
    codes: to vectors alone the two incidents are the same text."""
    memory = embedded.memory("notes")
    e17 = await memory.remember("incident E17: payment service timed out in checkout")
    await memory.remember("incident E18: payment service timed out in checkout")
    semantic = await _both_ways(embedded, tmp_path, text="E17 payment timeout", strategy="semantic")
    assert semantic[0].score == semantic[1].score  # a tie: the vectors cannot tell
    for strategy in ("hybrid", "auto", "keyword"):
        items = await _both_ways(embedded, tmp_path, text="E17 payment timeout", strategy=strategy)
        assert items[0].id == e17, strategy
    [top, *_] = await memory.recall(text="E17 payment timeout", strategy="hybrid")
    assert [s.strategy for s in top.signals] == ["hybrid", "keyword", "semantic"]
    assert top.signals[1].rank == 0 and top.signals[1].score > 0


async def test_vectors_of_another_model_are_never_compared(embedded, tmp_path):
    class OtherModel(WordHashEmbedder):
        label = "test/other-model"

    other = embedded.memory("notes", embedder=OtherModel())
    await other.remember("rotate signing keys monthly")
    mine = await embedded.memory("notes").remember("keys rotate monthly")
    items = await _both_ways(embedded, tmp_path, text="rotate keys", strategy="semantic")
    assert [i.id for i in items] == [mine]


@pytest.mark.parametrize(
    "embed",
    [
        lambda texts: 1 / 0,
        lambda texts: [[0.0] * 63 for _ in texts],
        lambda texts: [[float("nan")] * 64 for _ in texts],
        lambda texts: [[0.0] * 64],  # one vector for several texts
        # numpy alone took these as vectors: strings parsed, imaginary parts dropped.
        lambda texts: [["0.5"] * 64 for _ in texts],
        lambda texts: [[0.5 + 1j] * 64 for _ in texts],
        lambda texts: [[True] * 64 for _ in texts],
        lambda texts: [[0.5] * 63 + [True] for _ in texts],  # read as 1.0 among floats
    ],
)
async def test_a_failing_embedder_writes_nothing(embedded: lm.Laser, embed):
    class Broken(WordHashEmbedder):
        label = "test/broken"

        def embed_many(self, texts):
            return embed(texts)

    memory = embedded.memory("notes", embedder=Broken())
    before = await embedded.log.end_offsets(memory.topic)
    with pytest.raises(lm.EmbeddingFailed, match=r"test/broken.*; nothing was written$"):
        await memory.remember_many(["a", "b"])
    assert await embedded.log.end_offsets(memory.topic) == before


async def test_a_failing_embedder_of_a_read_says_nothing_was_recalled(embedded: lm.Laser):
    """It said nothing was written, as a write does."""

    class Broken(WordHashEmbedder):
        label = "test/broken"

        def embed_many(self, texts):
            return [[float("nan")] * 64 for _ in texts]

    memory = embedded.memory("notes", embedder=Broken())
    for strategy in ("semantic", "hybrid"):
        with pytest.raises(lm.EmbeddingFailed, match=r"non-finite value; nothing was recalled$"):
            await memory.recall(text="a", strategy=strategy)


async def test_embedding_checks_and_an_async_embedder(embedded: lm.Laser):
    memory = embedded.memory("notes")
    with pytest.raises(lm.InvalidInput, match="64"):
        await memory.remember("x", embedding=[0.5] * 3)
    threads = []

    class Recording(WordHashEmbedder):
        def embed_many(self, texts):
            threads.append(threading.current_thread())
            return super().embed_many(texts)

    class Async(WordHashEmbedder):
        async def embed_many(self, texts):
            await asyncio.sleep(0)
            return super().embed_many(texts)

    await embedded.memory("notes", embedder=Recording()).remember("a sync model")
    assert threads and threads[0] is not threading.main_thread()  # off the event loop
    await embedded.memory("notes", embedder=Async()).remember("an async model")

    class HandsBackAwaitable(WordHashEmbedder):  # sync, returning its client's coroutine
        def embed_many(self, texts):
            return Async().embed_many(texts)

    wrapped = embedded.memory("notes", embedder=HandsBackAwaitable())
    mid = await wrapped.remember("a wrapped model")
    [item] = [i for i in await wrapped.recall(folded=True, limit=10) if i.id == mid]
    [vector] = WordHashEmbedder().embed_many(["a wrapped model"])
    assert item.embedding == np.asarray(vector, "<f4").tobytes()
    for bad in (object(), type("NoLabel", (WordHashEmbedder,), {"label": "nolabel"})()):
        with pytest.raises(lm.InvalidInput):
            embedded.memory("notes", embedder=bad)


async def test_a_query_of_another_length_than_the_labels_vectors_is_refused(embedded, tmp_path):
    """Two models under one label cannot be compared: a recall by meaning says so instead
    of finding nothing, folded and managed; keyword recall still works."""

    class Shorter(WordHashEmbedder):  # the same label, another length
        dimensions = 32

        def embed_many(self, texts):
            return [v[:32] for v in super().embed_many(texts)]

    memory = embedded.memory("notes")
    await memory.remember("rotate signing keys monthly")
    short = embedded.memory("notes", embedder=Shorter())
    for strategy in ("semantic", "hybrid", "auto"):
        with pytest.raises(lm.InvalidInput, match="64 dimensions, but this embedder makes 32"):
            await short.recall(text="rotate keys", strategy=strategy, folded=True)
    view = tmp_path / "view"
    await ViewFolder(embedded.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(
        embedded.log.url, stream=embedded.stream, view=view, embedder=Shorter()
    ) as reader:
        with pytest.raises(lm.InvalidInput, match="reembed"):
            await reader.memory("notes").recall(text="rotate keys", strategy="semantic")
        [hit] = await reader.memory("notes").recall(text="rotate keys", strategy="keyword")
        assert hit.text == "rotate signing keys monthly"


async def test_vectors_of_any_finite_size_rank_by_direction_folded_managed_and_served(
    any_log_url: str, stream_name: str, tmp_path: Path
):
    """Vectors the handle accepts (finite float32) but too long or too short to square
    in float32 scored nan or 0: hybrid recall put the nan ones first, and the HTTP
    server answered 500 (nan is no JSON). Each now scores its direction's cosine."""
    from aiohttp.test_utils import TestClient, TestServer

    from folders.http import ServerConfig, make_app
    from folders.view import MemoryView

    direction = np.array([3.0, -1.0, 2.0, 0.5, 0.0, 1.0, -2.0, 1.5])

    class Fixed:
        label, dimensions = "test/fixed", 8

        def embed_many(self, texts):
            return [direction.tolist() for _ in texts]

    async with lm.connect(any_log_url, stream=stream_name, embedder=Fixed()) as laser:
        await laser.bootstrap(partitions=2)
        memory = laser.memory("notes")
        want = {}
        for scale in (1e-40, 1e-30, 1e-20, 1.0, 1e20, 1e30, 1e37):
            for sign in (1, -1):
                mid = await memory.remember(
                    f"v {sign * scale:g}", embedding=(sign * scale * direction).tolist()
                )
                want[mid] = sign
        items = await _both_ways(laser, tmp_path, text="anything", strategy="semantic")
        assert {i.id: round(i.score, 4) for i in items} == {
            mid: float(sign) for mid, sign in want.items()
        }
        hybrid = await _both_ways(laser, tmp_path, text="anything", strategy="hybrid")
        assert {want[i.id] for i in hybrid[:7]} == {1}  # the same direction first
        with MemoryView.open(tmp_path / "view", create=False) as view:
            app = make_app(view, config=ServerConfig(embedder=Fixed()))
            async with TestClient(TestServer(app)) as http:
                for strategy in ("semantic", "hybrid"):
                    query = {"namespace": memory.namespace, "text": "x", "strategy": strategy}
                    response = await http.get("/v1/recall", params=query)
                    assert response.status == 200, await response.text()
                    assert len(await response.json()) == len(want)


async def test_folded_and_managed_recall_score_an_item_the_same_to_the_bit(
    any_log_url: str, stream_name: str, tmp_path: Path
):
    """The fold's search index and the view's hold an item at different rows. numpy's
    matrix-vector product (BLAS) rounds a row's sum by where the row falls, so the same
    item scored differently in the last bit, folded and managed (in most runs of these
    100 queries), and near ties could rank apart. Each row's product is now its own
    (`row_dots`)."""

    class Random384:
        label, dimensions = "test/random-384", 384

        def embed_many(self, texts):
            return [
                np.random.default_rng(list(text.encode())).standard_normal(384).tolist()
                for text in texts
            ]

    async with lm.connect(any_log_url, stream=stream_name, embedder=Random384()) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        for first in range(0, 1000, 97):  # batches that leave ragged ends
            await memory.remember_many([f"fact {n}" for n in range(first, first + 97)])
        for n in range(30):
            await memory.remember(f"single {n}", conversation=f"c{n % 3}")
        view = tmp_path / "view"
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        async with lm.connect(
            laser.log.url, stream=laser.stream, view=view, embedder=Random384()
        ) as reader:
            managed = reader.memory("notes")
            for n in range(100):
                query = {"text": f"query {n}", "strategy": "semantic", "limit": 200}
                if n % 3 == 0:
                    query["conversation"] = f"c{n % 3}"
                folded = await memory.recall(folded=True, **query)
                assert [(i.id, i.score) for i in await managed.recall(**query)] == [
                    (i.id, i.score) for i in folded
                ], query


async def test_min_similarity_takes_its_bounds(embedded: lm.Laser, tmp_path):
    """-1.0 and 1.0 are similarities a vector can have, so both are taken: 1.0 keeps
    only an item whose vector points the query's way, -1.0 every item."""
    memory = embedded.memory("notes")
    same = await memory.remember("rotate the signing keys")
    await memory.remember("lunch is served at noon")
    query = {"text": "rotate the signing keys", "strategy": "semantic"}
    exact = await _both_ways(embedded, tmp_path, min_similarity=1.0, **query)
    # The same words: 1.0, or a rounding under it where float32 sums round so.
    assert [i.id for i in exact] in ([same], [])
    assert len(await _both_ways(embedded, tmp_path, min_similarity=-1.0, **query)) == 2


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"embed_many": None}, "an embedder has an embed_many"),
        ({"label": None}, "label is '<provider>/<model>'"),
        ({"label": "no-provider"}, "label is '<provider>/<model>'"),
        # A NUL was taken, then every fold set the item aside; a lone surrogate escaped
        # as a raw UnicodeEncodeError.
        ({"label": "test/word\x00hash"}, "no NUL), got 'test/word\\x00hash'"),
        ({"label": "test/\ud800"}, "Unicode text, no NUL), got 'test/\\ud800'"),
        ({"label": "test/" + "é" * 126}, "at most 255 bytes"),  # 257 bytes, 131 characters
        ({"dimensions": 0}, "dimensions are 1 to 65536, got 0"),
        ({"dimensions": 65537}, "dimensions are 1 to 65536, got 65537"),
        ({"dimensions": True}, "dimensions are 1 to 65536, got True"),
        ({"dimensions": 64.0}, "dimensions are 1 to 65536, got 64.0"),
    ],
)
async def test_what_is_no_embedder_is_refused_when_given(tmp_path, changes, says):
    """To a connection and to a handle, before anything is embedded or written."""

    class Odd(lm.WordHashEmbedder):
        pass

    for name, value in changes.items():
        setattr(Odd, name, value)
    with pytest.raises(lm.InvalidInput, match=re.escape(says)):
        lm.connect(f"local://{tmp_path}", embedder=Odd())
    async with lm.connect(f"local://{tmp_path}") as laser:
        with pytest.raises(lm.InvalidInput, match=re.escape(says)):
            laser.memory("notes", embedder=Odd())


def test_the_largest_and_smallest_embedders_are_taken():
    from laser_memory.embedding import validate_embedder

    for dimensions in (1, 65536):
        wide = type("Wide", (lm.WordHashEmbedder,), {"dimensions": dimensions})()
        assert validate_embedder(wide) is wide


async def test_every_label_an_embedder_is_taken_with_folds(tmp_path):
    """The longest label (255 bytes of UTF-8), and labels of odd characters, are taken,
    and the items their embedders remember are found by meaning, folded and managed:
    nothing accepted is set aside."""
    labels = ["test/" + "é" * 125, "t/\u202e\x01\u2028", "/"]
    assert [len(label.encode()) for label in labels] == [255, 9, 1]
    embedders = [type("Odd", (lm.WordHashEmbedder,), {"label": label})() for label in labels]
    async with lm.connect(f"local://{tmp_path}") as laser:
        memories = [laser.memory(f"notes{n}", embedder=e) for n, e in enumerate(embedders)]
        items = [await memory.remember("node seven rotates its keys") for memory in memories]
        for memory, item, label in zip(memories, items, labels, strict=True):
            found = await memory.recall(text="node seven", strategy="semantic", folded=True)
            assert [(i.id, i.embedder) for i in found] == [(item, label)]
            assert memory.set_aside == []
        view = tmp_path / "view"
        await ViewFolder(laser.log, memories[0].topic, view).run(until_caught_up=True)
    async with lm.connect(f"local://{tmp_path}", view=view) as reader:
        for n, (embedder, item) in enumerate(zip(embedders, items, strict=True)):
            managed = reader.memory(f"notes{n}", embedder=embedder)
            found = await managed.recall(text="node seven", strategy="semantic")
            assert [i.id for i in found] == [item]


async def test_a_snapshot_ranks_as_its_handles_folded_recall_did_then(embedded: lm.Laser):
    # An auditor asks what the agent would have recalled at a past moment: the snapshot
    # ranks by meaning with the handle's embedder, as its folded recall did then. It
    # ranked by words alone, so a semantic or hybrid recall of the past answered
    # otherwise than the agent's own recall had.
    memory = embedded.memory("notes")
    await memory.remember("node seven sits in the west pool", conversation="c1")
    await memory.remember("backups run at midnight", conversation="c2")
    last = await memory.remember("the west pool drains nightly, node by node")
    query = "west pool node"

    def shown(items):
        return [(i.id, i.score, i.signals, i.embedding) for i in items]

    asks = [
        {"strategy": strategy, "text": query}
        for strategy in ("semantic", "hybrid", "keyword", "auto", "recent")
    ] + [
        {"strategy": "semantic", "text": query, "min_similarity": 0.5},
        {"strategy": "hybrid", "text": query, "conversation": "c1", "limit": 1},
    ]
    then = {i: shown(await memory.recall(folded=True, **ask)) for i, ask in enumerate(asks)}
    assert {s.strategy for _, _, signals, _ in then[0] for s in signals} == {"semantic"}
    assert 0 < len(then[5]) < len(then[0])  # min_similarity dropped the weaker matches
    await memory.remember("node west pool, west pool node", conversation="c1")  # after
    snapshot = await memory.as_of(last)
    for i, ask in enumerate(asks):
        assert shown(await snapshot.recall(**ask)) == then[i], ask
    # A handle without an embedder takes snapshots that rank by words alone, as it does.
    words = await lm.Laser(embedded.log, stream=embedded.stream).memory("notes").as_of(last)
    past = await words.recall(text=query, strategy="semantic")
    assert {s.strategy for i in past for s in i.signals} == {"keyword"}
    assert [i.id for i in past] == [
        i.id for i in await words.recall(text=query, strategy="keyword")
    ]
    with pytest.raises(lm.InvalidInput, match="min_similarity is from -1 to 1"):
        await snapshot.recall(text=query, min_similarity=2)
    with pytest.raises(lm.InvalidInput, match="unknown recall strategy"):
        await snapshot.recall(text=query, strategy="vector")


async def test_a_snapshot_whose_embedder_fails_recalls_nothing_and_says_so(embedded: lm.Laser):
    class Failing(WordHashEmbedder):
        def embed_many(self, texts):
            raise RuntimeError("the model is gone")

    memory = embedded.memory("notes")
    last = await memory.remember("node seven sits in the west pool")
    snapshot = await embedded.memory("notes", embedder=Failing()).as_of(last)
    with pytest.raises(lm.EmbeddingFailed, match="the model is gone; nothing was recalled"):
        await snapshot.recall(text="west pool", strategy="hybrid")
    assert [i.id for i in await snapshot.recall(strategy="recent")] == [last]
