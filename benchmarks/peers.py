"""laser-memory against the memory stores agent builders use today, on the same data
with the same embedder on the same machine, each in its own process.

    python -m benchmarks.peers [--sizes 1000 10000 100000] [--peers-python PATH]

- **laser-memory**: the embedded log (durable: every batch committed to disk) with
  `remember_many` in batches of 1,000, a managed view folded from it, and managed
  `semantic` and `hybrid` recall.
- **laserstore**: laser-memory behind LangGraph's store API (`LaserStore`, the
  ``langgraph`` extra), with the same index config as the `InMemoryStore` below: puts
  in batches of 1,000 (durable), then `asearch` with a query through a managed view
  (ranked by words and vectors). Its search reads every item of the namespace it
  searches, where `recall` keeps a search index.
- **LangGraph** `InMemoryStore` with an index (``dims``, ``embed``, ``fields``):
  `batch` of `PutOp` s in batches of 1,000 (in memory, not durable), `search` with a
  query.
- Both stores' items also hold ``half`` (0 or 1, in turn), and each is searched with a
  query and the filter ``{"half": 1}`` too (filtered search p50), after one such search
  apart.
- **mem0** `Memory` with ``infer=False`` (no LLM call), embedded Qdrant on disk,
  telemetry off, a dummy API key it never uses, and the same embedder in place of its
  model: `add` one item at a time (mem0 has no batch add), `search`.

The embedder is `HashEmbedder`: deterministic 384-d unit vectors from each word's
hash, in numpy, warmed on every word first, so it costs each store the same few
microseconds a text: the point is what each store adds. Before the timed adds each store
adds other items of its own, kept apart from the measured ones, so one-off costs are not
timed as throughput: a store's first write (laser-memory creates its topic) and its first
embedding of a full batch in the thread a store embeds in (a fresh thread's first large
numpy arrays take their pages from the system: 65 ms against 21 for 1,000 texts here).
The batch stores add one batch of 1,000 (`WARM_UP`); mem0, which adds one item at a
time, ten.
Items are the search benchmark's sentences. Each (store, size) runs in a fresh process
(five times below 10k items, stores in turn, each figure the median: one batch of adds
is one noisy sample), which reports add throughput, search p50 and p99 (limit 10,
50 queries; 20 at 100k), and its peak resident memory; and its first search apart, in a
process that has not searched before: laser-memory's builds the view's search index
(and saves its snapshot, which later readers load), LaserStore's reads the namespace.
laser-memory's next reading process's first search is reported too, against the first:
from 1,000 items it loads that snapshot.

The peers are optional: install them in any interpreter (``make peers`` makes
``.peers-venv``) and pass it as ``--peers-python``; a peer that is not installed is
reported as such. They are never dependencies of laser-memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STORES = ("laser-memory", "laserstore", "langgraph", "mem0")
#: The stores that run in laser-memory's own interpreter (LaserStore needs the
#: `langgraph` extra there, as a LangGraph user has it); the peers run in theirs.
OURS = ("laser-memory", "laserstore")
DIMENSIONS = 384


class HashEmbedder:
    """384-d unit vectors: the sum of one pseudo-random vector per word (seeded by
    the word's CRC-32), so texts sharing words are near. Same vectors in every
    process. Implements laser-memory's `Embedder` protocol; `embed` and
    `__call__` serve mem0 and LangGraph."""

    label = "bench/hash-384"
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self._rows: dict[str, int] = {}
        self._matrix = np.zeros((0, DIMENSIONS), dtype=np.float32)

    def _row(self, word: str) -> int:
        row = self._rows.get(word)
        if row is None:
            row = self._rows[word] = len(self._rows)
            if row >= len(self._matrix):
                grown = np.zeros((max(1024, 2 * len(self._matrix)), DIMENSIONS), np.float32)
                grown[: len(self._matrix)] = self._matrix
                self._matrix = grown
            rng = np.random.default_rng(zlib.crc32(word.encode()))
            self._matrix[row] = rng.standard_normal(DIMENSIONS)
        return row

    def embed_many(self, texts):
        words = [text.lower().split() or [""] for text in texts]
        rows = np.fromiter((self._row(w) for ws in words for w in ws), dtype=np.int64)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        starts = np.cumsum(lengths) - lengths
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        # Texts of one word count at a time, their rows summed as a (texts, words, d)
        # block: `np.add.reduceat` along rows took 13x as long (34 ms for 1,000 texts of
        # 13 words here), so the embedder was most of a fast store's add time.
        for length in np.unique(lengths).tolist():
            same = np.flatnonzero(lengths == length)
            block = rows[starts[same][:, None] + np.arange(length)]
            out[same] = self._matrix[block].sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    def __call__(self, texts):
        return self.embed_many(list(texts)).tolist()

    def embed(self, text, memory_action=None):
        return self.embed_many([text])[0].tolist()


def corpus(size: int, seed: int = 7) -> list[str]:
    """The search benchmark's sentences (12 Zipf-distributed words and an identifier),
    without importing laser-memory (a peer's interpreter may not have it)."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, size=(size, 12)) - 1, 19_999)
    return [" ".join(f"w{r}" for r in row) + f" node-{i % 997}" for i, row in enumerate(ranks)]


#: What the batch stores add before the timed adds, apart from them: one batch of their
#: size, so the first batch's one-off costs (the first large arrays in the thread a store
#: embeds in take their pages from the system: 65 ms against 21 for 1,000 texts here)
#: are not timed as throughput.
WARM_UP = [f"warm-up sentence {n} about w{n % 50} and w{n % 7}" for n in range(1000)]


def queries(count: int) -> list[str]:
    rng = np.random.default_rng(11)
    return [" ".join(f"w{r}" for r in rng.integers(0, 300, 3)) for _ in range(count)]


def _warm_embedder(texts: list[str]) -> HashEmbedder:
    """An embedder that has met every word already, so the timings are the stores'."""
    embedder = HashEmbedder()
    for first in range(0, len(texts), 1000):  # in slices: all at once would be the peak RSS
        embedder.embed_many(texts[first : first + 1000])
    return embedder


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


#: The filter of the stores' filtered searches: half their items.
HALF = {"half": 1}


def _value(texts: list[str], n: int) -> dict:
    """The value of a LangGraph store's item ``n``."""
    return {"text": texts[n], "half": n % 2}


async def _timed_searches_async(search, texts: list[str]) -> float:
    """The p50 of ``await search(text)`` for each text, after one apart."""
    await search(texts[0])
    samples = []
    for text in texts:
        started = time.perf_counter()
        await search(text)
        samples.append((time.perf_counter() - started) * 1000)
    return _percentiles(samples)[0]


def _timed_searches(search, texts: list[str]) -> tuple[float, float, float]:
    """p50 and p99 of ``search(text)`` for each text, and the first search apart (in
    ms): first-use costs, such as an index build, are no steady search's."""
    started = time.perf_counter()
    found = search(texts[0])
    first = (time.perf_counter() - started) * 1000
    found = found["results"] if isinstance(found, dict) else found
    if not found:
        raise SystemExit("a search found nothing: the setup is wrong")
    samples = []
    for text in texts:
        started = time.perf_counter()
        search(text)
        samples.append((time.perf_counter() - started) * 1000)
    return (*_percentiles(samples), first)


# -- one store, one size, in this process -----------------------------------------


def run_laser(size: int, path: str) -> dict:
    import asyncio

    import laser_memory as lm
    from folders.service import ViewFolder

    async def main() -> dict:
        texts, asked = corpus(size), queries(20 if size >= 100_000 else 50)
        embedder = _warm_embedder(texts + asked + WARM_UP)
        log, view = f"{path}/log", f"{path}/view"
        async with lm.connect(f"local://{log}", embedder=embedder) as laser:
            await laser.memory("warm-up").remember_many(WARM_UP)
            memory = laser.memory("bench")
            started = time.perf_counter()
            for first in range(0, size, 1000):
                await memory.remember_many(texts[first : first + 1000])
            add = size / (time.perf_counter() - started)
            await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        out = {"add items/s": add}
        async with lm.connect(f"local://{log}", view=view, embedder=embedder) as laser:
            memory = laser.memory("bench")
            # A fresh reader's first recall builds the view's search index (at 100k
            # items in a child process) and saves its snapshot.
            started = time.perf_counter()
            await memory.recall(text=asked[0], strategy="semantic", limit=10)
            out["first search ms"] = (time.perf_counter() - started) * 1000
            for strategy in ("semantic", "hybrid"):
                samples = []
                await memory.recall(text=asked[0], strategy=strategy, limit=10)
                for text in asked:
                    started = time.perf_counter()
                    await memory.recall(text=text, strategy=strategy, limit=10)
                    samples.append((time.perf_counter() - started) * 1000)
                out[f"{strategy} p50 ms"], out[f"{strategy} p99 ms"] = _percentiles(samples)
        # The next reading process (a CLI call, a restarted server) starts from the
        # snapshot the first one saved, if its index was large enough to save.
        async with lm.connect(f"local://{log}", view=view, embedder=embedder) as laser:
            started = time.perf_counter()
            await laser.memory("bench").recall(text=asked[1], strategy="semantic", limit=10)
            out["next reader first search ms"] = (time.perf_counter() - started) * 1000
        return out

    return asyncio.run(main())


def run_laserstore(size: int, path: str) -> dict:
    """laser-memory behind LangGraph's store API, as a LangGraph user runs it:
    `LaserStore` with the same index config as the `InMemoryStore` below, puts in
    batches of 1,000 (durable, on the embedded log), then searches with a query through
    a managed view (LaserStore ranks a query by words and the index's vectors)."""
    import asyncio

    from langgraph.store.base import PutOp

    import laser_memory as lm
    from folders.service import ViewFolder
    from laser_memory.integrations.langgraph import LaserStore

    async def main() -> dict:
        texts, asked = corpus(size), queries(20 if size >= 100_000 else 50)
        # Words not asked before, for the searches after a put (see those on the fold).
        later = queries(3 * len(asked))
        after_asked, after_theirs = later[len(asked) : 2 * len(asked)], later[2 * len(asked) :]
        embedder = _warm_embedder(texts + later + WARM_UP)
        index = {"dims": DIMENSIONS, "embed": embedder, "fields": ["text"]}
        log, view = f"{path}/log", f"{path}/view"
        async with lm.connect(f"local://{log}") as laser:
            store = LaserStore(laser.memory("bench"), index=index)
            await store.abatch(
                [PutOp(("warm-up",), str(n), {"text": q}) for n, q in enumerate(WARM_UP)]
            )
            started = time.perf_counter()
            for first in range(0, size, 1000):
                await store.abatch(
                    [
                        PutOp(("bench",), str(n), _value(texts, n))
                        for n in range(first, min(size, first + 1000))
                    ]
                )
            add = size / (time.perf_counter() - started)
            await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        async with lm.connect(f"local://{log}", view=view) as laser:
            store = LaserStore(laser.memory("bench"), index=index)
            # A fresh store's first search reads the namespace and keeps what it read.
            started = time.perf_counter()
            await store.asearch(("bench",), query=asked[0], limit=10)
            first_search = (time.perf_counter() - started) * 1000
            samples = []
            for text in asked:
                started = time.perf_counter()
                await store.asearch(("bench",), query=text, limit=10)
                samples.append((time.perf_counter() - started) * 1000)
            filtered = await _timed_searches_async(
                lambda q: store.asearch(("bench",), query=q, limit=10, filter=HALF), asked
            )
        p50, p99 = _percentiles(samples)
        out = {"add items/s": add, "first search ms": first_search}
        out |= {"semantic p50 ms": p50, "semantic p99 ms": p99}
        out["filtered search p50 ms"] = filtered
        # The store keeps a namespace's listing while nothing is folded, and takes its
        # own writes into it, and another store's (read from the log). All on the
        # in-process fold, where a put is seen at once (the view above has no folder
        # running to fold one). Each search asks words not asked before (a kept listing
        # keeps the rows of every word it was asked), those after a put too.
        async with lm.connect(f"local://{log}") as laser:
            store = LaserStore(laser.memory("bench"), index=index)
            other = LaserStore(store._memory, index=index)  # the same fold, another writer
            alone, after_put, after_other = [], [], []
            await store.asearch(("bench",), query=asked[0], limit=10)
            for n, (text, after, theirs) in enumerate(
                zip(asked, after_asked, after_theirs, strict=True)
            ):
                started = time.perf_counter()
                await store.asearch(("bench",), query=text, limit=10)
                alone.append((time.perf_counter() - started) * 1000)
                await store.aput(("bench",), f"later-{n}", {"text": text})
                started = time.perf_counter()
                await store.asearch(("bench",), query=after, limit=10)
                after_put.append((time.perf_counter() - started) * 1000)
                await other.aput(("bench",), f"theirs-{n}", {"text": after})
                started = time.perf_counter()
                await store.asearch(("bench",), query=theirs, limit=10)
                after_other.append((time.perf_counter() - started) * 1000)
        out["folded search p50 ms"] = _percentiles(alone)[0]
        out["folded search after a put p50 ms"] = _percentiles(after_put)[0]
        out["folded search after another store's put p50 ms"] = _percentiles(after_other)[0]
        return out

    return asyncio.run(main())


def run_langgraph(size: int, path: str) -> dict:
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    texts, asked = corpus(size), queries(20 if size >= 100_000 else 50)
    embedder = _warm_embedder(texts + asked + WARM_UP)
    store = InMemoryStore(index={"dims": DIMENSIONS, "embed": embedder, "fields": ["text"]})
    store.batch([PutOp(("warm-up",), str(n), {"text": q}) for n, q in enumerate(WARM_UP)])
    started = time.perf_counter()
    for first in range(0, size, 1000):
        store.batch(
            [
                PutOp(("bench",), str(n), _value(texts, n))
                for n in range(first, min(size, first + 1000))
            ]
        )
    add = size / (time.perf_counter() - started)
    p50, p99, first = _timed_searches(lambda q: store.search(("bench",), query=q, limit=10), asked)
    filtered, _, _ = _timed_searches(
        lambda q: store.search(("bench",), query=q, limit=10, filter=HALF), asked
    )
    return {
        "add items/s": add,
        "first search ms": first,
        "semantic p50 ms": p50,
        "semantic p99 ms": p99,
        "filtered search p50 ms": filtered,
    }


def mem0_memory(path: str, collection: str, dimensions: int, embedder):
    """mem0 as these benchmarks run it: ``infer=False`` adds, embedded Qdrant on disk
    under ``path``, telemetry off, a dummy API key never used, and ``embedder`` in
    place of its model."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("OPENAI_API_KEY", "sk-never-used")
    from mem0 import Memory

    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": f"{path}/qdrant",
                    "on_disk": True,
                    "collection_name": collection,
                    "embedding_model_dims": dimensions,
                },
            },
            "history_db_path": f"{path}/history.db",
        }
    )
    memory.embedding_model = embedder  # its own model is never called
    return memory


def run_mem0(size: int, path: str) -> dict:
    texts, asked = corpus(size), queries(20 if size >= 100_000 else 50)
    memory = mem0_memory(path, "bench", DIMENSIONS, _warm_embedder(texts + asked))
    for text in asked[:10]:
        memory.add(text, user_id="warm-up", infer=False)
    started = time.perf_counter()
    for text in texts:
        memory.add(text, user_id="bench", infer=False)
    add = size / (time.perf_counter() - started)
    # threshold 0: every store returns its 10 nearest, as the others do.
    p50, p99, first = _timed_searches(
        lambda q: memory.search(q, filters={"user_id": "bench"}, limit=10, threshold=0.0), asked
    )
    return {
        "add items/s": add,
        "first search ms": first,
        "semantic p50 ms": p50,
        "semantic p99 ms": p99,
    }


RUNNERS = {
    "laser-memory": run_laser,
    "laserstore": run_laserstore,
    "langgraph": run_langgraph,
    "mem0": run_mem0,
}


def child(store: str, size: int) -> None:
    """Run one store at one size and print its figures as JSON (a child process)."""
    with tempfile.TemporaryDirectory() as path:
        try:
            figures = RUNNERS[store](size, path)
        except ImportError as exc:
            print(json.dumps({"error": f"not installed: {exc}"}))
            return
    figures["peak RSS MB"] = _peak_rss_mb()
    print(json.dumps(figures))


def _peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: after fork and exec
    ru_maxrss still counts the parent's pages at the fork."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- the comparison -------------------------------------------------------------------


def _runs(size: int) -> int:
    """Fresh processes per (store, size): below 10k items a store's adds are one or a
    few batches, a sample of tens of milliseconds this machine's noise moved by 2x
    from run to run, so each figure is the median of five runs (stores in turn)."""
    return 5 if size < 10_000 else 1


def _child(store: str, size: int, peers_python: str) -> dict:
    python = sys.executable if store in OURS else peers_python
    done = subprocess.run(
        [python, "-m", "benchmarks.peers", "--child", store, str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " / ".join(tail) or "no output"}


def measure(sizes: list[int], peers_python: str, mem0_max: int) -> dict[tuple[str, int], dict]:
    results = {}
    for size in sizes:
        runs: dict[str, list[dict]] = {store: [] for store in STORES}
        for _ in range(_runs(size)):
            for store in STORES:
                if store == "mem0" and size > mem0_max:
                    continue
                print(f"  {store} @{size} ...", file=sys.stderr)
                runs[store].append(_child(store, size, peers_python))
        for store, outcomes in runs.items():
            failed = next((o for o in outcomes if "error" in o), None)
            if store == "mem0" and size > mem0_max:
                results[(store, size)] = {"error": f"skipped above {mem0_max} items"}
            elif failed is not None:
                results[(store, size)] = failed
            else:
                results[(store, size)] = {
                    name: statistics.median(o[name] for o in outcomes) for name in outcomes[0]
                }
    return results


def figures_of(results: dict[tuple[str, int], dict]):
    from .figures import Figure, NotMeasured

    out: list[Figure | NotMeasured] = []
    for (store, size), values in results.items():
        if "error" in values:
            reason = values["error"]
            out.append(NotMeasured(benchmark="peers", name=f"{store} @{size}", reason=reason))
            continue
        ours = results.get(("laser-memory", size), {})
        for name, value in values.items():
            baseline = ratio = None
            if store != "laser-memory" and name in ours:
                # The peer's figure over laser-memory's, as every `Figure` ratio is
                # (value over baseline): a rate under 1x and a time or size over 1x
                # mean laser-memory did better.
                baseline = f"laser-memory {name} @{size}"
                ratio = value / ours[name] if ours[name] else None
            unit = name.rsplit(" ", 1)[-1]
            out.append(
                Figure(
                    benchmark="peers",
                    name=f"{store} {name.rsplit(' ', 1)[0]} @{size}",
                    value=value,
                    unit=unit,
                    baseline=baseline,
                    ratio=ratio,
                )
            )
        # A store's figure against another of its own (value, baseline, named as):
        # what a search pays for a write since the last one, what a filter keeping
        # half the items costs a search, and what a snapshot saves the next reading
        # process (below the size snapshots start at, it builds the index anew).
        own_ratios = {
            "laserstore": [
                *(
                    (
                        f"folded search after {whose} p50 ms",
                        "folded search p50 ms",
                        f"folded search after {whose} p50 @{size} vs without",
                    )
                    for whose in ("a put", "another store's put")
                ),
                (
                    "filtered search p50 ms",
                    "semantic p50 ms",
                    f"filtered search p50 @{size} vs without",
                ),
            ],
            "laser-memory": [
                (
                    "next reader first search ms",
                    "first search ms",
                    f"next reader first search @{size} vs the first",
                ),
            ],
        }
        for name, baseline, named in own_ratios.get(store, []):
            if values.get(name) and values.get(baseline):
                out.append(
                    Figure(
                        benchmark="peers",
                        name=f"{store} {named}",
                        value=values[name],
                        unit="ms",
                        baseline=f"{store} {baseline} @{size}",
                        ratio=values[name] / values[baseline],
                    )
                )
        same_api = results.get(("laserstore", size), {})
        if store == "langgraph":
            # LangGraph's store against laser-memory behind the same API: what a
            # LangGraph user gains by swapping the store, recall's index aside.
            for name in (
                "add items/s",
                "first search ms",
                "semantic p50 ms",
                "filtered search p50 ms",
            ):
                if values.get(name) is not None and same_api.get(name):
                    out.append(
                        Figure(
                            benchmark="peers",
                            name=f"langgraph {name.rsplit(' ', 1)[0]} @{size} vs LaserStore",
                            value=values[name],
                            unit=name.rsplit(" ", 1)[-1],
                            baseline=f"laserstore {name} @{size}",
                            ratio=values[name] / same_api[name],
                        )
                    )
    return out


def _default_python() -> str:
    venv = ROOT / ".peers-venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run(quick: bool = False, **_: object):
    """The figures for ``python -m benchmarks``: each peer's figure with its ratio to
    laser-memory's at the same size (a peer's adds at 0.5x add half as fast; its
    search p50 at 100x takes a hundred times as long)."""
    sizes = [1_000] if quick else [1_000, 10_000, 100_000]
    return figures_of(measure(sizes, _default_python(), 10_000 if quick else 100_000))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--peers-python", default=_default_python())
    parser.add_argument("--mem0-max", type=int, default=100_000, help="largest size for mem0")
    parser.add_argument("--child", nargs=2, metavar=("STORE", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    results = measure(sorted(args.sizes), args.peers_python, args.mem0_max)
    names = [
        "add items/s", "first search ms", "next reader first search ms", "semantic p50 ms",
        "semantic p99 ms", "hybrid p50 ms", "filtered search p50 ms", "peak RSS MB",
    ]  # fmt: skip
    print(f"{'store':14} {'size':>7} " + " ".join(f"{n:>16}" for n in names))
    for (store, size), values in results.items():
        if "error" in values:
            print(f"{store:14} {size:>7} {values['error']}")
            continue
        cells = " ".join(f"{values[n]:16,.1f}" if n in values else f"{'-':>16}" for n in names)
        print(f"{store:14} {size:>7} {cells}")


if __name__ == "__main__":
    main()
