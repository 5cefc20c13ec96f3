"""Scheduler fidelity: the simulated ``priority-backfill`` baseline against Slurm's own scheduler.

Place: a benchmark over the simulator (simulator/policies/priority_backfill.py run by the same
ControlLoop as every bench) and a real Slurm cluster (slurmctld with ``priority/multifactor`` and
``sched/backfill``, slurmd nodes with GPUs as GRES). One small batch workload goes through both:
in the simulator at one decision step a simulated minute, on Slurm with time compressed (a
simulated minute is ``scale_s`` real seconds: jobs sleep their run time scaled). Priority weights
become ``--nice`` offsets on a base of 1000 (Slurm's partition weight), so Slurm's priority is
1000 x weight / top weight as the baseline's; every job's time limit is its true run time, as
backfill assumes. Start and end times come back from ``squeue --json`` (Slurm's
second-resolution times, converted to simulated steps); the report compares the start order
(Kendall tau) and the start times in steps, per job.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from scipy.stats import kendalltau

from actuators.slurm import SlurmCli
from loop import ControlLoop
from schemas import JobSpec
from simulator.cluster import Simulator
from simulator.forecast_sources import NoForecastSource
from simulator.policies.priority_backfill import PriorityBackfillPolicy
from simulator.scenario import Scenario
from simulator.workload import SimJob

STEP_S = 60
"""One simulated decision step: a minute (Slurm's time limits are whole minutes)."""


@dataclass(frozen=True)
class FidelityJob:
    name: str
    submit_step: int
    gpus: int
    run_steps: int
    weight: float


WORKLOAD: tuple[FidelityJob, ...] = (
    FidelityJob("j01", 0, 8, 5, 1.0),
    FidelityJob("j02", 0, 4, 3, 1.0),
    FidelityJob("j03", 1, 4, 6, 1.0),
    FidelityJob("j04", 1, 8, 4, 2.0),
    FidelityJob("j05", 2, 2, 2, 1.0),
    FidelityJob("j06", 2, 2, 6, 1.0),
    FidelityJob("j07", 3, 4, 3, 2.0),
    FidelityJob("j08", 4, 1, 3, 1.0),
    FidelityJob("j09", 5, 2, 1, 2.0),
    FidelityJob("j10", 6, 8, 3, 1.0),
)
"""Ten batch jobs, two priorities, gangs of 1-8 GPUs, staggered submits, runs of 1-6 minutes, on
two nodes of 8 GPUs (16 GPUs): a high-priority 8-GPU gang that must wait (a reservation), short
and long low-priority jobs behind it (backfill candidates, one ending exactly when a reservation
starts). No two jobs end in the same step (``simulate`` refuses a workload where they do)."""


@dataclass(frozen=True)
class JobTimes:
    """When a job started and ended, in simulated steps from the first submission."""

    start_step: float
    end_step: float


@dataclass(frozen=True)
class Cluster:
    nodes: int = 2
    gpus_per_node: int = 8


# ---- the simulated baseline -------------------------------------------------------------------


def _scenario(cluster: Cluster, window_steps: int) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "fidelity-slurm",
            "step_s": STEP_S,
            "subtick_s": STEP_S,
            "history_days": 7,
            "window_hours": window_steps * STEP_S / 3600.0,
            "quick_window_hours": window_steps * STEP_S / 3600.0,
            "start": datetime(2026, 1, 5, tzinfo=UTC),
            "pools": [
                {
                    "name": "gpu",
                    "gpu_type": "fake",
                    "nodes": cluster.nodes,
                    "gpus_per_node": cluster.gpus_per_node,
                }
            ],
        }
    )


def _sim_jobs(workload: Sequence[FidelityJob]) -> list[SimJob]:
    """Estimates equal the true run time (backfill's assumption); no checkpoints, no preemption."""
    jobs = []
    for job in workload:
        gpu_s = float(job.gpus * job.run_steps * STEP_S)
        spec = JobSpec(job_id=job.name, gpus=job.gpus, priority_weight=job.weight, estimated_gpu_s=gpu_s)
        jobs.append(SimJob(spec=spec, arrival_s=float(job.submit_step * STEP_S), true_gpu_s=gpu_s))
    return sorted(jobs, key=lambda j: (j.arrival_s, j.spec.job_id))


