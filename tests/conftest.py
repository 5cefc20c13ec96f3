"""Fixtures shared by every test tier: the session's Kafka broker and per-test topics.

``kafka_broker`` is an external cluster when ``EBBTIDE_KAFKA_BOOTSTRAP`` is set, else a local
Apache Kafka 4.x (KRaft, one node) started once per session from cached jars (fetched with
Maven the first time) and stopped at the end. ``kafka_topics`` creates prefixed copies of
catalogue topics so tests never see each other's records. Heavy imports stay inside fixtures.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytest's default (prepend) import mode puts tests/ on sys.path before this file runs, and the
# folder tests/schemas/ would then shadow the real ``schemas`` package (the editable install's
# finder comes after path entries). The repository root first keeps the real packages first.
_REPO_ROOT = str(Path(__file__).resolve().parents[1])
if sys.path[:1] != [_REPO_ROOT]:
    sys.path.insert(0, _REPO_ROOT)

if TYPE_CHECKING:
    from schemas.topics import Topic
    from streams.broker import BrokerHandle


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    """The session's Apache Kafka (real transactions); stopped after the last test."""
    from streams.broker_kafka import start_local_kafka
    from streams.broker_providers import connect_external, external_bootstrap

    bootstrap = external_bootstrap()
    if bootstrap is not None:
        yield connect_external(bootstrap)
        return
    handle = start_local_kafka(
        "pytest", data_dir=tmp_path_factory.mktemp("kafka-session"), die_with_parent=True
    )
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    """The embedded memory-only Tansu broker (the demo's): no real transactions, no compaction."""
    from streams.broker_tansu import start_tansu

    handle = start_tansu("pytest", data_dir=tmp_path_factory.mktemp("tansu-session"), die_with_parent=True)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    """A prefix unique to this test, e.g. ``t-test-round-trip-3f9a1c.``."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:60]
    return f"t-{slug}-{uuid.uuid4().hex[:6]}."


@pytest.fixture
def kafka_topics(kafka_broker: BrokerHandle, topic_prefix: str) -> Callable[..., list[Topic]]:
    """``kafka_topics(*catalogue_topics)`` -> prefixed copies, created on the session broker."""
    from streams.topics_admin import ensure_topics, prefixed

    def create(*topics: Topic) -> list[Topic]:
        copies = [prefixed(t, topic_prefix) for t in topics]
        ensure_topics(kafka_broker.bootstrap, copies)
        return copies

    return create
