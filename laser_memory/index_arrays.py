"""How a search index keeps its entries: as arrays, mostly, so that an index saved as a
snapshot can be mapped from its file by the next reader instead of rebuilt or copied.

- `Posting`: one term's entries (slot, count, generation: 12 bytes each), a mapped base
  and what was added since.
- `TermRuns`: the term numbers of every entry, run after run.
- `IdTable`: entry ids by slot and slots by id (sorted arrays, bisected).
- `TermGroups`: a common term's entries grouped by (count, length), for the groups walk.
- `TermCache`: per-term arrays a query made, kept within a byte budget.

`laser_memory.search_index.SearchIndex` is their one user.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "CACHE_BYTES",
    "COUNT",
    "COUNT_DTYPE",
    "GENERATION",
    "GENERATION_DTYPE",
    "ID_ARRAYS",
    "POSTING_ARRAYS",
    "SLOT",
    "SLOT_DTYPE",
    "TERM",
    "TERM_DTYPE",
    "IdTable",
    "Posting",
    "TermCache",
    "TermGroups",
    "TermRuns",
    "generations_of",
    "joined_postings",
]

# A posting entry is 12 bytes: int32 slot, uint32 count, uint32 generation (a slot's
# generation counts its removals; compared modulo 2**32). Postings are most of a
# reader's memory after the vectors: 64-bit fields doubled it for nothing.
SLOT, COUNT, GENERATION = "i", "I", "I"
SLOT_DTYPE, COUNT_DTYPE, GENERATION_DTYPE = np.int32, np.uint32, np.uint32
TERM, TERM_DTYPE = "i", np.int32  # term numbers of `SearchIndex._slot_terms`
#: A snapshot's posting arrays: every term's entries, term after term.
POSTING_ARRAYS = {
    "posting_slots": SLOT_DTYPE,
    "posting_counts": COUNT_DTYPE,
    "posting_generations": GENERATION_DTYPE,
}


def generations_of(generation: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The current generation of ``slots`` (the index keeps them as uint32 too, so
    this is a plain gather)."""
    return generation[slots]


