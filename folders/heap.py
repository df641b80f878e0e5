"""Giving the heap's free pages back to the system after large, short-lived
allocations (glibc's ``malloc_trim``, where the C library has it).

A search over a million entries makes and frees score arrays of 8 MB each. glibc maps a
large block apart and unmaps it when freed, until the first such block is freed: then it
raises its threshold for mapping blocks apart to that size, and later blocks come from
the heap, which keeps their pages once they are freed. A reader at a million items held
98 MB of anonymous memory after a hybrid recall, 61 MB once trimmed. Trimming takes 1-3
ms there, so a search trims only when the process's anonymous memory grew by
`TRIM_AFTER_GROWTH` since the last trim. Reading it takes about 7 microseconds, a fifth
of a keyword recall over 10,000 items, so only searches that make arrays over every
entry of a large index read it (`give_back_after_search`): searches over 100,000 entries
grow it by a few MB.
"""

from __future__ import annotations

import ctypes
import functools
import os

__all__ = [
    "TRIM_AFTER_GROWTH",
    "TRIM_FROM_ENTRIES",
    "anonymous_bytes",
    "give_back_after_search",
    "give_back_freed_memory",
    "give_back_if_grown",
]

#: Growth of anonymous memory since the last trim past which `give_back_if_grown` trims.
TRIM_AFTER_GROWTH = 16 << 20
#: Entries of an index from which its semantic and hybrid searches check the growth: their
#: score arrays are 8 bytes an entry, 1.6 MB each at 200,000.
TRIM_FROM_ENTRIES = 200_000
# Anonymous memory right after the last trim (or the lowest seen since).
_after_trim = [0]
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # not glibc: nothing to call
        return None


def anonymous_bytes() -> int | None:
    """This process's resident anonymous memory (resident less file-backed and shared,
    from ``/proc/self/statm``), or None where there is no such file."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def give_back_freed_memory() -> None:
    """Give the heap's free pages back to the system, where the C library can. Building
    an index frees millions of small objects at once; without this the process keeps
    the pages they sat on, and a reader that built its index holds the build's peak for
    as long as it runs."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    _after_trim[0] = anonymous_bytes() or 0


def give_back_if_grown() -> None:
    """`give_back_freed_memory` if anonymous memory grew by `TRIM_AFTER_GROWTH` since
    the last trim (or since it was lowest): after a search."""
    now = anonymous_bytes()
    if now is None or _malloc_trim() is None:
        return
    if now < _after_trim[0]:
        _after_trim[0] = now
    elif now - _after_trim[0] >= TRIM_AFTER_GROWTH:
        give_back_freed_memory()


def give_back_after_search(mode: str, entries: int) -> None:
    """After a search of ``mode`` (``keyword``, ``semantic``, ``hybrid``) over an index of
    ``entries``: `give_back_if_grown` if it made arrays over every entry of a large
    index (a keyword search reads its terms' postings, not every entry)."""
    if mode != "keyword" and entries >= TRIM_FROM_ENTRIES:
        give_back_if_grown()
