"""Rerankers: a second pass over the first pass's best items, folded and managed."""

from __future__ import annotations

from pathlib import Path

import pytest

import laser_memory as lm
from folders.service import ViewFolder


class ShortestFirst:
    label = "test/shortest-first"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def rerank(self, query: str, texts):
        self.calls.append((query, list(texts)))
        return [-len(t) for t in texts]


BODIES = [
    "signing keys rotate monthly, and the rotation is logged in the audit trail",
    "keys rotate monthly",
    "signing keys rotate",
    "the cafeteria serves lunch at noon",
]


async def test_reranked_recall_folded_and_managed(laser: lm.Laser, tmp_path: Path):
    memory = laser.memory("notes")
    ids = await memory.remember_many(BODIES)
    reranker = ShortestFirst()
    reranked = memory.reranker(reranker, depth=3)
    assert isinstance(reranked, lm.RerankedMemory)
    first = await memory.recall(text="signing keys rotate", strategy="keyword")
    items = await reranked.recall(text="signing keys rotate", strategy="keyword", limit=2)
    # The reranker saw the first pass's best three, and ordered them shortest first.
    assert reranker.calls == [("signing keys rotate", [i.text for i in first[:3]])]
    assert [i.text for i in items] == ["signing keys rotate", "keys rotate monthly"]
    assert items[0].signals[0] == lm.Signal("rerank", 0, -len("signing keys rotate"))
    assert items[0].signals[1].strategy == "keyword"

    view = tmp_path / "view"
    await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
    async with lm.connect(laser.log.url, stream=laser.stream, view=view) as reader:
        managed = reader.memory("notes").reranker(ShortestFirst(), depth=3)
        assert await managed.recall(text="signing keys rotate", strategy="keyword", limit=2) == (
            items
        )

    # Without text, or by recency, nothing is reranked; writes and reads pass through.
    assert await reranked.recall(strategy="recent") == await memory.recall(strategy="recent")
    await reranked.forget(ids[1])
    assert len(reranker.calls) == 1
    block = await reranked.recall(text="keys", strategy="keyword", block=True)
    assert block.splitlines()[0] == "- [fact] signing keys rotate"


async def test_a_failing_reranker_is_a_laser_error(laser: lm.Laser):
    memory = laser.memory("notes")
    await memory.remember_many(BODIES)

    class Broken:
        label = "test/broken"

        def __init__(self, answer):
            self.answer = answer

        def rerank(self, query, texts):
            return self.answer(texts)

    for answer in (
        lambda t: 1 / 0,
        lambda t: [1.0],
        # A score that is no finite number is named as such (it read "(3,) scores for 3
        # texts", as though their count were wrong).
        lambda t: [0.5, float("nan"), float("inf")][: len(t)] + [0.0] * (len(t) - 3),
        # numpy alone read these as scores: "1" as 1.0, True as 1.0.
        lambda t: ["1"] * len(t),
        lambda t: [True] * len(t),
        lambda t: [10**400] * len(t),
    ):
        with pytest.raises(lm.RerankFailed, match="test/broken"):
            await memory.reranker(Broken(answer)).recall(text="keys", strategy="keyword")

    with pytest.raises(lm.RerankFailed, match=r"not finite .* for 2 of 3 texts"):
        await memory.reranker(Broken(lambda t: [0.5, float("nan"), float("inf")])).recall(
            text="keys", strategy="keyword"
        )

    class Async:
        label = "test/async"

        async def rerank(self, query, texts):
            return [len(t) for t in texts]  # longest first

    [top, *_] = await memory.reranker(Async()).recall(text="keys", strategy="keyword")
    assert top.text == BODIES[0]

    async def scores(texts):
        return [len(t) for t in texts]

    # A plain function handing back an awaitable (a client's call, say) is awaited: its
    # coroutine is no list of scores.
    [top, *_] = await memory.reranker(lambda query, texts: scores(texts)).recall(text="keys")
    assert top.text == BODIES[0]

    def longest_first(query, texts):
        return [len(t) for t in texts]

    [top, *_] = await lm.RerankedMemory(memory, longest_first).recall(text="keys")
    assert top.text == BODIES[0] and top.signals[0].strategy == "rerank"
    for depth in (0, True, 1001, "5"):
        with pytest.raises(lm.InvalidInput, match="depth"):
            memory.reranker(ShortestFirst(), depth=depth)
    assert memory.reranker(ShortestFirst(), depth=1000).depth == 1000  # recall's most
    # A function names itself in the handle's repr (and in a failure's message).
    assert repr(lm.RerankedMemory(memory, longest_first)).endswith(", longest_first, depth=50)")
    with pytest.raises(lm.InvalidInput, match="rerank"):
        memory.reranker(object())
    # It wraps a handle (or a reranked one): the connection or a namespace's name was a
    # raw AttributeError at the first recall.
    for inner in (memory._laser, "notes"):
        with pytest.raises(lm.InvalidInput, match="wraps a memory handle"):
            lm.RerankedMemory(inner, longest_first)
    twice = lm.RerankedMemory(lm.RerankedMemory(memory, longest_first), longest_first)
    assert (await twice.recall(text="keys"))[0].text == BODIES[0]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"text": 5}, "text must be a string"),
        ({"text": b"keys"}, "text must be a string"),
        ({"text": "keys", "block": "yes"}, "block is True or False"),
        ({"text": "keys", "block": 1}, "block is True or False"),
        # Taken without a block (none was formatted); refused without text.
        ({"text": "keys", "token_budget": -5}, "token_budget must be a whole number"),
        ({"text": "keys", "token_budget": "x"}, "token_budget must be a whole number"),
        ({"text": "keys", "token_budget": 50}, "token_budget budgets a context block"),
    ],
)
async def test_a_reranked_recall_refuses_what_recall_refuses(tmp_path, arguments, says):
    # A text that is no str raised a raw AttributeError; a block of "yes" was read as
    # true, where a handle's recall refuses it.
    async with lm.connect(f"local://{tmp_path}") as laser:
        memory = laser.memory("notes")
        await memory.remember_many(BODIES)
        with pytest.raises(lm.InvalidInput, match=says):
            await memory.reranker(ShortestFirst()).recall(**arguments)


async def test_a_reranked_recall_keeps_recalls_limits(tmp_path):
    # With text the limit was checked by no one (a limit of -1 dropped the last item),
    # a limit of 0 still called the reranker, and the defaults are recall's.
    async with lm.connect(f"local://{tmp_path}") as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"keys rotate, note {i}" for i in range(60)])
        calls: list[int] = []

        def counting(query, texts):
            calls.append(len(texts))
            return [0.0] * len(texts)

        reranked = memory.reranker(counting)
        for limit in (-1, 1001, True):
            with pytest.raises(lm.InvalidInput, match="limit"):
                await reranked.recall(text="keys", limit=limit)
        assert await reranked.recall(text="keys", limit=0) == [] and calls == []
        assert len(await reranked.recall(text="keys")) == 50  # recall's default
        assert calls == [50]  # the best 50 (depth's default), reranked
        assert len(await memory.reranker(counting, depth=1).recall(text="keys", limit=3)) == 3
        assert calls[-1] == 1
