"""Reading the loop's topics for a person: what ``ebbtide explain``, ``plan`` and ``status`` show.

Read-only: records are read from the start of a topic (a throwaway consumer that joins no group
and commits nothing), and consumer-group lag is read from the committed offsets against the high
watermarks. Nothing here changes what the services consume.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from schemas.base import Event
from schemas.topics import Topic
from streams.kafka_client import Brokers, client_config
from streams.services.restore import read_topic_to_end


class TopicReadError(RuntimeError):
    """The broker could not be read (it does not answer, or refused a request); the message says why."""


def read_records(bootstrap: Brokers, topic: Topic, prefix: str = "", max_s: float = 30.0) -> list[Event]:
    """Every readable record of ``topic`` (under ``prefix``), oldest first."""
    try:
        return read_topic_to_end(bootstrap, topic, idle_s=0.3, max_s=max_s, prefix=prefix)
    except KafkaException as exc:
        raise TopicReadError(f"reading {prefix}{topic.name} at {bootstrap}: {exc}") from exc


@dataclass(frozen=True)
class GroupLag:
    group_id: str
    topic: str
    lag_messages: int
    committed: bool  # False: the group has committed nothing on this topic yet


def group_lag(
    bootstrap: Brokers, group_id: str, topics: list[str], timeout_s: float = 10.0
) -> list[GroupLag]:
    """Messages each topic holds past what ``group_id`` has committed (all partitions summed)."""
    admin = AdminClient(client_config(bootstrap))
    probe = Consumer(
        client_config(bootstrap, {"group.id": f"{group_id}.inspect", "enable.auto.commit": False})
    )
    try:
        rows = []
        for topic in topics:
            partitions = _partitions(probe, topic, timeout_s)
            if not partitions:
                continue
            committed = _committed(admin, group_id, topic, partitions, timeout_s)
            lag = 0
            for partition in partitions:
                _low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
                offset = committed.get(partition)
                lag += high - offset if offset is not None and offset >= 0 else high - _low
            rows.append(GroupLag(group_id, topic, lag, bool(committed)))
        return rows
    except KafkaException as exc:
        raise TopicReadError(f"lag of group {group_id} at {bootstrap}: {exc}") from exc
    finally:
        probe.close()


def _partitions(probe: Consumer, topic: str, timeout_s: float) -> list[int]:
    metadata = probe.list_topics(topic, timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return []
    return sorted(found.partitions)


def _committed(
    admin: AdminClient, group_id: str, topic: str, partitions: list[int], timeout_s: float
) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, p) for p in partitions])
    future = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)[group_id]
    answer = future.result(timeout=timeout_s)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}
