"""Consolidation: keeping a scope's memory small (`MemoryHandle.consolidate`, which runs
`consolidate` here).

The default pass looks at the newest `WINDOW` items of the scope in arrival order,
keeps the newest ``max_items`` of them and forgets the rest (``max_items=0`` forgets
the whole window). With a summarizer it first groups the window's ``message`` items by
conversation and remembers one durable ``summary`` per conversation; with
``prune_summarized`` it then forgets those messages too. Everything a pass writes goes
in one batch, after every summary has been made: a summarizer that fails writes
nothing. Passes are records, not read-modify-write: two workers consolidating at once
write forgets the fold applies once each, and summaries as separate items.

>>> report = await memory.consolidate(100, conversation="c-1",
...     summarizer=lambda bodies: f"{len(bodies)} turns".encode())   # doctest: +SKIP
>>> report.summarized, report.pruned                                  # doctest: +SKIP
(140, 40)
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from .errors import InvalidInput, SummarizeFailed, shown
from .ids import MemoryId
from .items import MemoryItem
from .kinds import MemoryKind
from .records import Forget, MemoryRecord, Remember

if TYPE_CHECKING:
    from .memory import MemoryHandle

__all__ = [
    "WINDOW",
    "ConsolidationReport",
    "Consolidator",
    "Summarizer",
    "consolidate",
    "summarize",
    "validate_max_items",
]

#: The most items one pass looks at: the newest of the scope.
WINDOW = 10_000


class ConsolidationReport(msgspec.Struct, frozen=True):
    """What a pass did: messages folded into summaries, items reweighted, items
    forgotten (counted once their forgets are written), and items derived. The default
    pass fills ``summarized`` and ``pruned``; custom consolidators the others."""

    summarized: int = 0
    reweighted: int = 0
    pruned: int = 0
    derived: int = 0


@runtime_checkable
class Summarizer(Protocol):
    """Turns a conversation's message bodies into one summary body (sync or async). A
    plain callable ``(bodies) -> body`` serves too."""

    def summarize(self, bodies: list[bytes]) -> bytes | str | Awaitable[bytes | str]:
        """One non-empty summary body of ``bodies`` (oldest first)."""
        ...


@runtime_checkable
class Consolidator(Protocol):
    """A custom pass, for an agent's timer: ``consolidate(scope)`` returns a report."""

    def consolidate(self, scope: Any) -> Awaitable[ConsolidationReport | None]:
        """One pass over ``scope`` (the driver's, or None); its report, if any."""
        ...


def validate_max_items(max_items: int) -> int:
    if isinstance(max_items, bool) or not isinstance(max_items, int) or not 0 <= max_items:
        raise InvalidInput(f"max_items is a whole number, 0 or more, got {shown(max_items)}")
    return max_items


def summarizer_call(summarizer: Any) -> Callable[[list[bytes]], Any]:
    """The function to call for a summarizer object or callable; refuses anything else."""
    if isinstance(summarizer, Summarizer):
        return summarizer.summarize
    if callable(summarizer):
        return summarizer
    raise InvalidInput(
        "summarizer is a callable (bodies) -> body, or an object with summarize(bodies); got "
        f"{type(summarizer).__name__}"
    )


