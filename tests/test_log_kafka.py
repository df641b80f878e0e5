"""The conformance suite over a real Apache Kafka broker."""

from __future__ import annotations

import pytest

from log_conformance import LogConformance

pytestmark = pytest.mark.kafka


class TestKafkaLog(LogConformance):
    @pytest.fixture
    def log_url(self, kafka_bootstrap: str) -> str:
        return f"kafka://{kafka_bootstrap}"
