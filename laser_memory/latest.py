"""What long-running workers keep of what went wrong: the latest entries, bounded.

A driver, a handler or an agent that fails on every pass or message for weeks kept every
failure, and each failure holds its traceback, the frames it passed through and what
they held (a message's payload, a batch of records): memory grew without end. Now each
keeps the latest `KEPT` failures, and counts them all.

>>> failures = Latest()
>>> for n in range(150):
...     failures.keep(ValueError(n))
>>> len(failures), failures.total, str(failures[0])
(100, 150, '50')
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["KEPT", "Latest"]

T = TypeVar("T")

#: How many entries a `Latest` keeps.
KEPT = 100


class Latest(list[T], Generic[T]):
    """A list of the latest `KEPT` entries, oldest first (it compares, indexes and
    iterates as a list); ``total`` counts every entry ever kept, the dropped ones too."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def keep(self, entry: T) -> None:
        """Add ``entry`` as the latest, dropping the oldest past `KEPT`."""
        self.total += 1
        self.append(entry)
        if len(self) > KEPT:
            del self[0]
