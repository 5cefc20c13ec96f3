"""Decision-latency benchmark of the planner (``ebbtide bench-decisions``).

Rolls a synthetic cluster forward decision by decision: the planner's allocation is applied
(starts, preemptions), running jobs progress and finish, new jobs arrive, demand moves along a
daily cycle. Each decision is timed end to end (model update + HiGHS solve + rounding + plan and
reasons) and next to HiGHS's own run time on the same model. Peak memory of one decision at each
scale is measured with tracemalloc in a separate pass (tracing slows Python down). Prints a rich
table, writes JSON with --json and a PNG with --out-dir.
"""

from __future__ import annotations

import math
import random
import resource
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from forecaster.source import SeasonalNaiveSource
from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import (
    ClusterState,
    DemandForecast,
    JobAction,
    JobSpec,
    JobState,
    JobStatus,
    PoolState,
    PoolWindow,
    ServiceSpec,
    ServiceState,
)
from streams.gc_tuning import freeze_warm_objects, tune_gc_for_batches

START = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    name: str
    jobs: int
    pools: int
    gpus_per_pool: int
    services: int
    steps: int = 96
    decisions: int = 40

    @property
    def gpus(self) -> int:
        return self.pools * self.gpus_per_pool


CASES = {
    "seed": Case("seed", jobs=50, pools=8, gpus_per_pool=32, services=4, decisions=200),
    "mid": Case("mid", jobs=200, pools=8, gpus_per_pool=125, services=8, decisions=200),
    "medium": Case("medium", jobs=500, pools=8, gpus_per_pool=320, services=8, decisions=40),
    "large": Case("large", jobs=2000, pools=16, gpus_per_pool=625, services=16, decisions=25),
    "xlarge": Case("xlarge", jobs=10_000, pools=16, gpus_per_pool=3125, services=16, decisions=8),
}


@dataclass
class CaseResult:
    case: Case
    decision_ms: list[float] = field(default_factory=list)
    solver_ms: list[float] = field(default_factory=list)
    fallbacks: int = 0
    rebuilds: int = 0
    updates: int = 0
    peak_mib: float = 0.0

    def to_json(self) -> dict[str, float | int]:
        return {
            "jobs": self.case.jobs,
            "gpus": self.case.gpus,
            "steps": self.case.steps,
            "decision_ms_p50": float(np.percentile(self.decision_ms, 50)),
            "decision_ms_p99": float(np.percentile(self.decision_ms, 99)),
            "solver_ms_p50": float(np.percentile(self.solver_ms, 50)),
            "decisions": len(self.decision_ms),
            "decision_to_solver_ratio_p50": float(
                np.percentile(self.decision_ms, 50) / max(np.percentile(self.solver_ms, 50), 1e-9)
            ),
            "fallbacks": self.fallbacks,
            "model_rebuilds": self.rebuilds,
            "model_updates": self.updates,
            "peak_memory_mib": self.peak_mib,
        }


MEDIAN_KEYS = ("decision_ms_p50", "decision_ms_p99", "solver_ms_p50", "decision_to_solver_ratio_p50")
SUMMED_KEYS = ("decisions", "fallbacks", "model_rebuilds", "model_updates")


@dataclass
class CaseRuns:
    """Several runs of one case, each on a fresh cluster and planner. These hosts are shared and
    noisy, so a figure is the median of the runs' figures (one run in a busy minute moves it
    little); each run's figures are kept too."""

    runs: list[CaseResult]

    @property
    def decision_ms(self) -> list[float]:
        return [ms for run in self.runs for ms in run.decision_ms]

    @property
    def solver_ms(self) -> list[float]:
        return [ms for run in self.runs for ms in run.solver_ms]

    def to_json(self) -> dict[str, Any]:
        """The first run's case figures, medians (MEDIAN_KEYS) and sums (SUMMED_KEYS) over the
        runs, the largest peak memory, and each run's p50 and p99."""
        per_run = [run.to_json() for run in self.runs]
        out: dict[str, Any] = dict(per_run[0])
        for key in MEDIAN_KEYS:
            out[key] = float(np.median([row[key] for row in per_run]))
        for key in SUMMED_KEYS:
            out[key] = int(sum(row[key] for row in per_run))
        out["peak_memory_mib"] = max(float(row["peak_memory_mib"]) for row in per_run)
        out["runs"] = len(per_run)
        out["decision_ms_p50_runs"] = [float(row["decision_ms_p50"]) for row in per_run]
        out["decision_ms_p99_runs"] = [float(row["decision_ms_p99"]) for row in per_run]
        return out


