"""Topics of the catalogue made real on a broker, idempotently, with their partitions and configs.

``ensure_topics`` creates what is missing, raises partitions that are too few, and sets the
catalogue's ``cleanup.policy`` and ``retention.ms`` and the deployment's ``min.insync.replicas``
on topics that already exist. How many replicas a topic gets is the deployment's, not the
catalogue's (:class:`TopicDurability`: 1 on a local broker, the default here; the services'
settings default to 3 with min ISR 2): a replication factor above the cluster's brokers, or an
existing topic with fewer replicas than asked, fails before anything is created. Tansu ignores
some configs (compaction) and lacks some admin calls: with ``tolerate_config_errors`` those are
reported in the result instead of failing. ``prefixed`` gives per-test copies of catalogue topics.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
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
from streams.kafka_client import Brokers, client_config

log = logging.getLogger(__name__)

Outcome = Literal["created", "exists", "updated", "config-ignored"]


class TopicSetupError(RuntimeError):
    """A catalogue topic could not be created or configured; the message names the topic."""


class ReplicationError(TopicSetupError):
    """The replication asked for cannot be had on this cluster (too few brokers, or an existing
    topic with fewer replicas); the message names the topic or the broker count."""


@dataclass(frozen=True)
class TopicDurability:
    """How many brokers hold each partition, and how many of them acks=all waits for."""

    replication_factor: int = 1
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ValueError(
                f"min.insync.replicas {self.min_insync_replicas} must be 1..{self.replication_factor} "
                "(the replication factor)"
            )

    def topic_config(self, topic: Topic) -> dict[str, str]:
        """The catalogue's config of ``topic`` plus this deployment's ``min.insync.replicas``."""
        return {**topic.config(), "min.insync.replicas": str(self.min_insync_replicas)}


LOCAL_BROKER = TopicDurability(1, 1)
"""One broker (the embedded Tansu, ``ebbtide broker up``, the test fixtures): one replica."""


def prefixed(topic: Topic, prefix: str) -> Topic:
    """The same topic (event, partitions, config) under ``prefix + name``: isolates tests."""
    return dataclasses.replace(topic, name=f"{prefix}{topic.name}")


def prefixed_catalogue(prefix: str) -> dict[str, Topic]:
    """Catalogue name -> prefixed copy, for every catalogue topic."""
    return {t.name: prefixed(t, prefix) for t in CATALOGUE}


def admin_client(bootstrap: Brokers) -> AdminClient:
    return AdminClient(client_config(bootstrap))


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return int(exc.args[0].code())
    return None


def ensure_topics(
    bootstrap: Brokers,
    topics: Iterable[Topic] = CATALOGUE,
    *,
    durability: TopicDurability = LOCAL_BROKER,
    tolerate_config_errors: bool = False,
    timeout_s: float = 30.0,
) -> dict[str, Outcome]:
    """Create or align every topic; returns what happened to each, by name. Safe to call again."""
    admin = admin_client(bootstrap)
    wanted = {t.name: t for t in topics}
    if not wanted:
        return {}
    _check_replication(admin, list(wanted.values()), durability.replication_factor, timeout_s)
    outcomes: dict[str, Outcome] = {}
    new = [
        NewTopic(
            t.name,
            num_partitions=t.partitions,
            replication_factor=durability.replication_factor,
            config=durability.topic_config(t),
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
        outcomes[t.name] = _align_existing(admin, t, durability, tolerate_config_errors, timeout_s)
    return outcomes


def _check_replication(admin: AdminClient, topics: list[Topic], replicas: int, timeout_s: float) -> None:
    """Fail before creating anything when ``replicas`` cannot be had: more than the cluster's
    brokers, or an existing topic kept on fewer replicas (its min.insync.replicas would refuse
    every acks=all write, or it would silently hold fewer copies than asked)."""
    metadata = admin.list_topics(timeout=timeout_s)
    brokers = len(metadata.brokers)
    if replicas > brokers:
        raise ReplicationError(
            f"replication factor {replicas} needs at least {replicas} brokers; the cluster has {brokers}"
        )
    for t in topics:
        found = metadata.topics.get(t.name)
        if found is None or found.error is not None or not found.partitions:
            continue
        kept = min(len(p.replicas) for p in found.partitions.values())
        if kept < replicas:
            raise ReplicationError(
                f"{t.name}: exists with {kept} replica(s) per partition, fewer than the replication "
                f"factor {replicas} asked (reassign its partitions, or ask for {kept})"
            )


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


def _align_existing(
    admin: AdminClient, topic: Topic, durability: TopicDurability, tolerate: bool, timeout_s: float
) -> Outcome:
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
        wanted = durability.topic_config(topic)
        differing = {k: v for k, v in wanted.items() if k not in current or current[k].value != v}
        if differing:
            entries = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in differing.items()
            ]
            change = ConfigResource(ConfigResource.Type.TOPIC, topic.name, incremental_configs=entries)
            admin.incremental_alter_configs([change])[change].result(timeout_s)
            _wait_configs(admin, resource, differing, timeout_s)
            outcome = "updated" if outcome == "exists" else outcome
    except KafkaException as exc:
        if not tolerate:
            raise TopicSetupError(f"{topic.name}: could not align configs {wanted}: {exc}") from exc
        log.warning("topic %s: broker ignores or rejects config %s: %s", topic.name, wanted, exc)
        outcome = "config-ignored"
    return outcome


def _wait_configs(
    admin: AdminClient, resource: ConfigResource, wanted: dict[str, str], timeout_s: float
) -> None:
    """The broker describes an altered config a moment after the controller committed it: wait,
    so a caller that reads the configs at once sees what was set."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = admin.describe_configs([resource])[resource].result(timeout_s)
        if all(k in current and current[k].value == v for k, v in wanted.items()):
            return
        time.sleep(0.1)


def topic_configs(bootstrap: Brokers, name: str, timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's view of one topic's configs (for checks and ``ebbtide broker topics``). A topic
    just created reaches each broker of a cluster a moment after the controller commits it, and
    the broker asked may not know it yet: that answer is retried until ``timeout_s`` (a three-node
    cluster answered UNKNOWN_TOPIC_OR_PART right after ``ensure_topics``)."""
    admin = admin_client(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            entries = admin.describe_configs([resource])[resource].result(timeout_s)
            return {k: e.value for k, e in entries.items() if e.value is not None}
        except KafkaException as exc:
            if _error_code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def partition_counts(bootstrap: Brokers, names: Iterable[str], timeout_s: float = 10.0) -> dict[str, int]:
    admin = admin_client(bootstrap)
    metadata = admin.list_topics(timeout=timeout_s)
    return {n: len(metadata.topics[n].partitions) for n in names if n in metadata.topics}


def ensure_catalogue(
    bootstrap: Brokers, prefix: str = "", durability: TopicDurability = LOCAL_BROKER
) -> None:
    """Create every catalogue topic (under ``prefix``) that is missing; safe to call again."""
    ensure_topics(
        bootstrap,
        [prefixed(t, prefix) for t in CATALOGUE],
        durability=durability,
        tolerate_config_errors=True,
    )
