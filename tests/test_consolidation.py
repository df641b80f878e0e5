"""Consolidation keeps a scope small: the newest items stay, older ones are forgotten,
and a summarizer folds a conversation's messages into one durable summary first.
Over both logs."""

from __future__ import annotations

import asyncio
import gc
import re

import pytest

import laser_memory as lm


async def _turns(memory, conversation: str, count: int, kind: str = "message") -> list:
    ids = []
    for n in range(count):
        ids.append(
            await memory.remember(f"{conversation} turn {n}", conversation=conversation, kind=kind)
        )
        await asyncio.sleep(0.003)  # append times order them, across partitions too
    return ids


async def test_the_default_pass_keeps_the_newest_and_forgets_the_rest(laser: lm.Laser):
    memory = laser.memory("notes")
    c1 = await _turns(memory, "c1", 5, kind="fact")
    c2 = await _turns(memory, "c2", 2, kind="fact")
    report = await memory.consolidate(2, conversation="c1")
    assert report == lm.ConsolidationReport(pruned=3)
    # Counted, not compared with the defaults: a pass that reweighted nothing says 0.
    assert (report.summarized, report.reweighted, report.pruned, report.derived) == (0, 0, 3, 0)
    with pytest.raises(AttributeError):
        report.pruned = 0  # type: ignore[misc]  # a report a driver keeps stays as made
    assert [i.id for i in await memory.recall(conversation="c1", strategy="recent")] == [
        c1[4],
        c1[3],
    ]
    assert len(await memory.recall(conversation="c2")) == 2  # another scope: untouched
    assert await memory.consolidate(2, conversation="c1") == lm.ConsolidationReport()
    # A limit of zero prunes the whole window; history keeps what was forgotten.
    assert (await memory.consolidate(0, conversation="c2")).pruned == 2
    assert await memory.recall(conversation="c2") == []
    assert [h.op for h in await memory.history(c2[0])] == ["remember", "forget"]


async def test_a_scoped_handle_consolidates_its_conversation_only(laser: lm.Laser):
    memory = laser.memory("notes")
    c1 = await _turns(memory, "c1", 4, kind="fact")
    await _turns(memory, "c2", 3, kind="fact")
    scoped = memory.scoped("c1")
    with pytest.raises(lm.InvalidInput, match="scoped to conversation"):
        await scoped.consolidate(1, conversation="c2")
    assert await scoped.consolidate(1) == lm.ConsolidationReport(pruned=3)
    assert [i.id for i in await memory.recall(conversation="c1")] == [c1[3]]
    assert len(await memory.recall(conversation="c2")) == 3


async def test_one_pass_looks_at_the_newest_window_of_items(laser: lm.Laser):
    """A pass sees the scope's newest 10,000 items (the README's window): past it, the
    oldest are neither kept nor forgotten by that pass."""
    window = 10_000
    memory = laser.memory("notes")
    for start in range(0, window + 5, 1000):
        await memory.remember_many(
            [f"fact {n}" for n in range(start, min(start + 1000, window + 5))]
        )
    report = await memory.consolidate(0)
    assert (report.summarized, report.pruned) == (0, window)
    left = await memory.recall(strategy="recent", limit=10)
    assert sorted(i.text for i in left) == [f"fact {n}" for n in range(5)]


