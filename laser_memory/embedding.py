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
import contextlib
import inspect
import os
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import EmbeddingFailed, InvalidInput, shown
from .records import MAX_DIMENSIONS

__all__ = [
    "Embedder",
    "WordHashEmbedder",
    "beyond_float32",
    "cosine_similarities",
    "cosines_in_range",
    "embed_texts",
    "finish_cosines",
    "query_length",
    "quiet_overflow",
    "row_dots",
    "row_norms",
    "start_row_dots",
    "to_vector",
]


@runtime_checkable
class Embedder(Protocol):
    """What a handle needs of an embedding model. ``embed_many`` may be sync (it then
    runs on a worker thread, off the event loop) or return an awaitable.

    >>> class Lengths:
    ...     label = "example/lengths"    # '<provider>/<model>', kept with each vector
    ...     dimensions = 2
    ...     def embed_many(self, texts):
    ...         return [[len(t), 1.0] for t in texts]
    >>> validate_embedder(Lengths()).label
    'example/lengths'
    """

    label: str
    dimensions: int

    def embed_many(
        self, texts: Sequence[str]
    ) -> Sequence[Sequence[float]] | Awaitable[Sequence[Sequence[float]]]:
        """One vector of ``dimensions`` finite numbers for each text, in order."""
        ...


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
        for text in check_texts(texts):
            vector = [0.0] * self.dimensions
            for word in _WORD.findall(text.lower()):
                vector[_fnv1a_32(word.encode()) % self.dimensions] += 1.0
            vector[0] += 0.01
            out.append(vector)
        return out


