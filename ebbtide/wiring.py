"""Wiring of the stream services: settings in, a runnable ServiceRuntime out (the composition root).

``ebbtide run <service>`` and ``ebbtide demo`` both build their services here, so a service run
alone and a service in the demo are the same object with different injected parts (clock,
policy, forecast source, actuator backend). Services are consumer-group members: the forecaster
and the actuator read topics keyed by cluster, so their instances share one group
(``<group_prefix>.<service>``) and split the clusters by partition; the state service and the
optimizer also read topics keyed otherwise (job id, service), so they run one group per cluster
(``<group_prefix>.<service>.<cluster>``), each keeping only its cluster's events.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from actuators.factory import build_actuator
from ebbtide.settings import Settings, SettingsError
from forecaster.source import BankForecastSource
from loop import Actuator, Clock, ClusterSource, Decision, ForecastSource, Policy
from schemas import ClusterState, JobState, PoolState, ServiceSpec, ServiceState
from schemas.codec import describe
from schemas.topics import ACTUATIONS, CLUSTER_STATE, INVENTORY, JOB_EVENTS, Topic
from streams.fold import Pruning
from streams.health import Heartbeat
from streams.metrics import EbbtideMetrics
from streams.prometheus_demand import build_queries
from streams.services.actuator import ActuatorProcessor
from streams.services.demand_source import DemandSource, Fetch, prometheus_fetch
from streams.services.forecaster import ForecasterProcessor
from streams.services.observe import ServiceMetrics
from streams.services.optimizer import DecisionHook, OptimizerProcessor
from streams.services.runtime import Processor, ServiceRuntime, read_topic_to_end
from streams.services.source import SourcePublisher
from streams.services.state import StateProcessor, restore_fold

log = logging.getLogger(__name__)

SERVICES = ("collector", "state", "forecaster", "optimizer", "actuator")


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def default_seed(settings: Settings) -> ClusterState:
    """A small cluster when no cluster_spec is configured: two pools and one service."""
    return ClusterState(
        cluster=settings.cluster,
        as_of=datetime(1970, 1, 1, tzinfo=UTC),
        step_s=settings.step_s,
        pools=[
            PoolState(name="a100", gpu_type="A100", gpus_total=32, gpus_available=32, gpus_per_node=8),
            PoolState(name="t4", gpu_type="T4", gpus_total=16, gpus_available=16, gpus_per_node=4),
        ],
        services=[ServiceState(spec=ServiceSpec(service="inference"))],
    )


def load_seed(settings: Settings) -> ClusterState:
    """The cluster the state service starts from: ``cluster_spec`` (YAML or JSON), or the default."""
    path = settings.cluster_spec
    if path is None:
        return default_seed(settings)
    try:
        data: Any = yaml.safe_load(Path(path).read_text())
        data = {
            "cluster": settings.cluster,
            "step_s": settings.step_s,
            "as_of": "1970-01-01T00:00:00Z",
            **(data or {}),
        }
        return ClusterState.model_validate_json(json.dumps(data, default=str))
    except yaml.YAMLError as exc:
        raise SettingsError(
            f"setting cluster_spec [EBBTIDE_CLUSTER_SPEC]: {path} is not YAML: {exc}"
        ) from None
    except ValueError as exc:
        detail = describe(exc) if hasattr(exc, "errors") else str(exc)  # type: ignore[arg-type]
        raise SettingsError(f"setting cluster_spec [EBBTIDE_CLUSTER_SPEC]: {path}: {detail}") from None


class PlannerUnavailable(RuntimeError):
    """The planner (optimizer/ with Pyomo and HiGHS) cannot be loaded: the service must not run
    with another policy in its place, so it stops and says why."""


def default_policy(settings: Settings) -> Policy:
    """The ebbtide planner, configured from the settings; never a silent stand-in."""
    try:
        from optimizer.config import PlannerConfig
        from optimizer.planner import PlannerPolicy
    except ImportError as exc:
        raise PlannerUnavailable(
            f"the ebbtide planner cannot be loaded ({exc}); reinstall ebbtide with its dependencies "
            "(./scripts/bootstrap.sh, or pip install ebbtide): the optimizer will not plan with a baseline"
        ) from exc
    config = PlannerConfig(
        lend_headroom=settings.lends_headroom(), time_limit_s=settings.optimizer.decision_budget_s
    )
    return PlannerPolicy(name="ebbtide", config=config)


def default_forecast_source(settings: Settings) -> ForecastSource:
    """The forecaster's model bank (refits inline when due)."""
    return BankForecastSource(horizon_s=settings.horizon_steps * settings.step_s)


def default_backend(settings: Settings) -> Actuator:
    """dry-run by default, Kubernetes or Slurm when the settings say so: each through the same
    actuation engine (actuators/)."""
    return build_actuator(settings.actuator, settings.cluster)


