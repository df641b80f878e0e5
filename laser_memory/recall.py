"""Ranking recalled items: strategies, reciprocal-rank fusion, and context blocks.

Folded and managed recall rank the same candidates with the same code: `rank` for a
list of visible items, `laser_memory.search_index.SearchIndex` (which ranks with
`laser_memory.text_ranking` too) when a read keeps an index. The order, scores and
signals of a recall are the same whichever way it was served.

Strategies on log memory:

- ``recent``: newest first by broker append time, ties by (partition, offset),
  also newest first. Text and feedback are ignored.
- ``keyword`` with text: Okapi BM25 over the candidate set (terms from
  `laser_memory.terms`), only items holding a query term; plus feedback.
- ``semantic`` with a query vector (the handle's embedder embeds the text): the
  items whose vector has the query's embedder label and length, by cosine
  similarity (ties newest first), at least ``min_similarity`` when given. Without an
  embedder it is ``keyword``.
- ``hybrid``, and ``auto`` with text: BM25 and cosine (negatives as 0), each
  divided by its best, averaged, plus a share of the neighbouring items' scores in
  their conversation, plus feedback. Without vectors, BM25 and neighbours.
- ``auto`` without text (the default): feedback first (higher weight first), then
  newest; so are ``keyword`` and ``hybrid`` without text.

Every strategy ranks only the items it is given: the caller's candidate set
(tenant, namespace and scope filters applied, forgotten items gone), never a
global top-k filtered afterwards. ``exclude`` ids are never returned.

Every item carries the signal of the strategy that surfaced it (and, in hybrid
recall, its ``keyword`` and ``semantic`` ranks and scores); an item with feedback
also carries an ``auto`` signal with its rank among the returned items that have
feedback and its weight as the score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec
import numpy as np

from .embedding import Embedder, cosine_similarities, embed_texts, to_vector
from .errors import InvalidInput, shown
from .items import MemoryItem, Signal
from .scoring import TermStatistics, bm25
from .terms import term_counts, terms
from .text_ranking import Columns, Ranked, rank_by_similarity, rank_by_text

__all__ = [
    "MAX_LIMIT",
    "RRF_K",
    "STRATEGIES",
    "dimensions_mismatch",
    "estimate_tokens",
    "fuse_reciprocal_rank",
    "query_text",
    "query_vector",
    "rank",
    "search_mode",
    "to_context_block",
    "validate_block",
    "validate_limit",
    "validate_min_similarity",
    "validate_strategy",
    "validate_token_budget",
    "with_ranking",
]

STRATEGIES = ("auto", "recent", "keyword", "semantic", "hybrid")
#: The most items one recall returns; page with filters for more.
MAX_LIMIT = 1000
RRF_K = 60


def validate_strategy(strategy: str) -> str:
    if isinstance(strategy, str) and type(strategy) is not str:
        strategy = str.__str__(strategy)  # the text a subclass holds
    if type(strategy) is not str or strategy not in STRATEGIES:
        raise InvalidInput(
            f"unknown recall strategy {shown(strategy)}; use one of: {', '.join(STRATEGIES)}"
        )
    return strategy


def validate_limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"limit must be a whole number of items from 0 to {MAX_LIMIT}, got {shown(limit)}"
        )
    return limit


def _newest_key(item: MemoryItem) -> tuple[int, int, int]:
    return (item.append_time_ms, item.source.partition, item.source.offset)


def rank(
    items: Iterable[MemoryItem],
    *,
    strategy: str = "auto",
    text: str | None = None,
    limit: int = 50,
    query_vector: np.ndarray | None = None,
    embedder: str | None = None,
    min_similarity: float | None = None,
    exclude: frozenset[bytes] = frozenset(),
    stats: TermStatistics | None = None,
) -> list[MemoryItem]:
    """Order visible items for one recall and attach their score and signals.

    ``query_vector`` and ``embedder`` (its label) let ``semantic``, ``hybrid`` and
    ``auto`` rank by meaning. Keyword statistics (document frequencies, average
    length) are the candidates' own: BM25 over the candidate set."""
    strategy = validate_strategy(strategy)
    validate_limit(limit)
    text = query_text(text)
    candidates = list(items)
    query = terms(text) if text else []
    if text and text.strip() and not (strategy == "semantic" and query_vector is not None):
        if strategy != "recent":
            vectors = query_vector if strategy in ("auto", "hybrid") else None
            return _by_text(
                candidates,
                query,
                strategy,
                vectors,
                embedder,
                min_similarity,
                limit,
                exclude,
                stats,
            )
    candidates = [item for item in candidates if item.id.bytes not in exclude]
    if strategy == "semantic" and query_vector is not None:
        return _by_similarity(candidates, query_vector, embedder, min_similarity, limit)
    if strategy == "recent":
        candidates.sort(key=_newest_key, reverse=True)
        chosen = candidates[:limit]
        return [
            msgspec.structs.replace(
                item,
                score=item.append_time_ms / 1000,
                signals=(Signal("recent", i, item.append_time_ms / 1000),),
            )
            for i, item in enumerate(chosen)
        ]
    return _by_feedback(candidates, strategy, limit)


