"""A reader killed inside a read transaction must not make the view or the embedded log
grow without end.

LMDB reuses no page freed after the oldest transaction a reader slot names, and a
process killed while reading (SIGKILL, the OOM killer, a container stopped) leaves its
slot naming one. Without `laser_memory.lmdb_env.StaleReaders` every later write of the
folder and the log allocated new pages: here the view grew about 20 times faster after
such a kill than before it. Each writer now clears dead processes' slots (at most once
a second), and every process does when it opens a folder."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import laser_memory as lm
from folders.service import ViewFolder

# A process that opens a folder with LMDB, reads, and is killed before it ends its read.
HOLDER = """
import sys, time, lmdb
env = lmdb.open(sys.argv[1], max_dbs=16, map_size=1 << 34)
txn = env.begin()
txn.get(b"x")
print("reading", flush=True)
time.sleep(600)
"""

# The reader slots of a folder, as another process that has it open sees them.
SLOTS = """
import sys, lmdb
env = lmdb.open(sys.argv[1], max_dbs=16, map_size=1 << 34)
print(" ".join(line.split()[0] for line in env.readers().splitlines()[1:] if line.strip()))
"""


def data_mb(folder: Path) -> float:
    return os.path.getsize(folder / "data.mdb") / 1e6


def killed_while_reading(folder: Path) -> int:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE)
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"reading\n"
    holder.kill()
    holder.wait()
    holder.stdout.close()
    return holder.pid


def slot_pids(folder: Path) -> set[int]:
    done = subprocess.run(
        [sys.executable, "-c", SLOTS, str(folder)], capture_output=True, text=True, check=True
    )
    return {int(pid) for pid in done.stdout.split()}


async def test_a_reader_killed_while_reading_pins_no_pages(tmp_path: Path):
    log, view = tmp_path / "log", tmp_path / "view"
    async with lm.connect(f"local://{log}", stream="s") as laser:
        await laser.bootstrap()
        memory = laser.memory("notes")
        ids = await memory.remember_many([f"item {i} " + "x" * 200 for i in range(2000)])
        folder = asyncio.create_task(ViewFolder(laser.log, laser.memory_topic_name, view).run())
        try:
            async with lm.connect(f"local://{log}", stream="s", view=view) as reader:
                managed = reader.memory("notes")
                await managed.recall(after=ids[-1], timeout=30, limit=1)

                async def rewrite(rounds: int) -> float:
                    """Feedback that rewrites 200 items a round, each round folded."""
                    before = data_mb(view)
                    for r in range(rounds):
                        first = r * 10 % 1800
                        last = await asyncio.gather(
                            *(memory.improve(mid, 1.0) for mid in ids[first : first + 200])
                        )
                        await managed.recall(after=last[-1], timeout=30, limit=1)
                    return data_mb(view) - before

                grown_before = await rewrite(40)
                dead = {killed_while_reading(view), killed_while_reading(log)}
                assert dead <= slot_pids(view) | slot_pids(log)  # the kill left its slots
                await asyncio.sleep(1.1)  # a writer asks at most once a second
                grown_after = await rewrite(40)
                assert not dead & (slot_pids(view) | slot_pids(log))
                # The same writes grow the view about as much as before the kill (without
                # the clearing: 66 MB against 3.5).
                assert grown_after < 3 * grown_before + 1.0, (grown_before, grown_after)
        finally:
            folder.cancel()
            await asyncio.gather(folder, return_exceptions=True)


def test_a_process_opening_a_folder_clears_the_dead_slots(tmp_path: Path):
    """Where no writer runs: the next process to open the folder clears them."""
    log = tmp_path / "log"
    subprocess.run(
        [sys.executable, "-m", "laser_memory", "remember", "x", "--url", f"local://{log}"],
        check=True,
        capture_output=True,
    )
    # A live process keeps the folder open, so no opener gets it to itself (an opener
    # alone resets the whole table, dead slots or not).
    keeper = subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace('txn.get(b"x")', "txn.abort()"), str(log)],
        stdout=subprocess.PIPE,
    )
    try:
        assert keeper.stdout is not None and keeper.stdout.readline() == b"reading\n"
        dead = killed_while_reading(log)
        assert dead in slot_pids(log)
        recalled = subprocess.run(
            [sys.executable, "-m", "laser_memory", "recall", "--url", f"local://{log}"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "x" in recalled.stdout
        assert dead not in slot_pids(log)
    finally:
        keeper.kill()
        keeper.wait()
        assert keeper.stdout is not None
        keeper.stdout.close()
