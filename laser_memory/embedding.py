"""Embedders: text in, fixed-length vectors out, labelled ``<provider>/<model>``.

A handle given an embedder (``connect(..., embedder=)`` or
``laser.memory(ns, embedder=)``) embeds each body when it remembers it and puts
the float32 vector **and its label** in the record, so folders and views take
vectors from the log and a rebuild never calls a model. A semantic recall
compares only vectors with its own label: two models are never mixed.

>>> embedder = WordHashEmbedder()
>>> [len(v) for v in embedder.embed_many(["node-7 sits in eu-west"])]
[64]
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import EmbeddingFailed, InvalidInput, shown
from .records import MAX_DIMENSIONS

__all__ = [
    "Embedder",
    "WordHashEmbedder",
    "cosine_similarities",
    "embed_texts",
    "row_norms",
    "to_vector",
]


@runtime_checkable
class Embedder(Protocol):
    """What a handle needs of an embedding model. ``embed_many`` may be sync (it then
    runs on a worker thread, off the event loop) or return an awaitable."""

    label: str
    dimensions: int

    def embed_many(
        self, texts: Sequence[str]
    ) -> Sequence[Sequence[float]] | Awaitable[Sequence[Sequence[float]]]: ...


_WORD = re.compile(r"[a-z0-9]{4,}")


def _fnv1a_32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


class WordHashEmbedder:
    """A bag-of-words embedder for tests and examples: the same vectors in every
    process, no model, no network. Lower-case the text; for each match of
    ``[a-z0-9]{4,}`` add 1 to bucket FNV-1a-32(word) mod 64; then add 0.01 to bucket 0
    (so no vector is all zeros)."""

    label = "test/word-hash"
    dimensions = 64

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vector = [0.0] * self.dimensions
            for word in _WORD.findall(text.lower()):
                vector[_fnv1a_32(word.encode()) % self.dimensions] += 1.0
            vector[0] += 0.01
            out.append(vector)
        return out


def validate_embedder(embedder: object) -> Embedder:
    """Check an object can serve as an embedder; raises `InvalidInput`."""
    label = getattr(embedder, "label", None)
    dimensions = getattr(embedder, "dimensions", None)
    if not callable(getattr(embedder, "embed_many", None)):
        raise InvalidInput("an embedder has an embed_many(texts) method")
    if not isinstance(label, str) or "/" not in label or len(label.encode()) > 255:
        raise InvalidInput(
            f"an embedder's label is '<provider>/<model>' (at most 255 bytes), got {shown(label)}"
        )
    if (
        isinstance(dimensions, bool)
        or not isinstance(dimensions, int)
        or not 0 < dimensions <= MAX_DIMENSIONS
    ):
        raise InvalidInput(
            f"an embedder's dimensions are 1 to {MAX_DIMENSIONS}, got {shown(dimensions)}"
        )
    return embedder  # type: ignore[return-value]


async def embed_texts(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed texts in one call; a (len(texts), dimensions) float32 array. Whatever the
    model does wrong (raises, returns the wrong shape, NaN) is `EmbeddingFailed`."""
    try:
        if inspect.iscoroutinefunction(embedder.embed_many):
            result = await embedder.embed_many(list(texts))
        else:
            result = await asyncio.to_thread(embedder.embed_many, list(texts))
            if inspect.isawaitable(result):
                result = await result
        vectors = np.asarray(result, dtype=np.float32)
    except Exception as exc:
        raise EmbeddingFailed(
            f"the embedder {embedder.label} failed: {type(exc).__name__}: {exc}; nothing was "
            "written"
        ) from exc
    expected = (len(texts), embedder.dimensions)
    if vectors.shape != expected:
        raise EmbeddingFailed(
            f"the embedder {embedder.label} returned vectors of shape {vectors.shape}, not "
            f"{expected}; nothing was written"
        )
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingFailed(f"the embedder {embedder.label} returned a non-finite value")
    return vectors


def to_vector(raw: bytes) -> np.ndarray:
    """A record's little-endian float32 bytes as a vector."""
    return np.frombuffer(raw, dtype="<f4")


def row_norms(matrix: np.ndarray) -> np.ndarray:
    """Each row's Euclidean length, row by row: the same number for a row whether it is
    computed alone, in a block of rows or with the whole matrix.

    ``np.linalg.norm(matrix, axis=1)`` squares the whole matrix into a temporary
    first: at 100,000 rows of 384 its first call took 20x as long as this, most of it
    faulting in the temporary's pages.

    >>> row_norms(np.array([[3.0, 4.0], [0.0, 0.0]]))
    array([5., 0.])
    """
    return np.sqrt(np.einsum("ij,ij->i", matrix, matrix))


_row_norms = row_norms  # for `cosine_similarities`, whose argument has the same name


def cosine_similarities(
    query: np.ndarray, matrix: np.ndarray, row_norms: np.ndarray | None = None
) -> np.ndarray:
    """Cosine similarity of one query vector with each row (0 for a zero vector).
    ``row_norms``: the function `row_norms` of ``matrix``, for a caller that keeps it."""
    if row_norms is None:
        row_norms = _row_norms(matrix)
    norms = row_norms * float(np.linalg.norm(query))
    dots = matrix @ query
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
