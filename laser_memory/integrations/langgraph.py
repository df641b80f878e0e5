"""A LangGraph store on the memory log: `LaserStore`.

Every ``put`` is a ``named.set`` record and every ``delete`` a ``named.remove`` on the
handle's memory topic; items come back from the managed view (when the connection has
one) or from the handle's in-process fold, so a graph's long-term memory is a log you
can replay and audit like any other. ``search`` with a ``query`` ranks **inside** the
items the namespace prefix and ``filter`` allow, with the same BM25 and fusion as
``recall``: by words alone, or with an ``index`` config (``dims``, ``embed``,
``fields``, as LangGraph defines them) by words and meaning together (hybrid), the
vectors made once at ``put`` and carried in the record, so a fold never calls a model.

How an item is kept: the named item's key is the namespace labels joined by ``.``,
then ``..``, then the item's key (labels hold no ``.``, so this is one-to-one); its body
is the JSON object ``{"value": ..., "ttl": minutes, "expires_at": ms}``.

TTL follows LangGraph's `TTLConfig`: ``put(ttl=minutes)`` (or ``default_ttl``) sets an
expiry, reads with ``refresh_ttl`` move it (a ``named.patch`` of ``expires_at``), and
`LaserStore.sweep_ttl` removes what has expired with conditional removes, which never
undo a newer put; the sweeper ``async with`` runs keeps a failed sweep's error in
`LaserStore.sweep_failures` and sweeps again at the next interval. Expired items stay
readable until swept unless ``omit_expired``.

Needs the optional extra: ``pip install 'laser-memory[langgraph]'``.

>>> async with laser_memory.connect() as laser:                          # doctest: +SKIP
...     async with LaserStore(laser.memory("graph"), index={"dims": 64,
...                           "embed": WordHashEmbedder()}) as store:
...         await store.aput(("users", "u1"), "prefs", {"text": "likes dark mode"})
...         graph = builder.compile(store=store)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import numpy as np

from . import missing_extra

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra(__name__, "langgraph", exc) from exc

from folders.state import decode_for_fold

from ..embedding import (
    Embedder,
    cosine_similarities,
    embed_texts,
    is_label,
    row_norms,
    to_vector,
)
from ..errors import (
    AccessDenied,
    ConfigError,
    InvalidBody,
    InvalidInput,
    InvalidName,
    LaserError,
    shown,
)
from ..ids import validate_name
from ..inputs import wait_seconds
from ..items import NamedItem
from ..latest import Latest
from ..log import Appended, LogRecord
from ..memory import MemoryHandle
from ..named import (
    MAX_JSON_DEPTH,
    dump_json,
    json_depth,
    json_too_deep,
    load_json,
    validate_key,
)
from ..recall import query_text
from ..records import (
    MAX_DIMENSIONS,
    MAX_NAMED_PATHS,
    MAX_NAMED_VECTOR_BYTES,
    NAMED_RECORDS,
    NamedPatch,
    NamedRemove,
    NamedSet,
)
from ..scoring import TermStatistics, bm25, bm25_postings
from ..terms import term_counts, terms
from ..text_ranking import Columns, rank_by_text

__all__ = ["InvalidStoreNamespace", "LaserStore"]


class InvalidStoreNamespace(InvalidName, InvalidNamespaceError):
    """A namespace LangGraph's own rules refuse (an empty label, a label with a ``.``,
    the reserved first label ``langgraph``): a `LaserError` like every refusal, and
    still the `InvalidNamespaceError` a LangGraph caller catches."""

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_MINUTE_MS = 60_000


def _item_key(namespace: tuple[str, ...], key: str) -> str:
    return ".".join(namespace) + ".." + key


def _checked_paths(paths: Sequence[str]) -> list[str]:
    """JSON paths to index as a `NamedSet` carries them: at most `MAX_NAMED_PATHS`, each
    a name every fold takes (at most 255 bytes of Unicode text, no control character).
    One past these was written, then set aside by every fold: the item read as never
    put. Raises `InvalidInput` (`InvalidName` for a path)."""
    if len(paths) > MAX_NAMED_PATHS:
        raise InvalidInput(
            f"at most {MAX_NAMED_PATHS} JSON paths are indexed on one item, got {len(paths)}"
        )
    checked = [validate_name(path, "JSON path to index") for path in paths]
    for path in checked:
        tokenize_path(path)
    return checked


def _split_key(name: str) -> tuple[tuple[str, ...], str]:
    joined, _, key = name.partition("..")
    return tuple(joined.split(".")), key


#: How many key prefixes' listings a store keeps parsed (see `LaserStore._listing`).
_LISTINGS_KEPT = 64
#: Positions of a store's own writes it keeps, to know the keys they changed without
#: reading them from the log (`LaserStore._changed_since`).
_OWN_KEPT = 100_000
#: Keys a kept listing is patched with at most; more and it is read again.
_PATCHED_MOST = 1_000
#: Records written by others since a listing was read that are read from the log to
#: find the keys they changed, at least; more than this and than a tenth of the
#: listing's items, and the listing is read again (a record read and decoded costs less
#: than half of an item listed: see `LaserStore._changed_since`).
_FOREIGN_READ_LEAST = 1_000
#: Listings of fewer items than this are read again after another writer's records
#: rather than read those from the log: reading the listing costs a few milliseconds,
#: about a log read's round trip (a broker's fetch).
_FOREIGN_LISTING_LEAST = 1_000
#: How long a search waits for those records before it reads the listing again instead
#: (at 100k items that read takes about half a second).
_FOREIGN_READ_S = 1.0


@functools.lru_cache(maxsize=256)
def _plain_field(path: str) -> bool:
    """Whether a LangGraph index path is one field name, which `get_text_at_path` reads
    as ``value[path]`` (no ``.``, ``[``, ``{``, ``*``; not ``$`` or empty)."""
    return bool(path) and path != "$" and not any(c in path for c in ".[]{}*")


def _texts_at(value: Any, path: str) -> list[str]:
    """`get_text_at_path`, without parsing the path for each item when it is one field
    name (the common ``fields=["text"]``): that parse and its walk were a fifth of a
    fresh store's first search at 100k. The same texts for every path (a test holds the
    two together)."""
    if not (type(value) is dict and _plain_field(path)):
        return get_text_at_path(value, path)
    found = value.get(path)
    if isinstance(found, str | int | float | bool):
        return [str(found)]
    if isinstance(found, list | dict):
        return [json.dumps(found, sort_keys=True, ensure_ascii=False)]
    return []


def _prefix_key(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace) + "." if namespace else ""


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class _Stored(msgspec.Struct, gc=False):
    """One item as the store reads it from a named item. Not tracked by the garbage
    collector (it holds no cycle): a listing keeps one per item, and when they were
    tracked every full collection walked them all, a third of a search at 100k."""

    named: NamedItem
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    ttl: float | None
    expires_at: int | None
    cached_counts: tuple[dict[str, int], int] | None = None
    cached_matrix: np.ndarray | None = None
    #: Its vectors were handed to its listing's `_Vectors`, and its record's bytes of
    #: them let go (`release_vectors`).
    released: bool = False

    @classmethod
    def of(cls, named: NamedItem, envelope: dict[str, Any]) -> _Stored:
        namespace, key = _split_key(named.key)
        value, ttl, expires_at = envelope["value"], envelope.get("ttl"), envelope.get("expires_at")
        return cls(named, namespace, key, value, ttl, expires_at)

    @property
    def version(self) -> tuple:
        """What tells this write of the item from any other."""
        named = self.named
        return (named.version, named.append_time_ms, named.source.partition, named.source.offset)

    def counts(self) -> tuple[dict[str, int], int]:
        """The terms of the item's indexed texts (computed once)."""
        if self.cached_counts is None:
            texts = [
                t for path in self.named.index or () for t in _texts_at(self.value, path)
            ]
            self.cached_counts = term_counts("\n".join(texts).encode("utf-8", "surrogatepass"))
        return self.cached_counts

    def release_vectors(self) -> None:
        """Let go of the record's bytes of the vectors, which its listing's `_Vectors`
        now holds (a copy, stacked): the listing held every item's vectors twice, 150 MB
        for 100k items of 384 dimensions (600 MB at 1,536)."""
        if self.named.vectors is not None:
            self.named = msgspec.structs.replace(self.named, vectors=None)
        self.cached_matrix = None
        self.released = True

    def vector_bytes(self, label: str, dims: int) -> bytes | None:
        """The record's bytes of the item's vectors, if they are model ``label``'s rows of
        ``dims`` float32 values."""
        raw = self.named.vectors
        if self.named.embedder != label or not raw or len(raw) % (4 * dims):
            return None
        return raw

    def matrix(self, label: str, dims: int) -> np.ndarray | None:
        """The item's vectors, one row per indexed text, if they are that model's."""
        raw = self.vector_bytes(label, dims)
        if raw is None:
            return None
        if self.cached_matrix is None:
            self.cached_matrix = to_vector(raw).reshape(-1, dims)
        return self.cached_matrix

    def to_item(self, score: float | None = None, *, searched: bool = False) -> Item:
        fields = {
            "namespace": self.namespace,
            "key": self.key,
            # A value of its own, parsed again from the record: the one kept here serves
            # later searches, which a caller changing what it was given changed too.
            "value": load_json(self.named.body)["value"],
            "created_at": _when(self.named.created_ms or self.named.append_time_ms),
            "updated_at": _when(self.named.append_time_ms),
        }
        return SearchItem(**fields, score=score) if searched else Item(**fields)


class _Listing:
    """What a listing of one key prefix read, kept for the next search of it while the
    memory handle's read token (`MemoryHandle._read_token`) stays the same: the
    parsed items newest first, and, made on the first search by text, the columns
    every such search ranks (a search of 100k items spent most of its time reading
    and preparing these again)."""

    __slots__ = (
        "added", "added_rows", "by_key", "fields", "inverted", "inverted_rows", "keyword",
        "lengths", "newest", "postings", "scanned", "semantic", "times", "token",
    )  # fmt: skip

    def __init__(self, token: tuple, newest: list[_Stored]) -> None:
        self.token = token
        self.newest = newest
        #: The items by named key, made when the listing is first patched.
        self.by_key: dict[str, _Stored] | None = None
        #: Each item's term counts, in ``newest`` order; their lengths; and per term
        #: asked for, the rows holding it and its count in each (`bm25_postings`).
        self.keyword: list[tuple[dict[str, int], int]] | None = None
        self.lengths: np.ndarray | None = None
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: Every term's posting list at once (`_inverted`), once searches have asked
        #: for more than `_SCANNED_TERMS` terms (``scanned``): until then each is found
        #: by a scan. Kept through the listing's patches: ``inverted_rows`` is where each
        #: row it was made of is now (-1: gone), ``added`` the items put since (at most
        #: `_ADDED_KEPT`) and ``added_rows`` where they are.
        self.inverted: tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray] | None = None
        self.inverted_rows = _NO_ROWS
        self.added: list[_Stored] = []
        self.added_rows = _NO_ROWS
        self.scanned = 0
        #: The items' vectors, by (label, dimensions).
        self.semantic: dict[tuple, _Vectors] = {}
        #: Position keys (time, partition, offset) as columns, in ``newest`` order.
        self.times: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: Per value field a filter asked for a plain value of: the plain values met
        #: there, numbered, and each item's number, in ``newest`` order (`_code`).
        self.fields: dict[str, tuple[dict[Any, int], np.ndarray]] = {}

    def equal_to(self, field: str, wanted: Any) -> np.ndarray:
        """Which items' value ``field`` equals ``wanted`` (a plain value, `_PLAIN`), as
        `_matches` decides, from a column of the field made on its first such filter:
        a filter compared every item's value in Python, 70 ms at 100k items."""
        found = self.fields.get(field)
        if found is None:
            if len(self.fields) >= _FIELDS_KEPT:
                # A bound on what filters can make a listing keep (a caller naming a
                # new field in each filter would otherwise grow it without end).
                del self.fields[next(iter(self.fields))]
            codes: dict[Any, int] = {}
            column = np.fromiter(
                (_code(codes, s.value.get(field)) for s in self.newest),
                dtype=np.int64,
                count=len(self.newest),
            )
            found = self.fields[field] = (codes, column)
        codes, column = found
        code = codes.get(wanted)
        return np.zeros(len(column), dtype=bool) if code is None else column == code

    def columns_of_times(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.times is None:
            self.times = _times(self.newest)
        return self.times

    def documents(self) -> list[tuple[dict[str, int], int]]:
        if self.keyword is None:
            self.keyword = [s.counts() for s in self.newest]
        return self.keyword

    def bm25(self, query_terms: Sequence[str], picked: np.ndarray | None = None) -> np.ndarray:
        """`bm25` of every item for the query, from posting lists made for each term
        the first time it is asked for: the same numbers, to the bit. ``picked``: the
        rows of the items searched (a filter's), ascending; scored, in that order, as
        a collection of their own, as `bm25` of those items alone scores them."""
        documents = self.documents()
        if self.lengths is None:
            self.lengths = np.fromiter((n for _, n in documents), dtype=np.float64)
        missing = set(query_terms) - self.postings.keys()
        if self.inverted is None and self.scanned + len(missing) > _SCANNED_TERMS:
            self.inverted = _inverted(documents)
            self.inverted_rows = np.arange(len(documents), dtype=np.int64)
            self.added, self.added_rows = [], _NO_ROWS
        for term in missing:
            if self.inverted is not None:
                self.postings[term] = self._inverted_posting(term)
                continue
            self.scanned += 1
            found = [row for row, (counts, _) in enumerate(documents) if term in counts]
            self.postings[term] = (
                np.array(found, dtype=np.int64),
                np.array([documents[row][0][term] for row in found], dtype=np.float64),
            )
        if picked is None:
            stats = TermStatistics(
                len(documents),
                int(self.lengths.sum()),
                {term: len(self.postings[term][0]) for term in set(query_terms)},
            )
            return bm25_postings(query_terms, self.postings.__getitem__, self.lengths, stats)
        # Each posting list cut to the picked rows, renumbered to their places.
        place = np.full(len(documents), -1, dtype=np.int64)
        place[picked] = np.arange(len(picked))
        postings = {}
        for term in set(query_terms):
            rows, counts = self.postings[term]
            at = place[rows]
            kept = at >= 0
            postings[term] = (at[kept], counts[kept])
        lengths = self.lengths[picked]
        stats = TermStatistics(
            len(picked),
            int(lengths.sum()),
            {term: len(rows) for term, (rows, _) in postings.items()},
        )
        return bm25_postings(query_terms, postings.__getitem__, lengths, stats)

    def _inverted_posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """A term's rows and counts from the posting lists made at once, as they are
        now: their rows where those items went (the gone left out), and the items put
        since that hold the term, in row order."""
        assert self.inverted is not None
        numbers, rows, counts, bounds = self.inverted
        number = numbers.get(term)
        if number is None:
            found, found_counts = _NO_ROWS, _NO_COUNTS
        else:
            # Rows keep their order through puts and deletes: still ascending.
            now = self.inverted_rows[rows[bounds[number] : bounds[number + 1]]]
            kept = now >= 0
            found, found_counts = now[kept], counts[bounds[number] : bounds[number + 1]][kept]
        holding = [
            (int(row), float(counts_of[term]))
            for stored, row in zip(self.added, self.added_rows, strict=True)
            if term in (counts_of := stored.counts()[0])
        ]
        if not holding:
            return found, found_counts
        rows = np.concatenate((found, np.array([row for row, _ in holding], dtype=np.int64)))
        counts = np.concatenate((found_counts, np.array([n for _, n in holding])))
        order = np.argsort(rows, kind="stable")
        return rows[order], counts[order]

    def vectors(self, label: str, dims: int) -> _Vectors:
        found = self.semantic.get((label, dims))
        if found is None:
            found = self.semantic[(label, dims)] = _Vectors(self.newest, label, dims)
        return found

    # A store's own writes change a kept listing in place (`LaserStore._patched`): each
    # column moves its rows as ``newest`` does, so the next search ranks as one over a
    # listing read anew would.

    def _keys(self) -> dict[str, _Stored]:
        if self.by_key is None:
            self.by_key = {s.named.key: s for s in self.newest}
        return self.by_key

    def stored(self, key: str) -> _Stored | None:
        """The item this listing holds under a named key."""
        return self._keys().get(key)

    def replace(self, old: _Stored | None, new: _Stored | None) -> None:
        """Take ``old`` (what `stored` gave) out and put ``new`` in, in order."""
        by_key = self._keys()
        if old is not None:
            time, partition, offset = self.columns_of_times()
            named = old.named
            [row] = np.flatnonzero((partition == named.source.partition)
                                   & (offset == named.source.offset))  # fmt: skip
            self._remove(int(row))
            del by_key[named.key]
        if new is not None:
            time, partition, offset = self.columns_of_times()
            named = new.named
            t, p, o = named.append_time_ms, named.source.partition, named.source.offset
            # Newest first: the new item goes after every item whose key is greater.
            row = int(np.count_nonzero(
                (time > t) | ((time == t) & ((partition > p) | ((partition == p) & (offset > o))))
            ))  # fmt: skip
            self._insert(row, new)
            by_key[named.key] = new

    def _remove(self, row: int) -> None:
        del self.newest[row]
        for field, (codes, column) in self.fields.items():
            self.fields[field] = (codes, np.delete(column, row))
        if self.times is not None:
            self.times = tuple(np.delete(column, row) for column in self.times)  # type: ignore[assignment]
        if self.keyword is not None:
            del self.keyword[row]
        if self.lengths is not None:
            self.lengths = np.delete(self.lengths, row)
        for term, (rows, counts) in self.postings.items():
            kept = rows != row
            rows, counts = rows[kept], counts[kept]
            self.postings[term] = (rows - (rows > row), counts)
        if self.inverted is not None:
            moved = self.inverted_rows
            moved[moved == row] = -1
            moved[moved > row] -= 1
            added = self.added_rows
            if len(added):
                gone = np.flatnonzero(added == row)
                for at in gone.tolist()[::-1]:
                    del self.added[at]
                added = np.delete(added, gone)
                self.added_rows = added - (added > row)
        for vectors in self.semantic.values():
            vectors.remove(row)

    def _insert(self, row: int, stored: _Stored) -> None:
        self.newest.insert(row, stored)
        for field, (codes, column) in self.fields.items():
            code = _code(codes, stored.value.get(field))
            self.fields[field] = (codes, np.insert(column, row, code))
        named = stored.named
        if self.times is not None:
            self.times = tuple(
                np.insert(column, row, value)
                for column, value in zip(
                    self.times,
                    (named.append_time_ms, named.source.partition, named.source.offset),
                    strict=True,
                )
            )  # type: ignore[assignment]
        if self.keyword is not None:
            counts_of, length = stored.counts()
            self.keyword.insert(row, (counts_of, length))
            if self.lengths is not None:
                self.lengths = np.insert(self.lengths, row, float(length))
            for term, (rows, counts) in self.postings.items():
                rows = rows + (rows >= row)
                if term in counts_of:
                    at = int(np.searchsorted(rows, row))
                    rows = np.insert(rows, at, row)
                    counts = np.insert(counts, at, float(counts_of[term]))
                self.postings[term] = (rows, counts)
        if self.inverted is not None:
            if len(self.added) >= _ADDED_KEPT:
                # Each put since is looked at for each new term: past a bound the lists
                # are made again, on the next search that needs them.
                self.inverted, self.added, self.added_rows = None, [], _NO_ROWS
            else:
                moved = self.inverted_rows
                moved[moved >= row] += 1
                added = self.added_rows
                self.added_rows = np.append(added + (added >= row), row)
                self.added.append(stored)
        for (label, dims), vectors in self.semantic.items():
            vectors.insert(row, stored.matrix(label, dims))
        if self.semantic:
            stored.release_vectors()


#: Terms a kept listing finds by scanning its items, one scan a term, before it makes
#: every term's posting list in one pass: a scan of 100k items took 12 ms, the pass
#: (`_inverted`) about 16 times that, so a listing searched a few times scans and one
#: searched often makes the lists (and keeps them through its writes: dropped at each,
#: a search after a write scanned again for each new term, 43 ms at 100k against 8).
_SCANNED_TERMS = 10
#: Items put into a listing since its posting lists were made at once that the lists
#: are kept through (`_Listing._inverted_posting` looks at each for a new term).
_ADDED_KEPT = 1024
#: A search of at least this share of a listing's items (1/n of them: a filter's, or
#: those not expired) ranks them from the listing's columns; of fewer, from their own.
_SHARED_COLUMNS_FROM = 8
#: The values a filter's plain value is looked up among (`_Listing.equal_to`): JSON's
#: scalars. A list or an object equals none of them, and `_matches` compares with
#: ``==``, as a dict looks up its keys (so 1, 1.0 and True are one value, as they are
#: equal).
_PLAIN = frozenset({str, int, float, bool, type(None)})
#: Field columns a listing keeps at most (`_Listing.equal_to`), the oldest dropped.
_FIELDS_KEPT = 8


def _code(codes: dict[Any, int], value: Any) -> int:
    """``value``'s number among ``codes`` (numbered on first sight); -1 for a value
    that is not plain, which no plain value equals."""
    return codes.setdefault(value, len(codes)) if type(value) in _PLAIN else -1


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_COUNTS = np.zeros(0, dtype=np.float64)


def _inverted(
    documents: Sequence[tuple[dict[str, int], int]],
) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray]:
    """Every term's posting list: (term -> number, the rows holding each term and its
    count in each, grouped by number in row order, and where each number's group
    starts). Arrays only: a list per term would be an object the collector tracks."""
    maps = [counts for counts, _ in documents]
    sizes = np.fromiter(map(len, maps), dtype=np.int64, count=len(maps))
    total = int(sizes.sum())
    # Every occurrence at once through C-level iterators (a Python loop an item was
    # half of the build at 100k items): terms numbered in order of first appearance.
    occurrences = list(itertools.chain.from_iterable(maps))
    numbers = dict(zip(dict.fromkeys(occurrences), itertools.count()))
    of_term = np.fromiter(map(numbers.__getitem__, occurrences), dtype=np.int64, count=total)
    counts_of = np.fromiter(
        itertools.chain.from_iterable(map(dict.values, maps)), dtype=np.float64, count=total
    )
    # numpy sorts 16-bit integers stably by radix, in linear time: 6x faster than the
    # same numbers as int64, and most listings hold fewer than 65,536 distinct terms.
    order = np.argsort(
        of_term.astype(np.uint16) if len(numbers) <= 1 << 16 else of_term, kind="stable"
    )
    bounds = np.concatenate(
        (np.zeros(1, dtype=np.int64), np.cumsum(np.bincount(of_term, minlength=len(numbers))))
    )
    rows = np.repeat(np.arange(len(maps)), sizes)[order]
    return numbers, rows, counts_of[order], bounds


