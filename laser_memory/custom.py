"""Your own memory store behind the memory API: `CustomMemory` (``laser.memory_custom``
or ``MemoryHandle.custom``).

The backend is an object with ``remember(scope, payload)``, ``recall(scope, query)``,
``improve(scope, feedback)`` and ``forget(scope, id)``, and optionally ``append(scope,
id, kind, payload)``; each returns directly or through an awaitable, and a synchronous
one runs on a worker thread. Scopes, queries and feedback arrive as dicts. The backend
owns its scoping and its ids: with ``append`` the handle mints the id and passes the
kind; without it ``remember`` gets the payload and returns the id it chose (or None).
``recall`` returns `MemoryItem` s, or dicts with a ``payload`` and optional ``id``,
``kind``, ``score`` and ``conversation``. Arguments are checked as the log handle checks
them, before the backend is called; whatever the backend raises comes back as
`BackendFailed`, but a `LaserError`, which comes back as it is.

>>> memory = laser.memory_custom(MyStore())                 # doctest: +SKIP
>>> await memory.remember("the reporter prefers email", conversation="c-1")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Mapping
from typing import Any

from . import inputs
from .access import resolve_tenant
from .errors import BackendFailed, ConfigError, InvalidInput, LaserError, shown
from .ids import MemoryId, validate_name
from .items import MemoryItem, Signal, Source
from .kinds import MemoryKind, parse_kind
from .recall import validate_limit, validate_strategy
from .scope import MemoryScope

__all__ = ["CustomMemory"]

_METHODS = ("remember", "recall", "improve", "forget")


class CustomMemory:
    """The memory API over a backend of your own (see the module)."""

    backend_kind = "custom"

    def __init__(
        self,
        backend: Any,
        *,
        stream: str = "",
        max_body_bytes: int = 1 << 20,
        tenant: str | None = None,
    ) -> None:
        missing = [m for m in _METHODS if not callable(getattr(backend, m, None))]
        if missing:
            raise ConfigError(
                f"a custom memory backend needs {', '.join(_METHODS)}; "
                f"{type(backend).__name__} lacks {', '.join(missing)}"
            )
        # Checked when made, as `MemoryConfig` checks its own: a size that is no int
        # failed every remember with a raw TypeError, and a stream that is no name
        # every call with an error that named no setting.
        if (
            isinstance(max_body_bytes, bool)
            or not isinstance(max_body_bytes, int)
            or max_body_bytes < 1
        ):
            raise ConfigError(
                f"CustomMemory's max_body_bytes is a positive number of bytes, "
                f"got {shown(max_body_bytes)}"
            )
        validate_name(stream, "stream", allow_empty=True)
        self.backend = backend
        self.stream = stream
        self.max_body_bytes = max_body_bytes
        #: The tenant every call acts in (a connection's bound tenant), or None: each
        #: call's ``tenant`` (default ``""``). A call naming another is `AccessDenied`.
        self.tenant = (
            validate_name(tenant, "tenant", allow_empty=True) if tenant is not None else None
        )

    async def _call(self, name: str, *args: Any) -> Any:
        method = getattr(self.backend, name)
        try:
            if inspect.iscoroutinefunction(method):
                result = await method(*args)
            else:
                result = await asyncio.to_thread(method, *args)
                if inspect.isawaitable(result):
                    result = await result
        except LaserError:
            raise
        except Exception as exc:
            raise BackendFailed(f"the backend's {name} raised {type(exc).__name__}: {exc}") from exc
        return result

    def _scope(self, *, tenant: str | None, **fields: Any) -> MemoryScope:
        tenant = resolve_tenant(self.tenant, tenant)
        try:
            return MemoryScope(stream=self.stream, tenant=tenant, **fields).validated()
        except TypeError as exc:
            raise InvalidInput(f"bad scope: {exc}") from None

    @staticmethod
    def _scope_dict(scope: MemoryScope) -> dict[str, Any]:
        return {
            "stream": scope.stream,
            "tenant": scope.tenant,
            "conversation": scope.conversation,
            "agent": scope.agent,
            "user": scope.user,
            "application": scope.application,
        }

    async def remember(
        self,
        body: str | bytes,
        *,
        kind: str | MemoryKind = "fact",
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        durable: bool = False,
    ) -> MemoryId | None:
        """Remember a body; the id the handle minted (with ``append``) or the one the
        backend returned (None if it returned none)."""
        payload = inputs.body(body, self.max_body_bytes)
        if not isinstance(durable, bool):
            raise InvalidInput(f"durable is True or False, got {shown(durable)}")
        chosen = parse_kind(kind)
        scope = self._scope(
            tenant=tenant,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
        )
        fields = {**self._scope_dict(scope), "lifetime": "durable" if durable else "session"}
        if callable(getattr(self.backend, "append", None)):
            mid = MemoryId.new()
            await self._call("append", fields, str(mid), chosen.value, payload)
            return mid
        returned = await self._call("remember", fields, payload)
        if returned is None:
            return None
        try:
            return MemoryId.parse(returned)
        except LaserError as exc:
            raise BackendFailed(f"the backend's remember returned no id: {exc}") from None

    async def recall(
        self,
        *,
        conversation: str | None = None,
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
        tenant: str | None = None,
        text: str | None = None,
        strategy: str = "auto",
        limit: int = 50,
    ) -> list[MemoryItem]:
        """Ask the backend, and return at most ``limit`` items in its order."""
        strategy = validate_strategy(strategy)
        validate_limit(limit)
        if text is not None and not isinstance(text, str):
            raise InvalidInput(f"text must be a string, got {type(text).__name__}")
        scope = self._scope(
            tenant=tenant,
            conversation=conversation,
            agent=agent,
            user=user,
            application=application,
        )
        query = {"text": text, "strategy": strategy, "limit": limit}
        found = await self._call("recall", self._scope_dict(scope), query)
        if isinstance(found, str | bytes) or not isinstance(found, list | tuple):
            raise BackendFailed(f"the backend's recall returned {type(found).__name__}, not a list")
        return [self._item(entry, scope, rank) for rank, entry in enumerate(found[:limit])]

    def _item(self, entry: Any, scope: MemoryScope, rank: int) -> MemoryItem:
        if isinstance(entry, MemoryItem):
            # Tenancy is a hard boundary whatever the backend does: an item of another
            # tenant fails the read (a backend's bug must not leak, nor pass unseen).
            tenant = entry.scope.tenant if isinstance(entry.scope, MemoryScope) else None
            # Compared as plain text: a str subclass's own __ne__ is the backend's code.
            if not isinstance(tenant, str) or str.__str__(tenant) != scope.tenant:
                raise BackendFailed(
                    f"the backend's recall returned an item of tenant {shown(tenant)} to a read "
                    f"of tenant {shown(scope.tenant)}; nothing was returned"
                )
            return entry
        try:
            # A mapping's lookup is the backend's code: what it raises is a bad item.
            has_payload = isinstance(entry, Mapping) and "payload" in entry
        except Exception as exc:
            raise BackendFailed(
                f"the backend's recall returned a bad item: {type(exc).__name__}: {exc}"
            ) from None
        if not has_payload:
            raise BackendFailed(
                f"the backend's recall returned {shown(entry)}: items are MemoryItems or dicts "
                "with a 'payload'"
            )
        try:
            payload = entry["payload"]
            if isinstance(payload, str):
                body = str.encode(payload)
            elif isinstance(payload, bytes | bytearray | memoryview):
                body = bytes(payload)
            else:
                # bytes(10**10) would be ten gigabytes of zeros, not an error.
                raise TypeError(f"a payload is str or bytes, got {type(payload).__name__}")
            mid = MemoryId.parse(entry["id"]) if entry.get("id") is not None else MemoryId.new()
            kind = parse_kind(entry.get("kind") or "fact")
            score = entry.get("score") or 0.0
            # float() would read "1" or True as a score: a backend that sends text
            # where a number belongs has a bug the caller should hear of.
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise TypeError(f"a score is a number, got {type(score).__name__}")
            score = float(score)
            if not math.isfinite(score):
                raise ValueError(f"a score is a finite number, got {score}")
            conversation = entry.get("conversation", scope.conversation)
            item_scope = MemoryScope(
                stream=scope.stream, tenant=scope.tenant, conversation=conversation
            ).validated()
        except Exception as exc:  # what the backend returned runs its own code (a
            # mapping's get, a number's __float__): whatever that raises, a bad item
            raise BackendFailed(
                f"the backend's recall returned a bad item: {type(exc).__name__}: {exc}"
            ) from None
        return MemoryItem(
            id=mid,
            kind=kind,
            body=body,
            scope=item_scope,
            lifetime="session",
            append_time_ms=0,
            source=Source(scope.stream, "", 0, 0, "", conversation),
            score=score,
            signals=(Signal("custom", rank, score),),
        )

    async def improve(
        self, id: MemoryId | str | bytes, weight: float, *, tenant: str | None = None, **owner: Any
    ) -> None:
        """Pass feedback ``weight`` for item ``id`` to the backend."""
        target = MemoryId.parse(id)
        value = inputs.weight(weight)
        scope = self._scope(tenant=tenant, **owner)
        await self._call("improve", self._scope_dict(scope), {"id": str(target), "weight": value})

    async def forget(
        self, id: MemoryId | str | bytes, *, tenant: str | None = None, **owner: Any
    ) -> None:
        """Ask the backend to forget item ``id``."""
        target = MemoryId.parse(id)
        scope = self._scope(tenant=tenant, **owner)
        await self._call("forget", self._scope_dict(scope), str(target))
