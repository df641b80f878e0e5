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


def _model_with_config(tmp_path: Path, change: dict) -> Path:
    """The installed model's files (linked, not copied) with ``change`` in its config."""
    from laser_memory.minilm import default_model_dir

    source = default_model_dir()
    assert source is not None
    for name in ("tokenizer.json", "model.safetensors"):
        (tmp_path / name).symlink_to(source / name)
    config = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    return tmp_path


@pytest.mark.parametrize(
    ("change", "says"),
    [
        # A raw ZeroDivisionError at the first embedding.
        ({"num_attention_heads": 0}, "0 attention heads, which do not divide"),
        # A raw ValueError from a reshape at the first embedding.
        ({"num_attention_heads": 5}, "5 attention heads"),
        # A raw KeyError for layer 6's weights at the first embedding.
        ({"num_hidden_layers": 7}, "7 layers, where its weights hold 6"),
        # Vectors from the embeddings alone, or from the first layers: no error at all.
        ({"num_hidden_layers": -1}, "-1 layers, where its weights hold 6"),
        ({"num_hidden_layers": 5}, "5 layers, where its weights hold 6"),
        # Every vector NaN.
        ({"layer_norm_eps": float("nan")}, "epsilon of nan"),
        # Read as numbers: 1 head, and 12.
        ({"num_attention_heads": True}, "num_attention_heads is True"),
        ({"num_attention_heads": "12"}, "num_attention_heads is '12'"),
        ({"layer_norm_eps": "1e-12"}, "layer_norm_eps is '1e-12'"),
    ],
)
def test_a_config_that_does_not_fit_the_weights_is_refused_when_made(tmp_path, change, says):
    with pytest.raises(lm.InvalidInput, match=says):
        MiniLMEmbedder(_model_with_config(tmp_path, change))


def _tiny_model(
    tmp_path: Path,
    hidden: int,
    query_columns: int,
    *,
    nan: bool = False,
    words: int = 30522,
    places: int = 256,
) -> Path:
    """A one-layer model of ``hidden`` numbers a token, its query weight
    ``query_columns`` wide, ``words`` word embeddings and ``places`` positions (and a
    NaN in its word embeddings if ``nan``), with the installed tokenizer."""
    from safetensors.numpy import save_file

    from laser_memory.minilm import default_model_dir

    source = default_model_dir()
    assert source is not None
    rng = np.random.default_rng(0)

    def weights(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    tensors = {
        "embeddings.word_embeddings.weight": weights(words, hidden),
        "embeddings.position_embeddings.weight": weights(places, hidden),
        "embeddings.token_type_embeddings.weight": weights(2, hidden),
        "embeddings.LayerNorm.weight": weights(hidden),
        "embeddings.LayerNorm.bias": weights(hidden),
    }
    for name, rows, columns in (
        ("attention.self.query", query_columns, hidden),
        ("attention.self.key", hidden, hidden),
        ("attention.self.value", hidden, hidden),
        ("attention.output.dense", hidden, hidden),
        ("intermediate.dense", 2 * hidden, hidden),
        ("output.dense", hidden, 2 * hidden),
    ):
        tensors[f"encoder.layer.0.{name}.weight"] = weights(rows, columns)
        tensors[f"encoder.layer.0.{name}.bias"] = weights(rows)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
        tensors[f"encoder.layer.0.{norm}.weight"] = weights(hidden)
        tensors[f"encoder.layer.0.{norm}.bias"] = weights(hidden)
    if nan:
        tensors["embeddings.word_embeddings.weight"][0, 0] = np.nan
    tmp_path.mkdir()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "tokenizer.json").symlink_to(source / "tokenizer.json")
    config = {"num_attention_heads": 2, "num_hidden_layers": 1, "layer_norm_eps": 1e-12}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_weights_of_another_shape_are_refused_when_made(tmp_path: Path):
    """A model of 8 numbers a token made vectors that did not fit the 384 columns of
    every answer (a raw ValueError at the first embedding); one whose query weight is
    the wrong width failed inside its first layer the same way; a NaN among the weights
    made every vector NaN."""
    with pytest.raises(lm.InvalidInput, match="make vectors of 8 numbers"):
        MiniLMEmbedder(_tiny_model(tmp_path / "small", 8, 8))
    with pytest.raises(lm.InvalidInput, match="weights that do not fit together"):
        MiniLMEmbedder(_tiny_model(tmp_path / "odd", 8, 6))
    # Text with a word piece past the embeddings was a raw IndexError.
    with pytest.raises(lm.InvalidInput, match="4 word embeddings for the 30522 word pieces"):
        MiniLMEmbedder(_tiny_model(tmp_path / "few", 8, 8, words=4))
    with pytest.raises(lm.InvalidInput, match="8 positions, where texts are cut at 256"):
        MiniLMEmbedder(_tiny_model(tmp_path / "short", 8, 8, places=8))
    with pytest.raises(lm.InvalidInput, match="make vectors of NaN"):
        MiniLMEmbedder(_tiny_model(tmp_path / "nan", 384, 384, nan=True))
    assert MiniLMEmbedder(_tiny_model(tmp_path / "fine", 384, 384)).embed_many(["a"]).shape == (
        1, 384
    )  # fmt: skip


def test_one_text_a_batch_gives_the_same_vectors(minilm: MiniLMEmbedder):
    texts = REFERENCE["texts"][:3]
    alone = MiniLMEmbedder(batch_size=1).embed_many(texts)
    assert np.allclose(alone, minilm.embed_many(texts), atol=1e-5)


def test_without_the_tokenizer_installed_the_error_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # its import fails
    with pytest.raises(lm.InvalidInput, match="MiniLMEmbedder needs tokenizers: install"):
        MiniLMEmbedder()


def test_a_model_without_config_json_takes_all_minilm_l6_v2s_shape(tmp_path, minilm):
    """Its 12 heads, 6 layers and epsilon: the same vectors as with the config."""
    from laser_memory.minilm import default_model_dir

    source = default_model_dir()
    assert source is not None
    for name in ("tokenizer.json", "model.safetensors"):
        (tmp_path / name).symlink_to(source / name)
    texts = REFERENCE["texts"][:2]
    assert np.allclose(MiniLMEmbedder(tmp_path).embed_many(texts), minilm.embed_many(texts))
