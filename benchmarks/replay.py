"""An auditor's reads of the log, each against a plain read of the same log in the same run.

    python -m benchmarks.replay [--items 100000] [--kafka host:port]

Writes ``--items`` items (110-byte bodies over 100 conversations) to an embedded log
(and to Kafka, given a broker), then times, best of three:

- a **plain read** of the topic, keeping nothing: the baseline;
- `replay`, which gathers and sorts the records it keeps, and `replay_stream`, which
  merges a batch a partition, both over the whole namespace;
- a replay **since** the moment of the last 1% of the records, which starts each
  partition where the log's time index puts that moment, against the whole replay;
- `history_from_log` of one item (what `history` does without a view), and of the last
  of a chain of ``CHAIN`` corrections (each remember replacing the one before, in a
  namespace of its own on the same topic), each against the plain read.

Memory is measured apart, each reader in a process of its own: `benchmarks.memory`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable

from .figures import NO_BROKER, Figure, NotMeasured, rows

#: Corrections in the chain whose history is timed (a status remembered again and again,
#: each replacing the one before): a fifth as many in a quick run.
CHAIN = 1000


async def _best(work: Callable[[], Awaitable[object]], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        await work()
        best = min(best, time.perf_counter() - started)
    return best


async def measure(url: str, items: int, chain: int = CHAIN) -> dict[str, float]:
    """Seconds of each read of a topic of ``items`` items at ``url``."""
    import laser_memory as lm
    from folders.replay import history_from_log, replay, replay_stream

    async with lm.connect(url, stream=f"replay{time.time_ns()}") as laser:
        await laser.bootstrap(partitions=4)
        memory = laser.memory("bench")
        body = "x" * 100
        first = None
        for start in range(0, items, 1000):
            ids = await memory.remember_many(
                [
                    {"body": f"{body} {i}", "conversation": f"c{i % 100}"}
                    for i in range(start, min(items, start + 1000))
                ]
            )
            first = first or ids[0]
        corrected = laser.memory("bench-chain")
        last = await corrected.remember("status 0")
        for i in range(1, chain):
            last = await corrected.remember(f"status {i}", supersedes=last)
        log, topic, ns = laser.log, memory.topic, memory.namespace
        times = sorted([r.append_time_ms async for b in log.read(topic) for r in b])
        since = times[-max(1, items // 100)]

        async def plain() -> None:
            async for _ in log.read(topic):
                pass

        async def streamed(**kwargs: object) -> None:
            async for _ in replay_stream(log, topic, namespace=ns, **kwargs):  # type: ignore[arg-type]
                pass

        assert first is not None
        return {
            "plain read": await _best(plain),
            "replay": await _best(lambda: replay(log, topic, namespace=ns)),
            "replay stream": await _best(streamed),
            "replay since the last 1%": await _best(
                lambda: replay(log, topic, namespace=ns, since_ms=since)
            ),
            "replay stream since the last 1%": await _best(lambda: streamed(since_ms=since)),
            "history": await _best(lambda: history_from_log(log, topic, ns, first, tenant="")),
            f"history of a chain of {chain}": await _best(
                lambda: history_from_log(log, topic, corrected.namespace, last, tenant="")
            ),
        }


def _figures(label: str, items: int, seconds: dict[str, float]) -> list[Figure]:
    at = f"{label} @{items}"
    values = {f"{name}, {at}": (value * 1e3, "ms") for name, value in seconds.items()}
    ratios = {
        f"replay, {at}": f"plain read, {at}",
        f"replay stream, {at}": f"replay, {at}",
        f"replay since the last 1%, {at}": f"replay, {at}",
        f"replay stream since the last 1%, {at}": f"replay stream, {at}",
        f"history, {at}": f"plain read, {at}",
    }
    for name in seconds:
        if name.startswith("history of a chain"):
            ratios[f"{name}, {at}"] = f"plain read, {at}"
    return rows("replay", values, ratios)


def run(
    quick: bool = False, kafka: str | None = None, items: int | None = None, **_: object
) -> list[Figure | NotMeasured]:
    """The figures for ``python -m benchmarks``: 20k items quick, 200k in full."""
    items = items or (20_000 if quick else 200_000)
    chain = CHAIN // 5 if quick else CHAIN
    out: list[Figure | NotMeasured] = []
    with tempfile.TemporaryDirectory() as path:
        out += _figures("embedded", items, asyncio.run(measure(f"local://{path}", items, chain)))
    if kafka:
        out += _figures("Kafka", items, asyncio.run(measure(f"kafka://{kafka}", items, chain)))
    else:
        out.append(NotMeasured(benchmark="replay", name=f"Kafka @{items}", reason=NO_BROKER))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--kafka", default=None, help="a broker's host:port")
    args = parser.parse_args()
    for figure in run(kafka=args.kafka, items=args.items):
        if isinstance(figure, NotMeasured):
            print(f"  {figure.name:<48} not measured: {figure.reason}")
            continue
        ratio = f"{figure.ratio:6.3f}x {figure.baseline}" if figure.ratio is not None else ""
        print(f"  {figure.name:<48} {figure.value:10,.1f} {figure.unit:<3} {ratio}")


if __name__ == "__main__":
    main()
