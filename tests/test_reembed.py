"""Moving a namespace to another model: vectors written as records, folded and managed
recall comparing only the new model's vectors, a rerun that resumes, over both logs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.cli import main
from laser_memory.clock import SteppedClock
from laser_memory.embedding import WordHashEmbedder
from laser_memory.log.port import OutgoingRecord
from laser_memory.records import Embedded, body_digest, encode_record


class ReversedWords(WordHashEmbedder):
    """Another model: the word-hash of each word spelled backwards."""

    label = "test/reversed-words"
    dimensions = 32

    def embed_many(self, texts):
        full = super().embed_many([" ".join(w[::-1] for w in t.split()) for t in texts])
        return [v[:32] for v in full]


async def test_reembed_gives_every_item_the_new_models_vectors(any_log_url, stream_name, tmp_path):
    async with lm.connect(any_log_url, stream=stream_name, embedder=WordHashEmbedder()) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        keys = await memory.remember("rotate signing keys monthly", conversation="c1")
        await memory.remember("the cafeteria serves lunch", conversation="c2")
        async with lm.connect(any_log_url, stream=stream_name) as no_model:
            plain = await no_model.memory("notes").remember("deploys happen at dawn")
        await memory.remember("another tenant's secret", tenant="other")

        new = laser.memory("notes", embedder=ReversedWords())
        # Before: no item has the new model's vectors, so a semantic recall finds none.
        assert await new.recall(text="signing keys", strategy="semantic") == []
        seen: list[tuple[int, int]] = []
        assert (
            await memory.reembed(ReversedWords(), batch_size=2, progress=lambda *a: seen.append(a))
            == 3
        )
        assert seen == [(0, 3), (2, 3), (3, 3)]
        assert await memory.reembed(ReversedWords()) == 0  # a rerun writes what is missing
        assert await memory.reembed(ReversedWords(), tenant="other") == 1

        items = await new.recall(text="signing keys", strategy="semantic")
        assert items[0].id == keys
        assert {i.embedder for i in items} == {"test/reversed-words"}
        assert all(len(i.embedding) == 4 * 32 for i in items)
        assert plain in [i.id for i in items]
        # The old model's vectors are still there for the old model.
        old = await memory.recall(text="signing keys", strategy="semantic")
        assert old[0].id == keys and old[0].embedder == "test/word-hash"
        assert plain not in [i.id for i in old]
        # The record is in the item's history; the view agrees with the fold.
        assert [h.op for h in await memory.history(keys, folded=True)] == ["remember", "embedded"]
        view = tmp_path / "view"
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        async with lm.connect(
            laser.log.url, stream=laser.stream, view=view, embedder=ReversedWords()
        ) as reader:
            assert (
                await reader.memory("notes").recall(text="signing keys", strategy="semantic")
                == items
            )

        # A new body under the same id needs its own vector: the old one was of other text.
        again = await memory.append(
            keys, "keys are rotated by the platform team", conversation="c1", kind="fact"
        )
        assert again == keys
        assert await memory.reembed(ReversedWords()) == 1


async def test_the_latest_vector_of_a_model_for_a_body_is_the_one_compared(
    any_log_url, stream_name, tmp_path
):
    """Two vectors of one label for the same body (a model fixed and rerun under its
    label, two workers): the later record's vector is the one recall compares, in the
    fold and in the view alike, whichever order they are folded in."""
    async with lm.connect(any_log_url, stream=stream_name) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        mid = await memory.remember("rotate signing keys monthly", conversation="c1")
        model = ReversedWords()
        wrong, right = (
            np.asarray(v, dtype="<f4").tobytes()
            for v in model.embed_many(["the cafeteria serves lunch", "rotate signing keys monthly"])
        )
        (remembered,) = [i for i in await memory.recall(folded=True) if i.id == mid]
        # The latest of the item's conversation's and of no conversation's vectors.
        for vector, conversation in ((wrong, "c1"), (wrong, None), (right, "c1")):
            wire = encode_record(
                Embedded(
                    ns=memory.namespace,
                    scope=msgspec.structs.replace(remembered.scope, conversation=conversation),
                    target=mid.bytes,
                    body_digest=body_digest(remembered.body),
                    embedding=vector,
                    embedder=model.label,
                )
            )
            await laser.log.append(
                memory.topic, OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)
            )
        view = tmp_path / "view"
        await ViewFolder(laser.log, memory.topic, view).run(until_caught_up=True)
        async with lm.connect(
            laser.log.url, stream=laser.stream, view=view, embedder=model
        ) as reader:
            for folded in (True, False):
                (item,) = await reader.memory("notes").recall(
                    text="rotate signing keys monthly", strategy="semantic", folded=folded
                )
                assert item.embedding == right
                assert item.score == pytest.approx(1.0)


async def test_hostile_embedded_records_are_set_aside(laser: lm.Laser):
    memory = laser.memory("notes")
    mid = await memory.remember("rotate keys")
    good = {
        "ns": memory.namespace,
        "target": mid.bytes,
        "body_digest": body_digest(b"rotate keys"),
        "embedding": b"\x00\x00\x80?",
        "embedder": "test/one",
    }
    hostile = [
        {**good, "body_digest": b"short"},
        {**good, "embedding": b""},
        {**good, "embedding": b"\x00\x00\x80"},
        {**good, "embedder": "no-slash"},
        {**good, "target": b"\x01" * 3},
    ]
    for fields in hostile:
        wire = encode_record(Embedded(**fields))
        await laser.log.append(
            memory.topic, OutgoingRecord(wire.value, key=wire.key, headers=wire.headers)
        )
    fresh = laser.memory("notes")
    assert [i.id for i in await fresh.recall()] == [mid]
    assert len(fresh.set_aside) == len(hostile)


def test_reembed_from_the_command_line(tmp_path: Path):
    url = f"local://{tmp_path / 'log'}"
    runner = CliRunner()
    for text in ("rotate signing keys monthly", "lunch at noon"):
        result = runner.invoke(main, ["remember", text, "--url", url])
        assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["reembed", "--url", url, "--embedder", "word-hash", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1]) == {
        "written": 2,
        "embedder": "test/word-hash",
    }
    result = runner.invoke(
        main,
        ["recall", "--url", url, "--embedder", "word-hash", "--text", "signing keys",
         "--strategy", "semantic", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["body"] == "rotate signing keys monthly"
    result = runner.invoke(main, ["reembed", "--url", url])
    assert result.exit_code != 0 and "--embedder" in result.output
    # Run again, it writes only what is missing: nothing, and says so on stdout.
    result = runner.invoke(main, ["reembed", "--url", url, "--embedder", "word-hash"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "wrote 0 vector(s) of test/word-hash\n"


@pytest.mark.parametrize("batch_size", [0, True, "2", 4097])
async def test_reembed_checks_its_arguments(laser: lm.Laser, batch_size):
    with pytest.raises(lm.InvalidInput, match="batch_size"):
        await laser.memory("notes").reembed(WordHashEmbedder(), batch_size=batch_size)


async def test_reembed_takes_batches_from_1_to_4096_and_an_embedder_only(tmp_path):
    async with lm.connect(f"local://{tmp_path}") as laser:
        memory = laser.memory("notes")
        assert await memory.reembed(WordHashEmbedder()) == 0  # no topic yet: nothing
        await memory.remember_many(["one", "two", "three"])
        for bad in (None, "word-hash", object()):
            with pytest.raises(lm.InvalidInput, match="embedder"):
                await memory.reembed(bad)  # type: ignore[arg-type]
        seen: list[tuple[int, int]] = []
        assert (
            await memory.reembed(
                WordHashEmbedder(), batch_size=1, progress=lambda *a: seen.append(a)
            )
            == 3
        )
        assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
        assert await memory.reembed(WordHashEmbedder(), batch_size=4096) == 0  # all have one


async def test_reembed_refuses_a_progress_it_cannot_call(laser: lm.Laser):
    # A progress that is no callable was a raw TypeError once the first batch was read.
    memory = laser.memory("notes")
    await memory.remember("a fact")
    with pytest.raises(lm.InvalidInput, match="progress is a callable"):
        await memory.reembed(WordHashEmbedder(), progress=5)  # type: ignore[arg-type]


async def test_reembed_awaits_an_async_progress(laser: lm.Laser):
    # An async progress was called into a coroutine nobody awaited: never reported.
    memory = laser.memory("notes")
    await memory.remember_many(["one", "two", "three"])
    seen: list[tuple[int, int]] = []

    async def progress(done: int, total: int) -> None:
        await asyncio.sleep(0)
        seen.append((done, total))

    assert await memory.reembed(WordHashEmbedder(), batch_size=2, progress=progress) == 3
    assert seen == [(0, 3), (2, 3), (3, 3)]


class FailsAfterOneBatch(ReversedWords):
    """The new model, failing from its second batch on (an interrupted run)."""

    def __init__(self) -> None:
        self.batches = 0

    def embed_many(self, texts):
        self.batches += 1
        if self.batches > 1:
            raise RuntimeError("the model server went away")
        return super().embed_many(texts)


async def test_an_interrupted_reembed_has_written_the_oldest_items_first(tmp_path: Path):
    # The docstring's "oldest first": the fold visits partition by partition, so without
    # the sort an interrupted run covered one partition's items, whatever their age.
    clock = SteppedClock(1_700_000_000_000)
    async with lm.connect(f"local://{tmp_path}", stream="s", clock=clock) as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("notes")
        ids = []
        for i in range(8):
            clock.step(1000)
            ids.append(await memory.remember(f"fact number {i}", conversation=f"c{i}"))
        with pytest.raises(lm.EmbeddingFailed):
            await memory.reembed(FailsAfterOneBatch(), batch_size=3)
        log = laser.log
        partitions = set()
        async for batch in log.read(laser.memory_topic_name):
            partitions.update(r.partition for r in batch)
            if len(partitions) > 1:
                break
        assert len(partitions) > 1  # else the fold's order is already the age order
        new = laser.memory("notes", embedder=ReversedWords())
        embedded = {i.id for i in await new.recall(text="fact number", strategy="semantic")}
        assert embedded == set(ids[:3])
        # The rerun goes on with the rest, oldest first again.
        assert await memory.reembed(ReversedWords(), batch_size=3) == 5
