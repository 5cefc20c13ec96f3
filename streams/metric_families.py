"""The Prometheus metric families of every ebbtide service, declared on one registry.

Part of the loop's observability (streams/metrics.py records loop events into them; every
service exposes them on its metrics port, streams/metrics_http.py). This module only says which
metrics exist, with their names, help, labels and buckets; the naming rules are in
streams/metrics.py's docstring.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.metric_series import FORECAST_ERROR_BUCKETS_GPUS, LATENCY_BUCKETS_S, QUEUE_WAIT_BUCKETS_S


class MetricFamilies:
    """Every ebbtide metric, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._declare_loop_health(registry)
        self._declare_decisions(registry)
        self._declare_allocations(registry)
        self._declare_plan_horizon(registry)
        self._declare_cluster_state(registry)
        self._declare_telemetry(registry)
        self._declare_forecasts(registry)
        self._declare_actuation_and_streams(registry)

    def _declare_loop_health(self, r: CollectorRegistry) -> None:
        """Loop health, per service."""
        self.steps = Counter(
            "ebbtide_steps",
            "Loop steps a service ran, by outcome (ok or error)",
            ["component", "outcome"],
            registry=r,
        )
        self.last_successful_step = Gauge(
            "ebbtide_last_successful_step_timestamp_seconds",
            "Unix time of the service's last step that completed without error",
            ["component"],
            registry=r,
        )

    def _declare_decisions(self, r: CollectorRegistry) -> None:
        """Decisions (optimizer)."""
        self.decisions = Counter(
            "ebbtide_decisions", "Decisions committed", ["cluster", "policy"], registry=r
        )
        self.decision_duration = Histogram(
            "ebbtide_decision_duration_seconds",
            "Wall time of one decision (update, solve, extract)",
            ["cluster", "policy"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.solver_duration = Histogram(
            "ebbtide_solver_duration_seconds",
            "Solver time reported in the plan's SolverInfo",
            ["cluster", "solver"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.solver_runs = Counter(
            "ebbtide_solver_runs",
            "Solves by solver termination status",
            ["cluster", "solver", "status"],
            registry=r,
        )
        self.solver_gap = Gauge(
            "ebbtide_solver_gap_ratio", "Relative MIP gap of the latest solve", ["cluster"], registry=r
        )
        self.fallbacks = Counter(
            "ebbtide_fallbacks", "Decisions that fell back to a safe plan", ["cluster", "policy"], registry=r
        )
        self.consecutive_fallbacks = Gauge(
            "ebbtide_consecutive_fallbacks",
            "Fallback decisions in a row (0 after a normal decision)",
            ["cluster"],
            registry=r,
        )
        self.plan_objective = Gauge(
            "ebbtide_plan_objective",
            "Objective terms of the latest plan, by term",
            ["cluster", "term"],
            registry=r,
        )
        self.last_decision = Gauge(
            "ebbtide_last_decision_timestamp_seconds",
            "Unix time the latest decision was committed",
            ["cluster"],
            registry=r,
        )
        self.step_length = Gauge(
            "ebbtide_step_length_seconds", "The loop's step length (step_s)", ["cluster"], registry=r
        )

    def _declare_allocations(self, r: CollectorRegistry) -> None:
        """The latest allocation (optimizer): GPUs by pool and kind, per service, lent; job decisions."""
        self.allocated_gpus = Gauge(
            "ebbtide_allocated_gpus",
            "GPUs of the latest allocation by pool and kind (inference, batch)",
            ["cluster", "pool", "kind"],
            registry=r,
        )
        self.planned_capacity = Gauge(
            "ebbtide_planned_capacity_gpus",
            "Inference capacity of the latest allocation (step 0) per service",
            ["cluster", "service"],
            registry=r,
        )
        self.lent_headroom = Gauge(
            "ebbtide_lent_headroom_gpus",
            "Burst ceiling of the latest allocation: inference headroom lent to "
            "preemptible jobs, GPUs left idle and, in a surge, the cheapest batch to "
            "stop (the service's autoscaler may take it within the step)",
            ["cluster", "service"],
            registry=r,
        )
        self.job_decisions = Counter(
            "ebbtide_job_decisions", "Job decisions (run, hold, preempt)", ["cluster", "action"], registry=r
        )
        self.preemptions = Counter(
            "ebbtide_preemptions", "Running jobs the allocations preempted", ["cluster", "pool"], registry=r
        )
        self.lost_work = Counter(
            "ebbtide_lost_work_gpu_seconds",
            "GPU-seconds since the last checkpoint of preempted jobs (work lost)",
            ["cluster", "pool"],
            registry=r,
        )

    def _declare_plan_horizon(self, r: CollectorRegistry) -> None:
        """The latest plan's next 24 h (optimizer), at the hours of PLAN_HOURS_AHEAD."""
        self.plan_service_gpus = Gauge(
            "ebbtide_plan_service_gpus",
            "Inference GPUs the latest plan gives a service in a pool, hours_ahead hours after it was issued",
            ["cluster", "service", "pool", "hours_ahead"],
            registry=r,
        )
        self.plan_batch_gpus = Gauge(
            "ebbtide_plan_batch_gpus",
            "Batch GPUs the latest plan places in a pool, hours_ahead hours after it was issued",
            ["cluster", "pool", "hours_ahead"],
            registry=r,
        )

    def _declare_cluster_state(self, r: CollectorRegistry) -> None:
        """Cluster state (state service)."""
        self.pool_gpus = Gauge(
            "ebbtide_pool_gpus",
            "GPUs per pool (state: total, available, or maintenance_next_24h: the most GPUs announced "
            "maintenance windows take out at once within the next 24 hours)",
            ["cluster", "pool", "state"],
            registry=r,
        )
        self.service_capacity = Gauge(
            "ebbtide_service_capacity_gpus",
            "GPUs of running inference replicas",
            ["cluster", "service"],
            registry=r,
        )
        self.service_demand = Gauge(
            "ebbtide_service_demand_gpus",
            "Busy GPUs the service demands now",
            ["cluster", "service"],
            registry=r,
        )
        self.inference_shortfall = Gauge(
            "ebbtide_inference_shortfall_gpus",
            "Demanded GPUs not covered by running capacity now",
            ["cluster", "service"],
            registry=r,
        )
        self.batch_jobs = Gauge(
            "ebbtide_batch_jobs",
            "Batch jobs by priority class and status",
            ["cluster", "priority_class", "status"],
            registry=r,
        )
        self.batch_gpus = Gauge(
            "ebbtide_batch_gpus",
            "Gang GPUs of batch jobs by priority class and status",
            ["cluster", "priority_class", "status"],
            registry=r,
        )
        self.job_events = Counter(
            "ebbtide_job_events", "Job lifecycle events seen, by kind", ["cluster", "kind"], registry=r
        )
        self.job_queue_wait = Histogram(
            "ebbtide_job_queue_wait_seconds",
            "Submission to first start of a batch job, observed once per job when it first starts",
            ["cluster", "priority_class"],
            buckets=QUEUE_WAIT_BUCKETS_S,
            registry=r,
        )

    def _declare_telemetry(self, r: CollectorRegistry) -> None:
        """Telemetry (collector)."""
        self.gpu_utilization = Gauge(
            "ebbtide_gpu_utilization_ratio",
            "Mean GPU utilization of a pool (0-1)",
            ["cluster", "pool"],
            registry=r,
        )
        self.gpu_samples = Counter("ebbtide_gpu_samples", "GPU samples read", ["cluster", "pool"], registry=r)
        self.demand_samples = Counter(
            "ebbtide_demand_samples",
            "DemandSamples the Prometheus demand source published",
            ["cluster", "service"],
            registry=r,
        )
        self.source_snapshot_failures = Counter(
            "ebbtide_source_snapshot_failures",
            "Snapshots a cluster source could not take (the cluster did not answer); retried next interval",
            ["cluster", "source"],
            registry=r,
        )
        self.source_inventories = Counter(
            "ebbtide_source_inventories",
            "PoolInventories a cluster source published (on a change)",
            ["cluster", "source"],
            registry=r,
        )
        self.demand_query_failures = Counter(
            "ebbtide_demand_query_failures",
            "Demand queries to Prometheus refused (failed, empty, several series, out of range): "
            "no DemandSample is published for the service that step",
            ["service", "reason"],
            registry=r,
        )

    def _declare_forecasts(self, r: CollectorRegistry) -> None:
        """Forecasts (forecaster)."""
        self.forecasts = Counter(
            "ebbtide_forecasts", "Forecasts issued", ["cluster", "service", "model"], registry=r
        )
        self.forecast_demand = Gauge(
            "ebbtide_forecast_demand_gpus",
            "Forecast demand of the first horizon step, by quantile",
            ["cluster", "service", "quantile"],
            registry=r,
        )
        self.forecast_degraded = Gauge(
            "ebbtide_forecast_degraded",
            "1 when the latest forecast is degraded",
            ["cluster", "service"],
            registry=r,
        )
        self.forecast_backtest_coverage = Gauge(
            "ebbtide_forecast_backtest_coverage_ratio",
            "Backtest coverage of the p90 band the model reported",
            ["cluster", "service"],
            registry=r,
        )
        self.forecast_abs_error = Histogram(
            "ebbtide_forecast_abs_error_gpus",
            "|actual - p50| of a forecast step once its demand is known",
            ["cluster", "service"],
            buckets=FORECAST_ERROR_BUCKETS_GPUS,
            registry=r,
        )
        self.forecast_evaluations = Counter(
            "ebbtide_forecast_evaluations",
            "Forecast steps compared with the demand that came true",
            ["cluster", "service"],
            registry=r,
        )
        self.forecast_covered = Counter(
            "ebbtide_forecast_quantile_covered",
            "Evaluated steps whose actual demand was at or below the quantile",
            ["cluster", "service", "quantile"],
            registry=r,
        )

    def _declare_actuation_and_streams(self, r: CollectorRegistry) -> None:
        """Actuation, streams."""
        self.actuations = Counter(
            "ebbtide_actuations",
            "Actuation results by backend, action and outcome",
            ["cluster", "backend", "action", "outcome"],
            registry=r,
        )
        self.dead_letters = Counter(
            "ebbtide_dead_letters",
            "Records sent to the dead-letter topic",
            ["source_topic", "consumer"],
            registry=r,
        )
        self.delivery_failures = Counter(
            "ebbtide_delivery_failures",
            "Outputs the broker did not acknowledge (their inputs are replayed)",
            ["service"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "ebbtide_consumer_lag_messages",
            "High watermark minus the consumer's position, per partition",
            ["consumer_group", "topic", "partition"],
            registry=r,
        )
