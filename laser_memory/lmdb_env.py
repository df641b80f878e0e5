"""One LMDB environment per folder per process, shared and reference counted.

LMDB forbids opening one environment twice in a process (closing either copy
breaks the other's locks), yet a process may well hold a log and a view on
the same folder, or two handles on one log. Everything that opens LMDB goes
through `SharedEnvironments`.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from typing import ClassVar

import lmdb

from .errors import ConfigError, shown

__all__ = [
    "MAX_MAP_SIZE",
    "SharedEnvironments",
    "StaleReaders",
    "check_map_size",
    "folder_path",
    "open_failure",
    "real_folder",
    "write_failure",
]

#: The largest map size LMDB takes (a size_t). What a machine can map is less: its free
#: address space, which `SharedEnvironments.acquire` finds out and says so.
MAX_MAP_SIZE = (1 << 64) - 1


def folder_path(path: object, what: str) -> str:
    """``path`` as a str, for the folder of an LMDB environment; `ConfigError` for
    anything that is no path, an empty one (which would name the working directory), one
    with a NUL byte (which no file name holds: the OS would refuse it with a raw
    ``ValueError`` at the first use) and one that starts or ends with white space.

    >>> folder_path("./laser-data", "a local log's path")
    './laser-data'
    """
    try:
        text = os.fsdecode(os.fspath(path))  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(f"{what} is a str or os.PathLike, got {type(path).__name__}") from None
    if not text:
        raise ConfigError(f"{what} is empty; name the folder")
    if "\x00" in text:
        raise ConfigError(f"{what} {shown(text)} holds a NUL byte, which no file name can")
    if text != text.strip():
        # "local:// " made a folder named " ", and "./data " one beside ./data: white
        # space a copy or a quote picked up, not a folder anyone means to name.
        raise ConfigError(
            f"{what} {shown(text)} starts or ends with white space; remove it (spaces "
            "inside the path are fine)"
        )
    check_utf8_path(text, what)
    return text


def real_folder(path: str, what: str) -> str:
    """The real path of the folder ``path`` names (links resolved: `SharedEnvironments`
    knows one environment by it), `ConfigError` when a link on the way cannot be read.
    Python before 3.13 raised that ``OSError`` raw (a ``/proc/<pid>/root`` a process may
    not follow); 3.13 leaves such a link as it is, and the open then says what is wrong.

    >>> real_folder("/tmp/../tmp/laser-data", "a local log's path")
    '/tmp/laser-data'
    """
    try:
        return os.path.realpath(path)
    except OSError as exc:
        raise ConfigError(
            f"cannot resolve {what} {shown(path)}: {exc.strerror or exc}; name a folder "
            "this process may reach"
        ) from None


def check_utf8_path(path: str, what: str) -> None:
    """Refuse a path that is no UTF-8 (`ConfigError`). A POSIX name may be any bytes
    (Python holds the others as lone surrogates), but LMDB's binding opens UTF-8 paths
    only: it raised a raw ``UnicodeEncodeError`` after the folder was made."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            f"{what} {shown(path)} is no UTF-8, and LMDB opens only UTF-8 paths; choose a "
            "folder whose path is UTF-8"
        ) from None


