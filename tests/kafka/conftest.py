"""The Kafka tier's set-up: the shared event samples (tests/schemas) importable from here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

_SCHEMA_TESTS = str(Path(__file__).resolve().parents[1] / "schemas")
if _SCHEMA_TESTS not in sys.path:
    sys.path.insert(0, _SCHEMA_TESTS)


@pytest.fixture
def group_id(topic_prefix: str) -> Callable[[str], str]:
    """``group_id("role")``: a consumer group unique to this test."""
    return lambda role: f"{topic_prefix}{role}"
