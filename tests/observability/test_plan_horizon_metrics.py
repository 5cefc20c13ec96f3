"""The latest plan's next 24 h as gauges: bounded hours_ahead, zero-filled, no stale series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from schemas import HorizonPlan, JobPlacement, PlanBlock, PlanStep, ServiceCapacity, SolverInfo
from streams.metric_series import PLAN_HOURS_AHEAD, plan_steps_by_hour
from streams.metrics import EbbtideMetrics

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def plan(steps: list[PlanStep], step_s: int = 900) -> HorizonPlan:
    return HorizonPlan(
        cluster="c1",
        plan_id="p1",
        policy="ebbtide",
        issued_at=T0,
        step_s=step_s,
        horizon_steps=len(steps),
        blocks=[PlanBlock(first_step=s.index, steps=1, services=s.services, jobs=s.jobs) for s in steps],
        solver=SolverInfo(solver="highs", status="optimal", time_ms=10.0),
        inputs_digest="d1",
    )


def step(
    index: int, step_s: int = 900, chat: float = 2.0, search: float | None = None, jobs: int = 0
) -> PlanStep:
    services = [ServiceCapacity(service="chat", pool="a100", replicas=int(chat), gpus=chat)]
    if search is not None:
        services.append(ServiceCapacity(service="search", pool="t4", replicas=1, gpus=search))
    placed = [JobPlacement(job_id=f"j{index}-{k}", pool="a100", gpus=4) for k in range(jobs)]
    return PlanStep(index=index, start=T0 + timedelta(seconds=index * step_s), services=services, jobs=placed)


def series(m: EbbtideMetrics, name: str) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in m.registry.collect() if f.name == name]
    return {tuple(v for k, v in sorted(s.labels.items()) if k != "cluster"): s.value for s in family.samples}


def test_the_plan_is_sampled_at_each_whole_hour_of_its_horizon() -> None:
    day = plan([step(i) for i in range(96)])
    assert [s.index for s in plan_steps_by_hour(day).values()] == [4 * h for h in PLAN_HOURS_AHEAD]
    two_hour_steps = plan([step(i, step_s=7200) for i in range(12)], step_s=7200)
    assert [s.index for s in plan_steps_by_hour(two_hour_steps).values()] == [h // 2 for h in range(24)]
    assert list(plan_steps_by_hour(plan([step(i) for i in range(8)]))) == [0, 1]  # 2 h horizon


def test_service_and_batch_gpus_per_hour_ahead_zero_filled() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    # search only in the first hour's steps; batch (4 GPUs a job) ramps up after hour 2
    steps = [step(i, chat=2.0 + i // 4, search=1.0 if i < 4 else None, jobs=i // 8) for i in range(96)]
    metrics.record_plan_horizon(plan(steps))
    services = series(metrics, "ebbtide_plan_service_gpus")
    assert len(services) == 2 * 24  # (chat, a100) and (search, t4) at every hour
    assert services[("5", "a100", "chat")] == 7.0
    assert services[("0", "t4", "search")] == 1.0 and services[("1", "t4", "search")] == 0.0
    batch = series(metrics, "ebbtide_plan_batch_gpus")
    assert len(batch) == 2 * 24  # a100 (jobs) and t4 (inference only: batch 0)
    assert batch[("0", "a100")] == 0.0 and batch[("2", "a100")] == 4.0 and batch[("23", "a100")] == 44.0
    assert set(batch[(str(h), "t4")] for h in PLAN_HOURS_AHEAD) == {0.0}
    assert {labels[0] for labels in services} == {str(h) for h in PLAN_HOURS_AHEAD}


def test_series_leaving_the_plan_are_removed() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    metrics.record_plan_horizon(plan([step(i, search=1.0, jobs=1) for i in range(96)]))
    metrics.record_plan_horizon(plan([step(i) for i in range(8)]))  # no search, no t4, 2 h horizon
    assert set(series(metrics, "ebbtide_plan_service_gpus")) == {("0", "a100", "chat"), ("1", "a100", "chat")}
    assert series(metrics, "ebbtide_plan_batch_gpus") == {("0", "a100"): 0.0, ("1", "a100"): 0.0}
