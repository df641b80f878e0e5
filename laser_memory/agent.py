"""Agents that listen on their stream's sessions topic, remember their turns, record
what they retrieved, and consolidate on a timer.

A session message goes on ``<stream>.agent.sessions`` (which `Laser.bootstrap`
creates) with `Laser.send_to_agent`; an agent started with `Laser.spawn_agent` hands
each message addressed to it, sent after it became ready, to its handler, one at a
time, in the order of each conversation. The handler gets an `AgentMessage`: the
payload, conversation and agent (so a `MemoryHandler` remembers it), the position it
came from, and its `Session`:

- ``session.acting_on(source)`` names the record the session acts on (by default the
  message itself);
- ``session.linked_memory(memory)`` is ``memory`` stamping the agent as producer and
  that record as origin on everything it remembers;
- ``session.record_retrieval(query, items)`` writes a `retrieved` record for each
  item that entered the answer's context, so the item's history shows the answers it
  went into.

A handler that raises does not stop the agent: the error is kept in `Agent.failures`
and the next message is handled (messages are not retried). If the log itself fails the
agent's read (a broker that cannot be reached, a log stopped under it), the agent stops
listening: the error is kept in `Agent.failures` too, and `drain` raises it rather than
waiting out its timeout; `start` again after `stop` listens anew. With ``consolidate_every``
and a ``consolidator`` (one without the other is a `ConfigError`), a
`ConsolidationDriver` runs its first pass when the agent starts and one each interval
after; a failed pass does not stop later ones; `stop` ends both.

>>> agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, handler,
...                                 consolidate_every=60.0, consolidator=Compact())
... # doctest: +SKIP
>>> await laser.send_to_agent("triage", "my login fails", conversation="t-42")  # doctest: +SKIP
>>> await agent.stop()                                                # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import warnings
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from . import inputs
from .access import resolve_tenant
from .errors import ConfigError, InvalidInput, RecordDecodeError, WaitTimeout, shown
from .ids import validate_name
from .items import MemoryItem
from .latest import Latest
from .log.naming import check_topic_name
from .log.port import Appended, LogRecord, OutgoingRecord
from .periodic import ConsolidationDriver
from .records import Origin, Producer, Retrieved

if TYPE_CHECKING:
    from .client import Laser
    from .memory import MemoryHandle

__all__ = ["Agent", "AgentMessage", "AgentTopic", "Session", "SessionRecord"]


class AgentTopic(enum.StrEnum):
    """The agent topics of a stream (each is ``<stream>.<value>``)."""

    SESSIONS = "agent.sessions"

    @classmethod
    def _missing_(cls, value: object) -> AgentTopic:
        # Still a ValueError, as the enum's own, with what the topics are.
        raise InvalidInput(
            f"unknown agent topic {shown(value)}; use one of: {', '.join(t.value for t in cls)}"
        )


class SessionRecord(msgspec.Struct, frozen=True, tag="session.message", tag_field="op"):
    """A message to an agent, as it sits on the sessions topic (schema version 1)."""

    agent: str
    payload: bytes
    conversation: str | None = None
    tenant: str = ""
    v: int = 1


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SessionRecord)


def encode_session(record: SessionRecord) -> OutgoingRecord:
    key = f"c/{record.conversation}" if record.conversation else f"a/{record.agent}"
    return OutgoingRecord(_encoder.encode(record), key=key.encode())


def decode_session(value: bytes) -> SessionRecord:
    try:
        return _decoder.decode(value)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"not a session message: {exc}") from None


class Session:
    """One message's session: what it acts on, and memory linked to it."""

    def __init__(self, agent: Agent, message: AgentMessage) -> None:
        self._agent = agent
        self.message = message
        self.origin = _origin(message.source, agent.laser.stream or "")

    def acting_on(self, source: Appended | MemoryItem | Origin) -> Session:
        """Name the record this session acts on (a receipt, a recalled item, or an
        `Origin`); `linked_memory` stamps it as origin. Returns the session."""
        if isinstance(source, MemoryItem):
            self.origin = Origin(
                stream=source.source.stream,
                topic=source.source.topic,
                partition=source.source.partition,
                offset=source.source.offset,
                generation=source.source.generation,
            )
        elif isinstance(source, Appended):
            self.origin = _origin(source, self._agent.laser.stream or "")
        elif isinstance(source, Origin):
            self.origin = source
        else:
            raise InvalidInput(
                "acting_on takes a receipt, a recalled MemoryItem or an Origin, got "
                f"{type(source).__name__}"
            )
        return self

    def linked_memory(self, memory: MemoryHandle | None = None) -> MemoryHandle:
        """``memory`` (default: the agent's) stamping this session's agent as producer
        and the record it acts on as origin on everything it remembers, bound to the
        message's tenant: a handle bound to another tenant is refused (`AccessDenied`)."""
        memory = memory if memory is not None else self._agent.memory
        if memory is None:
            raise ConfigError("this agent has no memory: pass one to linked_memory(memory)")
        tenant = resolve_tenant(memory.tenant, self.message.tenant)
        producer = Producer(name=self._agent.agent_id)
        return memory.with_lineage(origin=self.origin, producer=producer)._derive(tenant=tenant)

    async def record_retrieval(
        self, query: str, items: Iterable[MemoryItem], memory: MemoryHandle | None = None
    ) -> int:
        """Write a `retrieved` record for each item that entered this session's context,
        in one batch; returns how many. The items' histories show it. ``items`` is any
        iterable of recalled `MemoryItem`s (a list, a generator); anything else is
        `InvalidInput`, with nothing written."""
        memory = memory if memory is not None else self._agent.memory
        if memory is None:
            raise ConfigError("this agent has no memory: pass one to record_retrieval")
        memory._check_publish()  # with items or without: a write it may not make
        if not isinstance(query, str):
            raise InvalidInput(f"query is a string, got {type(query).__name__}")
        try:
            str.encode(query, "utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"query {shown(query)} is not valid Unicode text") from None
        refused = InvalidInput("items are the MemoryItems a recall returned")
        if isinstance(items, str | bytes):
            raise refused
        try:  # once, as a list: a generator checked by `all` was spent, and nothing written
            listed = list(items)
        except TypeError:  # one item, a number: not a sequence
            raise refused from None
        if not all(isinstance(i, MemoryItem) for i in listed):
            raise refused
        records = [
            Retrieved(
                ns=memory.namespace,
                # The item's tenant (a bound handle refuses another) and conversation.
                scope=msgspec.structs.replace(
                    memory._scope(tenant=item.scope.tenant),
                    conversation=item.scope.conversation,
                ),
                target=item.id.bytes,
                query=query,
                session=self.origin,
            )
            for item in listed
        ]
        if records:
            await memory._write(records)
        return len(records)


def _origin(source: Appended, stream: str) -> Origin:
    return Origin(
        stream=stream,
        topic=source.topic,
        partition=source.partition,
        offset=source.offset,
        generation=source.generation or "",
    )


class AgentMessage(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent's handler is given (a `laser_memory.Message`, so a
    `MemoryHandler` remembers it)."""

    agent: str
    payload: bytes
    conversation: str | None
    tenant: str
    source: Appended
    session: Session

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8", "replace")


class Agent:
    """A running agent (see the module). Stop it with `stop` (safe twice) or
    ``async with``."""

    def __init__(
        self,
        laser: Laser,
        agent_id: str,
        handler: Callable[[AgentMessage], Any | Awaitable[Any]],
        *,
        topic: str,
        memory: MemoryHandle | None = None,
        consolidate_every: float | None = None,
        consolidator: Any = None,
    ) -> None:
        # Imported here: the connection imports this module (it spawns agents).
        from .client import Laser
        from .rerank import is_memory_handle

        # Each checked now: taken, a wrong one failed only once the agent ran (a raw
        # AttributeError, or a failure of every message its sessions linked memory to).
        if not isinstance(laser, Laser):
            raise ConfigError(
                f"an agent runs on a connection (laser_memory.connect(...)), got {shown(laser)}"
            )
        check_topic_name(topic)
        if memory is not None and not is_memory_handle(memory):
            raise ConfigError(
                f"an agent's memory is a memory handle (laser.memory(...)), got {shown(memory)}"
            )
        agent_id = validate_name(agent_id, "agent id")
        if not callable(handler):
            raise ConfigError(f"an agent's handler is a callable, got {type(handler).__name__}")
        if (consolidate_every is None) != (consolidator is None):
            raise ConfigError(
                "consolidation on a timer needs both consolidate_every and a consolidator; "
                "one alone would do nothing"
            )
        self.laser = laser
        self.agent_id = agent_id
        self.handler = handler
        # A connection bound to a tenant hands its agents that tenant's messages only.
        self._tenant: str | None = laser.tenant
        self.memory = memory if memory is not None else getattr(handler, "memory", None)
        self.topic = topic
        self.handled = 0
        #: The latest failures (`Latest`: ``failures.total`` counts all).
        self.failures: Latest[Exception] = Latest()
        self._driver = (
            ConsolidationDriver(consolidator, every=consolidate_every, scope={"agent": agent_id})
            if consolidator is not None
            else None
        )
        self._group: asyncio.TaskGroup | None = None
        self._listener: asyncio.Task | None = None
        self._ready = asyncio.Event()
        # Per partition, the first offset not yet handled; notified after each message.
        self._positions: dict[int, int] = {}
        self._progress = asyncio.Condition()
        self._stopped = False
        # The generation of the sessions topic the listener reads (see `start`).
        self._generation = ""
        # Why the agent stopped listening, if its read of the log failed.
        self._read_failed: Exception | None = None

    @property
    def consolidation(self) -> ConsolidationDriver | None:
        """The consolidation timer (its `passes`, `failures` and `reports`), if any."""
        return self._driver

    async def start(self) -> None:
        """Start listening (from the topic's end: messages sent from now on) and the
        consolidation timer. Safe to call twice; after `stop` it starts again, from the
        topic's end then (what was sent while it was stopped is not handled)."""
        if self._group is not None:
            return
        self._stopped = False
        start = await self.laser.log.end_offsets(self.topic)
        # The generation the read starts on names each message's topic in its receipt (and
        # so in the origin its session's linked memory stamps): read records carry none.
        generation = (await self.laser.log.describe_topic(self.topic)).generation
        if self._stopped or self._group is not None:
            return  # stopped, or started by another call, while it looked
        self._generation = generation
        self._positions = dict(start)
        self._read_failed = None
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._listener = self._group.create_task(
            self._listen(start), name=f"laser-agent-{self.agent_id}"
        )
        if self._driver is not None:
            await self._driver.start()
        self._ready.set()

    async def ready(self) -> Agent:
        """Wait until the agent listens; returns it."""
        await self._ready.wait()
        return self

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until every message on the sessions topic when called has been handled
        (or skipped: another agent's); raises `WaitTimeout` after ``timeout`` seconds."""
        timeout = inputs.wait_seconds(timeout)
        ends = await self.laser.log.end_offsets(self.topic)

        def done() -> bool:
            if self._read_failed is not None:
                return True
            return all(self._positions.get(p, 0) >= end for p, end in ends.items())

        try:
            async with asyncio.timeout(timeout), self._progress:
                await self._progress.wait_for(done)
        except TimeoutError:
            raise WaitTimeout(
                f"agent {shown(self.agent_id)} has not handled the messages sent so far within "
                f"{timeout}s ({self.handled} handled, {self.failures.total} failed)"
            ) from None
        if self._read_failed is not None:
            raise self._read_failed

    async def stop(self) -> None:
        """Stop the timer and the listener; a message being handled is cancelled. Safe
        to call twice."""
        self._stopped = True
        self._ready.clear()
        if self._driver is not None:
            await self._driver.stop()
        if self._group is None:
            return
        group, self._group = self._group, None
        if self._listener is not None:
            self._listener.cancel()
        await group.__aexit__(None, None, None)

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __del__(self) -> None:
        if getattr(self, "_group", None) is not None:
            warnings.warn(
                f"agent {shown(self.agent_id)} was never stopped; await agent.stop()",
                ResourceWarning,
                stacklevel=1,
            )

    async def _listen(self, start: dict[int, int]) -> None:
        try:
            async for batch in self.laser.log.read(self.topic, start, follow=True):
                for log_record in batch:
                    await self._handle(log_record)
                    async with self._progress:
                        self._positions[log_record.partition] = log_record.offset + 1
                        self._progress.notify_all()
        except Exception as exc:
            # Kept and raised by `drain`, not left to the task group: its parent, the
            # task that called `start`, is long done, so asyncio would only log it.
            self._read_failed = exc
            self.failures.keep(exc)
            async with self._progress:
                self._progress.notify_all()

    async def _handle(self, log_record: LogRecord) -> None:
        try:
            record = decode_session(log_record.value)
        except RecordDecodeError as exc:
            self.failures.keep(exc)
            return
        if record.agent != self.agent_id:
            return
        if self._tenant is not None and record.tenant != self._tenant:
            return  # another tenant's message: an agent of a bound connection never sees it
        source = Appended(
            topic=log_record.topic,
            partition=log_record.partition,
            offset=log_record.offset,
            append_time_ms=log_record.append_time_ms,
            generation=self._generation,
        )
        message = AgentMessage(
            agent=record.agent,
            payload=record.payload,
            conversation=record.conversation,
            tenant=record.tenant,
            source=source,
            session=None,  # type: ignore[arg-type]  # set just below: it needs the message
        )
        msgspec.structs.force_setattr(message, "session", Session(self, message))
        try:
            result = self.handler(message)
            if inspect.isawaitable(result):
                await result
            self.handled += 1
        except Exception as exc:  # one failed message must not stop the agent
            self.failures.keep(exc)
