"""Prometheus metrics of every ebbtide service: helpers that record loop events into them.

Every stage of the loop (collector, state, forecaster, optimizer, actuator) exposes these on its
metrics port (streams/metrics_http.py). Services never create metric objects; they call the
``record_*`` helpers of an :class:`EbbtideMetrics` (whose metric families streams/metric_families.py
declares, the one place that defines them) with the events they already hold (a
``Decision``, a ``DemandForecast`` and the ``DemandSample`` that came true, an
``ActuationResult``, a ``DeadLetter``, (position, high watermark) pairs). Tests build their own
``EbbtideMetrics(CollectorRegistry())``; a process uses :data:`METRICS` on :data:`REGISTRY`.

Names follow Prometheus conventions: ``ebbtide_`` prefix, base units in the name (``_seconds``,
``_gpus``, ``_ratio``, ``_messages``), ``_total`` for counters (prometheus-client appends it).
The alert rules (deploy/prometheus/) and the dashboard (deploy/grafana/) use only these names, and
tests/observability/ checks that they do.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Gauge,
)
from prometheus_client.registry import Collector

from loop import Decision
from schemas import (
    ActuationResult,
    ClusterState,
    DeadLetter,
    DemandForecast,
    DemandSample,
    GpuSample,
    HorizonPlan,
    JobAction,
    JobEvent,
    JobState,
)
from streams.metric_families import MetricFamilies
from streams.metric_series import (
    ACTUATION_OUTCOMES,
    MAINTENANCE_AHEAD,
    MAX_PRIORITY_CLASSES,
    Series,
    forecast_step_index,
    most_out_at_once,
    partition_lag_messages,
    plan_steps_by_hour,
)


class EbbtideMetrics(MetricFamilies):
    """Every ebbtide metric (streams/metric_families.py), registered on one registry, with helpers
    that record loop events."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self._series: dict[tuple[int, str], set[tuple[str, ...]]] = {}
        self._priority_classes: dict[str, set[str]] = defaultdict(set)

    # -- helpers ---------------------------------------------------------------------------------

    def _replace(self, gauge: Gauge, cluster: str, values: Series) -> None:
        """Set a cluster's series of ``gauge`` to ``values`` (label values after cluster); drop the rest."""
        key = (id(gauge), cluster)
        for stale in self._series.get(key, set()) - set(values):
            gauge.remove(cluster, *stale)
        for labels, value in values.items():
            gauge.labels(cluster, *labels).set(value)
        self._series[key] = set(values)

    # -- recording -------------------------------------------------------------------------------

    def record_step(self, component: str, ok: bool, now_s: float | None = None) -> None:
        """One loop step of a service; a successful one moves its last-success time."""
        for outcome in ("ok", "error"):  # both series exist from the start: rate() sees a first error
            self.steps.labels(component, outcome)
        self.steps.labels(component, "ok" if ok else "error").inc()
        if ok:
            self.last_successful_step.labels(component).set(time.time() if now_s is None else now_s)

    def record_decision(
        self,
        decision: Decision,
        decision_s: float,
        state: ClusterState | None = None,
        now_s: float | None = None,
    ) -> None:
        """A committed decision: latency, solver outcome, fallbacks, objective terms, step-0 allocation.

        With the ClusterState it was decided from, preemptions are counted per pool with the work
        lost since each preempted job's last checkpoint.
        """
        plan, alloc = decision.plan, decision.allocation
        cluster, policy, solver = alloc.cluster, alloc.policy, plan.solver
        self.decisions.labels(cluster, policy).inc()
        self.decision_duration.labels(cluster, policy).observe(max(decision_s, 0.0))
        self.solver_duration.labels(cluster, solver.solver).observe(solver.time_ms / 1000.0)
        self.solver_runs.labels(cluster, solver.solver, solver.status).inc()
        if solver.gap is not None:
            self.solver_gap.labels(cluster).set(solver.gap)
        fallbacks = self.fallbacks.labels(cluster, policy)  # exists at 0 before the first fallback
        if alloc.fallback or solver.fallback:
            fallbacks.inc()
            self.consecutive_fallbacks.labels(cluster).inc()
        else:
            self.consecutive_fallbacks.labels(cluster).set(0)
        self._replace(self.plan_objective, cluster, {(term,): v for term, v in plan.objective.items()})
        self.last_decision.labels(cluster).set(time.time() if now_s is None else now_s)
        self.step_length.labels(cluster).set(alloc.step_s)
        self.record_plan_horizon(plan)

        gpus: Series = defaultdict(float)
        capacity: Series = defaultdict(float)
        lent: Series = defaultdict(float)
        for svc in alloc.services:
            gpus[(svc.pool, "inference")] += svc.gpus
            capacity[(svc.service,)] += svc.gpus
            lent[(svc.service,)] += svc.burst_gpus
        for job in alloc.jobs:
            self.job_decisions.labels(cluster, job.action.value).inc()
            if job.action == JobAction.RUN and job.pool is not None:
                gpus[(job.pool, "batch")] += job.gpus
        self._replace(self.allocated_gpus, cluster, gpus)
        self._replace(self.planned_capacity, cluster, capacity)
        self._replace(self.lent_headroom, cluster, lent)

        running = {j.spec.job_id: j for j in state.jobs if j.pool is not None} if state is not None else {}
        for job in alloc.jobs:
            if job.action != JobAction.PREEMPT:
                continue
            current = running.get(job.job_id)
            pool = current.pool if current is not None and current.pool else (job.pool or "unknown")
            self.preemptions.labels(cluster, pool).inc()
            if current is not None:
                self.lost_work.labels(cluster, pool).inc(current.since_checkpoint_gpu_s)

    def record_plan_horizon(self, plan: HorizonPlan) -> None:
        """The plan's steps at PLAN_HOURS_AHEAD: service GPUs per (service, pool), batch GPUs per pool.

        Every (service, pool) and pool the sampled steps use gets a series at every exported hour
        (0 where that hour's step gives it nothing), so a bar chart has no holes; series of a
        service or pool no longer in the plan, or of hours past its horizon, are removed.
        """
        sampled = plan_steps_by_hour(plan)
        services: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
        batch: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for hour, step in sampled.items():
            for svc in step.services:
                services[(svc.service, svc.pool)][hour] += svc.gpus
                batch[svc.pool]  # a pool the plan uses for inference shows its batch at 0 too
            for job in step.jobs:
                batch[job.pool][hour] += job.gpus
        self._replace(
            self.plan_service_gpus,
            plan.cluster,
            {
                (service, pool, str(hour)): by_hour.get(hour, 0.0)
                for (service, pool), by_hour in services.items()
                for hour in sampled
            },
        )
        self._replace(
            self.plan_batch_gpus,
            plan.cluster,
            {
                (pool, str(hour)): by_hour.get(hour, 0.0)
                for pool, by_hour in batch.items()
                for hour in sampled
            },
        )

    def record_cluster_state(self, state: ClusterState) -> None:
        """Pool sizes, inference capacity vs demand (and shortfall), batch jobs by priority and status."""
        cluster = state.cluster
        pools: Series = {}
        for pool in state.pools:
            pools[(pool.name, "total")] = pool.gpus_total
            pools[(pool.name, "available")] = pool.gpus_available
            ahead = state.as_of + MAINTENANCE_AHEAD
            pools[(pool.name, "maintenance_next_24h")] = most_out_at_once(pool.windows, state.as_of, ahead)
        self._replace(self.pool_gpus, cluster, pools)

        capacity: Series = {}
        demand: Series = {}
        shortfall: Series = {}
        for svc in state.services:
            name = (svc.spec.service,)
            capacity[name] = float(sum(svc.replicas.values()) * svc.spec.gpus_per_replica)
            if svc.demand_history:
                demand[name] = svc.demand_history[-1]
                shortfall[name] = max(demand[name] - capacity[name], 0.0)
        self._replace(self.service_capacity, cluster, capacity)
        self._replace(self.service_demand, cluster, demand)
        self._replace(self.inference_shortfall, cluster, shortfall)

        jobs: Series = defaultdict(float)
        job_gpus: Series = defaultdict(float)
        for job in state.jobs:
            key = (job.spec.priority_class, job.status.value)
            jobs[key] += 1
            job_gpus[key] += job.spec.gpus
        self._replace(self.batch_jobs, cluster, jobs)
        self._replace(self.batch_gpus, cluster, job_gpus)

    def record_first_starts(self, cluster: str, jobs: Iterable[JobState]) -> None:
        """Jobs' first starts: each one's wait from submission to start (once per job: the caller's part).

        The state service calls it with the jobs its fold saw start for the first time, when the
        snapshot that holds those starts is published (streams.services.state says how a restart
        is kept from observing a job again, and the limit of that).
        """
        for job in jobs:
            if job.started_at is None:
                continue
            wait_s = max((job.started_at - job.submitted_at).total_seconds(), 0.0)
            priority_class = self._priority_class(cluster, job.spec.priority_class)
            self.job_queue_wait.labels(cluster, priority_class).observe(wait_s)

    def _priority_class(self, cluster: str, name: str) -> str:
        """``name``, or "other" once MAX_PRIORITY_CLASSES others of this cluster have a series."""
        known = self._priority_classes[cluster]
        if name in known:
            return name
        if len(known) >= MAX_PRIORITY_CLASSES:
            return "other"
        known.add(name)
        return name

    def record_job_event(self, event: JobEvent) -> None:
        self.job_events.labels(event.cluster, event.kind.value).inc()

    def record_gpu_samples(self, samples: Iterable[GpuSample]) -> None:
        """A batch of GPU readings: mean utilization per pool of the batch, sample counts."""
        totals: dict[tuple[str, str], list[float]] = defaultdict(list)
        for sample in samples:
            totals[(sample.cluster, sample.pool)].append(sample.utilization_pct / 100.0)
        for (cluster, pool), values in totals.items():
            self.gpu_utilization.labels(cluster, pool).set(sum(values) / len(values))
            self.gpu_samples.labels(cluster, pool).inc(len(values))

    def record_source_round(self, cluster: str, source: str, published: Iterable[object]) -> None:
        """What a cluster source's acknowledged round published: job events and an inventory."""
        self.source_snapshot_failures.labels(cluster, source)
        for event in published:
            if isinstance(event, JobEvent):
                self.record_job_event(event)
            else:
                self.source_inventories.labels(cluster, source).inc()

    def record_source_failure(self, cluster: str, source: str) -> None:
        self.source_snapshot_failures.labels(cluster, source).inc()

    def record_demand_samples(self, samples: Iterable[DemandSample]) -> None:
        """DemandSamples the Prometheus demand source published."""
        for sample in samples:
            self.demand_samples.labels(sample.cluster, sample.service).inc()

    def declare_demand_services(self, services: Iterable[str], reasons: Iterable[str]) -> None:
        """Every (service, reason) failure series at 0 at start-up, so rate() sees a first failure."""
        reasons = tuple(reasons)
        for service in services:
            for reason in reasons:
                self.demand_query_failures.labels(service, reason)

    def record_demand_query_failure(self, service: str, reason: str) -> None:
        """A demand query refused: nothing is published for ``service`` this step."""
        self.demand_query_failures.labels(service, reason).inc()

    def record_forecast(self, forecast: DemandForecast) -> None:
        """A newly issued forecast: its first step per quantile, degradation and backtest coverage."""
        cluster, service = forecast.cluster, forecast.service
        self.forecasts.labels(cluster, service, forecast.model).inc()
        for quantile, curve in forecast.quantiles.items():
            self.forecast_demand.labels(cluster, service, quantile).set(curve[0])
        self.forecast_degraded.labels(cluster, service).set(1.0 if forecast.degraded_reason else 0.0)
        if forecast.backtest_coverage_90 is not None:
            self.forecast_backtest_coverage.labels(cluster, service).set(forecast.backtest_coverage_90)

    def record_forecast_outcome(self, forecast: DemandForecast, actual: DemandSample) -> int | None:
        """Compare a forecast with the demand that came true; returns the step evaluated (None: outside).

        Call it once per (forecast, step): each call counts one evaluation.
        """
        if (actual.cluster, actual.service) != (forecast.cluster, forecast.service):
            raise ValueError(
                f"actual: sample of {actual.cluster}/{actual.service} compared with the forecast of "
                f"{forecast.cluster}/{forecast.service}"
            )
        step = forecast_step_index(forecast, actual.time)
        if step is None:
            return None
        cluster, service = forecast.cluster, forecast.service
        error_gpus = abs(actual.gpus_busy - forecast.quantiles["p50"][step])
        self.forecast_abs_error.labels(cluster, service).observe(error_gpus)
        self.forecast_evaluations.labels(cluster, service).inc()
        for quantile, curve in forecast.quantiles.items():
            covered = self.forecast_covered.labels(cluster, service, quantile)
            if actual.gpus_busy <= curve[step] + 1e-9:
                covered.inc()
        return step

    def record_actuation(self, result: ActuationResult) -> None:
        """One actuation result; every outcome's series of its target exists, so a first failure shows."""
        for outcome in ACTUATION_OUTCOMES:
            self.actuations.labels(result.cluster, result.backend, result.action, outcome)
        self.actuations.labels(result.cluster, result.backend, result.action, result.outcome).inc()

    def declare_consumer(self, consumer: str, source_topics: Iterable[str]) -> None:
        """Create a consumer's dead-letter series at 0 at start-up, so rate() sees its first dead letter."""
        for topic in source_topics:
            self.dead_letters.labels(topic, consumer)
        self.delivery_failures.labels(consumer)

    def record_delivery_failure(self, service: str) -> None:
        """An output the broker did not acknowledge: the service replays its uncommitted inputs."""
        self.delivery_failures.labels(service).inc()

    def record_dead_letter(self, letter: DeadLetter) -> None:
        self.dead_letters.labels(letter.source_topic, letter.consumer).inc()

    def record_consumer_lag(
        self, consumer_group: str, topic: str, positions: Mapping[int, tuple[int, int]]
    ) -> int:
        """Lag per partition from {partition: (position, high watermark)}; returns the topic's total."""
        total = 0
        for partition, (position, high) in positions.items():
            lag = partition_lag_messages(position, high)
            if lag is None:
                continue
            self.consumer_lag.labels(consumer_group, topic, str(partition)).set(lag)
            total += lag
        return total


def _process_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    collector: Collector
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


REGISTRY = _process_registry()
"""The registry a service process serves: ebbtide's metrics plus process, platform and GC metrics."""

METRICS = EbbtideMetrics(REGISTRY)
"""The process-wide metrics; services record through it, tests build their own EbbtideMetrics."""
