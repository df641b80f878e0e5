"""The conformance suite over the embedded LMDB log, plus what only it promises."""

from __future__ import annotations

import pytest
from log_conformance import LogConformance


class TestLocalLog(LogConformance):
    @pytest.fixture
    def log_url(self, tmp_path) -> str:
        return f"local://{tmp_path / 'log'}"