def check_texts(texts: object) -> Sequence[str]:
    """The texts an embedder's ``embed_many`` is given, if they are a list of str; else
    `InvalidInput` (a str was embedded a character at a time, and anything else met the
    model as a raw error). A str subclass is read as the text it holds."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise InvalidInput(f"texts to embed are a list of str, got {shown(texts)}")
    if all(type(text) is str for text in texts):
        return texts
    for text in texts:
        if not isinstance(text, str):
            raise InvalidInput(f"texts to embed are a list of str; one is {shown(text)}")
    return [str.__str__(text) for text in texts]


def is_label(label: object) -> bool:
    """Whether ``label`` can name an embedder's vectors in a record as every fold takes
    it: a str holding '/', of at most 255 bytes of UTF-8, without NUL. (A label with a
    NUL was written and then set aside by every fold; one that is no Unicode text, a
    lone surrogate, escaped as a raw `UnicodeEncodeError`.)"""
    if type(label) is not str:  # checked first: the fold asks this of every vector's label
        if not isinstance(label, str):
            return False
        label = str.__str__(label)  # a subclass: the text it holds, not its own methods
    if "/" not in label or "\x00" in label:
        return False
    try:
        return len(label.encode()) <= 255
    except UnicodeEncodeError:
        return False


def validate_embedder(embedder: object) -> Embedder:
    """Check an object can serve as an embedder; raises `InvalidInput`."""
    label = getattr(embedder, "label", None)
    dimensions = getattr(embedder, "dimensions", None)
    if not callable(getattr(embedder, "embed_many", None)):
        raise InvalidInput("an embedder has an embed_many(texts) method")
    if not is_label(label):
        raise InvalidInput(
            "an embedder's label is '<provider>/<model>' (at most 255 bytes of Unicode text, "
            f"no NUL), got {shown(label)}"
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


def real_numbers(value: object, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """``value`` (a vector, or rows of them) as an array of ``dtype``, refusing with
    `TypeError` what is not real numbers: numpy alone reads ``"1"`` as 1.0 and ``True``
    as 1.0, and drops a complex number's imaginary part with only a warning. A number
    beyond the type's range becomes ``inf``, for the caller to refuse as not finite.

    >>> real_numbers([1, 2.5]).tolist()
    [1.0, 2.5]
    """
    if isinstance(value, str | bytes | bytearray | memoryview):
        raise TypeError(f"got {type(value).__name__}, which is text, not numbers")
    if isinstance(value, list | tuple) and _holds_a_bool(value):
        # Among other numbers numpy reads True as 1.0, leaving no trace in the array.
        raise TypeError("True and False are not numbers")
    with np.errstate(over="ignore"):
        given = np.asarray(value)
        kind = given.dtype.kind
        if kind == "O":
            # Python ints past int64, or numbers numpy could not give one type.
            for number in given.flat:
                if isinstance(number, bool) or not isinstance(
                    number, int | float | np.integer | np.floating
                ):
                    raise TypeError(f"{shown(number)} is not a number")
        elif kind not in "iuf":
            raise TypeError(f"the values are {_KIND_NAMES.get(kind, given.dtype)}, not numbers")
        return given.astype(dtype, copy=False)


_BOOLS = frozenset((bool, np.bool_))


def _holds_a_bool(values: list | tuple) -> bool:
    """Whether a list (or a list of rows) holds a bool, Python's or numpy's; each type
    looked up in C."""
    if not _BOOLS.isdisjoint(map(type, values)):
        return True
    return any(
        not _BOOLS.isdisjoint(map(type, row)) for row in values if isinstance(row, list | tuple)
    )


_KIND_NAMES = {
    "b": "True/False",
    "c": "complex numbers",
    "U": "strings",
    "S": "bytes",
    "V": "raw bytes",
    "M": "datetimes",
    "m": "time spans",
}


async def embed_texts(
    embedder: Embedder, texts: Sequence[str], *, then: str = "nothing was written"
) -> np.ndarray:
    """Embed texts in one call; a (len(texts), dimensions) float32 array. Whatever the
    model does wrong (raises, returns the wrong shape, NaN) is `EmbeddingFailed`, its
    message ending with ``then``: what the caller did not do for it (a read says so,
    not that nothing was written)."""
    try:
        if inspect.iscoroutinefunction(embedder.embed_many):
            result = await embedder.embed_many(list(texts))
        else:
            result = await asyncio.to_thread(embedder.embed_many, list(texts))
            if inspect.isawaitable(result):
                result = await result
        vectors = real_numbers(result)
    except Exception as exc:
        raise EmbeddingFailed(
            f"the embedder {embedder.label} failed: {type(exc).__name__}: {exc}; {then}"
        ) from exc
    expected = (len(texts), embedder.dimensions)
    if vectors.shape != expected:
        raise EmbeddingFailed(
            f"the embedder {embedder.label} returned vectors of shape {vectors.shape}, not "
            f"{expected}; {then}"
        )
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingFailed(f"the embedder {embedder.label} returned a non-finite value; {then}")
    return vectors


def to_vector(raw: bytes) -> np.ndarray:
    """A record's little-endian float32 bytes as a vector."""
    return np.frombuffer(raw, dtype="<f4")


def row_norms(matrix: np.ndarray) -> np.ndarray:
    """Each row's Euclidean length in float64, row by row: the same number for a row
    whether it is computed alone, in a block of rows or with the whole matrix, and
    exact for every float32 row (squared in float32, a row past about 1.8e19 made
    ``inf`` and one under about 1e-19 made 0).

    ``np.linalg.norm(matrix, axis=1)`` squares the whole matrix into a temporary
    first: at 100,000 rows of 384 its first call took 20x as long as this, most of it
    faulting in the temporary's pages.

    >>> row_norms(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32))
    array([5., 0.])
    """
    return np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))


_row_norms = row_norms  # for `cosine_similarities`, whose argument has the same name

#: A row whose length times the query's lies outside these is scored in float64
#: (`finish_cosines`): its float32 products with the query could overflow float32
#: (about 3.4e38) or fall below its normal numbers and lose their digits.
_LONGEST = 2.0**100
_SHORTEST = 2.0**-60


