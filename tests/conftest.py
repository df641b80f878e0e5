from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kafka_broker import kafka_broker


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Kafka broker's bootstrap address, shared by the whole session."""
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"