def _times(items: Sequence[_Stored]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array([s.named.append_time_ms for s in items], dtype=np.int64),
        np.array([s.named.source.partition for s in items], dtype=np.int64),
        np.array([s.named.source.offset for s in items], dtype=np.int64),
    )


def _stacked(
    items: Sequence[_Stored], label: str, dims: int
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """The items' vectors of model ``label`` stacked: which items have any (their rows
    in ``items``), the rows, each row's norm, and where each item's rows start."""
    # The records' bytes joined and read as one array (what `_Stored.matrix` accepts),
    # not an array made for each item and then copied: half the time at 100k items.
    rows, raws = [], []
    for row, s in enumerate(items):
        raw = s.vector_bytes(label, dims)
        if raw is not None:
            rows.append(row)
            raws.append(raw)
    if not rows:
        empty = np.zeros((0, dims), dtype=np.float32)
        return rows, empty, np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
    stacked = to_vector(b"".join(raws)).reshape(-1, dims)  # read-only: `insert` copies it
    starts = np.cumsum([0, *(len(raw) // (4 * dims) for raw in raws[:-1])])
    return rows, stacked, row_norms(stacked), starts


def _nearest(
    similar: np.ndarray, owner: np.ndarray, items: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``items`` items' similarity, that of its nearest row (``owner``: each
    row's item; 0 for an item with none), and whether it has a row."""
    best = np.full(items, -np.inf, dtype=similar.dtype)
    np.maximum.at(best, owner, similar)
    has_vector = np.zeros(items, dtype=bool)
    has_vector[owner] = True
    semantic = np.zeros(items, dtype=np.float64)
    semantic[has_vector] = best[has_vector]
    return semantic, has_vector


class _Vectors:
    """A listing's vectors of one model, for every item that has any: rows in no
    order, each with its item's row in ``newest`` (``owner``; -1 once the item left),
    so an item put or taken out moves no other item's vectors. Each row's norm is kept
    beside it."""

    __slots__ = ("count", "dead", "matrix", "norms", "owner")

    def __init__(self, items: Sequence[_Stored], label: str, dims: int) -> None:
        rows, stacked, norms, starts = _stacked(items, label, dims)
        self.matrix, self.norms, self.count, self.dead = stacked, norms, len(stacked), 0
        sizes = np.diff(np.append(starts, len(stacked)))
        self.owner = np.repeat(np.asarray(rows, dtype=np.int64), sizes)
        for row in rows:
            items[row].release_vectors()

    def similar_among(
        self, query: np.ndarray, picked: np.ndarray, items: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """`similar` of the items at rows ``picked`` alone (of ``items`` rows), in that
        order: only their vectors' products are taken."""
        owner = self.owner[: self.count]
        place = np.full(items, -1, dtype=np.int64)
        place[picked] = np.arange(len(picked))
        at = np.where(owner >= 0, place[np.maximum(owner, 0)], -1)
        chosen = np.flatnonzero(at >= 0)
        if not len(chosen):
            return np.zeros(len(picked), dtype=np.float64), np.zeros(len(picked), dtype=bool)
        similar = cosine_similarities(query, self.matrix[chosen], self.norms[chosen])
        return _nearest(similar, at[chosen], len(picked))

    def similar(self, query: np.ndarray, items: int) -> tuple[np.ndarray, np.ndarray]:
        """Each item's similarity to ``query`` (that of its nearest text; 0 for an item
        with no vector) and whether it has a vector."""
        count = self.count
        similar = cosine_similarities(query, self.matrix[:count], self.norms[:count])
        owner = self.owner[:count]
        live = owner >= 0
        return _nearest(similar[live], owner[live], items)

    def remove(self, row: int) -> None:
        owner = self.owner[: self.count]
        gone = owner == row
        self.dead += int(np.count_nonzero(gone))
        owner[gone] = -1
        owner[owner > row] -= 1
        if self.dead > self.count // 2:  # mostly rows of items gone: keep the others
            live = owner >= 0
            self.matrix = self.matrix[: self.count][live]
            self.norms = self.norms[: self.count][live]
            self.owner, self.count, self.dead = owner[live], int(np.count_nonzero(live)), 0

    def insert(self, row: int, matrix: np.ndarray | None) -> None:
        owner = self.owner[: self.count]
        owner[owner >= row] += 1
        if matrix is None:
            return
        end = self.count + len(matrix)
        # Room for as many rows again, so puts add rows cheaply (and a copy of the rows
        # `_stacked` read from the records' bytes, which cannot be written).
        if end > len(self.matrix) or not self.matrix.flags.writeable:
            room = max(end, 2 * len(self.matrix))
            grown = np.empty((room, self.matrix.shape[1]), dtype=self.matrix.dtype)
            grown[: self.count] = self.matrix[: self.count]
            norms = np.empty(room, dtype=self.norms.dtype)
            norms[: self.count] = self.norms[: self.count]
            owners = np.empty(room, dtype=np.int64)
            owners[: self.count] = owner
            self.matrix, self.norms, self.owner = grown, norms, owners
        self.matrix[self.count : end] = matrix
        self.norms[self.count : end] = row_norms(matrix)
        self.owner[self.count : end] = row
        self.count = end


def _read(named: NamedItem) -> _Stored | None:
    """The item a named item holds; None for one that is not the store's (a bare
    ``expires_at`` left by a refresh that raced a delete, or a body of another shape)."""
    try:
        envelope = load_json(named.body)
    except InvalidBody:
        return None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("value"), dict):
        return None
    return _Stored.of(named, envelope)


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter rules: equal values, nested objects field by field, or
    operators ($eq, $ne, $gt, $gte, $lt, $lte); an order operator on a value that is no
    number is no match."""
    if isinstance(wanted, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return value == wanted


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    left, right = _compared(value), _compared(operand)
    if left is None or right is None:
        return False
    if op == "$gt":
        return left > right
    if op == "$gte":
        return left >= right
    if op == "$lt":
        return left < right
    return left <= right


def _compared(value: Any) -> float | int | None:
    """A value as the range operators compare it: ``float(value)`` as LangGraph's store
    does, but an int past float's range as itself (Python compares it exactly with a
    float; ``float`` raised OverflowError); None for what is no number."""
    try:
        return float(value)
    except OverflowError:
        return value if isinstance(value, int) else None
    except (TypeError, ValueError):
        return None


def _check_filter(wanted: Any, keys: tuple[Any, ...] = ()) -> None:
    """Refuse an operator LangGraph does not know, an object of operators with a field
    among them, and objects nested deeper than any value; ``keys`` lead to ``wanted``."""
    if isinstance(wanted, dict):
        if len(keys) >= MAX_JSON_DEPTH:
            # Walked on, such a filter was a raw RecursionError; no value nests as deep.
            raise InvalidInput(
                f"the filter nests objects more than {MAX_JSON_DEPTH} levels deep; no "
                f"stored value nests deeper than {MAX_JSON_DEPTH - 1}"
            )
        # The filter's own keys are fields, each matched on its own (as LangGraph's are).
        operators = bool(keys) and any(isinstance(k, str) and k.startswith("$") for k in wanted)
        for k, v in wanted.items():
            if isinstance(k, str) and k.startswith("$") and k not in _OPERATORS:
                raise InvalidInput(
                    f"{_filter_path(keys)} uses the operator {shown(k)}; LangGraph filters "
                    f"know {', '.join(_OPERATORS)}"
                )
            if operators and not (isinstance(k, str) and k in _OPERATORS):
                # Taken, such a key was applied as "$lte" (LangGraph's store refuses it).
                raise InvalidInput(
                    f"{_filter_path(keys)} mixes operators with the field {shown(k)}: an "
                    f"object of operators holds operators only ({', '.join(_OPERATORS)}); "
                    "filter a nested field as {'field': {'$gt': 1}}"
                )
            _check_filter(v, (*keys, k))


def _filter_path(keys: tuple[Any, ...]) -> str:
    """Where in a filter, as ``filter.a.b`` (made only for an error: keys may be long)."""
    shown_keys = [k[:40] if type(k) is str else type(k).__name__ for k in keys[:6]]
    shown_keys += ["..."] if len(keys) > 6 else []
    return ".".join(["filter", *shown_keys])


def _plain(value: Any) -> Any:
    """``value`` with each str subclass in it (in tuples, lists and dicts too) as the
    plain text it holds: its own methods (equality, hash, ``startswith``) are the
    caller's code, and no record can carry one (msgspec encodes no subclass)."""
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if type(value) is tuple or type(value) is list:
        if all(type(v) is str for v in value):  # a namespace, as it mostly comes
            return value
        return type(value)(_plain(v) for v in value)
    if type(value) is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _plain_op(op: Any) -> Any:
    """An operation with plain text for its names, paths, query and filter (`_plain`);
    a put's value is left as it is (JSON takes a subclass as its text). One nested too
    deeply to walk is left as it is too: the checks after it say what is wrong."""
    try:
        return _plain_fields(op)
    except RecursionError:
        return op


def _plain_fields(op: Any) -> Any:
    if isinstance(op, PutOp):
        return op._replace(
            namespace=_plain(op.namespace), key=_plain(op.key), index=_plain(op.index)
        )
    if isinstance(op, GetOp):
        return op._replace(namespace=_plain(op.namespace), key=_plain(op.key))
    if isinstance(op, SearchOp):
        return op._replace(
            namespace_prefix=_plain(op.namespace_prefix),
            query=_plain(op.query),
            filter=_plain(op.filter),
        )
    if isinstance(op, ListNamespacesOp) and isinstance(op.match_conditions, tuple | list):
        conditions = [
            c._replace(match_type=_plain(c.match_type), path=_plain(c.path))
            if isinstance(c, MatchCondition)
            else c
            for c in op.match_conditions
        ]
        return op._replace(match_conditions=tuple(conditions))
    return op


def _check_namespace(op: Op) -> None:
    """Namespaces are tuples of strings: a bare string would be read label by letter."""
    if isinstance(op, GetOp | PutOp):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:
        paths = [c.path for c in op.match_conditions or ()]
    for path in paths:
        if not isinstance(path, tuple | list) or not all(isinstance(p, str) for p in path):
            raise InvalidName(f"a store namespace is a tuple of strings, got {path!r:.80}")


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    if condition.match_type not in ("prefix", "suffix"):
        raise InvalidInput(f"match_type is 'prefix' or 'suffix', got {shown(condition.match_type)}")
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class _LangChainEmbedder:
    """A LangChain `Embeddings` as an `Embedder`, so its vectors are checked (shape,
    finite values) like every other model's before anything is written."""

    def __init__(self, embeddings: Embeddings, label: str, dimensions: int, *, query: bool):
        self.label = label
        self.dimensions = dimensions
        self._embeddings = embeddings
        self._query = query

    async def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        if self._query:
            return [await self._embeddings.aembed_query(text) for text in texts]
        return await self._embeddings.aembed_documents(list(texts))


class _LaserEmbeddings(Embeddings):
    """A laser-memory `Embedder` (`WordHashEmbedder`, `MiniLMEmbedder`) given as
    ``index["embed"]``: LangGraph sees `Embeddings`."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConfigError("LaserStore embeds on the event loop; this is never called")

    def embed_query(self, text: str) -> list[float]:
        raise ConfigError("LaserStore embeds on the event loop; this is never called")


def _label_of(embed: Any, dims: int) -> str:
    if isinstance(embed, Embedder):
        return embed.label
    if isinstance(embed, str):
        return f"langgraph/{embed}"
    name = getattr(embed, "model", None) or getattr(embed, "model_name", None)
    kind = getattr(embed, "__qualname__", None) or type(embed).__qualname__
    return f"langgraph/{kind}{':' + str(name) if name else ''}:{dims}"


class LaserStore(BaseStore):
    """A LangGraph `BaseStore` whose puts and deletes are records on a memory topic.

    ``memory`` is the handle whose namespace (and tenant, principal, governor) the store
    writes and reads. ``index`` is LangGraph's `IndexConfig` (``dims``, ``embed``,
    ``fields``; ``embed`` may also be a laser-memory `Embedder`); ``label`` names the
    model in the records (default: the embedder's label, or one made from ``embed``).
    ``ttl`` is LangGraph's `TTLConfig`. ``folded=True`` reads the in-process fold even
    when the connection has a managed view; ``timeout`` bounds the wait for the view to
    show the store's own writes.

    Async first: use it inside the event loop of its connection (``async with``).
    The sync methods LangGraph gives every store (``put``, ``get``, ``search``...) work
    from other threads, such as the worker threads of a sync graph, and run on that
    loop; called on the loop's own thread they raise `ConfigError` instead of
    deadlocking.

    >>> async with LaserStore(laser.memory("graph")) as store:        # doctest: +SKIP
    ...     await store.aput(("users", "u1"), "prefs", {"theme": "dark"})
    ...     (await store.aget(("users", "u1"), "prefs")).value
    {'theme': 'dark'}
    """

    supports_ttl = True

    def __init__(
        self,
        memory: MemoryHandle,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        label: str | None = None,
        folded: bool | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(memory, MemoryHandle):
            raise ConfigError(
                f"LaserStore takes a memory handle (laser.memory(...)), got {type(memory).__name__}"
            )
        # Checked here, as the other settings are: taken, a bad one was refused only at
        # the first read, as InvalidInput, after the store's first writes had gone in.
        if folded is not None and not isinstance(folded, bool):
            raise ConfigError(f"LaserStore folded is True, False or None, got {shown(folded)}")
        try:
            timeout = wait_seconds(timeout)
        except InvalidInput as exc:
            raise ConfigError(f"LaserStore {exc}") from None
        if label is not None:
            if not isinstance(label, str):
                raise ConfigError(f"LaserStore label is a str, got {shown(label)}")
            label = str.__str__(label)  # a subclass: the text it holds, as for names
        self._memory = memory
        self._folded = folded
        self._timeout = timeout
        self.ttl_config = ttl
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()
        # Receipts of this store's writes not yet known to be in the view, by partition.
        self._unseen: dict[int, Appended] = {}
        # What the last listings of each key prefix read ("" for the whole store), the
        # most recently listed prefixes last.
        self._listings: dict[str, _Listing] = {}
        # The named key of each of this store's recent writes, by (partition, offset).
        self._own: dict[tuple[int, int], str] = {}
        self._sweeper: asyncio.Task | None = None
        #: What the sweeper's failed sweeps raised; a failed sweep does not end it.
        #: The latest failed sweeps (`Latest`: ``sweep_failures.total`` counts all).
        self.sweep_failures: Latest[Exception] = Latest()
        self._check_ttl_config(ttl)
        self.index_config: IndexConfig | None = None
        self._fields: list[str] = ["$"]
        self._documents: _LangChainEmbedder | None = None
        self._queries: _LangChainEmbedder | None = None
        if index is not None:
            self._configure_index(index, label)

    def __repr__(self) -> str:
        indexed = f", index={self._label!r}" if self._queries is not None else ""
        return f"LaserStore({self._memory!r}{indexed})"

    # -- configuration -------------------------------------------------------------

    @staticmethod
    def _check_ttl_config(ttl: TTLConfig | None) -> None:
        if ttl is None:
            return
        if not isinstance(ttl, Mapping):
            raise ConfigError(f"ttl is LangGraph's TTLConfig (a dict), got {shown(ttl)}")
        unknown = set(ttl) - {
            "refresh_on_read",
            "omit_expired",
            "default_ttl",
            "sweep_interval_minutes",
        }
        if unknown:
            raise ConfigError(f"ttl has unknown settings {sorted(unknown)}")
        for name in ("default_ttl", "sweep_interval_minutes"):
            value = ttl.get(name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= sys.float_info.max
            ):
                raise ConfigError(
                    f"ttl {name} is a finite number of minutes above 0, got {shown(value)}"
                )
        default = ttl.get("default_ttl")
        if default is not None and time.time() * 1000 + default * _MINUTE_MS >= 1 << 63:
            # Taken, it failed every put without a ttl of its own.
            raise ConfigError(
                f"ttl default_ttl {shown(default)} minutes ends past the year 292 million"
            )
        for name in ("refresh_on_read", "omit_expired"):
            value = ttl.get(name)
            if value is not None and not isinstance(value, bool):
                # "no" is a true value: read as one, it did what it said not to.
                raise ConfigError(f"ttl {name} is True or False, got {shown(value)}")

    def _configure_index(self, index: IndexConfig, label: str | None) -> None:
        if not isinstance(index, Mapping):
            raise ConfigError(f"index is LangGraph's IndexConfig (a dict), got {shown(index)}")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS:
            raise ConfigError(
                f"index dims is the vectors' length (1 to {MAX_DIMENSIONS}), got {shown(dims)}"
            )
        embed = index.get("embed")
        if embed is None:
            raise ConfigError("index needs embed: an Embeddings, a function, or a provider name")
        if not (isinstance(embed, Embedder | Embeddings | str) or callable(embed)):
            # LangGraph wraps anything as a function: taken, 5 failed every put.
            raise ConfigError(
                "index embed is an Embeddings, a function, a provider name or a laser-memory "
                f"Embedder, got {shown(embed)}"
            )
        given = index.get("fields") or ["$"]
        try:  # once, as a list: a generator checked by `all` was spent, and nothing indexed
            fields = None if isinstance(given, str) else list(given)
        except TypeError:
            fields = None  # a number: no list
        if fields is None or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"index fields is a list of JSON paths, got {shown(given)}")
        try:
            fields = _checked_paths(fields)
        except InvalidInput as exc:
            raise ConfigError(f"index fields: {exc}") from None
        if isinstance(embed, Embedder):
            if embed.dimensions != dims:
                raise ConfigError(
                    f"index dims is {dims} but the embedder {embed.label} makes "
                    f"{embed.dimensions}-d vectors"
                )
            embeddings: Embeddings = _LaserEmbeddings(embed)
        else:
            try:
                embeddings = ensure_embeddings(embed)
            except Exception as exc:
                raise ConfigError(f"index embed cannot be used: {exc}") from None
        name = label if label is not None else _label_of(embed, dims)
        if not is_label(name):
            raise ConfigError(
                f"label {shown(name)} is no '<provider>/<model>' of at most 255 bytes "
                "of Unicode text without NUL"
            )
        self.index_config = {**index, "fields": fields}
        self.embeddings = embeddings
        self._fields = list(fields)
        if isinstance(embeddings, _LaserEmbeddings):
            self._documents = self._queries = embeddings.embedder  # type: ignore[assignment]
        else:
            self._documents = _LangChainEmbedder(embeddings, name, dims, query=False)
            self._queries = _LangChainEmbedder(embeddings, name, dims, query=True)
        self._label = name
        self._dims = dims

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> LaserStore:
        self._bind_loop()
        interval = (self.ttl_config or {}).get("sweep_interval_minutes")
        # Entered again while its sweeper runs: a second sweeper would replace the
        # first, which nothing would then stop.
        if interval and self._sweeper is None:
            # Every sweep would fail into `sweep_failures`: refused once, here.
            try:
                self._memory._check_publish()
            except AccessDenied as exc:
                raise AccessDenied(
                    f"ttl sweep_interval_minutes asks for a sweeper, but a read-only store "
                    f"cannot sweep (leave it out of this store's ttl): {exc}"
                ) from None
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_every(interval))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_ttl_sweeper()

    async def _sweep_every(self, minutes: float) -> None:
        while True:
            await asyncio.sleep(minutes * 60)
            try:
                await self.sweep_ttl()
            except Exception as exc:  # a broker blip must not end the sweeping for good
                self.sweep_failures.keep(exc)

    async def stop_ttl_sweeper(self) -> bool:
        """Stop the sweeper ``async with`` started (with ``sweep_interval_minutes``);
        True if one was running. Safe to call twice."""
        task, self._sweeper = self._sweeper, None
        if task is None:
            return False
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # The sweeper's own end; but if this caller is being cancelled too, that
            # cancel is the caller's and must not be swallowed with the sweeper's.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        return True

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise ConfigError(
                "this LaserStore belongs to another event loop (that of its connection); "
                "use it there, or from other threads through its sync methods"
            )

    # -- the two entry points LangGraph calls ------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` on the store's event loop from another thread (see the class)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ConfigError(
                "LaserStore has no running event loop yet: create it (or enter it with "
                "'async with') inside the loop of its connection before sync calls"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise ConfigError(
                "a sync LaserStore call on its own event loop would deadlock; await the "
                "async twin instead (store.aput, store.aget, store.asearch, graph.ainvoke)"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: every read sees the store as it was before this batch's writes,
        and the writes (puts, deletes, TTL refreshes) go on the log as one batch."""
        self._bind_loop()
        if not isinstance(ops, Iterable):
            raise InvalidInput(f"abatch takes a list of store operations, got {shown(ops)}")
        ops = [_plain_op(op) for op in ops]
        for op in ops:
            if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
                raise InvalidInput(f"unknown store operation {type(op).__name__}")
            _check_namespace(op)
            try:
                validate_op_namespace(op)
            except InvalidNamespaceError as exc:
                raise InvalidStoreNamespace(str(exc)) from None
            if isinstance(op, SearchOp):
                if op.filter is not None and not isinstance(op.filter, dict):
                    raise InvalidInput(f"filter is a dict, got {type(op.filter).__name__}")
                if op.query is not None and not isinstance(op.query, str):
                    raise InvalidInput(f"query is a string, got {type(op.query).__name__}")
                # Text that is no valid Unicode matched nothing, as no value holds it: refused
                # as recall refuses it.
                query_text(op.query)
            if isinstance(op, GetOp | SearchOp) and not isinstance(op.refresh_ttl, bool):
                raise InvalidInput(f"refresh_ttl is True or False, got {shown(op.refresh_ttl)}")
            if isinstance(op, SearchOp):
                _check_filter(op.filter)
                self._check_page(op.limit, op.offset)
            elif isinstance(op, ListNamespacesOp):
                self._check_page(op.limit, op.offset)
        # Puts are checked (and embedded) before anything is read or written: a bad put
        # writes nothing of the batch.
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
        if puts:
            self._memory._check_publish()  # before any model is called or item read
        writes = await self._put_records(list(puts.values()))
        results: list[Result] = []
        refresh: dict[str, _Stored] = {}
        # A store that may not write reads without refreshing: a refresh is a write, and
        # its reads failed once an item's expiry was due to move (whenever that was).
        refreshing = self._may_write()
        if any(not isinstance(op, PutOp) for op in ops):
            await self._caught_up()
            now = self._memory._laser.clock.now_ms()
            listing: list[_Stored] | None = None
            for op in ops:
                if isinstance(op, PutOp):
                    results.append(None)
                elif isinstance(op, GetOp):
                    stored = await self._get(op, now)
                    if stored is not None and op.refresh_ttl and refreshing:
                        refresh[stored.named.key] = stored
                    results.append(stored.to_item() if stored is not None else None)
                elif isinstance(op, SearchOp):
                    # Only the items under the searched namespace are read.
                    prefix = _prefix_key(tuple(op.namespace_prefix))
                    found = await self._search(op, await self._listed(prefix), now)
                    if op.refresh_ttl and refreshing:
                        refresh.update((s.named.key, s) for s, _ in found)
                    results.append([s.to_item(score, searched=True) for s, score in found])
                else:
                    if listing is None:
                        listing = await self._listing("", now)
                    results.append(self._namespaces(op, listing))
        else:
            results = [None] * len(ops)
        await self._write([*self._refreshes(refresh.values(), puts), *writes])
        return results

    def _may_write(self) -> bool:
        """Whether the handle's principal may publish to its topic (no principal: yes)."""
        principal = self._memory.principal
        return principal is None or principal.may_publish(self._memory.topic)

    @staticmethod
    def _check_page(limit: Any, offset: Any) -> None:
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{name} is a whole number, 0 or more, got {shown(value)}")

    # -- writes ------------------------------------------------------------------------

    async def _put_records(self, puts: list[PutOp]) -> list[NamedSet | NamedRemove]:
        memory = self._memory
        now = memory._laser.clock.now_ms()
        records: list[NamedSet | NamedRemove] = []
        texts: list[str] = []
        spans: list[tuple[int, int]] = []
        bodies: list[tuple[PutOp, str, bytes, tuple[str, ...]]] = []
        for op in puts:
            name = self._name(op.namespace, op.key)
            if op.value is None:
                bodies.append((op, name, b"", ()))
                continue
            if not isinstance(op.value, Mapping):
                raise InvalidBody(
                    f"a store value is a JSON object (a dict), got {type(op.value).__name__}"
                )
            value = dict(op.value)
            envelope: dict[str, Any] = {"value": value}
            if op.ttl is not None:
                if (
                    isinstance(op.ttl, bool)
                    or not isinstance(op.ttl, int | float)
                    # Compared, not converted: an int past float's range raised.
                    or not 0 < op.ttl <= sys.float_info.max
                ):
                    raise InvalidInput(f"ttl is a number of minutes above 0, got {shown(op.ttl)}")
                envelope["ttl"] = op.ttl
                envelope["expires_at"] = now + round(op.ttl * _MINUTE_MS)
                if envelope["expires_at"] >= 1 << 63:
                    raise InvalidInput(
                        f"ttl {shown(op.ttl)} minutes ends past the year 292 million"
                    )
            body = memory._check_body(
                dump_json(envelope, "the store value", most=MAX_JSON_DEPTH - 1)
            )
            # The value sits one level down in the stored object: what a fold cannot
            # parse back is refused here, never stored unreadable.
            if json_too_deep(body):
                raise InvalidBody(
                    f"the store value nests {json_depth(body) - 1} levels deep; at most "
                    f"{MAX_JSON_DEPTH - 1} are allowed"
                )
            paths = self._paths(op)
            start = len(texts)
            if self._documents is not None:
                # The texts the stored JSON holds: a str subclass as its text (JSON
                # stores that, not what its own __str__ says). A value too deep to walk
                # was refused above (its JSON could not be written).
                plain = _plain(value)
                for path in paths:
                    try:
                        texts.extend(_texts_at(plain, path))
                    except Exception as exc:  # the value's own __str__, the caller's code
                        raise InvalidBody(
                            f"the text at {shown(path)} of the value put at key "
                            f"{shown(op.key)} cannot be read: {type(exc).__name__}: {exc}; "
                            "nothing of the batch was written"
                        ) from None
                size = (len(texts) - start) * self._dims * 4
                if size > MAX_NAMED_VECTOR_BYTES:
                    # Written, every fold set it aside (with a log and config taking
                    # records this large): the item read as never put.
                    raise InvalidBody(
                        f"the value put at key {shown(op.key)} has {len(texts) - start} "
                        f"texts to index, whose vectors would take {size} bytes; one item "
                        f"carries at most {MAX_NAMED_VECTOR_BYTES}: index fewer or shorter "
                        "lists; nothing of the batch was written"
                    )
            spans.append((start, len(texts)))
            bodies.append((op, name, body, paths))
        vectors = (
            await embed_texts(self._documents, texts)
            if texts and self._documents is not None
            else np.zeros((0, 0), dtype=np.float32)
        )
        scope = memory._scope()
        spans_iter = iter(spans)
        for op, name, body, paths in bodies:
            if op.value is None:
                records.append(NamedRemove(ns=memory.namespace, scope=scope, key=name))
                continue
            start, end = next(spans_iter)
            rows = vectors[start:end]
            records.append(
                NamedSet(
                    ns=memory.namespace,
                    scope=scope,
                    key=name,
                    body=body,
                    index=paths,
                    vectors=rows.astype("<f4").tobytes() if len(rows) else None,
                    embedder=self._label if len(rows) else None,
                )
            )
        return records

    def _paths(self, op: PutOp) -> tuple[str, ...]:
        if op.index is False:
            return ()
        if op.index is None:
            return tuple(self._fields)
        if not isinstance(op.index, list | tuple) or not all(
            isinstance(p, str) and p for p in op.index
        ):
            raise InvalidInput(f"index is False or a list of JSON paths, got {shown(op.index)}")
        return tuple(_checked_paths(op.index))

    def _name(self, namespace: tuple[str, ...], key: Any) -> str:
        if not namespace:
            raise InvalidName("a store namespace has at least one label")
        if not isinstance(key, str):
            raise InvalidName(f"a store key is a string, got {type(key).__name__}")
        try:
            return validate_key(_item_key(tuple(namespace), key))
        except InvalidName as exc:
            raise InvalidName(
                f"namespace {shown(tuple(namespace))} with key {shown(key[:80])} cannot be "
                f"stored: {exc}"
            ) from None

    def _refreshes(
        self, found: Iterable[_Stored], puts: Mapping[tuple[tuple[str, ...], str], PutOp]
    ) -> list[NamedPatch]:
        """A patch of ``expires_at`` per item read that has a ttl (not those this batch
        puts anew: the put sets its own expiry). A read that would move the expiry by
        less than 1% of the ttl (and under a minute) writes nothing: reads in quick
        succession do not each add a record to the log."""
        memory = self._memory
        now = memory._laser.clock.now_ms()
        out = []
        for stored in found:
            if stored.ttl is None or (stored.namespace, stored.key) in puts:
                continue
            ttl_ms = round(stored.ttl * _MINUTE_MS)
            expires = now + ttl_ms
            if isinstance(stored.expires_at, int) and expires - stored.expires_at < min(
                ttl_ms // 100, _MINUTE_MS
            ):
                continue
            patch = dump_json({"expires_at": expires})
            out.append(
                NamedPatch(
                    ns=memory.namespace, scope=memory._scope(), key=stored.named.key, patch=patch
                )
            )
        return out

    async def _write(self, records: Sequence[NamedSet | NamedRemove | NamedPatch]) -> None:
        if not records:
            return
        receipts = await self._memory._write(records)
        if len(self._own) + len(receipts) > _OWN_KEPT:
            self._own.clear()  # a listing older than these is read again
        for record, receipt in zip(records, receipts, strict=True):
            self._unseen[receipt.partition] = receipt
            self._own[(receipt.partition, receipt.offset)] = record.key

    async def sweep_ttl(self) -> int:
        """Remove every item whose TTL has passed; the number removed. Each remove is
        conditional on the version read, so a put or refresh that lands first wins."""
        self._bind_loop()
        self._memory._check_publish()  # refused whether or not anything has expired yet
        await self._caught_up()
        now = self._memory._laser.clock.now_ms()
        memory = self._memory
        expired = [
            s
            for s in await self._listing("", None)
            if s.expires_at is not None and s.expires_at <= now
        ]
        await self._write(
            [
                NamedRemove(
                    ns=memory.namespace,
                    scope=memory._scope(),
                    key=s.named.key,
                    if_version=s.named.version,
                )
                for s in expired
            ]
        )
        return len(expired)

    # -- reads -------------------------------------------------------------------------

    async def _caught_up(self) -> None:
        """Wait until the managed view shows this store's writes (read your writes);
        the in-process fold reads to the end of the log anyway."""
        if not self._managed():
            self._unseen.clear()
            return
        memory = self._memory
        for partition, receipt in list(self._unseen.items()):
            await memory._laser.view_after(memory.topic, receipt, self._timeout)
            if self._unseen.get(partition) is receipt:
                del self._unseen[partition]

    def _managed(self) -> bool:
        return self._memory._managed(self._folded)

    def _alive(self, stored: _Stored | None, now: int | None) -> bool:
        if stored is None:
            return False
        if now is None or not (self.ttl_config or {}).get("omit_expired"):
            return True
        return stored.expires_at is None or stored.expires_at > now

    async def _get(self, op: GetOp, now: int) -> _Stored | None:
        name = self._name(op.namespace, op.key)
        named = await self._memory.fetch(name, folded=not self._managed(), timeout=self._timeout)
        stored = _read(named) if named is not None else None
        return stored if self._alive(stored, now) else None

    async def _listing(self, prefix: str, now: int | None) -> list[_Stored]:
        """The store's items whose named key starts with ``prefix`` (a namespace's
        `_prefix_key`, or "" for all), alive at ``now`` (None: all), newest first."""
        return [s for s in (await self._listed(prefix)).newest if self._alive(s, now)]

    async def _listed(self, prefix: str) -> _Listing:
        """Every item under ``prefix``, from the last listing of it while nothing was
        folded since (the handle's read token is the same), else read again."""
        folded = not self._managed()
        # The token first: the listing read after it is as new as it or newer.
        token = await self._memory._read_token(folded=folded, timeout=self._timeout)
        listing = self._listings.pop(prefix, None)
        if listing is not None and listing.token != token:
            keys = await self._changed_since(listing.token, token, len(listing.newest))
            if keys is not None:
                await self._patched(listing, prefix, keys, folded)
                listing.token = token
        if listing is None or listing.token != token:
            named = await self._memory.named(prefix, folded=folded, timeout=self._timeout)
            # Items read before and unchanged since are not parsed again, nor their
            # terms counted.
            parsed = {s.named.key: s for s in listing.newest} if listing is not None else {}
            newest = []
            for one in named:
                stored = parsed.get(one.key)
                if stored is None or stored.version != (
                    one.version,
                    one.append_time_ms,
                    one.source.partition,
                    one.source.offset,
                ):
                    stored = _read(one)
                elif stored.released:
                    # Its vectors went with the old listing: the record read now has them.
                    stored.named, stored.released = one, False
                if stored is not None:
                    newest.append(stored)
            newest.sort(
                key=lambda s: (
                    s.named.append_time_ms, s.named.source.partition, s.named.source.offset
                ),
                reverse=True,
            )  # fmt: skip
            listing = _Listing(token, newest)
        self._listings[prefix] = listing
        if len(self._listings) > _LISTINGS_KEPT:
            del self._listings[next(iter(self._listings))]  # the least recently listed
        return listing

    async def _changed_since(self, before: tuple, after: tuple, items: int) -> set[str] | None:
        """The named keys of this namespace written between two read tokens of the same
        view or fold (gone on only by records), if few enough were written; else None.
        This store's own writes are known by their receipts; for anyone else's the
        records are read from the log, when the listing holds `_FOREIGN_LISTING_LEAST`
        ``items`` or more and there are at most `_FOREIGN_READ_LEAST` of them or a tenth
        of its items (reading 100k items again after every write of another store took
        half a second)."""
        if before[0] not in ("view", "fold") or before[:-1] != after[:-1]:
            return None
        start, end = dict(before[-1]), dict(after[-1])
        if not start.keys() <= end.keys() or any(end[p] < o for p, o in start.items()):
            return None  # not the same positions gone on (a view rebuilt meanwhile)
        keys: set[str] = set()
        # Each partition's first record this store did not write: the log is read from
        # there (its own records after it come along, and are known anyway).
        foreign: dict[int, int] = {}
        for partition, last in end.items():
            for offset in range(start.get(partition, 0), last):
                key = self._own.get((partition, offset))
                if key is None:
                    foreign[partition] = offset
                    break
                keys.add(key)
                if len(keys) > _PATCHED_MOST:
                    return None
        if foreign and (
            items < _FOREIGN_LISTING_LEAST
            or sum(end[p] - first for p, first in foreign.items())
            > max(_FOREIGN_READ_LEAST, items // 10)
        ):
            return None
        if foreign and not await self._foreign_keys(foreign, end, keys):
            return None
        return keys if len(keys) <= _PATCHED_MOST else None

    async def _foreign_keys(
        self, first: dict[int, int], end: dict[int, int], keys: set[str]
    ) -> bool:
        """Add to ``keys`` the named keys of this namespace that the records from
        ``first`` to ``end`` of each partition set, patch or remove. False if the log
        no longer holds all of them (retention took some, or a broker's offsets skip
        some), or cannot give them within `_FOREIGN_READ_S`: what they changed is
        unknown then."""
        namespace = self._memory.namespace
        read = {p: 0 for p in first}
        try:
            # Read to the end (a bounded range) rather than left part read: a read
            # left open holds its consumer until collected.
            async with asyncio.timeout(_FOREIGN_READ_S):
                async for batch in self._log_records(first, end):
                    self._take_keys(batch, namespace, read, keys)
        except (LaserError, TimeoutError):
            # A reader of the managed view needs no broker: one it cannot reach (or
            # not soon) costs it the namespace read again, never a failed search.
            return False
        return all(read[p] == end[p] - first[p] for p in first)

    @staticmethod
    def _take_keys(
        batch: Sequence[LogRecord], namespace: str, read: dict[int, int], keys: set[str]
    ) -> None:
        """Count ``batch``'s records by partition in ``read``; add to ``keys`` the key of
        each named record of ``namespace`` among them that a fold would fold."""
        for log_record in batch:
            read[log_record.partition] += 1
            try:
                record = decode_for_fold(log_record)
            except LaserError:
                continue  # set aside by the fold: it changed nothing
            if type(record) in NAMED_RECORDS and record.ns == namespace:
                keys.add(record.key)

    def _log_records(
        self, first: dict[int, int], end: dict[int, int]
    ) -> AsyncIterator[list[LogRecord]]:
        """The memory topic's records from ``first`` to ``end`` of each partition."""
        memory = self._memory
        return memory._laser.log.read(
            memory.topic, first, partitions=sorted(first), until={p: end[p] for p in first}
        )

    async def _patched(self, listing: _Listing, prefix: str, keys: set[str], folded: bool) -> None:
        """Bring a kept listing up to date with the writes of ``keys`` folded since:
        each key's item as it is now, in place of the one the listing holds."""
        for key in sorted(keys):
            if not key.startswith(prefix):
                continue
            named = await self._memory.fetch(key, folded=folded, timeout=self._timeout)
            new = _read(named) if named is not None else None
            old = listing.stored(key)
            if old is not None and new is not None and old.version == new.version:
                continue
            listing.replace(old, new)

    async def _search(
        self, op: SearchOp, listing: _Listing, now: int
    ) -> list[tuple[_Stored, float | None]]:
        """``op`` over ``listing``, the items under its namespace (`_listed` of its
        `_prefix_key`), as they are at ``now``."""
        newest = listing.newest
        # The rows of ``newest`` searched, ascending: None for all of them.
        keep = None
        if (self.ttl_config or {}).get("omit_expired"):
            keep = np.fromiter((self._alive(s, now) for s in newest), dtype=bool, count=len(newest))
        others = []
        for k, v in (op.filter or {}).items():
            if type(v) in _PLAIN:
                # From the listing's column of the field.
                equal = listing.equal_to(k, v)
                keep = equal if keep is None else keep & equal
            else:
                others.append((k, v))  # operators, objects, lists: item by item, below
        picked = None if keep is None else np.flatnonzero(keep)
        if others:
            picked = np.array(
                [
                    row
                    for row in (range(len(newest)) if picked is None else picked.tolist())
                    if all(_matches(newest[row].value.get(k), v) for k, v in others)
                ],
                dtype=np.int64,
            )
        if picked is not None and len(picked) == len(newest):
            picked = None
        candidates = newest if picked is None else [newest[row] for row in picked.tolist()]
        # Newest first (the order without a query, and among equal scores), as the
        # listing is.
        wanted = op.offset + op.limit
        if not (op.query and op.query.strip()) or not candidates:
            return [(s, None) for s in candidates[op.offset : wanted]]
        ranked = await self._rank(op.query, candidates, wanted, listing, picked)
        if len(ranked) >= wanted:
            return ranked[op.offset : wanted]
        chosen = {id(s) for s, _ in ranked}
        # Items the query scores nothing for (not indexed, no shared word, no vector of
        # this model) follow, newest first, so a search never returns fewer items than
        # the namespace holds.
        rest = [(s, None) for s in candidates if id(s) not in chosen]
        return [*ranked, *rest][op.offset : wanted]

    async def _rank(
        self,
        query: str,
        candidates: list[_Stored],
        limit: int,
        listing: _Listing,
        picked: np.ndarray | None,
    ) -> list[tuple[_Stored, float]]:
        """``candidates`` ranked for ``query``: the items of ``listing`` at rows
        ``picked`` (None: all of them). All of them, or a share of them at least
        1/`_SHARED_COLUMNS_FROM`, are ranked from the listing's prepared columns, cut to
        the rows; fewer, from columns made of them alone. The same numbers either way:
        a filter keeping half of 100k items took 25 times an unfiltered search, its
        terms counted and its vectors stacked anew each time."""
        query_terms = terms(query)
        whole = cut = None
        if self._ranks_from_listing(listing, picked):
            whole = listing
            cut = picked
        if whole is not None:
            keyword = whole.bm25(query_terms, cut)
        else:
            documents = [s.counts() for s in candidates]
            keyword = bm25(query_terms, documents, TermStatistics.of(documents, query_terms))
        semantic = has_vector = None
        if self._queries is not None:
            q = (await embed_texts(self._queries, [query], then="nothing was searched"))[0]
            semantic = np.zeros(len(candidates), dtype=np.float64)
            has_vector = np.zeros(len(candidates), dtype=bool)
            if whole is not None:
                semantic, has_vector = whole.vectors(self._label, self._dims).similar(
                    q, len(whole.newest)
                )
                if cut is not None:
                    semantic, has_vector = semantic[cut], has_vector[cut]
            elif picked is not None and (
                kept := listing.semantic.get((self._label, self._dims))
            ) is not None:
                # The listing holds its items' vectors (and they no longer do).
                semantic, has_vector = kept.similar_among(
                    q, picked, len(listing.newest)
                )
            else:
                rows, stacked, norms, starts = _stacked(candidates, self._label, self._dims)
                if rows:
                    # One product over every row; an item is as near as its nearest text.
                    similar = cosine_similarities(q, stacked, norms)
                    semantic[rows] = np.maximum.reduceat(similar, starts)
                    has_vector[rows] = True
        n = len(candidates)
        time, partition, offset = (
            whole.columns_of_times() if whole is not None else _times(candidates)
        )
        if cut is not None:
            time, partition, offset = time[cut], partition[cut], offset[cut]
        columns = Columns(
            keyword=keyword,
            semantic=semantic,
            has_vector=has_vector,
            weight=np.zeros(n),
            time=time,
            partition=partition,
            offset=offset,
            before=np.full(n, -1, dtype=np.int64),
            after=np.full(n, -1, dtype=np.int64),
            alive=np.ones(n, dtype=bool),
            allowed=np.ones(n, dtype=bool),
        )
        ranked = rank_by_text(
            columns, hybrid=semantic is not None, min_similarity=None, limit=limit
        )
        return [(candidates[r.row], r.score) for r in ranked]

    @staticmethod
    def _ranks_from_listing(listing: _Listing, picked: np.ndarray | None) -> bool:
        """Whether a search of ``listing``'s items at rows ``picked`` ranks them from
        the listing's columns (see `_rank`)."""
        return picked is None or len(picked) * _SHARED_COLUMNS_FROM >= len(listing.newest)

    @staticmethod
    def _namespaces(op: ListNamespacesOp, listing: list[_Stored]) -> list[tuple[str, ...]]:
        found = {s.namespace for s in listing}
        for condition in op.match_conditions or ():
            found = {ns for ns in found if _namespace_matches(condition, ns)}
        if op.max_depth is not None:
            if (
                isinstance(op.max_depth, bool)
                or not isinstance(op.max_depth, int)
                or op.max_depth < 1
            ):
                raise InvalidInput(
                    f"max_depth is a whole number above 0, got {shown(op.max_depth)}"
                )
            found = {ns[: op.max_depth] for ns in found}
        return sorted(found)[op.offset : op.offset + op.limit]

    def __del__(self) -> None:
        sweeper = getattr(self, "_sweeper", None)
        if sweeper is not None and not sweeper.done():
            warnings.warn(
                "LaserStore was not closed: its TTL sweeper was still running; use "
                "'async with LaserStore(...)'",
                ResourceWarning,
                stacklevel=1,
            )


def _plain_arguments(
    name: str, args: tuple, kwargs: dict[str, Any]
) -> tuple[tuple, dict[str, Any]]:
    """The arguments of a convenience method (``aput``...) with plain text (`_plain`):
    LangGraph checks its namespace before `abatch` sees it. A put's value (its third
    argument) is left as it is."""
    value = "put" in name
    try:
        plain_args = tuple(a if value and i == 2 else _plain(a) for i, a in enumerate(args))
        plain_kwargs = {k: v if k == "value" else _plain(v) for k, v in kwargs.items()}
    except RecursionError:  # nested too deeply to walk: as given, for the checks after
        return args, kwargs
    return plain_args, plain_kwargs


#: The arguments of LangGraph's convenience methods that name a namespace.
_NAMESPACE_ARGUMENTS = ("namespace", "namespace_prefix", "prefix", "suffix")


def _check_namespace_shapes(name: str, args: tuple, kwargs: dict[str, Any]) -> None:
    """Refuse a namespace argument that is no tuple (or list) of labels before LangGraph's
    own checks meet it: they iterate it (an int raised TypeError), index it (a dict raised
    KeyError) or test its truth (an array raised numpy's ValueError)."""
    given = [(key, kwargs[key]) for key in _NAMESPACE_ARGUMENTS if key in kwargs]
    if args and "list_namespaces" not in name:
        given.append(("namespace", args[0]))
    for key, value in given:
        if value is None and key in ("prefix", "suffix"):
            continue
        if not isinstance(value, tuple | list):
            raise InvalidStoreNamespace(
                f"{key} is a tuple of strings such as ('users', 'u1'), got {shown(value)}"
            )


def _namespace_refusals_as_laser_errors(name: str) -> Any:
    """``BaseStore.<name>``, its `InvalidNamespaceError` raised as `InvalidStoreNamespace`:
    LangGraph's convenience methods check the namespace before they reach `abatch`."""
    method = getattr(BaseStore, name)
    if asyncio.iscoroutinefunction(method):

        async def refusing(self: LaserStore, *args: Any, **kwargs: Any) -> Any:
            args, kwargs = _plain_arguments(name, args, kwargs)
            _check_namespace_shapes(name, args, kwargs)
            try:
                return await method(self, *args, **kwargs)
            except InvalidNamespaceError as exc:
                raise InvalidStoreNamespace(str(exc)) from None

    else:

        def refusing(self: LaserStore, *args: Any, **kwargs: Any) -> Any:
            args, kwargs = _plain_arguments(name, args, kwargs)
            _check_namespace_shapes(name, args, kwargs)
            try:
                return method(self, *args, **kwargs)
            except InvalidNamespaceError as exc:
                raise InvalidStoreNamespace(str(exc)) from None

    return functools.wraps(method)(refusing)


for _name in ("get", "search", "put", "delete", "list_namespaces"):
    for _method in (_name, "a" + _name):
        setattr(LaserStore, _method, _namespace_refusals_as_laser_errors(_method))
del _name, _method
