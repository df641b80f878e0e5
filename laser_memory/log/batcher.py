"""`AppendBatcher`: appends made to a topic while another is under way go to the log
together, as one batch.

A thousand gathered ``remember`` calls each made an append of one record: a future, a
queue entry, a deadline and a check each, and on the embedded log a request the group
commit handled apart, on Kafka a send each (measured on the embedded log: 28-37 µs an
append of one record gathered a thousand at a time, 5-7 µs a record in one append of a
thousand). Batched, they share one append; each caller still waits for its own records
and gets its own receipts, in the order the calls were made. On Kafka a batch is also
what lets `KafkaLog` send many records for a partition as a record batch of their own.

The appends made while one is under way are gathered through the rest of the event
loop's turn and sent as one batch by a task of their own. An append made while nothing
is under way goes to the log at once (``at_once``, the default), as it would without a
batcher: on the embedded log a caller writing one record at a time then waits for no one.
On Kafka every append waits for its turn instead: a lone record waits out the producer's
linger anyway, and a turn's records sent together go out as record batches that do not
(200 concurrent callers: 1.09x raw aiokafka batched so, 0.91x with the first of each
burst sent at once, alternating runs).

One append fails as a whole. Where that failure is a refusal of the input (nothing was
written: `InvalidRecord`, and `RecordTooLarge` under it) and the batch held several
callers' records, each caller's records are appended again on their own, so one caller's
bad record never fails another's write. Any other failure (`WriteTimeout`,
`LogUnavailable`, `UnknownTopic`, ...) is every caller's: their records shared a commit
or a producer batch, and would have met it together.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Sequence

from ..errors import InvalidRecord
from .naming import check_topic_name
from .port import Appended, Log, OutgoingRecord

__all__ = ["AppendBatcher"]


async def _no_receipts() -> list[Appended]:
    return []


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Batch:
    """The records of one turn for one topic, and who waits for which."""

    __slots__ = ("records", "waiters")

    def __init__(self) -> None:
        self.records: list[OutgoingRecord] = []
        # (future, first record, record count) for each caller.
        self.waiters: list[tuple[asyncio.Future[list[Appended]], int, int]] = []


class AppendBatcher:
    """Sends the appends to ``log`` of one event-loop turn to a topic as one
    ``append_batch``, by a task of its own, started by the turn's first append and run
    after the turn's other callers have added theirs; `drain` waits for the ones under
    way. With ``at_once``, an append made while none is under way is sent at once, by
    its caller.

    >>> batcher = AppendBatcher(log)  # doctest: +SKIP
    >>> [receipt] = await batcher.append_batch("events", [OutgoingRecord(b"hi")])  # doctest: +SKIP
    """

    __slots__ = ("_alone", "_at_once", "_log", "_open", "_sending")

    def __init__(self, log: Log, *, at_once: bool = True) -> None:
        self._log = log
        self._at_once = at_once
        self._open: dict[str, _Batch] = {}
        self._sending: set[asyncio.Task[None]] = set()
        # Appends sent at once, by their callers, and not finished.
        self._alone = 0

    def append_batch(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> Awaitable[list[Appended]]:
        """Append ``records`` to ``topic``, alone or with the other appends of this turn;
        await it for their receipts, in order. The topic and the list are checked when
        it is called (raising at once), the records by the log as its own
        ``append_batch`` does.

        Joining a batch returns the caller's future itself, not a coroutine awaiting
        it: a thousand callers waiting in a turn hold a thousand objects fewer for the
        garbage collector to walk."""
        check_topic_name(topic)
        if type(records) is not list and (
            isinstance(records, str | bytes) or not isinstance(records, Sequence)
        ):
            raise InvalidRecord(
                f"records are a list of OutgoingRecord, got {type(records).__name__}"
            )
        if not records:
            return _no_receipts()
        if self._at_once and not self._alone and not self._sending:
            # Nothing under way: this caller may be the only one, and a batch would
            # cost it a turn of the loop and a task. Counted from the call: an append
            # made before this one's caller awaits it joins a batch, as it would once
            # this one were under way. (Await what this returns: one never awaited
            # leaves the count up, and later appends then batch, as under load.)
            self._alone += 1
            return self._alone_append(topic, records)
        loop = asyncio.get_running_loop()
        batch = self._open.get(topic)
        if batch is None:
            batch = self._open[topic] = _Batch()
            # The batch goes once the callbacks already ready have run, so the other
            # callers of this turn add their records first. A task's first step is
            # scheduled behind them, but under an eager task factory (Python 3.12+) it
            # runs here, at once: so the task first awaits a future resolved behind them.
            turn_over = loop.create_future()
            loop.call_soon(_resolve, turn_over)
            task = loop.create_task(self._send(topic, batch, turn_over))
            self._sending.add(task)
            task.add_done_callback(functools.partial(self._sent, topic, batch))
        future: asyncio.Future[list[Appended]] = loop.create_future()
        batch.waiters.append((future, len(batch.records), len(records)))
        batch.records.extend(records)
        return future

    async def _alone_append(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Appended]:
        try:
            return await self._log.append_batch(topic, records)
        finally:
            self._alone -= 1

    async def drain(self) -> None:
        """Wait until every batch under way has been sent (or failed). (An append sent
        at once is its caller's to wait for.)"""
        while self._sending:
            pending = [task for task in self._sending if not task.done()]
            if not pending:  # ended with another event loop: nothing left to wait for
                self._sending.clear()
                return
            await asyncio.wait(pending)

    async def _send(self, topic: str, batch: _Batch, turn_over: asyncio.Future[None]) -> None:
        await turn_over
        del self._open[topic]
        waiters = batch.waiters
        try:
            try:
                receipts = await self._log.append_batch(topic, batch.records)
            except InvalidRecord:
                if len(waiters) == 1:
                    raise
                await self._send_apart(topic, batch)
                return
        except Exception as exc:
            for future, _, _ in waiters:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, first, count in waiters:
            if not future.done():
                future.set_result(receipts[first : first + count])

    def _sent(self, topic: str, batch: _Batch, task: asyncio.Task[None]) -> None:
        """The sending task ended. If it was cancelled (even before its first step), its
        callers are cancelled with it and the turn's batch is closed."""
        self._sending.discard(task)
        if self._open.get(topic) is batch:
            del self._open[topic]
        for future, _, _ in batch.waiters:
            if not future.done():
                future.cancel()

    async def _send_apart(self, topic: str, batch: _Batch) -> None:
        """Each caller's records appended on their own: the batch was refused whole."""
        for future, first, count in batch.waiters:
            if future.done():
                continue
            try:
                receipts = await self._log.append_batch(topic, batch.records[first : first + count])
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(receipts)
