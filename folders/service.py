"""The folder service: keeps a managed view current from the log.

Run it with ``laser-memory fold --url ... --view PATH``, or from code::

    folder = ViewFolder(log, "prod.agent.memory", "./laser-view")
    await folder.run()                          # until cancelled
    await folder.run(until_caught_up=True)      # to the end offsets seen at start

A reader task reads every partition from the view's watermark and queues
batches; a writer task folds everything queued into one LMDB transaction at a
time (positions included). One folder writes a view at a time (a lock file in
the view folder says which); several folders may keep separate views of one
topic as read replicas.
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from laser_memory.errors import (
    ConfigError,
    InvalidInput,
    LogUnavailable,
    UnknownTopic,
    ViewLocked,
    ViewMismatch,
    shown,
)
from laser_memory.lmdb_env import check_map_size
from laser_memory.log.naming import check_settings, check_topic_name, partitions_changed
from laser_memory.log.port import Log, LogRecord, TopicInfo

from .view import MemoryView, view_path_of

__all__ = ["FolderConfig", "ViewFolder"]

Progress = Callable[[int, dict[int, int]], None]

_ASYNC_PROGRESS = (
    "on_progress is a plain function, called on the folder's loop after each transaction; "
    "an async one would never run: to do async work from it, start a task there "
    "(asyncio.get_running_loop().create_task(...))"
)


def _reported(result: object) -> None:
    """Refuse what a progress callback returned if it is awaitable (a lambda around an
    async function): it would never run."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # no "never awaited" warning on top of the error
        raise InvalidInput(_ASYNC_PROGRESS)


# How many times a folder asks for the log's end offsets, a second apart, before it takes
# a log that ends before its view's positions as behind for good.
_BEHIND_CHECKS = 4


@dataclass(frozen=True, slots=True)
class FolderConfig:
    """``max_transaction_records`` caps one view transaction; ``read_ahead`` is how
    many batches the reader may queue while the writer commits; ``map_size`` is the
    most bytes the view's LMDB map may hold (sparse on disk): past it the folder stops
    with `ViewFull`, and restarting it with a larger map resumes the fold."""

    max_transaction_records: int = 20_000
    read_ahead: int = 16
    max_read_batch: int = 2_000
    map_size: int = 64 << 30

    def __post_init__(self) -> None:
        check_settings(
            self,
            positive_ints=("max_transaction_records", "read_ahead", "max_read_batch", "map_size"),
        )
        check_map_size(self.map_size, "FolderConfig.map_size")


