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


@pytest.fixture(params=["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def any_log_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """The URL of each log in turn: the embedded log, then a real Kafka broker."""
    if request.param == "local":
        return f"local://{tmp_path / 'log'}"
    return f"kafka://{request.getfixturevalue('kafka_bootstrap')}"


@pytest.fixture
def stream_name() -> str:
    return f"s{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def laser(any_log_url: str, stream_name: str):
    """A started connection on a fresh stream whose agent topics exist."""
    import laser_memory as lm

    async with lm.connect(any_log_url, stream=stream_name) as connection:
        await connection.bootstrap(partitions=4)
        yield connection