class SyntheticCluster:
    """A cluster that moves: demand on a daily cycle, jobs arriving, running and finishing."""

    def __init__(self, case: Case, seed: int = 7) -> None:
        self.case = case
        self.rng = random.Random(seed)
        self.now = START
        self.step_s = 900
        self.counter = 0
        types = ["h100", "a100"]
        self.pools = [
            PoolState(
                name=f"pool{i}",
                gpu_type=types[i % 2],
                gpus_total=case.gpus_per_pool,
                gpus_available=case.gpus_per_pool,
                max_share=4 if i % 4 == 3 else 1,
            )
            for i in range(case.pools)
        ]
        self.allowed_patterns = [[], [], ["h100"], ["a100"]]
        self.peak = [
            self.rng.uniform(0.05, 0.25) * case.gpus / max(case.services, 1) for _ in range(case.services)
        ]
        self.history = [[self._demand(s, -t) for t in range(96, 0, -1)] for s in range(case.services)]
        self.services = [
            ServiceSpec(
                service=f"svc{s}",
                min_replicas=1,
                latency_critical=s % 3 == 0,
                max_cotenants=1 if s % 3 == 0 else 4,
                allowed_pools=[] if s % 2 == 0 else [p.name for p in self.pools[: max(case.pools // 2, 1)]],
            )
            for s in range(case.services)
        ]
        self.replicas = [{self.pools[s % case.pools].name: 1} for s in range(case.services)]
        self.jobs: dict[str, JobState] = {}
        for _ in range(case.jobs):
            self._arrive()

    def _demand(self, s: int, step: int) -> float:
        hour = ((self.now - START).total_seconds() / 3600 + step * self.step_s / 3600) % 24
        cycle = 0.55 + 0.45 * math.cos(2 * math.pi * (hour - 20) / 24)
        return max(self.peak[s] * cycle * (1 + self.rng.gauss(0, 0.05)), 0.0)

    def _arrive(self) -> None:
        self.counter += 1
        gang = self.rng.choice([1, 1, 2, 4, 8, 8, 16] if self.case.jobs > 100 else [1, 1, 2, 4, 8])
        spec = JobSpec(
            job_id=f"job{self.counter}",
            gpus=gang,
            allowed_gpu_types=self.rng.choice(self.allowed_patterns),
            priority_weight=self.rng.choice([1.0, 1.0, 2.0, 4.0]),
            estimated_gpu_s=self.rng.lognormvariate(math.log(3 * 3600), 0.8) * gang,
            preemptible=self.rng.random() < 0.85,
            checkpoint_interval_s=1800.0,
            restart_cost_s=60.0,
            team=self.rng.choice(["research", "prod", "batch"]),
            deadline=self.now + timedelta(hours=self.rng.uniform(4, 30)) if self.rng.random() < 0.2 else None,
        )
        self.jobs[spec.job_id] = JobState(spec=spec, status=JobStatus.QUEUED, submitted_at=self.now)

    def state(self) -> ClusterState:
        pools = list(self.pools)
        hour = (self.now - START).total_seconds() / 3600
        if self.case.pools > 1 and int(hour) % 6 < 2:  # a maintenance window comes and goes
            window = PoolWindow(
                start=self.now + timedelta(hours=2),
                end=self.now + timedelta(hours=4),
                gpus_out=self.case.gpus_per_pool // 4,
            )
            pools[1] = pools[1].model_copy(update={"windows": [window]})
        return ClusterState(
            cluster="bench",
            as_of=self.now,
            step_s=self.step_s,
            pools=pools,
            services=[
                ServiceState(spec=spec, replicas=self.replicas[s], demand_history=self.history[s][-96:])
                for s, spec in enumerate(self.services)
            ],
            jobs=list(self.jobs.values()),
            quotas_gpus={"batch": self.case.gpus // 3},
        )

    def forecasts(self, state: ClusterState) -> dict[str, DemandForecast]:
        return SeasonalNaiveSource(self.case.steps).forecasts(state, self.now)

    def advance(self, allocation: object) -> None:
        """Apply the allocation, integrate one step, let jobs finish and new ones arrive."""
        by_service: dict[str, dict[str, int]] = {}
        for d in allocation.services:  # type: ignore[attr-defined]
            by_service.setdefault(d.service, {})[d.pool] = d.replicas
        self.replicas = [
            by_service.get(spec.service, self.replicas[s]) for s, spec in enumerate(self.services)
        ]
        for d in allocation.jobs:  # type: ignore[attr-defined]
            job = self.jobs.get(d.job_id)
            if job is None:
                continue
            if d.action == JobAction.RUN and job.status == JobStatus.QUEUED:
                self.jobs[d.job_id] = job.model_copy(
                    update={"status": JobStatus.RUNNING, "pool": d.pool, "started_at": self.now}
                )
            elif d.action == JobAction.PREEMPT:
                self.jobs[d.job_id] = job.model_copy(
                    update={"status": JobStatus.QUEUED, "pool": None, "since_checkpoint_gpu_s": 0.0}
                )
        finished = []
        for job_id, job in self.jobs.items():
            if job.status == JobStatus.RUNNING:
                done = job.done_gpu_s + job.spec.gpus * self.step_s
                if done >= job.spec.estimated_gpu_s:
                    finished.append(job_id)
                else:
                    self.jobs[job_id] = job.model_copy(update={"done_gpu_s": done})
        for job_id in finished:
            del self.jobs[job_id]
        self.now += timedelta(seconds=self.step_s)
        for s in range(self.case.services):
            self.history[s].append(self._demand(s, 0))
        while len(self.jobs) < self.case.jobs:
            self._arrive()


def run_case(
    case: Case,
    config: PlannerConfig,
    on_step: Callable[[int], None] | None = None,
    measure_memory: bool = True,
) -> CaseResult:
    """One run: ``case.decisions`` decisions on a fresh cluster and planner, then (with
    ``measure_memory``) the peak memory of one decision with a fresh model."""
    cluster = SyntheticCluster(case)
    policy = PlannerPolicy(config=config)
    result = CaseResult(case)
    tune_gc_for_batches()  # the process is set up as the optimizer service's (streams/services/runtime.py)
    for i in range(case.decisions):
        state = cluster.state()
        forecasts = cluster.forecasts(state)
        t0 = time.perf_counter()
        decision = policy.decide(state, forecasts, cluster.now)
        result.decision_ms.append((time.perf_counter() - t0) * 1000.0)
        if i == 0:
            freeze_warm_objects()  # as the service does after its first batch
        result.solver_ms.append(policy.last_solver_ms)
        result.fallbacks += int(decision.allocation.fallback)
        cluster.advance(decision.allocation)
        if on_step is not None:
            on_step(i)
    result.rebuilds = policy.session_stats()["rebuilds"]
    result.updates = policy.session_stats()["updates"]
    if not measure_memory:
        return result
    # Memory: one traced decision on the cluster as it stands (a fresh planner: the model is built).
    state = cluster.state()
    forecasts = cluster.forecasts(state)
    fresh = PlannerPolicy(config=config)
    tracemalloc.start()
    fresh.decide(state, forecasts, cluster.now)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result.peak_mib = peak / 2**20
    return result


def run_repeated(
    case: Case, config: PlannerConfig, repeat: int, on_step: Callable[[int], None] | None = None
) -> CaseRuns:
    """``repeat`` runs of the case; memory is measured in the first (it is the same in each)."""
    return CaseRuns([run_case(case, config, on_step, measure_memory=i == 0) for i in range(repeat)])


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_png(results: dict[str, CaseRuns], out_dir: Path) -> Path:
    """Latency distribution per case, log scale, with HiGHS's own time beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(results)
    ax.boxplot([results[n].decision_ms for n in names], positions=np.arange(len(names)) * 2.0, widths=0.6)
    ax.boxplot([results[n].solver_ms for n in names], positions=np.arange(len(names)) * 2.0 + 0.7, widths=0.6)
    ax.set_xticks(np.arange(len(names)) * 2.0 + 0.35, [f"{n}\n(decision | HiGHS)" for n in names])
    ax.set_yscale("log")
    ax.set_ylabel("ms per decision")
    ax.set_title("ebbtide planner latency")
    path = out_dir / "bench_decisions.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
