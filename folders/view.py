"""The managed view: the fold of one memory topic, kept in LMDB, shared by readers.

A folder (`folders.service.ViewFolder`) is the only writer. Each of its write
transactions stores the folded changes of a batch **and** the per-partition
positions the batch came from, so whatever instant the folder dies at, the
view holds exactly the records up to its positions and a restarted folder
resumes from them. Readers in any process open the same folder and read in
short read transactions: no lock is held across an ``await``.

Databases in the environment (``\\0`` separates names, which can never hold
it; ``id`` is 16 bytes; ``inv(k)`` is a position key ``(append time,
partition, offset)`` inverted so that ascending byte order is newest first).
Every part of a key that comes from user data (tenant, namespace, named key,
index tag, word) is written as `_part`: as itself up to 64 bytes, else as
``\\x01`` and a 16-byte BLAKE2b digest, so no input can make a key longer than
LMDB's 511-byte limit, and lookups, which are all exact, work the same:

============  =============================================  ==================
database      key                                            value
============  =============================================  ==================
meta          ``format``, ``topic``, ``generation``,          text / offsets
              ``pos`` + partition
items         tenant ``\\0`` ns ``\\0`` id                      `ItemState`
named         tenant ``\\0`` ns ``\\0`` key                     `NamedState`
versions      tenant ``\\0`` ns ``\\0`` key ``\\0`` version     `HistoryEntry`
audit         tenant ``\\0`` ns ``\\0`` id + inv-free position  `HistoryEntry` of every
                                                             record of the item but
                                                             the remembers its
                                                             `ItemState` keeps
aside         partition + offset                             `SetAside`
index         see below                                      owner of the entry
changes       sequence number (8 bytes, ascending)           items keys
============  =============================================  ==================

``changes`` lists the items each write transaction changed: one row a
transaction, its value the items' keys (a msgpack list), its key the count of
item changes up to and including it, kept in meta ``seq`` (with a random
``epoch`` that a rebuild renews). A reader that has seen the changes up to
``seq`` reads the rows after it: its search indexes catch up from them instead
of reading every item again. It is a notification log, not state, so
`MemoryView.dump` leaves it out.

``format`` is `VIEW_FORMAT`: a view written in another format is refused with
`ViewMismatch` (rebuild it), never misread.

Indexes (all per tenant and namespace, over *live* remembers, so an item
remembered in two conversations has an entry for each):

- ``R`` newest last (read backwards): tags ``c:<conversation>``, ``a:<agent>``,
  ``u:<user>``, ``p:<application>``, ``k:<kind code>``; key ends with ``k + id``,
  ``k`` big-endian. Filters by conversation, agent, user, application and kind
  are index-backed: a read walks the narrowest index that applies and checks
  the other filters on each entry, stopping once it has ``limit`` items. A read
  with no filter merges the ``k:`` tags (every item is under its kind, and there
  are six kinds): an ``*`` tag of all items cost the fold a fourth of its puts.
- ``F`` feedback-ranked: the same tags as ``R``, then the weight inverted
  (highest first), then ``inv(k) + id`` (``k + id`` under ``c:``); only items
  whose weight is not zero; the value is the owner (empty for an item of
  several owners). ``auto`` recall takes positive weights from here, zero weights
  from ``R`` and negative weights from here again, so its cost grows with the
  limit, not with the namespace.
- ``I`` irregular items (a typed append reused an id with another owner or
  kind): with such items present, a read with owner filters ranks every
  entry of its narrowest index, to stay exact.
- ``X`` items with feedback and a remember that expires: the moment the first of
  those remembers expires (8 bytes) ``+ id``. The fold counts an expiring remember
  as live, so once one expires such an item's ``F`` entries may hold a weight
  and a newest remember the read no longer sees (or it has none, its weights
  having cancelled out): an ``auto`` recall loads the ones due by its moment
  itself and ranks them with the rest. (An item's ``R`` entry of a remember that
  expired is passed over: the item is met again at the entry of its newest
  remember the read sees.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import heapq
import itertools
import os
import struct
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import lmdb
import msgspec
import numpy as np

from laser_memory.doorkeeper import Doorkeeper, cached_when_repeated
from laser_memory.errors import (
    InvalidInput,
    InvalidName,
    LogClosed,
    LogUnavailable,
    NoView,
    ViewFull,
    ViewMismatch,
    shown,
)
from laser_memory.items import HistoryEntry, MemoryItem, NamedItem, PreparedSearch
from laser_memory.kinds import MemoryKind
from laser_memory.lmdb_env import (
    SharedEnvironments,
    StaleReaders,
    check_map_size,
    folder_path,
    open_failure,
    real_folder,
    write_failure,
)
from laser_memory.log.port import LogRecord, Position
from laser_memory.named import validate_version
from laser_memory.recall import (
    query_text,
    rank,
    search_mode,
    validate_limit,
    validate_strategy,
    with_ranking,
)
from laser_memory.records import NAMED_RECORDS, Remember, decode_record
from laser_memory.search_index import CACHE_BYTES, SearchIndex
from laser_memory.terms import forget_stems
from laser_memory.vector_clusters import ApproximateSearch

from .heap import give_back_after_search, give_back_freed_memory
from .index_build import (
    BUILD_APART_FROM,
    BuildRequest,
    build_apart,
    build_apart_async,
    can_build_apart,
)
from .index_snapshots import SNAPSHOTS_FROM, IndexSnapshots
from .recency import TAIL, RecencyWriter, entries_of_run, holds_at_least, newest_first
from .state import (
    _NO_CONVERSATION,
    MAX_SEARCH_INDEXES,
    ItemFilter,
    ItemState,
    KeptRemember,
    NamedState,
    SetAside,
    SortKey,
    _conv,
    _reason,
    apply_named,
    check_owner_headers,
    checked_for_fold,
    history_entry,
    index_entry,
    kept,
    missing_records,
    named_unchanged,
    remembered_entry,
    source_of,
)

__all__ = ["VIEW_FORMAT", "MemoryView", "SearchSnapshot", "ViewStats"]

#: The layout of the databases below; bumped whenever a key or value changes shape.
VIEW_FORMAT = 10

_DBS = ("meta", "items", "named", "versions", "audit", "aside", "index", "changes")
# Keys of meta that say how a folder got here, not what the view holds.
_RUN_META = (b"seq", b"epoch")
_SEP = b"\x00"
_RECENT = ord("R")  # the first byte of the newest-first index's keys
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1

_item_decoder = msgspec.msgpack.Decoder(ItemState[KeptRemember])
_named_decoder = msgspec.msgpack.Decoder(NamedState)
_history_decoder = msgspec.msgpack.Decoder(HistoryEntry)
_version_decoder = msgspec.msgpack.Decoder(tuple[NamedState, HistoryEntry])
_aside_decoder = msgspec.msgpack.Decoder(SetAside)
_keys_decoder = msgspec.msgpack.Decoder(list[bytes])
_owner_decoder = msgspec.msgpack.Decoder(tuple[str, str | None, str | None, str | None, int])
# Sorted maps, so the same state is the same bytes whatever order a folder met it in.
_encoder = msgspec.msgpack.Encoder(order="sorted")
# For a new item's state, whose only map is its one conversation and whose structs
# (scope, lineage) have fixed fields: the same bytes for the same record without
# sorting, which cost a third of its encoding.
_new_state_encoder = msgspec.msgpack.Encoder()


class ViewStats(msgspec.Struct, frozen=True, kw_only=True):
    """What ``laser-memory stats`` shows."""

    path: str
    topic: str | None
    generation: str | None
    watermark: dict[int, int]
    items: int
    named_items: int
    set_aside: int
    set_aside_records: list[SetAside]


class SearchSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A search index snapshot beside a view (``laser-memory stats`` lists them): the
    read it serves, the view change it reflects, and how many changes the view has made
    since (None: it is of an earlier view, made before a rebuild, or of changes a view
    restored from an older copy no longer holds, and no reader uses it; ``laser-memory
    index`` makes it again)."""

    tenant: str
    namespace: str
    conversation: str | None
    embedder: str | None
    superseded: bool
    changes: int
    behind: int | None


def _inv_key(key: SortKey) -> bytes:
    t, p, o = key
    return (
        (_U64 - t).to_bytes(8, "big")
        + (_U32 - p).to_bytes(4, "big")
        + (_U64 - o).to_bytes(8, "big")
    )


_KEY_BYTES = struct.Struct(">QIQ").pack


def new_item_state(conversation: str, key: SortKey, remembered: KeptRemember | tuple) -> bytes:
    """The stored bytes of the state of an item remembered once, which decode to
    ``ItemState(remembers={conversation: Remembered(key, remembered)}, version=1,
    last=key)``: the array that encodes to, less the empty fields after ``last`` and
    the source (a shorter array decodes with its missing fields at their defaults).
    ``remembered`` may be the tuple of the `KeptRemember`'s fields, which encodes as
    the array-like struct does. Making the structs only to encode them was a tenth of
    a new item's fold."""
    return _new_state_encoder.encode(({conversation: (key, remembered)}, 1, key))


#: The fields of a `KeptRemember` in the order its array holds them; a new item's state
#: is written field by field in this order (``new_item_parts``).
_KEPT_ORDER = (
    "id", "kind", "body", "ns", "v", "scope", "lifetime", "origin", "producer",
    "embedding", "embedder", "expires_at", "supersedes",
)  # fmt: skip


