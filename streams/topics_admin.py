"""Topics of the catalogue made real on a broker, idempotently, with their partitions and configs.

``ensure_topics`` creates what is missing, raises partitions that are too few, and sets the
catalogue's ``cleanup.policy`` and ``retention.ms`` on topics that already exist. Tansu ignores
some configs (compaction) and lacks some admin calls: with ``tolerate_config_errors`` those are
reported in the result instead of failing. ``prefixed`` gives per-test copies of catalogue topics.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from typing import Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported, not re-declared in stubs
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from schemas.topics import CATALOGUE, Topic

log = logging.getLogger(__name__)

Outcome = Literal["created", "exists", "updated", "config-ignored"]


class TopicSetupError(RuntimeError):
    """A catalogue topic could not be created or configured; the message names the topic."""


def prefixed(topic: Topic, prefix: str) -> Topic:
    """The same topic (event, partitions, config) under ``prefix + name``: isolates tests."""
    return dataclasses.replace(topic, name=f"{prefix}{topic.name}")


def prefixed_catalogue(prefix: str) -> dict[str, Topic]:
    """Catalogue name -> prefixed copy, for every catalogue topic."""
    return {t.name: prefixed(t, prefix) for t in CATALOGUE}


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return int(exc.args[0].code())
    return None


def ensure_topics(
    bootstrap: str,
    topics: Iterable[Topic] = CATALOGUE,
    *,
    replication_factor: int = 1,
    tolerate_config_errors: bool = False,
    timeout_s: float = 30.0,
) -> dict[str, Outcome]:
    """Create or align every topic; returns what happened to each, by name. Safe to call again."""
    admin = admin_client(bootstrap)
    wanted = {t.name: t for t in topics}
    if not wanted:
        return {}
    outcomes: dict[str, Outcome] = {}
    new = [
        NewTopic(
            t.name, num_partitions=t.partitions, replication_factor=replication_factor, config=t.config()
        )
        for t in wanted.values()
    ]
    existing: list[Topic] = []
    for name, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            outcomes[name] = "created"
        except KafkaException as exc:
            if _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                existing.append(wanted[name])
            else:
                raise TopicSetupError(f"{name}: create failed: {exc}") from exc
    _wait_visible(admin, list(wanted.values()), timeout_s)
    for t in existing:
        outcomes[t.name] = _align_existing(admin, t, tolerate_config_errors, timeout_s)
    return outcomes


def _wait_visible(admin: AdminClient, topics: list[Topic], timeout_s: float) -> None:
    """Metadata reaches the broker side a moment after the controller commits: wait for it, so a
    caller can produce, describe or alter at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=timeout_s)
        missing = [
            t.name
            for t in topics
            if t.name not in metadata.topics
            or metadata.topics[t.name].error is not None
            or not metadata.topics[t.name].partitions
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TopicSetupError(f"{', '.join(missing)}: not visible in metadata after {timeout_s} s")
        time.sleep(0.1)


def _align_existing(admin: AdminClient, topic: Topic, tolerate: bool, timeout_s: float) -> Outcome:
    outcome: Outcome = "exists"
    metadata = admin.list_topics(topic=topic.name, timeout=timeout_s)
    partitions_now = len(metadata.topics[topic.name].partitions)
    if partitions_now < topic.partitions:
        try:
            admin.create_partitions([NewPartitions(topic.name, topic.partitions)])[topic.name].result(
                timeout_s
            )
            outcome = "updated"
        except KafkaException as exc:
            if not tolerate:
                raise TopicSetupError(
                    f"{topic.name}: has {partitions_now} partitions, the catalogue says {topic.partitions}, "
                    f"and adding partitions failed: {exc}"
                ) from exc
            log.warning("topic %s: cannot add partitions on this broker: %s", topic.name, exc)
            outcome = "config-ignored"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic.name)
    try:
        current = admin.describe_configs([resource])[resource].result(timeout_s)
        differing = {k: v for k, v in topic.config().items() if k not in current or current[k].value != v}
        if differing:
            entries = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in differing.items()
            ]
            change = ConfigResource(ConfigResource.Type.TOPIC, topic.name, incremental_configs=entries)
            admin.incremental_alter_configs([change])[change].result(timeout_s)
            outcome = "updated" if outcome == "exists" else outcome
    except KafkaException as exc:
        if not tolerate:
            raise TopicSetupError(f"{topic.name}: could not align configs {topic.config()}: {exc}") from exc
        log.warning("topic %s: broker ignores or rejects config %s: %s", topic.name, topic.config(), exc)
        outcome = "config-ignored"
    return outcome


def topic_configs(bootstrap: str, name: str, timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's view of one topic's configs (for checks and ``ebbtide broker topics``)."""
    admin = admin_client(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(timeout_s)
    return {k: e.value for k, e in entries.items() if e.value is not None}


def partition_counts(bootstrap: str, names: Iterable[str], timeout_s: float = 10.0) -> dict[str, int]:
    admin = admin_client(bootstrap)
    metadata = admin.list_topics(timeout=timeout_s)
    return {n: len(metadata.topics[n].partitions) for n in names if n in metadata.topics}


def ensure_catalogue(bootstrap: str, prefix: str = "") -> None:
    """Create every catalogue topic (under ``prefix``) that is missing; safe to call again."""
    ensure_topics(bootstrap, [prefixed(t, prefix) for t in CATALOGUE], tolerate_config_errors=True)
