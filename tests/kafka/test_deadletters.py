"""Bad records land in the dead-letter topic, whole and with their reason; nothing else is lost
(the services' own runtime reading, as every service does)."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from event_samples import gpu_sample, sample
from kafka_helpers import Collect, produce, run_until

from schemas import DeadLetter, DemandSample, GpuSample
from schemas.codec import encode
from schemas.topics import DEAD_LETTERS, GPU_SAMPLES
from streams.inspect import group_lag
from streams.services.runtime import ServiceRuntime, read_topic_to_end

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
]
# Not here: a valid value under a non-UTF-8 key. The services decode values only (an event carries
# its own key), so they take it; streams.consumer.ValidatingConsumer dead-letters it.


def test_bad_records_are_dead_lettered_and_good_ones_all_arrive(
    kafka_broker, kafka_topics, topic_prefix, group_id
) -> None:
    """Through the services' own runtime: each bad record between two good ones."""
    source = dataclasses.replace(GPU_SAMPLES, partitions=1)
    gpus, _ = kafka_topics(source, DEAD_LETTERS)
    good = [sample(GpuSample, gpu_index=i, gpu_uuid=f"GPU-{i}") for i in range(len(BAD_RECORDS) + 1)]
    records: list[tuple[str, bytes | None, bytes | None]] = []
    for i, (value, key, _) in enumerate(BAD_RECORDS):  # good, bad, good, bad, ..., good
        records += [(gpus.name, encode(good[i]), good[i].key.encode()), (gpus.name, value, key)]
    produce(kafka_broker.bootstrap, [*records, (gpus.name, encode(good[-1]), good[-1].key.encode())])

    validator = Collect(inputs=(source,), name="validator")
    runtime = ServiceRuntime(
        validator, kafka_broker.bootstrap, group_id("validator"), topic_prefix=topic_prefix
    )
    try:
        run_until(
            runtime,
            lambda: len(validator.got) >= len(good) and runtime.stats.dead_lettered >= len(BAD_RECORDS),
        )
    finally:
        runtime.close()
    assert validator.got == good
    assert runtime.stats.dead_lettered == len(BAD_RECORDS)

    letters = read_topic_to_end(kafka_broker.bootstrap, DEAD_LETTERS, idle_s=0.5, prefix=topic_prefix)
    assert len(letters) == len(BAD_RECORDS)
    for letter, (value, key, reason) in zip(letters, BAD_RECORDS, strict=True):
        assert isinstance(letter, DeadLetter)
        assert letter.source_topic == gpus.name
        assert letter.partition == 0
        assert letter.offset == 2 * BAD_RECORDS.index((value, key, reason)) + 1
        assert base64.b64decode(letter.raw_b64) == (value or b"")
        assert letter.key_b64 == base64.b64encode(key).decode()
        assert reason in letter.error, letter.error
        assert letter.consumer == "validator"
    # everything, good and bad, was committed: a restarted service of the group starts after it all
    (lag,) = group_lag(kafka_broker.bootstrap, group_id("validator"), [gpus.name])
    assert lag.committed and lag.lag_messages == 0