@dataclass
class Parts:
    """What a service may have injected instead of the defaults (the demo and tests use this)."""

    clock: Clock | None = None
    seed: ClusterState | None = None
    policy: Policy | None = None
    forecast_source: ForecastSource | None = None
    backend: Actuator | None = None
    backend_name: str = "dry-run"
    on_decision: DecisionHook | None = None
    on_first_starts: Callable[[str, Sequence[JobState]], None] | None = None
    replan_on_events: bool = True


def build_processor(service: str, settings: Settings, parts: Parts) -> Processor:
    bootstrap = settings.kafka
    if service == "state":
        seed = parts.seed or load_seed(settings)
        clock = parts.clock or WallClock()
        restored = read_topic_to_end(bootstrap, CLUSTER_STATE, idle_s=0.5, prefix=settings.kafka.topic_prefix)
        not_after = clock.now() + timedelta(seconds=settings.state.max_event_skew_s)
        pruning = Pruning(settings.state.gpu_vanished_steps, settings.state.job_abandoned_s)
        inventories = read_topic_to_end(bootstrap, INVENTORY, idle_s=0.5, prefix=settings.kafka.topic_prefix)
        fold, latest = restore_fold(
            seed, restored, settings.state.max_history_steps, not_after, pruning, inventories
        )
        return StateProcessor(
            fold=fold,
            clock=clock,
            max_event_skew_s=settings.state.max_event_skew_s,
            last_published=latest,
            replan_on_events=parts.replan_on_events,
            high_priority_weight=settings.state.high_priority_weight,
            drift_band=settings.forecaster.drift_band,
            on_first_starts=parts.on_first_starts,
        )
    if service == "forecaster":
        source = parts.forecast_source or default_forecast_source(settings)
        return ForecasterProcessor(
            source=source, drift_band=settings.forecaster.drift_band, cluster=settings.cluster
        )
    if service == "optimizer":
        return OptimizerProcessor(
            policy=parts.policy or default_policy(settings),
            forecast_wait_s=settings.optimizer.forecast_wait_s,
            on_decision=parts.on_decision,
            cluster=settings.cluster,
            clock=parts.clock or WallClock(),
            max_state_skew_s=settings.optimizer.max_state_skew_s,
        )
    if service == "actuator":
        processor = ActuatorProcessor(
            backend=parts.backend or default_backend(settings),
            backend_name=parts.backend_name if parts.backend else settings.actuator.backend,
            clock=parts.clock or WallClock(),
            max_allocation_skew_s=settings.actuator.max_allocation_skew_s,
        )
        processor.remember(
            read_topic_to_end(bootstrap, ACTUATIONS, idle_s=0.5, prefix=settings.kafka.topic_prefix)
        )
        return processor
    raise SettingsError(f"service {service!r}: not one of {', '.join(SERVICES)}")


CLUSTER_SCOPED = ("state", "optimizer")
"""Services whose inputs are not all keyed by cluster: one consumer group per cluster, each
instance reading every partition and keeping its own cluster. The forecaster (cluster-state) and
the actuator (allocations) read topics keyed by cluster: one group, partitions shared."""


def service_inputs() -> dict[str, tuple[Topic, ...]]:
    """The topics each stream service consumes: its consumer group's topics."""
    return {
        "state": StateProcessor.inputs,
        "forecaster": ForecasterProcessor.inputs,
        "optimizer": OptimizerProcessor.inputs,
        "actuator": ActuatorProcessor.inputs,
    }


def group_id_for(service: str, settings: Settings) -> str:
    base = f"{settings.kafka.group_prefix}.{service}"
    return f"{base}.{settings.cluster}" if service in CLUSTER_SCOPED else base


TEST_HOOK_KILL_AT_DECISION = "EBBTIDE_TEST_HOOK_SIGKILL_BEFORE_COMMIT_AT_DECISION"


def _test_hook_kill(processor: Processor) -> Callable[[], None] | None:
    """TEST HOOK, off unless ``EBBTIDE_TEST_HOOK_SIGKILL_BEFORE_COMMIT_AT_DECISION=N`` is set: the
    optimizer SIGKILLs its own process at the first commit after its Nth decision, its outputs
    produced and acknowledged, its transaction (where there is one) still open. For the kill tests
    (tests/loop/test_loop_kafka.py); never set in service."""
    raw = os.environ.get(TEST_HOOK_KILL_AT_DECISION)
    if not raw or not isinstance(processor, OptimizerProcessor):
        return None
    at = int(raw)

    def kill_if_due() -> None:
        if processor.decisions >= at:
            os.kill(os.getpid(), signal.SIGKILL)

    return kill_if_due


