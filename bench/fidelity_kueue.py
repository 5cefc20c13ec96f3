"""The kueue-hpa baseline against the real Kueue: one small batch workload, simulated and real.

Where it sits: a benchmark beside the policy benchmark (bench/scenarios_bench.py). It runs the
batch side of the simulated ``kueue-hpa`` baseline (simulator/policies/kueue_hpa.py, no
inference) through the production ControlLoop on the simulator, and the same workload through a
real Kueue (bench/fidelity_kueue_cluster.py submits the Jobs and watches the Workloads), then
compares, per job, the admission (start) order and times and the finish times, in decision steps.

The workload: one pool of 2 nodes x 8 GPUs; two teams, each a ClusterQueue with a nominal quota
of 8 GPUs in one cohort (so a queue borrows what the other leaves); two priorities; gangs of 1-8
GPUs; submissions and run times in whole steps, so that the simulator (which decides only at step
boundaries) and Kueue (which admits as soon as quota frees) mean the same instants. Jobs never
checkpoint: a preempted job starts over, as a Job whose pods are deleted does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scipy.stats import kendalltau

from loop import ControlLoop
from schemas import JobSpec, JobStatus
from simulator.cluster import Simulator
from simulator.forecast_sources import NoForecastSource
from simulator.policies.kueue_hpa import KueueHpaPolicy
from simulator.scenario import PoolSpec, Scenario
from simulator.workload import SimJob

SIM_STEP_S = 60  # one decision step of the simulated baseline: one simulated minute
NODES = 2
GPUS_PER_NODE = 8
TEAMS = ("team-a", "team-b")
NOMINAL_GPUS = {"team-a": 8, "team-b": 8}
PRIORITY_WEIGHT = {"high": 10.0, "low": 1.0}  # the simulator's priority weights
PRIORITY_VALUE = {"high": 1000, "low": 100}  # Kueue's WorkloadPriorityClass values (same order)


@dataclass(frozen=True)
class FidelityJob:
    """One batch job of the workload; times in decision steps."""

    job_id: str
    team: str
    priority: str
    gpus: int
    submit_step: int
    run_steps: int


# What it exercises, step by step (16 GPUs, 8 nominal per team):
#   0  j01 (a, 8) and j02 (b, 8) fill the pool;
#   1-2 j03 (a low 8), j04 (b low 4), j05 (b high 4) wait;
#   3  j02 ends: j05 (b's high priority first), then j04 behind it; j03 (older, a) does not fit;
#   4  j06 (a high 8) preempts j01 (a low, same queue, lower priority);
#   6  j03 borrows from b ... later jobs fill holes (BestEffortFIFO) and reclaim borrowed GPUs.
WORKLOAD: tuple[FidelityJob, ...] = (
    FidelityJob("j01", "team-a", "low", 8, 0, 6),
    FidelityJob("j02", "team-b", "low", 8, 0, 3),
    FidelityJob("j03", "team-a", "low", 8, 1, 4),
    FidelityJob("j04", "team-b", "low", 4, 2, 4),
    FidelityJob("j05", "team-b", "high", 4, 2, 3),
    FidelityJob("j06", "team-a", "high", 8, 4, 3),
    FidelityJob("j07", "team-a", "low", 2, 5, 2),
    FidelityJob("j08", "team-b", "low", 1, 6, 3),
    FidelityJob("j09", "team-b", "high", 2, 7, 2),
    FidelityJob("j10", "team-a", "low", 4, 8, 3),
)


@dataclass
class JobTimes:
    """When a job was admitted (each time: a preempted job is admitted again) and finished, in steps."""

    starts: list[float] = field(default_factory=list)
    finish: float | None = None


Timeline = dict[str, JobTimes]


def _scenario(jobs: tuple[FidelityJob, ...]) -> Scenario:
    last = max(j.submit_step + j.run_steps for j in jobs)
    window_steps = 4 * last  # room for waits and restarts; the run stops once every job is done
    hours = window_steps * SIM_STEP_S / 3600.0
    return Scenario(
        name="fidelity-kueue",
        start=datetime(2026, 1, 5, tzinfo=UTC),
        step_s=SIM_STEP_S,
        subtick_s=SIM_STEP_S,
        window_hours=hours,
        quick_window_hours=hours,
        pools=[PoolSpec(name="gpu", gpu_type="NVIDIA-A100", nodes=NODES, gpus_per_node=GPUS_PER_NODE)],
    )


def sim_jobs(jobs: tuple[FidelityJob, ...]) -> list[SimJob]:
    """The workload as the simulator's jobs: true work = gang x run time, an exact estimate."""
    out = []
    for j in jobs:
        gpu_s = float(j.gpus * j.run_steps * SIM_STEP_S)
        spec = JobSpec(
            job_id=j.job_id,
            gpus=j.gpus,
            priority_class=j.priority,
            priority_weight=PRIORITY_WEIGHT[j.priority],
            estimated_gpu_s=gpu_s,
            preemptible=True,
            checkpoint_interval_s=None,
            restart_cost_s=0.0,
            team=j.team,
        )
        out.append(SimJob(spec=spec, arrival_s=float(j.submit_step * SIM_STEP_S), true_gpu_s=gpu_s))
    return sorted(out, key=lambda s: (s.arrival_s, s.spec.job_id))