async def test_a_summarizer_folds_each_conversations_messages_first(laser: lm.Laser):
    memory = laser.memory("notes")
    await _turns(memory, "c1", 3)
    await _turns(memory, "c2", 2)
    seen: list[list[bytes]] = []

    class Digest:
        async def summarize(self, bodies: list[bytes]) -> str:
            seen.append(bodies)
            return f"{len(bodies)} turns, first: {bodies[0].decode()}"

    report = await memory.consolidate(10, summarizer=Digest(), prune_summarized=True)
    assert report.summarized == 5 and report.pruned == 5
    assert sorted(seen) == [
        [b"c1 turn 0", b"c1 turn 1", b"c1 turn 2"],
        [b"c2 turn 0", b"c2 turn 1"],
    ]
    items = await memory.recall()
    assert sorted(i.text for i in items) == [
        "2 turns, first: c2 turn 0",
        "3 turns, first: c1 turn 0",
    ]
    assert {(i.kind, i.lifetime, i.conversation) for i in items} == {
        (lm.MemoryKind.SUMMARY, "durable", "c1"),
        (lm.MemoryKind.SUMMARY, "durable", "c2"),
    }
    # Without prune_summarized the messages stay; a plain callable serves as well.
    await _turns(memory, "c3", 2)
    report = await memory.consolidate(10, conversation="c3", summarizer=lambda b: b"short")
    assert (report.summarized, report.pruned) == (2, 0)
    assert len(await memory.recall(conversation="c3")) == 3


async def test_a_slow_synchronous_summarizer_never_holds_the_event_loop(laser: lm.Laser):
    """A sync summarizer (a model called over the network, say) ran on the event loop:
    every other call of the process waited for it. It runs on a worker thread now, as
    embedders and rerankers do; an async one, and a callable handing back a coroutine,
    still run on the loop."""
    import time

    memory = laser.memory("notes")
    await _turns(memory, "c1", 2)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    def slow(bodies: list[bytes]) -> bytes:
        time.sleep(0.5)
        return b"summary of %d" % len(bodies)

    ticker = asyncio.create_task(tick())
    try:
        report = await memory.consolidate(10, summarizer=slow)
    finally:
        ticker.cancel()
    assert report.summarized == 2 and ticks >= 10  # the loop ran on meanwhile
    await _turns(memory, "c2", 1)

    async def digest(bodies: list[bytes]) -> bytes:
        return b"async summary"

    report = await memory.consolidate(10, conversation="c2", summarizer=lambda b: digest(b))
    assert report.summarized == 1
    assert "async summary" in [i.text for i in await memory.recall(conversation="c2")]


@pytest.mark.parametrize(
    "summarizer, error, says",
    [
        (lambda bodies: 1 / 0, lm.SummarizeFailed, "ZeroDivisionError"),
        (lambda bodies: b"", lm.SummarizeFailed, "must return a non-empty str or bytes"),
        (lambda bodies: 42, lm.SummarizeFailed, "returned int 42"),
        # `remember` refuses it too; the reason says where, not only that it is no text.
        (lambda bodies: "half a pair \ud83d", lm.SummarizeFailed, "not valid Unicode .* 12"),
        ("not a summarizer", lm.InvalidInput, "summarizer"),
    ],
)
async def test_a_failing_summarizer_writes_nothing(laser: lm.Laser, summarizer, error, says):
    memory = laser.memory("notes")
    await _turns(memory, "c1", 3)
    ends = await laser.log.end_offsets(memory.topic)
    with pytest.raises(error, match=says):
        await memory.consolidate(1, summarizer=summarizer)
    assert await laser.log.end_offsets(memory.topic) == ends


async def test_a_summary_may_be_a_bytearray(laser: lm.Laser):
    """As `remember` takes any bytes-like body, a summarizer may return a bytearray: it
    is stored as the bytes it holds (it was refused as no str or bytes)."""
    memory = laser.memory("notes")
    await _turns(memory, "c1", 3)
    report = await memory.consolidate(10, summarizer=lambda bodies: bytearray(b"in short"))
    assert report.summarized == 3  # the messages it summarizes
    [summary] = await memory.recall(kind="summary")
    assert summary.body == b"in short"


async def test_consolidating_a_stream_with_no_topic_yet_does_nothing(
    any_log_url: str, stream_name: str
):
    """Nothing to consolidate before the first write: an empty report, no summarizer
    called, and no topic made (on Kafka, where a write would need one, no error)."""
    called = []
    async with lm.connect(any_log_url, stream=stream_name) as laser:
        memory = laser.memory("notes")
        report = await memory.consolidate(0, summarizer=called.append, prune_summarized=True)
        assert report == lm.ConsolidationReport() and called == []
        with pytest.raises(lm.UnknownTopic):
            await laser.log.describe_topic(memory.topic)