class NewItemParts(NamedTuple):
    """The encoded pieces of a new item's state that every remember of one owner (scope,
    namespace, kind) shares, as raw msgpack: the fold encodes a new item's state as the
    tuple ``(head, key, fields, id, kind, body, ns, v, scope, lifetime, origin,
    producer, embedding, embedder, expires_at, supersedes, tail, key)`` and drops that
    tuple's own array header, which makes the bytes of `new_item_state`. Encoding
    the scope and the conversation once an owner rather than once a record saved two
    fifths of encoding a new item's state."""

    head: msgspec.Raw
    fields: msgspec.Raw
    ns: msgspec.Raw
    scope: msgspec.Raw
    tail: msgspec.Raw


def new_item_parts(conversation: str, record: Remember) -> NewItemParts:
    """The shared pieces of the states of the new items of ``record``'s owner (see
    `NewItemParts`)."""
    encode = _new_state_encoder.encode
    # Positional, the pieces that are the same for every owner made once: an owner met
    # once (a conversation of one item) made them all afresh, at 2.4 us an owner.
    return NewItemParts(
        # The state's array of three, its map of one conversation, that entry's pair.
        msgspec.Raw(b"\x93\x81" + encode(conversation) + b"\x92"),
        _KEPT_FIELDS,
        _namespace_raw(record.ns),
        msgspec.Raw(encode(record.scope)),
        _VERSION_ONE,
    )


#: The array header of a kept remember's fields (`NewItemParts.fields`).
_KEPT_FIELDS = msgspec.Raw(bytes((0x90 | len(_KEPT_ORDER),)))
#: A new item's state's version, after its kept remember (`NewItemParts.tail`).
_VERSION_ONE = msgspec.Raw(_new_state_encoder.encode(1))


@functools.lru_cache(maxsize=1 << 10)  # a fold meets a few namespaces
def _namespace_raw(namespace: str) -> msgspec.Raw:
    return msgspec.Raw(_new_state_encoder.encode(namespace))


#: The bytes of the array header of the fold's 18-element state tuple (see
#: `NewItemParts`), which the state's bytes leave out.
_SHAPED_HEADER = len(_new_state_encoder.encode((None,) * 18)) - 18

_decoded_state = _item_decoder.decode


def _key_bytes(key: SortKey) -> bytes:
    return _KEY_BYTES(*key)


def _inv_weight(weight: float) -> bytes:
    """Bytes that sort by descending weight."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", weight))
    ascending = bits ^ _U64 if bits >> 63 else bits | (1 << 63)
    return (_U64 - ascending).to_bytes(8, "big")


def _weight_of(inverted: bytes) -> float:
    ascending = _U64 - int.from_bytes(inverted, "big")
    bits = ascending & ~(1 << 63) if ascending >> 63 else ascending ^ _U64
    return struct.unpack(">d", struct.pack(">Q", bits))[0]


_MAX_PART = 64
_HASHED = b"\x01"  # never starts a name or a word, so a digest never meets a plain part
# Once the views' ``_owners`` overflow, owners are kept from their second remember on: an
# owner met once (a conversation of one item) made an entry no record used, and the
# collector walked them all (see `laser_memory.doorkeeper`).
_OWNERS_MET = Doorkeeper()


def _uncached_part(text: str) -> bytes:
    """A key part from user data, bounded: itself when short, else a digest of it."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= _MAX_PART:
        return raw
    return _HASHED + hashlib.blake2b(raw, digest_size=16).digest()


# The caches of key parts below keep what comes again: a tenant's, a tag's, an owner's.
# Tenants by the ten thousand each come again; past what a cache holds, or met once (a
# hundred thousand tenants of an item each), an entry was only memory the garbage
# collector walked at each full collection: such a fold ran at 31k records/s, 42k with
# caches of 16 entries (`cached_when_repeated`, once full, keeps only what comes again).

#: `_uncached_part`, cached: names and tags repeat.
_part = cached_when_repeated(maxsize=1 << 16)(_uncached_part)


@cached_when_repeated(maxsize=1 << 14)  # one per tenant and namespace: tenants are many
def _scope(tenant: str, namespace: str) -> bytes:
    return _part(tenant) + _SEP + _part(namespace) + _SEP


def _texts(*named: tuple[str, object]) -> None:
    """Refuse a read's name that is no str (`InvalidName`): it met a key's encoding as a
    raw AttributeError. Handles pass names they checked; a caller of the view's reads
    may not have."""
    for what, value in named:
        if not isinstance(value, str):
            raise InvalidName(f"a view read's {what} is a str, got {shown(value)}")


_FILTER_TEXTS = ("conversation", "agent", "user", "application", "embedder")


def _check_filter(where: object) -> None:
    """Refuse a ``where`` that is no `ItemFilter` of the kinds its fields take (one made
    by hand is not checked when made: `ItemFilter.build` checks its arguments)."""
    if type(where) is not ItemFilter:
        raise InvalidInput(
            f"where is an ItemFilter (make it with ItemFilter.build), got {shown(where)}"
        )
    if not isinstance(where.tenant, str):
        raise InvalidName(f"a filter's tenant is a str, got {shown(where.tenant)}")
    for field in _FILTER_TEXTS:
        value = getattr(where, field)
        if value is not None and not isinstance(value, str):
            raise InvalidName(f"a filter's {field} is a str or None, got {shown(value)}")
    if where.kind is not None and not isinstance(where.kind, MemoryKind):
        raise InvalidInput(f"a filter's kind is a MemoryKind or None, got {shown(where.kind)}")
    now_ms = where.now_ms
    if now_ms is not None and (type(now_ms) is not int or not 0 <= now_ms < 1 << 63):
        raise InvalidInput(
            f"a filter's now_ms is milliseconds since the epoch or None, got {shown(now_ms)}"
        )
    if type(where.superseded) is not bool:
        raise InvalidInput(f"a filter's superseded is True or False, got {shown(where.superseded)}")


def _check_count(value: object, what: str) -> None:
    if type(value) is not int or value < 0:
        raise InvalidInput(f"{what} is a whole number, 0 or more, got {shown(value)}")


@cached_when_repeated(maxsize=1 << 16)
def _tag_prefix(index: bytes, tenant: str, namespace: str, tag: str) -> bytes:
    return index + _scope(tenant, namespace) + _part(tag) + _SEP


def _owner_prefixes(
    tenant: str,
    namespace: str,
    conversation: str,
    agent: str | None,
    user: str | None,
    application: str | None,
    kind: int,
) -> tuple[tuple[bytes, ...], bytes]:
    """The recency index prefixes an item of this owner is listed under, and the owner
    as the entries' value (`_recency_prefixes`, uncached: for an owner met once, as
    every owner of a conversation per item is, a cache's lookup and eviction cost more
    than they save). What does not depend on the conversation is cached apart."""
    prefixes, scoped, rest = _owner_parts(tenant, namespace, agent, user, application, kind)
    if conversation:
        # `_tag_prefix` of the conversation's tag, its part made without `_part`'s cache.
        prefixes = (*prefixes, scoped + _uncached_part(f"c:{conversation}") + _SEP)
    # The msgpack array of five, the conversation first: `_encoder.encode` of the tuple.
    return prefixes, b"\x95" + _encoder.encode(conversation) + rest


@cached_when_repeated(maxsize=1 << 14)  # one per tenant and owner, conversations aside
def _owner_parts(
    tenant: str,
    namespace: str,
    agent: str | None,
    user: str | None,
    application: str | None,
    kind: int,
) -> tuple[tuple[bytes, ...], bytes, bytes]:
    """What an owner's recency prefixes and value share with every conversation's: the
    prefixes of its owner tags, the start of a conversation tag's prefix, and the
    encoded owner after the conversation (its array header left off)."""
    # `_tag_prefix(b"R", tenant, namespace, tag)` of each tag, the scope's part looked up
    # once: a new tenant's (a tenant per item) missed in `_scope` at each tag.
    scoped = b"R" + _scope(tenant, namespace)
    prefixes = tuple(
        [scoped + _part(tag) + _SEP for tag in _owner_tags(agent, user, application, kind)]
    )
    return prefixes, scoped, _encoder.encode((agent, user, application, kind))[1:]


#: `_owner_prefixes`, cached: `_index_entries` meets the same owners again and again.
_recency_prefixes = cached_when_repeated(maxsize=1 << 14)(_owner_prefixes)