def simulate(workload: Sequence[FidelityJob], cluster: Cluster = Cluster()) -> dict[str, JobTimes]:
    """The priority-backfill baseline through the production ControlLoop on the simulated cluster."""
    window = max(j.submit_step for j in workload) + sum(j.run_steps for j in workload) + 1
    sim = Simulator(_scenario(cluster, window), jobs=_sim_jobs(workload))
    loop = ControlLoop(
        clock=sim.clock,
        state_source=sim,
        forecast_source=NoForecastSource(),
        policy=PriorityBackfillPolicy(),
        actuator=sim,
    )
    starts: dict[str, float] = {}
    for _ in range(sim.steps):
        loop.step()
        for job in sim.jobs.values():
            if job.started_at_s is not None:
                starts.setdefault(job.job_id, job.started_at_s)
        sim.advance()
        if len(sim.finished) == len(workload):
            break
    missing = [j.name for j in workload if j.name not in sim.finished]
    if missing:
        raise RuntimeError(f"the simulated baseline did not finish {missing} in {window} steps")
    _refuse_simultaneous_ends({name: job.finished_at_s or 0.0 for name, job in sim.finished.items()})
    return {
        name: JobTimes(starts[name] / STEP_S, (job.finished_at_s or 0.0) / STEP_S)
        for name, job in sim.finished.items()
    }


def _refuse_simultaneous_ends(ends_s: Mapping[str, float]) -> None:
    """Jobs that end in the same step free their GPUs at once for the baseline, one after the
    other for an event-driven scheduler, which may then start the next job on another node:
    the comparison would measure that order, not the policy."""
    by_end: dict[float, list[str]] = {}
    for name, end_s in ends_s.items():
        by_end.setdefault(end_s, []).append(name)
    same = [sorted(names) for names in by_end.values() if len(names) > 1]
    if same:
        raise ValueError(f"workload: jobs {same} end in the same step; shift a run time by a step")


# ---- Slurm's own scheduler ----------------------------------------------------------------------


def nice_of(job: FidelityJob, top_weight: float) -> int:
    """The ``--nice`` that turns Slurm's base priority 1000 into 1000 x weight / top weight."""
    return round(1000.0 * (1.0 - job.weight / top_weight))


def sbatch_argv(job: FidelityJob, partition: str, scale_s: float, top_weight: float) -> list[str]:
    limit_min = math.ceil(job.run_steps * STEP_S / 60)
    return [
        "sbatch", "--parsable", "-J", job.name, "-p", partition, "-N", "1", "-n", "1",
        f"--gres=gpu:{job.gpus}", f"--time={limit_min}", f"--nice={nice_of(job, top_weight)}",
        "-o", "/dev/null", "--wrap", f"sleep {job.run_steps * scale_s:g}",
    ]  # fmt: skip


def check_scheduler(env: Mapping[str, str]) -> None:
    """Refuse a cluster whose scheduler is not the one compared (naming the setting)."""
    text = subprocess.run(
        ["scontrol", "show", "config"], env={**env}, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    config = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in text.splitlines())}
    for key, want in (("PriorityType", "priority/multifactor"), ("SchedulerType", "sched/backfill")):
        if config.get(key) != want:
            raise ValueError(f"slurm.conf {key}={config.get(key)}: the comparison needs {key}={want}")


def _slurm_now(env: Mapping[str, str], partition: str) -> int:
    """Slurm's clock (which may run faster than the wall): the submit time of a held probe job."""
    argv = ["sbatch", "--parsable", "--hold", "-J", "fidelity-clock", "-p", partition, "-o", "/dev/null",
            "--wrap", "true"]  # fmt: skip
    job_id = subprocess.run(argv, env={**env}, capture_output=True, text=True, timeout=30, check=True)
    job_id_text = job_id.stdout.strip().split(";")[0]
    try:
        probe = [j for j in SlurmCli(env=env).jobs() if str(j.get("job_id")) == job_id_text]
        return int(probe[0]["submit_time"])
    finally:
        subprocess.run(["scancel", job_id_text], env={**env}, capture_output=True, timeout=30, check=False)


