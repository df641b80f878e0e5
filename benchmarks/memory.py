"""Memory of a folder and of a reader, each in a process of its own.

    python -m benchmarks.memory [--items 100000] [--dims 384]

Writes ``--items`` items (the search benchmark's sentences, with vectors of ``--dims``
dimensions from its stand-in embedder) to an embedded log, then measures:

- a **folder** process folding the whole topic into a fresh view;
- a **reader** process opening the view and making one hybrid, one keyword and one
  semantic recall (the first has a child process build its search index and save a
  snapshot of it, then loads the snapshot: its time, and the child's peak, are
  reported);
- the **next reader**, another process doing the same, which starts from the snapshot;
- an auditor's **replay** of the namespace, gathered (`replay`) and streamed
  (`replay_stream`), each against a process **reading the log** and keeping nothing
  (peak resident memory counts the log's pages both read through LMDB's memory map).

For each: peak resident memory (VmHWM), and anonymous memory after its work, with a
reader's connection and search indexes still open (RssAnon: the process's own heap, not
the LMDB pages or snapshot files it maps, which the kernel shares and drops as it
needs), against the log's size on disk in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .figures import Figure, rows

ROOT = Path(__file__).resolve().parent.parent


def _status() -> dict[str, float]:
    """VmHWM and RssAnon of this process, and the peak resident set of the largest
    child it waited for (a reader's index build: `folders.index_build`), in MB."""
    import resource

    out = {"child VmHWM": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "RssAnon"):
                out[name] = int(value.split()[0]) / 1024
    return out


async def _write(path: str, items: int, dims: int) -> None:
    import laser_memory as lm

    from .search import StandInEmbedder, corpus

    texts = corpus(items)
    async with lm.connect(f"local://{path}/log", embedder=StandInEmbedder(dims)) as laser:
        memory = laser.memory("bench")
        for first in range(0, items, 1000):
            await memory.remember_many(texts[first : first + 1000])


async def _fold(path: str) -> None:
    import laser_memory as lm
    from folders.service import ViewFolder

    async with lm.connect(f"local://{path}/log") as laser:
        await ViewFolder(laser.log, laser.memory_topic_name, f"{path}/view").run(
            until_caught_up=True
        )


async def _read(path: str, dims: int) -> tuple[float, dict[str, float]]:
    """Seconds the reader's first text recall took (it builds the search index), and
    its memory after the recalls, with its index still open."""
    import time

    import laser_memory as lm

    from .search import StandInEmbedder

    async with lm.connect(
        f"local://{path}/log", view=f"{path}/view", embedder=StandInEmbedder(dims)
    ) as laser:
        memory = laser.memory("bench")
        started = time.perf_counter()
        await memory.recall(text="w1 w7 node-5", strategy="hybrid", limit=10)
        first = time.perf_counter() - started
        for strategy in ("keyword", "semantic"):
            await memory.recall(text="w1 w7 node-5", strategy=strategy, limit=10)
        return first, _status()


async def _replay(path: str, role: str) -> None:
    """Read the namespace's records as an auditor's replay does (``role``), or read the
    log and keep nothing, its baseline."""
    import laser_memory as lm
    from folders.replay import replay, replay_stream

    async with lm.connect(f"local://{path}/log") as laser:
        memory = laser.memory("bench")
        if role == "replay":
            await replay(laser.log, memory.topic, namespace=memory.namespace)
        elif role == "replay-stream":
            async for _ in replay_stream(laser.log, memory.topic, namespace=memory.namespace):
                pass
        else:
            async for _ in laser.log.read(memory.topic):
                pass


def child(role: str, path: str, dims: int) -> None:
    """One role in this process; prints its memory as JSON."""
    started = time.perf_counter()
    if role == "folder":
        asyncio.run(_fold(path))
        seconds, status = time.perf_counter() - started, _status()
    elif role in ("log-read", "replay", "replay-stream"):
        asyncio.run(_replay(path, role))
        seconds, status = time.perf_counter() - started, _status()
    else:
        seconds, status = asyncio.run(_read(path, dims))
    print(json.dumps({**status, "seconds": seconds}))


def _disk_mb(path: str) -> float:
    return (
        sum(
            os.stat(os.path.join(root, name)).st_blocks * 512
            for root, _, names in os.walk(path)
            for name in names
        )
        / 2**20
    )


def measure(items: int, dims: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as path:
        asyncio.run(_write(path, items, dims))
        out = {"log on disk MB": _disk_mb(f"{path}/log")}
        # The first reader builds its search index and saves a snapshot; the next one
        # (another process) starts from the snapshot.
        for role in ("folder", "reader", "next-reader", "log-read", "replay", "replay-stream"):
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.memory", "--child", role, path, str(dims)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"the {role} failed:\n{done.stderr[-2000:]}")
            status = json.loads(done.stdout.strip().splitlines()[-1])
            name = role.replace("-", " ")
            out[f"{name} peak RSS MB"] = status["VmHWM"]
            out[f"{name} anonymous MB"] = status["RssAnon"]
            if status["child VmHWM"]:
                out[f"{name}'s index builder peak RSS MB"] = status["child VmHWM"]
            out[f"{name} s"] = status["seconds"]
        out["view on disk MB"] = _disk_mb(f"{path}/view")
        return out


def run(quick: bool = False, **_: object) -> list[Figure]:
    """The figures for ``python -m benchmarks``: 20k items quick, 1M in full."""
    items = 20_000 if quick else 1_000_000
    measured = measure(items, 384)
    values = {
        f"{name.rsplit(' ', 1)[0]} @{items}": (value, name.rsplit(" ", 1)[1])
        for name, value in measured.items()
    }
    log = f"log on disk @{items}"
    ratios = {name: log for name, (_, unit) in values.items() if unit == "MB" and name != log}
    ratios[f"next reader @{items}"] = f"reader @{items}"
    for name in ("replay", "replay stream"):
        ratios[f"{name} peak RSS @{items}"] = f"log read peak RSS @{items}"
        ratios[f"{name} @{items}"] = f"log read @{items}"
    return rows("memory", values, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument(
        "--child", nargs=3, metavar=("ROLE", "PATH", "DIMS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    measured = measure(args.items, args.dims)
    print(f"{args.items} items, {args.dims}-d vectors")
    for name, value in measured.items():
        print(f"  {name:<24} {value:10,.1f}")


if __name__ == "__main__":
    main()
