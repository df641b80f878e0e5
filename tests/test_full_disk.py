"""Storage that fails: on a full disk the embedded log and the folder refuse the write
whole, say the disk is full, and take writes again once there is room; on read-only
storage opening a log says why it cannot.

The disk is a real one, a small tmpfs mounted for the test (which needs the right to
mount, as root has on our machines; elsewhere these tests are skipped, saying so).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.errors import ConfigError, LogUnavailable


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, Callable[[str], None]]]:
    """A 2 MiB tmpfs, and a function that resizes it (``"16m"``)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    try:
        yield mount, resize
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_refuses_a_write_whole_and_room_takes_the_next(small_disk):
    disk, resize = small_disk
    async with lm.connect(f"local://{disk / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        written = 0
        with pytest.raises(LogUnavailable, match="the disk holding it is full"):
            for _ in range(1000):
                await memory.remember_many([f"{written} {j} " + "x" * 500 for j in range(20)])
                written += 20
        topic = laser.memory_topic_name
        assert sum((await laser.log.end_offsets(topic)).values()) == written
        resize("16m")
        await memory.remember_many([f"after {j}" for j in range(20)])
        assert sum((await laser.log.end_offsets(topic)).values()) == written + 20
        bodies = [record.value async for batch in laser.log.read(topic) for record in batch]
        assert len(bodies) == written + 20


async def test_a_folder_on_a_full_disk_stops_with_a_laser_error_and_resumes(small_disk, tmp_path):
    disk, resize = small_disk
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        memory = laser.memory("notes")
        for i in range(20):
            await memory.remember_many([f"fact {i} {j} " + "x" * 300 for j in range(200)])
        view = disk / "view"
        with pytest.raises(
            (LogUnavailable, ConfigError),
            match=r"the disk holding it is full|No space left on device",
        ):
            await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        resize("64m")
        await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        async with lm.connect(f"local://{tmp_path / 'log'}", stream="s", view=view) as reader:
            managed = await reader.memory("notes").recall(limit=1000)
        folded = await memory.recall(limit=1000)
        assert [item.id for item in managed] == [item.id for item in folded]
        assert len(folded) == 1000


async def test_a_folder_that_cannot_write_its_lock_file_says_so(small_disk, tmp_path):
    disk, _ = small_disk
    # Blocking writes on purpose: nothing else runs while the disk fills.
    with open(disk / "filler", "wb") as filler, pytest.raises(OSError):  # noqa: ASYNC230
        while True:  # until the disk is full
            filler.write(b"\0" * 65536)
            filler.flush()
    async with lm.connect(f"local://{tmp_path / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("a fact")
        with pytest.raises(ConfigError, match=r"cannot write the lock file .*No space left"):
            await ViewFolder(laser.log, laser.memory_topic_name, disk / "view").run(
                until_caught_up=True
            )


async def test_a_log_on_read_only_storage_says_so(small_disk):
    disk, resize = small_disk
    async with lm.connect(f"local://{disk / 'log'}", stream="s") as laser:
        await laser.memory("notes").remember("archived")
    resize("2m,ro")
    with pytest.raises(LogUnavailable, match="read-only storage cannot be opened: copy it"):
        async with lm.connect(f"local://{disk / 'log'}", stream="s", create=False) as laser:
            await laser.memory("notes").recall()