class ViewFolder:
    """Folds one memory topic into the view at ``view_path``."""

    def __init__(
        self,
        log: Log,
        topic: str,
        view_path: str | os.PathLike[str],
        config: FolderConfig | None = None,
    ):
        check_topic_name(topic)
        if not all(callable(getattr(log, m, None)) for m in ("read", "describe_topic")):
            raise ConfigError(
                f"a folder reads a log (a LocalLog, a KafkaLog, laser.log), got {shown(log)}"
            )
        if config is not None and not isinstance(config, FolderConfig):
            raise ConfigError(f"config is a FolderConfig or None, got {type(config).__name__}")
        self._log = log
        self._topic = topic
        self._path = view_path_of(view_path)
        self._config = config or FolderConfig()

    def _lock(self) -> int:
        path = os.path.join(self._path, "folder.lock")
        try:
            os.makedirs(self._path, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot make the view's folder {self._path}: {exc}") from None
        # Never follow a link: a lock file planted as a symlink must not let the folder
        # truncate whatever it points at.
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"cannot open the lock file {path}: {exc}; it must be a regular file "
                "(remove it if it is a link)"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(f"the lock file {path} is not a regular file; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ViewLocked(
                f"the view at {self._path} is being folded by {holder}; one folder writes a "
                "view at a time (use another --view for a replica)"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()}".encode())
        except OSError as exc:  # a full disk, most likely
            os.close(fd)
            raise ConfigError(f"cannot write the lock file {path}: {exc}") from None
        return fd

    def __repr__(self) -> str:
        return f"ViewFolder(topic={self._topic!r}, view={self._path!r}, log={self._log!r})"

    async def _ends_not_behind(self, folded: dict[int, int]) -> dict[int, int]:
        """The log's end offsets, asked again for a few seconds while any is below what
        the view has folded: a Kafka partition's new leader may report a lower end for a
        moment after a failover; a log restored from an older copy stays behind."""
        for _ in range(_BEHIND_CHECKS):
            ends = await self._log.end_offsets(self._topic)
            if all(o <= ends.get(p, 0) for p, o in folded.items()):
                break
            await asyncio.sleep(1.0)
        return ends

    async def _same_topic(self, info: TopicInfo, view: MemoryView) -> None:
        """Refuse to fold what was just read if the topic was deleted since the folder
        began, or deleted and created again: a log reads a topic by name, so those
        records may be the new topic's (Kafka goes on from the same offsets in it).
        Asked after the records were read, so a batch of the new topic is always caught;
        while the log cannot answer (a broker restarting) it is asked again, as nothing
        may be folded until it has."""
        wait = 0.1
        while True:
            try:
                now = await self._log.describe_topic(self._topic)
                break
            except LogUnavailable:
                await asyncio.sleep(wait)
                wait = min(2 * wait, 5.0)
            except UnknownTopic:
                raise UnknownTopic(
                    f"topic {shown(self._topic)} was deleted while the folder ran; the view "
                    f"at {self._path} keeps what it folded before (positions "
                    f"{view.watermark()})"
                ) from None
        if now.generation == info.generation and now.partitions != info.partitions:
            raise partitions_changed(self._topic, info.partitions, now.partitions, "the folder")
        if now.generation != info.generation:
            raise ViewMismatch(
                f"topic {shown(self._topic)} was deleted and created again while the folder "
                f"ran, so nothing more of it was folded: the view at {self._path} holds the "
                f"old topic (positions {view.watermark()}). Rebuild it ('laser-memory "
                "rebuild') to fold the new one"
            )

    async def run(
        self,
        *,
        until_caught_up: bool = False,
        rebuild: bool = False,
        on_progress: Progress | None = None,
    ) -> int:
        """Fold until cancelled (or, with ``until_caught_up``, until the end offsets
        seen at start). ``rebuild`` empties the view first. Returns records folded."""
        for name, flag in (("until_caught_up", until_caught_up), ("rebuild", rebuild)):
            if not isinstance(flag, bool):
                raise InvalidInput(f"{name} is True or False, got {shown(flag)}")
        if on_progress is not None and not callable(on_progress):
            raise InvalidInput(
                "on_progress is a callable taking (records folded, positions), or None"
            )
        if inspect.iscoroutinefunction(on_progress):
            # Called, it made a coroutine no one awaited: never ran, said only by a
            # RuntimeWarning.
            raise InvalidInput(_ASYNC_PROGRESS)
        fd = self._lock()
        try:
            view = MemoryView.open(
                self._path, map_size=self._config.map_size, check_format=not rebuild
            )
        except BaseException:
            os.close(fd)
            raise
        try:
            info = await self._log.describe_topic(self._topic)
            if rebuild:
                await asyncio.to_thread(view.clear)
            view.bind(self._topic, info.generation)
            start = view.watermark()
            ends = await self._ends_not_behind(start)
            ahead = {p: o for p, o in start.items() if o > ends.get(p, 0)}
            if ahead:
                # The log ends before what the view folded: a log restored from an older
                # copy (its new records would take offsets the view holds as folded, and
                # be skipped for ever), or a view of another log.
                raise ViewMismatch(
                    f"the view at {self._path} has folded topic {shown(self._topic)} further "
                    f"than the log holds (partition: folded up to, log ends at: "
                    f"{ {p: (o, ends.get(p, 0)) for p, o in ahead.items()} }): the log was "
                    "restored from an older copy, or the view belongs to another log. "
                    "Rebuild the view ('laser-memory rebuild')"
                )
            until = ends if until_caught_up else None
            queue: asyncio.Queue[list[LogRecord] | None] = asyncio.Queue(self._config.read_ahead)
            folded = 0
            # Set while the reader may read: not while a transaction's writes are made.
            # LMDB lets go of the GIL for each put as for the commit, so a reader running
            # meanwhile takes it at every put, and the put waits for it: the reading and
            # the writing ran one after the other, each slowed. Held back until the
            # commit starts, the reader reads while it runs (a tenth more records a second).
            may_read = asyncio.Event()
            may_read.set()

            async def read() -> None:
                async for batch in self._log.read(
                    self._topic,
                    start,
                    until=until,
                    follow=not until_caught_up,
                    max_batch=self._config.max_read_batch,
                ):
                    await queue.put(batch)
                    await may_read.wait()
                await queue.put(None)

            loop = asyncio.get_running_loop()

            def committing() -> None:  # on the thread that applies
                loop.call_soon_threadsafe(may_read.set)

            async def write() -> None:
                nonlocal folded
                done = False
                while not done:
                    first = await queue.get()
                    if first is None:
                        return
                    batches, count = [first], len(first)
                    while count < self._config.max_transaction_records and not queue.empty():
                        nxt = queue.get_nowait()
                        if nxt is None:
                            done = True
                            break
                        batches.append(nxt)
                        count += len(nxt)
                    await self._same_topic(info, view)
                    # The transaction finishes even if we are cancelled meanwhile: the view
                    # must not be closed under a running commit.
                    may_read.clear()
                    commit = asyncio.ensure_future(
                        asyncio.to_thread(
                            view.apply, batches, info.generation, committing=committing
                        )
                    )
                    try:
                        folded += await asyncio.shield(commit)
                    except asyncio.CancelledError:
                        # However many cancels come (a second Ctrl-C), wait the commit out.
                        while not commit.done():
                            try:
                                await asyncio.wait([commit])
                            except asyncio.CancelledError:
                                continue
                        if not commit.cancelled():
                            # Its records are in the view: the last progress reported
                            # (what `laser-memory fold` prints as it stops) counts them.
                            # A commit that failed raises its failure here: the stop must
                            # not hide it.
                            folded += commit.result()
                            if on_progress is not None:
                                on_progress(folded, view.watermark())
                        raise
                    finally:
                        may_read.set()
                    if on_progress is not None:
                        _reported(on_progress(folded, view.watermark()))

            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(read(), name="laser-folder-read")
                    group.create_task(write(), name="laser-folder-write")
            except BaseExceptionGroup as failed:
                # One task failing cancels the other: raise its error as itself, so a
                # caller catches the LaserError it expects, not a group.
                raise failed.exceptions[0] from None
            return folded
        finally:
            view.close()
            os.close(fd)
