"""One event onto its topic, delivery confirmed: how ``ebbtide job submit`` / ``cancel`` hand ebbtide a job.

Place in the loop: an entry point for other systems. The JobEvent (already validated against the
contract by the caller) goes to the job-events topic keyed by job id; the state service folds it.
:func:`produce_confirmed` returns only once the broker acknowledged the record (idempotent,
``acks=all``), and raises :class:`DeliveryError` naming the record otherwise.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from schemas.base import Event
from schemas.topics import Topic
from streams.broker import answers_metadata
from streams.kafka_client import Brokers
from streams.producer import Delivered, DeliveryError, EventProducer
from streams.topics_admin import LOCAL_BROKER, TopicDurability, TopicSetupError, ensure_topics, prefixed

__all__ = ["Delivered", "DeliveryError", "produce_confirmed"]


def produce_confirmed(
    bootstrap: Brokers,
    topic: Topic,
    event: Event,
    *,
    prefix: str = "",
    create_topic: bool = True,
    durability: TopicDurability = LOCAL_BROKER,
    timeout_s: float = 30.0,
) -> Delivered:
    """Produce ``event`` to ``prefix + topic`` keyed by its ``.key`` and wait for the acknowledgement.

    With ``create_topic`` the topic is created first if missing (with the catalogue's partitions
    and cleanup policy, so the job-events topic is compacted, not whatever the broker would
    auto-create).
    """
    target = prefixed(topic, prefix)
    if not answers_metadata(bootstrap, timeout_s=min(timeout_s, 10.0)):
        raise DeliveryError(f"{target.name}: no Kafka broker answers at {bootstrap}")
    if create_topic:
        try:
            ensure_topics(
                bootstrap, [target], durability=durability, tolerate_config_errors=True, timeout_s=timeout_s
            )
        except (TopicSetupError, KafkaException, TimeoutError) as exc:
            detail = str(exc) or type(exc).__name__
            raise DeliveryError(f"{target.name} at {bootstrap}: topic set-up failed: {detail}") from exc
    timeout_ms = max(int(timeout_s * 1000), 1000)
    producer = EventProducer(
        bootstrap,
        client_id="ebbtide-submit",
        config={"message.timeout.ms": timeout_ms, "linger.ms": 0},
    )
    delivered: list[Delivered] = []

    def on_delivery(done: Delivered | None, _error: KafkaError | None) -> None:
        if done is not None:
            delivered.append(done)

    producer.send(target, event, on_delivery=on_delivery)
    producer.flush(timeout_s + 5.0)
    if not delivered:
        raise DeliveryError(f"{target.name} key={getattr(event, 'key', None)!r}: no acknowledgement")
    return delivered[0]
