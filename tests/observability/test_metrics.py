"""The metric helpers of streams/metrics.py: what a service records is what a scrape shows."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from loop import Decision
from schemas import (
    ActuationResult,
    Allocation,
    ClusterState,
    DeadLetter,
    DemandForecast,
    DemandSample,
    GpuSample,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobSpec,
    JobState,
    JobStatus,
    PlanBlock,
    PoolState,
    PoolWindow,
    ServiceDecision,
    ServiceSpec,
    ServiceState,
    SolverInfo,
)
from streams.metric_series import forecast_step_index, partition_lag_messages
from streams.metrics import EbbtideMetrics
from streams.metrics_http import ebbtide_metric_names, serve_metrics

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def metrics() -> EbbtideMetrics:
    return EbbtideMetrics(CollectorRegistry())


def value(m: EbbtideMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def decision(
    *, fallback: bool = False, jobs: list[JobDecision] | None = None, gap: float | None = 0.01
) -> Decision:
    reason = "solver hit its time limit" if fallback else None
    plan = HorizonPlan(
        cluster="c1",
        plan_id="p1",
        policy="ebbtide",
        issued_at=T0,
        step_s=900,
        horizon_steps=1,
        blocks=[PlanBlock(first_step=0, steps=1)],
        objective={"work": 12.5, "shortfall": -3.0},
        solver=SolverInfo(
            solver="highs", status="optimal", time_ms=40.0, gap=gap, fallback=fallback, fallback_reason=reason
        ),
        inputs_digest="d1",
    )
    alloc = Allocation(
        cluster="c1",
        plan_id="p1",
        policy="ebbtide",
        issued_at=T0,
        step_s=900,
        valid_until=T0 + timedelta(seconds=900),
        services=[
            ServiceDecision(service="chat", pool="a100", replicas=3, gpus=3.0, reason="p90 = 3"),
            ServiceDecision(service="chat", pool="h100", replicas=1, gpus=1.0, reason="spill"),
        ],
        jobs=jobs or [],
        fallback=fallback,
        fallback_reason=reason,
    )
    return Decision(plan=plan, allocation=alloc)


def job_state(
    job_id: str, status: JobStatus, priority: str = "standard", since_ckpt: float = 0.0
) -> JobState:
    return JobState(
        spec=JobSpec(job_id=job_id, gpus=4, estimated_gpu_s=3600.0, priority_class=priority),
        status=status,
        submitted_at=T0,
        pool="a100" if status == JobStatus.RUNNING else None,
        since_checkpoint_gpu_s=since_ckpt,
    )


def state(jobs: list[JobState], demand: float = 5.0, replicas: int = 2) -> ClusterState:
    return ClusterState(
        cluster="c1",
        as_of=T0,
        step_s=900,
        pools=[PoolState(name="a100", gpu_type="A100", gpus_total=16, gpus_available=14)],
        services=[
            ServiceState(
                spec=ServiceSpec(service="chat", gpus_per_replica=2),
                replicas={"a100": replicas},
                demand_history=[1.0, demand],
            )
        ],
        jobs=jobs,
    )


def test_decision_records_latency_solver_objective_and_allocation(metrics: EbbtideMetrics) -> None:
    jobs = [
        JobDecision(job_id="j1", action=JobAction.RUN, pool="a100", gpus=4, reason="fits"),
        JobDecision(job_id="j2", action=JobAction.HOLD, reason="no room"),
    ]
    metrics.record_decision(decision(jobs=jobs), decision_s=0.2, now_s=1000.0)

    assert value(metrics, "ebbtide_decisions_total", cluster="c1", policy="ebbtide") == 1
    assert value(metrics, "ebbtide_decision_duration_seconds_count", cluster="c1", policy="ebbtide") == 1
    assert (
        value(metrics, "ebbtide_decision_duration_seconds_bucket", cluster="c1", policy="ebbtide", le="0.25")
        == 1
    )
    assert (
        value(metrics, "ebbtide_decision_duration_seconds_bucket", cluster="c1", policy="ebbtide", le="0.1")
        == 0
    )
    assert value(
        metrics, "ebbtide_solver_duration_seconds_sum", cluster="c1", solver="highs"
    ) == pytest.approx(0.04)
    assert value(metrics, "ebbtide_solver_runs_total", cluster="c1", solver="highs", status="optimal") == 1
    assert value(metrics, "ebbtide_solver_gap_ratio", cluster="c1") == pytest.approx(0.01)
    assert value(metrics, "ebbtide_plan_objective", cluster="c1", term="shortfall") == -3.0
    assert value(metrics, "ebbtide_last_decision_timestamp_seconds", cluster="c1") == 1000.0
    assert value(metrics, "ebbtide_step_length_seconds", cluster="c1") == 900
    assert value(metrics, "ebbtide_allocated_gpus", cluster="c1", pool="a100", kind="inference") == 3.0
    assert value(metrics, "ebbtide_allocated_gpus", cluster="c1", pool="a100", kind="batch") == 4.0
    assert value(metrics, "ebbtide_planned_capacity_gpus", cluster="c1", service="chat") == 4.0
    assert value(metrics, "ebbtide_job_decisions_total", cluster="c1", action="hold") == 1
    assert value(metrics, "ebbtide_fallbacks_total", cluster="c1", policy="ebbtide") == 0


def test_lent_headroom_is_reported_per_service(metrics: EbbtideMetrics) -> None:
    borrower = JobDecision(
        job_id="j1", action=JobAction.RUN, pool="a100", gpus=2, reason="borrows", borrows_from="chat"
    )
    made = decision(jobs=[borrower])
    lending = made.allocation.services[0].model_copy(update={"burst_gpus": 2.0})
    alloc = made.allocation.model_copy(update={"services": [lending, *made.allocation.services[1:]]})
    metrics.record_decision(Decision(plan=made.plan, allocation=alloc), decision_s=0.01, now_s=1.0)
    assert value(metrics, "ebbtide_lent_headroom_gpus", cluster="c1", service="chat") == 2.0
    metrics.record_decision(decision(), decision_s=0.01, now_s=2.0)
    assert value(metrics, "ebbtide_lent_headroom_gpus", cluster="c1", service="chat") == 0.0


def test_fallbacks_in_a_row_reset_by_a_normal_decision(metrics: EbbtideMetrics) -> None:
    for _ in range(3):
        metrics.record_decision(decision(fallback=True), decision_s=0.1)
    assert value(metrics, "ebbtide_consecutive_fallbacks", cluster="c1") == 3
    assert value(metrics, "ebbtide_fallbacks_total", cluster="c1", policy="ebbtide") == 3
    metrics.record_decision(decision(), decision_s=0.1)
    assert value(metrics, "ebbtide_consecutive_fallbacks", cluster="c1") == 0
    assert value(metrics, "ebbtide_fallbacks_total", cluster="c1", policy="ebbtide") == 3


def test_preemptions_count_work_lost_since_checkpoint(metrics: EbbtideMetrics) -> None:
    snapshot = state([job_state("j1", JobStatus.RUNNING, since_ckpt=720.0)])
    preempt = [JobDecision(job_id="j1", action=JobAction.PREEMPT, reason="chat needs a100 at 14:00")]
    metrics.record_decision(decision(jobs=preempt), decision_s=0.1, state=snapshot)
    assert value(metrics, "ebbtide_preemptions_total", cluster="c1", pool="a100") == 1
    assert value(metrics, "ebbtide_lost_work_gpu_seconds_total", cluster="c1", pool="a100") == 720.0


def test_objective_terms_that_disappear_are_dropped(metrics: EbbtideMetrics) -> None:
    metrics.record_decision(decision(), decision_s=0.1)
    d = decision()
    plan = d.plan.model_copy(update={"objective": {"work": 1.0}})
    metrics.record_decision(Decision(plan=plan, allocation=d.allocation), decision_s=0.1)
    assert value(metrics, "ebbtide_plan_objective", cluster="c1", term="work") == 1.0
    assert value(metrics, "ebbtide_plan_objective", cluster="c1", term="shortfall") is None


def test_pools_show_the_most_gpus_maintenance_takes_out_at_once_in_the_next_day(
    metrics: EbbtideMetrics,
) -> None:
    def hours(h: float) -> datetime:
        return T0 + timedelta(hours=h)

    windows = [
        PoolWindow(start=hours(2), end=hours(6), gpus_out=8, nodes=["n1"]),
        PoolWindow(start=hours(4), end=hours(5), gpus_out=4, nodes=["n2"]),  # overlaps the first: 12 at once
        PoolWindow(start=hours(10), end=hours(11), gpus_out=8),
        PoolWindow(start=hours(30), end=hours(31), gpus_out=16),  # beyond the day
    ]
    today = state([])
    today = today.model_copy(update={"pools": [today.pools[0].model_copy(update={"windows": windows})]})
    metrics.record_cluster_state(today)
    assert value(metrics, "ebbtide_pool_gpus", cluster="c1", pool="a100", state="maintenance_next_24h") == 12
    metrics.record_cluster_state(state([]))
    assert value(metrics, "ebbtide_pool_gpus", cluster="c1", pool="a100", state="maintenance_next_24h") == 0


def test_cluster_state_capacity_shortfall_and_batch_by_priority(metrics: EbbtideMetrics) -> None:
    jobs = [
        job_state("a", JobStatus.RUNNING, "high"),
        job_state("b", JobStatus.QUEUED, "high"),
        job_state("c", JobStatus.QUEUED, "high"),
        job_state("d", JobStatus.QUEUED, "low"),
    ]
    metrics.record_cluster_state(state(jobs, demand=5.0, replicas=2))
    assert value(metrics, "ebbtide_service_capacity_gpus", cluster="c1", service="chat") == 4.0
    assert value(metrics, "ebbtide_service_demand_gpus", cluster="c1", service="chat") == 5.0
    assert value(metrics, "ebbtide_inference_shortfall_gpus", cluster="c1", service="chat") == 1.0
    assert value(metrics, "ebbtide_pool_gpus", cluster="c1", pool="a100", state="available") == 14
    assert value(metrics, "ebbtide_batch_jobs", cluster="c1", priority_class="high", status="queued") == 2
    assert value(metrics, "ebbtide_batch_gpus", cluster="c1", priority_class="high", status="running") == 4
    # The next snapshot: all low jobs gone, capacity covers demand.
    metrics.record_cluster_state(state(jobs[:3], demand=3.0, replicas=2))
    assert value(metrics, "ebbtide_batch_jobs", cluster="c1", priority_class="low", status="queued") is None
    assert value(metrics, "ebbtide_inference_shortfall_gpus", cluster="c1", service="chat") == 0.0


def forecast() -> DemandForecast:
    return DemandForecast(
        cluster="c1",
        service="chat",
        issued_at=T0,
        step_s=900,
        horizon_steps=3,
        model="holt-winters",
        quantiles={"p50": [2.0, 4.0, 6.0], "p90": [3.0, 5.0, 7.0], "p99": [4.0, 6.0, 9.0]},
        backtest_coverage_90=0.88,
    )


def test_forecast_step_index_covers_half_open_steps() -> None:
    f = forecast()
    assert forecast_step_index(f, T0) == 0
    assert forecast_step_index(f, T0 + timedelta(seconds=899)) == 0
    assert forecast_step_index(f, T0 + timedelta(seconds=900)) == 1
    assert forecast_step_index(f, T0 + timedelta(seconds=2700)) is None
    assert forecast_step_index(f, T0 - timedelta(seconds=1)) is None


def test_forecast_band_error_and_coverage(metrics: EbbtideMetrics) -> None:
    f = forecast()
    metrics.record_forecast(f)
    assert value(metrics, "ebbtide_forecast_demand_gpus", cluster="c1", service="chat", quantile="p90") == 3.0
    assert value(metrics, "ebbtide_forecast_backtest_coverage_ratio", cluster="c1", service="chat") == 0.88
    assert value(metrics, "ebbtide_forecast_degraded", cluster="c1", service="chat") == 0.0

    def sample(offset_s: int, gpus: float) -> DemandSample:
        return DemandSample(
            cluster="c1",
            service="chat",
            time=T0 + timedelta(seconds=offset_s),
            requests_per_s=10.0,
            gpus_busy=gpus,
        )

    assert metrics.record_forecast_outcome(f, sample(100, 2.5)) == 0  # inside p90 (3.0), error 0.5
    assert metrics.record_forecast_outcome(f, sample(1000, 5.5)) == 1  # above p90 (5.0), within p99
    assert metrics.record_forecast_outcome(f, sample(99_999, 1.0)) is None
    labels = {"cluster": "c1", "service": "chat"}
    assert value(metrics, "ebbtide_forecast_evaluations_total", **labels) == 2
    assert value(metrics, "ebbtide_forecast_quantile_covered_total", quantile="p90", **labels) == 1
    assert value(metrics, "ebbtide_forecast_quantile_covered_total", quantile="p99", **labels) == 2
    assert value(metrics, "ebbtide_forecast_abs_error_gpus_sum", **labels) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="actual"):
        metrics.record_forecast_outcome(f, sample(0, 1.0).model_copy(update={"service": "other"}))


def test_gpu_utilization_is_the_pool_mean(metrics: EbbtideMetrics) -> None:
    def gpu(i: int, pct: float) -> GpuSample:
        return GpuSample(
            cluster="c1",
            pool="a100",
            node="n1",
            gpu_index=i,
            gpu_uuid=f"GPU-{i}",
            time=T0,
            utilization_pct=pct,
            memory_used_mib=1.0,
            memory_total_mib=80.0,
            power_w=100.0,
        )

    metrics.record_gpu_samples([gpu(0, 100.0), gpu(1, 50.0)])
    assert value(metrics, "ebbtide_gpu_utilization_ratio", cluster="c1", pool="a100") == 0.75
    assert value(metrics, "ebbtide_gpu_samples_total", cluster="c1", pool="a100") == 2


def test_actuations_dead_letters_and_steps(metrics: EbbtideMetrics) -> None:
    result = ActuationResult(
        cluster="c1",
        backend="slurm",
        plan_id="p1",
        action="hold",
        target="job/j2",
        outcome="failed",
        time=T0,
        error="slurmctld down",
        permanent=False,
    )
    metrics.declare_consumer("state", ["ebbtide.job-events"])
    metrics.record_actuation(result)
    metrics.record_dead_letter(
        DeadLetter(
            source_topic="ebbtide.gpu-samples",
            partition=0,
            offset=7,
            raw_b64="e30=",
            error="time: missing",
            consumer="state",
            time=T0,
        )
    )
    metrics.record_step("optimizer", ok=True, now_s=50.0)
    metrics.record_step("optimizer", ok=False, now_s=80.0)
    assert (
        value(
            metrics,
            "ebbtide_actuations_total",
            cluster="c1",
            backend="slurm",
            action="hold",
            outcome="failed",
        )
        == 1
    )
    assert (
        value(metrics, "ebbtide_dead_letters_total", source_topic="ebbtide.gpu-samples", consumer="state")
        == 1
    )
    # Series exist at 0 before their first increment, so rate() and increase() see a first event.
    labels = {"cluster": "c1", "backend": "slurm", "action": "hold"}
    assert value(metrics, "ebbtide_actuations_total", outcome="applied", **labels) == 0
    assert (
        value(metrics, "ebbtide_dead_letters_total", source_topic="ebbtide.job-events", consumer="state") == 0
    )
    assert value(metrics, "ebbtide_steps_total", component="optimizer", outcome="error") == 1
    assert value(metrics, "ebbtide_last_successful_step_timestamp_seconds", component="optimizer") == 50.0


def test_consumer_lag_from_positions_and_high_watermarks(metrics: EbbtideMetrics) -> None:
    assert partition_lag_messages(10, 15) == 5
    assert partition_lag_messages(20, 15) == 0  # watermark fetched before the last poll
    assert partition_lag_messages(-1001, 15, low_watermark=3) == 12  # no position yet
    assert partition_lag_messages(4, -1001) is None  # broker gave no watermark
    total = metrics.record_consumer_lag(
        "ebbtide-state", "ebbtide.job-events", {0: (10, 15), 1: (3, 3), 2: (0, -1)}
    )
    assert total == 5
    assert (
        value(
            metrics,
            "ebbtide_consumer_lag_messages",
            consumer_group="ebbtide-state",
            topic="ebbtide.job-events",
            partition="0",
        )
        == 5
    )
    assert (
        value(
            metrics,
            "ebbtide_consumer_lag_messages",
            consumer_group="ebbtide-state",
            topic="ebbtide.job-events",
            partition="2",
        )
        is None
    )


UNITS = ("_seconds", "_gpus", "_ratio", "_messages")
UNITLESS = {
    "ebbtide_consecutive_fallbacks",
    "ebbtide_batch_jobs",
    "ebbtide_plan_objective",
    "ebbtide_forecast_degraded",
}


def test_names_follow_prometheus_conventions() -> None:
    families = list(EbbtideMetrics(CollectorRegistry()).registry.collect())
    assert len(families) > 20
    for family in families:
        assert family.name.startswith("ebbtide_"), family.name
        assert not family.name.endswith("_total"), f"{family.name}: _total is added to counters only"
        assert not family.name.endswith(("_ms", "_milliseconds", "_mib")), f"{family.name}: base units"
        if family.type == "gauge" or family.type == "histogram":
            assert family.name.endswith(UNITS) or family.name in UNITLESS, (
                f"{family.name}: no unit in the name"
            )
    names = ebbtide_metric_names()
    assert "ebbtide_decisions_total" in names and "ebbtide_decision_duration_seconds_bucket" in names


def test_served_endpoint_shows_recorded_values(metrics: EbbtideMetrics) -> None:
    metrics.record_step("collector", ok=True, now_s=123.0)
    endpoint = serve_metrics(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
    finally:
        endpoint.close()
    assert 'ebbtide_last_successful_step_timestamp_seconds{component="collector"} 123.0' in body
