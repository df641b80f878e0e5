"""The local embedding model the quality and vector benchmarks need, or why a run
cannot have it: it is an optional install (``make model``; ``make test`` installs it),
so a run without it lists those figures as not measured, with the reason, rather than
stopping."""

from __future__ import annotations

import laser_memory as lm

__all__ = ["minilm_or_reason"]


def minilm_or_reason(
    model_dir: str | None = None,
) -> tuple[lm.MiniLMEmbedder | None, str | None]:
    """``(embedder, None)`` when the local all-MiniLM-L6-v2 loads (from ``model_dir``,
    else the installed model), else ``(None, why)``, ``why`` saying what to install."""
    try:
        return lm.MiniLMEmbedder(model_dir), None
    except lm.LaserError as exc:
        return None, str(exc)