def _index_entries(
    tenant: str, namespace: str, raw_id: bytes, state: ItemState
) -> dict[bytes, bytes]:
    if (
        len(state.remembers) == 1
        and not state.weights
        and not state.forgets
        and not state.forgets_at
    ):
        # Most items: remembered once, in one conversation, with no feedback or forget.
        [(conversation, remembered)] = state.remembers.items()
        record = remembered.record
        scope = record.scope
        prefixes, value = _recency_prefixes(
            tenant, namespace, conversation, scope.agent, scope.user, scope.application,
            record.kind,
        )  # fmt: skip
        tail = _key_bytes(remembered.key) + raw_id
        return {prefix + tail: value for prefix in prefixes}
    live = state.live_conversations()
    if not live:
        return {}
    entries: dict[bytes, bytes] = {}
    owners: set[tuple] = set()
    weighted_tags: set[str] = {"*"}
    for conversation, remembered in live.items():
        record = remembered.record
        scope = record.scope
        prefixes, value = _recency_prefixes(
            tenant, namespace, conversation, scope.agent, scope.user, scope.application,
            record.kind,
        )  # fmt: skip
        owners.add((scope.agent, scope.user, scope.application, record.kind))
        weighted_tags.update(_owner_tags(scope.agent, scope.user, scope.application, record.kind))
        # Ascending, read backwards: new entries go at the end of their range, which
        # keeps LMDB's pages full (inverted keys went at the front and left them half
        # empty).
        tail = _key_bytes(remembered.key) + raw_id
        for prefix in prefixes:
            entries[prefix + tail] = value
        if conversation:
            weight = state.weight([conversation])
            if weight != 0:
                # Newest first within a weight, as recall ranks a tie (and as the owner
                # tags below are): a read whose limit cuts a tie keeps the newest.
                entries[
                    _tag_prefix(b"F", tenant, namespace, f"c:{conversation}")
                    + _inv_weight(weight)
                    + _inv_key(remembered.key)
                    + raw_id
                ] = value
    weight = state.weight(list(live))
    if weight != 0:
        # Listed under its owner's tags too, so an owner-filtered feedback-ranked read
        # walks only its owner's weighted items; the value is the owner, so a read with
        # several filters checks the others without loading the item. An item of several
        # owners (listed under ``I``, which sends owner-filtered reads to a scan) gets
        # an empty value: a read loads it to check. The value leaves the conversation
        # out: no read of these tags filters by one, and it is then the same bytes
        # whatever order the item's conversations come in.
        newest = max(r.key for r in live.values())
        tail = _inv_weight(weight) + _inv_key(newest) + raw_id
        owner = _owner_value(*next(iter(owners))) if len(owners) == 1 else b""
        for tag in weighted_tags:
            entries[_tag_prefix(b"F", tenant, namespace, tag) + tail] = owner
    if len(owners) > 1:
        entries[b"I" + _scope(tenant, namespace) + raw_id] = b""
    if state.weights:
        ends = [r.record.expires_at for r in live.values() if r.record.expires_at is not None]
        if ends:
            entries[b"X" + _scope(tenant, namespace) + min(ends).to_bytes(8, "big") + raw_id] = b""
    return entries


@functools.lru_cache(maxsize=1 << 12)
def _owner_value(agent: str | None, user: str | None, application: str | None, kind: int) -> bytes:
    return _encoder.encode(("", agent, user, application, kind))


def _owner_tags(
    agent: str | None, user: str | None, application: str | None, kind: int
) -> list[str]:
    """The owner tags (all but ``*`` and the conversation) an item of this owner is
    listed under, in the recency index and, when it has feedback, the feedback one."""
    tags = [f"k:{kind}"]
    if agent is not None:
        tags.append(f"a:{agent}")
    if user is not None:
        tags.append(f"u:{user}")
    if application is not None:
        tags.append(f"p:{application}")
    return tags


def _slot(namespace: str, where: ItemFilter) -> tuple:
    """Which search index serves a read (`MemoryView._indexes`, a snapshot's name)."""
    return (where.tenant, namespace, where.conversation, where.embedder, where.superseded)


def _keys_at_least(cursor: lmdb.Cursor, prefix: bytes, count: int) -> bool:
    """Whether at least ``count`` keys start with ``prefix``; reads at most that many."""
    if not cursor.set_range(prefix):
        return False
    seen = 0
    for key in cursor.iternext(values=False):
        if not key.startswith(prefix):
            return False
        seen += 1
        if seen >= count:
            return True
    return False


