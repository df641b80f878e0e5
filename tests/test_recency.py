"""The view's newest-first index in runs (`folders.recency`) against a plain dict of
entries: whatever the order of gathered entries, inserts among older ones, owner
changes and removals, the runs hold exactly the model's entries, never overlap, are
keyed by their greatest entry, and read back newest first."""

from __future__ import annotations

import tempfile

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from folders import recency
from folders.recency import (
    TAIL,
    RecencyWriter,
    entries_of_run,
    holds_at_least,
    newest_first,
    prefixed_backwards,
)

# A conversation "a1" sorts between "a"'s entries and the key a walk back from "a"'s
# end starts at: a search for that end must not land among "a1"'s runs.
PREFIXES = (
    b"R\x00ns\x00c:a\x00",
    b"R\x00ns\x00c:a1\x00",
    b"R\x00ns\x00c:b\x00",
    b"R\x00ns\x00k:1\x00",
)


def _tail(number: int) -> bytes:
    return number.to_bytes(20, "big") + bytes([number % 251]) * 16


tails = st.integers(min_value=0, max_value=60)
owners = st.sampled_from([b"o1", b"o2", b"o3"])
prefixes = st.sampled_from(PREFIXES)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), prefixes, tails, owners),
        st.tuples(st.just("put"), prefixes, tails, owners),
        st.tuples(st.just("delete"), prefixes, tails, owners),
        st.tuples(st.just("commit"), prefixes, tails, owners),
    ),
    max_size=120,
)


def _check(env: lmdb.Environment, model: dict[bytes, bytes]) -> None:
    with env.begin() as txn:
        rows = list(txn.cursor())
        entries = [entry for key, value in rows for entry in entries_of_run(key, value)]
        # In key order, with nothing twice: runs are disjoint and sorted.
        assert entries == sorted(model.items())
        for key, value in rows:
            run = entries_of_run(key, value)
            assert run, "an empty run is removed"
            assert key == run[-1][0], "a run is keyed by its greatest entry"
            assert len(run) <= recency._MOST
        for prefix in PREFIXES:
            want = sorted(((k, v) for k, v in model.items() if k.startswith(prefix)), reverse=True)
            assert list(newest_first(txn.cursor(), prefix)) == want
            # Whether to build a conversation's index apart asks if it holds so many.
            for count in {1, 2, len(want) - 1, len(want), len(want) + 1} - {0, -1}:
                assert holds_at_least(txn.cursor(), prefix, count) == (len(want) >= count)


@pytest.mark.parametrize("run", [1, 2, 3, 32])
@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_runs_hold_exactly_the_entries_of_a_plain_model(run, ops):
    old = recency.RUN, recency._MOST
    recency.RUN, recency._MOST = run, 2 * run
    try:
        with tempfile.TemporaryDirectory() as path:
            env = lmdb.open(path, map_size=1 << 24)
            model: dict[bytes, bytes] = {}
            gathered: set[bytes] = set()
            txn = env.begin(write=True)
            writer = RecencyWriter(txn.cursor())
            for op, prefix, number, owner in ops:
                key = prefix + _tail(number)
                if op == "add":
                    # A new item's entry: never one already there or gathered.
                    if key in model or key in gathered:
                        continue
                    writer.add(((prefix,), owner), key[-TAIL:])
                    gathered.add(key)
                    model[key] = owner
                    continue
                if op == "commit":
                    writer.flush()
                    txn.commit()
                    gathered.clear()
                    _check(env, model)
                    txn = env.begin(write=True)
                    writer = RecencyWriter(txn.cursor())
                    continue
                writer.flush()
                gathered.clear()
                if op == "put":
                    writer.put(key, owner)
                    model[key] = owner
                else:
                    writer.delete(key)
                    model.pop(key, None)
            writer.flush()
            txn.commit()
            _check(env, model)
            env.close()
    finally:
        recency.RUN, recency._MOST = old


def test_a_fold_of_small_transactions_still_writes_full_runs(tmp_path):
    """Entries that come a few a transaction top up the last run rather than each
    making a row: the fold's saving holds for a live folder, not only a rebuild."""
    env = lmdb.open(str(tmp_path), map_size=1 << 24)
    prefix = PREFIXES[0]
    for number in range(3 * recency.RUN):
        with env.begin(write=True) as txn:
            writer = RecencyWriter(txn.cursor())
            writer.add(((prefix,), b"o"), _tail(number))
            writer.flush()
    with env.begin() as txn:
        rows = list(prefixed_backwards(txn.cursor(), prefix))
        assert len(rows) <= 3
        assert [key for key, _ in newest_first(txn.cursor(), prefix)] == [
            prefix + _tail(n) for n in reversed(range(3 * recency.RUN))
        ]
    env.close()