@pytest.mark.parametrize(
    "returned, named",
    [("", "str ''"), (bytearray(), "bytearray bytearray(b'')"), (None, "NoneType None")],
)
async def test_a_summarizers_empty_body_is_named_as_it_returned_it(
    laser: lm.Laser, returned, named
):
    memory = laser.memory("notes")
    await _turns(memory, "c1", 3)
    with pytest.raises(lm.SummarizeFailed, match=f"returned {re.escape(named)};"):
        await memory.consolidate(1, summarizer=lambda bodies: returned)


@pytest.mark.parametrize("max_items", [-1, 2.5, True, "10"])
async def test_bad_max_items_is_refused(laser: lm.Laser, max_items):
    with pytest.raises(lm.InvalidInput):
        await laser.memory("notes").consolidate(max_items)


async def test_a_consolidation_driver_runs_passes_on_a_timer(tmp_path):
    async with lm.connect(f"local://{tmp_path / 'log'}") as laser:
        memory = laser.memory("notes")
        await memory.remember_many([f"fact {n}" for n in range(6)])
        calls = []

        class Compact:
            async def consolidate(self, scope):
                calls.append(scope)
                if len(calls) == 2:
                    raise RuntimeError("the model is down")  # a failed pass...
                return await memory.consolidate(2)

        driver = lm.ConsolidationDriver(Compact(), every=0.02, scope="triage")
        async with driver:
            for _ in range(200):
                if driver.passes >= 2:
                    break
                await asyncio.sleep(0.01)
        assert driver.passes >= 2  # ... does not stop the later ones
        assert [type(f) for f in driver.failures] == [RuntimeError]
        assert driver.reports[0] == lm.ConsolidationReport(pruned=4)  # the first, at start
        assert set(calls) == {"triage"}
        assert len(await memory.recall()) == 2
        passes = driver.passes
        await asyncio.sleep(0.1)
        assert driver.passes == passes  # stopped
        await driver.stop()


async def test_stop_returns_once_the_pass_under_way_has_ended():
    # A pass cut short by stop() has run its cleanup by the time stop() returns: the
    # caller may close what the pass uses (its connection) right after.
    events: list[str] = []

    class Slow:
        async def consolidate(self, scope):
            events.append("began")
            try:
                await asyncio.sleep(60)
            finally:
                events.append("ended")
            return lm.ConsolidationReport()

    driver = lm.ConsolidationDriver(Slow(), every=60.0)
    await driver.start()
    for _ in range(100):
        if events:
            break
        await asyncio.sleep(0.01)
    await driver.stop()
    assert events == ["began", "ended"]


async def test_a_pass_run_by_hand_returns_its_report_and_keeps_it():
    class Counting:
        def consolidate(self, scope):
            return lm.ConsolidationReport(pruned=len(scope))

    driver = lm.ConsolidationDriver(Counting(), every=60.0, scope="abc")
    assert await driver.run_once() == lm.ConsolidationReport(pruned=3)
    assert list(driver.reports) == [lm.ConsolidationReport(pruned=3)]


def test_a_driver_dropped_while_started_warns(tmp_path):
    # Its task was destroyed pending, its pass cut short, with only asyncio's log line.
    class Noop:
        def consolidate(self, scope):
            return None

    async def leak() -> None:
        async with lm.connect(f"local://{tmp_path}") as laser:
            await lm.ConsolidationDriver(Noop(), every=60.0).start()
            await lm.RetentionDriver(laser.memory("notes"), older_than=5.0, every=60.0).start()
            stopped = lm.ConsolidationDriver(Noop(), every=60.0)
            async with stopped:
                pass

    with pytest.warns(ResourceWarning, match="never stopped") as caught:
        asyncio.run(leak())
        gc.collect()
    assert sorted(str(w.message).split()[0] for w in caught) == [
        "ConsolidationDriver",
        "RetentionDriver",
    ]