def simulate(jobs: tuple[FidelityJob, ...] = WORKLOAD) -> Timeline:
    """Run the kueue-hpa baseline's batch side on the workload; admissions and finishes in steps."""
    sim = Simulator(_scenario(jobs), jobs=sim_jobs(jobs))
    loop = ControlLoop(
        clock=sim.clock, state_source=sim, forecast_source=NoForecastSource(), policy=KueueHpaPolicy(),
        actuator=sim,
    )  # fmt: skip
    timeline: Timeline = {j.job_id: JobTimes() for j in jobs}
    for _ in range(sim.steps):
        loop.step()
        for job in sim.jobs.values():
            times = timeline[job.job_id]
            started = job.started_at_s
            if job.status == JobStatus.RUNNING and started is not None and started == sim.now_s:
                times.starts.append(started / SIM_STEP_S)
        sim.advance()
        for job_id, job in sim.finished.items():
            if job.finished_at_s is not None:
                timeline[job_id].finish = job.finished_at_s / SIM_STEP_S
        if len(sim.finished) == len(jobs):
            break
    return timeline


@dataclass(frozen=True)
class FidelityRow:
    job_id: str
    team: str
    priority: str
    gpus: int
    submit_step: int
    sim: JobTimes
    real: JobTimes

    def start_diff(self) -> float | None:
        """Real first admission minus simulated first admission, in steps."""
        if not self.sim.starts or not self.real.starts:
            return None
        return self.real.starts[0] - self.sim.starts[0]

    def finish_diff(self) -> float | None:
        if self.sim.finish is None or self.real.finish is None:
            return None
        return self.real.finish - self.sim.finish


