"""A plain reference model of memory: what recall and fetch must return, computed by
scanning the full list of writes with no incremental state and no indexes.

It follows the rules written at the top of ``folders/state.py`` literally, so the
fold (in process or managed) can be checked against it on random operations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from laser_memory.named import merge_patch
from laser_memory.records import (
    Feedback,
    Forget,
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Remember,
)


@dataclass(frozen=True)
class Write:
    record: MemoryRecord
    append_time_ms: int
    partition: int
    offset: int

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.append_time_ms, self.partition, self.offset)


@dataclass(frozen=True)
class ModelItem:
    id: bytes
    body: bytes
    conversation: str | None
    weight: float
    key: tuple[int, int, int]


def recall(
    writes: list[Write],
    *,
    tenant: str = "",
    conversation: str | None = None,
    user: str | None = None,
    kind: int | None = None,
    strategy: str = "auto",
) -> list[ModelItem]:
    mine = [w for w in writes if w.record.scope.tenant == tenant]
    ids = {w.record.id for w in mine if isinstance(w.record, Remember)}
    items = []
    for item_id in ids:
        remembers = [w for w in mine if isinstance(w.record, Remember) and w.record.id == item_id]
        forgets = [w for w in mine if isinstance(w.record, Forget) and w.record.target == item_id]
        feedback = [
            w for w in mine if isinstance(w.record, Feedback) and w.record.target == item_id
        ]
        live = []
        for conv in {w.record.scope.conversation for w in remembers}:
            if conversation is not None and conv != conversation:
                continue
            latest = max(
                (w for w in remembers if w.record.scope.conversation == conv), key=lambda w: w.key
            )
            killed = any(
                (f.record.scope.conversation is None or f.record.scope.conversation == conv)
                and (
                    f.offset > latest.offset
                    if f.partition == latest.partition
                    else f.append_time_ms >= latest.append_time_ms
                )
                for f in forgets
            )
            if killed:
                continue
            if user is not None and latest.record.scope.user != user:
                continue
            if kind is not None and latest.record.kind != kind:
                continue
            live.append(latest)
        if not live:
            continue
        convs = {w.record.scope.conversation for w in live}
        weight = sum(
            f.record.weight
            for f in feedback
            if f.record.scope.conversation is None or f.record.scope.conversation in convs
        )
        newest = max(live, key=lambda w: w.key)
        items.append(
            ModelItem(
                item_id, newest.record.body, newest.record.scope.conversation, weight, newest.key
            )
        )
    items.sort(key=lambda i: i.key, reverse=True)
    if strategy == "auto":
        items.sort(key=lambda i: i.weight, reverse=True)
    return items


def fetch(writes: list[Write], key: str, *, tenant: str = "") -> tuple[object, int] | None:
    """(parsed JSON body, version) of a named item, or None."""
    mine = sorted(
        (
            w
            for w in writes
            if isinstance(w.record, NamedSet | NamedPatch | NamedRemove)
            and w.record.key == key
            and w.record.scope.tenant == tenant
        ),
        key=lambda w: (w.partition, w.offset),
    )
    value: object = None
    present = False
    for w in mine:
        if isinstance(w.record, NamedSet):
            value, present = json.loads(w.record.body), True
        elif isinstance(w.record, NamedPatch):
            value, present = (
                merge_patch(value if present else None, json.loads(w.record.patch)),
                True,
            )
        else:
            value, present = None, False
    return (value, len(mine)) if present else None
