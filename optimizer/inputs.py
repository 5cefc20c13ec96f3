"""Build the inputs: the planner's view of one decision, as arrays (pipeline stage 2, after the
calibration in optimizer/calibration.py, before the model update in optimizer/model_update.py).

Turns a ClusterState, the services' DemandForecasts and ``now`` into numbers over the horizon's
time blocks: pool capacity per step (maintenance windows, failures), demand at each service's SLO
quantile, job gangs, weights, remaining work, allowed pools, running placements. The services'
part (placement, demand; a seasonal-naive forecast for a service without one) is worked out in
optimizer/service_inputs.py. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

import numpy as np

from optimizer.config import PlannerConfig
from optimizer.interference import DEFAULT_CURVE, InterferenceCurve
from optimizer.nodes import NodeHolds, going_out
from optimizer.quota import OUTSIDE_QUOTAS, idle_quota, outside_quotas
from optimizer.service_inputs import service_demand, service_placement
from schemas import ClusterState, DemandForecast, JobSpec, JobState, JobStatus, PoolState


@dataclass(frozen=True)
class Blocks:
    """The horizon cut into blocks: fine steps first, then longer blocks. It depends only on the
    settings, so a planner makes it once and every decision shares it (never written to)."""

    first_step: np.ndarray  # [B] index of the block's first step
    n_steps: np.ndarray  # [B] steps in the block
    step_s: int

    @property
    def count(self) -> int:
        return int(self.first_step.size)

    @cached_property
    def dur_s(self) -> np.ndarray:
        """[B] seconds in each block (read-only)."""
        dur_s = self.n_steps * float(self.step_s)
        dur_s.flags.writeable = False
        return dur_s

    @cached_property
    def horizon_s(self) -> float:
        """Seconds in the whole horizon."""
        return float(self.dur_s.sum())


def make_blocks(config: PlannerConfig, horizon_steps: int, step_s: int) -> Blocks:
    starts: list[int] = []
    lengths: list[int] = []
    t = 0
    while t < horizon_steps:
        if t < max(config.fine_steps, 1):
            length = 1
        elif t < config.mid_until_step:
            length = min(config.mid_block_steps, config.mid_until_step - t)
        else:
            length = config.coarse_block_steps
        length = min(length, horizon_steps - t)
        starts.append(t)
        lengths.append(length)
        t += length
    return Blocks(np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64), step_s)


@dataclass(frozen=True)
class PlanInputs:
    cluster: str
    now: datetime
    step_s: int
    horizon_steps: int
    blocks: Blocks
    pool_names: tuple[str, ...]
    pool_types: tuple[str, ...]
    avail_steps: np.ndarray  # [P, T] GPUs in service per step
    pool_free_nodes: tuple[list[int] | None, ...]  # per pool: free GPUs per node now, None: unknown
    pool_gpus_per_node: tuple[int, ...]
    window_reason: tuple[str, ...]  # per pool: why capacity dips in the horizon ("" if none)
    service_names: tuple[str, ...]
    svc_gpr: np.ndarray  # [S] GPUs per replica
    svc_min: np.ndarray  # [S]
    svc_max: np.ndarray  # [S]
    svc_startup_s: np.ndarray  # [S]
    svc_allowed: np.ndarray  # [S, P] bool
    svc_tenants: np.ndarray  # [S, P] replicas that may share one GPU (1: dedicated only)
    svc_loss: np.ndarray  # [S, P] capacity lost per extra co-tenant, as a fraction
    svc_latency_critical: np.ndarray  # [S] bool: its GPUs are its own (no other service time-slices them)
    svc_replicas_now: np.ndarray  # [S, P]
    svc_quantile: tuple[str, ...]
    svc_demand_steps: np.ndarray  # [S, T] demand at the SLO quantile
    svc_demand_now: np.ndarray  # [S] the last step's mean demand: what replicas kept now must carry
    svc_forecast_model: tuple[str, ...]
    job_ids: tuple[str, ...]
    job_gang: np.ndarray  # [J]
    job_weight: np.ndarray  # [J]
    job_remaining_s: np.ndarray  # [J] remaining GPU-seconds, rounded up to whole steps of the gang
    job_left_gpu_s: np.ndarray  # [J] remaining GPU-seconds expected (``expected_left_gpu_s``; for reasons)
    job_allowed: np.ndarray  # [J, P] bool
    job_running_pool: np.ndarray  # [J] pool index, -1 when not running
    job_preemptible: np.ndarray  # [J] bool
    job_checkpoint_s: np.ndarray  # [J] seconds between checkpoints (inf: none; a stop loses all since start)
    job_lost_gpu_s: np.ndarray  # [J] work lost plus restart cost if preempted now, GPU-seconds
    job_restart_s: np.ndarray  # [J] wall seconds a (re)start costs the gang
    job_time_limit_s: np.ndarray  # [J] wall seconds the cluster lets one run last (0: no limit)
    job_ran_s: np.ndarray  # [J] wall seconds since a running job (re)started; inf: not running or unknown
    job_waited_s: np.ndarray  # [J] wall seconds since a job not running was submitted; 0 for running jobs
    job_deadline_step: np.ndarray  # [J] first step at or after the deadline (horizon+1 if none)
    job_team: np.ndarray  # [J] team index
    job_priority_class: tuple[str, ...]
    team_names: tuple[str, ...]
    team_quota: np.ndarray  # [teams] nominal GPU quota, inf when none
    quota_idle: float  # GPUs the quotas leave idle, lent to teams over theirs (optimizer/quota.py)
    max_weight: float
    job_active: np.ndarray | None = None  # [J] False for an empty job slot (None: every job is real)
    held_nodes: NodeHolds | None = None  # nodes held for blocked gangs at the last decision
    job_nodes: dict[str, dict[int, int]] = field(default_factory=dict)
    """Running job id -> GPUs it holds per node (indices into pool_free_nodes); absent: unknown."""
    pool_node_out_s: tuple[dict[int, float], ...] = ()
    """Per pool: node index (into pool_free_nodes) -> seconds from now until a maintenance window
    that names it takes it out; nodes no window names are absent."""
    pool_node_names: tuple[tuple[str, ...], ...] = ()
    """Per pool: the names of the nodes pool_free_nodes counts, as reasons quote them (empty where
    the source names none: reasons quote node indices, #0, #1...)."""

    def active_jobs(self) -> np.ndarray:
        """Indices of real jobs (empty slots of a persistent model are left out)."""
        if self.job_active is None:
            return np.arange(self.n_jobs)
        return self.job_active.nonzero()[0]

    @property
    def n_pools(self) -> int:
        return len(self.pool_names)

    @property
    def n_services(self) -> int:
        return len(self.service_names)

    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    def avail_blocks(self) -> np.ndarray:
        """[P, B] capacity of each block: its tightest step."""
        avail: np.ndarray = np.minimum.reduceat(self.avail_steps, self.blocks.first_step, axis=1)
        return avail

    def demand_blocks(self) -> np.ndarray:
        """[S, B] demand of each block: its highest step."""
        if self.n_services == 0:
            return np.zeros((0, self.blocks.count))
        return np.maximum.reduceat(self.svc_demand_steps, self.blocks.first_step, axis=1)

    def run_s(self, j: int) -> float:
        """Wall seconds job j would run if started now: its work left over its gang, and its restart."""
        work_s = float(self.job_remaining_s[j]) / max(float(self.job_gang[j]), 1.0)
        return work_s + float(self.job_restart_s[j])

    def holds_nodes_s(self, j: int) -> float:
        """Wall seconds job j would hold its nodes if started now, as the cluster counts them: its
        run (``run_s``), or its time limit where that is longer (Slurm starts a job on a node only
        if its limit ends before the node's next maintenance, and backfills by limits)."""
        return max(self.run_s(j), float(self.job_time_limit_s[j]))

    def exposed_s(self, j: int) -> float:
        """Wall seconds job j, started now, must keep its nodes before maintenance may take them:
        its whole hold (``holds_nodes_s``); or, for a job that checkpoints and has no time limit the
        cluster enforces, its restart and first checkpoint: a window later than that stops it as a
        preemption would, losing at most the work since its last checkpoint, and the work before
        is kept (a long job kept off such nodes leaves them idle until the window)."""
        checkpoint_s = float(self.job_checkpoint_s[j])
        if self.job_time_limit_s[j] > 0 or not math.isfinite(checkpoint_s):
            return self.holds_nodes_s(j)
        return min(self.holds_nodes_s(j), float(self.job_restart_s[j]) + checkpoint_s)

    def nodes_out_before_end(self, j: int, p: int) -> list[int]:
        """The nodes of pool p (indices into pool_free_nodes, ascending) that maintenance takes out
        before job j, started now, may lose them (``exposed_s``)."""
        out = self.pool_node_out_s[p] if p < len(self.pool_node_out_s) else {}
        return going_out(out, self.exposed_s(j))

    def step_start(self, step: int) -> datetime:
        return self.now + timedelta(seconds=self.step_s * step)


_ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


def _pool_capacity(
    pools: Sequence[PoolState], now: datetime, steps: int, step_s: int
) -> tuple[np.ndarray, list[str]]:
    """[P, T] GPUs in service per step (windows out, never above what is available now), and
    per pool why capacity dips in the horizon."""
    avail = np.empty((len(pools), steps))
    avail[:] = np.asarray([float(p.gpus_total) for p in pools]).reshape(-1, 1)
    window_reason: list[str] = []
    for i, pool in enumerate(pools):
        notes: list[str] = []
        for window in pool.windows:
            # steps [first, last) overlap the window (end exclusive)
            first = max(math.floor((window.start - now).total_seconds() / step_s), 0)
            last = min(math.ceil((window.end - now).total_seconds() / step_s), steps)
            if last > first:
                avail[i, first:last] -= window.gpus_out
                notes.append(
                    f"{window.reason} {window.gpus_out} GPUs {window.start:%H:%M}-{window.end:%H:%M}"
                )
        window_reason.append("; ".join(notes))
    available = np.asarray([float(p.gpus_available) for p in pools]).reshape(-1, 1)
    return np.maximum(np.minimum(avail, available), 0.0), window_reason


def nodes_going_out(pool: PoolState, now: datetime) -> dict[int, float]:
    """Node index -> seconds from now until the first window that names the node starts (0 for a
    window under way), for the nodes the pool lists by name."""
    index = {name: i for i, name in enumerate(pool.node_names)}
    out: dict[int, float] = {}
    for window in pool.windows:
        if window.end <= now:
            continue
        starts_in = max((window.start - now).total_seconds(), 0.0)
        for name in window.nodes:
            i = index.get(name)
            if i is not None:
                out[i] = min(out.get(i, math.inf), starts_in)
    return out


def _job_pool_masks(specs: Sequence[JobSpec], pools: Sequence[PoolState]) -> np.ndarray:
    """[J, P] pools each job's spec allows (by pool name and GPU type)."""
    masks = [
        [
            (not spec.allowed_pools or pool.name in spec.allowed_pools)
            and (not spec.allowed_gpu_types or pool.gpu_type in spec.allowed_gpu_types)
            for pool in pools
        ]
        for spec in specs
    ]
    return np.asarray(masks, dtype=bool).reshape(len(specs), len(pools))


def expected_left_gpu_s(job: JobState) -> float:
    """Work a job still needs: by its own estimate; once past it, as much again as it has run past
    it (the estimate is then known to be low, and the further a job has overrun the further it tends
    to go on). Taken as ending within the next step, an overrun job kept heavier work waiting a step
    at a time: on a workload outside the repository whose estimates are off by a lognormal sigma of
    1.0, an 8-GPU weight-5 gang was 'planned to start' in the next step for 3.5 hours while weight-1
    jobs past their estimates held the GPUs (no stop paid against a one-step wait); with this rule
    PWT went from 0.826 to 0.915 of kueue-hpa's there (README, "A stop must pay for itself")."""
    overrun = job.done_gpu_s - job.spec.estimated_gpu_s
    return job.remaining_gpu_s if overrun <= 0 else overrun


def _remaining_gpu_s(left: np.ndarray, gang: np.ndarray, step_s: int) -> np.ndarray:
    """[J] remaining work ``left`` (``expected_left_gpu_s``), rounded up to whole steps of the gang
    (at least one)."""
    per_step = gang * step_s
    steps_left = np.maximum(np.ceil(left / per_step - 1e-9), 1.0)
    remaining: np.ndarray = steps_left * per_step
    return remaining


def _running_pools(jobs: Sequence[JobState], pool_index: Mapping[str, int]) -> np.ndarray:
    """[J] index of the pool each job runs in, -1 when it is not running (or in an unknown pool)."""
    running = JobStatus.RUNNING
    return np.asarray(
        [pool_index.get(j.pool, -1) if j.status == running and j.pool is not None else -1 for j in jobs],
        dtype=np.int64,
    ).reshape(len(jobs))


def _deadline_steps(specs: Sequence[JobSpec], now: datetime, steps: int, step_s: int) -> np.ndarray:
    """[J] first step at or after each job's deadline (steps + 1 when it has none)."""
    return np.asarray(
        [
            steps + 1
            if spec.deadline is None
            else max(math.ceil((spec.deadline - now).total_seconds() / step_s), 0)
            for spec in specs
        ],
        dtype=np.int64,
    ).reshape(len(specs))


def build_inputs(
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    now: datetime,
    config: PlannerConfig,
    curve: InterferenceCurve = DEFAULT_CURVE,
    band_factors: Mapping[str, float] | None = None,
    blocks: Blocks | None = None,
    scaled_up_gpus: Mapping[str, float] | None = None,
) -> PlanInputs:
    """``band_factors``: per service, the factor its forecast band is scaled by (1 if absent);
    ``scaled_up_gpus``: per service whose autoscaler added replicas within the last step, the GPUs
    it runs now (the next steps' demand is at least that: optimizer/service_inputs.py);
    ``blocks``: make_blocks(config, ...) when the caller keeps it."""
    steps, step_s = config.horizon_steps, config.step_s
    pools = state.pools
    avail, window_reason = _pool_capacity(pools, now, steps, step_s)
    return PlanInputs(
        cluster=state.cluster,
        now=now,
        step_s=step_s,
        horizon_steps=steps,
        blocks=blocks if blocks is not None else make_blocks(config, steps, step_s),
        pool_names=tuple(p.name for p in pools),
        pool_types=tuple(p.gpu_type for p in pools),
        avail_steps=avail,
        pool_free_nodes=tuple(list(getattr(p, "free_gpus_by_node", None) or []) or None for p in pools),
        pool_gpus_per_node=tuple(p.gpus_per_node for p in pools),
        pool_node_out_s=tuple(nodes_going_out(p, now) for p in pools),
        pool_node_names=tuple(tuple(p.node_names) for p in pools),
        window_reason=tuple(window_reason),
        **_service_fields(state, forecasts, now, config, curve, band_factors, scaled_up_gpus),
        **_job_fields(state, now, steps, step_s, config.lend_outside_quotas),
    )


def _service_fields(
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    now: datetime,
    config: PlannerConfig,
    curve: InterferenceCurve,
    band_factors: Mapping[str, float] | None,
    scaled_up_gpus: Mapping[str, float] | None,
) -> dict[str, Any]:
    """PlanInputs' services' fields (optimizer/service_inputs.py)."""
    services = state.services
    svc_allowed, svc_tenants, svc_loss, svc_now = service_placement(state, curve)
    demand, models = service_demand(state, forecasts, now, config, band_factors, scaled_up_gpus)
    return {
        "service_names": tuple(s.spec.service for s in services),
        "svc_gpr": np.asarray([s.spec.gpus_per_replica for s in services], dtype=float),
        "svc_min": np.asarray([s.spec.min_replicas for s in services], dtype=float),
        "svc_max": np.asarray([s.spec.max_replicas for s in services], dtype=float),
        "svc_startup_s": np.asarray([s.spec.startup_s for s in services], dtype=float),
        "svc_allowed": svc_allowed,
        "svc_tenants": svc_tenants,
        "svc_loss": svc_loss,
        "svc_latency_critical": np.asarray([s.spec.latency_critical for s in services], dtype=bool),
        "svc_replicas_now": svc_now,
        "svc_quantile": tuple(s.spec.slo_quantile for s in services),
        "svc_demand_steps": demand,
        "svc_demand_now": np.asarray([s.demand_history[-1] if s.demand_history else 0.0 for s in services]),
        "svc_forecast_model": tuple(models),
    }


def _team_quotas(
    state: ClusterState, teams: list[str], gang: np.ndarray, job_team: np.ndarray
) -> dict[str, Any]:
    """Each team's nominal quota (inf: none) and the idle quota lent, the GPUs outside every quota
    among it (``OUTSIDE_QUOTAS``, the last team where any team has a quota: optimizer/quota.py)."""
    nominal = np.asarray([float(state.quotas_gpus.get(t, math.inf)) for t in teams], dtype=float)
    if teams and teams[-1] == OUTSIDE_QUOTAS:
        nominal[-1] = outside_quotas(float(sum(p.gpus_available for p in state.pools)), nominal[:-1])
    wanted = np.bincount(job_team, weights=gang, minlength=len(teams)).astype(float)
    return {"team_quota": nominal, "quota_idle": idle_quota(nominal, wanted)}


def _job_fields(
    state: ClusterState, now: datetime, steps: int, step_s: int, lend_outside_quotas: bool
) -> dict[str, Any]:
    """PlanInputs' jobs' and teams' fields, for the jobs queued or running."""
    pools = state.pools
    jobs = [j for j in state.jobs if j.status in _ACTIVE]
    n_jobs = len(jobs)
    specs = [j.spec for j in jobs]
    teams = sorted({spec.team for spec in specs} | set(state.quotas_gpus))
    if state.quotas_gpus and lend_outside_quotas:
        teams.append(OUTSIDE_QUOTAS)  # lends the GPUs no quota covers (optimizer/quota.py)
    team_index = {t: i for i, t in enumerate(teams)}
    gang = np.asarray([spec.gpus for spec in specs], dtype=float).reshape(n_jobs)
    allowed = _job_pool_masks(specs, pools)
    running = _running_pools(jobs, {p.name: i for i, p in enumerate(pools)})
    on = (running >= 0).nonzero()[0]
    allowed[on, running[on]] = True  # a running job's pool is allowed to it, whatever its spec says
    restart_s = np.asarray([spec.restart_cost_s for spec in specs], dtype=float).reshape(n_jobs)
    time_limit_s = np.asarray([spec.time_limit_s or 0.0 for spec in specs], dtype=float).reshape(n_jobs)
    since_checkpoint = np.asarray([j.since_checkpoint_gpu_s for j in jobs], dtype=float).reshape(n_jobs)
    weights = np.asarray([spec.priority_weight for spec in specs], dtype=float)
    job_team = np.asarray([team_index[spec.team] for spec in specs], dtype=np.int64).reshape(n_jobs)
    left = np.asarray([expected_left_gpu_s(j) for j in jobs], dtype=float).reshape(n_jobs)
    return {
        "job_ids": tuple([spec.job_id for spec in specs]),
        "job_gang": gang,
        "job_weight": weights,
        "job_remaining_s": _remaining_gpu_s(left, gang, step_s),
        "job_left_gpu_s": left,
        "job_allowed": allowed,
        "job_running_pool": running,
        "job_preemptible": np.asarray([spec.preemptible for spec in specs], dtype=bool),
        "job_checkpoint_s": np.asarray(
            [spec.checkpoint_interval_s or math.inf for spec in specs], dtype=float
        ).reshape(n_jobs),
        "job_lost_gpu_s": since_checkpoint + restart_s * gang,
        "job_restart_s": restart_s,
        "job_time_limit_s": time_limit_s,
        "job_ran_s": _ran_s(jobs, now),
        "job_waited_s": _waited_s(jobs, now),
        "job_deadline_step": _deadline_steps(specs, now, steps, step_s),
        "job_team": job_team,
        "job_priority_class": tuple([spec.priority_class for spec in specs]),
        "team_names": tuple(teams),
        **_team_quotas(state, teams, gang, job_team),
        "max_weight": float(weights.max()) if n_jobs else 1.0,
        "job_nodes": running_job_nodes(pools, jobs),
    }


def _waited_s(jobs: Sequence[JobState], now: datetime) -> np.ndarray:
    """[J] seconds since each job not running was submitted (a stopped job's wait counts from its
    submission too); 0 for running jobs and for submissions stamped after ``now``."""
    waited = [max((now - j.submitted_at).total_seconds(), 0.0) for j in jobs]
    running = [j.status == JobStatus.RUNNING for j in jobs]
    return np.where(running, 0.0, np.asarray(waited, dtype=float)).reshape(len(jobs))


def _ran_s(jobs: Sequence[JobState], now: datetime) -> np.ndarray:
    """[J] seconds since each running job (re)started (inf where not running or not known)."""
    ran = [
        (now - j.started_at).total_seconds()
        if j.status == JobStatus.RUNNING and j.started_at is not None
        else math.inf
        for j in jobs
    ]
    return np.asarray(ran, dtype=float).reshape(len(jobs))


def running_job_nodes(pools: Sequence[PoolState], jobs: Sequence[JobState]) -> dict[str, dict[int, int]]:
    """Where each running job sits: job id -> node index (in its pool's free_gpus_by_node) -> GPUs.
    Jobs on a node the pool does not name (or in a pool without node names) are left out."""
    index = {p.name: {n: i for i, n in enumerate(p.node_names)} for p in pools if p.node_names}
    placed: dict[str, dict[int, int]] = {}
    if not index:
        return placed
    for job in jobs:
        names = index.get(job.pool or "")
        if job.status != JobStatus.RUNNING or not job.nodes or names is None:
            continue
        if all(n in names for n in job.nodes):
            placed[job.spec.job_id] = {names[n]: g for n, g in job.nodes.items()}
    return placed
