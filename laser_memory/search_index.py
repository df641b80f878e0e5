"""An in-memory search index over one candidate set: posting lists, lengths, vectors,
neighbours, feedback and positions, kept up to date item by item.

Folded recall keeps one per (tenant, conversation or all, embedder) in its fold, and a
managed view's reader keeps one per the same in the view's process, so a recall by
text or meaning reads only the items it returns instead of every candidate. Entries
are `MemoryItem` s as a read of that candidate set sees them (`put`), so the index
ranks exactly what a scan would, with the same code (`laser_memory.text_ranking`).

>>> index = SearchIndex("test/word-hash")                      # doctest: +SKIP
>>> index.put(item.id.bytes, item)                              # doctest: +SKIP
>>> index.find("keys", mode="hybrid", query_vector=q, min_similarity=None,
...            limit=10, exclude=frozenset())                   # doctest: +SKIP
"""

from __future__ import annotations

import bisect
import heapq
import math
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import numpy as np

from .embedding import (
    cosines_in_range,
    finish_cosines,
    query_length,
    row_dots,
    row_norms,
    start_row_dots,
    to_vector,
)
from .errors import shown
from .index_arrays import (
    CACHE_BYTES,
    COUNT,
    COUNT_DTYPE,
    GENERATION,
    GENERATION_DTYPE,
    ID_ARRAYS,
    POSTING_ARRAYS,
    SLOT,
    SLOT_DTYPE,
    TERM,
    TERM_DTYPE,
    IdTable,
    Posting,
    TermCache,
    TermGroups,
    TermRuns,
    generations_of,
    joined_postings,
)
from .items import MemoryItem
from .recall import dimensions_mismatch
from .scoring import BM25_B, BM25_K1, TermStatistics, bm25_postings
from .terms import count_terms, terms
from .text_ranking import (
    FEEDBACK_SHARE,
    Columns,
    Ranked,
    rank_by_feedback,
    rank_by_similarity,
    rank_by_text,
)
from .vector_clusters import ApproximateSearch, VectorClusters

__all__ = [
    "CACHE_BYTES",
    "COMMON_FROM",
    "INDEX_SNAPSHOT_FORMAT",
    "Owner",
    "SearchIndex",
    "SnapshotError",
]

#: Slots put since the entries were sorted newest first that make a recall without text
#: sort them again (or a quarter of the entries, if more).
RESORT_FROM = 1024

# What an ordering-only index counts of a body.
_NO_TERMS: dict[str, int] = {}

#: A term held by more entries than this is common (see `SearchIndex._by_rare_terms`).
COMMON_FROM = 4096

_Key = tuple[int, int, int]
_OWNER_COLUMNS = ("_agent", "_user", "_application", "_kind", "_irregular")

#: A read's owner filters: (agent, user, application, kind code), None where unset.
Owner = tuple[str | None, str | None, str | None, int | None]

_SLOT_MASK = (1 << 32) - 1


def _member(key: _Key, slot: int) -> int:
    """An entry of a conversation's neighbour list as one number that sorts as
    (append time, partition, offset, slot) does: a fifth of the memory of the tuples."""
    time_, partition, offset = key
    return (((time_ << 32 | partition) << 64 | offset) << 32) | slot


#: The layout of `SearchIndex.snapshot`; a snapshot of another is never read.
INDEX_SNAPSHOT_FORMAT = 6  # 6: norms in float64 (`row_norms`)

#: Dead term numbers (of removed entries) past which, once they are half the array,
#: `SearchIndex._slot_terms` is compacted.
_COMPACT_TERMS_FROM = 4096


class _Block:
    """New entries `SearchIndex.put_many` has staged: their numbers only, as arrays."""

    __slots__ = (
        "counts", "irregular", "keys", "lengths", "owners", "runs", "slots", "terms", "weights",
    )  # fmt: skip

    def __init__(self) -> None:
        self.slots = array("q")
        self.terms = array(TERM)  # every entry's term numbers, run after run
        self.counts = array(COUNT)  # and their counts
        self.runs = array("q")  # each entry's number of terms
        self.lengths = array("q")
        self.keys = array("q")  # (append time, partition, offset) of each
        self.weights = array("d")
        self.owners = array("q")  # (agent, user, application, kind) codes of each
        self.irregular = array("B")


#: Entries `SearchIndex.put_many` writes together: large enough that per-term work is
#: shared by many entries, small enough that the block's flat arrays stay a few MB.
_BLOCK = 32_768

#: The highest count a term's part is tabled for (`SearchIndex._scores_at_length`);
#: a term counted more often in one entry is scored row by row.
_COUNT_TABLE = 4096
#: The fewest rows a walk over common words' groups may meet before it gives up for a
#: scoring of every holder (an eighth of the index, when that is more): past it, the
#: walk costs more than the scoring it spares.
_WALK_ROWS = 20_000

# Slot columns a snapshot holds as raw bytes, with their dtypes.
_COLUMNS = {
    "_generation": np.uint32, "_time": np.int64, "_partition": np.int64,
    "_offset": np.int64, "_weight": np.float64, "_length": np.float64,
    "_alive": np.bool_, "_has_vector": np.bool_, "_other_vector": np.bool_,
    "_before": np.int64, "_after": np.int64, "_norms": np.float64,
    "_run_start": np.int64, "_run_end": np.int64,
    "_agent": np.int32, "_user": np.int32, "_application": np.int32,
    "_kind": np.int32, "_irregular": np.bool_,
}  # fmt: skip


