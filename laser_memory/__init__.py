"""laser-memory: long-term memory for AI agents as an append-only log with folded views.

>>> import laser_memory as lm
>>> async with lm.connect("local://./laser-data") as laser:     # doctest: +SKIP
...     memory = laser.memory("notes")
...     mid = await memory.remember("the reporter prefers email", conversation="c-1")
...     items = await memory.recall(conversation="c-1")
"""

from .client import ConversationContext, Laser, connect
from .errors import (
    BodyTooLarge,
    ConfigError,
    EmptyBody,
    InvalidBody,
    InvalidId,
    InvalidInput,
    InvalidName,
    InvalidPatch,
    InvalidRecord,
    InvalidUrl,
    InvalidWeight,
    LaserError,
    LogClosed,
    LogError,
    LogUnavailable,
    NoView,
    RecordDecodeError,
    TopicConflict,
    UnknownKind,
    UnknownTopic,
    UnsupportedSchemaVersion,
    ViewError,
    ViewLocked,
    ViewMismatch,
    WaitTimeout,
)
from .ids import AgentId, ConversationId, MemoryId, memory_id_content
from .items import HistoryEntry, MemoryItem, NamedItem, Signal, Source
from .kinds import MemoryClass, MemoryKind, memory_kind_class, memory_kind_code
from .memory import MemoryConfig, MemoryHandle, Receipt
from .recall import fuse_reciprocal_rank, to_context_block
from .records import Origin, Producer
from .scope import MemoryScope

__version__ = "0.1.0"

__all__ = [
    "AgentId",
    "BodyTooLarge",
    "ConfigError",
    "ConversationContext",
    "ConversationId",
    "EmptyBody",
    "HistoryEntry",
    "InvalidBody",
    "InvalidId",
    "InvalidInput",
    "InvalidName",
    "InvalidPatch",
    "InvalidRecord",
    "InvalidUrl",
    "InvalidWeight",
    "Laser",
    "LaserError",
    "LogClosed",
    "LogError",
    "LogUnavailable",
    "MemoryClass",
    "MemoryConfig",
    "MemoryHandle",
    "MemoryId",
    "MemoryItem",
    "MemoryKind",
    "MemoryScope",
    "NamedItem",
    "NoView",
    "Origin",
    "Producer",
    "Receipt",
    "RecordDecodeError",
    "Signal",
    "Source",
    "TopicConflict",
    "UnknownKind",
    "UnknownTopic",
    "UnsupportedSchemaVersion",
    "ViewError",
    "ViewLocked",
    "ViewMismatch",
    "WaitTimeout",
    "connect",
    "fuse_reciprocal_rank",
    "memory_id_content",
    "memory_kind_class",
    "memory_kind_code",
    "to_context_block",
]