def joined_postings(
    postings: Sequence[Posting],
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """Every posting's entries (slots, counts, generations), posting after posting, as
    `Posting.entries` gives each, and where each posting's entries end. Copied into
    one buffer a field, not made into three arrays a posting and then joined: a
    snapshot of an index of 10,000 items (as many terms) spent most of its time so."""
    slots, counts, generations = array(SLOT), array(COUNT), array(GENERATION)
    ends = array("q")
    for posting in postings:
        if posting.base is not None:
            (base_slots, base_counts, base_generations), start, end = posting.base
            slots.frombytes(base_slots[start:end].view(np.uint8))
            counts.frombytes(base_counts[start:end].view(np.uint8))
            generations.frombytes(base_generations[start:end].view(np.uint8))
        slots.extend(posting.slots)
        counts.extend(posting.counts)
        generations.extend(posting.generations)
        ends.append(len(slots))
    return (
        (
            np.frombuffer(slots, dtype=SLOT_DTYPE),
            np.frombuffer(counts, dtype=COUNT_DTYPE),
            np.frombuffer(generations, dtype=GENERATION_DTYPE),
        ),
        np.frombuffer(ends, dtype=np.int64),
    )


# The entries a restored posting has added since its snapshot: none, in arrays every
# restored posting shares until its first addition gives it its own (three empty arrays
# a term were a third of loading a 10,000-term snapshot). Nothing may append to them:
# `Posting.add` and `Posting.extend` give the posting its own first.
_NONE_ADDED = (array(SLOT), array(COUNT), array(GENERATION))


class Posting:
    """One term's entries: slots, counts and the slot generation each was written in;
    and bounds on them (the highest count, the shortest item) that removals leave as
    they are, so they stay upper bounds of a score.

    Entries are ``base`` (slots, counts, generations as arrays: a restored snapshot's,
    often mapped from its file, never written) then the ones added since, which grow."""

    __slots__ = ("base", "counts", "generations", "live", "max_count", "min_length", "slots")

    def __init__(self) -> None:
        # The snapshot's three arrays and this term's run in them: views are made on
        # use, not kept (three per term were a third of a restored index's objects).
        self.base: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int, int] | None = None
        self.slots = array(SLOT)
        self.counts = array(COUNT)
        self.generations = array(GENERATION)
        self.live = 0
        self.max_count = 0
        self.min_length = 1 << 62

    @classmethod
    def restored(
        cls,
        base: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int, int],
        live: int,
        max_count: int,
        min_length: int,
    ) -> Posting:
        """A posting of a restored snapshot: its entries ``base``, none added yet."""
        posting = cls.__new__(cls)
        posting.base = base
        posting.slots, posting.counts, posting.generations = _NONE_ADDED
        posting.live, posting.max_count, posting.min_length = live, max_count, min_length
        return posting

    def _own_added(self) -> None:
        self.slots, self.counts, self.generations = array(SLOT), array(COUNT), array(GENERATION)

    def __len__(self) -> int:
        return len(self.slots) + (self.base[2] - self.base[1] if self.base is not None else 0)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entry's slot, count and generation, base first."""
        added = (
            np.frombuffer(self.slots, dtype=SLOT_DTYPE),
            np.frombuffer(self.counts, dtype=COUNT_DTYPE),
            np.frombuffer(self.generations, dtype=GENERATION_DTYPE),
        )
        if self.base is None:
            return added
        arrays, start, end = self.base
        based = tuple(a[start:end] for a in arrays)
        if not len(self.slots):
            return based
        return tuple(np.concatenate(pair) for pair in zip(based, added, strict=True))

    def add(self, slot: int, count: int, generation: int, length: int) -> None:
        if self.slots is _NONE_ADDED[0]:
            self._own_added()
        self.slots.append(slot)
        self.counts.append(count)
        self.generations.append(generation & 0xFFFFFFFF)
        self.live += 1
        if count > self.max_count:
            self.max_count = count
        if length < self.min_length:
            self.min_length = length

    def extend(self, slots: bytes, counts: bytes, generations: bytes) -> None:
        """Add entries given as the bytes of their slots, counts and generations (a
        block of a build); the caller keeps ``live`` and the bounds."""
        if self.slots is _NONE_ADDED[0]:
            self._own_added()
        self.slots.frombytes(slots)
        self.counts.frombytes(counts)
        self.generations.frombytes(generations)

    def current(self, generation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, counts) of the entries still current, as stored: int32 and uint32.
        Half the bytes of int64 and float64 in a reader's caches; arithmetic with
        float64 converts a count exactly, so scores stay the same to the bit."""
        slots, counts, generations = self.entries()
        valid = generations == generations_of(generation, slots)
        if self.base is not None and not len(self.slots) and valid.all():
            # The snapshot's own arrays, often mapped from its file: served as they are
            # (read only), so a reader's cache holds no copy of them.
            slots, counts = slots.view(), counts.view()
            slots.flags.writeable = counts.flags.writeable = False
            return slots, counts
        return slots[valid], counts[valid]

    def compact(self, generation: np.ndarray) -> None:
        """Drop stale entries once they outnumber the current ones."""
        if len(self) <= 2 * self.live + 16:
            return
        slots, counts = self.current(generation)
        self.base = None
        self.slots = array(SLOT, slots.astype(SLOT_DTYPE).tobytes())
        self.counts = array(COUNT, counts.astype(COUNT_DTYPE).tobytes())
        self.generations = array(GENERATION, generations_of(generation, slots).tobytes())


#: Bytes each of a reader's per-term array caches may hold (see `TermCache`), by
#: default. 16 MB keeps a reader of a million items under 100 MB of anonymous memory
#: however many different queries it answers (64 MB took it to 134 MB), for 1 ms more
#: on a keyword query's median there (`MemoryConfig.search_cache_bytes`).
CACHE_BYTES = 16 << 20


class TermCache:
    """Arrays made from a term's posting list, kept while they fit ``budget`` bytes;
    the least recently used go first. Without a bound a reader serving many different
    queries would end up with a copy of every posting list it ever scored, and an
    array as long as the index for every common term it met."""

    __slots__ = ("_entries", "_sizes", "budget", "size")

    def __init__(self, budget: int) -> None:
        self._entries: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self.budget = budget
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, term: str) -> Any:
        value = self._entries.pop(term, None)
        if value is not None:
            self._entries[term] = value  # the most recently used is last
        return value

    @staticmethod
    def owned_bytes(*arrays: np.ndarray) -> int:
        """What arrays cost a cache: the bytes of those holding their own data, plus a
        little for each (a view of a mapped snapshot costs the process next to
        nothing, but the cache must stay bounded in entries too)."""
        return sum((a.nbytes if a.base is None else 0) + 256 for a in arrays)

    def put(self, term: str, value: Any, nbytes: int) -> None:
        self.pop(term)
        self._entries[term], self._sizes[term] = value, nbytes
        self.size += nbytes
        # The newest entry always stays: a caller is using it.
        while self.size > self.budget and len(self._entries) > 1:
            self.pop(next(iter(self._entries)))

    def pop(self, term: str) -> None:
        if self._entries.pop(term, None) is not None:
            self.size -= self._sizes.pop(term)

    def clear(self) -> None:
        self._entries.clear()
        self._sizes.clear()
        self.size = 0

    def resize(self, budget: int) -> None:
        """Hold at most ``budget`` bytes from now on (the least recently used go)."""
        self.budget = budget
        while self.size > budget and self._entries:
            self.pop(next(iter(self._entries)))


class TermGroups:
    """A common term's entries grouped by (count, length of the entry): one term's
    BM25 is the same for every entry of a group. Entries are appended with the slot
    generation they were written in, like posting lists; stale ones are skipped."""

    __slots__ = ("counts", "generations", "index", "lengths", "removals", "slots")

    def __init__(self, removals: int = 0) -> None:
        #: The index's count of removals when these groups held current entries only.
        self.removals = removals
        self.index: dict[tuple[int, int], int] = {}
        self.counts: list[int] = []
        self.lengths: list[int] = []
        self.slots: list[array] = []
        self.generations: list[array] = []

    @classmethod
    def of(
        cls,
        slots: np.ndarray,
        counts: np.ndarray,
        lengths: np.ndarray,
        generations: np.ndarray,
        removals: int = 0,
    ) -> TermGroups:
        """The groups `add` makes from these entries, one by one in this order (groups
        numbered as first met, each group's entries in this order), made in bulk: a
        common word's first query at a million entries made them in a Python loop."""
        groups = cls(removals)
        if not len(slots):
            return groups
        counts = np.asarray(counts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        width = int(lengths.max()) + 1
        if int(counts.max()) * width + width <= 1 << 16:
            # (count, length) as one 16-bit number in the same order: numpy sorts those
            # by radix, 7x quicker than 64-bit keys at a million entries.
            key = (counts * width + lengths).astype(np.uint16)
        else:
            key = (counts << 32) | lengths
        order = np.argsort(key, kind="stable")  # stable: entries keep their order
        ordered = key[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(order)]
        # Number the groups as `add` would: by where each was first met.
        for first, last in sorted(
            zip(starts.tolist(), ends.tolist(), strict=True), key=lambda run: order[run[0]]
        ):
            at = order[first:last]
            head = int(at[0])
            groups.index[(int(counts[head]), int(lengths[head]))] = len(groups.counts)
            groups.counts.append(int(counts[head]))
            groups.lengths.append(int(lengths[head]))
            groups.slots.append(array(SLOT, slots[at].astype(SLOT_DTYPE).tobytes()))
            groups.generations.append(
                array(GENERATION, (generations[at] & 0xFFFFFFFF).astype(GENERATION_DTYPE).tobytes())
            )
        return groups

    def add(self, count: int, length: int, slot: int, generation: int) -> None:
        group = self.index.get((count, length))
        if group is None:
            group = self.index[(count, length)] = len(self.counts)
            self.counts.append(count)
            self.lengths.append(length)
            self.slots.append(array(SLOT))
            self.generations.append(array(GENERATION))
        self.slots[group].append(slot)
        self.generations[group].append(generation & 0xFFFFFFFF)

    def live(self, group: int, generation: np.ndarray, removals: int) -> np.ndarray:
        """The group's current slots (dropping stale entries once they are most).
        ``removals``: the index's count of removals now; while it is the one the groups
        were made at, no entry can be stale and none is checked (a tenth of a query of
        common words at a million entries)."""
        slots = np.frombuffer(self.slots[group], dtype=SLOT_DTYPE)
        if removals == self.removals:
            return slots.astype(np.int64)
        stored = np.frombuffer(self.generations[group], dtype=GENERATION_DTYPE)
        live = slots[stored == generations_of(generation, slots)]
        if len(live) * 2 + 16 < len(slots):
            self.slots[group] = array(SLOT, live.tobytes())
            self.generations[group] = array(GENERATION, generations_of(generation, live).tobytes())
        return live.astype(np.int64)


class TermRuns:
    """The term numbers of every entry, run after run: ``base`` (a restored snapshot's,
    often mapped from its file, never written) then the runs added since. A run lies
    wholly in one of the two."""

    __slots__ = ("added", "base")

    def __init__(self, base: np.ndarray | None = None) -> None:
        self.base = np.zeros(0, dtype=TERM_DTYPE) if base is None else base
        self.added = array(TERM)

    def __len__(self) -> int:
        return len(self.base) + len(self.added)

    def extend(self, run: list[int]) -> None:
        self.added.extend(run)

    def run(self, start: int, end: int) -> list[int]:
        based = len(self.base)
        if end <= based:
            return self.base[start:end].tolist()
        return self.added[start - based : end - based].tolist()

    def gather(self, at: np.ndarray) -> np.ndarray:
        """The numbers at positions ``at``."""
        if not len(self.added):
            return self.base[at]
        every = np.concatenate([self.base, np.frombuffer(self.added, dtype=TERM_DTYPE)])
        return every[at]


class IdTable:
    """Entry ids by slot, and slots by id. A restored snapshot's ids are arrays (often
    mapped from its file): 16 bytes a slot with a mark of presence, and the present ids
    sorted as two big-endian halves with their slots, searched by bisection. Slots
    changed since and slots added are kept apart, and a slot found by bisection counts
    only if it still holds that id. (A bytes object and a dict entry per id took a
    quarter of a restored reader's memory.)"""

    __slots__ = (
        "added",
        "changed",
        "ids",
        "present",
        "sorted_high",
        "sorted_low",
        "sorted_slots",
        "tail",
    )

    def __init__(self, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        if arrays is None:
            arrays = IdTable.arrays_of([])
        self.ids = arrays["ids"]
        self.present = arrays["id_present"]
        self.sorted_high = arrays["id_sorted_high"]
        self.sorted_low = arrays["id_sorted_low"]
        self.sorted_slots = arrays["id_sorted_slots"]
        self.changed: dict[int, bytes | None] = {}  # base slots freed or reused since
        self.tail: list[bytes | None] = []  # slots after the base
        self.added: dict[bytes, int] = {}  # ids put since, by slot

    @staticmethod
    def arrays_of(ids: Sequence[bytes | None]) -> dict[str, np.ndarray]:
        """The arrays of a table holding ``ids`` by slot (every id 16 bytes)."""
        if any(raw_id is not None and len(raw_id) != 16 for raw_id in ids):
            raise ValueError("only 16-byte ids are kept as arrays")
        present = np.array([raw_id is not None for raw_id in ids], dtype=bool)
        joined = b"".join(raw_id if raw_id is not None else bytes(16) for raw_id in ids)
        table = np.frombuffer(joined, dtype=np.uint8).reshape(-1, 16).copy()
        halves = table.view(">u8").reshape(-1, 2).astype(np.uint64)
        slots = np.flatnonzero(present)
        order = slots[np.lexsort((halves[slots, 1], halves[slots, 0]))]
        return {
            "ids": table,
            "id_present": present,
            "id_sorted_high": np.ascontiguousarray(halves[order, 0]),
            "id_sorted_low": np.ascontiguousarray(halves[order, 1]),
            "id_sorted_slots": order.astype(np.int64),
        }

    def arrays(self) -> dict[str, np.ndarray]:
        if not self.changed and not self.tail and not self.added:
            # Nothing changed since it was restored: its arrays are still the whole of it.
            return {
                "ids": self.ids,
                "id_present": self.present,
                "id_sorted_high": self.sorted_high,
                "id_sorted_low": self.sorted_low,
                "id_sorted_slots": self.sorted_slots,
            }
        return IdTable.arrays_of([self[slot] for slot in range(len(self))])

    def __len__(self) -> int:
        return len(self.ids) + len(self.tail)

    def __getitem__(self, slot: int) -> bytes | None:
        based = len(self.ids)
        if slot >= based:
            return self.tail[slot - based]
        if slot in self.changed:
            return self.changed[slot]
        return self.ids[slot].tobytes() if self.present[slot] else None

    def __setitem__(self, slot: int, raw_id: bytes | None) -> None:
        based = len(self.ids)
        if slot >= based:
            self.tail[slot - based] = raw_id
        else:
            self.changed[slot] = raw_id

    def append(self, raw_id: bytes | None) -> None:
        self.tail.append(raw_id)

    def extend_bound(self, raw_ids: Sequence[bytes]) -> None:
        """`append` then `bind` each of ``raw_ids``, in the slots after the last."""
        first = len(self)
        self.tail.extend(raw_ids)
        self.added.update(zip(raw_ids, range(first, first + len(raw_ids)), strict=True))

    def slot_of(self, raw_id: bytes) -> int | None:
        """The slot holding ``raw_id``, or None."""
        slot = self.added.get(raw_id)
        if slot is not None:
            return slot
        if len(raw_id) != 16 or not len(self.sorted_slots):
            return None
        high = int.from_bytes(raw_id[:8], "big")
        low = int.from_bytes(raw_id[8:], "big")
        first = int(np.searchsorted(self.sorted_high, np.uint64(high), side="left"))
        last = int(np.searchsorted(self.sorted_high, np.uint64(high), side="right"))
        if first == last:
            return None
        at = first + int(np.searchsorted(self.sorted_low[first:last], np.uint64(low)))
        if at == last or int(self.sorted_low[at]) != low:
            return None
        slot = int(self.sorted_slots[at])
        return slot if self[slot] == raw_id else None  # freed or reused since

    def bind(self, raw_id: bytes, slot: int) -> None:
        self.added[raw_id] = slot

    def unbind(self, raw_id: bytes) -> None:
        self.added.pop(raw_id, None)


#: The arrays of a snapshot's `IdTable`, with their dtypes.
ID_ARRAYS = {
    "ids": np.uint8, "id_present": np.bool_, "id_sorted_high": np.uint64,
    "id_sorted_low": np.uint64, "id_sorted_slots": np.int64,
}  # fmt: skip
