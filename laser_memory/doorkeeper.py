"""A doorkeeper for caches: once a cache overflows, keep only what was met before.

The managed view's fold caches what an owner's records share (its keys, its encoded
parts, its header set), because owners repeat. Some do not: a conversation of one item,
one of a hundred thousand tenants. Cached anyway, each such owner cost the cache an entry
it never used, and the garbage collector a walk over every entry at each full collection:
a fold of a conversation per item spent a fifth of its time in the collector, and one of
a hundred thousand tenants of one item each a quarter of its time in the caches.

Each such cache keeps a value through its `Doorkeeper` (`Doorkeeper.keep`). Until the cache first
overflows (cleared when full), it keeps everything, as it did, and the doorkeeper notes
nothing: ten thousand tenants whose records come again and again fit, and are kept at
their first sighting. From then on it keeps a value only for a key met before. (The
writes' caches, the checked scopes and the in-process fold's shared scopes keep
everything: there, noting every new owner cost more than it saved.)

>>> seen = Doorkeeper()
>>> seen.met_before(("acme", "notes"))
False
>>> seen.met_before(("acme", "notes"))
True

`cached_when_repeated` is `functools.lru_cache`'s place for a function whose arguments
often come once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["Doorkeeper", "cached_when_repeated"]

_Function = TypeVar("_Function", bound=Callable[..., Any])
_MISSING = object()
_U64 = (1 << 64) - 1


class Doorkeeper:
    """Whether a key was probably met lately: a Bloom filter of the keys noted, in
    ``bits`` bits and no objects, emptied once it has noted ``bits // 8`` keys.

    Each key sets two bits; a key is met when both of its bits are set. The answer is
    approximate both ways, which a cache can afford: a new key whose bits others set
    is taken for met (kept at once, as without a doorkeeper: at most about one in
    twenty when the filter is fullest), and a key met before the filter was last
    emptied is taken for new (kept a sighting later). Keys never take each other's
    place, so keys that keep coming back are all let in, however many (a filter of
    one slot a key lost two keys of each colliding pair for good: one tenant in seven
    of ten thousand was never cached). It holds no Python objects, so the garbage
    collector never walks it.
    """

    __slots__ = ("_bits", "_engaged", "_mask", "_noted", "_room")

    def __init__(self, bits: int = 1 << 19) -> None:
        if bits < 8 or bits & (bits - 1):
            raise ValueError(f"bits must be a power of two, 8 or more, not {bits!r}")
        self._bits = bytearray(bits // 8)
        self._mask = bits - 1
        self._noted = 0
        self._room = bits // 8
        self._engaged = False

    def met_before(self, key: Hashable) -> bool:
        """Note ``key`` as met; True when it (probably) was already."""
        mixed = hash(key)
        if type(key) is not bytes and type(key) is not str:
            # Mixed by SipHash, as bytes and text hash already: Python's hashes of ints
            # are the ints (ids are addresses, alike in their low bits) and of tuples of
            # small ints have structure that a plain multiply left in the bits taken (5%
            # of new keys taken for met, not 2%). murmur3's finaliser written in Python
            # mixed as well and cost 0.3 us a key, eight operations on big ints; a fold
            # of a tenant per item asks five times a record.
            mixed = hash(mixed.to_bytes(8, "little", signed=True))
        mixed &= _U64
        first = (mixed >> 32) & self._mask
        second = mixed & self._mask
        bits = self._bits
        if bits[first >> 3] >> (first & 7) & 1 and bits[second >> 3] >> (second & 7) & 1:
            return True
        bits[first >> 3] |= 1 << (first & 7)
        bits[second >> 3] |= 1 << (second & 7)
        self._noted += 1
        if self._noted >= self._room:
            self._bits = bytearray(len(bits))
            self._noted = 0
        return False

    def keep(self, cache: dict, key: Hashable, value: object, limit: int) -> None:
        """Put ``value`` under ``key`` into ``cache`` (a dict its owner reads directly),
        clearing it when it holds ``limit`` entries. Until a cache kept through this
        doorkeeper first overflows, everything is kept and nothing noted (a cache that
        never overflows pays nothing); from then on only keys met before.

        >>> cache, seen = {}, Doorkeeper()
        >>> seen.keep(cache, "a", 1, limit=1); seen.keep(cache, "b", 2, limit=1); cache
        {'b': 2}
        >>> seen.keep(cache, "c", 3, limit=1); cache  # new since: not kept
        {'b': 2}
        """
        if self._engaged and not self.met_before(key):
            return
        if len(cache) >= limit:
            cache.clear()
            self._engaged = True
        cache[key] = value


def cached_when_repeated(maxsize: int) -> Callable[[_Function], _Function]:
    """Cache a pure function of hashable positional arguments, at most ``maxsize``
    results (all dropped when full: what repeats comes back at once), and once full,
    only results of arguments met before (see `Doorkeeper`). A hit costs about 15 ns
    more than `functools.lru_cache`'s; past the cache's size, arguments met once cost
    no entry.

    >>> @cached_when_repeated(maxsize=1024)
    ... def prefix(tenant: str) -> bytes:
    ...     return tenant.encode() + b"/"
    >>> prefix("acme"), prefix("acme"), prefix.cache_len()
    (b'acme/', b'acme/', 1)
    """

    def decorate(function: _Function) -> _Function:
        kept: dict[tuple, Any] = {}
        met = Doorkeeper()
        get = kept.get

        @functools.wraps(function)
        def cached(*args: Any) -> Any:
            value = get(args, _MISSING)
            if value is _MISSING:
                value = function(*args)
                met.keep(kept, args, value, maxsize)
            return value

        cached.cache_clear = kept.clear  # type: ignore[attr-defined]
        cached.cache_len = kept.__len__  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return decorate
