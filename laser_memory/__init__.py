"""laser-memory: long-term memory for AI agents as an append-only log with folded views.

>>> import laser_memory as lm
>>> async with lm.connect("local://./laser-data") as laser:     # doctest: +SKIP
...     memory = laser.memory("notes")
...     mid = await memory.remember("the reporter prefers email", conversation="c-1")
...     items = await memory.recall(conversation="c-1")
"""

from typing import TYPE_CHECKING

from .access import Governor, Principal, ProposedWrite
from .embedding import Embedder, WordHashEmbedder
from .errors import (
    AccessDenied,
    BackendFailed,
    BodyTooLarge,
    ConfigError,
    EmbeddingFailed,
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
    LogFull,
    LogUnavailable,
    NoView,
    PolicyDenied,
    RecordDecodeError,
    RecordTooLarge,
    RerankFailed,
    SummarizeFailed,
    TopicConflict,
    UnknownKind,
    UnknownTopic,
    UnsupportedSchemaVersion,
    ViewError,
    ViewFull,
    ViewLocked,
    ViewMismatch,
    WaitTimeout,
    WriteTimeout,
    shown,
)
from .handler import MemoryHandler, Message
from .ids import AgentId, ConversationId, MemoryId, memory_id_content
from .items import HistoryEntry, MemoryItem, NamedItem, PreparedSearch, Signal, Source
from .kinds import MemoryClass, MemoryKind, memory_kind_class, memory_kind_code
from .recall import fuse_reciprocal_rank, to_context_block
from .records import Origin, Producer
from .scope import MemoryScope
from .vector_clusters import ApproximateSearch

if TYPE_CHECKING:
    from .agent import Agent, AgentMessage, AgentTopic, Session
    from .client import ConversationContext, Laser, connect
    from .consolidation import ConsolidationReport, Consolidator, Summarizer
    from .custom import CustomMemory
    from .memory import MemoryConfig, MemoryHandle, Receipt
    from .minilm import MiniLMEmbedder
    from .periodic import ConsolidationDriver
    from .rerank import RerankedMemory, Reranker, RerankFunction
    from .retention import RetentionDriver

__version__ = "0.1.0"

# The handle and the connection sit above the folders (they fold and read views), while
# the folders import this package's lower layers (records, ids, the log). Loading them on
# first use keeps `import folders.view` from importing the handle back: imports point one
# way, records <- log <- folders <- memory handle <- cli.
_UPPER = {
    "Agent": "agent",
    "AgentMessage": "agent",
    "AgentTopic": "agent",
    "Session": "agent",
    "ConversationContext": "client",
    "Laser": "client",
    "connect": "client",
    "MemoryConfig": "memory",
    "MemoryHandle": "memory",
    "Receipt": "memory",
    "MiniLMEmbedder": "minilm",
    "RerankedMemory": "rerank",
    "RetentionDriver": "retention",
    "CustomMemory": "custom",
    "ConsolidationDriver": "periodic",
    "ConsolidationReport": "consolidation",
    "Consolidator": "consolidation",
    "Summarizer": "consolidation",
    "Reranker": "rerank",
    "RerankFunction": "rerank",
}


def __getattr__(name: str) -> object:
    module = _UPPER.get(name)
    if module is None:
        raise AttributeError(f"module 'laser_memory' has no attribute {shown(name)}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AccessDenied",
    "Agent",
    "AgentId",
    "AgentMessage",
    "AgentTopic",
    "ApproximateSearch",
    "BackendFailed",
    "BodyTooLarge",
    "ConfigError",
    "ConsolidationDriver",
    "ConsolidationReport",
    "Consolidator",
    "ConversationContext",
    "ConversationId",
    "CustomMemory",
    "Embedder",
    "EmbeddingFailed",
    "EmptyBody",
    "Governor",
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
    "LogFull",
    "LogUnavailable",
    "MemoryClass",
    "MemoryConfig",
    "MemoryHandle",
    "MemoryHandler",
    "MemoryId",
    "MemoryItem",
    "MemoryKind",
    "MemoryScope",
    "Message",
    "MiniLMEmbedder",
    "NamedItem",
    "NoView",
    "Origin",
    "PolicyDenied",
    "PreparedSearch",
    "Principal",
    "Producer",
    "ProposedWrite",
    "Receipt",
    "RecordDecodeError",
    "RecordTooLarge",
    "RerankFailed",
    "RerankFunction",
    "RerankedMemory",
    "Reranker",
    "RetentionDriver",
    "Session",
    "Signal",
    "Source",
    "SummarizeFailed",
    "Summarizer",
    "TopicConflict",
    "UnknownKind",
    "UnknownTopic",
    "UnsupportedSchemaVersion",
    "ViewError",
    "ViewFull",
    "ViewLocked",
    "ViewMismatch",
    "WaitTimeout",
    "WordHashEmbedder",
    "WriteTimeout",
    "connect",
    "fuse_reciprocal_rank",
    "memory_id_content",
    "memory_kind_class",
    "memory_kind_code",
    "to_context_block",
]