def query_text(text: object) -> str | None:
    """A recall's text as the plain str it holds (a subclass's own methods are never
    asked); anything but a str or None, or text that is no valid Unicode (a lone
    surrogate), is `InvalidInput`."""
    if text is None:
        return text
    if type(text) is not str:
        if not isinstance(text, str):
            raise InvalidInput(f"text must be a string, got {type(text).__name__}")
        text = str.__str__(text)
    if not text.isascii():
        try:
            str.encode(text, "utf-8")
        except UnicodeEncodeError as exc:
            # An embedder's tokenizer fails on it (blamed on the embedder), and no body,
            # being valid Unicode, could match it.
            raise InvalidInput(f"the text is not valid Unicode text: {exc}") from None
    return text


def validate_min_similarity(min_similarity: object, strategy: str = "auto") -> None:
    """Refuse a ``min_similarity`` outside -1..1, and one given to a strategy that never
    compares meanings (``recent``, ``keyword``), where it would filter nothing."""
    if min_similarity is not None and (
        isinstance(min_similarity, bool)
        or not isinstance(min_similarity, int | float)
        or not -1.0 <= min_similarity <= 1.0
    ):
        raise InvalidInput(f"min_similarity is from -1 to 1, got {shown(min_similarity)}")
    if min_similarity is not None and strategy in ("recent", "keyword"):
        raise InvalidInput(
            f"min_similarity filters by meaning, which strategy {shown(strategy)} never "
            "compares: use strategy 'semantic', 'hybrid' or 'auto' with an embedder"
        )


async def query_vector(
    embedder: Embedder | None, strategy: str, text: str | None
) -> np.ndarray | None:
    """The vector a recall ranks by meaning with: ``embedder``'s of ``text``, for a
    ``semantic``, ``hybrid`` or ``auto`` recall with text; None otherwise (and with no
    embedder). Its failure is `EmbeddingFailed`, saying nothing was recalled."""
    if strategy not in ("semantic", "hybrid", "auto") or not text or not text.strip():
        return None
    if embedder is None:
        return None
    vectors = await embed_texts(embedder, [text], then="nothing was recalled")
    return vectors[0]


def search_mode(strategy: str, text: str | None, query_vector: np.ndarray | None) -> str | None:
    """How a recall ranks by text: ``keyword``, ``hybrid`` or ``semantic``; None when
    it does not (``recent``, or no text)."""
    if strategy == "recent" or not text or not text.strip():
        return None
    if strategy == "semantic":
        return "semantic" if query_vector is not None else "keyword"
    return "keyword" if strategy == "keyword" else "hybrid"


def with_ranking(item: MemoryItem, ranked: Ranked) -> MemoryItem:
    """An item with the score and signals an index ranked it with."""
    return msgspec.structs.replace(item, score=ranked.score, signals=ranked.signals)


def _by_feedback(candidates: list[MemoryItem], strategy: str, limit: int) -> list[MemoryItem]:
    """Feedback first (higher weight first), then newest."""
    candidates.sort(key=_newest_key, reverse=True)
    candidates.sort(key=lambda item: item.weight, reverse=True)
    chosen = candidates[:limit]
    weighted = sorted(
        (item for item in chosen if item.weight != 0),
        key=lambda item: item.weight,
        reverse=True,
    )
    feedback_rank = {id(item): i for i, item in enumerate(weighted)}
    out = []
    for i, item in enumerate(chosen):
        signals = [Signal(strategy, i, item.weight)]
        if id(item) in feedback_rank and strategy != "auto":
            signals.append(Signal("auto", feedback_rank[id(item)], item.weight))
        out.append(msgspec.structs.replace(item, score=item.weight, signals=tuple(signals)))
    return out