def _wait_mid_bucket(env: Mapping[str, str], partition: str, clock_speedup: float) -> None:
    """Wait until Slurm's clock is half-way through a minute. Backfill floors reservation times to
    its resolution (60 s): with every step boundary mid-minute, Slurm's few seconds of scheduling
    latency (amplified by the fast clock) keep a time in the minute of its step, as on a cluster
    on the wall clock, instead of carrying it into the next minute now and then. (On the wall
    clock with time compressed, the whole run then lies in two of Slurm's minutes, the same two
    on every run.)"""
    offset = (STEP_S // 2 - _slurm_now(env, partition)) % STEP_S
    time.sleep(offset / clock_speedup)


def _submit_all(
    workload: Sequence[FidelityJob], env: Mapping[str, str], partition: str, scale_s: float
) -> dict[str, str]:
    """Submit each job at its step (``scale_s`` real seconds a step); return Slurm id -> name.

    Jobs of one step go in by priority (then name, Slurm's job id order for equal priorities):
    the baseline sees them arrive together, and Slurm schedules on each submission, so a
    lower-priority job sent first could take the GPUs a moment before the higher one arrives."""
    top = max(j.weight for j in workload)
    origin = time.monotonic()
    ids: dict[str, str] = {}
    for job in sorted(workload, key=lambda j: (j.submit_step, -j.weight, j.name)):
        time.sleep(max(origin + job.submit_step * scale_s - time.monotonic(), 0.0))
        argv = sbatch_argv(job, partition, scale_s, top)
        out = subprocess.run(argv, env={**env}, capture_output=True, text=True, timeout=30, check=True)
        ids[out.stdout.strip().split(";")[0]] = job.name
    return ids


def _wait_completed(cli: SlurmCli, ids: Mapping[str, str], timeout_s: float) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while True:
        ours = [j for j in cli.jobs() if str(j.get("job_id")) in ids]
        done = [j for j in ours if j.get("job_state") == "COMPLETED"]
        if len(done) == len(ids):
            return done
        failed = [j for j in ours if j.get("job_state") in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")]
        if failed or time.monotonic() > deadline:
            states = {ids[str(j["job_id"])]: j.get("job_state") for j in ours}
            raise RuntimeError(f"Slurm did not complete the workload: {states}")
        time.sleep(0.5)


def run_on_slurm(
    workload: Sequence[FidelityJob],
    env: Mapping[str, str],
    *,
    partition: str,
    scale_s: float,
    clock_speedup: float = 1.0,
    timeout_s: float = 300.0,
) -> dict[str, JobTimes]:
    """Submit the workload to a running Slurm cluster (``env`` carries SLURM_CONF), wait for it,
    and read its start and end times (Slurm's clock, ``clock_speedup`` times the wall's) as steps
    from the first submission."""
    check_scheduler(env)
    _wait_mid_bucket(env, partition, clock_speedup)
    ids = _submit_all(workload, env, partition, scale_s)
    done = _wait_completed(SlurmCli(env=env), ids, timeout_s)
    origin = min(int(str(j["submit_time"])) for j in done)
    per_step = scale_s * clock_speedup
    return {
        ids[str(j["job_id"])]: JobTimes(
            (int(str(j["start_time"])) - origin) / per_step, (int(str(j["end_time"])) - origin) / per_step
        )
        for j in done
    }


# ---- the comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRow:
    name: str
    gpus: int
    weight: float
    submit_step: int
    run_steps: int
    sim_start_step: float
    slurm_start_step: float
    sim_end_step: float
    slurm_end_step: float

    @property
    def start_diff_steps(self) -> float:
        return self.slurm_start_step - self.sim_start_step


def start_order(starts: Mapping[str, float]) -> list[str]:
    """Names by start time (ties by name: same-step starts are unordered in the simulator)."""
    return sorted(starts, key=lambda n: (starts[n], n))


@dataclass(frozen=True)
class FidelityReport:
    scale_s: float
    clock_speedup: float
    rows: list[JobRow]

    @property
    def limits_match_runs(self) -> bool:
        """Whether Slurm's clock turns a compressed run into its whole-minute limit (step = 60 s)."""
        return math.isclose(self.scale_s * self.clock_speedup, STEP_S)

    def order_disagreements(self) -> list[tuple[str, str]]:
        """Pairs (a, b) the baseline starts a then b (a step or more apart) that Slurm starts b then a."""
        return [
            (a.name, b.name)
            for a in self.rows
            for b in self.rows
            if a.sim_start_step < b.sim_start_step and a.slurm_start_step > b.slurm_start_step
        ]

    @property
    def kendall_tau(self) -> float:
        sim = [r.sim_start_step for r in self.rows]
        real = [r.slurm_start_step for r in self.rows]
        return float(kendalltau(sim, real).statistic)

    @property
    def max_start_diff_steps(self) -> float:
        return max(abs(r.start_diff_steps) for r in self.rows)

    def order(self, side: str) -> list[str]:
        key = "sim_start_step" if side == "sim" else "slurm_start_step"
        return start_order({r.name: getattr(r, key) for r in self.rows})

    def to_json(self) -> dict[str, object]:
        return {
            "against": "slurm",
            "policy": "priority-backfill",
            "step_s": STEP_S,
            "scale_s_per_step": self.scale_s,
            "slurm_clock_speedup": self.clock_speedup,
            "limits_match_runs": self.limits_match_runs,
            "order_disagreements": self.order_disagreements(),
            "kendall_tau_start": self.kendall_tau,
            "max_abs_start_diff_steps": self.max_start_diff_steps,
            "sim_start_order": self.order("sim"),
            "slurm_start_order": self.order("slurm"),
            "jobs": [{**asdict(r), "start_diff_steps": r.start_diff_steps} for r in self.rows],
        }


def compare(
    workload: Sequence[FidelityJob],
    sim: Mapping[str, JobTimes],
    real: Mapping[str, JobTimes],
    scale_s: float,
    clock_speedup: float,
) -> FidelityReport:
    rows = [
        JobRow(
            j.name,
            j.gpus,
            j.weight,
            j.submit_step,
            j.run_steps,
            sim[j.name].start_step,
            real[j.name].start_step,
            sim[j.name].end_step,
            real[j.name].end_step,
        )
        for j in workload
    ]
    return FidelityReport(scale_s=scale_s, clock_speedup=clock_speedup, rows=rows)


def run_fidelity(
    env: Mapping[str, str],
    *,
    partition: str,
    clock_speedup: float,
    scale_s: float | None = None,
    workload: Sequence[FidelityJob] = WORKLOAD,
) -> FidelityReport:
    """The workload through the simulated baseline and through Slurm; ``scale_s`` (real seconds a
    step) defaults to what makes Slurm's clock count a step as one minute."""
    scale = STEP_S / clock_speedup if scale_s is None else scale_s
    real = run_on_slurm(workload, env, partition=partition, scale_s=scale, clock_speedup=clock_speedup)
    return compare(workload, simulate(workload), real, scale, clock_speedup)


def render_table(report: FidelityReport) -> object:
    from rich.table import Table

    table = Table(
        title=f"priority-backfill (simulated) vs Slurm multifactor + backfill: 1 step = 1 simulated "
        f"minute = {report.scale_s:g} s real, Slurm's clock x{report.clock_speedup:g}"
    )
    for column in ("job", "GPUs", "weight", "submit", "run", "sim start", "Slurm start", "diff",
                   "sim end", "Slurm end"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in sorted(report.rows, key=lambda r: (r.sim_start_step, r.name)):
        table.add_row(
            r.name, str(r.gpus), f"{r.weight:g}", str(r.submit_step), str(r.run_steps),
            f"{r.sim_start_step:.1f}", f"{r.slurm_start_step:.1f}", f"{r.start_diff_steps:+.1f}",
            f"{r.sim_end_step:.1f}", f"{r.slurm_end_step:.1f}",
        )  # fmt: skip
    table.caption = (
        f"start order Kendall tau {report.kendall_tau:.3f}; pairs in the other order "
        f"{len(report.order_disagreements())}; "
        f"largest start difference {report.max_start_diff_steps:.2f} steps"
        + ("" if report.limits_match_runs else "; time limits NOT on the compressed clock")
    )
    return table
