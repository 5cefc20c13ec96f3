"""Strict validation of every event: each bad record is rejected with a message naming the field.

Each case mutates one field of a valid sample's JSON (as a producer in another language might
send it) and decodes it with ``schemas.codec.decode``, the path every consumer uses.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from event_samples import BUILDERS, sample

from schemas import (
    ActuationResult,
    Allocation,
    ClusterState,
    DeadLetter,
    DemandForecast,
    DemandSample,
    GpuSample,
    HorizonPlan,
    JobEvent,
)
from schemas.base import Event
from schemas.codec import DecodeError, decode, encode

DELETE = object()


def _mutated(event_type: type[Event], path: str, value: Any) -> bytes:
    document = json.loads(encode(sample(event_type)))
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return json.dumps(document).encode()  # NaN and inf become the NaN / Infinity tokens


NAIVE = "2026-11-30T12:00:00"
NOT_UTC = "2026-11-30T12:00:00+02:00"

# (event, JSON path, new value, text the error must contain)
CASES: list[tuple[type[Event], str, Any, str]] = [
    # wrong types (strict: no coercion from strings, no bools or floats for ints)
    (GpuSample, "utilization_pct", "87.5", "utilization_pct: Input should be a valid number"),
    (GpuSample, "gpu_index", 3.5, "gpu_index: Input should be a valid integer"),
    (GpuSample, "gpu_index", True, "gpu_index: Input should be a valid integer"),
    (GpuSample, "cluster", 7, "cluster: Input should be a valid string"),
    (DemandSample, "requests_per_s", None, "requests_per_s"),
    (JobEvent, "kind", "exploded", "kind: Input should be"),
    (ActuationResult, "outcome", "maybe", "outcome: Input should be"),
    (JobEvent, "spec.preemptible", "yes", "spec.preemptible: Input should be a valid boolean"),
    # missing fields, unknown fields, wrong version
    (GpuSample, "cluster", DELETE, "cluster: Field required"),
    (HorizonPlan, "solver", DELETE, "solver: Field required"),
    (ClusterState, "pools.0.gpu_type", DELETE, "pools.0.gpu_type: Field required"),
    (GpuSample, "surprise", 1, "surprise: Extra inputs are not permitted"),
    (GpuSample, "schema_version", 2, "schema_version: Input should be 1"),
    (GpuSample, "cluster", "", "cluster: String should have at least 1 character"),
    # NaN and infinity
    (GpuSample, "utilization_pct", math.nan, "utilization_pct: Input should be a finite number"),
    (GpuSample, "power_w", math.inf, "power_w: Input should be a finite number"),
    (DemandForecast, "quantiles.p50.2", math.nan, "quantiles.p50.2: Input should be a finite number"),
    (HorizonPlan, "objective.slo", -math.inf, "objective.slo: Input should be a finite number"),
    (DemandSample, "gpus_busy", math.inf, "gpus_busy: Input should be a finite number"),
    # negative or zero counts of GPUs, out-of-range values
    (JobEvent, "spec.gpus", 0, "spec.gpus: Input should be greater than or equal to 1"),
    (JobEvent, "spec.gpus", -8, "spec.gpus"),
    (
        ClusterState,
        "pools.0.gpus_total",
        -4,
        "pools.0.gpus_total: Input should be greater than or equal to 0",
    ),
    (ClusterState, "pools.0.gpus_available", 65, "gpus_available: 65 exceeds gpus_total 64"),
    (ClusterState, "quotas_gpus.vision", -1, "quotas_gpus.vision"),
    (ClusterState, "jobs.0.spec.gpus", -1, "jobs.0.spec.gpus"),
    (ClusterState, "pools.0.windows.0.gpus_out", 65, "windows[0].gpus_out: 65 exceeds gpus_total 64"),
    (ClusterState, "services.0.spec.min_replicas", 20, "min_replicas: 20 exceeds max_replicas 12"),
    (HorizonPlan, "blocks.0.jobs.0.gpus", 0, "blocks.0.jobs.0.gpus"),
    (HorizonPlan, "blocks.1.services.0.gpus", -1.0, "blocks.1.services.0.gpus"),
    (HorizonPlan, "blocks.1.steps", 0, "blocks.1.steps"),
    (Allocation, "services.0.replicas", -1, "services.0.replicas"),
    (Allocation, "jobs.0.gpus", -2, "jobs.0.gpus"),
    (GpuSample, "utilization_pct", 100.5, "utilization_pct: Input should be less than or equal to 100"),
    (GpuSample, "memory_used_mib", -1.0, "memory_used_mib"),
    (DemandSample, "gpus_busy", -0.5, "gpus_busy"),
    (DeadLetter, "offset", -1, "offset"),
    # quantile curves: out of order, wrong length, missing levels, malformed keys
    (DemandForecast, "quantiles.p90.1", 0.5, "quantiles.p90[1]"),
    (DemandForecast, "quantiles.p99.3", 1.0, "quantiles.p99[3]"),
    (DemandForecast, "quantiles.p99", [20.0, 21.0], "quantiles.p99: length 2 differs from horizon_steps 4"),
    (DemandForecast, "quantiles.p90", DELETE, "quantiles: missing p90"),
    (DemandForecast, "quantiles.median", [1.0] * 4, "quantile key 'median'"),
    (DemandForecast, "quantiles.p50.0", -1.0, "quantiles.p50.0"),
    (DemandForecast, "horizon_steps", 0, "horizon_steps"),
    # naive or non-UTC times, at the top and nested
    (GpuSample, "time", NAIVE, "time: Value error, time must be timezone-aware UTC"),
    (GpuSample, "time", NOT_UTC, "time: Value error, time must be UTC"),
    (GpuSample, "time", 1796034173, "time: Input should be a valid datetime"),
    (DemandForecast, "issued_at", NAIVE, "issued_at"),
    (JobEvent, "spec.deadline", NOT_UTC, "spec.deadline"),
    (HorizonPlan, "issued_at", NAIVE, "issued_at"),
    (ClusterState, "pools.0.windows.0.end", NOT_UTC, "pools.0.windows.0.end"),
    (Allocation, "valid_until", NAIVE, "valid_until"),
    # cross-field rules
    (JobEvent, "spec", None, "spec: required when kind is 'submitted'"),
    (JobEvent, "spec.job_id", "other", "spec.job_id"),
    (
        ClusterState,
        "pools.0.windows.0.end",
        "2026-11-30T11:00:00Z",
        "end: 2026-11-30T11:00:00+00:00 is not after start",
    ),
    (HorizonPlan, "horizon_steps", 3, "blocks: cover 2 steps, horizon_steps says 3"),
    (HorizonPlan, "blocks.1.first_step", 5, "blocks[1].first_step: expected 1, got 5"),
    (HorizonPlan, "blocks.0.first_step", 1, "blocks[0].first_step: expected 0, got 1"),
    (HorizonPlan, "blocks", [], "blocks"),
    (HorizonPlan, "solver.fallback", True, "fallback_reason: required when fallback is true"),
    (Allocation, "valid_until", "2026-11-30T12:00:00Z", "valid_until: must be after issued_at"),
    (Allocation, "jobs.0.pool", None, "pool: a job decided 'run' needs a pool"),
    (Allocation, "services.0.reason", "", "services.0.reason"),
    (DemandSample, "latency_ms_p99", 10.0, "latency_ms_p99: 10.0 is below latency_ms_p50 41.0"),
    (DeadLetter, "raw_b64", "not base64!", "raw_b64: Value error, not valid base64"),
    (DeadLetter, "error", "", "error"),
    # hostile but well-typed: beyond the bounds of schemas/bounds.py, each naming its field
    (JobEvent, "spec.gpus", 10**9, "spec.gpus: Input should be less than or equal to 65536"),
    (ClusterState, "pools.0.gpus_total", 10**12, "pools.0.gpus_total: Input should be less than or equal"),
    (ClusterState, "pools.0.gpus_available", 10**12, "pools.0.gpus_available: Input should be less than"),
    (JobEvent, "spec.priority_weight", 1e20, "spec.priority_weight: Input should be less than or equal"),
    (JobEvent, "spec.estimated_gpu_s", 1e20, "spec.estimated_gpu_s: Input should be less than or equal"),
    (JobEvent, "done_gpu_s", 1e15, "done_gpu_s: Input should be less than or equal"),
    (DemandSample, "gpus_busy", 1e12, "gpus_busy: Input should be less than or equal"),
    (DemandSample, "requests_per_s", 1e12, "requests_per_s: Input should be less than or equal"),
    (DemandForecast, "quantiles.p99.3", 1e12, "quantiles.p99.3: Input should be less than or equal"),
    (Allocation, "services.0.replicas", 10**9, "services.0.replicas: Input should be less than or equal"),
    (Allocation, "jobs.0.gpus", 10**9, "jobs.0.gpus: Input should be less than or equal"),
    (Allocation, "step_s", 10**9, "step_s: Input should be less than or equal"),
    (ClusterState, "services.0.spec.max_replicas", 10**9, "services.0.spec.max_replicas: Input should be"),
    (ClusterState, "quotas_gpus.vision", 10**12, "quotas_gpus.vision: Input should be less than"),
    (GpuSample, "gpu_index", 10**6, "gpu_index: Input should be less than"),
    (GpuSample, "timeslice_replicas", 10**6, "timeslice_replicas: Input should be less than or equal"),
    (DemandForecast, "horizon_steps", 10**6, "horizon_steps: Input should be less than or equal"),
    (DeadLetter, "offset", 2**64, "offset"),
    # times outside 1970 .. 2200
    (JobEvent, "time", "9999-01-01T00:00:00Z", "time: Value error, time 9999-01-01T00:00:00+00:00 is out"),
    (ClusterState, "as_of", "9999-01-01T00:00:00Z", "as_of: Value error, time 9999-01-01"),
    (JobEvent, "spec.deadline", "1960-01-01T00:00:00Z", "spec.deadline: Value error, time 1960"),
    (Allocation, "valid_until", "2200-01-01T00:00:01Z", "valid_until: Value error"),
]


@pytest.mark.parametrize(
    ("event_type", "path", "value", "expected"),
    CASES,
    ids=[f"{c[0].__name__}-{c[1]}-{str(c[2])[:16]}" for c in CASES],
)
def test_bad_field_rejected_naming_it(event_type: type[Event], path: str, value: Any, expected: str) -> None:
    raw = _mutated(event_type, path, value)
    with pytest.raises(DecodeError) as caught:
        decode(event_type, raw)
    message = str(caught.value)
    assert message.startswith(f"{event_type.__name__}: ")
    assert expected in message, message


@pytest.mark.parametrize("event_type", list(BUILDERS), ids=lambda t: t.__name__)
def test_valid_sample_round_trips_and_is_immutable(event_type: type[Event]) -> None:
    event = sample(event_type)
    assert decode(event_type, encode(event)) == event
    with pytest.raises(Exception, match="frozen"):
        event.schema_version = 1  # type: ignore[misc]


def test_python_construction_is_as_strict_as_the_wire() -> None:
    from datetime import datetime

    from event_samples import gpu_sample
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="time"):
        GpuSample(**gpu_sample(time=datetime(2026, 11, 30, 12)))
    with pytest.raises(ValidationError, match="power_w"):
        GpuSample(**gpu_sample(power_w="310"))


def test_tombstone_and_garbage_raise_decode_error() -> None:
    with pytest.raises(DecodeError, match="tombstone"):
        decode(GpuSample, None)
    with pytest.raises(DecodeError, match="GpuSample: "):
        decode(GpuSample, b"\xff\xfe")
    with pytest.raises(DecodeError, match="GpuSample: "):
        decode(GpuSample, b"[1, 2]")


def test_json_schema_files_are_fresh() -> None:
    from schemas.jsonschema import stale_files

    assert stale_files() == []


def test_a_revised_part_is_validated_as_a_new_one() -> None:
    """``Part.revised`` (how the planner changes a decision after the plan: lending, bursting)
    checks the changed fields as construction does; ``model_copy(update=...)`` would not."""
    from pydantic import ValidationError

    from schemas import ServiceDecision

    decision = ServiceDecision(service="chat", pool="a", replicas=2, gpus=2.0, reason="covers")
    assert decision.revised(burst_gpus=3.0).burst_gpus == 3.0
    assert decision.revised(burst_gpus=3.0).reason == "covers"
    with pytest.raises(ValidationError, match="burst_gpus"):
        decision.revised(burst_gpus=-1.0)
    with pytest.raises(ValidationError, match="reason"):
        decision.revised(reason="")
