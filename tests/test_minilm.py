"""The local model: its vectors are sentence-transformers' own (the reference vectors in
``fixtures/minilm-reference.json`` were computed with sentence-transformers 6.2 and
torch 2.15 from the same weights), and a memory handle given it recalls by meaning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import laser_memory as lm
from laser_memory.minilm import MiniLMEmbedder

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm-reference.json").read_text())


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_vectors_match_sentence_transformers(minilm: MiniLMEmbedder):
    ours = minilm.embed_many(REFERENCE["texts"])
    theirs = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    assert ours.shape == theirs.shape == (len(REFERENCE["texts"]), 384)
    cosines = (ours * theirs).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() > 0.99999, cosines
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_batching_does_not_change_a_vector(minilm: MiniLMEmbedder):
    alone = minilm.embed_many([REFERENCE["texts"][1]])[0]
    together = minilm.embed_many(REFERENCE["texts"])[1]
    assert float(alone @ together) > 0.99999
    assert minilm.embed_many([]).shape == (0, 384)


@pytest.mark.parametrize(
    ("texts", "says"),
    [
        ("one text", "texts to embed are a list of str, got 'one text'"),
        ([b"bytes"], "one is b'bytes'"),
        ([None], "one is None"),
        (["fine", "lone \udcff surrogate"], "text 1 to embed is not valid Unicode"),
    ],
)
def test_texts_the_model_cannot_embed_are_refused(minilm: MiniLMEmbedder, texts, says):
    # A str was tokenized as a list of its characters; the others met the tokenizer as
    # a raw TypeError.
    with pytest.raises(lm.InvalidInput, match=says):
        minilm.embed_many(texts)


@pytest.mark.parametrize("damaged", ["tokenizer.json", "config.json", "model.safetensors"])
def test_a_damaged_model_file_is_a_clear_error_when_made(tmp_path: Path, damaged: str):
    # Each raised what its reader raises (json's, tokenizers' or safetensors' own error).
    import shutil

    from laser_memory.minilm import default_model_dir

    source = default_model_dir()
    assert source is not None
    for name in ("tokenizer.json", "config.json", "model.safetensors"):
        if (source / name).is_file():
            shutil.copy(source / name, tmp_path / name)
    (tmp_path / damaged).write_text("{not json")
    with pytest.raises(lm.InvalidInput, match=r"could not be loaded .* damaged"):
        MiniLMEmbedder(tmp_path)


def test_a_model_without_the_weights_it_reads_is_refused_when_made(tmp_path: Path):
    # Found only by the first embedding, as a raw KeyError.
    from safetensors.numpy import save_file

    from laser_memory.minilm import default_model_dir

    weights = {"unrelated.weight": np.zeros((2, 2), dtype=np.float32)}
    save_file(weights, str(tmp_path / "model.safetensors"))
    source = default_model_dir()
    assert source is not None
    (tmp_path / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    with pytest.raises(lm.InvalidInput, match=r"has no embeddings\.word_embeddings\.weight"):
        MiniLMEmbedder(tmp_path)


@pytest.mark.parametrize(("model_dir", "batch_size"), [(5, 32), ("", 32), (None, 0), (None, True)])
def test_settings_of_the_wrong_kind_are_refused_when_made(model_dir, batch_size):
    # An empty folder named the working directory; a batch size of 0 failed at the first
    # embedding with a raw ValueError.
    with pytest.raises(lm.InvalidInput, match=r"model_dir|batch_size"):
        MiniLMEmbedder(model_dir, batch_size=batch_size)


def test_a_folder_without_the_model_is_a_clear_error(tmp_path: Path):
    with pytest.raises(lm.InvalidInput, match="no all-MiniLM-L6-v2 model found"):
        MiniLMEmbedder(tmp_path)


async def test_semantic_recall_with_the_local_model(tmp_path: Path, minilm: MiniLMEmbedder):
    async with lm.connect(f"local://{tmp_path}", stream="s", embedder=minilm) as laser:
        memory = laser.memory("notes")
        await memory.remember_many(
            [
                "the customer wants to be contacted by email",
                "our cat sleeps on the sofa all afternoon",
                "the deploy pipeline failed on the integration tests",
            ]
        )
        [best, *_] = await memory.recall(
            text="how should we reach the client?", strategy="semantic"
        )
        assert best.text == "the customer wants to be contacted by email"
        assert best.embedder == minilm.label


async def test_the_readme_error_code_example(tmp_path: Path, minilm: MiniLMEmbedder):
    """The README's hybrid example, as written there."""
    async with lm.connect(f"local://{tmp_path}", embedder=minilm) as laser:
        memory = laser.memory("incidents")
        await memory.remember("ERR-4021: checkout requests time out at the payment gateway")
        await memory.remember("ERR-4012: checkout requests fail at the payment gateway")
        query = "checkout timeouts ERR-4012"
        by_meaning = await memory.recall(text=query, strategy="semantic")
        hits = await memory.recall(text=query)
        assert by_meaning[0].text.startswith("ERR-4021")
        assert hits[0].text.startswith("ERR-4012")
        assert [(s.strategy, s.rank) for s in hits[0].signals] == [
            ("hybrid", 0),
            ("keyword", 0),
            ("semantic", 1),
        ]


def test_laser_minilm_dir_names_the_model_folder(tmp_path: Path, monkeypatch):
    """The folder in $LASER_MINILM_DIR comes before the installed package's, and a
    MiniLMEmbedder made without a folder loads from it (here one without the model)."""
    from laser_memory.minilm import default_model_dir

    monkeypatch.setenv("LASER_MINILM_DIR", str(tmp_path))
    assert default_model_dir() == tmp_path
    with pytest.raises(lm.InvalidInput, match="no all-MiniLM-L6-v2 model found"):
        MiniLMEmbedder()
    monkeypatch.setenv("LASER_MINILM_DIR", "")
    assert default_model_dir() != tmp_path