async def summarize(call: Callable[[list[bytes]], Any], bodies: Sequence[bytes]) -> bytes:
    """One summary body; `SummarizeFailed` if the summarizer raises or returns no body.
    A synchronous summarizer (most often a model called over the network) runs on a
    worker thread, as embedders and rerankers do: on the event loop it held every other
    call of the process for as long as the model took."""
    try:
        if inspect.iscoroutinefunction(call):
            body = await call(list(bodies))
        else:
            body = await asyncio.to_thread(call, list(bodies))
            if inspect.isawaitable(body):  # a callable that hands back a coroutine
                body = await body
    except Exception as exc:  # whatever the user's code raises, nothing is written
        raise SummarizeFailed(f"the summarizer raised {type(exc).__name__}: {exc}") from exc
    returned = body
    if isinstance(body, str):
        # The text a str subclass holds: its own encode is the summarizer's code. Strict,
        # as `remember` takes text: a lone surrogate was stored as bytes no text holds.
        try:
            body = str.encode(body, "utf-8")
        except UnicodeEncodeError as exc:
            raise SummarizeFailed(
                f"the summarizer returned text that is not valid Unicode ({exc.reason} at "
                f"position {exc.start}); return valid text, or bytes"
            ) from None
    elif isinstance(body, bytes | bytearray):
        body = bytes(body)
    if not isinstance(body, bytes) or not body:
        # Named as returned: an empty str is "str ''", not the bytes it encodes to.
        raise SummarizeFailed(
            f"the summarizer returned {type(returned).__name__} {shown(returned):.80}; it "
            "must return a non-empty str or bytes"
        )
    return body


async def consolidate(
    memory: MemoryHandle,
    max_items: int,
    *,
    conversation: str | None,
    agent: str | None,
    user: str | None,
    application: str | None,
    tenant: str | None,
    summarizer: Any,
    prune_summarized: bool,
) -> ConsolidationReport:
    """`MemoryHandle.consolidate`: one pass over a scope of ``memory``."""
    memory._check_read()
    memory._check_publish()
    tenant = memory._tenant(tenant)
    validate_max_items(max_items)
    if not isinstance(prune_summarized, bool):
        raise InvalidInput(f"prune_summarized is True or False, got {shown(prune_summarized)}")
    call = summarizer_call(summarizer) if summarizer is not None else None
    conversation = memory._conversation(conversation)
    where = memory._where(tenant, conversation, agent, user, application)
    info = await memory._topic_info()
    if info is None:
        return ConsolidationReport()
    state = await memory._reader.catch_up()
    # What this pass read, taken now: a recall of this handle while the summarizer
    # runs may fold further, and the forgets must not end what the pass never saw.
    seen = memory._folded(info.partitions)
    window = state.recall(where, strategy="recent", limit=WINDOW)
    doomed = {item.id.bytes: item for item in window[max_items:]}
    summaries: list[Remember] = []
    summarized = 0
    if call is not None:
        threads: dict[str | None, list[MemoryItem]] = {}
        for item in reversed(window):  # oldest first: a transcript's order
            if item.kind is MemoryKind.MESSAGE:
                threads.setdefault(item.scope.conversation, []).append(item)
        for thread, messages in threads.items():
            body = await summarize(call, [m.body for m in messages])
            # The summary's id comes from the messages it folds, so two workers that
            # consolidate the same window at once write one item, not two.
            summary_id = MemoryId.content(
                MemoryKind.SUMMARY,
                b"laser-memory/consolidate\0" + b"".join(sorted(m.id.bytes for m in messages)),
                stream=memory.stream,
                tenant=tenant,
                agent=agent,
                user=user,
                application=application,
            )
            summaries.append(
                memory._remembers.record(
                    {
                        "body": body,
                        "kind": "summary",
                        "durable": True,
                        "conversation": thread,
                        "tenant": tenant,
                        "agent": agent,
                        "user": user,
                        "application": application,
                        "producer": ("laser-memory/consolidate", "1"),
                    },
                    memory_id=summary_id,
                )
            )
            summarized += len(messages)
            if prune_summarized:
                doomed.update((m.id.bytes, m) for m in messages)
    forgets: list[Forget] = []
    if doomed:
        scope = memory._scope(conversation=conversation, tenant=tenant)
        forgets = [
            Forget(ns=memory.namespace, scope=scope, target=raw_id, seen=seen, only_seen=True)
            for raw_id in doomed
        ]
    with memory._laser._write_under_way():  # one write: the summaries' embedding, its append
        records: list[MemoryRecord] = [*await memory._remembers.embedded(summaries), *forgets]
        if records:
            await memory._write(records)
    return ConsolidationReport(summarized=summarized, pruned=len(forgets))
