"""Catalogue topics are created idempotently, with the catalogue's partitions and configs and the
deployment's replication (``TopicDurability``; too many replicas for the cluster fail first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.topics import CATALOGUE
from streams.topics_admin import (
    ReplicationError,
    TopicDurability,
    admin_client,
    ensure_topics,
    partition_counts,
    prefixed,
    topic_configs,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.kafka


def test_catalogue_topics_created_once_and_aligned_after(kafka_broker, topic_prefix) -> None:
    topics = [prefixed(t, topic_prefix) for t in CATALOGUE]
    first = ensure_topics(kafka_broker.bootstrap, topics)
    assert first == {t.name: "created" for t in topics}
    second = ensure_topics(kafka_broker.bootstrap, topics)
    assert second == {t.name: "exists" for t in topics}

    counts = partition_counts(kafka_broker.bootstrap, [t.name for t in topics])
    assert counts == {t.name: t.partitions for t in topics}
    for t in topics:
        configs = topic_configs(kafka_broker.bootstrap, t.name)
        assert configs["cleanup.policy"] == t.cleanup_policy, t.name
        if t.retention_ms is not None:
            assert configs["retention.ms"] == str(t.retention_ms), t.name
        assert configs["compression.type"] == "zstd", t.name
        assert configs["max.message.bytes"] == str(t.max_message_bytes), t.name


def test_drifted_config_and_missing_partitions_are_repaired(kafka_broker, topic_prefix) -> None:
    from confluent_kafka.admin import NewTopic

    target = prefixed(CATALOGUE[0], topic_prefix)  # gpu-samples: 6 partitions, delete, 1 day
    admin = admin_client(kafka_broker.bootstrap)
    drifted = NewTopic(
        target.name,
        num_partitions=2,
        replication_factor=1,
        config={"cleanup.policy": "compact", "retention.ms": "1000"},
    )
    admin.create_topics([drifted])[target.name].result(30)

    assert ensure_topics(kafka_broker.bootstrap, [target]) == {target.name: "updated"}
    assert partition_counts(kafka_broker.bootstrap, [target.name]) == {target.name: target.partitions}
    configs = topic_configs(kafka_broker.bootstrap, target.name)
    assert configs["cleanup.policy"] == "delete"
    assert configs["retention.ms"] == str(target.retention_ms)


def test_replication_beyond_the_brokers_fails_before_anything_is_created(kafka_broker, topic_prefix) -> None:
    topics = [prefixed(t, topic_prefix) for t in CATALOGUE]
    with pytest.raises(
        ReplicationError, match="replication factor 3 needs at least 3 brokers; the cluster has 1"
    ):
        ensure_topics(kafka_broker.bootstrap, topics, durability=TopicDurability(3, 2))
    assert partition_counts(kafka_broker.bootstrap, [t.name for t in topics]) == {}


def test_min_insync_replicas_is_set_and_aligned(kafka_broker, topic_prefix) -> None:
    from confluent_kafka.admin import NewTopic

    target = prefixed(CATALOGUE[-1], topic_prefix)
    admin = admin_client(kafka_broker.bootstrap)
    admin.create_topics([NewTopic(target.name, 1, 1, config={"min.insync.replicas": "2"})])[
        target.name
    ].result(30)
    assert (
        topic_configs(kafka_broker.bootstrap, target.name)["min.insync.replicas"] == "2"
    )  # every acks=all fails
    assert ensure_topics(kafka_broker.bootstrap, [target]) == {target.name: "updated"}  # the local broker's 1
    assert topic_configs(kafka_broker.bootstrap, target.name)["min.insync.replicas"] == "1"


def test_a_service_asking_more_replicas_than_brokers_stops_naming_the_setting(
    kafka_broker, topic_prefix
) -> None:
    """``ebbtide run`` with the production default (3 replicas) on the one-node broker: exit 6."""
    env = {
        **os.environ,
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
        "EBBTIDE_KAFKA__TOPIC_PREFIX": topic_prefix,
        "EBBTIDE_METRICS_ENABLED": "false",
    }
    env.pop("EBBTIDE_KAFKA__REPLICATION_FACTOR", None)
    command = [sys.executable, "-m", "ebbtide.cli", "run", "state"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 6, done.stdout + done.stderr
    assert (
        "state: setting kafka.replication_factor [EBBTIDE_KAFKA__REPLICATION_FACTOR]: "
        "replication factor 3 needs at least 3 brokers; the cluster has 1"
    ) in done.stdout
    assert partition_counts(kafka_broker.bootstrap, [topic_prefix + t.name for t in CATALOGUE]) == {}
