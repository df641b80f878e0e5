"""The doorkeeper of the managed view's fold's caches: once a cache overflows it keeps
only keys met before, and whatever it keeps or drops, every record folds where it
belongs (past the caches' bounds too, on both logs, for every tenant)."""

from __future__ import annotations

import pytest

import laser_memory as lm
from folders.service import ViewFolder
from laser_memory.doorkeeper import Doorkeeper, cached_when_repeated

# Every key's bits come from SipHash, salted in each process (ints and tuples mixed by
# hashing their hash's bytes), so the counts below vary from run to run, well inside
# their bounds (checked over many hash seeds).


def test_a_key_is_new_once_then_met():
    seen = Doorkeeper()
    assert seen.met_before((1, 2)) is False
    assert seen.met_before((1, 2)) is True
    assert seen.met_before((2, 1)) is False


@pytest.mark.parametrize(
    "key",
    [
        lambda i: (i, 7),
        lambda i: 0x7F00_0000_0000 + 16 * i,  # ids: addresses, alike in their low bits
        lambda i: i << 32,
        # Packed header sets and names: hashed by Python's SipHash, not mixed again.
        lambda i: b"\x94\xa5lm-ns" + i.to_bytes(4, "big"),
        lambda i: f"tenant-{i}",
    ],
    ids=["tuples", "ids", "high-bits", "bytes", "text"],
)
def test_ten_thousand_keys_coming_back_are_all_met(key):
    # The first doorkeeper kept one key a slot: two keys in one slot put each other
    # out at every round, so one in seven of ten thousand tenants was never cached.
    seen = Doorkeeper()
    keys = [key(i) for i in range(10_000)]
    first = sum(seen.met_before(k) for k in keys)
    assert first < 50  # new keys taken for met: a few
    for _ in range(3):
        assert sum(seen.met_before(k) for k in keys) == len(keys)


@pytest.mark.parametrize(
    "key",
    [
        lambda i: (i, 1),
        lambda i: 0x7F00_0000_0000 + 16 * i,
        lambda i: b"\x94\xa5lm-ns" + i.to_bytes(4, "big"),
        lambda i: f"tenant-{i}",
    ],
    ids=["tuples", "ids", "bytes", "text"],
)
def test_new_keys_are_seldom_taken_for_met_and_the_filter_stays_its_size(key):
    seen = Doorkeeper(bits=1 << 16)
    size = len(seen._bits)
    taken = sum(seen.met_before(key(i)) for i in range(200_000))
    assert taken < 200_000 * 0.025  # about 1.8%: the filter is a fifth full at most
    assert len(seen._bits) == size  # emptied when full, never grown


def test_a_filter_is_emptied_once_it_has_noted_an_eighth_of_its_bits():
    # Emptied after bits // 8 new keys: a key noted that long ago is new again.
    seen = Doorkeeper(bits=1 << 10)
    seen.met_before((-1, 0))
    for i in range(150):  # 128 noted (a few taken for met are not) empty it once
        seen.met_before((i, 2))
    assert seen.met_before((-1, 0)) is False


def test_a_cache_keeps_everything_until_it_overflows_then_only_keys_met_before():
    seen, cache = Doorkeeper(), {}
    # Until then everything, and nothing is noted (a cache that never overflows, ten
    # thousand tenants coming back, pays nothing for its doorkeeper).
    for i in range(100):
        seen.keep(cache, (i, 1), i, limit=100)
    assert len(cache) == 100 and seen._noted == 0
    seen.keep(cache, (100, 1), 100, limit=100)  # full: cleared, then kept
    assert cache == {(100, 1): 100}
    seen.keep(cache, (1, 1), 1, limit=100)  # new since: not kept
    assert (1, 1) not in cache
    seen.keep(cache, (1, 1), 1, limit=100)  # its second sighting is
    assert cache[(1, 1)] == 1 and len(cache) == 2


@pytest.mark.parametrize("bits", [0, 4, 3, 1000, -8])
def test_a_filter_of_no_power_of_two_bits_is_refused(bits):
    with pytest.raises(ValueError, match="power of two"):
        Doorkeeper(bits=bits)


def test_cached_when_repeated_gives_the_functions_results_and_bounds_its_entries():
    calls: list[tuple] = []

    @cached_when_repeated(maxsize=4)
    def joined(a: int, b: int) -> tuple[int, int]:
        calls.append((a, b))
        return (a, b)

    assert joined.__name__ == "joined"
    assert [joined(1, 2), joined(1, 2)] == [(1, 2), (1, 2)]
    assert calls == [(1, 2)]  # kept at once: there was room
    for i in range(4):  # the fifth entry overflows the cache
        assert joined(10, i) == (10, i)
    assert joined.cache_len() == 1  # cleared when full, then that entry
    calls.clear()
    assert joined(20, 0) == (20, 0) and joined.cache_len() == 1  # new: not kept
    assert joined(20, 0) == (20, 0) and joined.cache_len() == 2  # met before: kept
    assert joined(20, 0) == (20, 0)
    assert calls == [(20, 0), (20, 0)]
    joined.cache_clear()
    assert joined.cache_len() == 0 and joined(1, 2) == (1, 2)


#: More owners than any cache of the fold and the writes holds (16,384 each).
ONE_OFF = 17_000


async def test_owners_past_the_caches_bounds_fold_where_they_belong(
    any_log_url: str, stream_name: str, tmp_path
):
    # Each of 17,000 conversations holds one item, so every cache overflows and from
    # then on keeps only what comes again; conversations that come back every 500
    # records, and another tenant's items under the very same conversation names,
    # interleave with them. Both folds put each item in its conversation and tenant.
    entries: list[dict] = []
    expected: dict[tuple[str, str], list[str]] = {}
    for i in range(ONE_OFF):
        batch = [("acme", f"session-{i}", f"one-off {i}")]
        if i % 500 == 0:
            batch.append(("acme", f"again-{i // 500 % 3}", f"acme again {i // 500}"))
            batch.append(("globex", f"session-{i}", f"globex {i}"))
        for tenant, conversation, body in batch:
            entries.append({"body": body, "conversation": conversation, "tenant": tenant})
            expected.setdefault((tenant, conversation), []).append(body)
    view = tmp_path / "view"
    async with lm.connect(any_log_url, stream=stream_name, view=view) as laser:
        await laser.bootstrap(partitions=4)
        writer = laser.memory("notes")
        for first in range(0, len(entries), 1000):
            await writer.remember_many(entries[first : first + 1000])
        await ViewFolder(laser.log, laser.memory_topic_name, view).run(until_caught_up=True)
        sampled = [
            *(("acme", f"session-{i}") for i in (0, 1, 499, 500, 9_000, 16_383, 16_999)),
            *(("acme", f"again-{j}") for j in range(3)),
            *(("globex", f"session-{i}") for i in (0, 500, 16_500)),
        ]
        for folded in (True, False):
            for tenant, conversation in sampled:
                memory = laser.memory("notes", tenant=tenant)
                got = await memory.recall(conversation=conversation, folded=folded, limit=100)
                assert sorted(item.text for item in got) == sorted(
                    expected[tenant, conversation]
                ), (folded, tenant, conversation)
            # A conversation globex never wrote to holds nothing for it.
            globex = laser.memory("notes", tenant="globex")
            assert await globex.recall(conversation="session-1", folded=folded) == []
