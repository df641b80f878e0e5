"""Every benchmark in one run: ``python -m benchmarks [--quick] [--only NAME ...]
[--kafka HOST:PORT] [--locomo PATH] [--json PATH]``.

Prints one table (each figure with its ratio against the baseline measured in the same
run) and writes the figures as JSON with the machine, the versions and the settings.
``--quick`` uses small sizes and finishes in about two minutes.

Each benchmark runs in a process of its own (``--in-process`` runs them all in this
one): what one leaves in a process, such as the fold's caches full of ten thousand
tenants, is memory the garbage collector walks at every full collection of the next
(a fresh handle's first recall of 10,000 items measured 1.5-2.1x slower after the fold's
benchmarks than on its own).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import msgspec

from . import (
    approximate,
    fold,
    kafka_remember,
    keyword_scale,
    log_append,
    memory,
    peers,
    recall,
    recall_quality,
    replay,
    search,
)
from .figures import Figure, NotMeasured

BENCHMARKS = {
    "log_append": log_append.run,
    "kafka_remember": kafka_remember.run,
    "fold": fold.run,
    "recall": recall.run,
    "search": search.run,
    "keyword_scale": keyword_scale.run,
    "approximate": approximate.run,
    "peers": peers.run,
    "memory": memory.run,
    "replay": replay.run,
    "locomo": recall_quality.run,  # LoCoMo, read from --locomo PATH
}


def machine() -> dict:
    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "packages": {
            name: version(name) for name in ("laser-memory", "numpy", "lmdb", "msgspec", "aiokafka")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, about two minutes")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), default=None)
    parser.add_argument("--kafka", default=os.environ.get("LASER_KAFKA_BOOTSTRAP"))
    parser.add_argument("--locomo", default=None, help="a folder of LoCoMo files")
    parser.add_argument("--json", default="benchmark-results.json", help="where to write")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every benchmark in this process, not each in one of its own",
    )
    # How a run starts each benchmark's own process: it only writes the JSON.
    parser.add_argument("--apart", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = {"quick": args.quick, "kafka": args.kafka, "locomo": args.locomo}
    figures: list[Figure] = []
    missing: list[NotMeasured] = []
    started = time.perf_counter()
    names = args.only or list(BENCHMARKS)
    for name in names:
        if args.in_process or len(names) == 1:
            print(f"running {name}...", file=sys.stderr, flush=True)
            measured = BENCHMARKS[name](**settings)
        else:
            measured = _run_apart(name, args)
        for figure in measured:
            (missing if isinstance(figure, NotMeasured) else figures).append(figure)
    if not args.apart:
        _print_table(figures, missing)
    result = {
        "machine": machine(),
        "settings": settings,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": msgspec.to_builtins(figures),
        "not_measured": msgspec.to_builtins(missing),
    }
    with open(args.json, "w") as out:
        json.dump(result, out, indent=2)
    if not args.apart:
        print(f"\nwrote {args.json} ({result['seconds']} s)", file=sys.stderr)
    failed = [m.benchmark for m in missing if m.name == _FAILED]
    if failed:
        # The rest of the run is kept and written; the exit status still says it failed.
        raise SystemExit(f"failed: {', '.join(failed)} (what each printed is above)")


def _print_table(figures: list[Figure], missing: list[NotMeasured]) -> None:
    print(f"\n{'benchmark':<11} {'figure':<38} {'value':>14} {'unit':<10} ratio to baseline")
    for f in figures:
        ratio = f"{f.ratio:8.3f}x {f.baseline}" if f.ratio is not None else ""
        print(f"{f.benchmark:<11} {f.name:<38} {f.value:14,.3f} {f.unit:<10} {ratio}")
    for m in missing:
        print(f"{m.benchmark:<11} {m.name:<38} {'not measured':>14} {m.reason}")


_FAILED = "every figure"


def _run_apart(name: str, args: argparse.Namespace) -> list[Figure | NotMeasured]:
    """The figures of benchmark ``name`` run by ``python -m benchmarks --only name`` in a
    process of its own, read back from the JSON it writes (its progress goes to this
    process's stderr). A benchmark whose process fails is one row, not measured, saying
    so: the benchmarks after it still run."""
    command = [sys.executable, "-m", "benchmarks", "--apart", "--only", name]
    if args.quick:
        command.append("--quick")
    if args.kafka:
        command += ["--kafka", args.kafka]
    if args.locomo:
        command += ["--locomo", args.locomo]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "figures.json")
        done = subprocess.run([*command, "--json", out], check=False)
        if done.returncode != 0:
            reason = f"its process failed with exit status {done.returncode} (its output is above)"
            return [NotMeasured(benchmark=name, name=_FAILED, reason=reason)]
        with open(out, "rb") as file:
            result = msgspec.json.decode(file.read())
    return [
        *msgspec.convert(result["figures"], list[Figure]),
        *msgspec.convert(result["not_measured"], list[NotMeasured]),
    ]


if __name__ == "__main__":
    main()