def check_map_size(value: object, what: str) -> None:
    """Refuse a map size that is no int from 1 to `MAX_MAP_SIZE` (`ConfigError`)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MAP_SIZE:
        raise ConfigError(
            f"{what} is a whole number of bytes from 1 to 2**64-1, got {shown(value)}"
        )


#: Free bytes below which a failed write is put down to a full disk: LMDB grows its file a
#: page at a time, so a disk it filled has next to nothing left.
_NEARLY_FULL = 1 << 20


def write_failure(path: str, exc: lmdb.Error) -> str:
    """What to say of a write to the environment at ``path`` that LMDB failed: its error,
    and when the disk holding it is full, that (LMDB reports a full disk met in a commit
    as an I/O error, which says nothing of what to do).

    >>> write_failure("/nonexistent", lmdb.Error("mdb_put: Input/output error"))
    'mdb_put: Input/output error'
    """
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return str(exc)
    if free >= _NEARLY_FULL:
        return str(exc)
    return (
        f"{exc}; the disk holding it is full ({free} bytes free): free some space, and the "
        "next write takes it (nothing of this one was written)"
    )


def _check_length(env: lmdb.Environment, path: str) -> None:
    """Refuse a data file shorter than the pages its last commit uses: LMDB maps the
    file, and reading a page past its end kills the process with SIGBUS."""
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    if size < needed:
        raise lmdb.CorruptedError(
            f"its data.mdb is {size} bytes, shorter than the {needed} bytes its pages take: "
            "the file was cut short (copied while it was written, or its disk failed)"
        )


def _check_databases(env: lmdb.Environment, path: str, names: tuple[str, ...], what: str) -> None:
    """Refuse an environment that another store made: one whose databases are all
    another store's. Sharing it would mix the two, and deleting either folder would
    delete both. Neither store writes anything else in the main database, so its keys
    are exactly the named databases that exist. (A folder that already holds both, made
    before this check, stays usable: refusing its log would lock its data away.)"""
    with env.begin() as txn:
        present = {
            bytes(key).decode("utf-8", "replace") for key in txn.cursor().iternext(values=False)
        }
    foreign = sorted(present - set(names))
    if not foreign or present & set(names):
        return
    raise _another_store(path, foreign, what)


def _another_store(path: str, foreign: list[str], what: str) -> ConfigError:
    """The error for a folder that holds another store's databases (``foreign``)."""
    other = (
        "a local log"
        if {"records", "heads"} & set(foreign)
        else "a managed view"
        if {"items", "meta"} & set(foreign)
        else "another store"
    )
    return ConfigError(
        f"{path} holds {other} (its databases {', '.join(foreign)}), so it cannot also be "
        f"{what}: give {what} a folder of its own"
    )


#: LMDB's errors that mean the file itself is damaged.
DAMAGED = (lmdb.CorruptedError, lmdb.InvalidError, lmdb.PageNotFoundError)


def open_failure(exc: BaseException, damaged_hint: str) -> str:
    """What to say of an environment LMDB could not open: its error, and what to do
    when the file is damaged (``damaged_hint``) or on a read-only file system.

    >>> open_failure(lmdb.Error("/x: Read-only file system"), "rebuild it")[:40]
    '/x: Read-only file system; LMDB writes i'
    """
    if isinstance(exc, DAMAGED):
        return f"{exc}; the file is damaged: {damaged_hint}"
    if isinstance(exc, FileExistsError | NotADirectoryError):
        # "File exists" said nothing of what was wrong: the path names a file.
        return f"{exc}; the path, or a part of it, is a file, not a folder: name a folder"
    if isinstance(exc, lmdb.Error) and "Read-only file system" in str(exc):
        return (
            f"{exc}; LMDB writes its lock file even to read, so a folder on read-only "
            "storage cannot be opened: copy it to writable storage"
        )
    if isinstance(exc, lmdb.Error) and str(exc) == f"mdb_txn_begin: {_PID_TAKEN}":
        # LMDB marks a reading process by locking the byte of its process id in the
        # lock file: two processes with one id, each process 1 of its own container,
        # cannot both read (and a process that got in first is unaffected).
        return (
            f"{exc}: another process with this process's id reads this folder, from "
            "another PID namespace (each container numbers its processes from 1). "
            "Processes that share a folder must share a PID namespace: run them in one "
            "container, or give this one the other's (docker run --pid container:NAME, "
            'compose pid: "service:NAME")'
        )
    return str(exc)


#: What LMDB says when the byte of this process's id in the lock file is taken.
_PID_TAKEN = os.strerror(errno.EAGAIN)


