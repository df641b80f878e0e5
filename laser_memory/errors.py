"""Every error laser-memory raises on purpose.

The tree::

    LaserError
    ├── ConfigError                 bad URL, bad option value, unusable setting
    │   └── InvalidUrl
    ├── InvalidInput                refused before anything was written (also a ValueError)
    │   ├── InvalidId
    │   ├── UnknownKind
    │   ├── InvalidBody
    │   │   ├── EmptyBody
    │   │   └── BodyTooLarge
    │   ├── InvalidWeight
    │   ├── InvalidName             namespace, key, topic, stream, scope field
    │   ├── InvalidPatch
    │   └── InvalidRecord           a record the caller built cannot go on the log
    │       └── RecordTooLarge      over the record cap, or over what the topic takes
    ├── EmbeddingFailed             the embedder raised or returned bad vectors; nothing written
    ├── RerankFailed                the reranker raised or returned bad scores
    ├── SummarizeFailed             a consolidation's summarizer raised or returned no body
    ├── BackendFailed               a custom memory backend raised or answered nonsense
    ├── AccessDenied                outside the principal's grants or tenant; nothing done
    ├── PolicyDenied                the governor refused a write (or failed); nothing written
    ├── RecordDecodeError           bytes on the log that are not a record we can read
    │   └── UnsupportedSchemaVersion
    ├── LogError
    │   ├── LogClosed               a log used before start() or after stop(), a view after close()
    │   ├── UnknownTopic
    │   ├── TopicConflict           a topic exists with another shape or settings
    │   ├── LogUnavailable          the storage or broker cannot be reached
    │   ├── LogFull                 the embedded log reached its LMDB map size; nothing written
    │   └── WriteTimeout            a write passed its deadline: it may or may not have landed
    ├── ViewError
    │   ├── ViewLocked              another folder is writing this view
    │   ├── ViewMismatch            the view folds another topic, generation or format
    │   ├── ViewFull                the view reached its LMDB map size
    │   └── NoView                  a managed read without a view, or a view that is not there
    └── WaitTimeout                 a wait for a position ran out of time

Each message says what was wrong and what to do about it.
"""

from __future__ import annotations

import re
import reprlib

__all__ = [
    "AccessDenied",
    "BackendFailed",
    "BodyTooLarge",
    "ConfigError",
    "EmbeddingFailed",
    "EmptyBody",
    "InvalidBody",
    "InvalidId",
    "InvalidInput",
    "InvalidName",
    "InvalidPatch",
    "InvalidRecord",
    "InvalidUrl",
    "InvalidWeight",
    "LaserError",
    "LogClosed",
    "LogError",
    "LogFull",
    "LogUnavailable",
    "NoView",
    "PolicyDenied",
    "RecordDecodeError",
    "RecordTooLarge",
    "RerankFailed",
    "SummarizeFailed",
    "TopicConflict",
    "UnknownKind",
    "UnknownTopic",
    "UnsupportedSchemaVersion",
    "ViewError",
    "ViewFull",
    "ViewLocked",
    "ViewMismatch",
    "WaitTimeout",
    "WriteTimeout",
]


class LaserError(Exception):
    """Base of every error laser-memory raises on purpose."""


class ConfigError(LaserError):
    """A setting cannot be used as given."""


class InvalidUrl(ConfigError, ValueError):
    """A log URL is not ``local://PATH`` or ``kafka://host:port[,host:port]``."""


class InvalidInput(LaserError, ValueError):
    """The caller's input was refused; nothing was written."""


class InvalidId(InvalidInput):
    """A memory id is not 16 bytes or not in its printed form."""


class UnknownKind(InvalidInput):
    """A memory kind word or code that laser-memory does not define."""


class InvalidBody(InvalidInput):
    """A body that no record can carry."""


class EmptyBody(InvalidBody):
    """An empty body: there is nothing to remember."""


class BodyTooLarge(InvalidBody):
    """A body over the configured maximum size."""


class InvalidWeight(InvalidInput):
    """A feedback weight that is not a finite number."""


class InvalidName(InvalidInput):
    """A namespace, key, topic, stream or scope value that a record cannot hold."""


class InvalidPatch(InvalidInput):
    """A JSON merge patch that is not a JSON object (or not JSON at all)."""


class InvalidRecord(InvalidInput):
    """A record the caller built that cannot be encoded onto the log."""


