"""Recall quality on LoCoMo, through the public API.

    python -m benchmarks.recall_quality PATH [--embedder minilm|word-hash|none] [--view]

For each conversation file in PATH (LoCoMo's JSON, one conversation a file; the data
set is for evaluation only and never copied into this repository), a fresh embedded
log gets every turn remembered as ``[session date] Speaker: text`` (plus
``[image: caption]`` when the turn shared one), in one conversation scope, with
`remember_many`. Then each question of categories 1-4 is recalled with its text by
each strategy (limit 20), and recall@k is the share of the question's evidence turns
among the first k items. Prints R@1/5/10/20 per strategy over all questions.

``--view`` recalls from a managed view folded after the writes instead of folding in
the process; the figures must be the same.

``--peers`` also runs LangGraph's ``InMemoryStore`` and mem0 (from ``make peers``, or the
interpreter ``--peers-python`` names) and laser-memory's own LangGraph store on the same
turns and questions with the very same vectors (see `benchmarks.recall_quality_peers`), so the
table shows them side by side.

Reference figures over all ten LoCoMo conversations (categories 1-4, turns prefixed
with their session date): BM25 R@5 0.53, R@10 0.59; all-MiniLM-L6-v2 cosine R@5 0.39,
R@10 0.50; their reciprocal-rank fusion R@10 0.59, R@20 0.69.
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

import laser_memory as lm

from .figures import Figure, NotMeasured, rows
from .models import minilm_or_reason

KS = (1, 5, 10, 20)
CATEGORIES = {1, 2, 3, 4}


def turns_of(conversation: dict) -> list[tuple[str, str]]:
    """(dia_id, text) of every turn, in order."""
    out = []
    session = 1
    while f"session_{session}" in conversation:
        date = conversation.get(f"session_{session}_date_time", "")
        for turn in conversation[f"session_{session}"]:
            text = f"[{date}] {turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            out.append((turn["dia_id"], text))
        session += 1
    return out


def make_embedder(name: str):
    if name == "none":
        return None
    if name == "word-hash":
        return lm.WordHashEmbedder()
    embedder, why = minilm_or_reason()
    if embedder is None:
        raise SystemExit(why)
    return embedder


def load(path: Path) -> list[tuple[str, dict]]:
    """(file stem, conversation) of every LoCoMo file in a folder."""
    files = sorted(path.glob("*.json"))
    if not files:
        raise SystemExit(f"no LoCoMo conversation files (*.json) in {path}")
    return [(file.stem, json.loads(file.read_text())) for file in files]


async def evaluate(
    conversations: list[tuple[str, dict]], strategies: list[str], embedder, use_view: bool
) -> dict[str, dict[int, list[float]]]:
    scores: dict[str, dict[int, list[float]]] = {s: {k: [] for k in KS} for s in strategies}
    for name, conversation in conversations:
        started = time.perf_counter()
        turns = turns_of(conversation)
        questions = [q for q in conversation["qa"] if q.get("category") in CATEGORIES]
        with tempfile.TemporaryDirectory() as log_dir, tempfile.TemporaryDirectory() as view:
            options = {"view": view} if use_view else {}
            async with lm.connect(
                f"local://{log_dir}", stream="locomo", embedder=embedder, **options
            ) as laser:
                memory = laser.memory("turns").scoped(name)
                ids = await memory.remember_many([text for _, text in turns])
                turn_of = {mid.bytes: dia_id for mid, (dia_id, _) in zip(ids, turns, strict=True)}
                if use_view:
                    from folders.service import ViewFolder

                    await ViewFolder(laser.log, laser.memory_topic_name, view).run(
                        until_caught_up=True
                    )
                for question in questions:
                    evidence = set(question.get("evidence") or [])
                    if not evidence:
                        continue
                    for strategy in strategies:
                        items = await memory.recall(
                            text=question["question"], strategy=strategy, limit=max(KS)
                        )
                        found = [turn_of[item.id.bytes] for item in items]
                        for k in KS:
                            hits = len(evidence & set(found[:k]))
                            scores[strategy][k].append(hits / len(evidence))
        print(
            f"  {name}: {len(turns)} turns, {len(questions)} questions, "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    return scores


PEERS = {
    "langgraph": "LangGraph InMemoryStore (cosine)",
    "mem0": "mem0 (cosine)",
    "laser-store": "laser-memory LaserStore (hybrid)",
}


def compare_peers(
    conversations: list[tuple[str, dict]], embedder, peers_python: str
) -> dict[str, dict[int, float] | str]:
    """R@k of each peer on the same turns and questions, with the same vectors; or why
    a peer did not run."""
    import numpy as np

    from . import recall_quality_peers

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as folder:
        data, texts = [], {}
        for name, conversation in conversations:
            turns = turns_of(conversation)
            questions = [
                (q["question"], q["evidence"])
                for q in conversation["qa"]
                if q.get("category") in CATEGORIES and q.get("evidence")
            ]
            data.append({"name": name, "turns": turns, "questions": questions})
            texts.update(dict.fromkeys([t for _, t in turns] + [q for q, _ in questions]))
        ordered = list(texts)
        vectors = np.concatenate(
            [
                np.asarray(embedder.embed_many(ordered[i : i + 256]), dtype=np.float32)
                for i in range(0, len(ordered), 256)
            ]
        )
        (Path(folder) / "data.json").write_text(json.dumps(data))
        (Path(folder) / "texts.json").write_text(json.dumps(ordered))
        np.save(Path(folder) / "vectors.npy", vectors)
        out: dict[str, dict[int, float] | str] = {}
        for store in PEERS:
            python = sys.executable if store == "laser-store" else peers_python
            print(f"  {store} ...", file=sys.stderr)
            done = subprocess.run(
                [python, "-m", recall_quality_peers.__name__, store, folder],
                cwd=root,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(root)},
            )
            try:
                result = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                out[store] = " / ".join((done.stderr or done.stdout).strip().splitlines()[-2:])
                continue
            out[store] = (
                result["error"] if "error" in result else {int(k): v for k, v in result.items()}
            )
        return out


def run(quick: bool = False, locomo: str | None = None, **_: object) -> list[Figure | NotMeasured]:
    """The figures for ``python -m benchmarks``; quick runs the first conversation only.
    Without ``--locomo PATH`` or the local model, or for a peer that failed, the table
    says what was not measured and why."""
    if not locomo:
        return [
            NotMeasured(
                benchmark="locomo",
                name="recall quality",
                reason="no data: pass --locomo PATH, a folder of LoCoMo conversation files",
            )
        ]
    conversations = load(Path(locomo))[: 1 if quick else None]
    embedder, why = minilm_or_reason()
    if embedder is None:
        return [NotMeasured(benchmark="locomo", name="recall quality", reason=why)]
    scores = asyncio.run(
        evaluate(conversations, ["keyword", "semantic", "hybrid"], embedder, False)
    )
    values = {
        f"{strategy} R@{k}": (sum(v) / len(v), "recall")
        for strategy, by_k in scores.items()
        for k, v in by_k.items()
        if k in (5, 10)
    }
    ratios = {f"hybrid R@{k}": f"keyword R@{k}" for k in (5, 10)}
    # The peers on the same turns with the same vectors; a ratio says how many times
    # laser-memory's hybrid recall finds what the peer finds.
    missing = []
    for store, result in compare_peers(conversations, embedder, _peers_python()).items():
        if isinstance(result, str):
            missing.append(NotMeasured(benchmark="locomo", name=PEERS[store], reason=result))
            continue
        for k in (5, 10):
            name = f"{PEERS[store]} R@{k}"
            values[name] = (result[k], "recall")
            ratios[f"hybrid R@{k} vs {store}"] = name
            values[f"hybrid R@{k} vs {store}"] = values[f"hybrid R@{k}"]
    return [*rows("locomo", values, ratios), *missing]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path, help="a folder of LoCoMo conversation files")
    parser.add_argument("--embedder", choices=("minilm", "word-hash", "none"), default="minilm")
    parser.add_argument("--view", action="store_true", help="recall from a managed view")
    parser.add_argument(
        "--strategies", nargs="+", default=["keyword", "semantic", "hybrid", "auto"]
    )
    parser.add_argument("--peers", action="store_true", help="run LangGraph and mem0 too")
    parser.add_argument("--peers-python", default=_peers_python())
    args = parser.parse_args()
    embedder = make_embedder(args.embedder)
    label = embedder.label if embedder is not None else "no embedder"
    how = "managed" if args.view else "folded"
    print(f"LoCoMo recall@k, {label}, {how} recall", file=sys.stderr)
    scores = asyncio.run(evaluate(load(args.path), args.strategies, embedder, args.view))
    questions = len(next(iter(scores.values()))[KS[0]])
    print(f"{questions} questions (categories 1-4), embedder: {label}")
    print(f"{'strategy':<10}" + "".join(f"{f'R@{k}':>8}" for k in KS))
    for strategy, by_k in scores.items():
        print(f"{strategy:<10}" + "".join(f"{sum(v) / len(v):8.3f}" for v in by_k.values()))
    if args.peers:
        if embedder is None:
            raise SystemExit("--peers needs an embedder: every store gets the same vectors")
        print(f"the same questions, the same vectors ({label}):")
        for store, result in compare_peers(load(args.path), embedder, args.peers_python).items():
            if isinstance(result, str):
                print(f"{PEERS[store]:<36} {result}")
            else:
                print(f"{PEERS[store]:<36}" + "".join(f"{result[k]:8.3f}" for k in KS))


def _peers_python() -> str:
    venv = Path(__file__).resolve().parent.parent / ".peers-venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


if __name__ == "__main__":
    main()