class StaleReaders:
    """Frees the reader slots of processes that died inside a read transaction.

    A reader marks its slot with the transaction it reads; a process killed before the
    transaction ended (SIGKILL, the OOM killer, a container stopped) leaves that mark,
    and LMDB then reuses no page freed after it: every later write grows the file (a
    thousand-record item rewritten 200 times grew a 3 MB file to 170 MB). LMDB clears
    such slots only when asked (``mdb_reader_check``: one lock probe per process in the
    table), so each writer asks at most once every ``every_s`` seconds, from the thread
    it writes on, and every process asks when it opens a folder."""

    def __init__(self, env: lmdb.Environment, every_s: float = 1.0) -> None:
        self._env = env
        self._every_s = every_s
        self._next = 0.0

    def clear(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._every_s
            self._env.reader_check()


class SharedEnvironments:
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _envs: ClassVar[dict[str, tuple[lmdb.Environment, int, dict[str, object]]]] = {}

    @classmethod
    def acquire(
        cls,
        path: str,
        names: tuple[str, ...],
        *,
        map_size: int,
        sync: bool = True,
        what: str = "this store",
    ) -> tuple[lmdb.Environment, dict]:
        """The environment at ``path`` with its named databases, opened once per process.
        An environment that holds databases of another store (a view's folder opened as
        a log, or the other way round) is refused with `ConfigError`, ``what`` naming
        the store in the message, before anything is created in it."""
        check_utf8_path(path, what)  # as resolved: a link may lead to a path that is not
        with cls._lock:
            entry = cls._envs.get(path)
            if entry is not None:
                env, count, dbs = entry
                if any(n not in dbs for n in names):
                    # Open here as the other store: the same misuse as one found on disk.
                    raise _another_store(path, sorted(dbs), what)
                cls._envs[path] = (env, count + 1, dbs)
                return env, dbs
            if path in cls._inherited:
                # LMDB opens a folder once per process, and the parent's copy is still
                # here: the child cannot open its own.
                raise lmdb.Error(
                    f"{path} was open in the process this one was forked from, and LMDB "
                    "cannot open it again after a fork; open it in a process started with "
                    "multiprocessing's 'spawn' or 'forkserver' method, or fork before "
                    "opening it"
                )
            os.makedirs(path, exist_ok=True)
            try:
                env = lmdb.open(
                    path,
                    map_size=map_size,
                    max_dbs=len(names) + 1,
                    sync=sync,
                    metasync=sync,
                    max_readers=512,
                )
            except lmdb.MemoryError:
                # LMDB reserves the whole map as address space when it opens.
                raise ConfigError(
                    f"cannot map {map_size} bytes for {path}: more address space than this "
                    "process has free; lower map_size (64 GiB, the default, suits most)"
                ) from None
            try:
                _check_length(env, path)
                _check_databases(env, path, names, what)
            except BaseException:
                env.close()
                raise
            dbs = {name: env.open_db(name.encode()) for name in names}
            env.reader_check()  # slots of processes that died reading (see StaleReaders)
            cls._envs[path] = (env, 1, dbs)
            return env, dbs

    #: Folders whose environment a parent process had open when it forked this one.
    _inherited: ClassVar[set[str]] = set()

    @classmethod
    def _forget_after_fork(cls) -> None:
        """In a forked child: drop the parent's environments unused and unclosed. LMDB
        allows a fork only if the child never uses them (reader slots carry the opener's
        pid), and closing one here would abort a write transaction the parent had under
        way, releasing its writer lock. A fresh lock too: another thread may have held
        this one at the fork."""
        cls._inherited |= set(cls._envs)
        cls._envs = {}
        cls._lock = threading.Lock()

    @classmethod
    def release(cls, path: str) -> None:
        with cls._lock:
            entry = cls._envs.get(path)
            if entry is None:  # the parent's, dropped in this forked child: left open
                return
            env, count, dbs = entry
            if count == 1:
                del cls._envs[path]
                env.close()
            else:
                cls._envs[path] = (env, count - 1, dbs)


os.register_at_fork(after_in_child=SharedEnvironments._forget_after_fork)
