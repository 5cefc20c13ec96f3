"""Tiny hand-made scenarios and states for the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import (
    Allocation,
    ClusterState,
    JobDecision,
    JobSpec,
    JobState,
    JobStatus,
    PoolState,
    ServiceDecision,
    ServiceSpec,
    ServiceState,
)
from simulator.cluster import Simulator
from simulator.scenario import Scenario

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def tiny_scenario(**overrides: Any) -> Scenario:
    """One 8-GPU pool (2 nodes x 4), one flat service, a 2-hour window; override any field."""
    data: dict[str, Any] = {
        "name": "tiny",
        "seed": 1,
        "window_hours": 2,
        "quick_window_hours": 1,
        "pools": [{"name": "p", "gpu_type": "A100", "nodes": 2, "gpus_per_node": 4}],
        "services": [
            {
                "spec": {"service": "svc", "startup_s": 60},
                "demand": {"kind": "flat", "peak_gpus": 2, "noise_frac": 0},
            }
        ],
    }
    data.update(overrides)
    return Scenario.model_validate(data)


def job(job_id: str, hours: float, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    """An explicit job entry (true work = hours x gpus GPU-hours; estimate defaults to the truth)."""
    entry: dict[str, Any] = {
        "job_id": job_id,
        "at_hour": 0,
        "gpus": gpus,
        "true_gpu_hours": hours * gpus,
        "estimated_gpu_hours": hours * gpus,
    }
    entry.update(kw)
    return entry


def job_state(
    job_id: str,
    gpus: int,
    *,
    submitted_min: float = 0.0,
    weight: float = 1.0,
    est_hours: float = 1.0,
    running_on: str | None = None,
    done_gpu_s: float = 0.0,
    preemptible: bool = True,
) -> JobState:
    spec = JobSpec(
        job_id=job_id,
        gpus=gpus,
        priority_weight=weight,
        estimated_gpu_s=est_hours * 3600.0 * gpus,
        preemptible=preemptible,
    )
    return JobState(
        spec=spec,
        status=JobStatus.RUNNING if running_on else JobStatus.QUEUED,
        submitted_at=T0 + timedelta(minutes=submitted_min),
        pool=running_on,
        started_at=T0 if running_on else None,
        done_gpu_s=done_gpu_s,
    )


def state(
    jobs: list[JobState],
    *,
    gpus: int = 8,
    history: list[float] | None = None,
    replicas: int = 0,
    now: datetime | None = None,
    free_by_node: list[int] | None = None,
) -> ClusterState:
    service = ServiceState(
        spec=ServiceSpec(service="svc"),
        replicas={"p": replicas} if replicas else {},
        demand_history=history if history is not None else [1.0] * 8,
    )
    return ClusterState(
        cluster="c",
        as_of=now or T0 + timedelta(hours=1),
        step_s=900,
        pools=[
            PoolState(
                name="p",
                gpu_type="A100",
                gpus_total=gpus,
                gpus_available=gpus,
                gpus_per_node=4,
                free_gpus_by_node=free_by_node or [],
            )
        ],
        services=[service],
        jobs=jobs,
    )


def allocation(
    sim: Simulator, jobs: Sequence[JobDecision] = (), services: Sequence[ServiceDecision] = ()
) -> Allocation:
    """A hand-made Allocation for the simulator's current step."""
    now = sim.clock.now()
    return Allocation(
        cluster="sim",
        plan_id="test",
        policy="test",
        issued_at=now,
        step_s=sim.step_s,
        valid_until=now + timedelta(seconds=sim.step_s),
        jobs=list(jobs),
        services=list(services),
    )
