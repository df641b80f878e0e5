"""A plain reference model of memory, fed the calls a user makes (never records read
back from the log), so a writer that drops or changes what it was asked to write is as
visible as a fold that misreads it.

It is the semantics a user expects, stated sequentially: calls happen in the order the
test makes them, a forget forgets the remembers made before it (in its conversation, or
in every conversation when it names none), a later remember brings an item back. The
only thing it takes from the log is each write's receipt, which the API returns to the
caller: "recent" orders by receipt (broker append time, partition, offset), and an item
seen in several conversations shows its newest remember.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from laser_memory.named import merge_patch
from laser_memory.terms import terms

# The ranking constants of the README's recall section.
K1, B, NEIGHBOUR, FEEDBACK = 1.2, 0.75, 0.3, 0.1


@dataclass(frozen=True)
class ModelItem:
    id: bytes
    body: bytes
    conversation: str | None
    weight: float
    key: tuple[int, int, int]
    version: int
    score: float | None = None


def rank_by_text(items: list[ModelItem], text: str, neighbours: bool) -> list[ModelItem]:
    """Text recall as the README states it, one item at a time: BM25 over the
    candidates, divided by the best; in hybrid recall plus 0.3 of the scores of the
    items written just before and after in the same conversation; kept when that is
    above 0; plus 0.1 * tanh(feedback); best first, ties newest first."""
    query = list(dict.fromkeys(terms(text)))
    docs = [terms(item.body.decode("utf-8", "replace")) for item in items]
    average = sum(len(d) for d in docs) / len(docs) if docs else 0.0
    bm25 = []
    for doc in docs:
        score = 0.0
        for term in query:
            df = sum(1 for other in docs if term in other)
            tf = doc.count(term)
            if df:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                norm = K1 * (1 - B + B * len(doc) / max(average, 1e-9))
                score += idf * tf * (K1 + 1) / (tf + norm)
        bm25.append(score)
    best = max(bm25, default=0.0)
    own = {item.id: (s / best if best > 0 else 0.0) for item, s in zip(items, bm25, strict=True)}
    spread = dict(own)
    by_conversation: dict[str, list[ModelItem]] = {}
    for item in sorted(items, key=lambda i: i.key):
        by_conversation.setdefault(item.conversation or "", []).append(item)
    for run in by_conversation.values() if neighbours else ():
        for before, after in itertools.pairwise(run):
            spread[after.id] += NEIGHBOUR * own[before.id]
            spread[before.id] += NEIGHBOUR * own[after.id]
    kept = [
        ModelItem(
            i.id,
            i.body,
            i.conversation,
            i.weight,
            i.key,
            i.version,
            spread[i.id] + FEEDBACK * math.tanh(i.weight),
        )
        for i in items
        if spread[i.id] > 0
    ]
    kept.sort(key=lambda i: i.key, reverse=True)
    kept.sort(key=lambda i: i.score, reverse=True)
    return kept


@dataclass
class _Remember:
    call: int
    body: bytes
    conversation: str | None
    user: str | None
    agent: str | None
    kind: int
    key: tuple[int, int, int]
    expires: int | None = None


@dataclass
class _Item:
    remembers: list[_Remember] = field(default_factory=list)
    forgets: list[tuple[int, str | None]] = field(default_factory=list)  # (call, conversation)
    feedback: list[tuple[float, str | None]] = field(default_factory=list)
    version: int = 0
    superseded: bool = False


class Model:
    """Memory as a user's calls define it."""

    def __init__(self) -> None:
        self._calls = 0
        self._items: dict[tuple[str, bytes], _Item] = {}
        self._named: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        self._content_ids: dict[tuple, bytes] = {}

    def _next(self) -> int:
        self._calls += 1
        return self._calls

    def remember(
        self,
        mid: bytes,
        body: bytes,
        *,
        tenant: str,
        conversation: str | None,
        user: str | None,
        agent: str | None,
        kind: int,
        key: tuple[int, int, int],
        dedup_of: tuple | None = None,
        expires: int | None = None,
    ) -> None:
        """``dedup_of`` is the owner scope, kind and body of a ``dedup=True`` remember:
        the same ones must give the same id, and no two tenants or users share one."""
        if dedup_of is not None:
            known = self._content_ids.setdefault(dedup_of, mid)
            assert known == mid, f"content id changed for {dedup_of}"
            others = {v for k, v in self._content_ids.items() if k != dedup_of}
            assert mid not in others, f"content id of {dedup_of} is another scope's"
        item = self._items.setdefault((tenant, mid), _Item())
        item.remembers.append(
            _Remember(self._next(), body, conversation, user, agent, kind, key, expires)
        )
        item.version += 1

    def supersede(self, mid: bytes, *, tenant: str) -> None:
        """A later remember in the tenant replaced the item: for good."""
        item = self._items.setdefault((tenant, mid), _Item())
        item.superseded = True
        item.version += 1

    def forget(self, mid: bytes, *, tenant: str, conversation: str | None) -> None:
        item = self._items.setdefault((tenant, mid), _Item())
        item.forgets.append((self._next(), conversation))
        item.version += 1

    def improve(self, mid: bytes, weight: float, *, tenant: str, conversation: str | None) -> None:
        item = self._items.setdefault((tenant, mid), _Item())
        item.feedback.append((weight, conversation))
        item.version += 1

    def named(self, op: str, key: str, value: Any, *, tenant: str) -> None:
        self._named.setdefault((tenant, key), []).append((op, value))

    def recall(
        self,
        *,
        tenant: str = "",
        conversation: str | None = None,
        user: str | None = None,
        agent: str | None = None,
        kind: int | None = None,
        strategy: str = "auto",
        text: str | None = None,
        limit: int = 1000,
        now_ms: int | None = None,
    ) -> list[ModelItem]:
        """``now_ms``: remembers that expired by then do not count (None: none expire)."""
        items = []
        for (item_tenant, mid), item in self._items.items():
            if item_tenant != tenant or item.superseded:
                continue
            live: list[_Remember] = []
            for conv in {r.conversation for r in item.remembers}:
                if conversation is not None and conv != conversation:
                    continue
                latest = max(
                    (r for r in item.remembers if r.conversation == conv), key=lambda r: r.call
                )
                if any(
                    call > latest.call and (scope is None or scope == conv)
                    for call, scope in item.forgets
                ):
                    continue
                if (user is not None and latest.user != user) or (
                    agent is not None and latest.agent != agent
                ):
                    continue
                if kind is not None and latest.kind != kind:
                    continue
                if now_ms is not None and latest.expires is not None and latest.expires <= now_ms:
                    continue
                live.append(latest)
            if not live:
                continue
            convs = {r.conversation for r in live}
            weight = sum(w for w, scope in item.feedback if scope is None or scope in convs)
            newest = max(live, key=lambda r: r.key)
            items.append(
                ModelItem(mid, newest.body, newest.conversation, weight, newest.key, item.version)
            )
        items.sort(key=lambda i: i.key, reverse=True)
        if strategy != "recent" and text and text.strip():
            return rank_by_text(items, text, neighbours=strategy != "keyword")[:limit]
        if strategy != "recent":
            items.sort(key=lambda i: i.weight, reverse=True)
        return items[:limit]

    def fetch(self, key: str, *, tenant: str = "") -> tuple[Any, int] | None:
        """(value, version) of a named item, or None."""
        writes = self._named.get((tenant, key), [])
        value: Any = None
        present = False
        version = 0
        for op, given in writes:
            if op == "remove_if" and given != version:
                continue  # the item was no longer at that version: nothing changes
            version += 1
            if op == "set":
                value, present = given, True
            elif op == "update":
                value, present = merge_patch(value if present else None, given), True
            else:
                value, present = None, False
        return (value, version) if present else None

    def named_items(self, *, tenant: str = "", prefix: str = "") -> list[tuple[str, Any, int]]:
        """(key, value, version) of every present named item of a tenant whose key
        starts with ``prefix``, by key."""
        out = []
        for owner, key in sorted(self._named):
            if owner != tenant or not key.startswith(prefix):
                continue
            if (found := self.fetch(key, tenant=tenant)) is not None:
                out.append((key, *found))
        return out