@dataclass(frozen=True)
class FidelityReport:
    """Both timelines side by side and how far they agree."""

    rows: list[FidelityRow]
    step_real_s: float
    kueue_version: str

    def order(self, side: str) -> list[tuple[int, str]]:
        """Every admission on ``side`` ("sim" or "real") as (step, job id), in order. A real time
        belongs to the step it falls in (the controllers' latency puts it a little after the
        boundary), and jobs admitted in the same step are listed by id: only an admission in another
        step, a missing or an extra one differs."""
        events = [(math.floor(t + 1e-9), r.job_id) for r in self.rows for t in getattr(r, side).starts]
        return sorted(events)

    def kendall_tau(self) -> float:
        """Rank agreement of first admission times (1.0: the same order, ties alike)."""
        both = [r for r in self.rows if r.sim.starts and r.real.starts]
        if len(both) < 2:
            return math.nan
        # The real times carry sub-step latency: compare the steps they fall in.
        tau = kendalltau([r.sim.starts[0] for r in both], [math.floor(r.real.starts[0]) for r in both])
        return float(tau.statistic)

    def max_abs(self, diffs: list[float | None]) -> float | None:
        known = [abs(d) for d in diffs if d is not None]
        return max(known) if known else None

    def paired_admissions(self) -> list[tuple[float, float]]:
        """(simulated step, real step) of each job's k-th admission on both sides."""
        return [p for r in self.rows for p in zip(r.sim.starts, r.real.starts, strict=False)]

    def discordant_pairs(self) -> int:
        """Pairs of admissions the two sides order differently: one strictly before the other in the
        simulator, after it on the cluster (admissions in the same simulated step may come in any
        order)."""
        pairs = self.paired_admissions()
        return sum(
            1 for i, (sim_a, real_a) in enumerate(pairs) for sim_b, real_b in pairs[i + 1 :]
            if (sim_a - sim_b) * (real_a - real_b) < 0
        )  # fmt: skip

    def max_admission_lag(self) -> float | None:
        """The largest |real - simulated| over every paired admission, in steps."""
        return self.max_abs([real - sim for sim, real in self.paired_admissions()])

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": len(self.rows),
            "same_admissions": self.order("sim") == self.order("real"),
            "same_admission_counts": all(len(r.sim.starts) == len(r.real.starts) for r in self.rows),
            "discordant_pairs": self.discordant_pairs(),
            "max_admission_lag_steps": self.max_admission_lag(),
            "kendall_tau": self.kendall_tau(),
            "max_start_diff_steps": self.max_abs([r.start_diff() for r in self.rows]),
            "max_finish_diff_steps": self.max_abs([r.finish_diff() for r in self.rows]),
            "unfinished_real": [r.job_id for r in self.rows if r.real.finish is None],
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "against": "kueue",
            "kueue_version": self.kueue_version,
            "sim_step_s": SIM_STEP_S,
            "step_real_s": self.step_real_s,
            "admissions_sim": [list(e) for e in self.order("sim")],
            "admissions_real": [list(e) for e in self.order("real")],
            "summary": self.summary(),
            "jobs": [
                {
                    "job_id": r.job_id,
                    "team": r.team,
                    "priority": r.priority,
                    "gpus": r.gpus,
                    "submit_step": r.submit_step,
                    "sim_starts": r.sim.starts,
                    "real_starts": [round(s, 2) for s in r.real.starts],
                    "sim_finish": r.sim.finish,
                    "real_finish": None if r.real.finish is None else round(r.real.finish, 2),
                    "start_diff_steps": _rounded(r.start_diff()),
                    "finish_diff_steps": _rounded(r.finish_diff()),
                }
                for r in self.rows
            ],
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def compare(
    sim: Timeline, real: Timeline, *, jobs: tuple[FidelityJob, ...] = WORKLOAD, step_real_s: float,
    kueue_version: str,
) -> FidelityReport:  # fmt: skip
    rows = [
        FidelityRow(j.job_id, j.team, j.priority, j.gpus, j.submit_step, sim[j.job_id], real[j.job_id])
        for j in jobs
    ]
    return FidelityReport(rows=rows, step_real_s=step_real_s, kueue_version=kueue_version)


def _cell(values: list[float], finish: float | None) -> str:
    starts = ", ".join(f"{v:.1f}" for v in values) or "-"
    return f"{starts} -> {'-' if finish is None else f'{finish:.1f}'}"


def render_table(report: FidelityReport) -> Any:
    """A rich Table: per job, admissions -> finish on both sides and the differences, in steps."""
    from rich.table import Table

    summary = report.summary()
    table = Table(
        title=(
            f"kueue-hpa (simulated) vs Kueue {report.kueue_version} "
            f"(real, 1 step = {report.step_real_s:g} s): "
            f"same admissions {summary['same_admissions']}, Kendall tau {summary['kendall_tau']:.3f}"
        )
    )
    for column in ("job", "team", "prio", "GPUs", "submit", "sim: starts -> finish",
                   "real: starts -> finish", "start diff", "finish diff"):  # fmt: skip
        table.add_column(column)
    for r in report.rows:
        sd, fd = r.start_diff(), r.finish_diff()
        table.add_row(
            r.job_id, r.team, r.priority, str(r.gpus), str(r.submit_step),
            _cell(r.sim.starts, r.sim.finish), _cell(r.real.starts, r.real.finish),
            "-" if sd is None else f"{sd:+.2f}", "-" if fd is None else f"{fd:+.2f}",
        )  # fmt: skip
    return table
