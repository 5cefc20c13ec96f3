"""The runtime's batch decoder: each record is judged on its own bytes (pure, no broker)."""

from __future__ import annotations

from loop_factories import cluster

from schemas import GpuSample
from schemas.codec import DecodeError, encode
from schemas.topics import GPU_SAMPLES
from streams.services.batch_decode import BatchDecoder
from streams.state_diff import gpu_samples_of


def test_two_broken_records_that_would_join_into_valid_json_are_both_rejected() -> None:
    first, second = list(gpu_samples_of(cluster(0)))[:2]
    # A valid sample whose cluster name holds "},{": cut there, it makes two broken records
    # that, joined with a comma, read as [first, tricky]. Each must fail on its own bytes.
    tricky = encode(second.model_copy(update={"cluster": "a},{b"}))
    cut = tricky.index(b"},{") + 1
    left = encode(first) + b"," + tricky[:cut]
    right = tricky[cut + 1 :]
    assert left.endswith(b"}") and right.startswith(b"{")
    results = BatchDecoder(GPU_SAMPLES).decode([left, right, encode(second)])
    assert isinstance(results[0], DecodeError) and isinstance(results[1], DecodeError)
    assert results[2] == second


def test_a_clean_batch_is_validated_with_the_full_schema() -> None:
    samples = list(gpu_samples_of(cluster(0)))
    decoder = BatchDecoder(GPU_SAMPLES)
    events = decoder.validate_all([encode(s) for s in samples])
    assert events == samples and all(type(e) is GpuSample for e in events)
    naive_time = encode(samples[0]).replace(b'00:00Z"', b'00:00"')
    assert decoder.validate_all([encode(samples[1]), naive_time]) is None
    assert decoder.validate_all([encode(samples[1]), None]) is None
    results = decoder.decode([naive_time, None])
    assert "time must be timezone-aware UTC" in str(results[0])
    assert "tombstone" in str(results[1])
