"""Building a large search index in a process of its own, for a reader of the managed
view that has no snapshot of it yet.

A reader's first text recall builds the read's `SearchIndex` from every item of the view
(`MemoryView._search`). The build makes and frees millions of small objects; the
allocators keep the pages they sat on, so a reader that built a million-item index kept
about twice the memory of one that loaded the same index from its snapshot (171 MB
against 82 MB of anonymous memory in `benchmarks.memory`), for as long as it ran. So
when a read would index at least `BUILD_APART_FROM` items and no snapshot of it exists,
the reader starts ``python`` on this module: the child builds the index in a read
transaction of the view, makes its vector clusters if the reader's semantic recalls
would, saves the snapshot and exits. The reader then loads the snapshot exactly as the
next reading process would, and catches up from the view's changes since.

The child is a cache filler: none is started where it could not be (a frozen
application, an embedded interpreter whose ``sys.executable`` is not Python) or could not
save (a view folder the reader may not write in); if it cannot be started or fails, the
reader builds the index itself as before, and the reason is kept in
`IndexSnapshots.errors`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import msgspec

from laser_memory.vector_clusters import ApproximateSearch

from .state import ItemFilter

__all__ = [
    "BUILD_APART_FROM",
    "BuildRequest",
    "build_apart",
    "build_apart_async",
    "can_build_apart",
]

#: Reads over at least this many items build their index in a child process. Below
#: it the build is a few seconds at most and leaves little behind, less than the
#: child's start (an interpreter, numpy, lmdb: 0.3-0.5 s) is worth.
BUILD_APART_FROM = 100_000

# The child's first lines: the reader's import path, so it imports this laser-memory.
_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from folders.index_build import main; main()"
)


class BuildRequest(msgspec.Struct, frozen=True):
    """What the child builds: the index of ``recall(namespace, where)`` on the view at
    ``view``, clustered as a semantic recall with ``approximate`` would cluster it."""

    view: str
    namespace: str
    where: ItemFilter
    approximate: ApproximateSearch | None


def can_build_apart() -> bool:
    """Whether this process can start a Python like itself: not a frozen application,
    and ``sys.executable`` names a Python (an embedding server's may name itself)."""
    if getattr(sys, "frozen", False) or not sys.executable:
        return False
    name = os.path.basename(sys.executable).lower()
    return name.startswith(("python", "pypy")) and os.access(sys.executable, os.X_OK)


def _command() -> list[str]:
    return [sys.executable, "-c", _BOOT, json.dumps([p for p in sys.path if isinstance(p, str)])]


def _outcome(returncode: int, stderr: bytes) -> str | None:
    if returncode == 0:
        return None
    said = stderr.decode(errors="replace").strip()[-2000:] or "no message"
    return f"the process that built the search index failed ({returncode}): {said}"


def build_apart(request: BuildRequest) -> str | None:
    """Run the build of ``request`` in a child process and wait for it: None once it
    saved the snapshot, else why not (for `IndexSnapshots.errors`)."""
    try:
        done = subprocess.run(
            _command(), input=msgspec.msgpack.encode(request), capture_output=True, check=False
        )
    except OSError as exc:
        return f"could not start a process to build the search index: {exc}"
    return _outcome(done.returncode, done.stderr)


async def build_apart_async(request: BuildRequest) -> str | None:
    """`build_apart` without blocking the event loop while the child builds (a minute
    at ten million items). Cancelled, it stops the child."""
    try:
        child = await asyncio.create_subprocess_exec(
            *_command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return f"could not start a process to build the search index: {exc}"
    try:
        _, stderr = await child.communicate(msgspec.msgpack.encode(request))
    except BaseException:
        if child.returncode is None:
            child.kill()
            await asyncio.shield(child.wait())
        raise
    assert child.returncode is not None
    return _outcome(child.returncode, stderr)


def main() -> None:
    """The child: build, save, exit 0; exit 1 with the reason on stderr."""
    from .view import MemoryView  # the view starts this module: imported here, not above

    try:
        request = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=BuildRequest)
        with MemoryView.open(request.view, create=False, snapshots_from=1) as view:
            if not view.save_index(request.namespace, request.where, request.approximate):
                assert view.snapshots is not None
                reason = view.snapshots.errors[-1] if view.snapshots.errors else "not saved"
                raise SystemExit(f"the snapshot was not saved: {reason}")
    except SystemExit:
        raise
    except BaseException as exc:  # the reader builds instead: say why, in one line
        raise SystemExit(f"{type(exc).__name__}: {exc}") from None