def _comparable(item: MemoryItem, embedder: str | None, dimensions: int) -> bool:
    return (
        item.embedder == embedder
        and item.embedding is not None
        and len(item.embedding) == 4 * dimensions
    )


def _by_text(
    candidates: list[MemoryItem],
    query: list[str],
    strategy: str,
    query_vector: np.ndarray | None,
    embedder: str | None,
    min_similarity: float | None,
    limit: int,
    exclude: frozenset[bytes],
    stats: TermStatistics | None,
) -> list[MemoryItem]:
    """Keyword (BM25) scores, fused with cosine similarity when there is a query vector
    and the candidates have vectors of its embedder, spread to neighbouring items in
    hybrid recall, then nudged by feedback (see `laser_memory.text_ranking`)."""
    documents = [term_counts(item.body) for item in candidates]
    if stats is None:
        stats = TermStatistics.of(documents, query)
    columns = columns_of(candidates, query_vector, embedder, exclude)
    columns.keyword = bm25(query, documents, stats)
    if columns.semantic is not None and not columns.has_vector.any():
        columns.semantic = columns.has_vector = None
    hybrid = strategy not in ("keyword", "semantic")
    ranked = rank_by_text(columns, hybrid=hybrid, min_similarity=min_similarity, limit=limit)
    return [with_ranking(candidates[r.row], r) for r in ranked]


def columns_of(
    items: Sequence[MemoryItem],
    query_vector: np.ndarray | None,
    embedder: str | None,
    exclude: frozenset[bytes],
) -> Columns:
    """The candidates as `Columns` (keyword scores left at zero for the caller)."""
    n = len(items)
    time = np.fromiter((item.append_time_ms for item in items), dtype=np.int64, count=n)
    partition = np.fromiter((item.source.partition for item in items), dtype=np.int64, count=n)
    offset = np.fromiter((item.source.offset for item in items), dtype=np.int64, count=n)
    before = np.full(n, -1, dtype=np.int64)
    after = np.full(n, -1, dtype=np.int64)
    groups: dict[str, list[int]] = {}
    for i in sorted(range(n), key=lambda i: (time[i], partition[i], offset[i])):
        groups.setdefault(items[i].scope.conversation or "", []).append(i)
    for group in groups.values():
        index = np.asarray(group, dtype=np.int64)
        before[index[1:]] = index[:-1]
        after[index[:-1]] = index[1:]
    semantic = has_vector = None
    if query_vector is not None:
        dimensions = len(query_vector)
        for item in items:
            if (
                item.embedder == embedder
                and item.embedding
                and len(item.embedding) != 4 * dimensions
            ):
                raise dimensions_mismatch(embedder, len(item.embedding) // 4, dimensions)
        has_vector = np.fromiter(
            (_comparable(item, embedder, dimensions) for item in items), dtype=bool, count=n
        )
        semantic = np.zeros(n, dtype=np.float64)
        rows = np.flatnonzero(has_vector)
        if len(rows):
            matrix = np.stack([to_vector(items[i].embedding) for i in rows])
            similar = cosine_similarities(query_vector.astype(np.float32), matrix)
            # Items without a comparable vector score as the least similar one.
            semantic[:] = float(similar.min())
            semantic[rows] = similar
    return Columns(
        keyword=np.zeros(n, dtype=np.float64),
        semantic=semantic,
        has_vector=has_vector,
        weight=np.fromiter((item.weight for item in items), dtype=np.float64, count=n),
        time=time,
        partition=partition,
        offset=offset,
        before=before,
        after=after,
        alive=np.ones(n, dtype=bool),
        allowed=np.fromiter((item.id.bytes not in exclude for item in items), dtype=bool, count=n),
    )


def dimensions_mismatch(label: str | None, stored: int, asked: int) -> InvalidInput:
    """The error for a recall whose embedder makes vectors of another length than the
    namespace's vectors under the same label."""
    return InvalidInput(
        f"the vectors of {label} here have {stored} dimensions, but this embedder makes "
        f"{asked}: another model under the same label? Give it a label of its own and "
        "'laser-memory reembed' the namespace with it"
    )


def _by_similarity(
    items: list[MemoryItem],
    query: np.ndarray,
    embedder: str | None,
    min_similarity: float | None,
    limit: int,
) -> list[MemoryItem]:
    columns = columns_of(items, query, embedder, frozenset())
    ranked = rank_by_similarity(columns, min_similarity=min_similarity, limit=limit)
    return [with_ranking(items[r.row], r) for r in ranked]


def fuse_reciprocal_rank(
    signal_lists: Sequence[Sequence[MemoryItem]], limit: int = 50
) -> list[MemoryItem]:
    """Merge ranked lists: each item scores the sum of 1/(60 + rank) over the lists that
    contain it, so agreement between lists outranks one list's top hit.

    Items are matched by id; the fused item keeps the first list's copy, carries the
    signals of every list it was in, and has the fused score. Ties keep the order of
    first appearance.

    >>> fused = fuse_reciprocal_rank([by_keyword, by_vector], limit=10)   # doctest: +SKIP
    """
    validate_limit(limit)
    scores: dict[bytes, float] = {}
    first: dict[bytes, MemoryItem] = {}
    signals: dict[bytes, list[Signal]] = {}
    for ranked in _sequence(signal_lists, "the ranked lists to fuse"):
        in_this_list: set[bytes] = set()
        for position, item in enumerate(_items(ranked, "each ranked list")):
            key = item.id.bytes
            if key in in_this_list:
                continue
            in_this_list.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + position)
            first.setdefault(key, item)
            signals.setdefault(key, []).extend(item.signals)
    order = sorted(scores, key=lambda key: scores[key], reverse=True)
    return [
        msgspec.structs.replace(first[key], score=scores[key], signals=tuple(signals[key]))
        for key in order[:limit]
    ]