def beyond_float32(lengths: np.ndarray) -> np.ndarray:
    """The positions of ``lengths`` (each row's norm times its partner's: the query's,
    or 1 for a unit centroid) whose float32 products could overflow or lose their
    digits: those rows are to be scaled to length 1 and multiplied in float64."""
    return np.flatnonzero((lengths > _LONGEST) | ((lengths < _SHORTEST) & (lengths > 0)))


def cosines_in_range(low: float, high: float) -> bool:
    """Whether rows whose norms times the query's length run from ``low`` to ``high``
    all multiply with the query in float32 without overflow or lost digits."""
    return _SHORTEST <= low and high <= _LONGEST


def query_length(query: np.ndarray) -> float:
    """A float32 query's length, worked out in float64 (0.0 for a zero vector)."""
    exact = np.asarray(query, dtype=np.float64)
    return float(np.sqrt(np.einsum("i,i->", exact, exact)))


def finish_cosines(
    dots: np.ndarray,
    norms: np.ndarray,
    query: np.ndarray,
    length: float,
    rows_at: Callable[[np.ndarray], np.ndarray],
    *,
    within: bool = False,
) -> np.ndarray:
    """Cosine similarities (float64; 0 for a zero row or query) from each row's dot
    product with the float32 ``query``, its `row_norms` and the query's `query_length`.
    A row whose products with the query are too large or too small for float32 is
    scored again from its values, fetched by ``rows_at(positions)``, in float64 with
    both scaled to length 1: so every finite row scores as its direction says, never
    ``nan`` or a spurious 0. The products themselves are numpy's, as they were, so
    a row scores the same in every read that multiplies it the same way. ``within``:
    the caller knows every row's norm times ``length`` is in range (`cosines_in_range`),
    so none is looked for.
    """
    divisor = norms * length
    similar = np.divide(dots, divisor, out=np.zeros(len(dots)), where=divisor > 0)
    if within:
        return similar
    odd = beyond_float32(divisor)
    if len(odd):
        # One row at a time (einsum, as `row_norms`), so a row scores the same however
        # many others are scored with it.
        unit = np.asarray(query, dtype=np.float64) / length
        scaled = rows_at(odd).astype(np.float64) / norms[odd, None]
        similar[odd] = np.einsum("ij,j->i", scaled, unit)
    return similar


def cosine_similarities(
    query: np.ndarray, matrix: np.ndarray, row_norms: np.ndarray | None = None
) -> np.ndarray:
    """Cosine similarity (float64) of one query vector with each row (0 for a zero
    vector). ``row_norms``: the function `row_norms` of ``matrix``, for a caller that
    keeps it."""
    if row_norms is None:
        row_norms = _row_norms(matrix)
    dots = row_dots(matrix, query)
    return finish_cosines(dots, row_norms, query, query_length(query), matrix.__getitem__)


def quiet_overflow() -> contextlib.AbstractContextManager:
    """Around a float32 matrix's products with a query: a row too long for them
    overflows, which `finish_cosines` scores again in float64, so numpy's warning
    says nothing a caller should see."""
    return np.errstate(over="ignore", invalid="ignore")


#: Rows from which `row_dots` shares the rows among threads (below, starting a thread
#: cost more than it saved here), and how many threads.
_SHARED_FROM_ROWS = 16_384
_DOT_THREADS = max(1, min(4, os.cpu_count() or 1))


#: numpy 2's `np.vecdot` takes each row's product with BLAS's dot of two vectors (sdot,
#: ddot), one row at a time: as exact a row's own sum as einsum's and 1.6x faster
#: (7.6 ms at 100k rows of 384 where einsum took 12.6, one thread).
_vecdot = getattr(np, "vecdot", None)
_BLAS_DOT_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _dot_rows_einsum(rows: np.ndarray, query: np.ndarray, out: np.ndarray) -> None:
    np.einsum("ij,j->i", rows, query, out=out)


