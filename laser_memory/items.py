"""What recall and fetch return: memory items, their signals and sources, named items;
and what preparing a search index reports."""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import msgspec

from .ids import MemoryId
from .kinds import MemoryKind
from .log.port import Position
from .named import load_json
from .records import Origin, Producer
from .scope import Lifetime, MemoryScope

__all__ = [
    "HistoryEntry",
    "MemoryItem",
    "NamedItem",
    "PreparedSearch",
    "Signal",
    "Source",
    "body_fields",
]


def body_fields(body: bytes) -> dict[str, str]:
    r"""A body as JSON output gives it: ``body``, its text; and for a body that is no
    UTF-8 (bytes a caller remembered) ``body_base64`` too, its exact bytes, which the
    text (undecodable bytes replaced) cannot give back.

    >>> body_fields("café".encode())
    {'body': 'café'}
    >>> body_fields(b"\xff\x00")
    {'body': '�\x00', 'body_base64': '/wA='}
    """
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {
            "body": body.decode("utf-8", "replace"),
            "body_base64": base64.b64encode(body).decode("ascii"),
        }


class Source(NamedTuple):
    """The log record an item was folded from, so a reader can open it while the log
    still holds it. ``generation`` tells a recreated topic from the original."""

    stream: str
    topic: str
    partition: int
    offset: int
    generation: str
    conversation: str | None


class Signal(msgspec.Struct, frozen=True):
    """Why an item was recalled: the strategy that surfaced it, its rank in that
    strategy's list (0 is best) and that strategy's score."""

    strategy: str
    rank: int
    score: float


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """One recalled item.

    ``weight`` is the sum of the feedback that applies to it; ``append_time_ms`` is
    the broker append time of the record it was folded from (``source``);
    ``version`` counts the records (remember, feedback, forget) that targeted it and
    ``last_position`` is where the latest of them sits.
    """

    id: MemoryId
    kind: MemoryKind
    body: bytes
    scope: MemoryScope
    lifetime: Lifetime
    append_time_ms: int
    source: Source
    weight: float = 0.0
    version: int = 0
    last_position: Position | None = None
    origin: Origin | None = None
    producer: Producer | None = None
    embedding: bytes | None = None
    embedder: str | None = None
    score: float = 0.0
    signals: tuple[Signal, ...] = ()
    #: When the item (as this read sees it) expires, in milliseconds since the epoch:
    #: the earliest expiry of the remembers it shows; None: never.
    expires_at_ms: int | None = None
    #: The item this one replaced, and the newest item that replaced this one (shown
    #: only by reads that include superseded items).
    supersedes: MemoryId | None = None
    superseded_by: MemoryId | None = None

    @property
    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    @property
    def conversation(self) -> str | None:
        return self.scope.conversation

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` output)."""
        return {
            "id": str(self.id),
            "kind": self.kind.value,
            **body_fields(self.body),
            "scope": msgspec.to_builtins(self.scope),
            "lifetime": self.lifetime,
            "weight": self.weight,
            "version": self.version,
            "last_position": msgspec.to_builtins(self.last_position)
            if self.last_position
            else None,
            "score": self.score,
            "signals": [msgspec.to_builtins(s) for s in self.signals],
            "append_time_ms": self.append_time_ms,
            "source": self.source._asdict(),
            "origin": msgspec.to_builtins(self.origin) if self.origin else None,
            "producer": msgspec.to_builtins(self.producer) if self.producer else None,
            "expires_at_ms": self.expires_at_ms,
            "supersedes": str(self.supersedes) if self.supersedes else None,
            "superseded_by": str(self.superseded_by) if self.superseded_by else None,
        }


class NamedItem(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A named item's current body, how many writes made it (``version``) and the
    position of the last one."""

    key: str
    body: bytes
    version: int
    source: Source
    append_time_ms: int
    #: When the item's current life began: the first set after none or a removal.
    created_ms: int = 0
    #: The JSON paths a search reads (None: a plain named item; ``()``: not searched).
    index: tuple[str, ...] | None = None
    #: float32 rows, one per indexed text, and their embedder's label.
    vectors: bytes | None = None
    embedder: str | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as strict JSON; raises `InvalidBody` if it is not JSON."""
        return load_json(self.body)


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One record that touched an item or a named item, for audit.

    ``op`` is the record's tag (``remember``, ``feedback``, ``forget``, ``embedded``,
    ``named.set``, ``named.patch``, ``named.remove``), or ``superseded`` where a later
    remember replaced the item (``superseded_by`` names it); ``body`` is the remembered
    body, the set body or the patch; ``version`` is the item's version after this
    record. ``item`` names the item an entry belongs to where a history follows a chain
    of replacements; ``supersedes`` the item a remember replaced.
    """

    op: str
    topic: str
    partition: int
    offset: int
    append_time_ms: int
    tenant: str
    conversation: str | None
    version: int
    body: bytes | None = None
    kind: str | None = None
    weight: float | None = None
    key: str | None = None
    item: str | None = None
    supersedes: str | None = None
    superseded_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = msgspec.to_builtins(self)
        if self.body is not None:
            out.update(body_fields(self.body))
        return out


class PreparedSearch(msgspec.Struct, frozen=True, kw_only=True):
    """What `MemoryHandle.prepare_search` made ready: the search index of one read of a
    managed view, with ``entries`` items, as of the view's change ``changes``.
    ``snapshot`` is where its snapshot is saved beside the view (the next reading
    process loads it instead of building the index); None when none is (an index of
    fewer entries than `MemoryConfig.index_snapshots_from`, which each process builds
    in milliseconds, or snapshots off or unwritable: ``reason`` says which)."""

    namespace: str
    tenant: str
    conversation: str | None
    embedder: str | None
    entries: int
    changes: int
    snapshot: str | None
    reason: str | None = None
