"""Text a hostile caller builds: a str subclass whose own methods lie about it."""

from __future__ import annotations


class LyingText(str):
    """Text that claims to equal every string, and hashes as "c1" does: a cache of
    checked names that asked its own equality or hash would take it for "c1"."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return hash("c1")
