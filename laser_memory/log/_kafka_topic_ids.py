"""Read Kafka topic ids, which aiokafka's metadata request (v5 at most) does not carry.

A topic id is what tells a recreated topic from the original one of the same
name, so `KafkaLog` reports it as the topic's generation. It arrived in
Metadata v10; this module adds just the v12 request and response (Kafka 3.1+).
"""

from __future__ import annotations

import uuid
from io import BytesIO

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

__all__ = ["TopicIdsRequest", "topic_ids_from"]


class _Uuid(AbstractType[bytes]):
    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


class _MetadataResponseV12(Response):
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", _Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _MetadataRequestV12(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = _MetadataResponseV12
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", _Uuid),
                ("name", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class TopicIdsRequest(Request[_MetadataRequestV12]):
    """Metadata for the named topics, including their ids; never creates a topic."""

    API_KEY = 3

    def __init__(self, topics: list[str]):
        self._topics = topics

    def build(self, request_struct_class: type[_MetadataRequestV12]) -> _MetadataRequestV12:
        return request_struct_class(
            [(bytes(16), name, {}) for name in self._topics], False, False, {}
        )


def topic_ids_from(response: Response) -> dict[str, tuple[int, str, int]]:
    """topic name -> (error code, topic id as text, partition count)."""
    out = {}
    for error_code, name, topic_id, _internal, partitions, _ops, _tags in response.topics:
        out[name] = (error_code, str(uuid.UUID(bytes=topic_id)), len(partitions))
    return out
