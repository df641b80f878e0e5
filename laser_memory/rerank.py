"""Rerankers: a second, costlier pass over the best candidates of a text recall.

A `Reranker` scores (query, text) pairs, typically with a cross-encoder; a plain
function ``(query, texts) -> scores`` serves too, sync or async. Wrap a
handle with it (``memory.reranker(r)`` or ``RerankedMemory(memory, r)``): a recall
with text first asks the handle for the best ``depth`` items by its strategy, then
orders them by the reranker's scores (ties keep the first pass's order), adds a
``rerank`` signal and cuts to ``limit``. A recall without text, or by ``recent``,
is not reranked. Every other method (writes, fetch, history...) is the handle's own.

>>> class ByLength:                                   # a reranker needs no model
...     label = "example/shortest-first"
...     def rerank(self, query, texts):
...         return [-len(t) for t in texts]
>>> reranked = memory.reranker(ByLength(), depth=20)   # doctest: +SKIP
>>> await reranked.recall(text="keys")                 # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload, runtime_checkable

import msgspec
import numpy as np

from .embedding import real_numbers
from .errors import InvalidInput, RerankFailed, shown
from .items import MemoryItem, Signal
from .recall import (
    MAX_LIMIT,
    query_text,
    to_context_block,
    validate_block,
    validate_limit,
)

if TYPE_CHECKING:
    from .memory import MemoryHandle

__all__ = ["RerankFunction", "RerankedMemory", "Reranker"]


@runtime_checkable
class Reranker(Protocol):
    """Scores each text's relevance to the query, higher is better. ``rerank`` may be
    sync (it then runs on a worker thread) or return an awaitable. A ``label``
    attribute, if it has one, names it in errors (else its class name does)."""

    def rerank(
        self, query: str, texts: Sequence[str]
    ) -> Sequence[float] | Awaitable[Sequence[float]]:
        """One finite score for each text, in order; higher ranks first."""
        ...


#: A plain function that reranks: ``(query, texts) -> scores``, sync or async.
RerankFunction = Callable[[str, Sequence[str]], Sequence[float] | Awaitable[Sequence[float]]]


class RerankedMemory:
    """A memory handle whose text recalls are reranked; everything else passes through.

    ``depth`` is how many first-pass items the reranker sees (at least ``limit``).

    >>> def by_length(query, texts):                                    # doctest: +SKIP
    ...     return [-len(t) for t in texts]   # shorter first
    >>> await memory.reranker(by_length, depth=20).recall(text="login")  # doctest: +SKIP
    """

    def __init__(
        self,
        inner: MemoryHandle | RerankedMemory,
        reranker: Reranker | RerankFunction,
        depth: int = 50,
    ):
        # Checked now: everything else passes through to it, and a value of another
        # kind (a namespace's name, the connection) was a raw AttributeError at the
        # first recall.
        if not is_memory_handle(inner):
            raise InvalidInput(
                f"RerankedMemory wraps a memory handle (laser.memory(...)), got {shown(inner)}"
            )
        if not callable(getattr(reranker, "rerank", None)):
            if not callable(reranker):
                raise InvalidInput(
                    "a reranker is a function (query, texts) -> scores, or has a "
                    "rerank(query, texts) method"
                )
            reranker = _CallableReranker(reranker)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_LIMIT:
            raise InvalidInput(f"depth is a whole number from 1 to {MAX_LIMIT}, got {shown(depth)}")
        self.inner = inner
        self.rerank_with = reranker
        self.depth = depth

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        label = getattr(self.rerank_with, "label", type(self.rerank_with).__name__)
        return f"RerankedMemory({shown(self.inner)}, {label}, depth={self.depth})"

    @overload
    async def recall(
        self,
        *,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        block: Literal[False] = False,
        token_budget: int | None = None,
        **query: Any,
    ) -> list[MemoryItem]: ...

    @overload
    async def recall(
        self,
        *,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        block: Literal[True],
        token_budget: int | None = None,
        **query: Any,
    ) -> str: ...

    async def recall(
        self,
        *,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
        block: bool = False,
        token_budget: int | None = None,
        **query: Any,
    ) -> list[MemoryItem] | str:
        """The inner handle's `recall`, with the best ``depth`` items reranked when there
        is text. Takes the same arguments."""
        validate_limit(limit)
        text = query_text(text)
        # Checked here too: a reranked recall without a block never formats one, so a
        # bad budget passed there and failed only the same call without text.
        validate_block(block, token_budget)
        if not text or not text.strip() or strategy == "recent" or limit == 0:
            return await self.inner.recall(
                text=text, strategy=strategy, limit=limit, block=block,
                token_budget=token_budget, **query,
            )  # fmt: skip
        first = await self.inner.recall(
            text=text, strategy=strategy, limit=max(limit, self.depth), **query
        )
        head, tail = first[: self.depth], first[self.depth :]
        scores = await _scores(self.rerank_with, text, [item.text for item in head])
        order = np.argsort(-scores, kind="stable")
        reranked = [
            msgspec.structs.replace(
                head[i],
                score=float(scores[i]),
                signals=(Signal("rerank", position, float(scores[i])), *head[i].signals),
            )
            for position, i in enumerate(order)
        ]
        items = (reranked + tail)[:limit]
        return to_context_block(items, token_budget) if block else items


def is_memory_handle(value: object) -> bool:
    """Whether ``value`` serves as a memory handle: a `MemoryHandle`, or a
    `RerankedMemory` (which passes everything but text recalls through to one)."""
    from .memory import MemoryHandle  # here: the handle's module imports this one

    return isinstance(value, MemoryHandle | RerankedMemory)


class _CallableReranker:
    def __init__(self, function: Any) -> None:
        self.label = getattr(function, "__name__", "function")
        self.rerank = function


async def _scores(reranker: Reranker, query: str, texts: list[str]) -> np.ndarray:
    label = getattr(reranker, "label", type(reranker).__name__)
    try:
        if inspect.iscoroutinefunction(reranker.rerank):
            result = await reranker.rerank(query, texts)
        else:
            result = await asyncio.to_thread(reranker.rerank, query, texts)
            if inspect.isawaitable(result):
                result = await result
        scores = real_numbers(result, np.float64)  # not strings or True: no scores
    except Exception as exc:
        raise RerankFailed(f"the reranker {label} failed: {type(exc).__name__}: {exc}") from exc
    if scores.shape != (len(texts),):
        raise RerankFailed(
            f"the reranker {label} returned {scores.shape} scores for {len(texts)} texts "
            "(one finite number per text is needed)"
        )
    if not np.all(np.isfinite(scores)):
        raise RerankFailed(
            f"the reranker {label} returned scores that are not finite (NaN or infinite) "
            f"for {int(np.sum(~np.isfinite(scores)))} of {len(texts)} texts (one finite "
            "number per text is needed)"
        )
    return scores
