"""Catalogue topics are created idempotently, with the catalogue's partitions and configs."""

from __future__ import annotations

import pytest

from schemas.topics import CATALOGUE
from streams.topics_admin import admin_client, ensure_topics, partition_counts, prefixed, topic_configs

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
