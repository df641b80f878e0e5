"""Search index snapshots beside a managed view, so a reading process need not build
its search index from every item of the view.

A reader's first text recall builds the read's `SearchIndex` from the view: minutes at
a million items, in every process that reads (the CLI, each HTTP server). With
snapshots, the reader that built an index saves it here; the next process loads it and
catches up from the view's ``changes`` log, which numbers every item change since the
view was made, so a snapshot at change ``seq`` plus the changes after it is exactly the
index a full build would make (a property test holds the two to the same answers).

Files, in ``<view>/search/``: ``<read>.idx`` the index (which read it serves, the view
epoch and change number it reflects, the name and layout of its array file) and
``<read>-<token>.arrays`` its arrays (slot columns, term runs, posting lists, vectors:
nearly all of it) one after another, 64-byte aligned, which a reader maps
copy-on-write instead of holding copies: only pages it changes take memory of its own.
Each file is written under a temporary name, synced and renamed, so a reader sees a
whole snapshot or the one before. One process at a time saves a read's snapshot: it
holds ``<read>.lock``, and another waits for it (up to `SAVE_WAIT_S`, then leaves its
snapshot unsaved rather than hang a recall on a stuck process). A save removes the
read's older array files once its index names its own, and two processes saving at once
removed each other's, leaving an index that named a file no longer there. A reader that
finds its array file gone (a save replaced it between the reader's two opens) reads the
index again, once.

A snapshot is a cache. One that cannot be used (another format, another epoch of the
view, a torn or foreign file, bytes changed in place, which its CRC-32s tell, a clock set
back) is passed over and the index is built
from the view; one that cannot be written (a read-only folder, a full disk) leaves the
read as it was. Both are counted in `IndexSnapshots.errors` with the reason.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import mmap
import os
import re
import stat
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from typing import BinaryIO

import msgspec
import numpy as np

from laser_memory.errors import shown
from laser_memory.search_index import SearchIndex, SnapshotError
from laser_memory.terms import ANALYZER

__all__ = ["SAVE_WAIT_S", "SNAPSHOTS_FROM", "IndexSnapshots", "Read"]

#: Indexes with fewer entries than this are not saved. From here up a process that
#: loads a snapshot starts searching several times sooner than one that builds the
#: index (a fresh process's first semantic recall at 384 dimensions: 7 ms against
#: 33-37 at 1,000 items, 8-11 against 73-86 at 2,000, 13-17 against 117-142 at
#: 5,000), and saving and loading it back costs the reader that built it about two
#: thirds of its build at 1,000 items, once. Smaller indexes build in less than
#: that (about 3.5 ms a hundred items), not worth a file each.
SNAPSHOTS_FROM = 1_000

# 4: CRC-32s of the snapshot (see `_checksum`). 5: the terms' analyzer. 6: the moment
# a built index left expired entries out at (format 5 saved none for a build, so a reader
# whose clock was behind loaded it and missed items not yet expired at its moment).
_FORMAT = 6

# The names of the files this module writes (a read's index, array and lock files, and
# their temporary names): the only ones it ever removes. ``<view>/search/`` may be a
# folder of the user's own (a view made in a folder that had one), and a rebuild removed
# every file in it.
_OURS = re.compile(r"[0-9a-f]{32}(\.idx|-[0-9a-f]{16}\.arrays|\.lock)(\.\d+\.\d+\.tmp)?")

#: How long a save waits for another process's save of the same read (a million-item
#: snapshot writes about 2 GB) before it gives up and leaves its own unsaved.
SAVE_WAIT_S = 120.0

# An array file is checked in chunks of this many bytes, each with its own CRC-32, on
# up to `_CHECK_THREADS` threads at once (zlib's CRC and the reads let go of the GIL),
# each reading its chunk `_CHECK_READ` bytes at a time into a buffer of its own.
_CHECK_CHUNK = 32 << 20
_CHECK_THREADS = max(1, min(4, os.cpu_count() or 1))
_CHECK_READ = 4 << 20

# The dtypes an index's arrays have; a layout naming another is refused.
_DTYPES = frozenset({"|u1", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8", "|b1"})


class _ArrayAt(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int


class _SnapshotFile(msgspec.Struct, array_like=True):
    format: int
    analyzer: str  # `laser_memory.terms.ANALYZER` where it was saved
    read: bytes  # the read's key (tenant, namespace, conversation, embedder, superseded)
    epoch: bytes | None
    seq: int
    arrays: str  # the array file's name
    layout: list[_ArrayAt]
    index: bytes
    chunks: list[int]  # the CRC-32 of each `_CHECK_CHUNK` bytes of the array file
    checksum: int  # `_checksum` of the fields above


class _Format(msgspec.Struct, array_like=True):
    """The first field of every snapshot's index file, of any format: the rest of an
    older format's fields may not decode as this format's."""

    format: int


class _SnapshotHead(msgspec.Struct, array_like=True):
    """The first fields of a `_SnapshotFile` (the rest are passed over unread)."""

    format: int
    analyzer: str
    read: bytes
    epoch: bytes | None
    seq: int


#: A read as its snapshot names it: (tenant, namespace, conversation, embedder label,
#: superseded).
Read = tuple[str, str, str | None, str | None, bool]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_SnapshotFile)
_format_decoder = msgspec.msgpack.Decoder(_Format)
_head_decoder = msgspec.msgpack.Decoder(_SnapshotHead)
_read_decoder = msgspec.msgpack.Decoder(Read)


def _checksum(file: _SnapshotFile) -> int:
    """CRC-32 of every field of a snapshot's index file but this one; with ``chunks``,
    the CRC-32s of its array file, the whole snapshot is checked. A snapshot is a cache
    whose damage must not change an answer: a bit flipped in its arrays (a vector, a
    weight, a posting's generation) or in its change number was read as it was, and
    answered differently from the view or failed the recall with a raw `IndexError`.
    CRC-32, as Kafka checks its record batches: zlib's, with the file read, runs at about
    2.5 GB/s a thread here, and the chunks are checked on several threads."""
    head = _encoder.encode(
        (
            file.format,
            file.analyzer,
            file.read,
            file.epoch,
            file.seq,
            file.arrays,
            file.layout,
            file.chunks,
        )
    )
    return zlib.crc32(file.index, zlib.crc32(head))


class _ChunkCrcs:
    """The CRC-32 of each `_CHECK_CHUNK` bytes of a stream written piece by piece."""

    def __init__(self) -> None:
        self.crcs: list[int] = []
        self._crc = self._filled = 0

    def add(self, data: memoryview | bytes) -> None:
        data = memoryview(data)
        while data:
            take = min(len(data), _CHECK_CHUNK - self._filled)
            self._crc = zlib.crc32(data[:take], self._crc)
            self._filled += take
            data = data[take:]
            if self._filled == _CHECK_CHUNK:
                self.crcs.append(self._crc)
                self._crc = self._filled = 0

    def done(self) -> list[int]:
        if self._filled:
            self.crcs.append(self._crc)
            self._crc = self._filled = 0
        return self.crcs


def _pread_into(fd: int, view: memoryview, at: int) -> int:
    """Read into ``view`` from offset ``at`` of ``fd``; the bytes read. ``os.preadv``
    where there is one; macOS's Python has none, and reading there failed every load with
    a raw AttributeError."""
    if _PREADV is not None:
        return _PREADV(fd, [view], at)
    data = os.pread(fd, len(view), at)
    view[: len(data)] = data
    return len(data)


_PREADV = getattr(os, "preadv", None)


def _chunks_match(fd: int, size: int, crcs: list[int]) -> bool:
    """Whether the file at ``fd`` (``size`` bytes) has these chunk CRC-32s. Read with
    ``pread``, not through a map: the pages a reader never uses (vectors of clusters it
    never scans) stay out of its resident set."""
    if len(crcs) != -(-size // _CHECK_CHUNK):
        return False

    def chunk_crc(index: int) -> int:
        crc = 0
        at, end = index * _CHECK_CHUNK, min(size, (index + 1) * _CHECK_CHUNK)
        # A buffer mapped apart and unmapped after: a bytearray freed on a worker thread
        # stayed in glibc's heaps (8 MB more of a reader's own memory for good).
        with mmap.mmap(-1, _CHECK_READ) as buffer, memoryview(buffer) as view:
            while at < end:
                read = _pread_into(fd, view[: min(_CHECK_READ, end - at)], at)
                if read <= 0:
                    return -1  # cut short since it was measured: no CRC is negative
                crc = zlib.crc32(view[:read], crc)
                at += read
        return crc

    if len(crcs) == 1 or _CHECK_THREADS == 1:
        return all(chunk_crc(i) == crc for i, crc in enumerate(crcs))
    with concurrent.futures.ThreadPoolExecutor(_CHECK_THREADS) as pool:
        return list(pool.map(chunk_crc, range(len(crcs)))) == crcs


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file: never through a link, and a
    device or a pipe is refused rather than read without end or waited on (a file
    planted in the folder must not hang or mislead a reader). `OSError` otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.path.basename(path)} is not a regular file")
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class IndexSnapshots:
    """The snapshots of one view's search indexes, at ``<view>/search``. ``keep_from``:
    the fewest entries an index has for it to be saved (None: never save)."""

    def __init__(self, view_path: str, *, keep_from: int | None = SNAPSHOTS_FROM) -> None:
        self.path = os.path.join(view_path, "search")
        self.keep_from = keep_from
        #: Why snapshots could not be read or written, newest last (at most 100).
        self.errors: deque[str] = deque(maxlen=100)
        self._lock = threading.Lock()

    def _names(self, read: tuple) -> tuple[bytes, str]:
        key = _encoder.encode(read)
        # Named by the terms' analyzer too: readers whose terms differ (another
        # PyStemmer, another Python's Unicode tables) each keep a snapshot of their own,
        # where they rebuilt over each other's at every start.
        return key, hashlib.blake2b(key + ANALYZER.encode(), digest_size=16).hexdigest()

    def load(self, read: tuple, epoch: bytes | None) -> tuple[SearchIndex, int] | None:
        """The saved index of ``read`` for this epoch of the view, and the change number
        it reflects; None when there is none that can be used."""
        _, name = self._names(read)
        for attempt in range(2):
            saved = self._file(read, epoch)
            if saved is None:
                return None
            try:
                arrays = self._map(name, saved)
                return SearchIndex.from_snapshot(saved.index, arrays), saved.seq
            except FileNotFoundError as exc:
                if attempt:  # replaced twice while it was read: passed over
                    self.errors.append(f"snapshot {name} unusable: {exc}")
            except (OSError, ValueError, TypeError) as exc:  # SnapshotError: ValueError
                self.errors.append(f"snapshot {name} unusable: {exc}")
                return None
        return None

    def writable(self) -> bool:
        """Whether a snapshot could be saved here: the folder (or the view's, before it
        is made) is one this process may write in."""
        if os.path.isdir(self.path):
            return os.access(self.path, os.W_OK | os.X_OK)
        parent = os.path.dirname(self.path)
        return not os.path.exists(self.path) and os.access(parent, os.W_OK | os.X_OK)

    def reads(self) -> list[Read]:
        """The reads that have a snapshot here, of this format (of any view epoch: a
        rebuild's snapshots are stale, and `laser-memory rebuild` lists them before it
        empties the view, to make them again afterwards). A file that is no snapshot of
        the read its name says is passed over, its reason in ``errors``."""
        return [read for read, _, _ in self.saved()]

    def saved(self) -> list[tuple[Read, bytes | None, int]]:
        """Each snapshot here of this format: (its read, the view epoch and the change
        number it reflects), by file name. See `reads`."""
        try:
            names = sorted(name for name in os.listdir(self.path) if name.endswith(".idx"))
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.errors.append(f"snapshots in {self.path} not listed: {exc}")
            return []
        found = []
        for name in names:
            try:
                with _open_regular(os.path.join(self.path, name)) as file:
                    raw = file.read()
                if _format_decoder.decode(raw).format != _FORMAT:
                    # An older release's: its fields are not this format's (reported
                    # as unreadable after every upgrade), and no reader of this one uses it.
                    continue
                head = _head_decoder.decode(raw)
                read = _read_decoder.decode(head.read)
            except (OSError, msgspec.DecodeError) as exc:
                self.errors.append(f"snapshot {name} unreadable: {exc}")
                continue
            if f"{self._names(read)[1]}.idx" != name:
                continue  # a file named for another read, or under another analyzer
            found.append((read, head.epoch, head.seq))
        return found

    def file_of(self, read: tuple) -> str:
        """The path of the index file of ``read``'s snapshot (it may not exist)."""
        _, name = self._names(read)
        return os.path.join(self.path, f"{name}.idx")

    def has(self, read: tuple) -> bool:
        """Whether a snapshot of ``read`` was saved (it may still be one `load` passes
        over: of an older epoch, torn). Reads no file: reading a large one only to learn
        this cost a reader its heap (a freed 14 MB buffer raised glibc's threshold for
        mapping large blocks apart, and the load's own buffers then stayed in the heap)."""
        return os.path.exists(self.file_of(read))

    def _file(self, read: tuple, epoch: bytes | None) -> _SnapshotFile | None:
        key, name = self._names(read)
        try:
            with _open_regular(os.path.join(self.path, f"{name}.idx")) as file:
                saved = _decoder.decode(file.read())
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as exc:
            self.errors.append(f"snapshot {name}.idx unreadable: {exc}")
            return None
        if saved.format != _FORMAT or saved.read != key or saved.epoch != epoch:
            return None  # another format, read or epoch of the view: a rebuild made it stale
        if saved.analyzer != ANALYZER:
            # Saved where text split into other terms (another stemmer or Unicode): its
            # postings would miss the words whose terms changed.
            self.errors.append(
                f"snapshot {name} unusable: its terms are of {shown(saved.analyzer)}, "
                f"and this process makes them with {ANALYZER}"
            )
            return None
        return saved

    def _map(self, name: str, saved: _SnapshotFile) -> dict[str, np.ndarray]:
        """The snapshot's arrays, views of its array file mapped copy-on-write."""
        if os.sep in saved.arrays or not saved.arrays.startswith(f"{name}-"):
            raise SnapshotError(f"array file {shown(saved.arrays)} is not this read's")
        if _checksum(saved) != saved.checksum:
            raise SnapshotError("its checksum does not match: its index file was damaged")
        with _open_regular(os.path.join(self.path, saved.arrays)) as file:
            if not _chunks_match(file.fileno(), os.fstat(file.fileno()).st_size, saved.chunks):
                raise SnapshotError(f"its checksum does not match: {saved.arrays} was damaged")
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        arrays = {}
        for at in saved.layout:
            if at.dtype not in _DTYPES or any(n < 0 for n in at.shape) or at.offset < 0:
                raise SnapshotError(f"array {shown(at.name)} has an unknown layout")
            count = int(np.prod(at.shape, dtype=np.int64))
            # Views of the map keep it open; np.frombuffer checks the file holds them.
            array_ = np.frombuffer(mapped, dtype=np.dtype(at.dtype), count=count, offset=at.offset)
            arrays[at.name] = array_.reshape(at.shape)
        return arrays

    def save(self, read: tuple, epoch: bytes | None, seq: int, index: SearchIndex) -> bool:
        """Save ``index`` as the snapshot of ``read`` at change ``seq``, if it is large
        enough to be worth it; True if saved."""
        if self.keep_from is None or len(index) < self.keep_from:
            return False
        key, name = self._names(read)
        data, arrays = index.snapshot()
        layout: list[_ArrayAt] = []
        crcs = _ChunkCrcs()

        def write_arrays(file) -> None:
            offset = 0
            for array_name, array_ in arrays.items():
                array_ = np.ascontiguousarray(array_)
                padding = bytes(-offset % 64)
                file.write(padding)
                offset += len(padding)
                layout.append(_ArrayAt(array_name, array_.dtype.str, array_.shape, offset))
                raw = memoryview(array_.reshape(-1).view(np.uint8))
                file.write(raw)
                crcs.add(padding)
                crcs.add(raw)
                offset += array_.nbytes

        with self._lock, contextlib.ExitStack() as held:
            try:
                os.makedirs(self.path, exist_ok=True)
                if not held.enter_context(self._saving(name)):
                    self.errors.append(
                        f"snapshot {name} not saved: another process held its lock for "
                        f"{SAVE_WAIT_S:g} s"
                    )
                    return False
                arrays_name = f"{name}-{os.urandom(8).hex()}.arrays"
                self._write(arrays_name, write_arrays)
                file = _SnapshotFile(
                    _FORMAT, ANALYZER, key, epoch, seq, arrays_name, layout, data, crcs.done(), 0
                )
                file.checksum = _checksum(file)
                self._write(f"{name}.idx", lambda f: f.write(_encoder.encode(file)))
            except OSError as exc:
                self.errors.append(f"snapshot {name} not saved: {exc}")
                return False
            # Older array files of this read (no other save is under way): a reader that
            # opened one keeps its map. And the temporary files of saves killed before
            # they renamed theirs (a reader killed while it saved): none is being
            # written while this save holds the lock, and each was as large as a
            # snapshot (a million items' couple of GB), left for ever. And this read's
            # snapshot of releases before format 5, named without the analyzer: no
            # reader of this release lists or loads it.
            legacy = hashlib.blake2b(key, digest_size=16).hexdigest()
            for other in os.listdir(self.path):
                if (
                    (
                        other.startswith((f"{name}-", f"{name}.idx."))
                        or other.startswith((f"{legacy}-", f"{legacy}.idx"))
                    )
                    and other != arrays_name
                    and _OURS.fullmatch(other)
                ):
                    try:
                        os.unlink(os.path.join(self.path, other))
                    except OSError as exc:
                        self.errors.append(f"old snapshot file {other} not removed: {exc}")
        return True

    @contextlib.contextmanager
    def _saving(self, name: str) -> Iterator[bool]:
        """Hold the lock on saving this read's snapshot: True once held, False if
        another process held it for `SAVE_WAIT_S`. Never through a link: a lock file
        planted as one must not open its target."""
        fd = os.open(
            os.path.join(self.path, f"{name}.lock"),
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"the lock file {name}.lock is not a regular file")
            deadline = time.monotonic() + SAVE_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.05)
            yield True
        finally:
            os.close(fd)  # which lets go of the lock

    def remove_all(self) -> list[str]:
        """Remove every snapshot (the view was emptied); a reader that mapped one keeps
        its map. Returns the files that could not be removed: they stay harmless (a
        reader passes over a snapshot of another epoch) until a save replaces them."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.errors.append(f"snapshots in {self.path} not listed: {exc}")
            return [self.path]
        kept = []
        for name in names:
            if name.endswith(".lock"):  # a saver may hold it: the file must stay the one locked
                continue
            if not _OURS.fullmatch(name):  # never ours to remove
                continue
            try:
                os.unlink(os.path.join(self.path, name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.errors.append(f"old snapshot {name} not removed: {exc}")
                kept.append(name)
        return kept

    def _write(self, name: str, write) -> None:
        final = os.path.join(self.path, name)
        temporary = f"{final}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            # A new file of our own: one a crash left under this name goes first, and a
            # link planted here is removed, never written through.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            fd = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
            )
            with open(fd, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, final)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
