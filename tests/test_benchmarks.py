"""The benchmark harness reports what its readers rely on: every ratio is the figure
over its baseline, the peers' included, and the table names the run it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import kafka_remember, recall_quality
from benchmarks.figures import NO_BROKER, NotMeasured
from benchmarks.models import minilm_or_reason
from benchmarks.peers import figures_of
from benchmarks.table import markdown


def test_every_peer_ratio_is_its_figure_over_laser_memorys():
    results = {
        ("laser-memory", 1000): {
            "add items/s": 20_000.0,
            "semantic p50 ms": 0.5,
            "first search ms": 40.0,
            "next reader first search ms": 10.0,
        },
        ("langgraph", 1000): {"add items/s": 10_000.0, "semantic p50 ms": 25.0},
        ("mem0", 1000): {"error": "mem0 is not installed"},
    }
    figures = {f.name: f for f in figures_of(results)}
    # A peer adding half as fast is at 0.5x, whose search takes 50 times as long at 50x:
    # the same direction as every other figure's ratio (value over baseline).
    assert figures["langgraph add @1000"].ratio == pytest.approx(0.5)
    assert figures["langgraph add @1000"].baseline == "laser-memory add items/s @1000"
    assert figures["langgraph semantic p50 @1000"].ratio == pytest.approx(50.0)
    assert figures["laser-memory add @1000"].ratio is None
    # What the snapshot the first reader saved spares the next reading process.
    next_reader = figures["laser-memory next reader first search @1000 vs the first"]
    assert next_reader.ratio == pytest.approx(0.25)
    assert next_reader.baseline == "laser-memory first search ms @1000"
    assert figures["mem0 @1000"] == NotMeasured(
        benchmark="peers", name="mem0 @1000", reason="mem0 is not installed"
    )


def test_langgraph_is_also_compared_with_laser_memory_behind_its_own_api():
    results = {
        ("laser-memory", 1000): {"add items/s": 20_000.0, "semantic p50 ms": 0.5},
        ("laserstore", 1000): {
            "add items/s": 16_000.0,
            "semantic p50 ms": 5.0,
            "folded search p50 ms": 2.0,
            "folded search after a put p50 ms": 30.0,
            "filtered search p50 ms": 6.0,
        },
        ("langgraph", 1000): {"add items/s": 8_000.0, "semantic p50 ms": 25.0},
    }
    figures = {f.name: f for f in figures_of(results)}
    assert figures["laserstore semantic p50 @1000"].ratio == pytest.approx(10.0)
    # A search after a write reads the namespace again: against one that need not.
    after_put = figures["laserstore folded search after a put p50 @1000 vs without"]
    assert after_put.ratio == pytest.approx(15.0)
    assert after_put.baseline == "laserstore folded search p50 ms @1000"
    filtered = figures["laserstore filtered search p50 @1000 vs without"]
    assert filtered.ratio == pytest.approx(1.2)
    assert filtered.baseline == "laserstore semantic p50 ms @1000"
    same_api = figures["langgraph semantic p50 @1000 vs LaserStore"]
    assert same_api.ratio == pytest.approx(5.0)
    assert same_api.baseline == "laserstore semantic p50 ms @1000"
    assert figures["langgraph add @1000 vs LaserStore"].ratio == pytest.approx(0.5)
    # Without a LaserStore figure (the extra not installed) there is nothing to compare.
    del results[("laserstore", 1000)]
    assert not [name for name in (f.name for f in figures_of(results)) if "vs" in name]


def test_the_table_names_its_run_and_keeps_what_was_not_measured():
    result = {
        "machine": {
            "date": "2026-12-02T18:19:55+00:00",
            "platform": "Linux-x86_64",
            "cpus": 2,
            "python": "3.11.7",
            "packages": {"laser-memory": "0.1.0", "aiokafka": None},
        },
        "settings": {"quick": True, "kafka": "127.0.0.1:9092", "locomo": None},
        "seconds": 129.4,
        "figures": [
            {
                "benchmark": "fold",
                "name": "raw",
                "value": 1234.5,
                "unit": "items/s",
                "baseline": None,
                "ratio": None,
            },
            {
                "benchmark": "fold",
                "name": "ours",
                "value": 617.25,
                "unit": "items/s",
                "baseline": "raw",
                "ratio": 0.5,
            },
        ],
        "not_measured": [{"benchmark": "peers", "name": "mem0 @1000", "reason": "not installed"}],
    }
    lines = markdown(result).splitlines()
    assert lines[0] == "## Latest run: `--quick --kafka`, 2026-12-02T18:19:55+00:00"
    assert "2 CPUs, Python 3.11.7; laser-memory 0.1.0. Took 129 s." in lines[2]
    assert "| fold | raw | 1,234.500 | items/s |  |" in lines
    assert "| fold | ours | 617.250 | items/s | 0.500x raw |" in lines
    assert "| peers | mem0 @1000 | not measured | | not installed |" in lines
    assert lines[-1] == "Not measured: 1, each with its reason above."


def test_a_run_without_a_broker_or_data_says_what_it_did_not_measure():
    assert kafka_remember.run(quick=True, kafka=None) == [
        NotMeasured(benchmark="kafka_remember", name="remember on Kafka", reason=NO_BROKER)
    ]
    [missing] = recall_quality.run(quick=True, locomo=None)
    assert missing.benchmark == "locomo" and "--locomo PATH" in missing.reason


def test_the_replay_benchmark_gives_each_read_against_its_baseline():
    from benchmarks import replay as replay_benchmark

    *figures, missing = replay_benchmark.run(items=2_000, kafka=None)
    assert missing == NotMeasured(benchmark="replay", name="Kafka @2000", reason=NO_BROKER)
    by_name = {f.name: f for f in figures}
    at = "embedded @2000"
    assert by_name[f"replay stream, {at}"].baseline == f"replay, {at}"
    assert by_name[f"history, {at}"].baseline == f"plain read, {at}"
    chain = replay_benchmark.CHAIN
    assert by_name[f"history of a chain of {chain}, {at}"].baseline == f"plain read, {at}"
    for figure in figures:
        assert figure.value > 0 and figure.unit == "ms"
        if figure.baseline is not None:
            base = by_name[figure.baseline].value
            assert figure.ratio == figure.value / base


def test_a_missing_model_is_a_reason_not_a_crash(tmp_path):
    embedder, why = minilm_or_reason(str(tmp_path))
    assert embedder is None
    assert str(tmp_path) in why and "make model" in why


def test_a_file_that_is_no_runs_json_gets_a_message(tmp_path):
    import subprocess
    import sys

    for text in ("not json", "[1, 2]", '{"machine": {}}'):
        path = tmp_path / "results.json"
        path.write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.table", str(path)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert done.returncode == 1
        assert "is not the JSON a run of python -m benchmarks writes" in done.stderr
        assert "Traceback" not in done.stderr


def test_each_benchmark_runs_in_a_process_of_its_own_and_reports_the_same(tmp_path):
    """Two benchmarks, each in a process of its own, give what they give run in this
    one: their figures come back through the JSON their process writes."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LASER_KAFKA_BOOTSTRAP"}
    found = {}
    for how in ([], ["--in-process"]):
        out = tmp_path / f"run{len(how)}.json"
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--quick", "--only", "kafka_remember", "locomo",
             "--json", str(out), *how],
            capture_output=True, text=True, env=env, check=False,
            cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "running kafka_remember..." in done.stderr and "running locomo..." in done.stderr
        assert "remember on Kafka" in done.stdout and "not measured" in done.stdout
        found[tuple(how)] = json.loads(out.read_text())["not_measured"]
    assert [m["benchmark"] for m in found[()]] == ["kafka_remember", "locomo"]
    assert found[()] == found[("--in-process",)]


def test_a_benchmark_that_fails_is_a_row_saying_so_and_the_run_goes_on(tmp_path):
    """A benchmark whose process fails (here LoCoMo from a folder with no files) costs the
    run that benchmark's figures, not the others': they are written, it is one row not
    measured with why, and the exit status says the run failed."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LASER_KAFKA_BOOTSTRAP"}
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "locomo", "kafka_remember",
         "--locomo", str(tmp_path / "no-such-folder"), "--json", str(out)],
        capture_output=True, text=True, env=env, check=False,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 1
    assert "no LoCoMo conversation files" in done.stderr  # its own message, passed on
    assert "failed: locomo" in done.stderr
    missing = json.loads(out.read_text())["not_measured"]
    assert missing[0]["benchmark"] == "locomo" and "exit status 1" in missing[0]["reason"]
    assert missing[1] == {"benchmark": "kafka_remember", "name": "remember on Kafka",
                          "reason": NO_BROKER}  # fmt: skip
