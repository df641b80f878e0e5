"""`Laser`: a connection to a log, with a default stream, that hands out memory handles.

>>> async with connect("local://./laser-data", stream="prod") as laser:   # doctest: +SKIP
...     memory = laser.memory("notes")          # namespace stream:prod/notes
...     await memory.remember("the reporter prefers email", conversation="c-1")
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextvars import Token
from typing import Any

from folders.inprocess import FoldedReader
from folders.view import MemoryView, view_path_of

from . import inputs
from .access import Governor, Principal, bound_tenant, resolve_tenant, validate_governor
from .agent import Agent, AgentMessage, AgentTopic, SessionRecord, encode_session
from .clock import SYSTEM_CLOCK, Clock, validate_clock
from .custom import CustomMemory
from .embedding import Embedder, validate_embedder
from .errors import (
    ConfigError,
    InvalidInput,
    InvalidName,
    LogClosed,
    NoView,
    UnknownTopic,
    ViewMismatch,
    WaitTimeout,
    shown,
)
from .ids import MAX_NAME_BYTES, MemoryId, validate_name
from .log import DEFAULT_URL, KafkaLog, LocalLog, LocalLogConfig, Log, TopicInfo, connect_log
from .log.batcher import AppendBatcher
from .log.naming import validate_topic
from .log.port import Appended, OutgoingRecord
from .memory import MemoryConfig, MemoryHandle
from .writes import WRITE_DEPTH

__all__ = ["AGENT_TOPICS", "ConversationContext", "Laser", "connect"]

#: The agent topics `Laser.bootstrap` creates on a stream.
AGENT_TOPICS = ("agent.memory", "agent.sessions")
MEMORY_TOPIC = "agent.memory"


def _stream_topic(stream: str | None, topic: str) -> str:
    return f"{stream}.{topic}" if stream else topic


_STOPPED = "this connection was stopped; open a new one to write"


class Laser:
    """A log connection with a default stream. Start it with ``async with`` or
    `start`/`stop` (both safe twice); it starts and stops the log it was given.

    >>> async with Laser(LocalLog("./laser-data"), stream="prod") as laser:  # doctest: +SKIP
    ...     await laser.memory("notes").remember("hello")
    """

    def __init__(
        self,
        log: Log,
        *,
        stream: str | None = None,
        config: MemoryConfig | None = None,
        view: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        embedder: Embedder | None = None,
        principal: Principal | None = None,
        governor: Governor | None = None,
        tenant: str | None = None,
    ):
        if not isinstance(log, Log):
            hint = " (for a URL, use connect(url))" if isinstance(log, str | os.PathLike) else ""
            raise ConfigError(
                f"a Laser is made over a Log (a LocalLog, a KafkaLog), got "
                f"{type(log).__name__}{hint}"
            )
        _check_stream(stream)
        if config is not None and not isinstance(config, MemoryConfig):
            raise ConfigError(f"config is a MemoryConfig or None, got {type(config).__name__}")
        clock = validate_clock(clock)
        if principal is not None and not isinstance(principal, Principal):
            raise ConfigError(f"principal is a Principal, got {type(principal).__name__}")
        #: Every handle's tenant, principal and governor unless `memory` is given others.
        self.tenant = bound_tenant(tenant, principal)
        self.principal = principal
        self.governor = validate_governor(governor) if governor is not None else None
        self.log = log
        # Where this connection's memory writes go: those made while another is under
        # way reach the log together, as one append; on Kafka every write waits for its
        # turn's others (see `AppendBatcher`).
        self._appends = AppendBatcher(log, at_once=not isinstance(log, KafkaLog))
        self.clock = clock
        self.embedder = validate_embedder(embedder) if embedder is not None else None
        self.stream = stream
        self.config = config or MemoryConfig()
        self.view_path = view_path_of(view) if view is not None else None
        self._view: MemoryView | None = None
        # Vector-backend handles: (connection, folder) of each private log.
        self._private: list[tuple[Laser, str]] = []
        # Set by stop: a managed read after it (or waiting through it) is LogClosed, as a
        # folded one is, and never reopens the view the stop closed.
        self._stopped = False
        # Writes between their call and the log: embedding their bodies, asking the
        # governor (see `_write_under_way`). A stop waits for them, as for the appends.
        self._writes_under_way = 0
        self._writes_idle: asyncio.Event | None = None
        # With `MemoryConfig.shared_folds`: folds of (topic, namespace, tenant) its
        # handles share while any lives, and the last ones handed out, kept after their
        # handles are gone.
        self._folds: weakref.WeakValueDictionary[tuple[str, str, str | None], FoldedReader] = (
            weakref.WeakValueDictionary()
        )
        self._kept_folds: collections.OrderedDict[tuple[str, str, str | None], FoldedReader] = (
            collections.OrderedDict()
        )

    def __repr__(self) -> str:
        parts = [f"url={shown(self.log.url)}", f"stream={shown(self.stream)}"]
        if self.view_path is not None:
            parts.append(f"view={shown(self.view_path)}")
        if self.tenant is not None:
            parts.append(f"tenant={shown(self.tenant)}")
        return f"Laser({', '.join(parts)})"

    async def __aenter__(self) -> Laser:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the log (safe twice); ``async with`` starts and stops for you.

        >>> laser = connect("local://./laser-data")                    # doctest: +SKIP
        >>> await laser.start()                                         # doctest: +SKIP
        >>> await laser.stop()                                          # doctest: +SKIP
        """
        await self.log.start()

    async def stop(self) -> None:
        """Stop the connection: the writes under way finish first (those still embedding
        their bodies or asking the governor too, and every append), a write begun later is
        `LogClosed` before anything of it is done, and every read is `LogClosed`; then its
        view, its vector memories and its log close.

        >>> await laser.stop()                                          # doctest: +SKIP
        """
        self._stopped = True
        while True:
            while self._writes_under_way:
                # One event for every stop waiting (two stops at once both wake).
                if self._writes_idle is None or self._writes_idle.is_set():
                    self._writes_idle = asyncio.Event()
                await self._writes_idle.wait()
            await self._appends.drain()
            # An append the drain saw fail (its topic missing: the writer makes it and
            # writes again) is a write under way again.
            if not self._writes_under_way:
                break
        if self._view is not None:
            self._view.close()
            self._view = None
        self._kept_folds.clear()  # their memory goes with the connection
        private, self._private = self._private, []
        for laser, folder in private:
            await laser.stop()
            shutil.rmtree(folder, ignore_errors=True)
        await self.log.stop()

    def _fold_for(self, topic: str, namespace: str, tenant: str | None) -> FoldedReader:
        """A fold of a namespace of a topic for one tenant (None: every tenant) for a
        new handle: its own, or with `MemoryConfig.shared_folds` the one this
        connection's handles share, so that one made per request reads only what is
        new since the last one read, not the whole topic again."""
        kept = self.config.shared_folds
        key = (topic, namespace, tenant)
        reader = self._folds.get(key) if kept else None
        if reader is None:
            reader = FoldedReader(
                self.log,
                topic,
                namespace,
                search_cache_bytes=self.config.search_cache_bytes,
                tenant=tenant,
            )
            if not kept:
                return reader
            self._folds[key] = reader
        self._kept_folds[key] = reader
        self._kept_folds.move_to_end(key)
        while len(self._kept_folds) > kept:
            self._kept_folds.popitem(last=False)
        return reader

    @contextlib.contextmanager
    def _write_under_way(self) -> Iterator[None]:
        """Around a write's steps besides the append the log's drain waits for (embedding
        its body, the governor, making a missing topic): `stop` waits for them. A write
        that begins after the stop (not one inside a write begun before: its append after
        its embedding) is `LogClosed`: a stop waited for ever while a task kept writing."""
        token = self._write_begins()
        try:
            yield
        finally:
            self._write_ended(token)

    def _write_begins(self) -> Token[int]:
        """`_write_under_way`'s entry: the write is counted (`stop` waits for it), and the
        running task is inside it (`WRITE_DEPTH`), so its later steps are no new write."""
        depth = WRITE_DEPTH.get()
        if not depth and self._stopped:
            raise LogClosed(_STOPPED)
        self._writes_under_way += 1
        return WRITE_DEPTH.set(depth + 1)

    def _write_ended(self, token: Token[int]) -> None:
        WRITE_DEPTH.reset(token)
        self._one_write_ended()

    def _one_write_begins(self) -> None:
        """`_write_begins` for a write of one step, its append (the plain `remember`): it
        is counted, but the task does not enter it, since no later step of it asks. A
        context variable set and reset was three objects a call for the garbage
        collector (a token and the context's new mapping), a thousand at a time under
        gathered calls; a step it does take after all enters it (`WRITE_DEPTH`)."""
        if self._stopped and not WRITE_DEPTH.get():
            raise LogClosed(_STOPPED)
        self._writes_under_way += 1

    def _one_write_ended(self) -> None:
        self._writes_under_way -= 1
        if not self._writes_under_way and self._writes_idle is not None:
            self._writes_idle.set()

    async def memory_with(
        self, namespace: str, backend: str = "log", *, embedder: Embedder | None = None
    ) -> MemoryHandle:
        """A handle on a namespace with the chosen backend.

        ``"log"`` is `memory`. ``"vector"`` keeps items only for the life of this
        connection, in a private embedded log of its own (no fsync, deleted when the
        connection stops), for scratch memory that should never reach the shared log:
        every strategy works as on the log, and it needs an embedder. Without text a
        recall returns the newest items, feedback-ranked when any has feedback.

        >>> scratch = await laser.memory_with("runbooks", "vector", embedder=e)  # doctest: +SKIP
        """
        if not isinstance(backend, str):
            raise InvalidInput(f"a memory backend is 'log' or 'vector', got {shown(backend)}")
        if backend == "log":
            return self.memory(namespace, embedder=embedder)
        if backend != "vector":
            raise InvalidInput(f"unknown memory backend {shown(backend)}; use 'log' or 'vector'")
        chosen = embedder if embedder is not None else self.embedder
        if chosen is None:
            raise InvalidInput(
                "the vector backend ranks by meaning and needs an embedder: "
                "memory_with(namespace, 'vector', embedder=...)"
            )
        validate_embedder(chosen)
        if self._stopped:
            # Its private log would be started and its folder made with nothing left to
            # stop or delete them: `stop` has run.
            raise LogClosed("this connection was stopped; open a new one for a vector memory")
        folder = tempfile.mkdtemp(prefix="laser-vector-")
        log = LocalLog(folder, LocalLogConfig(sync=False, map_size=4 << 30, clock=self.clock))
        # The connection's tenant, principal and governor hold here too: a scratch memory
        # of a connection bound to acme took another tenant's writes, a principal's
        # missing grants and the governor's refusals were never asked.
        private = Laser(
            log,
            stream=self.stream,
            config=self.config,
            clock=self.clock,
            tenant=self.tenant,
            principal=self.principal,
            governor=self.governor,
        )
        try:
            await private.start()
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._private.append((private, folder))
        return private.memory(namespace, embedder=chosen)

    def memory_custom(self, backend: Any) -> CustomMemory:
        """The memory API over your own store (see `laser_memory.custom`).

        >>> memory = laser.memory_custom(MyStore())                     # doctest: +SKIP
        >>> await memory.remember("hello")                              # doctest: +SKIP
        """
        return CustomMemory(
            backend,
            stream=self.stream or "",
            max_body_bytes=self.config.max_body_bytes,
            tenant=self.tenant,
        )

    def managed_view(self) -> MemoryView:
        """The managed view this connection reads (``connect(..., view=PATH)``).

        >>> laser.managed_view().stats().items                          # doctest: +SKIP
        """
        if self.view_path is None:
            raise NoView(
                "this connection has no managed view; pass view=PATH to connect() "
                "(and run 'laser-memory fold --view PATH'), or use folded=True"
            )
        if self._stopped:
            raise LogClosed("this connection was stopped; open a new one to read its view")
        if self._view is None:
            # A reader never creates a view: a mistyped path says so instead.
            self._view = MemoryView.open(
                self.view_path,
                create=False,
                snapshots_from=self.config.index_snapshots_from,
                build_apart_from=self.config.index_build_apart_from,
                search_cache_bytes=self.config.search_cache_bytes,
            )
        return self._view

    async def view_after(
        self, topic: str, after: Appended | MemoryId | None, timeout: float
    ) -> MemoryView | None:
        """The managed view to read ``topic`` from, once it has folded the write
        ``after`` (a receipt, or the id a write returned), waiting up to ``timeout``
        seconds; None if no folder has written it yet (and there is nothing to wait
        for). A view path where no view exists
        raises `NoView`, unless there is a write to wait for: then a folder may still
        create it within the timeout."""
        receipt, others = inputs.wait_target(topic, after, timeout)
        deadline = time.monotonic() + timeout
        shape_checked = False
        while True:
            try:
                view = self.managed_view()
            except NoView:
                if receipt is None or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.05)
                continue
            folded, generation = view.topic()
            if folded is not None and folded != topic:
                raise ViewMismatch(
                    f"the view at {view.path} folds topic {shown(folded)}, but this handle reads "
                    f"{shown(topic)}"
                )
            if receipt is None:
                return view if folded is not None else None
            if folded is not None and receipt.generation and receipt.generation != generation:
                raise ViewMismatch(
                    f"the receipt is for generation {receipt.generation} of topic "
                    f"{shown(receipt.topic)}, but the view at {view.path} folds generation "
                    f"{generation}: the topic was recreated; rebuild the view, or drop receipts "
                    "from before the topic was recreated"
                )
            if folded is not None and all(view.has_passed(r.position) for r in (receipt, *others)):
                return view
            if not shape_checked:
                # Not folded yet: a partition the topic lacks would be waited on in vain.
                partitions = (await self.log.describe_topic(topic)).partitions
                for one in (receipt, *others):
                    inputs.receipt_fields(one, partitions)
                shape_checked = True
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"the view at {view.path} has not folded {receipt.topic} partition "
                    f"{receipt.partition} offset {receipt.offset} within {timeout}s; is a "
                    "folder running ('laser-memory fold')?"
                )
            await asyncio.sleep(0.01)

    @property
    def memory_topic_name(self) -> str:
        """The default memory topic: ``<stream>.agent.memory``, or ``agent.memory``."""
        return _stream_topic(self.stream, MEMORY_TOPIC)

    async def bootstrap(
        self, partitions: int = 4, retention: float | None = None
    ) -> list[TopicInfo]:
        """Create the stream's agent topics (``agent.memory`` among them). Idempotent.
        ``retention`` is in seconds; None keeps records forever.

        >>> [t.name for t in await laser.bootstrap(partitions=8)]       # doctest: +SKIP
        ['prod.agent.memory', 'prod.agent.sessions']
        """
        return [
            await self.log.create_topic(
                _stream_topic(self.stream, topic), partitions=partitions, retention_s=retention
            )
            for topic in AGENT_TOPICS
        ]

    def memory(
        self,
        namespace: str,
        *,
        embedder: Embedder | None = None,
        tenant: str | None = None,
        principal: Principal | None = None,
        governor: Governor | None = None,
    ) -> MemoryHandle:
        """A handle on a memory namespace. With a default stream, ``"notes"`` becomes
        ``stream:<stream>/notes``; a name starting with ``stream:`` is used as written
        and rides that stream's memory topic. ``embedder`` (default: the connection's)
        embeds every body it remembers and the text of semantic recalls.

        ``tenant`` binds the handle to a tenant: every call acts in it, and a call
        naming another is refused (`AccessDenied`). ``principal`` (default: the
        connection's) binds it to the principal's tenant and checks its grants before
        anything is read or written; ``governor`` (default: the connection's) sees every
        record before it is written. See `laser_memory.access`.

        >>> acme = laser.memory("notes", tenant="acme")               # doctest: +SKIP
        >>> await acme.recall(tenant="globex")                        # doctest: +SKIP
        Traceback (most recent call last):
        laser_memory.errors.AccessDenied: this handle is bound to tenant 'acme'; ...
        """
        namespace, topic, stream = self._placed(namespace)
        return MemoryHandle(
            self,
            namespace=namespace,
            topic=topic,
            stream=stream,
            embedder=embedder if embedder is not None else self.embedder,
            tenant=tenant if self.tenant is None else resolve_tenant(self.tenant, tenant),
            principal=principal if principal is not None else self.principal,
            governor=governor if governor is not None else self.governor,
        )

    def _placed(self, namespace: str) -> tuple[str, str, str]:
        """The namespace a name stands for, its topic and its stream."""
        namespace = validate_name(namespace, "namespace")
        if namespace.startswith("stream:"):
            stream, slash, rest = namespace[len("stream:") :].partition("/")
            if not slash or not rest or not stream:
                raise InvalidName(
                    f"namespace {shown(namespace)} starts with 'stream:' but is not "
                    "'stream:<stream>/<name>'"
                )
            _check_stream(stream)
            return namespace, _stream_topic(stream, MEMORY_TOPIC), stream
        if self.stream:
            # The records carry the prefixed name: checked as written, or a name that
            # fits alone but not with its prefix would be written and set aside by
            # every folder.
            prefixed = f"stream:{self.stream}/{namespace}"
            if len(prefixed.encode()) > MAX_NAME_BYTES:
                raise InvalidName(
                    f"namespace {shown(namespace)} is {len(prefixed.encode())} bytes long with "
                    f"its stream's prefix 'stream:{self.stream}/', and at most {MAX_NAME_BYTES} "
                    "fit in a record; shorten it"
                )
            return prefixed, self.memory_topic_name, self.stream
        return namespace, MEMORY_TOPIC, ""

    def memory_on_topic(self, topic: str, stream: str | None = None) -> MemoryHandle:
        """A handle on an existing topic, using the topic name as the namespace.

        >>> audit = laser.memory_on_topic("audit.memory")               # doctest: +SKIP
        """
        validate_topic(topic)
        _check_stream(stream)
        return MemoryHandle(
            self,
            namespace=topic,
            topic=topic,
            stream=stream or self.stream or "",
            embedder=self.embedder,
            tenant=self.tenant,
            principal=self.principal,
            governor=self.governor,
        )

    async def memory_topic(
        self, topic: str, *, partitions: int = 4, retention: float | None = None
    ) -> MemoryHandle:
        """Create a topic (partitions, retention in seconds) and return a handle on it,
        using the topic name as the namespace.

        >>> scratch = await laser.memory_topic("scratch", retention=86_400.0)  # doctest: +SKIP
        """
        await self.log.create_topic(topic, partitions=partitions, retention_s=retention)
        return self.memory_on_topic(topic)

    async def send_to_agent(
        self,
        agent_id: str,
        payload: str | bytes,
        *,
        conversation: str | None = None,
        tenant: str | None = None,
    ) -> Appended:
        """Put a message for agent ``agent_id`` on the stream's sessions topic (see
        `laser_memory.agent`); returns its receipt. A conversation's messages keep their
        order. ``tenant``: the message's (default: the connection's bound tenant, else
        ``""``); a connection bound to a tenant refuses another (`AccessDenied`).

        >>> await laser.send_to_agent("triage", "ticket 42", conversation="c1")  # doctest: +SKIP
        """
        topic = _stream_topic(self.stream, AgentTopic.SESSIONS)
        if self.principal is not None:  # the connection's principal: it needs the topic's grant
            self.principal.check_publish(topic)
        agent_id = validate_name(agent_id, "agent id")
        if conversation is not None:
            conversation = validate_name(conversation, "conversation")
        tenant = resolve_tenant(self.tenant, tenant)
        data = inputs.body(payload, self.config.max_body_bytes)
        record = SessionRecord(
            agent=agent_id, payload=data, conversation=conversation, tenant=tenant
        )
        with self._write_under_way():  # a stop waits for it, the topic's making too
            [receipt] = await self._append_making_topic(self.log, topic, [encode_session(record)])
        return receipt

    async def spawn_agent(
        self,
        agent_id: str,
        listen_on: AgentTopic,
        handler: Callable[[AgentMessage], Any],
        *,
        memory: MemoryHandle | None = None,
        consolidate_every: float | None = None,
        consolidate_every_ms: int | None = None,
        consolidator: Any = None,
    ) -> Agent:
        """Start an agent listening on the stream's sessions topic for messages to
        ``agent_id`` (sent from now on) and return it, ready; see `laser_memory.agent`.
        ``memory`` (default: the handler's, for a `MemoryHandler`) is what its sessions'
        `linked_memory` and `record_retrieval` write to. ``consolidate_every`` (seconds,
        or ``consolidate_every_ms``) with a ``consolidator`` runs consolidation on a
        timer. Stop it with ``await agent.stop()``.

        >>> agent = await laser.spawn_agent("triage", AgentTopic.SESSIONS, handler)
        ... # doctest: +SKIP
        """
        if not isinstance(listen_on, AgentTopic) or listen_on != AgentTopic.SESSIONS:
            raise ConfigError(f"agents listen on AgentTopic.SESSIONS, got {shown(listen_on)}")
        if consolidate_every is not None and consolidate_every_ms is not None:
            raise ConfigError("give consolidate_every (seconds) or consolidate_every_ms, not both")
        if consolidate_every_ms is not None:
            if isinstance(consolidate_every_ms, bool) or not isinstance(consolidate_every_ms, int):
                raise ConfigError(
                    f"consolidate_every_ms is a whole number of milliseconds, got "
                    f"{shown(consolidate_every_ms)}"
                )
            consolidate_every = consolidate_every_ms / 1000
        topic = _stream_topic(self.stream, AgentTopic.SESSIONS)
        agent = Agent(
            self,
            agent_id,
            handler,
            topic=topic,
            memory=memory,
            consolidate_every=consolidate_every,
            consolidator=consolidator,
        )
        try:
            await self.log.describe_topic(topic)
        except UnknownTopic:
            if not await self._create_missing_topic(topic):
                raise UnknownTopic(
                    f"topic {shown(topic)} does not exist: run laser.bootstrap() (or "
                    "'laser-memory bootstrap') to create the stream's agent topics"
                ) from None
        await agent.start()
        return agent

    def context(self, conversation: str) -> ConversationContext:
        """Handles scoped to one conversation.

        >>> notes = laser.context("support-42").memory("notes")         # doctest: +SKIP
        """
        return ConversationContext(self, validate_name(conversation, "conversation"))

    async def _append_making_topic(
        self, log: Log | AppendBatcher, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Appended]:
        """Append ``records`` through ``log`` (the log, or the connection's batcher);
        a topic missing on the embedded log is made and the append made again."""
        try:
            return await log.append_batch(topic, records)
        except UnknownTopic:
            if not await self._create_missing_topic(topic):
                raise
            return await log.append_batch(topic, records)

    async def _create_missing_topic(self, topic: str) -> bool:
        """On the embedded log a missing memory topic is created on first use, so the
        library works on a fresh machine; Kafka topics come from `bootstrap`."""
        if not isinstance(self.log, LocalLog):
            return False
        await self.log.create_topic(topic, partitions=self.config.default_partitions)
        return True


