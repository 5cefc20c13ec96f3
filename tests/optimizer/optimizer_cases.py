"""Hand-made cluster states and forecasts for the optimizer's tests.

Real schema objects throughout; no mocks. What every plan must respect is checked by
``check_plan`` in tests/plan_checks.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from schemas import (
    ClusterState,
    DemandForecast,
    JobSpec,
    JobState,
    JobStatus,
    PoolState,
    ServiceSpec,
    ServiceState,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def pool(
    name: str, gpus: int, *, gpu_type: str = "h100", available: int | None = None, max_share: int = 1
) -> PoolState:
    return PoolState(
        name=name,
        gpu_type=gpu_type,
        gpus_total=gpus,
        gpus_available=gpus if available is None else available,
        max_share=max_share,
    )


def job(
    job_id: str,
    gpus: int,
    *,
    weight: float = 1.0,
    hours: float = 4.0,
    running_in: str | None = None,
    preemptible: bool = True,
    allowed_pools: list[str] | None = None,
    team: str = "default",
    submitted_min_ago: float = 10.0,
    restart_cost_s: float = 0.0,
    since_checkpoint_gpu_s: float = 0.0,
    started_min_ago: float = 120.0,
    checkpoint_interval_s: float | None = None,
    deadline_hours: float | None = None,
) -> JobState:
    spec = JobSpec(
        job_id=job_id,
        gpus=gpus,
        priority_weight=weight,
        estimated_gpu_s=hours * 3600.0 * gpus,
        preemptible=preemptible,
        allowed_pools=allowed_pools or [],
        team=team,
        restart_cost_s=restart_cost_s,
        checkpoint_interval_s=checkpoint_interval_s,
        deadline=None if deadline_hours is None else NOW + timedelta(hours=deadline_hours),
    )
    return JobState(
        spec=spec,
        status=JobStatus.RUNNING if running_in else JobStatus.QUEUED,
        submitted_at=NOW - timedelta(minutes=submitted_min_ago),
        pool=running_in,
        started_at=NOW - timedelta(minutes=started_min_ago) if running_in else None,
        since_checkpoint_gpu_s=since_checkpoint_gpu_s if running_in else 0.0,
    )


def service(name: str, *, replicas: dict[str, int] | None = None, **spec: object) -> ServiceState:
    return ServiceState(spec=ServiceSpec(service=name, **spec), replicas=replicas or {})


def forecast(
    service_name: str, curve: list[float], *, step_s: int = 900, spread: float = 0.0
) -> DemandForecast:
    return DemandForecast(
        cluster="test",
        service=service_name,
        issued_at=NOW,
        step_s=step_s,
        horizon_steps=len(curve),
        quantiles={
            "p50": list(curve),
            "p90": [v + spread for v in curve],
            "p99": [v + 2 * spread for v in curve],
        },
        model="hand-made",
    )


def state(
    pools: list[PoolState], jobs: list[JobState] = (), services: list[ServiceState] = (), **kw: object
) -> ClusterState:  # type: ignore[assignment]
    return ClusterState(
        cluster="test", as_of=NOW, step_s=900, pools=pools, jobs=list(jobs), services=list(services), **kw
    )


def day_curve(peak: float, trough: float, steps: int = 96, peak_step: int = 32) -> list[float]:
    """A smooth daily cycle peaking at ``peak_step`` (step 32 = 20:00 from 12:00)."""
    return [
        trough + (peak - trough) * 0.5 * (1 + math.cos(2 * math.pi * (t - peak_step) / steps))
        for t in range(steps)
    ]


def three_pool_cluster(
    n_jobs: int, first: int = 0, weights: tuple[float, ...] = (1.0, 2.0), peak_step: int = 8
) -> tuple[ClusterState, dict[str, DemandForecast]]:
    """A small mixed cluster: three pools (one time-sliced), one service, jobs of gangs 1/2/4
    cycling through weights, allowed pools and two teams (one with a quota), and a day of demand."""
    pools = [pool("a", 32, gpu_type="a100", max_share=4), pool("b", 16), pool("c", 24)]
    services = [service("chat", replicas={"a": 4}, min_replicas=1)]
    jobs = [
        job(
            f"j{i}",
            [1, 2, 4][i % 3],
            weight=weights[i % len(weights)],
            hours=1.0 + i % 4,
            allowed_pools=[[], ["a"], ["b", "c"]][i % 3],
            team=["x", "y"][i % 2],
        )
        for i in range(first, first + n_jobs)
    ]
    curve = day_curve(12, 3, steps=24, peak_step=peak_step)
    return state(pools, jobs, services, quotas_gpus={"x": 20}), {"chat": forecast("chat", curve, spread=1.0)}
