"""Bad records land in the dead-letter topic, whole and with their reason; nothing else is lost."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from event_samples import gpu_sample, sample
from kafka_helpers import drain

from schemas import DeadLetter, DemandSample, GpuSample
from schemas.codec import encode
from schemas.topics import DEAD_LETTERS, GPU_SAMPLES
from streams.consumer import ValidatingConsumer
from streams.producer import EventProducer

pytestmark = pytest.mark.kafka


def _json(**fields: object) -> bytes:
    return json.dumps(fields, default=str).encode()


# (value, key, a word the dead letter's error must contain)
BAD_RECORDS: list[tuple[bytes | None, bytes | None, str]] = [
    (b"\xff\xfe\x00 not json", b"n1/GPU-1", "GpuSample"),
    (b"{}", b"n1/GPU-1", "cluster"),
    (_json(**{**gpu_sample(), "utilization_pct": 150.0}), b"n1/GPU-1", "utilization_pct"),
    (_json(**{**gpu_sample(), "gpu_index": -1}), b"n1/GPU-1", "gpu_index"),
    (_json(**{**gpu_sample(), "time": "2026-11-30T12:00:00"}), b"n1/GPU-1", "time"),
    (_json(**{**gpu_sample(), "power_w": "310"}), b"n1/GPU-1", "power_w"),
    (_json(**{**gpu_sample(), "surprise": 1}), b"n1/GPU-1", "surprise"),
    (encode(sample(DemandSample)), b"chat", "Field required"),
    (b'{"power_w": NaN}', b"n1/GPU-1", "GpuSample"),
    (None, b"n1/GPU-1", "tombstone"),
    (encode(sample(GpuSample)), b"\xc3\x28", "<key>: not UTF-8"),
]


def test_bad_records_are_dead_lettered_and_good_ones_all_arrive(kafka_broker, kafka_topics, group_id) -> None:
    gpus, dead_letters = kafka_topics(dataclasses.replace(GPU_SAMPLES, partitions=1), DEAD_LETTERS)
    producer = EventProducer(kafka_broker.bootstrap)
    good = [sample(GpuSample, gpu_index=i, gpu_uuid=f"GPU-{i}") for i in range(len(BAD_RECORDS) + 1)]
    # good, bad, good, bad, ..., good: each bad record sits between two good ones
    for i, (value, key, _) in enumerate(BAD_RECORDS):
        producer.send(gpus, good[i])
        producer.send_raw(gpus.name, value, key)
    producer.send(gpus, good[-1])
    producer.flush()

    consumer = ValidatingConsumer(
        kafka_broker.bootstrap, group_id("validator"), [gpus], dead_letters=dead_letters
    )
    try:
        received = drain(consumer, want=len(good), quiet_s=1.0)
        consumer.commit()
        committed = consumer.committed_offsets()
    finally:
        consumer.close()

    assert [r.event for r in received] == good
    assert [r.offset for r in received] == [2 * i for i in range(len(good))]
    assert consumer.dead_lettered == len(BAD_RECORDS)

    reader = ValidatingConsumer(
        kafka_broker.bootstrap, group_id("dlq-reader"), [dead_letters], dead_letters=dead_letters
    )
    try:
        letters = drain(reader, want=len(BAD_RECORDS), quiet_s=1.0)
    finally:
        reader.close()
    assert len(letters) == len(BAD_RECORDS)
    for record, (value, key, reason) in zip(letters, BAD_RECORDS, strict=True):
        letter = record.event
        assert isinstance(letter, DeadLetter)
        assert letter.source_topic == gpus.name
        assert letter.partition == 0
        assert letter.offset == 2 * BAD_RECORDS.index((value, key, reason)) + 1
        assert base64.b64decode(letter.raw_b64) == (value or b"")
        assert letter.key_b64 == base64.b64encode(key).decode()
        assert reason in letter.error, letter.error
        assert letter.consumer == group_id("validator")
        assert record.key == gpus.name
    # everything, good and bad, was committed: a restarted consumer of the group starts after it all
    assert committed == {(gpus.name, 0): len(good) + len(BAD_RECORDS)}