def _sequence(values: object, what: str) -> Sequence:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidInput(f"{what} must be a list, got {shown(values)}")
    return values


def _items(values: object, what: str) -> Sequence[MemoryItem]:
    """``values`` if it is a list of recalled items; else `InvalidInput` (a raw
    AttributeError met the first thing that was no item)."""
    for value in _sequence(values, what):
        if not isinstance(value, MemoryItem):
            raise InvalidInput(
                f"{what} must hold MemoryItems (as recall returns them), got {shown(value)}"
            )
    return values  # type: ignore[return-value]


def estimate_tokens(text: str) -> int:
    """Tokens as laser-memory estimates them: UTF-8 bytes divided by four, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def validate_token_budget(token_budget: object) -> None:
    """Refuse a token budget that is neither None nor a whole number from 0."""
    if token_budget is not None and (
        not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget < 0
    ):
        raise InvalidInput(
            f"token_budget must be a whole number, 0 or more, got {shown(token_budget)}"
        )


def validate_block(block: object, token_budget: object) -> None:
    """Refuse a ``block`` that is no bool, a bad token budget, and a budget given
    without ``block=True``: only a block is budgeted, so it would cut nothing (a list of
    items is cut by its limit)."""
    if not isinstance(block, bool):
        raise InvalidInput(f"block is True or False, got a {type(block).__name__}")
    validate_token_budget(token_budget)
    if token_budget is not None and not block:
        raise InvalidInput(
            "token_budget budgets a context block, so it is given with block=True (or to "
            "context()); a recall's list of items is cut by its limit"
        )


def to_context_block(items: Sequence[MemoryItem], token_budget: int | None = None) -> str:
    """Format items as one prompt block, one ``- [kind] body`` entry each: a body's
    further lines are indented by two spaces, so no body starts a line of the block (a
    remembered message holding ``- [procedure] ...`` or the omission marker cannot pass
    for an entry of its own).

    When the budget runs out the remaining items are dropped and a marker line
    ``[... N more recalled item(s) omitted ...]`` is appended (the marker does not
    count against the budget). The first item is always kept, even when it alone
    exceeds the budget.

    >>> to_context_block(items, token_budget=200)   # doctest: +SKIP
    '- [fact] the reporter prefers email'
    """
    validate_token_budget(token_budget)
    items = _items(items, "the items of a context block")
    lines: list[str] = []
    used = 0
    for i, item in enumerate(items):
        # splitlines: every line break Python knows (\r\n, \r, \u2028...), not \n alone.
        line = f"- [{item.kind.value}] " + "\n  ".join(item.text.splitlines())
        cost = estimate_tokens(line + "\n")
        if i > 0 and token_budget is not None and used + cost > token_budget:
            lines.append(f"[... {len(items) - i} more recalled item(s) omitted ...]")
            break
        lines.append(line)
        used += cost
    return "\n".join(lines)
