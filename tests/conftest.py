from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator

import pytest

from kafka_broker import kafka_broker

if os.environ.get("LASER_TEST_EAGER_TASKS") == "1":
    # Every event loop the tests make starts its tasks eagerly (Python 3.12+), as a
    # user's loop may: a task's first step then runs inside create_task, not a turn later
    # (`.ci/run` runs the suite so on the newest Python it finds).
    if sys.version_info < (3, 12):
        raise pytest.UsageError("LASER_TEST_EAGER_TASKS needs Python 3.12 or later")
    _new_event_loop = asyncio.DefaultEventLoopPolicy.new_event_loop

    def _eager_event_loop(self: asyncio.AbstractEventLoopPolicy) -> asyncio.AbstractEventLoop:
        loop = _new_event_loop(self)
        loop.set_task_factory(asyncio.eager_task_factory)
        return loop

    asyncio.DefaultEventLoopPolicy.new_event_loop = _eager_event_loop


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