class EmbeddingFailed(LaserError):
    """The embedder raised, or returned vectors of the wrong shape or with non-finite
    values; nothing was written."""


class RerankFailed(LaserError):
    """The reranker raised, or did not return one finite score per text."""


class BackendFailed(LaserError):
    """A custom memory backend raised, or returned something the API cannot use."""


class AccessDenied(LaserError, PermissionError):
    """The caller's principal has no grant for this, or the call names a tenant other
    than the one its handle is bound to. Nothing was read or written."""


class PolicyDenied(LaserError, PermissionError):
    """The governor refused a proposed write, or failed deciding (a governor that
    raises refuses). Nothing of the batch was written."""


class SummarizeFailed(LaserError):
    """A consolidation's summarizer raised, or returned no body; nothing was written."""


class RecordTooLarge(InvalidRecord):
    """An encoded record over the configured cap, or over what its topic accepts."""


class RecordDecodeError(LaserError):
    """Bytes read from the log are not a record this version can read.

    Folders never stop on this error: they set the record aside with its
    position and this error's message.
    """


class UnsupportedSchemaVersion(RecordDecodeError):
    """A record written by a newer laser-memory with a schema version we do not know."""


class LogError(LaserError):
    """A log operation failed."""


class LogClosed(LogError):
    """A log was used before ``start()`` or after ``stop()``, or a managed view after
    ``close()`` (a connection's ``stop()`` closes its view)."""


class UnknownTopic(LogError):
    """The topic does not exist on this log."""


class TopicConflict(LogError):
    """A topic exists already with a different shape (for example partition count)."""


class LogUnavailable(LogError):
    """The log's storage or broker cannot be reached."""


class LogFull(LogError):
    """The embedded log reached its LMDB map size: nothing of the write was written.
    Open it with a larger ``LocalLogConfig.map_size`` (the map is sparse on disk)."""


class WriteTimeout(LogError, TimeoutError):
    """A write was not acknowledged within its deadline. It may or may not have landed:
    check with a read before writing it again (a retried remember is a second item
    unless it uses a content id)."""


class ViewError(LaserError):
    """A managed view cannot be used as asked."""


class ViewLocked(ViewError):
    """Another folder holds the view's lock; one folder writes a view at a time."""


class ViewMismatch(ViewError):
    """The view folds another topic, or an earlier generation of this one."""


class ViewFull(ViewError):
    """The view's LMDB map is full; the folder stops until restarted with a larger map."""


class NoView(ViewError, ConfigError):
    """A managed read (recall with folded=False, fetch by version) without a view, or a
    view path where no view exists."""


class WaitTimeout(LaserError, TimeoutError):
    """Waiting for the log or a view to reach a position ran out of time."""


# A caller's value as a message shows it. The repr of a value nested thousands deep
# raised RecursionError where the message was made, and a huge one made a huge message:
# both hid the refusal the message was for.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 4
_SHOWN.maxstring = _SHOWN.maxother = 200
_SHOWN.maxlong = 100


def shown(value: object) -> str:
    """``repr(value)`` for an error message: cut short past a few levels of nesting and
    a few hundred characters, and never raising.

    >>> shown("x" * 1000)[:10]
    "'xxxxxxxxx"
    """
    try:
        return _SHOWN.repr(value)
    except Exception:  # a repr that raises, where reprlib does not catch it
        return f"<{type(value).__name__}>"


#: Control characters (C0 with newline and tab, DEL, C1): what a terminal acts on rather
#: than shows. With them the bidirectional controls (U+061C, U+200E-U+200F, U+202A-U+202E,
#: U+2066-U+2069), which reorder how the rest of a line is shown (an id or an operation
#: read backwards, the "Trojan Source" trick), and the line and paragraph separators
#: (U+2028, U+2029) some viewers break a line at.
_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with its control characters escaped as a repr escapes them (``\\n``,
    ``\\x1b``, ``\\u202e``), for text a producer wrote that is printed to a person: a
    newline could forge a line of a listing, an escape sequence drive the terminal, a
    bidirectional override show the rest of the line reversed.

    >>> printable("ok\\n\\x1b[2J")
    'ok\\\\n\\\\x1b[2J'
    """
    if _CONTROL_CHARACTERS.search(text):
        return _CONTROL_CHARACTERS.sub(lambda found: repr(found.group())[1:-1], text)
    return text