@pytest.mark.parametrize("consolidator, every", [(object(), 1.0), (None, 1.0), ("x", 1.0)])
def test_a_consolidation_driver_needs_a_consolidator_and_an_interval(consolidator, every):
    with pytest.raises(lm.ConfigError):
        lm.ConsolidationDriver(consolidator, every=every)


@pytest.mark.parametrize("every", [0, -5.0, float("nan"), True])
def test_a_consolidation_interval_is_positive(every):
    class Noop:
        def consolidate(self, scope):
            return None

    with pytest.raises(lm.ConfigError):
        lm.ConsolidationDriver(Noop(), every=every)


async def test_two_workers_consolidating_at_once_lose_and_double_nothing(
    any_log_url: str, stream_name: str
):
    async with (
        lm.connect(any_log_url, stream=stream_name) as one,
        lm.connect(any_log_url, stream=stream_name) as other,
    ):
        await one.bootstrap(partitions=4)
        memory = one.memory("notes")
        turns = await _turns(memory, "c1", 6)
        facts = await _turns(memory, "c2", 2, kind="fact")

        async def summarize(bodies):
            return f"{len(bodies)} turns"

        reports = await asyncio.gather(
            memory.consolidate(3, summarizer=summarize, prune_summarized=True),
            other.memory("notes").consolidate(3, summarizer=summarize, prune_summarized=True),
        )
        # Whichever saw what (the second may see some or all of the first's batch), they
        # wrote forgets of the same items and a summary under one id: the memory holds one
        # summary and nothing twice.
        assert lm.ConsolidationReport(summarized=6, pruned=6) in reports
        assert all(r.pruned <= 6 and r.summarized in (0, 6) for r in reports)
        left = await memory.recall(strategy="recent", limit=100)
        assert sorted(i.text for i in left) == ["6 turns", "c2 turn 0", "c2 turn 1"]
        assert [i.id for i in left if i.kind is lm.MemoryKind.FACT] == [facts[1], facts[0]]
        [summary] = [i for i in left if i.kind is lm.MemoryKind.SUMMARY]
        assert summary.conversation == "c1" and summary.lifetime == "durable"
        assert await memory.recall(conversation="c1", kind="message") == []
        for turn in turns:  # each forgotten by both workers, each shown once in history
            ops = [h.op for h in await memory.history(turn)]
            assert ops[0] == "remember" and set(ops[1:]) == {"forget"}


async def test_a_driver_failing_for_ever_keeps_its_latest_failures_and_counts_all():
    """Failures and reports are the latest `KEPT`: a driver whose every pass failed kept
    every error with its traceback and frames, and memory grew for as long as it ran."""
    from laser_memory.latest import KEPT

    class Failing:
        def __init__(self) -> None:
            self.calls = 0
            self.enough = asyncio.Event()

        def consolidate(self, scope):
            self.calls += 1
            if self.calls >= 3 * KEPT:
                self.enough.set()
            if self.calls % 2:
                raise RuntimeError(f"pass {self.calls}")
            return lm.ConsolidationReport(pruned=self.calls)

    failing = Failing()
    driver = lm.ConsolidationDriver(failing, every=0.0001)
    async with driver:
        await asyncio.wait_for(failing.enough.wait(), 30)
    calls = failing.calls
    assert driver.failures.total == (calls + 1) // 2
    assert driver.reports.total == calls // 2 == driver.passes
    assert len(driver.failures) == len(driver.reports) == KEPT
    # The latest, oldest first.
    assert str(driver.failures[-1]) == f"pass {calls if calls % 2 else calls - 1}"
    assert [str(f) for f in driver.failures] == [f"pass {n}" for n in range(1, calls + 1, 2)][
        -KEPT:
    ]
    assert driver.reports[-1] == lm.ConsolidationReport(pruned=calls - calls % 2)