def row_dots(
    matrix: np.ndarray, query: np.ndarray, ranges: Sequence[tuple[int, int]] | None = None
) -> np.ndarray:
    """Each row's dot product with ``query``, row by row: the same number for a row
    whatever matrix holds it, at whatever row. ``ranges``: (start, stop) row ranges
    of ``matrix``, whose rows' products come out one after the other (default: all).

    numpy's matrix-vector product (BLAS) rounds a row's sum by where the row falls in
    the matrix, and the fold's and the view's search indexes hold an item at different
    rows: the same item scored differently in the last bit, folded and managed (one
    query in 30 over 1,000 random 384-d vectors). `np.vecdot` (numpy 2; `np.einsum`
    before it) sums each row alone, and lets go of the GIL: shared among up to four
    threads (the caller's among them) for many rows, it took 5.0 ms at 100k rows of 384
    where the matrix-vector product took 4.4 (two CPUs; einsum 6.8); alone, 0.55 ms at
    10k where it took 0.30. Overflow is left to `finish_cosines`, as with
    `quiet_overflow`. (`start_row_dots` starts them and lets the caller work meanwhile.)

    >>> row_dots(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0]))
    array([3., 7.])
    """
    return start_row_dots(matrix, query, ranges)()


def start_row_dots(
    matrix: np.ndarray, query: np.ndarray, ranges: Sequence[tuple[int, int]] | None = None
) -> Callable[[], np.ndarray]:
    """`row_dots`, begun by helper threads (when the rows are many enough to share);
    call what this returns for the products. Calling it lends the caller's thread to
    the rows no helper has taken and waits for the helpers; until then the caller may
    do other work, such as the keyword half of a hybrid search. Call it once, whatever
    happens meanwhile: it is what joins the helpers.

    The rows go in chunks to whichever thread asks next, so a caller busy meanwhile
    (or a helper started late) leaves the others more, not a share that waits for it.

    >>> finish = start_row_dots(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0]))
    >>> finish()
    array([3., 7.])
    """
    if ranges is None:
        ranges = [(0, len(matrix))]
    total = sum(stop - start for start, stop in ranges)
    out = np.empty(total, dtype=np.result_type(matrix.dtype, query.dtype))
    dot = _dot_rows_einsum
    if _vecdot is not None and matrix.dtype == query.dtype and matrix.dtype in _BLAS_DOT_TYPES:
        dot = _vecdot
    threads = max(1, min(_DOT_THREADS, total // (_SHARED_FROM_ROWS // 2)))
    # The chunks (first row, last row + 1, where they go in ``out``), a range cut where
    # a chunk ends: about eight a thread, of at least 2,048 rows (a call of a few µs
    # for each).
    size = max(2048, -(-total // (threads * 8)))
    chunks: list[tuple[int, int, int]] = []
    at = 0
    for start, stop in ranges:
        while start < stop:
            take = min(stop - start, size - at % size)
            chunks.append((start, start + take, at))
            start, at = start + take, at + take
    taking = iter(chunks)
    lock = threading.Lock()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            with quiet_overflow():  # numpy's error state is each thread's own
                while True:
                    with lock:  # one chunk to one thread, with or without a GIL
                        chunk = next(taking, None)
                    if chunk is None:
                        return
                    first, end, to = chunk
                    dot(matrix[first:end], query, out=out[to : to + end - first])
        except BaseException as exc:  # raised by the caller, not lost in a thread's hook
            failed.append(exc)

    started = []
    for _ in range(threads - 1):
        helper = threading.Thread(target=work, daemon=True)
        try:
            helper.start()
        except RuntimeError:  # no thread to be had (the process is at its limit)
            break  # the caller takes what the helpers would have
        started.append(helper)

    def finish() -> np.ndarray:
        work()
        for helper in started:
            helper.join()
        if failed:
            raise failed[0]
        return out

    return finish