def _prefixed_from(cursor: lmdb.Cursor, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every entry from ``start`` on."""
    if not cursor.set_range(start):
        return
    yield from cursor


def _prefixed(cursor: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    if not cursor.set_range(prefix):
        return
    for key, value in cursor:
        if not key.startswith(prefix):
            return
        yield key, value


def _tailed_backwards(cursor: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """`newest_first` with each key's part after ``prefix`` first, to merge walks of
    several tags in key order."""
    start = len(prefix)
    for key, value in newest_first(cursor, prefix):
        yield key[start:], key, value


_KIND_CODE_ORDER = tuple(sorted(kind.code for kind in MemoryKind))


def view_path_of(path: object) -> str:
    """A view's path as a str, with a leading ``~`` read as the home folder (as a
    ``local://`` URL's is: a ``--view ~/view`` the shell left alone, from ``$LASER_VIEW``
    say, made a folder named ``~`` in the working directory); `ConfigError` for anything
    that is no path, an empty one (which would name the working directory) or one with a
    NUL byte."""
    return os.path.expanduser(folder_path(path, "a view path"))


def _damaged(path: str, what: object) -> LogUnavailable:
    """The error for a view whose stored bytes no longer decode: it is rebuilt from the
    log, which holds everything it was made of."""
    return LogUnavailable(
        f"the view at {path} holds damaged data ({what}): rebuild it from the log "
        f"('laser-memory rebuild --view {path}')"
    )


class MemoryView:
    """The managed view at a folder on disk, for the folder that writes it and for
    every reader.

    >>> view = MemoryView.open("./laser-view")                          # doctest: +SKIP
    >>> view.recall("stream:prod/notes", ItemFilter(conversation="c-1"), limit=10)
    ... # doctest: +SKIP
    >>> view.close()                                                    # doctest: +SKIP
    """

    def __init__(self, path: str, env: lmdb.Environment, dbs: dict) -> None:
        self.path = path
        self._env = env
        self._dbs = dbs
        self._closed = False
        # Transactions under way (reads, a folder's writes), on any thread: `close`
        # while one runs leaves the environment to the last of them to release. Closed
        # under one, it failed as if the view were damaged; and LMDB requires every
        # transaction ended before its environment closes.
        self._users = 0
        self._users_lock = threading.Lock()
        # Asked before each of the folder's write transactions (see StaleReaders).
        self._stale_readers = StaleReaders(env)
        # LMDB's environment is its opener's: a forked child must never read through it.
        self._pid = os.getpid()
        self._bound: tuple[lmdb.Transaction | None, tuple[str, str]] = (None, ("", ""))
        # While a write transaction runs (folder only): the ``changes`` count it started
        # from, and the keys of the new items it wrote.
        self._seq = 0
        self._new_items: list[bytes] = []
        # What the fold's new items of one owner share, by (scope, namespace, kind) of
        # remembers that passed the fold's checks: the items' key prefix, their recency
        # listing and the shared pieces of their states. A remember of a known owner
        # with no field the checks look into (embedding, expiry, ...) needs no check and
        # no lookup but this one (four lookups and the checks were an eighth of the fold).
        self._owners: dict[tuple, tuple[bytes, tuple[tuple[bytes, ...], bytes], NewItemParts]] = {}
        # Search indexes of this process's reads: (tenant, namespace, conversation,
        # embedder, superseded) -> (index, changes seq it reflects, view epoch, seq of its
        # last snapshot). Reads run on
        # several threads (the HTTP server), so one lock guards them.
        self._indexes: dict[tuple, tuple[SearchIndex, int, bytes | None, int]] = {}
        # Reads among ``_indexes`` whose index this process built and did not save (see
        # `_current_index`).
        self._unsaved: set[tuple] = set()
        self._search_lock = threading.Lock()
        #: Where readers save and load their search indexes (see `IndexSnapshots`);
        #: None: every process builds its own.
        self.snapshots: IndexSnapshots | None = None
        #: Reads over at least this many items with no snapshot yet build their index
        #: in a child process (`folders.index_build`); None: always in this one.
        self.build_apart_from: int | None = None
        #: What each search index's caches of per-term arrays may hold, in bytes.
        self.search_cache_bytes = CACHE_BYTES
        # Reads whose child build failed: built in this process from then on (a recall
        # from the event loop would otherwise start a second child in `recall`).
        self._apart_failed: set[tuple] = set()
        # Per event loop, per read: the lock its child builds are awaited under.
        self._apart_builds: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"MemoryView({self.path!r}{', closed' if self._closed else ''})"

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        map_size: int = 64 << 30,
        create: bool = True,
        check_format: bool = True,
        snapshots_from: int | None = SNAPSHOTS_FROM,
        build_apart_from: int | None = BUILD_APART_FROM,
        search_cache_bytes: int = CACHE_BYTES,
    ) -> MemoryView:
        """Open the view at ``path``, creating it unless ``create=False`` (a reader's
        open: a missing view raises `NoView` and nothing is created). A view written in
        another format raises `ViewMismatch` unless ``check_format=False`` (a rebuild).
        Search indexes of at least ``snapshots_from`` entries are saved beside the view
        and loaded by the next reading process (`IndexSnapshots`; None: never); a read
        over at least ``build_apart_from`` items with no snapshot yet has a child process
        build and save its index, then loads it (`folders.index_build`; None: never).
        Each search index's caches of per-term arrays hold up to ``search_cache_bytes``."""
        check_map_size(map_size, "a view's map_size")
        real = real_folder(view_path_of(path), "a view path")
        if not create and not os.path.isfile(os.path.join(real, "data.mdb")):
            raise NoView(
                f"there is no view at {real}; check --view, or build one with "
                "'laser-memory fold' or 'laser-memory rebuild'"
            )
        try:
            env, dbs = SharedEnvironments.acquire(
                real, _DBS, map_size=map_size, what="a managed view"
            )
        except (lmdb.Error, OSError) as exc:
            hint = f"rebuild it from the log ('laser-memory rebuild --view {real}')"
            raise LogUnavailable(
                f"cannot open the view at {real}: {open_failure(exc, hint)}"
            ) from exc
        view = cls(real, env, dbs)
        view.search_cache_bytes = search_cache_bytes
        if snapshots_from is not None:
            view.snapshots = IndexSnapshots(real, keep_from=snapshots_from)
            view.build_apart_from = build_apart_from
        if check_format:
            try:
                view.check_format()
            except ViewMismatch:
                view.close()
                raise
        return view

    def check_format(self) -> None:
        """Raise `ViewMismatch` if a folder wrote this view in another format."""
        with self._read() as txn:
            written = txn.get(b"format", db=self._dbs["meta"])
            bound = txn.get(b"topic", db=self._dbs["meta"])
        if bound is None and written is None:
            return  # a new view: the folder writes the format when it binds a topic
        try:
            found = int(written) if written is not None else 1
        except ValueError:
            raise _damaged(self.path, f"its format entry reads {written!r}") from None
        if found != VIEW_FORMAT:
            raise ViewMismatch(
                f"the view at {self.path} is in format {found}, and this laser-memory reads "
                f"format {VIEW_FORMAT}; rebuild it ('laser-memory rebuild --view {self.path}')"
            )

    def close(self) -> None:
        """Close the view: later reads and writes raise `LogClosed`; those under way (on
        other threads) finish first, and the last of them releases the environment."""
        with self._users_lock:
            if self._closed:
                return
            self._closed = True
            idle = self._users == 0
        if idle:
            SharedEnvironments.release(self.path)

    def __enter__(self) -> MemoryView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # The environment is shared per process (SharedEnvironments): a view dropped
        # open keeps it, its map and its reader slots, for the life of the process.
        if not getattr(self, "_closed", True):
            warnings.warn(
                f"the view at {self.path} was not closed; call close() or use 'with'",
                ResourceWarning,
                stacklevel=1,
            )

    def _binding(self, txn: lmdb.Transaction) -> tuple[str, str]:
        """The topic and generation the view is bound to, as ``txn`` sees them: what
        the sources of its stored items name (a rebuild may bind it anew, so they are
        read again for each transaction, never kept)."""
        cached = self._bound
        if cached[0] is txn:
            return cached[1]
        meta = self._dbs["meta"]
        topic, generation = txn.get(b"topic", db=meta), txn.get(b"generation", db=meta)
        binding = (
            topic.decode() if topic is not None else "",
            generation.decode() if generation is not None else "",
        )
        self._bound = (txn, binding)  # one assignment: readers may share the view
        return binding

    @contextlib.contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
        """A read transaction; LMDB's failures in it (a damaged file) as `LogUnavailable`."""
        if os.getpid() != self._pid:
            raise LogUnavailable(
                f"the view at {self.path} was opened in the parent of this forked process, "
                "and LMDB allows no use of it here; open views after forking, or start "
                "workers with multiprocessing's 'spawn' or 'forkserver' method"
            )
        try:
            with self._in_use(), self._env.begin() as txn:
                yield txn
        except lmdb.Error as exc:
            raise LogUnavailable(
                f"the view at {self.path} could not be read: {exc}; it may be damaged: "
                f"rebuild it from the log ('laser-memory rebuild --view {self.path}')"
            ) from exc
        except msgspec.DecodeError as exc:
            # A value changed on disk (LMDB keeps no checksum): a raw DecodeError from
            # every read that met it, before.
            raise _damaged(self.path, exc) from exc

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """Hold the environment open for a transaction (see ``_users``); `LogClosed` if
        the view was closed."""
        with self._users_lock:
            if self._closed:
                raise LogClosed(
                    f"the view at {self.path} was closed (its connection stopped?); open it "
                    "again, or open a new connection"
                )
            self._users += 1
        try:
            yield
        finally:
            with self._users_lock:
                self._users -= 1
                last = self._closed and self._users == 0
            if last:
                SharedEnvironments.release(self.path)

    # -- meta --------------------------------------------------------------------

    def topic(self) -> tuple[str | None, str | None]:
        """(topic, generation) this view folds, or (None, None) for a new view."""
        with self._read() as txn:
            topic = txn.get(b"topic", db=self._dbs["meta"])
            generation = txn.get(b"generation", db=self._dbs["meta"])
        return (
            topic.decode() if topic is not None else None,
            generation.decode() if generation is not None else None,
        )

    def bind(self, topic: str, generation: str) -> None:
        """Record which topic generation this view folds; refuse another one."""
        current_topic, current_generation = self.topic()
        if current_topic is None:
            with self._writing("binding"), self._env.begin(write=True) as txn:
                txn.put(b"format", str(VIEW_FORMAT).encode(), db=self._dbs["meta"])
                txn.put(b"topic", topic.encode(), db=self._dbs["meta"])
                txn.put(b"generation", generation.encode(), db=self._dbs["meta"])
            return
        self.check_format()
        if current_topic != topic:
            raise ViewMismatch(
                f"the view at {self.path} folds topic {shown(current_topic)}, not {shown(topic)}; "
                "use another view folder for another topic"
            )
        if current_generation != generation:
            raise ViewMismatch(
                f"topic {shown(topic)} was recreated since the view at {self.path} was built; "
                "rebuild the view ('laser-memory rebuild')"
            )

    def watermark(self) -> dict[int, int]:
        """Per partition, the next offset the view will fold."""
        with self._read() as txn:
            return {
                int.from_bytes(key[3:], "big"): int.from_bytes(value, "big")
                for key, value in _prefixed(txn.cursor(db=self._dbs["meta"]), b"pos")
            }

    def has_passed(self, position: Position) -> bool:
        """Whether the view has folded the record at ``position``."""
        if not isinstance(position, Position):
            raise InvalidInput(f"a position is a Position, got {shown(position)}")
        return self.watermark().get(position.partition, 0) > position.offset

    def clear(self) -> None:
        """Empty every database (for a rebuild), and remove the readers' index
        snapshots: they index the old view (a reader passes over them anyway, by epoch;
        this frees their space, and one that cannot be removed stays harmless)."""
        with self._writing("emptying"), self._env.begin(write=True) as txn:
            for name in _DBS:
                txn.drop(self._dbs[name], delete=False)
        IndexSnapshots(self.path).remove_all()

    # -- writing (the folder) --------------------------------------------------------

    def apply(
        self,
        batches: Sequence[Sequence[LogRecord]],
        generation: str,
        *,
        committing: Callable[[], object] | None = None,
    ) -> int:
        """Fold batches into the view in one transaction together with their positions.
        Returns how many records were applied (set-aside ones included). A full map
        raises `ViewFull` and writes nothing of the batches. ``committing`` is called,
        on this thread, once the transaction's writes are made and just before it
        commits (see `ViewFolder.run`)."""
        with self._writing("batch"):
            return self._apply(batches, generation, committing)

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """LMDB's failures of a write transaction as the errors the folder raises: a full
        map is `ViewFull`, any other `LogUnavailable` (a full disk said so)."""
        with self._in_use():
            try:
                yield
            except lmdb.MapFullError:
                info = self._env.info()
                raise ViewFull(
                    f"the view at {self.path} is full: it reached its map size of "
                    f"{info['map_size']} bytes, and nothing of this {what} was written. Restart "
                    "the folder with a larger map ('laser-memory fold --map-size BYTES', or "
                    "FolderConfig.map_size); it resumes where it stopped"
                ) from None
            except lmdb.Error as exc:
                raise LogUnavailable(
                    f"the view at {self.path} could not be written: {write_failure(self.path, exc)}"
                ) from exc
            except msgspec.DecodeError as exc:
                # What the fold read back of the view was damaged on disk; folding onto it
                # would spread the damage. Nothing of the batch was written.
                raise _damaged(self.path, exc) from exc

    def _apply(
        self,
        batches: Sequence[Sequence[LogRecord]],
        generation: str,
        committing: Callable[[], object] | None,
    ) -> int:
        count = 0
        self._stale_readers.clear()
        with self._env.begin(write=True) as txn:
            items: dict[bytes, tuple[ItemState, dict[bytes, bytes], str, str, bytes]] = {}
            named: dict[bytes, NamedState | None] = {}
            positions: dict[int, int] = {}
            meta_db = self._dbs["meta"]
            seq_raw = txn.get(b"seq", db=meta_db)
            self._seq = int.from_bytes(seq_raw, "big") if seq_raw else 0
            if seq_raw is None:
                txn.put(b"epoch", os.urandom(8), db=self._dbs["meta"])
                txn.put(b"seq", bytes(8), db=self._dbs["meta"])
            self._new_items = []
            # Cursors kept for the transaction: a put through one skips the argument
            # parsing and cursor set-up of each ``txn.put`` (a third of a put's cost).
            self._item_put = txn.cursor(db=self._dbs["items"]).put
            recent = RecencyWriter(txn.cursor(db=self._dbs["index"]))
            self._recent_pending = recent.pending
            apply_one = self._apply_one
            # Where each partition's records are expected to go on: the stored position,
            # then the batches'. A batch that goes on later lost records to retention.
            next_offsets: dict[int, int] = {}
            for batch in batches:
                if not batch:
                    continue
                last = batch[-1]
                for partition in (
                    (last.partition,)
                    if batch[0].partition == last.partition
                    else {log_record.partition for log_record in batch}
                ):
                    if partition not in next_offsets:
                        stored = txn.get(b"pos" + partition.to_bytes(4, "big"), db=meta_db)
                        next_offsets[partition] = int.from_bytes(stored, "big") if stored else 0
                first = batch[0]
                if first.offset < next_offsets.get(first.partition, 0):
                    # Records the view holds as folded, read again: folding them twice would
                    # count their feedback twice. The log went back under the folder.
                    raise ViewMismatch(
                        f"partition {first.partition} of the log went back: offset "
                        f"{first.offset} came after the view had folded up to "
                        f"{next_offsets[first.partition]}, so nothing of this batch was "
                        "folded. The log lost records the view holds (restored from an "
                        "older copy?): rebuild the view ('laser-memory rebuild')"
                    )
                for note in missing_records(batch, next_offsets):
                    where = note.position
                    txn.put(
                        where.partition.to_bytes(4, "big") + where.offset.to_bytes(8, "big"),
                        _encoder.encode(note),
                        db=self._dbs["aside"],
                    )
                for log_record in batch:
                    apply_one(txn, log_record, generation, items, named)
                # A log's batch is one partition's records in offset order (the port
                # says so): its last record is the partition's new position.
                if batch[0].partition == last.partition:
                    positions[last.partition] = next_offsets[last.partition] = last.offset + 1
                else:
                    for log_record in batch:
                        positions[log_record.partition] = log_record.offset + 1
                    next_offsets.update(positions)
                count += len(batch)
            # Before the items below: their old entries may be among the gathered ones.
            recent.flush()
            index_db = self._dbs["index"]
            items_db = self._dbs["items"]
            put = txn.put
            changed = self._new_items
            changed.extend(items)
            for db_key, (state, before, tenant, namespace, raw_id) in items.items():
                after = _index_entries(tenant, namespace, raw_id, state)
                for key in before.keys() - after.keys():
                    if key[0] == _RECENT:
                        recent.delete(key)
                    else:
                        txn.delete(key, db=index_db)
                for key, value in after.items():
                    if before.get(key) != value:
                        if key[0] == _RECENT:
                            recent.put(key, value)
                        else:
                            put(key, value, db=index_db)
                put(db_key, _encoder.encode(state), db=items_db)
            for db_key, state in named.items():
                if state is not None:
                    txn.put(db_key, _encoder.encode(state), db=self._dbs["named"])
            if changed:
                # One row for the transaction: a put per item was a sixth of the fold.
                seq = self._seq + len(changed)
                put(
                    seq.to_bytes(8, "big"),
                    _encoder.encode(changed),
                    db=self._dbs["changes"],
                    append=True,
                )
                put(b"seq", seq.to_bytes(8, "big"), db=self._dbs["meta"])
            self._new_items = []
            for partition, offset in positions.items():
                txn.put(
                    b"pos" + partition.to_bytes(4, "big"),
                    offset.to_bytes(8, "big"),
                    db=self._dbs["meta"],
                )
            if committing is not None:
                committing()
        return count

    def _owner(
        self, record: Remember
    ) -> tuple[bytes, tuple[tuple[bytes, ...], bytes], NewItemParts]:
        """What the new items of a checked remember's owner share (see ``_owners``)."""
        scope = record.scope
        conversation = _NO_CONVERSATION if scope.conversation is None else scope.conversation
        owner = (
            _scope(scope.tenant, record.ns),
            # Uncached: the owner itself is kept in ``_owners``.
            _owner_prefixes(
                scope.tenant, record.ns, conversation, scope.agent, scope.user,
                scope.application, record.kind,
            ),
            new_item_parts(conversation, record),
        )  # fmt: skip
        # A crude bound, 16,384: owners repeat. Records of ten thousand owners interleave
        # on a log of ten thousand tenants; 4,096, cleared when full, met nearly every one
        # afresh (the fold ran at half its rate). About 1 KB an owner.
        _OWNERS_MET.keep(self._owners, (scope, record.ns, record.kind), owner, 1 << 14)
        return owner

    def _apply_one(self, txn, log_record: LogRecord, generation: str, items, named) -> None:
        # Everything that can fail because of the record happens before anything changes;
        # whatever it raises, the record is set aside and the fold goes on. Only the
        # storage's own errors (lmdb.Error) stop the batch.
        try:
            record = decode_record(log_record.value, log_record.headers)
            check_owner_headers(log_record.headers, record)
            key = (log_record.append_time_ms, log_record.partition, log_record.offset)
            is_remember = type(record) is Remember
            if is_remember:
                # The most common record: a new item, whose state is this remember. It
                # is written at once rather than kept until the batch ends: a later
                # record of the batch about it reads it back from the transaction, and
                # a batch of new items holds no objects for the garbage collector to
                # walk (which cost a third of the fold). Inlined, as it runs once a
                # record: its calls were a tenth of a new item's fold.
                owner = (
                    self._owners.get((record.scope, record.ns, record.kind))
                    if record.embedding is None
                    and record.embedder is None
                    and record.expires_at is None
                    and record.supersedes is None
                    and len(record.id) == 16
                    else None
                )
                if owner is None:
                    checked_for_fold(record)
                    owner = self._owner(record)
                scope, listing, parts = owner
                raw_id = record.id
                db_key = scope + raw_id
                if db_key not in items:
                    # The entries `_index_entries` gives an item remembered once with no
                    # feedback, gathered by owner and written as runs when the batch
                    # ends (`RecencyWriter.add`, inlined; the fold-model test checks
                    # them).
                    tail = _KEY_BYTES(key[0], key[1], key[2]) + raw_id
                    # One look into the items for both questions, is it new and where it
                    # goes (a get before the put was a twelfth of the fold).
                    # `new_item_state`'s bytes, made from the owner's shared parts.
                    head, fields, ns, scope_bytes, end = parts
                    shaped = (
                        head, key, fields, raw_id, record.kind, record.body, ns,
                        record.v, scope_bytes, record.lifetime, record.origin,
                        record.producer, record.embedding, record.embedder,
                        record.expires_at, record.supersedes, end, key,
                    )  # fmt: skip
                    state_bytes = _new_state_encoder.encode(shaped)[_SHAPED_HEADER:]
                    if self._item_put(db_key, state_bytes, overwrite=False):
                        tails = self._recent_pending.get(listing)
                        if tails is None:
                            self._recent_pending[listing] = [tail]
                        else:
                            tails.append(tail)
                        self._new_items.append(db_key)
                        return
                entry = None  # see below: usually the item itself is the audit line
                is_named = False
            else:
                checked_for_fold(record)
                scope = _scope(record.scope.tenant, record.ns)
                is_named = type(record) in NAMED_RECORDS
            if is_named:
                db_key = scope + _part(record.key)
                if db_key in named:
                    previous = named[db_key]
                else:
                    raw = txn.get(db_key, db=self._dbs["named"])
                    try:
                        previous = _named_decoder.decode(raw) if raw is not None else None
                    except msgspec.DecodeError as exc:
                        # The view's own state is damaged, not the record: taken for the
                        # record's fault below, the record was set aside and lost from the
                        # view while the folder went on.
                        raise _damaged(self.path, exc) from exc
                if named_unchanged(previous, record):
                    return
                source = source_of(record, log_record, generation)
                state = apply_named(previous, record, key, source)
                entry = _encoder.encode((state, history_entry(record, log_record, state.version)))
            elif not is_remember:
                raw_id = record.target
                db_key = scope + raw_id
                # Versions are numbered on reading, by position key: the folder's visiting
                # order across partitions must not show in the view.
                entry = _encoder.encode(history_entry(record, log_record, 0))
        except (lmdb.Error, LogUnavailable):
            raise
        except Exception as exc:
            aside = SetAside(
                log_record.position, log_record.append_time_ms, _reason(exc, log_record)
            )
            txn.put(
                log_record.partition.to_bytes(4, "big") + log_record.offset.to_bytes(8, "big"),
                _encoder.encode(aside),
                db=self._dbs["aside"],
            )
            return
        if is_named:
            named[db_key] = state
            txn.put(
                db_key + _SEP + state.version.to_bytes(8, "big"), entry, db=self._dbs["versions"]
            )
            return
        if db_key not in items:
            self._loaded(txn, items, db_key, record.scope.tenant, record.ns, raw_id)
        state = items[db_key][0]
        if entry is None:
            # A remember the item keeps (the newest of its conversation) is its own audit
            # line, read from the item: its body is stored once. One it does not keep, or
            # stops keeping, gets a line of its own; so the lines depend on what was
            # folded, never on the order it was folded in.
            conversation = _conv(record.scope.conversation)
            before = state.remembers.get(conversation)
            state.apply(record, key)
            now = state.remembers[conversation]
            if now.key != key:
                entry = _encoder.encode(history_entry(record, log_record, 0))
            else:
                now.record = kept(record)
                if before is not None:
                    self._put_audit(
                        txn, db_key, before.key, remembered_entry(before, log_record.topic)
                    )
            if entry is None:
                return
        else:
            state.apply(record, key)
        txn.put(
            db_key + log_record.partition.to_bytes(4, "big") + log_record.offset.to_bytes(8, "big"),
            entry,
            db=self._dbs["audit"],
        )

    def _loaded(
        self, txn, items: dict, db_key: bytes, tenant: str, namespace: str, raw_id: bytes
    ) -> None:
        """Bring an item's state into the batch's ``items`` (with its index entries as
        they stood), unless the batch changed it already."""
        if db_key in items:
            return
        raw = txn.get(db_key, db=self._dbs["items"])
        if raw is None:
            loaded, before = ItemState(), {}
        else:
            loaded = _decoded_state(raw)
            before = _index_entries(tenant, namespace, raw_id, loaded)
        items[db_key] = (loaded, before, tenant, namespace, raw_id)

    def _put_audit(self, txn, db_key: bytes, key: SortKey, entry: HistoryEntry) -> None:
        txn.put(
            db_key + key[1].to_bytes(4, "big") + key[2].to_bytes(8, "big"),
            _encoder.encode(entry),
            db=self._dbs["audit"],
        )

    # -- reading -----------------------------------------------------------------------

    def recall(
        self,
        namespace: str,
        where: ItemFilter,
        *,
        strategy: str = "auto",
        text: str | None = None,
        limit: int = 50,
        query_vector: np.ndarray | None = None,
        embedder: str | None = None,
        min_similarity: float | None = None,
        exclude: frozenset[bytes] = frozenset(),
        approximate: ApproximateSearch | None = None,
    ) -> list[MemoryItem]:
        """Recall from the view; same order and signals as folded recall. A recall by
        text or meaning scores every visible item in scope, exactly, except that with
        ``approximate`` a semantic recall over many vectors scores the nearest
        clusters (`laser_memory.vector_clusters`)."""
        strategy = validate_strategy(strategy)
        validate_limit(limit)
        _texts(("namespace", namespace))
        _check_filter(where)
        text = query_text(text)
        if not isinstance(exclude, frozenset | set):
            raise InvalidInput(f"exclude is a frozenset of raw ids, got {shown(exclude)}")
        mode = search_mode(strategy, text, query_vector)
        if mode is not None:
            self._build_apart(namespace, where, approximate)
        with self._read() as txn:
            if mode is not None:
                found = self._search(
                    txn,
                    namespace,
                    where,
                    text,
                    mode,
                    query_vector,
                    min_similarity,
                    limit,
                    exclude,
                    approximate,
                )
                if found is not None:
                    return found
                candidates = list(self._newest(txn, namespace, where, None))
            elif strategy != "recent" and query_vector is not None:
                candidates = list(self._newest(txn, namespace, where, None))
            else:
                # Excluded ids would take places the limit counts: fetch that many more.
                wanted = limit + len(exclude)
                candidates = self._candidates(txn, namespace, where, strategy, wanted)
        return rank(
            candidates,
            strategy=strategy,
            text=text,
            limit=limit,
            query_vector=query_vector,
            embedder=embedder,
            min_similarity=min_similarity,
            exclude=exclude,
        )

    def _search(
        self,
        txn,
        namespace,
        where,
        text,
        mode,
        query_vector,
        min_similarity,
        limit,
        exclude,
        approximate,
    ) -> list[MemoryItem] | None:
        """A text recall from this process's search index for the read, caught up from
        the ``changes`` log in the same read transaction; None when only a scan ranks
        it exactly (owner filters over items of several owners, vectors of several
        lengths)."""
        with self._search_lock:
            index, slot, seq, epoch = self._current_index(txn, namespace, where)
            found = index.find(
                text,
                mode=mode,
                query_vector=query_vector,
                min_similarity=min_similarity,
                limit=limit,
                exclude=exclude,
                approximate=approximate,
                owner=where.owner,
            )
            give_back_after_search(mode, len(index))
            reorganized = index.reorganized
            del index  # see `_save_served`
            if reorganized:
                self._save_served(slot, epoch, seq)
        if found is None:
            return None
        out = []
        for raw_id, ranked in found:
            item = self._load(txn, namespace, where, raw_id)
            if item is not None:
                out.append(with_ranking(item, ranked))
        return out

    def _current_index(
        self, txn, namespace: str, where: ItemFilter
    ) -> tuple[SearchIndex, tuple, int, bytes | None]:
        """The search index of the read as of ``txn`` (this process's, caught up from
        the ``changes`` log; else a snapshot's, caught up; else built and saved), kept
        as this process's most recently used; with its slot, the change number and the
        view epoch it reflects. The caller holds ``_search_lock``."""
        base = where.of_index
        slot = _slot(namespace, where)
        seq, epoch = self._changes(txn)
        scope = _scope(where.tenant, namespace)
        items_db = self._dbs["items"]
        index, seen, seen_epoch, saved = self._indexes.pop(slot, (None, 0, None, 0))
        if (
            index is None
            or seen_epoch != epoch
            or (base.now_ms is not None and index.went_back(base.now_ms))
        ):
            index = None
            loaded = self.snapshots.load(slot, epoch) if self.snapshots else None
            if loaded is not None:
                index, seen = loaded
                if seen > seq or (base.now_ms is not None and index.went_back(base.now_ms)):
                    index = None
                saved = seen
        if index is None:
            index = self._built(txn, where.embedder, scope, base)
            # ``saved`` is the change of the last try: a failed save (a full disk) is
            # tried again by a read only after as many changes as a saved one waits for
            # (each try writes the whole index), and at once by `prepare_index`.
            seen = saved = seq
            self._unsaved.add(slot)
            if self._save(slot, epoch, seq, index):
                self._unsaved.discard(slot)
                # The built index goes before its snapshot is loaded back, with the
                # words its build left in the stem cache: alive, they held pages of
                # the build's heap that the loaded index's objects then filled, and a
                # reader that built its index kept twice the heap of one that loaded
                # it (measured at 200,000 items). A snapshot that cannot be read back
                # is built again.
                index = None
                forget_stems()
                index = self._saved(slot, epoch, seq)
                if index is None:
                    index = self._built(txn, where.embedder, scope, base)
                give_back_freed_memory()
        elif seq > seen:
            changed = {
                db_key
                for _, keys in _prefixed_from(
                    txn.cursor(db=self._dbs["changes"]), (seen + 1).to_bytes(8, "big")
                )
                for db_key in _keys_decoder.decode(keys)
                if db_key.startswith(scope) and len(db_key) == len(scope) + 16
            }
            index.put_many(
                self._entry(txn, txn.get(db_key, db=items_db), db_key[len(scope) :], base)
                for db_key in changed
            )
        self._bring_to_now(txn, index, scope, base)
        # Many changes since the snapshot: save a new one, so the next process
        # catches up from closer.
        if seq - saved > max(1000, len(index) // 10):
            saved = seq
            if self._save(slot, epoch, seq, index):
                saved_index = self._saved(slot, epoch, seq)
                if saved_index is not None:
                    index = saved_index
        index.cache_bytes = self.search_cache_bytes  # a loaded index has the default
        self._indexes[slot] = (index, seq, epoch, saved)  # most recently used last
        while len(self._indexes) > MAX_SEARCH_INDEXES:
            evicted = next(iter(self._indexes))
            del self._indexes[evicted]
            self._unsaved.discard(evicted)  # bounded as the indexes are
        return index, slot, seq, epoch

    def _save_served(self, slot: tuple, epoch: bytes | None, seq: int) -> None:
        """Save the index this process serves for ``slot`` (after its vector clusters
        moved every entry, so the next reader starts from them; or after its first save
        failed), and serve from the map, not this process's copies, which go before the
        map is loaded (as after a build) and so must have no other reference left. If
        the snapshot cannot be read back, the next read loads or builds one. The caller
        holds ``_search_lock``."""
        index = self._indexes[slot][0]
        if not self._save(slot, epoch, seq, index):
            return
        self._unsaved.discard(slot)
        del self._indexes[slot], index
        saved_index = self._saved(slot, epoch, seq)
        if saved_index is not None:
            self._indexes[slot] = (saved_index, seq, epoch, seq)
        give_back_freed_memory()

    def _changes(self, txn) -> tuple[int, bytes | None]:
        """The view's change number and epoch, as ``txn`` sees them."""
        raw_seq = txn.get(b"seq", db=self._dbs["meta"])
        epoch = txn.get(b"epoch", db=self._dbs["meta"])
        return int.from_bytes(raw_seq, "big") if raw_seq else 0, epoch

    def _build_apart(
        self, namespace: str, where: ItemFilter, approximate: ApproximateSearch | None
    ) -> None:
        """Have a child process build and save the search index of this read, when
        `_apart_build` says so, and wait for it; the read then loads the snapshot. A
        child that fails leaves the build to `_search`, its reason in
        ``snapshots.errors``. (Reads on the event loop call `build_index_apart` first,
        which waits without blocking the loop.)"""
        with self._search_lock:  # one build at a time, as `_search` makes them
            request = self._apart_build(namespace, where, approximate)
            failure = build_apart(request) if request is not None else None
        self._apart_failure(namespace, where, failure)

    async def build_index_apart(
        self, namespace: str, where: ItemFilter, approximate: ApproximateSearch | None
    ) -> None:
        """Before a text recall from the event loop: if the read's index would be built
        by a child process (`_apart_build`), start the child and wait for it without
        blocking the loop. Concurrent reads of one index on a loop wait for one child."""
        if self.snapshots is None or self.build_apart_from is None:
            return
        loop = asyncio.get_running_loop()
        with self._search_lock:
            builds = self._apart_builds.setdefault(loop, {})
            lock = builds.setdefault(_slot(namespace, where), asyncio.Lock())
        async with lock:
            with self._search_lock:
                request = self._apart_build(namespace, where, approximate)
            if request is None:
                return
            failure = await build_apart_async(request)
            self._apart_failure(namespace, where, failure)

    def _apart_failure(self, namespace: str, where: ItemFilter, failure: str | None) -> None:
        if failure is not None:
            assert self.snapshots is not None
            self.snapshots.errors.append(failure)
            self._apart_failed.add(_slot(namespace, where))

    def _apart_build(
        self, namespace: str, where: ItemFilter, approximate: ApproximateSearch | None
    ) -> BuildRequest | None:
        """What a child process should build for this read: when the read is large,
        this process has no index of it, there is no snapshot of it to load, and one
        could be saved; else None. The caller holds ``_search_lock``."""
        snapshots, at_least = self.snapshots, self.build_apart_from
        if snapshots is None or at_least is None or not can_build_apart():
            return None
        slot = _slot(namespace, where)
        # A child that could not save would only have built the index twice.
        if (
            slot in self._indexes
            or slot in self._apart_failed
            or snapshots.has(slot)
            or not snapshots.writable()
        ):
            return None
        # How many items the index would hold, roughly: a conversation's live ones, or
        # every item of the namespace. At most ``at_least`` keys are read.
        with self._read() as txn:
            if where.conversation is None:
                cursor = txn.cursor(db=self._dbs["items"])
                many = _keys_at_least(cursor, _scope(where.tenant, namespace), at_least)
            else:
                cursor = txn.cursor(db=self._dbs["index"])
                tag = _tag_prefix(b"R", where.tenant, namespace, f"c:{where.conversation}")
                many = holds_at_least(cursor, tag, at_least)
        return BuildRequest(self.path, namespace, where.of_index, approximate) if many else None

    def save_index(
        self, namespace: str, where: ItemFilter, approximate: ApproximateSearch | None
    ) -> bool:
        """Build the search index of ``recall(namespace, where)`` from the view, make
        its vector clusters if a semantic recall with ``approximate`` would, and save its
        snapshot; True if saved. What the child of `_build_apart` runs."""
        if self.snapshots is None:
            return False
        base = where.of_index
        with self._read() as txn:
            seq, epoch = self._changes(txn)
            index = self._built(txn, base.embedder, _scope(base.tenant, namespace), base)
        index.cluster_for(approximate)
        return self.snapshots.save(_slot(namespace, base), epoch, seq, index)

    def prepare_index(
        self, namespace: str, where: ItemFilter, approximate: ApproximateSearch | None = None
    ) -> PreparedSearch:
        """Make ready the search index a text recall of ``namespace`` with ``where``
        reads, as a first text recall would without a query: loaded from its snapshot or
        built (by a child process when large, see `_build_apart`), caught up with the
        view, with the vector clusters a semantic recall with ``approximate`` makes, and
        saved as a snapshot if it holds enough entries. `MemoryHandle.prepare_search`
        is the API (it makes ``where`` as its recalls do)."""
        _texts(("namespace", namespace))
        _check_filter(where)
        snapshots = self.snapshots
        last_error = snapshots.errors[-1] if snapshots is not None and snapshots.errors else None
        self._build_apart(namespace, where, approximate)
        with self._read() as txn, self._search_lock:
            index, slot, seq, epoch = self._current_index(txn, namespace, where)
            entries = len(index)
            index.cluster_for(approximate)
            # Saved again when its clusters moved every entry, or when the save of its
            # build failed (a full disk since freed): asked to save, a read tries again.
            unsaved = index.reorganized or slot in self._unsaved
            del index  # see `_save_served`
            if unsaved:
                self._save_served(slot, epoch, seq)
        snapshot = reason = None
        if snapshots is None or snapshots.keep_from is None:
            reason = "search index snapshots are off (MemoryConfig.index_snapshots_from)"
        elif entries < snapshots.keep_from:
            reason = (
                f"{entries} entries, fewer than index_snapshots_from ({snapshots.keep_from}): "
                "each reading process builds an index this small in milliseconds"
            )
        else:
            errors = list(snapshots.errors)
            new = errors[next(
                (at + 1 for at in range(len(errors) - 1, -1, -1) if errors[at] is last_error),
                0,
            ):]  # fmt: skip
            if new or not snapshots.has(slot):
                reason = "; ".join(new) or "the snapshot was not saved"
            else:
                snapshot = snapshots.file_of(slot)
        return PreparedSearch(
            namespace=namespace,
            tenant=where.tenant,
            conversation=where.conversation,
            embedder=where.embedder,
            entries=entries,
            changes=seq,
            snapshot=snapshot,
            reason=reason,
        )

    def _entry(self, txn, raw: bytes | None, raw_id: bytes, where: ItemFilter) -> tuple:
        """A search index entry ``(raw_id, item or None, irregular)`` from an item's
        stored bytes (None: it is gone)."""
        if raw is None:
            return raw_id, None, False
        return raw_id, *index_entry(_decoded_state(raw), raw_id, where, *self._binding(txn))

    def _built(self, txn, embedder: str | None, scope: bytes, base: ItemFilter) -> SearchIndex:
        """A read's search index built from every item of the view in ``scope``, as
        the read sees them at its moment."""
        index = SearchIndex(embedder)
        index.put_many(
            self._entry(txn, raw, key[len(scope) :], base)
            for key, raw in _prefixed(txn.cursor(db=self._dbs["items"]), scope)
        )
        # Before it is saved: its snapshot must carry the moment it left expired entries
        # out at, or a reader whose clock is behind loads it (`went_back` cannot tell)
        # and misses items that have not expired at its own moment.
        self._bring_to_now(txn, index, scope, base)
        return index

    def _bring_to_now(self, txn, index: SearchIndex, scope: bytes, base: ItemFilter) -> None:
        """Put again, as the read sees them at its moment, the entries whose remember
        expired since the index was last brought to a moment; the index keeps the
        moment (`SearchIndex.went_back`)."""
        if base.now_ms is None:
            return
        items_db = self._dbs["items"]
        for raw_id in index.due(base.now_ms):
            raw = txn.get(scope + raw_id, db=items_db)
            item, irregular = (
                index_entry(_decoded_state(raw), raw_id, base, *self._binding(txn))
                if raw is not None
                else (None, False)
            )
            index.put(raw_id, item, irregular=irregular)

    def _save(self, slot: tuple, epoch: bytes | None, seq: int, index: SearchIndex) -> bool:
        return self.snapshots is not None and self.snapshots.save(slot, epoch, seq, index)

    def _saved(self, slot: tuple, epoch: bytes | None, seq: int) -> SearchIndex | None:
        """The index just saved at ``seq``, as the next reader would load it: its arrays
        mapped from the snapshot file, so this reader stops holding its own copies (and
        the objects a build or a catch-up made). None if it cannot be read back."""
        assert self.snapshots is not None
        loaded = self.snapshots.load(slot, epoch)
        return loaded[0] if loaded is not None and loaded[1] == seq else None

    def _load(self, txn, namespace: str, where: ItemFilter, raw_id: bytes) -> MemoryItem | None:
        raw = txn.get(_scope(where.tenant, namespace) + raw_id, db=self._dbs["items"])
        if raw is None:
            return None
        return _decoded_state(raw).visible(raw_id, where, *self._binding(txn))

    def _narrowest_tag(self, where: ItemFilter) -> str:
        if where.conversation is not None:
            return f"c:{where.conversation}"
        for prefix, value in (("a", where.agent), ("u", where.user), ("p", where.application)):
            if value is not None:
                return f"{prefix}:{value}"
        if where.kind is not None:
            return f"k:{where.kind.code}"
        return "*"

    @staticmethod
    def _entry_matches(where: ItemFilter, owner: bytes) -> bool:
        conversation, agent, user, application, kind = _owner_decoder.decode(owner)
        return (
            (where.conversation is None or conversation == where.conversation)
            and (where.agent is None or agent == where.agent)
            and (where.user is None or user == where.user)
            and (where.application is None or application == where.application)
            and (where.kind is None or kind == where.kind.code)
        )

    def _newest(
        self,
        txn,
        namespace: str,
        where: ItemFilter,
        limit: int | None,
        skip_weighted: bool = False,
        skip: frozenset[bytes] = frozenset(),
    ) -> Iterator[MemoryItem]:
        """Visible items, newest first, from the narrowest index (at most ``limit``),
        but those in ``skip``."""
        seen: set[bytes] = set()
        produced = 0
        for key, owner in self._recency_entries(txn, namespace, where):
            if limit is not None and produced >= limit:
                return
            raw_id = key[-16:]
            if raw_id in seen or raw_id in skip or not self._entry_matches(where, owner):
                continue
            item = self._load(txn, namespace, where, raw_id)
            if item is not None and key[-TAIL:-16] > _KEY_BYTES(
                item.append_time_ms, item.source.partition, item.source.offset
            ):
                # The entry of a remember that expired since it was folded: the item's
                # place is at the entry of the newest remember this read sees, later on.
                continue
            seen.add(raw_id)
            if item is None or (skip_weighted and item.weight != 0):
                continue
            produced += 1
            yield item

    def _recency_entries(
        self, txn, namespace: str, where: ItemFilter
    ) -> Iterator[tuple[bytes, bytes]]:
        """The ``R`` entries of the narrowest tag for ``where``, newest first. With no
        filter, the kinds' entries merged: every item is listed under its kind."""
        tag = self._narrowest_tag(where)
        if tag != "*":
            prefix = _tag_prefix(b"R", where.tenant, namespace, tag)
            return newest_first(txn.cursor(db=self._dbs["index"]), prefix)
        walks = [
            _tailed_backwards(
                txn.cursor(db=self._dbs["index"]),
                _tag_prefix(b"R", where.tenant, namespace, f"k:{code}"),
            )
            for code in _KIND_CODE_ORDER
        ]
        return ((key, owner) for _, key, owner in heapq.merge(*walks, reverse=True))

    def _candidates(self, txn, namespace, where, strategy, limit) -> list[MemoryItem]:
        index = txn.cursor(db=self._dbs["index"])
        if where.has_owner_filter and any(
            True for _ in _prefixed(index, b"I" + _scope(where.tenant, namespace))
        ):
            return list(self._newest(txn, namespace, where, None))
        if strategy == "recent":
            return list(self._newest(txn, namespace, where, limit))
        return self._feedback_ranked(txn, namespace, where, limit)

    def _feedback_ranked(
        self, txn, namespace: str, where: ItemFilter, limit: int
    ) -> list[MemoryItem]:
        """Positive weights (highest first), then zero weights (newest first), then
        negative weights: each part read only as far as the limit needs."""
        prefix = _tag_prefix(b"F", where.tenant, namespace, self._narrowest_tag(where))
        # Items whose entries may be stale by now (see ``X`` above): loaded as the read
        # sees them, passed over in the walks, and ranked with their results (`rank`
        # orders the candidates; the walks only choose them).
        volatile = self._volatile(txn, namespace, where)
        skip = frozenset(volatile)
        # Entries of items of another owner are passed over on their value alone.
        weighted = (
            (key, owner)
            for key, owner in _prefixed(txn.cursor(db=self._dbs["index"]), prefix)
            if (not owner or self._entry_matches(where, owner)) and key[-16:] not in skip
        )
        out: list[MemoryItem] = [item for item in volatile.values() if item is not None]
        limit += len(out)
        pending: bytes | None = None
        for key, _ in weighted:
            if len(out) >= limit:
                return out
            if _weight_of(key[len(prefix) : len(prefix) + 8]) < 0:
                pending = key[-16:]
                break
            item = self._load(txn, namespace, where, key[-16:])
            if item is not None:
                out.append(item)
        if len(out) < limit:
            out.extend(
                self._newest(txn, namespace, where, limit - len(out), skip_weighted=True, skip=skip)
            )
        negatives = itertools.chain(
            [pending] if pending is not None else [], (k[-16:] for k, _ in weighted)
        )
        for raw_id in negatives:
            if len(out) >= limit:
                break
            item = self._load(txn, namespace, where, raw_id)
            if item is not None:
                out.append(item)
        return out

    def _volatile(self, txn, namespace: str, where: ItemFilter) -> dict[bytes, MemoryItem | None]:
        """The items with feedback of which a remember expired by the read's moment,
        as the read sees them (None: it sees none of their remembers)."""
        if where.now_ms is None:
            return {}
        prefix = b"X" + _scope(where.tenant, namespace)
        out: dict[bytes, MemoryItem | None] = {}
        for key, _ in _prefixed(txn.cursor(db=self._dbs["index"]), prefix):
            if int.from_bytes(key[len(prefix) : len(prefix) + 8], "big") > where.now_ms:
                break  # none of its remembers expired yet: its entries still hold
            raw_id = key[-16:]
            out[raw_id] = self._load(txn, namespace, where, raw_id)
        return out

    def fetch(
        self, namespace: str, key: str, *, tenant: str = "", version: int | None = None
    ) -> NamedItem | None:
        """A named item now, or as it was after ``version`` writes; None if absent then."""
        _texts(("namespace", namespace), ("key", key), ("tenant", tenant))
        if version is not None:
            validate_version(version, "version")
        db_key = _scope(tenant, namespace) + _part(key)
        with self._read() as txn:
            if version is None:
                raw = txn.get(db_key, db=self._dbs["named"])
            else:
                raw = txn.get(db_key + _SEP + version.to_bytes(8, "big"), db=self._dbs["versions"])
            if raw is None:
                return None
            # Decoded inside the read: damaged bytes are its error (see `_read`).
            state = (
                _named_decoder.decode(raw) if version is None else _version_decoder.decode(raw)[0]
            )
        return state.to_item(key)

    def named_items(
        self, namespace: str, *, tenant: str = "", prefix: str = "", limit: int | None = None
    ) -> list[NamedItem]:
        """The present named items of a namespace whose key starts with ``prefix``, by
        key; the first ``limit`` of them when given. A key of up to `_MAX_PART` bytes is
        its own part of the view's key, so the keys with a prefix are one range of them,
        in key order (UTF-8 bytes sort as code points do): read only until ``limit`` are
        found. A longer one is a digest, and those (under `_HASHED`, one range too) are
        all read and their keys checked: a LangGraph store's search of one namespace
        reads that namespace, not the store."""
        _texts(("namespace", namespace), ("prefix", prefix), ("tenant", tenant))
        if limit is not None:
            _check_count(limit, "limit")
        scope = _scope(tenant, namespace)
        wanted = prefix.encode("utf-8", "surrogatepass")
        hashed = scope + _HASHED
        plain: bytes | None = scope
        if wanted:
            fits = len(wanted) <= _MAX_PART and not wanted.startswith(_HASHED)
            plain = scope + wanted if fits else None
        out = []
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs["named"])
            for _, raw in _prefixed(cursor, hashed):
                state = _named_decoder.decode(raw)
                if state.body is not None and state.name.startswith(prefix):
                    out.append(state.to_item())
            found = 0
            for db_key, raw in _prefixed(cursor, plain) if plain is not None else ():
                if limit is not None and found >= limit:
                    break  # every later plain key sorts after those found
                if db_key.startswith(hashed):
                    continue  # read above
                state = _named_decoder.decode(raw)
                if state.body is not None and state.name.startswith(prefix):
                    out.append(state.to_item())
                    found += 1
        out.sort(key=lambda item: item.key)
        return out if limit is None else out[:limit]

    def named_history(self, namespace: str, key: str, *, tenant: str = "") -> list[HistoryEntry]:
        _texts(("namespace", namespace), ("key", key), ("tenant", tenant))
        db_key = _scope(tenant, namespace) + _part(key) + _SEP
        with self._read() as txn:
            return [
                _version_decoder.decode(v)[1]
                for _, v in _prefixed(txn.cursor(db=self._dbs["versions"]), db_key)
            ]

    def item_history(
        self, namespace: str, raw_id: bytes, *, tenant: str = ""
    ) -> list[HistoryEntry]:
        """Every record that touched an item, in position-key order."""
        _texts(("namespace", namespace), ("tenant", tenant))
        if not isinstance(raw_id, bytes):
            raise InvalidInput(f"an item's raw id is bytes (MemoryId.bytes), got {shown(raw_id)}")
        db_key = _scope(tenant, namespace) + raw_id
        with self._read() as txn:
            entries = [
                _history_decoder.decode(v)
                for k, v in _prefixed(txn.cursor(db=self._dbs["audit"]), db_key)
                if len(k) == len(db_key) + 12
            ]
            raw = txn.get(db_key, db=self._dbs["items"])
            state = _decoded_state(raw) if raw is not None else None
            topic = self._binding(txn)[0]
        if state is not None:
            # The remembers the item keeps are their own audit lines.
            entries.extend(remembered_entry(kept, topic) for kept in state.remembers.values())
        entries.sort(key=lambda e: (e.append_time_ms, e.partition, e.offset))
        # The folder may visit partitions in any order; number versions by position key.
        return [msgspec.structs.replace(e, version=i + 1) for i, e in enumerate(entries)]

    def stats(self, *, aside_limit: int = 100) -> ViewStats:
        """The view's watermark, counts, and its first ``aside_limit`` set-aside records."""
        _check_count(aside_limit, "aside_limit")
        topic, generation = self.topic()
        with self._read() as txn:
            # Only the records shown are read: a topic flooded with bad records must not
            # make a look at the view read them all.
            set_aside = txn.stat(self._dbs["aside"])["entries"]
            aside = [
                _aside_decoder.decode(v)
                for _, v in itertools.islice(
                    _prefixed(txn.cursor(db=self._dbs["aside"]), b""),
                    min(aside_limit, set_aside),
                )
            ]
            items = txn.stat(self._dbs["items"])["entries"]
            named = sum(
                1
                for _, v in _prefixed(txn.cursor(db=self._dbs["named"]), b"")
                if _named_decoder.decode(v).body is not None
            )
        return ViewStats(
            path=self.path,
            topic=topic,
            generation=generation,
            watermark=self.watermark(),
            items=items,
            named_items=named,
            set_aside=set_aside,
            set_aside_records=aside,
        )

    def search_snapshots(self) -> list[SearchSnapshot]:
        """The search index snapshots saved beside this view (none when snapshots are
        off), with how far each is behind the view."""
        if self.snapshots is None:
            return []
        with self._read() as txn:
            seq, epoch = self._changes(txn)
        return [
            SearchSnapshot(
                tenant=tenant,
                namespace=namespace,
                conversation=conversation,
                embedder=embedder,
                superseded=superseded,
                changes=saved_seq,
                behind=seq - saved_seq if saved_epoch == epoch and saved_seq <= seq else None,
            )
            for (tenant, namespace, conversation, embedder, superseded), saved_epoch, saved_seq in (
                self.snapshots.saved()
            )
        ]

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every key and value of every database, for comparing two views: what the
        view holds, not how a folder got there (the changes log and its counters)."""
        with self._read() as txn:
            out = {
                name: list(_prefixed(txn.cursor(db=self._dbs[name]), b""))
                for name in _DBS
                if name != "changes"
            }
        # The newest-first entries, not the runs they are stored in: those depend on
        # how the fold was split into transactions.
        out["index"] = [
            entry
            for key, value in out["index"]
            for entry in (entries_of_run(key, value) if key[0] == _RECENT else [(key, value)])
        ]
        out["meta"] = [(k, v) for k, v in out["meta"] if k not in _RUN_META]
        return out