class ConversationContext:
    """Hands out memory handles that always pass one conversation."""

    def __init__(self, laser: Laser, conversation: str):
        self._laser = laser
        self.conversation = conversation

    def memory(self, namespace: str) -> MemoryHandle:
        return self._laser.memory(namespace).scoped(self.conversation)


#: The longest stream name: each of its agent topics (``<stream>.agent.sessions`` the
#: longest) must be a topic name of at most 249 characters.
MAX_STREAM_CHARS = 249 - len(".") - max(len(topic) for topic in AGENT_TOPICS)


def _check_stream(stream: object) -> None:
    """Refuse a stream name that is neither None nor a topic-safe str whose agent topics
    are topic names too (a longer one made a connection none of whose handles could
    write)."""
    if stream is not None:
        if not isinstance(stream, str):
            raise InvalidName(f"a stream name is a str, got {type(stream).__name__}")
        validate_topic(stream)
        if len(stream) > MAX_STREAM_CHARS:
            raise InvalidName(
                f"stream name {shown(stream)} is {len(stream)} characters long; its topics "
                f"are named '<stream>.agent.sessions', so at most {MAX_STREAM_CHARS} fit"
            )


def connect(
    url: str | None = None,
    *,
    stream: str | None = None,
    config: MemoryConfig | None = None,
    view: str | os.PathLike[str] | None = None,
    create: bool = True,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    principal: Principal | None = None,
    governor: Governor | None = None,
    tenant: str | None = None,
) -> Laser:
    """Connect to the log a URL names: ``local://PATH`` (the default,
    ``$LASER_URL`` or ``local://./laser-data``) or ``kafka://host:port[,host:port]``.
    With ``view=PATH`` (default ``$LASER_VIEW``), recall and fetch read the managed view
    a folder keeps at PATH. With ``create=False`` an embedded log that does not exist
    is an error (`LogUnavailable`) rather than created: use it for read-only work.
    ``clock`` (a `laser_memory.clock.Clock`) stamps random ids and the embedded log's
    append times; tests pass a `SteppedClock`. ``embedder`` (an `Embedder`) is every
    handle's default: bodies are embedded as they are remembered, the vectors and the
    embedder's label go in the records. ``tenant``, ``principal`` and ``governor`` are
    every handle's (see `Laser.memory` and `laser_memory.access`): with a tenant (or a
    principal's), no handle of the connection acts in another.

    >>> async with connect("kafka://127.0.0.1:9092", stream="prod") as laser:  # doctest: +SKIP
    ...     await laser.bootstrap(partitions=8)
    """
    if url is None:
        # An empty $LASER_URL is unset, as a shell reads it; an empty url passed here is
        # a caller's missing setting, refused rather than read as the default folder.
        url = os.environ.get("LASER_URL") or DEFAULT_URL
    return Laser(
        connect_log(url, create=create, clock=clock),
        stream=stream,
        config=config,
        clock=clock or SYSTEM_CLOCK,
        embedder=embedder,
        view=view if view is not None else os.environ.get("LASER_VIEW") or None,
        principal=principal,
        governor=governor,
        tenant=tenant,
    )
