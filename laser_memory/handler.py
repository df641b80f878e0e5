"""`MemoryHandler`: an agent's message handler that remembers what it handled.

It wraps your handler. After the handler succeeds it remembers the message's payload
under the message's conversation, agent and tenant, as the kind chosen with `auto_remember`
(off until then). A handler that raises remembers nothing, and the error goes to the
caller as it was. A memory write that fails does not fail the message (its effects are
done and must not be repeated by a retry): it is kept in `failures`, logged, and
dropped.

>>> handler = MemoryHandler(answer_ticket, memory).auto_remember("message")  # doctest: +SKIP
>>> await handler(message)                      # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from .errors import AccessDenied, ConfigError, shown
from .kinds import MemoryKind, parse_kind
from .latest import Latest

if TYPE_CHECKING:
    from .memory import MemoryHandle

__all__ = ["MemoryHandler", "Message"]

log = logging.getLogger("laser_memory.handler")

R = TypeVar("R")


@runtime_checkable
class Message(Protocol):
    """What a handler is given: a payload, and the conversation and agent it belongs to
    (either may be None). A message that also has a ``tenant`` (an `AgentMessage` does)
    is remembered in that tenant."""

    payload: bytes | str
    conversation: str | None
    agent: str | None


class MemoryHandler(Generic[R]):
    """Wraps ``inner`` (sync or async, taking a `Message`); see the module."""

    # An async handler's result is what its awaitable gives, a sync one's what it returns:
    # one signature taking `R | Awaitable[R]` let type checkers infer neither.
    @overload
    def __init__(
        self: MemoryHandler[R],
        inner: Callable[[Any], Awaitable[R]],
        memory: MemoryHandle,
        *,
        kind: str | MemoryKind | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: MemoryHandler[R],
        inner: Callable[[Any], R],
        memory: MemoryHandle,
        *,
        kind: str | MemoryKind | None = None,
    ) -> None: ...

    def __init__(
        self,
        inner: Callable[[Any], Any],
        memory: MemoryHandle,
        *,
        kind: str | MemoryKind | None = None,
    ) -> None:
        if not callable(inner):
            raise ConfigError(f"MemoryHandler wraps a callable handler, got {shown(inner)}")
        if not callable(getattr(memory, "remember", None)):
            raise ConfigError(
                f"MemoryHandler remembers into a memory handle (laser.memory(...)), got "
                f"{shown(memory)}"
            )
        self.inner = inner
        self.memory = memory
        self.kind = parse_kind(kind) if kind is not None else None
        principal = getattr(memory, "principal", None)
        if self.kind is not None and principal is not None:
            # Every message's write would fail into `failures`: refused once, here.
            try:
                principal.check_publish(getattr(memory, "topic", None))
            except AccessDenied as exc:
                raise AccessDenied(f"a handler cannot remember into this handle: {exc}") from None
        #: The latest failed memory writes (`Latest`: ``failures.total`` counts all).
        self.failures: Latest[Exception] = Latest()

    def auto_remember(self, kind: str | MemoryKind = "message") -> MemoryHandler[R]:
        """A handler like this one that remembers each message it finishes as ``kind``."""
        made: MemoryHandler[R] = MemoryHandler(self.inner, self.memory, kind=kind)
        return made

    async def __call__(self, message: Any) -> R:
        result = self.inner(message)
        if inspect.isawaitable(result):
            result = await result
        if self.kind is not None:
            # The message's tenant, when it has one: a handle bound to another refuses it
            # (kept in `failures`) rather than file one tenant's message under another.
            tenant = getattr(message, "tenant", None)
            try:
                await self.memory.remember(
                    message.payload,
                    kind=self.kind,
                    conversation=getattr(message, "conversation", None),
                    agent=getattr(message, "agent", None),
                    **({} if tenant is None else {"tenant": tenant}),
                )
            except Exception as exc:  # the message is handled: its memory must not undo that
                self.failures.keep(exc)
                log.warning("a handled message could not be remembered: %s", exc)
        return result
