"""LoCoMo recall of the stores agent builders use today, on the same turns and questions
with the same vectors as laser-memory's (`benchmarks.recall_quality --peers`).

The parent embeds every turn and question once with laser-memory's embedder and writes
them to a folder: ``data.json`` (per conversation its turns and its questions with
their evidence), ``texts.json`` and ``vectors.npy`` (one row per text). Each store then
runs in a process of its own and looks its vectors up by text, so every store ranks the
very same vectors and differs only in how it searches:

- ``langgraph``: LangGraph's `InMemoryStore` with an index over ``text``, one namespace
  per conversation, `search` with the question (cosine).
- ``mem0``: mem0 `Memory` with ``infer=False`` on embedded Qdrant, one user per
  conversation, `search` with ``threshold=0`` (cosine).
- ``laser-store``: laser-memory's own LangGraph store (`LaserStore`), the same calls as
  ``langgraph``, ranking by words and meaning (hybrid).

This module imports neither laser-memory nor a peer at the top: the peers run in an
interpreter of their own (``make peers``), which may have only numpy and themselves.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

KS = (1, 5, 10, 20)


class LookupEmbedder:
    """The parent's vectors, by text: `embed_documents`/`embed_query` for LangGraph,
    `embed` for mem0, `__call__` for a plain function."""

    def __init__(self, folder: Path) -> None:
        texts = json.loads((folder / "texts.json").read_text())
        self.matrix = np.load(folder / "vectors.npy")
        self.row = {text: i for i, text in enumerate(texts)}
        # A store may strip the text it embeds (mem0 strips a query): the same vector.
        for i, text in enumerate(texts):
            self.row.setdefault(text.strip(), i)
        self.dims = self.matrix.shape[1]

    def __call__(self, texts):
        return [self.matrix[self.row[t]].tolist() for t in texts]

    def embed(self, text, memory_action=None):
        return self.matrix[self.row[text]].tolist()


def _scores() -> dict[int, list[float]]:
    return {k: [] for k in KS}


def _count(scores: dict[int, list[float]], evidence: set[str], found: list[str]) -> None:
    for k in KS:
        scores[k].append(len(evidence & set(found[:k])) / len(evidence))


def run_langgraph(folder: Path) -> dict[int, list[float]]:
    from langgraph.store.memory import InMemoryStore

    embedder = LookupEmbedder(folder)
    scores = _scores()
    for conversation in json.loads((folder / "data.json").read_text()):
        store = InMemoryStore(index={"dims": embedder.dims, "embed": embedder, "fields": ["text"]})
        ns = ("locomo", conversation["name"])
        for dia_id, text in conversation["turns"]:
            store.put(ns, dia_id, {"text": text})
        for question, evidence in conversation["questions"]:
            found = store.search(ns, query=question, limit=max(KS))
            _count(scores, set(evidence), [item.key for item in found])
    return scores


def run_mem0(folder: Path) -> dict[int, list[float]]:
    from .peers import mem0_memory

    embedder = LookupEmbedder(folder)
    scores = _scores()
    with tempfile.TemporaryDirectory() as path:
        memory = mem0_memory(path, "locomo", embedder.dims, embedder)
        for conversation in json.loads((folder / "data.json").read_text()):
            user = f"u-{conversation['name']}"
            for dia_id, text in conversation["turns"]:
                memory.add(text, user_id=user, metadata={"dia_id": dia_id}, infer=False)
            for question, evidence in conversation["questions"]:
                found = memory.search(
                    question, filters={"user_id": user}, limit=max(KS), threshold=0.0
                )
                results = found["results"] if isinstance(found, dict) else found
                _count(
                    scores,
                    set(evidence),
                    [(r.get("metadata") or {}).get("dia_id") for r in results],
                )
    return scores


def run_laser_store(folder: Path) -> dict[int, list[float]]:
    import asyncio

    import laser_memory as lm
    from laser_memory.integrations.langgraph import LaserStore

    embedder = LookupEmbedder(folder)

    async def main() -> dict[int, list[float]]:
        scores = _scores()
        with tempfile.TemporaryDirectory() as path:
            async with lm.connect(f"local://{path}", stream="locomo") as laser:
                store = LaserStore(
                    laser.memory("turns"),
                    index={"dims": embedder.dims, "embed": embedder, "fields": ["text"]},
                    label="bench/locomo-vectors",
                )
                for conversation in json.loads((folder / "data.json").read_text()):
                    ns = ("locomo", conversation["name"])
                    await store.abatch(
                        [_put(ns, dia_id, text) for dia_id, text in conversation["turns"]]
                    )
                    for question, evidence in conversation["questions"]:
                        found = await store.asearch(ns, query=question, limit=max(KS))
                        _count(scores, set(evidence), [item.key for item in found])
        return scores

    return asyncio.run(main())


def _put(ns, key, text):
    from langgraph.store.base import PutOp

    return PutOp(ns, key, {"text": text})


RUNNERS = {"langgraph": run_langgraph, "mem0": run_mem0, "laser-store": run_laser_store}


def main() -> None:
    store, folder = sys.argv[1], Path(sys.argv[2])
    try:
        scores = RUNNERS[store](folder)
    except ImportError as exc:
        print(json.dumps({"error": f"not installed: {exc}"}))
        return
    print(json.dumps({str(k): sum(v) / len(v) for k, v in scores.items()}))


if __name__ == "__main__":
    main()
