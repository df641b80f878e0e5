"""The view's newest-first (``R``) index, stored in runs of entries.

An entry is ``prefix + tail``, where the prefix is ``R``, the scope and the tag, and
the tail is the item's position key and id (36 bytes), with the item's owner as its
value. The entries of one prefix are stored as *runs*: one LMDB row holds up to
`RUN` consecutive entries, keyed by the prefix and its greatest tail, its value the
msgpack pair ``(tails, owners)``: the tails joined in ascending order, and the
owners in the same order. Runs of a prefix
never overlap, so walking them in key order walks the entries in key order, and the
run that holds (or would hold) a tail is the first whose key is at or above it.

Why runs: a fold put each entry as a row of its own, and those puts (two an item, at
a hundred places in the tree) were a third of the fold. The entries of a transaction
mostly land after every entry already there, so they go as whole runs, after topping
up the prefix's last run; an entry that lands among older ones (a partition folded
behind another) and a removed one rewrite the run that holds it.

`MemoryView.dump` shows entries, not runs: how they are grouped depends on how the
fold was split into transactions, never on what the view holds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import lmdb
import msgspec

__all__ = [
    "RUN",
    "TAIL",
    "RecencyWriter",
    "entries_of_run",
    "holds_at_least",
    "newest_first",
    "prefixed_backwards",
]

#: Entries a run is written with. Small enough that a run stays within one page
#: (about 45 bytes an entry) and a read of the newest few decodes little.
RUN = 32
#: A run grown past this by entries inserted among older ones is split.
_MOST = 2 * RUN
#: The position key (20 bytes) and the id (16) that end every entry.
TAIL = 36

_decode = msgspec.msgpack.Decoder(tuple[bytes, list[bytes]]).decode
_encode = msgspec.msgpack.Encoder().encode

Pairs = list[tuple[bytes, bytes]]


def _pairs(value: bytes) -> Pairs:
    tails, owners = _decode(value)
    return [(tails[TAIL * i : TAIL * i + TAIL], owner) for i, owner in enumerate(owners)]


def _encoded(pairs: Pairs) -> bytes:
    return _encode((b"".join([tail for tail, _ in pairs]), [owner for _, owner in pairs]))


def _at_last(cursor: lmdb.Cursor, prefix: bytes) -> bool:
    """Put ``cursor`` on the last row whose key is below every key past ``prefix``'s
    (the last row under it, if there is one); False when there is no such row."""
    stripped = prefix.rstrip(b"\xff")
    if stripped and cursor.set_range(stripped[:-1] + bytes([stripped[-1] + 1])):
        return cursor.prev()
    return cursor.last()


def _key(cursor: lmdb.Cursor) -> bytes:
    """The key under ``cursor``: bytes, as the view's environment is opened (its stubs
    say a buffer may come)."""
    return cursor.key()  # type: ignore[return-value]


def prefixed_backwards(cursor: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every row under ``prefix``, last key first."""
    if not _at_last(cursor, prefix):
        return
    for key, value in cursor.iterprev():
        if not key.startswith(prefix):
            return
        yield key, value


