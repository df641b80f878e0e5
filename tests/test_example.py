"""The example agent runs as a newcomer would run it, over both logs, and answers the
second conversation's questions from what the first one said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support_agent.py"


def test_the_support_agent_answers_from_memory(any_log_url: str, stream_name: str):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", any_log_url, "--stream", stream_name],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [line for line in done.stdout.splitlines() if "[ticket-2] agent:" in line]
    assert len(answers) == 3
    assert "A-1043" in answers[0]
    assert "email" in answers[1]
    assert "DHL" in answers[2]
    # Every turn and reply is in memory, the order message went into an answer, and the
    # consolidation timer ran while the agent worked.
    assert "memory: 12 items; the damaged-order message went into 1 answer(s)" in done.stdout
    assert "0 consolidation pass" not in done.stdout


def test_the_support_agent_runs_with_no_arguments():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DHL" in done.stdout


@pytest.mark.parametrize("embedder", ["word-hash", "minilm"])
def test_the_support_agent_answers_with_an_embedder(embedder: str):
    """With vectors, recall is hybrid (words and meaning): the local model, as a
    newcomer runs it after `make model`, answers the same questions."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--embedder", embedder],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [line for line in done.stdout.splitlines() if "[ticket-2] agent:" in line]
    assert len(answers) == 3
    assert "A-1043" in answers[0] and "email" in answers[1] and "DHL" in answers[2]
