"""The packages ship their annotations (PEP 561: ``py.typed``), so a strictly typed
user's program is checked against them: `fixtures/typed_user.py`, written as the README
writes its calls, passes ``mypy --strict``; and the same calls assigned to the wrong
types are reported, so the check reads our annotations rather than treating them as
``Any``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USER = ROOT / "tests" / "fixtures" / "typed_user.py"


def mypy(path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    # Only the user's file is reported on: the packages are read for their types
    # (follow-imports=silent), as they are when installed.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir",
            str(cache),
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def test_the_packages_are_marked_typed():
    for package in ("laser_memory", "folders"):
        assert (ROOT / package / "py.typed").is_file()


def test_a_strictly_typed_program_checks_against_the_api(tmp_path: Path):
    done = mypy(USER, tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-3000:]


def test_wrong_types_for_the_same_calls_are_reported(tmp_path: Path):
    wrong = tmp_path / "wrong_user.py"
    wrong.write_text(
        "import laser_memory as lm\n"
        "async def session(memory: lm.MemoryHandle) -> None:\n"
        '    items: str = await memory.recall(text="x")\n'
        '    block: list[lm.MemoryItem] = await memory.recall(text="x", block=True)\n'
        '    ids: list[str] = await memory.remember_many(["a"])\n'
        "    memory.reranker(42)\n",
        encoding="utf-8",
    )
    done = mypy(wrong, tmp_path / "cache")
    assert done.returncode == 1
    reported = {line.split(":")[1] for line in done.stdout.splitlines() if "error:" in line}
    assert reported == {"3", "4", "5", "6"}, done.stdout