def newest_first(cursor: lmdb.Cursor, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The entries (key, owner) under ``prefix``, greatest key first."""
    for _, value in prefixed_backwards(cursor, prefix):
        tails, owners = _decode(value)
        for i in range(len(owners) - 1, -1, -1):
            yield prefix + tails[TAIL * i : TAIL * i + TAIL], owners[i]


def holds_at_least(cursor: lmdb.Cursor, prefix: bytes, count: int) -> bool:
    """Whether there are at least ``count`` entries under ``prefix``; reads about
    ``count / RUN`` runs at most."""
    if not cursor.set_range(prefix):
        return False
    seen = 0
    for key, value in cursor:
        if not key.startswith(prefix):
            return False
        seen += len(_decode(value)[1])
        if seen >= count:
            return True
    return False


def entries_of_run(key: bytes, value: bytes) -> Pairs:
    """The entries (key, owner) a run row holds, in key order."""
    prefix = key[:-TAIL]
    return [(prefix + tail, owner) for tail, owner in _pairs(value)]


class RecencyWriter:
    """Changes the ``R`` entries within one write transaction, through ``cursor`` (on the
    index database). New items' entries are gathered with `add` and written by `flush`,
    which must run before any `put` or `delete` of the transaction, since those may
    touch the gathered entries."""

    __slots__ = ("_cursor", "pending")

    def __init__(self, cursor: lmdb.Cursor) -> None:
        self._cursor = cursor
        #: Gathered tails by listing: the prefixes an item is listed under and the
        #: owner its entries carry (one cached tuple per owner, from the view). The
        #: fold's hot path appends to them directly: a dict lookup and an append an item.
        self.pending: dict[tuple[tuple[bytes, ...], bytes], list[bytes]] = {}

    def add(self, listing: tuple[tuple[bytes, ...], bytes], tail: bytes) -> None:
        """Gather the entries of a new item: ``tail`` under each of ``listing``'s
        prefixes, with its owner. No entry gathered or there may have that key."""
        tails = self.pending.get(listing)
        if tails is None:
            self.pending[listing] = [tail]
        else:
            tails.append(tail)

    def flush(self) -> None:
        """Write the gathered entries."""
        by_prefix: dict[bytes, dict[bytes, bytes]] = {}
        for (prefixes, owner), tails in self.pending.items():
            for prefix in prefixes:
                entries = by_prefix.get(prefix)
                if entries is None:
                    by_prefix[prefix] = dict.fromkeys(tails, owner)
                else:
                    entries.update(dict.fromkeys(tails, owner))
        self.pending.clear()
        cursor = self._cursor
        put = cursor.put
        for prefix, entries in by_prefix.items():
            order = sorted(entries)
            start = 0
            # The prefix's last run, read as it is stored (no pairs made: most flushes
            # only top it up, and a fold of many owners tops up one a transaction each).
            last_key = _key(cursor) if _at_last(cursor, prefix) else b""
            if last_key.startswith(prefix):
                greatest = last_key[-TAIL:]
                if order[0] <= greatest:
                    # Entries that land among the ones there (sorted, they come first):
                    # each run they land in is rewritten once, with all its new entries.
                    while start < len(order) and order[start] <= greatest:
                        cursor.set_range(prefix + order[start])
                        run_key = cursor.key()
                        end = bisect.bisect_right(order, run_key[-TAIL:], start)
                        self._merge(
                            prefix,
                            run_key,
                            _pairs(cursor.value()),
                            [(tail, entries[tail]) for tail in order[start:end]],
                        )
                        start = end
                    if start == len(order):
                        continue
                    # The merges may have split the last run: find it again.
                    _at_last(cursor, prefix)
                last_tails, last_owners = _decode(cursor.value())
                room = RUN - len(last_owners)
                if room > 0:
                    # Top the last run up, so a fold of small transactions still writes
                    # full runs. Every new entry is above it: the run's bytes go on.
                    cursor.delete()
                    tails = order[start : start + room]
                    last_owners.extend([entries[t] for t in tails])
                    put(prefix + tails[-1], _encode((last_tails + b"".join(tails), last_owners)))
                    start += len(tails)
            for first in range(start, len(order), RUN):
                tails = order[first : first + RUN]
                put(prefix + tails[-1], _encode((b"".join(tails), [entries[t] for t in tails])))

    def put(self, key: bytes, owner: bytes) -> None:
        """Add the entry ``key`` (or give it a new owner)."""
        prefix, tail = key[:-TAIL], key[-TAIL:]
        cursor = self._cursor
        if cursor.set_range(key) and cursor.key().startswith(prefix):
            self._merge(prefix, cursor.key(), _pairs(cursor.value()), [(tail, owner)])
            return
        # Above every run of the prefix: it ends the last one, or starts a run.
        last_key, last = self._last_run(prefix)
        if last_key is not None and len(last) < RUN:
            cursor.set_key(last_key)
            cursor.delete()
            cursor.put(key, _encoded([*last, (tail, owner)]))
        else:
            cursor.put(key, _encoded([(tail, owner)]))

    def delete(self, key: bytes) -> None:
        """Remove the entry ``key``; one that is not there is no error."""
        prefix, tail = key[:-TAIL], key[-TAIL:]
        cursor = self._cursor
        if not cursor.set_range(key):
            return
        run_key = cursor.key()
        if not run_key.startswith(prefix):
            return
        pairs = _pairs(cursor.value())
        index = bisect.bisect_left(pairs, (tail,))
        if index == len(pairs) or pairs[index][0] != tail:
            return
        del pairs[index]
        if not pairs:
            cursor.delete()
        elif run_key[-TAIL:] == tail:  # its greatest entry: the run's key changes
            cursor.delete()
            cursor.put(prefix + pairs[-1][0], _encoded(pairs))
        else:
            cursor.put(run_key, _encoded(pairs))

    def _last_run(self, prefix: bytes) -> tuple[bytes | None, Pairs]:
        cursor = self._cursor
        if _at_last(cursor, prefix) and _key(cursor).startswith(prefix):
            return _key(cursor), _pairs(cursor.value())
        return None, []

    def _merge(self, prefix: bytes, run_key: bytes, pairs: Pairs, new: Pairs) -> None:
        """Rewrite the run at ``run_key`` (its entries ``pairs``) with ``new`` added, none
        above its greatest entry; split in runs of `RUN` once past `_MOST` entries."""
        merged = dict(pairs)
        merged.update(new)
        entries = sorted(merged.items())
        put = self._cursor.put
        if len(entries) > _MOST:
            # The last part keeps the run's key: its greatest entry is the run's.
            while len(entries) > RUN:
                part, entries = entries[:RUN], entries[RUN:]
                put(prefix + part[-1][0], _encoded(part))
        put(run_key, _encoded(entries))
