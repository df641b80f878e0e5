"""What every benchmark reports: named figures, each with the baseline it is a ratio
against (measured in the same run, since these machines are noisy)."""

from __future__ import annotations

import msgspec

__all__ = ["NO_BROKER", "Figure", "NotMeasured"]

#: Why the Kafka figures of a run without a broker are not measured.
NO_BROKER = "no Kafka broker: pass --kafka host:port, or set LASER_KAFKA_BOOTSTRAP"


class Figure(msgspec.Struct, frozen=True, kw_only=True):
    """One measured value. ``ratio`` is ``value / baseline value`` when there is a
    baseline (for latencies, lower is better; for rates, higher is better)."""

    benchmark: str
    name: str
    value: float
    unit: str
    baseline: str | None = None
    ratio: float | None = None


class NotMeasured(msgspec.Struct, frozen=True, kw_only=True):
    """A figure a run could not measure, and why (a peer that is not installed, one
    that failed): printed in the table and written to the JSON, never left out."""

    benchmark: str
    name: str
    reason: str


def rows(
    benchmark: str, values: dict[str, tuple[float, str]], ratios: dict[str, str]
) -> list[Figure]:
    """Figures from ``{name: (value, unit)}`` and ``{name: baseline name}``."""
    out = []
    for name, (value, unit) in values.items():
        base = ratios.get(name)
        ratio = value / values[base][0] if base is not None and values[base][0] else None
        out.append(
            Figure(
                benchmark=benchmark, name=name, value=value, unit=unit, baseline=base, ratio=ratio
            )
        )
    return out
