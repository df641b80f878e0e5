"""The results a run wrote, as the Markdown table `benchmarks/README.md` holds.

    python -m benchmarks --json results.json
    python -m benchmarks.table results.json > table.md

The heading gives the run's settings and date, the line under it the machine and the
package versions from the JSON, so a table is never quoted without the run it came from.
Figures the run could not measure are rows of their own, with the reason.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["markdown"]


def _number(value: float) -> str:
    return f"{value:,.3f}"


def _run_name(settings: Mapping[str, Any]) -> str:
    flags = []
    if settings.get("quick"):
        flags.append("--quick")
    if settings.get("kafka"):
        flags.append("--kafka")
    if settings.get("locomo"):
        flags.append("--locomo")
    if settings.get("quick"):
        return f"`{' '.join(flags)}`"
    return f"full (`{' '.join(flags)}`)" if flags else "full"


def markdown(result: Mapping[str, Any]) -> str:
    """The Markdown for one run's results (the JSON ``python -m benchmarks`` writes).

    >>> print(markdown(json.load(open("results.json"))))  # doctest: +SKIP
    """
    machine = result["machine"]
    packages = ", ".join(
        f"{name} {version}" for name, version in machine["packages"].items() if version
    )
    lines = [
        f"## Latest run: {_run_name(result['settings'])}, {machine['date']}",
        "",
        f"Machine: {machine['platform']}, {machine['cpus']} CPUs, Python {machine['python']}; "
        f"{packages}. Took {result['seconds']:.0f} s.",
        "",
        "| benchmark | figure | value | unit | ratio to baseline |",
        "| --- | --- | --- | --- | --- |",
    ]
    for figure in result["figures"]:
        ratio = ""
        if figure.get("ratio") is not None:
            ratio = f"{figure['ratio']:.3f}x {figure['baseline']}"
        lines.append(
            f"| {figure['benchmark']} | {figure['name']} | {_number(figure['value'])} "
            f"| {figure['unit']} | {ratio} |"
        )
    for missing in result.get("not_measured", []):
        lines.append(
            f"| {missing['benchmark']} | {missing['name']} | not measured | | {missing['reason']} |"
        )
    lines.append("")
    if result.get("not_measured"):
        lines.append(f"Not measured: {len(result['not_measured'])}, each with its reason above.")
    else:
        lines.append("Every figure was measured (`not_measured` is empty).")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", help="the JSON a run of python -m benchmarks wrote")
    args = parser.parse_args()
    try:
        with open(args.results) as source:
            table = markdown(json.load(source))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(
            f"{args.results} is not the JSON a run of python -m benchmarks writes "
            f"({type(exc).__name__}: {exc}); make one with --json PATH"
        ) from None
    print(table, end="")


if __name__ == "__main__":
    main()
