"""Kafka's default partitioner, shared by both logs.

A keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions``, exactly as
the Java client and aiokafka place it, so a reader knows which partition holds
a conversation without asking the log.
"""

from __future__ import annotations

import os

from aiokafka.partitioner import murmur2

__all__ = ["murmur2", "partition_for"]


#: murmur2 of keys already placed: keys are conversations and namespaces, few and
#: repeated, and the hash in pure Python costs more than the rest of an append.
_HASHES: dict[bytes, int] = {}
_HASHES_KEPT = 16_384


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition of a key; a record without a key goes to a random partition."""
    if key is None:
        return int.from_bytes(os.urandom(4), "big") % partitions
    if type(key) is not bytes:
        key = bytes(key)
    hashed = _HASHES.get(key)
    if hashed is None:
        hashed = murmur2(key) & 0x7FFFFFFF
        if len(_HASHES) >= _HASHES_KEPT:
            _HASHES.clear()
        _HASHES[key] = hashed
    return hashed % partitions
