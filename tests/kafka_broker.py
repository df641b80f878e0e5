"""Where the tests find a real Apache Kafka broker.

In order: ``LASER_KAFKA_BOOTSTRAP`` names an existing broker; else, where a
Docker engine answers, testcontainers starts ``apache/kafka``; else
``docker/kafka-local`` starts one from the broker's Maven artifacts. A broker
that cannot be had is an error, never a skip: the Kafka half of the suite must
run.
"""

from __future__ import annotations

import contextlib
import os
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


@contextlib.contextmanager
def _kafka_local_broker(workdir: Path) -> Iterator[str]:
    script = ROOT / "docker" / "kafka-local"
    started = subprocess.run(
        ["bash", str(script), "start", "--dir", str(workdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        raise RuntimeError(
            "could not start a Kafka broker with docker/kafka-local (needs Java 17+ and "
            "Maven), and LASER_KAFKA_BOOTSTRAP names none:\n" + started.stderr[-4000:]
        )
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(
            ["bash", str(script), "stop", "--dir", str(workdir)], capture_output=True, check=False
        )


@contextlib.contextmanager
def kafka_broker(workdir: Path) -> Iterator[str]:
    """Yield the bootstrap address of a real broker for the test session."""
    existing = os.environ.get("LASER_KAFKA_BOOTSTRAP")
    if existing:
        yield existing
    elif _docker_engine_answers():
        with _testcontainers_broker() as bootstrap:
            yield bootstrap
    else:
        with _kafka_local_broker(workdir) as bootstrap:
            yield bootstrap