def build_runtime(
    service: str,
    settings: Settings,
    parts: Parts | None = None,
    transactions: bool = False,
    metrics: EbbtideMetrics | None = None,
    heartbeat: Heartbeat | None = None,
) -> ServiceRuntime:
    """One service; with ``metrics`` it records loop events on them (``ebbtide run`` passes METRICS),
    with ``heartbeat`` each completed poll beats it (what /healthz answers from)."""
    parts = parts or Parts()
    if metrics is not None and service == "optimizer" and parts.on_decision is None:
        recorder = metrics

        def record(decision: Decision, state: ClusterState, seconds: float) -> None:
            recorder.record_decision(decision, seconds, state)

        parts = dataclasses.replace(parts, on_decision=record)
    if metrics is not None and service == "state" and parts.on_first_starts is None:
        parts = dataclasses.replace(parts, on_first_starts=metrics.record_first_starts)
    processor = build_processor(service, settings, parts)
    kafka = settings.kafka
    group_id = group_id_for(service, settings)
    observe = ServiceMetrics(metrics, service, group_id) if metrics is not None else None
    use_tx = service == "optimizer" and (
        settings.optimizer.transactions == "on"
        or (settings.optimizer.transactions == "auto" and transactions)
    )
    return ServiceRuntime(
        processor=processor,
        bootstrap=kafka,
        group_id=group_id,
        observe=observe,
        heartbeat=heartbeat,
        batch_size=kafka.batch_size,
        poll_timeout_s=kafka.poll_timeout_s,
        session_timeout_ms=kafka.session_timeout_ms,
        heartbeat_interval_ms=kafka.heartbeat_interval_ms,
        transactional=use_tx,
        transactional_id=f"{kafka.group_prefix}.{service}.{settings.cluster}" if use_tx else None,
        topic_prefix=kafka.topic_prefix,
        before_commit=_test_hook_kill(processor),
        # Above the longest a poll can wait on a decision (twice the budget and the forecast wait).
        max_poll_interval_ms=max(
            300_000,
            int(2_000 * (settings.optimizer.decision_budget_s + settings.optimizer.forecast_wait_s)) + 60_000,
        ),
    )


def build_cluster_source(settings: Settings) -> ClusterSource:
    """The cluster source of ``source.backend``; unset raises SettingsError naming it."""
    backend = settings.source.backend
    if backend == "slurm":
        from actuators.slurm.source import slurm_source

        slurm = settings.actuator.slurm
        if slurm.rest_url and not (slurm.rest_token or os.environ.get("SLURM_JWT")):
            raise SettingsError(
                "setting actuator.slurm.rest_token [EBBTIDE_ACTUATOR__SLURM__REST_TOKEN]: required with "
                "actuator.slurm.rest_url (or set SLURM_JWT)"
            )
        return slurm_source(slurm, settings.cluster)
    if backend == "kubernetes":
        from actuators.kube.source import kubernetes_source

        return kubernetes_source(settings.actuator.kubernetes, settings.cluster)
    if backend is None:
        raise SettingsError(
            "setting source.backend [EBBTIDE_SOURCE__BACKEND]: required by the source (slurm or kubernetes)"
        )
    raise SettingsError(f"setting source.backend [EBBTIDE_SOURCE__BACKEND]: {backend!r} has no source")


def build_source_publisher(settings: Settings, source: ClusterSource) -> SourcePublisher:
    """The source's publisher, its ``last`` rebuilt from the job-events and inventory topics."""
    bootstrap, prefix = settings.kafka, settings.kafka.topic_prefix
    seed = load_seed(settings)
    return SourcePublisher(
        source,
        settings.cluster,
        restored_jobs=read_topic_to_end(bootstrap, JOB_EVENTS, idle_s=0.5, prefix=prefix),
        restored_inventories=read_topic_to_end(bootstrap, INVENTORY, idle_s=0.5, prefix=prefix),
        pools=[p.name for p in seed.pools],
    )


def _demand_setting(name: str) -> str:
    path = ["demand", *name.split(".")]
    return f"setting {'.'.join(path)} [EBBTIDE_{'__'.join(p.upper() for p in path)}]"


def build_demand_source(
    settings: Settings, metrics: EbbtideMetrics, fetch: Fetch | None = None
) -> DemandSource:
    """The Prometheus demand source of the settings (``demand.*``); a missing or unusable setting
    raises SettingsError naming it before anything is queried or produced."""
    demand = settings.demand
    if not demand.prometheus_url:
        raise SettingsError(
            f"{_demand_setting('prometheus_url')}: required by the demand source (http://host:9090)"
        )
    templates = {"gpus_busy": demand.gpus_busy_query, "requests_per_s": demand.requests_per_s_query}
    services = {name: q.model_dump() for name, q in demand.services.items()}
    try:
        queries = build_queries(services, templates)
    except ValueError as exc:
        name, _, problem = str(exc).partition(": ")
        raise SettingsError(f"{_demand_setting(name)}: {problem}") from None
    fetch = fetch or prometheus_fetch(demand.prometheus_url, demand.query_timeout_s)
    return DemandSource(settings.cluster, queries, fetch, metrics)