def _room_for(count: int) -> int:
    """Slots for ``count`` entries and a quarter more: what a clustering leaves, and a
    snapshot keeps at most, for the entries put after it (at least the 64 a new index
    starts with)."""
    return max(64, count + count // 4)


class SnapshotError(ValueError):
    """Bytes that are no snapshot of this format: the caller builds the index anew."""


class _Snapshot(msgspec.Struct, array_like=True):
    """Everything a `SearchIndex` holds but its caches (per-term arrays and groups,
    remade on use), and its vectors, which travel apart (they are most of it, and a
    reader can map them from a file instead of holding a copy)."""

    format: int
    label: str | None
    common_from: int
    capacity: int
    dimensions: int | None
    documents: int
    total_length: int
    vector_count: int
    weighted: int
    irregular_count: int
    clustered_until: int
    moment: int | None
    size: int  # slots in use (the id arrays' rows)
    free: list[int]
    terms: list[str]  # the term numbers' terms; the posting fields below in this order
    posting_ends: bytes  # int64 end of each term's run in the posting arrays
    posting_live: bytes
    posting_max_count: bytes
    posting_min_length: bytes
    groups: list[str]  # group names; group_of and members refer to them by number
    group_of: bytes  # int32 group number of each slot
    members: list[bytes]  # int64 slots of each group, in key order
    codes: list[tuple[str | None, int]]
    centroids: bytes | None
    bounds: bytes | None
    expiry_slots: bytes
    expiry_at: bytes
    expiring_at: bytes
    expiring_slots: bytes


_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(_Snapshot)


def _ints(values, dtype=np.int64) -> bytes:
    return np.asarray(values, dtype=dtype).tobytes()


#: Vectors whose norms are computed together (see `_fresh_norms`).
_NORM_BLOCK = 16_384


class SearchIndex:
    """The candidates of one read (a tenant's namespace, or one conversation of it),
    for one embedder label (None: text only)."""

    def __init__(
        self,
        label: str | None,
        *,
        common_from: int = COMMON_FROM,
        cache_bytes: int = CACHE_BYTES,
        ordering_only: bool = False,
    ) -> None:
        #: Whether this index keeps only what a recall without text needs (times,
        #: feedback, owners): no terms, vectors or neighbours, so building one is not
        #: paying to tokenise every body for a newest-first read. `find` refuses it.
        self.ordering_only = ordering_only
        # Without vectors an ordering index is as one with no embedder.
        self.label = None if ordering_only else label
        self._ids = IdTable()
        self._free: list[int] = []
        # The terms each entry holds, as numbers (`_term_table`) in one array: a slot's
        # run is from `_run_start` to `_run_end`. (A tuple of strings per entry took a
        # fifth of a reader's memory.) Runs of removed entries are dead until the array
        # is compacted.
        self._term_table: list[str] = []
        self._term_numbers: dict[str, int] = {}
        self._slot_terms = TermRuns()
        self._dead_terms = 0
        # term -> its posting list. Entries are appended and never edited: an entry counts
        # while its slot's generation is the one it was written with.
        self._postings: dict[str, Posting] = {}
        self._generation = np.zeros(64, dtype=GENERATION_DTYPE)
        # A term's posting list as arrays, until the term's postings change; and for
        # common terms, the count of every slot.
        self._arrays = TermCache(cache_bytes)  # term -> (slots, counts)
        self._dense = TermCache(cache_bytes)  # term -> counts of every slot
        # Per conversation, its entries as sorted `_member` numbers (neighbours).
        # A restored group is an array of its slots in key order (8 bytes an entry)
        # until first changed; then a list of `_member` numbers, which bisect quickly.
        self._groups: dict[str, list[int] | array] = {}
        self._group_of: list[str] = []
        self._documents = 0
        self._total_length = 0
        self._dimensions: int | None = None
        capacity = 64
        self._time = np.zeros(capacity, dtype=np.int64)
        self._partition = np.zeros(capacity, dtype=np.int64)
        self._offset = np.zeros(capacity, dtype=np.int64)
        self._weight = np.zeros(capacity, dtype=np.float64)
        self._length = np.zeros(capacity, dtype=np.float64)
        self._alive = np.zeros(capacity, dtype=bool)
        self._has_vector = np.zeros(capacity, dtype=bool)
        self._other_vector = np.zeros(capacity, dtype=bool)
        self._before = np.full(capacity, -1, dtype=np.int64)
        self._after = np.full(capacity, -1, dtype=np.int64)
        self._run_start = np.zeros(capacity, dtype=np.int64)
        self._run_end = np.zeros(capacity, dtype=np.int64)
        self._vectors: np.ndarray | None = None
        self._norms = np.zeros(capacity, dtype=np.float64)
        self._unnormed: list[int] = []  # slots whose vector's norm is not computed yet
        # The least positive and the greatest norm any slot has had (None: not known,
        # as after loading a snapshot): while both times a query's length lie within
        # `finish_cosines`' range, no row needs scoring again in float64.
        self._norm_range: tuple[float, float] | None = None
        self._vector_count = 0
        self._weighted = 0  # entries with feedback
        # Terms held by more entries than this are common: a query that also has rare
        # terms scores the rare terms' rows first (`_by_rare_terms`).
        self._common_from = common_from
        # Common terms queried alone, grouped by (count, length), kept up to date.
        self._term_groups: dict[str, TermGroups] = {}
        # Entries removed so far (in this process): groups made since hold no stale entry.
        self._removals = 0
        # Owners as small codes per slot, so owner filters are one comparison per row.
        # An irregular entry (an item whose remembers have several owners) looks
        # different to each owner filter: with any, owner-filtered reads need a scan.
        self._codes: dict[str | None, int] = {None: 0}
        self._agent = np.zeros(capacity, dtype=np.int32)
        self._user = np.zeros(capacity, dtype=np.int32)
        self._application = np.zeros(capacity, dtype=np.int32)
        self._kind = np.zeros(capacity, dtype=np.int32)
        self._irregular = np.zeros(capacity, dtype=bool)
        self._irregular_count = 0
        # Approximate semantic search: slots below `_clustered_until` are in cluster
        # order (`_cluster`); slots from there on were added since and always scored.
        self._clusters: VectorClusters | None = None
        self._clustered_until = 0
        #: Whether the entries were moved (vector clusters made) since the last
        #: `snapshot`: a snapshot saved before is worth replacing.
        self.reorganized = False
        # The entries newest first by position key, as slots with their keys when sorted
        # (an entry whose key or life changed since is skipped), and the slots put since:
        # a recall without text walks it from the newest, so its cost follows the limit,
        # not the index. Made at a recall without text when there is none; dropped when
        # the slots put since outgrow a quarter of it (`_note_put`).
        self._by_key: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._put_since: list[int] = []
        # The slots with feedback, found when first wanted after they changed.
        self._with_feedback: np.ndarray | None = None
        # Entries that expire: slot -> when, and a heap of (when, slot) to find the due
        # ones (stale heap entries are skipped by comparing with the dict).
        self._expiry: dict[int, int] = {}
        self._expiring: list[tuple[int, int]] = []
        # The latest moment the entries were brought to (`due`): expired entries are out
        # for good, so a read at an earlier moment needs a new index (`went_back`).
        self._moment: int | None = None

    @property
    def cache_bytes(self) -> int:
        """Bytes each of the caches of per-term arrays queries make may hold."""
        return self._arrays.budget

    @cache_bytes.setter
    def cache_bytes(self, budget: int) -> None:
        if budget != self._arrays.budget:
            self._arrays.resize(budget)
            self._dense.resize(budget)

    def __len__(self) -> int:
        return self._documents

    # -- snapshots -----------------------------------------------------------------

    def snapshot(self) -> tuple[bytes, dict[str, np.ndarray]]:
        """The index as bytes and arrays, for `from_snapshot`: what a reader saves so
        the next process starts from it instead of reading every item again. The
        arrays (slot columns, term runs, posting lists, vectors) are most of it, kept
        apart so a reader can map them from a file instead of holding copies; some are
        the index's own, so write them out before the index changes."""
        if self.ordering_only:
            raise ValueError("an ordering-only index is not saved: it holds no terms")
        self._fresh_norms()  # pending norms would name slots the snapshot must keep
        self.reorganized = False
        table = self._term_table
        empty = Posting()
        postings = [self._postings.get(t, empty) for t in table]
        joined, posting_ends = joined_postings(postings)
        # The rows past ``size`` are spare: a snapshot keeps at most a quarter more than
        # the slots in use (room for a reader's later puts), where an index grown by
        # doubling may hold as many again (170 MB of zeroed vectors at 150k items of
        # 384 dimensions, on disk and mapped).
        size = len(self._ids)
        capacity = min(len(self._time), _room_for(size))
        ids = self._ids.arrays()
        starts, ends = self._run_start[:size], self._run_end[:size]
        lengths = ends - starts
        # Each slot's run, slot after slot, as `_restore` reads them back.
        packed = np.zeros(capacity, dtype=np.int64)
        packed[:size] = np.cumsum(lengths) - lengths
        at = np.repeat(starts - packed[:size], lengths) + np.arange(int(lengths.sum()))
        packed_ends = packed.copy()
        packed_ends[:size] += lengths
        arrays = {name: getattr(self, name)[:capacity] for name in _COLUMNS}
        arrays["_run_start"], arrays["_run_end"] = packed, packed_ends
        arrays["slot_terms"] = self._slot_terms.gather(at)
        arrays.update(zip(POSTING_ARRAYS, joined, strict=True))
        if self._vectors is not None:
            arrays["vectors"] = self._vectors[:capacity]
        arrays.update(ids)
        group_names = list(self._groups)
        group_number = {g: i for i, g in enumerate(group_names)}
        for g in self._group_of:
            if g not in group_number:
                group_number[g] = len(group_names)
                group_names.append(g)
        clusters = self._clusters
        data = _Snapshot(
            format=INDEX_SNAPSHOT_FORMAT,
            label=self.label,
            common_from=self._common_from,
            capacity=capacity,
            dimensions=self._dimensions,
            documents=self._documents,
            total_length=self._total_length,
            vector_count=self._vector_count,
            weighted=self._weighted,
            irregular_count=self._irregular_count,
            clustered_until=self._clustered_until,
            moment=self._moment,
            size=size,
            free=list(self._free),
            terms=list(table),
            posting_ends=posting_ends.tobytes(),
            posting_live=_ints([p.live for p in postings]),
            posting_max_count=_ints([p.max_count for p in postings]),
            posting_min_length=_ints([p.min_length for p in postings]),
            groups=group_names,
            group_of=_ints([group_number[g] for g in self._group_of], np.int32),
            members=[
                members.tobytes()
                if isinstance(members := self._groups[g], array)
                else _ints([member & _SLOT_MASK for member in members])
                for g in group_names[: len(self._groups)]
            ],
            codes=list(self._codes.items()),
            centroids=clusters.centroids.astype(np.float32).tobytes() if clusters else None,
            bounds=clusters.bounds.astype(np.int64).tobytes() if clusters else None,
            expiry_slots=_ints(list(self._expiry)),
            expiry_at=_ints(list(self._expiry.values())),
            expiring_at=_ints([at for at, _ in self._expiring]),
            expiring_slots=_ints([slot for _, slot in self._expiring]),
        )
        return _snapshot_encoder.encode(data), arrays

    @classmethod
    def from_snapshot(cls, data: bytes, arrays: Mapping[str, np.ndarray]) -> SearchIndex:
        """The index `snapshot` saved, from its bytes and arrays. The index takes the
        arrays as its own: writable ones, or copy-on-write maps of a file (only the rows
        it changes then take memory of its own). Raises `SnapshotError` for what it
        cannot trust, so the caller builds the index anew."""
        try:
            return cls._restore(_snapshot_decoder.decode(data), arrays)
        except SnapshotError:
            raise
        except (msgspec.DecodeError, ValueError, IndexError, KeyError, TypeError) as exc:
            raise SnapshotError(f"not a search index snapshot: {exc}") from None

    @classmethod
    def _restore(cls, snap: _Snapshot, arrays: Mapping[str, np.ndarray]) -> SearchIndex:
        if snap.format != INDEX_SNAPSHOT_FORMAT:
            raise SnapshotError(f"snapshot format {snap.format}, not {INDEX_SNAPSHOT_FORMAT}")
        size, capacity = snap.size, snap.capacity
        if not 0 <= size <= capacity:
            raise SnapshotError(f"{size} slots in use, over the capacity of {capacity}")

        def given(name: str, dtype: type, length: int | None = None) -> np.ndarray:
            array_ = arrays.get(name)
            if not isinstance(array_, np.ndarray) or array_.dtype != dtype or array_.ndim != 1:
                raise SnapshotError(f"array {name} is missing or not {np.dtype(dtype)}")
            if not array_.flags.writeable:  # the index writes its columns in place
                raise SnapshotError(f"array {name} is read-only")
            if not array_.flags.c_contiguous:  # a posting list's run is read as bytes
                raise SnapshotError(f"array {name} is not contiguous")
            if length is not None and len(array_) != length:
                raise SnapshotError(f"array {name} has {len(array_)} rows, not {length}")
            return array_

        index = cls(snap.label, common_from=snap.common_from)
        for name, dtype in _COLUMNS.items():
            setattr(index, name, given(name, dtype, capacity))
        vectors = arrays.get("vectors")
        if vectors is not None and (
            not isinstance(vectors, np.ndarray)
            or vectors.dtype != np.float32
            or not vectors.flags.writeable
        ):
            raise SnapshotError("the vector matrix is not a writable float32 array")
        if snap.dimensions is None:
            if vectors is not None:
                raise SnapshotError("vectors for an index without them")
        elif vectors is None or vectors.shape != (capacity, snap.dimensions):
            raise SnapshotError("the vector matrix does not fit the snapshot")
        index._vectors = vectors
        index._dimensions = snap.dimensions
        index._documents, index._total_length = snap.documents, snap.total_length
        index._vector_count, index._weighted = snap.vector_count, snap.weighted
        index._irregular_count = snap.irregular_count
        index._clustered_until, index._moment = snap.clustered_until, snap.moment
        ids = {
            name: given(name, dtype) if name != "ids" else arrays.get(name)
            for name, dtype in ID_ARRAYS.items()
        }
        table = ids["ids"]
        if (
            not isinstance(table, np.ndarray)
            or table.dtype != np.uint8
            or table.shape != (size, 16)
            or len(ids["id_present"]) != size
        ):
            raise SnapshotError("the id arrays do not fit the slots")
        sorted_slots = ids["id_sorted_slots"]
        if not len(ids["id_sorted_high"]) == len(ids["id_sorted_low"]) == len(sorted_slots):
            raise SnapshotError("the sorted ids do not fit their slots")
        if len(sorted_slots) and (int(sorted_slots.min()) < 0 or int(sorted_slots.max()) >= size):
            raise SnapshotError("a sorted id names a slot out of the index")
        index._ids = IdTable(ids)
        index._free = snap.free
        if any(not 0 <= slot < size for slot in snap.free):
            raise SnapshotError("a free slot is out of the index")
        for name in ("_before", "_after"):
            neighbours = getattr(index, name)
            if len(neighbours) and (
                int(neighbours.min()) < -1 or int(neighbours.max()) >= capacity
            ):
                raise SnapshotError(f"column {name} names a slot out of the index")
        table = [sys.intern(t) for t in snap.terms]
        index._term_table = table
        index._term_numbers = {term: number for number, term in enumerate(table)}
        if len(index._term_numbers) != len(table):
            raise SnapshotError("a term is listed twice")
        numbers = given("slot_terms", TERM_DTYPE)
        if len(numbers) and (int(numbers.min()) < 0 or int(numbers.max()) >= len(table)):
            raise SnapshotError("a slot holds a term number out of the table")
        index._slot_terms = TermRuns(numbers)
        runs = len(numbers)
        starts, ends = index._run_start, index._run_end
        if np.any(starts > ends) or np.any(starts < 0) or np.any(ends > runs):
            raise SnapshotError("slot terms do not fit the slots")
        posting_ends = np.frombuffer(snap.posting_ends, dtype=np.int64).tolist()
        live = np.frombuffer(snap.posting_live, dtype=np.int64).tolist()
        max_count = np.frombuffer(snap.posting_max_count, dtype=np.int64).tolist()
        min_length = np.frombuffer(snap.posting_min_length, dtype=np.int64).tolist()
        if not len(posting_ends) == len(live) == len(table):
            raise SnapshotError("posting lists do not fit the terms")
        total = posting_ends[-1] if posting_ends else 0
        posting_arrays = tuple(given(name, dtype, total) for name, dtype in POSTING_ARRAYS.items())
        if total and (int(posting_arrays[0].min()) < 0 or int(posting_arrays[0].max()) >= capacity):
            raise SnapshotError("a posting list names a slot out of the index")
        start = 0
        for i, term in enumerate(table):
            end = posting_ends[i]
            if live[i] == 0:  # a term no entry holds any more: no posting list
                start = end
                continue
            index._postings[term] = Posting.restored(
                (posting_arrays, start, end), live[i], max_count[i], min_length[i]
            )
            start = end
        group_of = np.frombuffer(snap.group_of, dtype=np.int32).tolist()
        if len(group_of) != size:
            raise SnapshotError("groups do not fit the slots")
        index._group_of = [snap.groups[g] for g in group_of]
        for name, members in zip(snap.groups, snap.members, strict=False):
            slots = np.frombuffer(members, dtype=np.int64)
            if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= size):
                raise SnapshotError(f"group {shown(name)} names a slot out of the index")
            index._groups[name] = array("q", members)
        index._codes = dict(snap.codes)
        if snap.centroids is not None and snap.bounds is not None and snap.dimensions:
            centroids = np.frombuffer(snap.centroids, dtype=np.float32).reshape(-1, snap.dimensions)
            index._clusters = VectorClusters(
                centroids.copy(), np.frombuffer(snap.bounds, dtype=np.int64).copy()
            )
        index._expiry = dict(
            zip(
                np.frombuffer(snap.expiry_slots, dtype=np.int64).tolist(),
                np.frombuffer(snap.expiry_at, dtype=np.int64).tolist(),
                strict=True,
            )
        )
        index._expiring = list(
            zip(
                np.frombuffer(snap.expiring_at, dtype=np.int64).tolist(),
                np.frombuffer(snap.expiring_slots, dtype=np.int64).tolist(),
                strict=True,
            )
        )
        return index

    # -- keeping it current ------------------------------------------------------

    def put(self, raw_id: bytes, item: MemoryItem | None, *, irregular: bool = False) -> None:
        """Set an item's entry (None: it is no candidate now). ``irregular``: the item's
        live remembers have more than one owner (agent, user, application, kind)."""
        slot = self._ids.slot_of(raw_id)
        if slot is not None and item is not None and self._leaves_cluster(slot, item):
            # Its vector changed, so its slot may sit in the wrong cluster: move it.
            self.put(raw_id, None)
            slot = None
        if slot is not None:
            self._remove(slot)
            if item is None:
                self._ids.unbind(raw_id)
                self._ids[slot] = None
                if slot >= self._clustered_until:
                    # A clustered slot stays empty: reused, it would hold a vector of
                    # another cluster. The next `_cluster` drops it.
                    self._free.append(slot)
                return
        elif item is None:
            return
        else:
            slot = self._allocate(raw_id)
        self._insert(slot, item)
        self._irregular[slot] = irregular
        self._irregular_count += irregular
        if item.expires_at_ms is not None:
            self._expiry[slot] = item.expires_at_ms
            heapq.heappush(self._expiring, (item.expires_at_ms, slot))

    def put_many(self, entries: Iterable[tuple[bytes, MemoryItem | None, bool]]) -> None:
        """`put` for each ``(raw_id, item, irregular)``, in order, with the same result.
        While the index has no cached arrays (a build, or a catch-up that follows one),
        entries new to it are written a block at a time: their postings and columns as
        whole arrays instead of item by item. Entries are taken one at a time, so a
        generator over a view's items holds only a block's numbers, never its items."""
        bulk = not (self._term_groups or len(self._arrays) or len(self._dense))
        block = _Block()
        for raw_id, item, irregular in entries:
            if not bulk or item is None or self._ids.slot_of(raw_id) is not None:
                self._insert_block(block)
                block = _Block()
                self.put(raw_id, item, irregular=irregular)
                continue
            self._stage(block, self._allocate(raw_id), item, irregular)
            if len(block.slots) >= _BLOCK:
                self._insert_block(block)
                block = _Block()
        self._insert_block(block)

    def put_plain(
        self,
        raw_ids: Sequence[bytes],
        keys: array,
        owners: Sequence[tuple[str | None, str | None, str | None, int]],
    ) -> None:
        """Add entries new to an ordering-only index whose items each show one remember
        and nothing else: no feedback, no expiry, one owner. ``keys`` holds each one's
        position key (time, partition, offset) in turn; ``owners`` its (agent, user,
        application, kind code). The same entries as `put_many` of their items, written
        as columns: a fresh handle's first recall without text puts every item of the
        namespace, most of them such, and making each one's `MemoryItem` only to read
        these back from it was most of that recall's cost."""
        if not self.ordering_only or self._free or self._by_key is not None:
            raise ValueError("put_plain adds to an ordering-only index with no free slot")
        count = len(raw_ids)
        if not count:
            return
        first = len(self._ids)
        at = np.arange(first, first + count, dtype=np.int64)
        self._ids.extend_bound(raw_ids)
        self._group_of.extend([""] * count)
        capacity = len(self._time)
        while capacity < first + count:
            capacity *= 2
        if capacity > len(self._time):
            self._grow(capacity)
        self._run_start[at] = self._run_end[at] = len(self._slot_terms)
        self._time[at], self._partition[at], self._offset[at] = (
            np.frombuffer(keys, dtype=np.int64).reshape(-1, 3).T
        )
        codes = self._codes
        coded = array("q")
        for agent, user, application, kind in owners:
            coded.extend(
                (
                    codes.setdefault(agent, len(codes)),
                    codes.setdefault(user, len(codes)),
                    codes.setdefault(application, len(codes)),
                    kind,
                )
            )
        self._agent[at], self._user[at], self._application[at], self._kind[at] = (
            np.frombuffer(coded, dtype=np.int64).reshape(-1, 4).T
        )
        self._weight[at] = 0.0
        self._length[at] = 0
        self._irregular[at] = False
        self._alive[at] = True
        self._documents += count

    def _stage(self, block: _Block, slot: int, item: MemoryItem, irregular: bool) -> None:
        """What `_insert` does for one new entry, but its terms and columns go to
        ``block`` for `_insert_block`; its vector, neighbours and expiry are set now."""
        numbers, table, codes = self._term_numbers, self._term_table, self._codes
        if self.ordering_only:
            counts, length, run = _NO_TERMS, 0, []
        else:
            counts, length = count_terms(item.body)
            try:
                run = [numbers[term] for term in counts]
            except KeyError:
                run = []
                for term in counts:
                    number = numbers.get(term)
                    if number is None:
                        number = numbers[term] = len(table)
                        table.append(term)
                    run.append(number)
        block.terms.extend(run)
        block.counts.extend(counts.values())
        block.runs.append(len(run))
        block.lengths.append(length)
        block.slots.append(slot)
        key = (item.append_time_ms, item.source.partition, item.source.offset)
        block.keys.extend(key)
        block.weights.append(item.weight)
        scope = item.scope
        block.owners.extend(
            (
                codes.setdefault(scope.agent, len(codes)),
                codes.setdefault(scope.user, len(codes)),
                codes.setdefault(scope.application, len(codes)),
                item.kind.code,
            )
        )
        block.irregular.append(irregular)
        if self._by_key is not None:
            self._note_put(slot)
        self._set_vector(slot, item)
        if not self.ordering_only:
            self._link(slot, scope.conversation or "", key)
        if item.expires_at_ms is not None:
            self._expiry[slot] = item.expires_at_ms
            heapq.heappush(self._expiring, (item.expires_at_ms, slot))

    def _insert_block(self, block: _Block) -> None:
        """Write the terms and columns of the entries `_stage` put in ``block``."""
        if not block.slots:
            return
        if self._dead_terms > _COMPACT_TERMS_FROM and self._dead_terms * 2 > len(self._slot_terms):
            self._compact_terms()
        at = np.frombuffer(block.slots, dtype=np.int64)
        run_lengths = np.frombuffer(block.runs, dtype=np.int64)
        ends = len(self._slot_terms) + np.cumsum(run_lengths)
        self._run_start[at], self._run_end[at] = ends - run_lengths, ends
        self._slot_terms.added.extend(block.terms)
        lengths = np.frombuffer(block.lengths, dtype=np.int64)
        self._documents += len(at)
        self._total_length += int(lengths.sum())
        keys = np.frombuffer(block.keys, dtype=np.int64).reshape(-1, 3)
        self._time[at], self._partition[at], self._offset[at] = keys.T
        weights = np.frombuffer(block.weights, dtype=np.float64)
        self._weight[at] = weights
        weighted = int(np.count_nonzero(weights))
        self._weighted += weighted
        if weighted:
            self._with_feedback = None
        owners = np.frombuffer(block.owners, dtype=np.int64).reshape(-1, 4)
        self._agent[at], self._user[at], self._application[at], self._kind[at] = owners.T
        self._length[at] = lengths
        self._alive[at] = True
        irregular = np.frombuffer(block.irregular, dtype=np.uint8).astype(bool)
        self._irregular[at] = irregular
        self._irregular_count += int(irregular.sum())
        # Postings, term by term: the entries sorted by term, stably, so each term's
        # entries stay in the order `put` appends them.
        terms_of = np.frombuffer(block.terms, dtype=TERM_DTYPE)
        if not len(terms_of):
            return
        order = np.argsort(terms_of, kind="stable")
        entry_slots = np.repeat(at, run_lengths)[order].astype(SLOT_DTYPE)
        entry_counts = np.frombuffer(block.counts, dtype=COUNT_DTYPE)[order]
        entry_generations = generations_of(self._generation, entry_slots)
        entry_lengths = np.repeat(lengths, run_lengths)[order]
        sorted_terms = terms_of[order]
        starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
        most = np.maximum.reduceat(entry_counts, starts).tolist()
        shortest = np.minimum.reduceat(entry_lengths, starts).tolist()
        bounds = [*starts.tolist(), len(sorted_terms)]
        postings, table = self._postings, self._term_table
        for i, number in enumerate(sorted_terms[starts].tolist()):
            term = table[number]
            posting = postings.get(term)
            if posting is None:
                posting = postings[term] = Posting()
            first, last = bounds[i], bounds[i + 1]
            posting.extend(
                entry_slots[first:last].tobytes(),
                entry_counts[first:last].tobytes(),
                entry_generations[first:last].tobytes(),
            )
            posting.live += last - first
            if most[i] > posting.max_count:
                posting.max_count = most[i]
            if shortest[i] < posting.min_length:
                posting.min_length = shortest[i]

    def went_back(self, now_ms: int) -> bool:
        """Whether a read at ``now_ms`` comes before the moment the entries were last
        brought to (a clock set back): entries expired since may count again then, so
        the caller makes the index anew."""
        return self._moment is not None and now_ms < self._moment

    def due(self, now_ms: int) -> list[bytes]:
        """Ids of the entries that expired by ``now_ms``. The caller puts each again as
        a read at ``now_ms`` sees it (gone, or showing a remember that has not expired),
        so the index ranks what a scan at that moment would."""
        if self._moment is None or now_ms > self._moment:
            self._moment = now_ms
        out = []
        expiring, expiry = self._expiring, self._expiry
        while expiring and expiring[0][0] <= now_ms:
            at, slot = heapq.heappop(expiring)
            if expiry.get(slot) == at:
                del expiry[slot]
                out.append(self._ids[slot])
        return out

    def _fresh_norms(self) -> np.ndarray:
        """Every vector's norm, those added since the last call computed now, together,
        as `row_norms` computes a scan's (row by row, so the same numbers)."""
        if self._unnormed:
            slots = np.unique(np.asarray(self._unnormed, dtype=np.int64))
            self._unnormed = []
            slots = slots[self._has_vector[slots]]  # some may have gone since
            # A block at a time: after a build these are every slot, and the rows as one
            # copy (and their squares, another) were two temporaries of the matrix's size.
            # Each row's norm is its own reduction, so blocks give the same numbers.
            for start in range(0, len(slots), _NORM_BLOCK):
                block = slots[start : start + _NORM_BLOCK]
                computed = self._norms[block] = row_norms(self._vectors[block])
                positive = computed[computed > 0]
                if self._norm_range is not None and len(positive):
                    low, high = self._norm_range
                    self._norm_range = (
                        min(low, float(positive.min())),
                        max(high, float(positive.max())),
                    )
        return self._norms

    def _norms_within(self, length: float) -> bool:
        """Whether every slot's norm times ``length`` is within `finish_cosines`' range."""
        if self._norm_range is None:
            norms = self._fresh_norms()
            positive = norms[norms > 0]
            self._norm_range = (
                (float(positive.min()), float(positive.max())) if len(positive) else (1.0, 1.0)
            )
        low, high = self._norm_range
        return cosines_in_range(low * length, high * length)

    def _leaves_cluster(self, slot: int, item: MemoryItem) -> bool:
        if slot >= self._clustered_until or item.embedder != self.label or not item.embedding:
            return False
        vector = to_vector(item.embedding)
        return not (self._has_vector[slot] and np.array_equal(self._vectors[slot], vector))

    def _allocate(self, raw_id: bytes) -> int:
        if self._free:
            slot = self._free.pop()
            self._ids[slot] = raw_id
        else:
            slot = len(self._ids)
            self._ids.append(raw_id)
            self._group_of.append("")
            if slot >= len(self._time):
                self._grow(2 * len(self._time))
        self._ids.bind(raw_id, slot)
        return slot

    def _grow(self, capacity: int) -> None:
        for name in (
            "_time", "_partition", "_offset", "_weight", "_length", "_alive",
            "_has_vector", "_other_vector", "_norms", "_run_start", "_run_end", *_OWNER_COLUMNS,
        ):  # fmt: skip
            old = getattr(self, name)
            new = np.zeros(capacity, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for name in ("_before", "_after"):
            old = getattr(self, name)
            new = np.full(capacity, -1, dtype=np.int64)
            new[: len(old)] = old
            setattr(self, name, new)
        generation = np.zeros(capacity, dtype=GENERATION_DTYPE)
        generation[: len(self._generation)] = self._generation
        self._generation = generation
        if self._vectors is not None:
            vectors = np.zeros((capacity, self._vectors.shape[1]), dtype=np.float32)
            vectors[: len(self._vectors)] = self._vectors
            self._vectors = vectors

    def _insert(self, slot: int, item: MemoryItem) -> None:
        counts, length = (_NO_TERMS, 0) if self.ordering_only else count_terms(item.body)
        if self._dead_terms > _COMPACT_TERMS_FROM and self._dead_terms * 2 > len(self._slot_terms):
            self._compact_terms()
        numbers, postings, term_groups = self._term_numbers, self._postings, self._term_groups
        # A build meets empty caches and no groups: it skips evicting, term by term.
        cached = len(self._arrays) or len(self._dense)
        generation = int(self._generation[slot])
        run = []
        for term, tf in counts.items():
            number = numbers.get(term)
            if number is None:
                number = numbers[term] = len(self._term_table)
                self._term_table.append(term)
            run.append(number)
            posting = postings.get(term)
            if posting is None:
                posting = postings[term] = Posting()
            posting.add(slot, tf, generation, length)
            if term_groups:
                groups = term_groups.get(term)
                if groups is not None:
                    groups.add(tf, length, slot, generation)
            if cached:
                self._arrays.pop(term)
                self._dense.pop(term)
        self._run_start[slot] = len(self._slot_terms)
        self._slot_terms.extend(run)
        self._run_end[slot] = len(self._slot_terms)
        self._documents += 1
        self._total_length += length
        key = (item.append_time_ms, item.source.partition, item.source.offset)
        self._time[slot], self._partition[slot], self._offset[slot] = key
        self._weight[slot] = item.weight
        self._weighted += item.weight != 0
        if item.weight != 0:
            self._with_feedback = None
        scope, codes = item.scope, self._codes
        self._agent[slot] = codes.setdefault(scope.agent, len(codes))
        self._user[slot] = codes.setdefault(scope.user, len(codes))
        self._application[slot] = codes.setdefault(scope.application, len(codes))
        self._kind[slot] = item.kind.code
        self._length[slot] = length
        self._alive[slot] = True
        if self._by_key is not None:
            self._note_put(slot)
        self._set_vector(slot, item)
        if not self.ordering_only:  # neighbours are for ranking text
            self._link(slot, item.scope.conversation or "", key)

    def _note_put(self, slot: int) -> None:
        """Keep ``slot`` among those put since the newest-first sort; past a quarter of
        the sorted entries (or `RESORT_FROM`), drop the sort: the next recall without
        text sorts again, and an index that only searches from now on holds no list
        that grows with every put."""
        self._put_since.append(slot)
        assert self._by_key is not None
        if len(self._put_since) > max(RESORT_FROM, len(self._by_key[0]) // 4):
            self._by_key, self._put_since = None, []

    def _set_vector(self, slot: int, item: MemoryItem) -> None:
        """Keep the item's vector in ``slot`` when its embedder is the index's."""
        if self.label is None or item.embedder != self.label or not item.embedding:
            return
        vector = to_vector(item.embedding)
        if self._dimensions is None:
            self._dimensions = len(vector)
            self._vectors = np.zeros((len(self._time), len(vector)), dtype=np.float32)
        if len(vector) == self._dimensions:
            self._vectors[slot] = vector
            # As np.linalg.norm(matrix, axis=1) computes it for a scan's matrix.
            # Norms are computed in bulk when next needed (`_fresh_norms`).
            self._unnormed.append(slot)
            self._has_vector[slot] = True
            self._vector_count += 1
        else:
            # Another length under the same label: only a scan can rank it.
            self._other_vector[slot] = True

    def _link(self, slot: int, group: str, key: _Key) -> None:
        """Put ``slot`` in its conversation's neighbour list, between its neighbours."""
        self._group_of[slot] = group
        members = self._members(group)
        member = _member(key, slot)
        at = bisect.bisect_left(members, member)
        members.insert(at, member)
        before = members[at - 1] & _SLOT_MASK if at > 0 else -1
        after = members[at + 1] & _SLOT_MASK if at + 1 < len(members) else -1
        self._before[slot], self._after[slot] = before, after
        if before >= 0:
            self._after[before] = slot
        if after >= 0:
            self._before[after] = slot

    def _members(self, group: str) -> list[int]:
        """A group's neighbour list as `_member` numbers, to change it."""
        members = self._groups.get(group)
        if members is None:
            members = self._groups[group] = []
        elif isinstance(members, array):
            slots = np.frombuffer(members, dtype=np.int64)
            keys = zip(
                self._time[slots].tolist(),
                self._partition[slots].tolist(),
                self._offset[slots].tolist(),
                strict=True,
            )
            members = self._groups[group] = [
                _member(key, slot) for key, slot in zip(keys, slots.tolist(), strict=True)
            ]
        return members

    def _remove(self, slot: int) -> None:
        self._expiry.pop(slot, None)
        start, end = int(self._run_start[slot]), int(self._run_end[slot])
        table = self._term_table
        for number in self._slot_terms.run(start, end):
            term = table[number]
            self._arrays.pop(term)
            self._dense.pop(term)
            posting = self._postings[term]
            posting.live -= 1
            if posting.live == 0:
                del self._postings[term]
        self._run_start[slot] = self._run_end[slot] = 0
        self._dead_terms += end - start
        # Every entry of this slot is stale from now on.
        self._generation[slot] += 1
        self._removals += 1
        self._documents -= 1
        self._total_length -= int(self._length[slot])
        if not self.ordering_only:
            key = (int(self._time[slot]), int(self._partition[slot]), int(self._offset[slot]))
            members = self._members(self._group_of[slot])
            at = bisect.bisect_left(members, _member(key, slot))
            del members[at]
            if not members:
                del self._groups[self._group_of[slot]]
            before, after = int(self._before[slot]), int(self._after[slot])
            if before >= 0:
                self._after[before] = after
            if after >= 0:
                self._before[after] = before
            self._before[slot] = self._after[slot] = -1
        self._vector_count -= int(self._has_vector[slot])
        if self._weight[slot] != 0:
            self._weighted -= 1
            self._with_feedback = None
        self._irregular_count -= int(self._irregular[slot])
        self._irregular[slot] = False
        self._alive[slot] = self._has_vector[slot] = self._other_vector[slot] = False
        self._weight[slot] = self._length[slot] = 0.0
        if self._vectors is not None:
            self._vectors[slot] = 0.0
        self._norms[slot] = 0.0

    # -- searching -----------------------------------------------------------------

    def can_rank(self, query_vector: np.ndarray | None, owner: Owner | None = None) -> bool:
        """Whether this index ranks exactly as a scan would for this query vector and
        owner filter (it keeps one vector length per label; items of another length
        are left to a scan, which refuses the query; with irregular items, so are
        owner-filtered reads). A query of another length than the items' raises
        `InvalidInput`, as a scan does."""
        if owner is not None and self._irregular_count:
            return False
        if query_vector is None or self.label is None:
            return True
        if self._other_vector.any():
            return False
        if self._dimensions is not None and len(query_vector) != self._dimensions:
            raise dimensions_mismatch(self.label, self._dimensions, len(query_vector))
        return True

    def search(
        self,
        query: list[str],
        *,
        strategy: str,
        query_vector: np.ndarray | None,
        min_similarity: float | None,
        limit: int,
        exclude: frozenset[bytes],
        approximate: ApproximateSearch | None = None,
        owner: Owner | None = None,
    ) -> list[tuple[bytes, Ranked]]:
        """(id, ranking) of the best entries, best first, as `rank` would order the
        same candidates. ``strategy`` is ``keyword``, ``hybrid`` or ``semantic``.
        With ``approximate``, a semantic search over at least its ``from_vectors``
        vectors scores only the clusters nearest the query (`_approximate`). ``owner``
        makes the entries of that owner the candidates (see `can_rank`; hybrid recall
        links neighbours among all entries, so it cannot take one)."""
        if owner is not None and strategy == "hybrid":
            raise ValueError("a hybrid search with owner filters is a scan's to rank")
        if strategy == "keyword":
            return self._keyword(query, min_similarity, limit, exclude, owner)
        if (
            strategy == "semantic"
            and self._by_clusters(approximate)
            and query_vector is not None
            and query_length(query_vector.astype(np.float32)) > 0
        ):
            return self._approximate(
                query_vector, approximate, min_similarity, limit, exclude, owner
            )
        size = len(self._ids)
        candidates, allowed = self._candidates(size, exclude, owner)
        semantic = has_vector = None
        keyword = None
        if query_vector is not None and self.label is not None:
            has_vector = self._has_vector[:size]
            semantic = np.zeros(size, dtype=np.float64)
            with_vectors = int(np.count_nonzero(has_vector))
            if with_vectors:
                # cosine_similarities, row by row, over every slot (empty ones are zeros).
                vector = query_vector.astype(np.float32)
                vectors = self._vectors
                finish_dots = start_row_dots(vectors[:size], vector)
                try:
                    if strategy != "semantic":
                        # The words' scores while helper threads take the products:
                        # hybrid recall at 100k took 9.8 ms where it took 10.4, two CPUs.
                        keyword = self._keyword_scores(query, size)
                finally:
                    dots = finish_dots()
                length = query_length(vector)
                similar = finish_cosines(
                    dots, self._fresh_norms()[:size], vector, length, vectors.__getitem__,
                    within=self._norms_within(length),
                )  # fmt: skip
                if with_vectors == size:  # every slot has one: no stand-in for the rest
                    semantic = similar
                else:
                    low = float(similar[has_vector].min())
                    semantic = np.where(has_vector, similar, low)
            elif strategy != "semantic":
                semantic = has_vector = None
        columns = Columns(
            keyword=np.zeros(size, dtype=np.float64),
            semantic=semantic,
            has_vector=has_vector,
            weight=self._weight[:size],
            time=self._time[:size],
            partition=self._partition[:size],
            offset=self._offset[:size],
            before=self._before[:size],
            after=self._after[:size],
            alive=candidates,
            allowed=allowed,
        )
        if strategy == "semantic":
            if semantic is None:
                return []
            ranked = rank_by_similarity(columns, min_similarity=min_similarity, limit=limit)
        else:
            columns.keyword = self._keyword_scores(query, size) if keyword is None else keyword
            ranked = rank_by_text(
                columns,
                hybrid=strategy == "hybrid",
                min_similarity=min_similarity,
                limit=limit,
            )
        return [(self._ids[r.row], r) for r in ranked]

    def _keyword_scores(self, query: list[str], size: int) -> np.ndarray:
        """BM25 of the first ``size`` slots for the query terms."""
        return bm25_postings(query, self._posting, self._length[:size], self._statistics(query))

    def _candidates(
        self, size: int, exclude: frozenset[bytes], owner: Owner | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(candidates, allowed): the entries of the read (of the owner, if any) and
        those of them that may be returned (not excluded)."""
        candidates = self._alive[:size]
        if owner is not None:
            candidates = candidates & self._owned(owner, slice(0, size))
        allowed = candidates.copy()
        for raw_id in exclude:
            slot = self._ids.slot_of(raw_id)
            if slot is not None:
                allowed[slot] = False
        return candidates, allowed

    def _owned(self, owner: Owner, rows: slice | np.ndarray) -> np.ndarray:
        """Which of ``rows`` the owner filter keeps."""
        agent, user, application, kind = owner
        keep = np.ones(len(self._kind[rows]), dtype=bool)
        for column, value in (
            (self._agent, agent), (self._user, user), (self._application, application),
        ):  # fmt: skip
            if value is not None:
                keep &= column[rows] == self._codes.get(value, -1)
        if kind is not None:
            keep &= self._kind[rows] == kind
        return keep

    def find(
        self,
        text: str,
        *,
        mode: str,
        query_vector: np.ndarray | None,
        min_similarity: float | None,
        limit: int,
        exclude: frozenset[bytes],
        approximate: ApproximateSearch | None = None,
        owner: Owner | None = None,
    ) -> list[tuple[bytes, Ranked]] | None:
        """`search` for a recall's text and mode (`laser_memory.recall.search_mode`);
        None when only a scan ranks it exactly."""
        if self.ordering_only:
            raise ValueError("an ordering-only index has no terms or vectors to search")
        vector = query_vector if mode != "keyword" else None
        if not self.can_rank(vector, owner) or (owner is not None and mode == "hybrid"):
            return None
        return self.search(
            terms(text),
            strategy=mode,
            query_vector=vector,
            min_similarity=min_similarity,
            limit=limit,
            exclude=exclude,
            approximate=approximate,
            owner=owner,
        )

    def ordered(
        self, *, strategy: str, limit: int, exclude: frozenset[bytes], owner: Owner | None = None
    ) -> list[tuple[bytes, Ranked]] | None:
        """A recall without text: ``recent``, or feedback then newest; None when only a
        scan orders it exactly (see `can_rank`)."""
        if not self.can_rank(None, owner):
            return None
        # The rows that can make the answer, ranked as the whole index would rank: the
        # newest `limit` of the read, and (but for ``recent``) every row with feedback,
        # which rank before and after the rows without. Rows are then these slots.
        excluded = {slot for slot in map(self._ids.slot_of, exclude) if slot is not None}
        recent = strategy == "recent"
        rows = self._newest_slots(limit, owner, excluded, without_feedback=not recent)
        if not recent and self._weighted:
            if self._with_feedback is None:
                self._with_feedback = np.flatnonzero(self._weight[: len(self._ids)] != 0)
            weighted = self._with_feedback
            weighted = weighted[self._usable(weighted, owner, excluded)]
            rows = np.concatenate([weighted, rows])
        everything = np.ones(len(rows), dtype=bool)
        columns = Columns(
            keyword=self._weight[:0],
            semantic=None,
            has_vector=None,
            weight=self._weight[rows],
            time=self._time[rows],
            partition=self._partition[rows],
            offset=self._offset[rows],
            before=self._before[:0],
            after=self._before[:0],
            alive=everything,
            allowed=everything,
        )
        out = []
        for r in rank_by_feedback(columns, strategy=strategy, limit=limit):
            slot = int(rows[r.row])
            out.append((self._ids[slot], Ranked(slot, r.score, r.signals)))
        return out

    def _usable(self, slots: np.ndarray, owner: Owner | None, excluded: set[int]) -> np.ndarray:
        """Which of ``slots`` a read may return: alive, the owner's, not excluded."""
        keep = self._alive[slots]
        if owner is not None:
            keep &= self._owned(owner, slots)
        if excluded:
            keep &= ~np.isin(slots, np.fromiter(excluded, dtype=np.int64, count=len(excluded)))
        return keep

    def _newest_slots(
        self, limit: int, owner: Owner | None, excluded: set[int], *, without_feedback: bool
    ) -> np.ndarray:
        """The newest ``limit`` slots a read may return (``without_feedback``: of those
        with no feedback), newest first: the sorted entries walked from the newest, a
        few more each step, merged with the slots put since they were sorted."""
        none = np.zeros(0, dtype=np.int64)
        if limit == 0 or not self._documents:
            return none
        size = len(self._ids)
        if self._by_key is None:
            slots = np.flatnonzero(self._alive[:size])
            partition, offset = self._partition[slots], self._offset[slots]
            order = np.lexsort((-offset, -partition, -self._time[slots]))
            self._by_key = (slots[order], partition[order], offset[order])
            self._put_since = []
        slots, partitions, offsets = self._by_key

        def usable(candidates: np.ndarray) -> np.ndarray:
            keep = self._usable(candidates, owner, excluded)
            if without_feedback:
                keep &= self._weight[candidates] == 0
            return keep

        found: list[np.ndarray] = []
        wanted, start, step = limit, 0, 2 * limit + 64
        while wanted > 0 and start < len(slots):
            end = start + step
            chunk = slots[start:end]
            # An entry counts where its slot still holds it: alive, at the key it had
            # (a record's partition and offset name it, so they tell the key).
            same = (self._partition[chunk] == partitions[start:end]) & (
                self._offset[chunk] == offsets[start:end]
            )
            hits = chunk[same & usable(chunk)][:wanted]
            found.append(hits)
            wanted -= len(hits)
            start, step = end, step * 2
        if self._put_since:
            since = np.unique(np.asarray(self._put_since, dtype=np.int64))
            found.append(since[usable(since)])
        if not found:
            return none
        rows = np.unique(np.concatenate(found))
        order = np.lexsort((-self._offset[rows], -self._partition[rows], -self._time[rows]))
        return rows[order][:limit]

    def _keyword(
        self,
        query: list[str],
        min_similarity: float | None,
        limit: int,
        exclude: frozenset[bytes],
        owner: Owner | None,
        *,
        shortcuts: bool = True,
    ) -> list[tuple[bytes, Ranked]]:
        """Keyword recall touches only the rows holding a query term: the others score 0
        and are never returned, so the ranking over these rows is the whole one's.
        ``shortcuts``: first try the rows of rare terms, or common terms' groups."""
        held = [term for term in dict.fromkeys(query) if term in self._postings]
        if not held:
            return []  # nothing holds a term (or the text has none): nothing to score
        statistics = self._statistics(query, owner)
        by_rare = by_groups = None
        if owner is None and shortcuts:
            by_rare = self._by_rare_terms(held, statistics)
            if by_rare is None:
                by_groups = self._by_groups(held, statistics, limit + len(exclude))
        if by_rare is not None:
            rows, scores = by_rare
        elif by_groups is not None:
            rows, scores = by_groups
        elif len(held) == 1 and owner is None:
            rows, counts = self._posting(held[0])
            scores = self._bm25_over(rows, held, statistics, (), counts=counts)
        else:
            postings = [self._posting(term)[0] for term in held]
            rows = self._union(postings)
            if owner is not None:
                rows = rows[self._owned(owner, rows)]  # the others are no candidates
            if sum(len(p) for p in postings) * 8 > len(self._ids):
                # Long lists: adding into one array as long as the index is quicker.
                size = len(self._ids)
                every = bm25_postings(query, self._posting, self._length[:size], statistics)
                scores = every[rows]
            else:
                scores = self._bm25_over(rows, held, statistics, ())
        allowed = np.ones(len(rows), dtype=bool)
        if exclude:
            excluded = [slot for slot in map(self._ids.slot_of, exclude) if slot is not None]
            allowed = ~np.isin(rows, excluded)
        if by_rare is not None and not self._rare_rows_suffice(
            held, statistics, rows, scores, allowed, limit
        ):
            # Rows holding only common terms might get in: score every holder.
            return self._keyword(query, min_similarity, limit, exclude, None, shortcuts=False)
        if len(rows) > 4 * limit + 64:
            keep = self._contenders(rows, allowed, scores, limit)
            rows, allowed, scores = rows[keep], allowed[keep], scores[keep]
        none = np.full(len(rows), -1, dtype=np.int64)
        columns = Columns(
            keyword=scores,
            semantic=None,
            has_vector=None,
            weight=self._weight[rows],
            time=self._time[rows],
            partition=self._partition[rows],
            offset=self._offset[rows],
            before=none,
            after=none,
            alive=np.ones(len(rows), dtype=bool),
            allowed=allowed,
        )
        ranked = rank_by_text(columns, hybrid=False, min_similarity=min_similarity, limit=limit)
        return [(self._ids[int(rows[r.row])], r) for r in ranked]

    def _by_rare_terms(
        self, held: list[str], statistics: TermStatistics
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """For a query with both rare and common terms (an identifier such as
        ``ERR-4021`` gives ``err``, held by half the namespace): the rows holding a rare
        term, with their BM25 (every term's part, in `bm25_postings`' order and
        operations, so to the bit); None when there is no such split. Whether these
        rows are enough is `_rare_rows_suffice`'s to say."""
        common = [t for t in held if self._postings[t].live > self._common_from]
        rare = [t for t in held if self._postings[t].live <= self._common_from]
        if not common or not rare:
            return None
        rows = self._union([self._posting(t)[0] for t in rare])
        if len(rows) > self._common_from:
            return None
        return rows, self._bm25_over(rows, held, statistics, common)

    def _union(self, postings: list[np.ndarray]) -> np.ndarray:
        """The sorted slots of several posting lists."""
        if sum(len(p) for p in postings) * 8 > len(self._ids):
            holding = np.zeros(len(self._ids), dtype=bool)  # long lists: mark them
            for slots in postings:
                holding[slots] = True
            return np.flatnonzero(holding)
        merged = np.sort(np.concatenate(postings))
        return merged[np.concatenate(([True], merged[1:] != merged[:-1]))]

    def _bm25_over(
        self,
        rows: np.ndarray,
        held: list[str],
        statistics: TermStatistics,
        dense: Sequence[str],
        counts: np.ndarray | None = None,
        known: tuple[str, float] | None = None,
    ) -> np.ndarray:
        """BM25 of ``rows`` for the query terms, with `bm25_postings`' operations in its
        order, so to the bit, but without arrays as long as the index. ``rows`` are
        sorted, or (one term, ``counts`` given) that term's posting list. Counts of the
        ``dense`` terms are read from `_counts_of` (a long posting list is not
        searched for a few rows). ``known``: a term every row holds with the same score
        (rows of one of its groups), added as that number."""
        scores = np.zeros(len(rows), dtype=np.float64)
        if statistics.documents == 0 or not len(rows):
            return scores
        average = max(statistics.total_length / statistics.documents, 1e-9)
        lengths = self._length[rows]
        norm_all = None
        for term in held:
            df = statistics.document_frequency.get(term, 0)
            if df == 0:
                continue
            if known is not None and term == known[0]:
                scores += known[1]
                continue
            idf = math.log(1.0 + (statistics.documents - df + 0.5) / (df + 0.5))
            if counts is not None:
                tf = counts
            elif term in dense:
                tf = self._counts_of(term)[rows].astype(np.float64)
                if norm_all is None:
                    norm_all = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / average)
                # Every row at once: one without the term adds idf * 0 / norm, exactly
                # 0.0, which leaves its score as it was; the others add what the masked
                # form adds, by the same operations.
                scores += idf * tf * (BM25_K1 + 1.0) / (tf + norm_all)
                continue
            else:
                slots, held_counts = self._posting(term)
                at = np.minimum(np.searchsorted(rows, slots), len(rows) - 1)
                inside = rows[at] == slots  # owner filters may have dropped some slots
                tf = np.zeros(len(rows), dtype=np.float64)
                tf[at[inside]] = held_counts[inside]
            holds = tf > 0
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[holds] / average)
            # As bm25_postings: rows without the term get nothing added.
            scores[holds] += idf * tf[holds] * (BM25_K1 + 1.0) / (tf[holds] + norm)
        return scores

    def _counts_of(self, term: str) -> np.ndarray:
        """A term's count in every slot (0: not held), kept until its postings change."""
        dense = self._dense.get(term)
        if dense is None or len(dense) < len(self._ids):
            slots, counts = self._posting(term)
            # The narrowest type every count fits (max_count bounds them all): a byte
            # an entry for nearly every term, so twice the terms fit the cache.
            posting = self._postings.get(term)
            most = 0 if posting is None else posting.max_count
            dtype = next(t for t in (np.uint8, np.uint16, np.uint32) if most <= np.iinfo(t).max)
            dense = np.zeros(len(self._ids), dtype=dtype)
            dense[slots] = counts
            self._dense.put(term, dense, dense.nbytes)
        return dense

    def _rare_rows_suffice(
        self,
        held: list[str],
        statistics: TermStatistics,
        rows: np.ndarray,
        scores: np.ndarray,
        allowed: np.ndarray,
        limit: int,
    ) -> bool:
        """Whether no row holding only common terms can reach the first ``limit``, nor
        be the best score (which scales every score): their BM25 is at most the sum of
        each common term's bound (its highest count in its shortest item)."""
        if not len(scores) or np.count_nonzero(allowed) < limit:
            return False
        average = max(statistics.total_length / statistics.documents, 1e-9)
        bound = 0.0
        for term in held:
            posting = self._postings[term]
            if posting.live <= self._common_from:
                continue
            df = statistics.document_frequency.get(term, 0)
            idf = math.log(1.0 + (statistics.documents - df + 0.5) / (df + 0.5))
            tf = float(posting.max_count)
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * posting.min_length / average)
            bound += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        best = float(scores.max())
        if best <= 0 or bound * (1 + 1e-9) >= best:
            return False
        final = scores / best
        if self._weighted:
            final = final + FEEDBACK_SHARE * np.tanh(self._weight[rows])
        cut = float(np.partition(final[allowed], -limit)[-limit]) if limit else np.inf
        # Feedback can lift any row by at most FEEDBACK_SHARE (tanh < 1).
        lift = FEEDBACK_SHARE if self._weighted else 0.0
        return bound / best * (1 + 1e-9) + lift < cut

    def _by_groups(
        self, held: list[str], statistics: TermStatistics, wanted: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """For a query of common terms only: the rows that can make the first
        ``wanted`` and their BM25. One term's score depends only on an entry's count
        and length, so its entries are kept grouped by (count, length) (`TermGroups`).
        One term: the best groups, whole, until they hold ``wanted`` live rows. Several
        (up to four): the best group of any term next, each new row scored in full,
        until the ``wanted``-th best score beats what a row not met yet could reach
        (the sum of each term's next group: Fagin's threshold algorithm). Every row
        with feedback (which can lift a weaker row) is a candidate too; and as feedback
        can also sink a row below ones not met, the walk finds ``wanted`` more rows
        than there are rows with feedback, so that many without it are found."""
        if len(held) > 4 or any(self._postings[t].live <= self._common_from for t in held):
            return None
        wanted += self._weighted
        average = max(statistics.total_length / statistics.documents, 1e-9)
        by_term = [self._group_scores(term, statistics, average) for term in held]
        if len(held) == 1:
            rows_out, scores_out = self._best_groups(*by_term[0], wanted)
        else:
            found = self._threshold_walk(held, statistics, by_term, wanted)
            if found is None:
                return None
            rows_out, scores_out = found
        if self._weighted:
            # Feedback lifts a row by less than FEEDBACK_SHARE: every weighted holder of
            # a term is a candidate too.
            size = len(self._ids)
            numbers = {self._term_numbers[term] for term in held}
            weighted = [
                slot
                for slot in np.flatnonzero(self._weight[:size]).tolist()
                if not numbers.isdisjoint(self._terms_of(slot))
            ]
            if weighted:
                weighted_rows = np.asarray(weighted, dtype=np.int64)
                rows_out.append(weighted_rows)
                scores_out.append(self._full_scores(weighted_rows, held, statistics))
        if not rows_out:
            return None
        rows, first = np.unique(np.concatenate(rows_out), return_index=True)
        return rows, np.concatenate(scores_out)[first]

    def _group_scores(
        self, term: str, statistics: TermStatistics, average: float
    ) -> tuple[TermGroups, np.ndarray]:
        groups = self._term_groups.get(term)
        if groups is None:
            slots, counts = self._posting(term)
            groups = self._term_groups[term] = TermGroups.of(
                slots,
                counts,
                self._length[slots].astype(np.int64),
                generations_of(self._generation, slots),
                self._removals,
            )
        df = statistics.document_frequency.get(term, 0)
        idf = math.log(1.0 + (statistics.documents - df + 0.5) / (df + 0.5))
        tf = np.asarray(groups.counts, dtype=np.float64)
        lengths = np.asarray(groups.lengths, dtype=np.float64)
        # bm25_postings' operations, on one value per group: the same numbers.
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / average)
        return groups, idf * tf * (BM25_K1 + 1.0) / (tf + norm)

    def _full_scores(
        self,
        rows: np.ndarray,
        held: list[str],
        statistics: TermStatistics,
        known: tuple[str, float] | None = None,
    ) -> np.ndarray:
        """BM25 of any rows for common terms, from each term's counts per slot."""
        return self._bm25_over(rows, held, statistics, held, known=known)

    def _scores_at_length(
        self,
        rows: np.ndarray,
        held: list[str],
        statistics: TermStatistics,
        known: tuple[str, float],
        length: int,
    ) -> np.ndarray:
        """`_full_scores` of rows that all have this length (a group's): then a term's
        part depends on its count alone, so it is read from a table over counts, made by
        `_bm25_over`'s operations on the same numbers (so to the bit). The table costs a
        few values where the arithmetic over every row cost most of such a query."""
        if statistics.documents == 0 or not len(rows):
            return np.zeros(len(rows), dtype=np.float64)
        average = max(statistics.total_length / statistics.documents, 1e-9)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * float(length) / average)
        scores = np.zeros(len(rows), dtype=np.float64)
        for term in held:
            df = statistics.document_frequency.get(term, 0)
            if df == 0:
                continue
            if term == known[0]:
                scores += known[1]
                continue
            most = self._postings[term].max_count
            if most > _COUNT_TABLE:
                return self._full_scores(rows, held, statistics, known)
            idf = math.log(1.0 + (statistics.documents - df + 0.5) / (df + 0.5))
            tf = np.arange(most + 1, dtype=np.float64)
            part = idf * tf * (BM25_K1 + 1.0) / (tf + norm)
            scores += part[self._counts_of(term)[rows]]
        return scores

    def _threshold_walk(
        self,
        held: list[str],
        statistics: TermStatistics,
        by_term: list[tuple[TermGroups, np.ndarray]],
        wanted: int,
    ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
        """Fagin's threshold algorithm over the terms' groups (see `_by_groups`);
        None when it would read more rows than scoring every holder costs."""
        orders = [np.argsort(-scores, kind="stable") for _, scores in by_term]
        at = [0] * len(held)
        seen = np.zeros(len(self._ids), dtype=bool)
        rows_out: list[np.ndarray] = []
        scores_out: list[np.ndarray] = []
        # The ``wanted`` best scores met so far, kept as rows come (partitioning every
        # score met, at every step, was a tenth of such a query at a million entries).
        top = np.zeros(0, dtype=np.float64)
        found = 0
        budget = max(_WALK_ROWS, len(self._ids) // 8)
        while True:
            upcoming = [
                float(scores[order[i]]) if i < len(order) else 0.0
                for (_, scores), order, i in zip(by_term, orders, at, strict=True)
            ]
            bound = sum(upcoming)
            if found >= wanted and float(top.min()) > bound:
                # A row under the ``wanted``-th best score has that many above it, so it
                # cannot make the first ``wanted`` (ties stay): only rows that can are
                # returned, sparing the ranking a sort of every row met.
                cut = float(top.min())
                kept = [scores >= cut for scores in scores_out]
                return (
                    [rows[keep] for rows, keep in zip(rows_out, kept, strict=True)],
                    [scores[keep] for scores, keep in zip(scores_out, kept, strict=True)],
                )
            if bound == 0.0 or found > budget:
                return (rows_out, scores_out) if bound == 0.0 else None
            term = int(np.argmax(upcoming))
            groups, group_scores = by_term[term]
            group = int(orders[term][at[term]])
            live = groups.live(group, self._generation, self._removals)
            at[term] += 1
            new = live[~seen[live]]
            if len(new):
                seen[new] = True
                rows_out.append(new)
                # Every row of the group holds the term with the group's score.
                known = (held[term], float(group_scores[group]))
                scores = self._scores_at_length(new, held, statistics, known, groups.lengths[group])
                scores_out.append(scores)
                found += len(new)
                if len(top) >= wanted:
                    # A score at or under the ``wanted``-th best cannot change it: only
                    # the few above it are partitioned (partitioning every score of each
                    # new group was a third of such a query at a million entries).
                    scores = scores[scores > top.min()]
                top = np.concatenate([top, scores])
                if len(top) > wanted:
                    top = np.partition(top, len(top) - wanted)[len(top) - wanted :]

    def _best_groups(
        self, groups: TermGroups, group_scores: np.ndarray, wanted: int
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """One term: its best groups, whole, until they hold ``wanted`` live rows."""
        rows_out: list[np.ndarray] = []
        scores_out: list[np.ndarray] = []
        found, cut = 0, None
        for group in np.argsort(-group_scores, kind="stable").tolist():
            if cut is not None and group_scores[group] < cut:
                break  # groups of the same score as the last one taken tie with it
            live = groups.live(group, self._generation, self._removals)
            if not len(live):
                continue
            rows_out.append(live)
            scores_out.append(np.full(len(live), group_scores[group]))
            found += len(live)
            if found >= wanted and cut is None:
                cut = group_scores[group]
        return rows_out, scores_out

    def _terms_of(self, slot: int) -> list[int]:
        """The term numbers an entry holds."""
        return self._slot_terms.run(int(self._run_start[slot]), int(self._run_end[slot]))

    def _compact_terms(self) -> None:
        """Drop the runs of removed entries from the term array."""
        size = len(self._ids)
        starts, ends = self._run_start[:size], self._run_end[:size]
        lengths = ends - starts
        packed = np.cumsum(lengths) - lengths
        at = np.repeat(starts - packed, lengths) + np.arange(int(lengths.sum()))
        self._slot_terms = TermRuns(self._slot_terms.gather(at))
        self._run_start[:size], self._run_end[:size] = packed, packed + lengths
        self._dead_terms = 0

    def _contenders(
        self, rows: np.ndarray, allowed: np.ndarray, scores: np.ndarray, limit: int
    ) -> np.ndarray | slice:
        """Which rows (a mask) can make a keyword recall's first ``limit`` (and the best
        scoring one, which sets the scale), so ranking handles tens of rows instead of
        every holder of a common word. The final score is computed here with the very
        operations `rank_by_text` uses (keyword mode: BM25 over the best, plus feedback),
        so a row kept or dropped here is one it keeps or drops; ties at the cut stay."""
        best = float(scores.max())
        final = scores / best if best > 0 else np.zeros_like(scores)
        if self._weighted:
            # Only rows with feedback move: x + FEEDBACK_SHARE * tanh(0) is x.
            weight = self._weight[rows]
            moved = np.flatnonzero(weight)
            final[moved] = final[moved] + FEEDBACK_SHARE * np.tanh(weight[moved])
        open_rows = final[allowed]
        if len(open_rows) > limit:
            top = open_rows >= open_rows.max()
            if np.count_nonzero(top) >= limit or limit == 0:
                cut = float(open_rows.max())
            else:
                cut = float(np.partition(open_rows, len(open_rows) - limit)[-limit])
            keep = allowed & (final >= cut)
            keep[int(np.argmax(scores))] = True
            return keep
        return slice(None)

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings.get(term)
            if posting is None:
                return np.zeros(0, dtype=SLOT_DTYPE), np.zeros(0, dtype=COUNT_DTYPE)
            posting.compact(self._generation)
            arrays = posting.current(self._generation)
            self._arrays.put(term, arrays, TermCache.owned_bytes(*arrays))
        return arrays

    def _statistics(self, query: list[str], owner: Owner | None = None) -> TermStatistics:
        """BM25's statistics over the candidates: every entry, or the owner's."""
        if owner is not None:
            size = len(self._ids)
            owned = self._alive[:size] & self._owned(owner, slice(0, size))
            return TermStatistics(
                int(np.count_nonzero(owned)),
                int(self._length[:size][owned].sum()),
                {
                    term: int(np.count_nonzero(owned[self._posting(term)[0]]))
                    for term in dict.fromkeys(query)
                },
            )
        return TermStatistics(
            self._documents,
            self._total_length,
            {
                term: posting.live if (posting := self._postings.get(term)) else 0
                for term in dict.fromkeys(query)
            },
        )

    # -- approximate semantic search ----------------------------------------------

    def _by_clusters(self, approximate: ApproximateSearch | None) -> bool:
        """Whether a semantic search with ``approximate`` scores by clusters."""
        return (
            approximate is not None
            and self.label is not None
            and self._vector_count >= approximate.from_vectors
        )

    def cluster_for(self, approximate: ApproximateSearch | None) -> None:
        """Make the vector clusters now that a semantic search with ``approximate``
        would make on its first call (a child building a reader's index does, so the
        reader loads them with the snapshot)."""
        if self._by_clusters(approximate) and self._clusters_stale():
            self._cluster()

    def _clusters_stale(self) -> bool:
        size, clustered = len(self._ids), self._clustered_until
        return (
            self._clusters is None
            # Many vectors added since, or many clustered ones gone: cluster afresh.
            or 4 * int(np.count_nonzero(self._has_vector[clustered:size])) > clustered
            or 2 * int(np.count_nonzero(self._has_vector[:clustered])) < clustered
        )

    def _approximate(
        self,
        query_vector: np.ndarray,
        config: ApproximateSearch,
        min_similarity: float | None,
        limit: int,
        exclude: frozenset[bytes],
        owner: Owner | None,
    ) -> list[tuple[bytes, Ranked]]:
        """Semantic search over the clusters nearest the query and every slot added
        since they were made: each scored exactly, the others not at all."""
        if self._clusters_stale():
            self._cluster()
        size, clustered = len(self._ids), self._clustered_until
        vector = query_vector.astype(np.float32)
        length = query_length(vector)  # above 0: a zero query is searched exactly
        ranges = self._clusters.probe((vector / length).astype(np.float32), config.probe_share)
        if clustered < size:
            ranges.append((clustered, size))
        rows = np.concatenate([np.arange(start, stop) for start, stop in ranges])
        # Each cluster is a contiguous block of the matrix: no rows are copied out.
        vectors = self._vectors
        dots = row_dots(vectors, vector, ranges)
        similar = finish_cosines(
            dots, self._fresh_norms()[rows], vector, length, lambda at: vectors[rows[at]],
            within=self._norms_within(length),
        )  # fmt: skip
        if owner is not None:
            owned = self._owned(owner, rows)
            rows, similar = rows[owned], similar[owned]
        allowed = np.ones(len(rows), dtype=bool)
        if exclude:
            excluded = [slot for slot in map(self._ids.slot_of, exclude) if slot is not None]
            allowed = ~np.isin(rows, excluded)
        columns = Columns(
            keyword=np.zeros(len(rows), dtype=np.float64),
            semantic=similar,
            has_vector=self._has_vector[rows],
            weight=self._weight[rows],
            time=self._time[rows],
            partition=self._partition[rows],
            offset=self._offset[rows],
            before=np.full(len(rows), -1, dtype=np.int64),
            after=np.full(len(rows), -1, dtype=np.int64),
            alive=self._alive[rows],
            allowed=allowed,
        )
        ranked = rank_by_similarity(columns, min_similarity=min_similarity, limit=limit)
        return [(self._ids[int(rows[r.row])], r) for r in ranked]

    def _cluster(self) -> None:
        """Group the vectors into clusters and put every slot in cluster order: the
        vectors of a cluster become one block of the matrix. Slots without a vector
        follow; empty slots are dropped."""
        size = len(self._ids)
        with_vector = np.flatnonzero(self._has_vector[:size])
        # In log order, not slot order: the fold and a view's reader fill their slots in
        # different orders, and must make the same clusters to give the same answers.
        with_vector = with_vector[
            np.lexsort(
                (self._offset[with_vector], self._partition[with_vector], self._time[with_vector])
            )
        ]
        centroids = VectorClusters.train(self._vectors, with_vector, self._fresh_norms())
        nearest = VectorClusters.assign(
            self._vectors[:size], centroids, self._fresh_norms()[:size]
        )[with_vector]
        by_cluster = np.argsort(nearest, kind="stable")
        without = np.flatnonzero(self._alive[:size] & ~self._has_vector[:size])
        self._reorder(np.concatenate([with_vector[by_cluster], without]))
        bounds = np.searchsorted(nearest[by_cluster], np.arange(len(centroids) + 1))
        self._clusters = VectorClusters(centroids, bounds)
        self._clustered_until = len(with_vector)
        self.reorganized = True

    def _reorder(self, order: np.ndarray) -> None:
        """Move the entry of slot ``order[i]`` to slot ``i``; slots not in ``order``
        must be empty, and are gone afterwards."""
        count = len(order)
        self._fresh_norms()  # pending norms name slots by their old numbers
        # Slots move: sorted and found again when next read.
        self._by_key, self._put_since, self._with_feedback = None, [], None
        self._term_groups.clear()  # slots move: made again on their next use
        inverse = np.full(len(self._ids), -1, dtype=np.int64)
        inverse[order] = np.arange(count)
        for posting in self._postings.values():
            slots, counts = posting.current(self._generation)
            posting.base = None
            posting.slots = array(SLOT, inverse[slots].astype(SLOT_DTYPE).tobytes())
            posting.counts = array(COUNT, counts.astype(COUNT_DTYPE).tobytes())
            posting.generations = array(GENERATION, bytes(4 * len(slots)))
        self._arrays.clear()
        self._dense.clear()
        capacity = _room_for(count)
        for name in (
            "_time", "_partition", "_offset", "_weight", "_length", "_alive",
            "_has_vector", "_other_vector", "_norms", "_run_start", "_run_end", *_OWNER_COLUMNS,
        ):  # fmt: skip
            moved = np.zeros(capacity, dtype=getattr(self, name).dtype)
            moved[:count] = getattr(self, name)[order]
            setattr(self, name, moved)
        for name in ("_before", "_after"):
            neighbour = getattr(self, name)[order]
            moved = np.full(capacity, -1, dtype=np.int64)
            moved[:count] = np.where(neighbour >= 0, inverse[neighbour], -1)
            setattr(self, name, moved)
        self._generation = np.zeros(capacity, dtype=GENERATION_DTYPE)
        if self._vectors is not None:
            vectors = np.zeros((capacity, self._vectors.shape[1]), dtype=np.float32)
            # Straight into the new matrix: ``vectors[:count] = self._vectors[order]``
            # made a third copy of it on the way (1.5 GB at a million 384-d vectors).
            np.take(self._vectors, order, axis=0, out=vectors[:count], mode="clip")
            self._vectors = vectors
        slots = order.tolist()
        self._ids = IdTable(IdTable.arrays_of([self._ids[slot] for slot in slots]))
        self._group_of = [self._group_of[slot] for slot in slots]
        self._free = []
        self._groups = {
            group: array("q", inverse[np.frombuffer(members, dtype=np.int64)].tobytes())
            if isinstance(members, array)
            else sorted(
                (member & ~_SLOT_MASK) | int(inverse[member & _SLOT_MASK]) for member in members
            )
            for group, members in self._groups.items()
        }
        self._expiry = {int(inverse[slot]): at for slot, at in self._expiry.items()}
        self._expiring = [(at, slot) for slot, at in self._expiry.items()]
        heapq.heapify(self._expiring)
