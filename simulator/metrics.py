"""Benchmark metrics of one run, exactly as ARCHITECTURE.md defines them.

utilization = useful GPU-time / available GPU-time (GPUs up); useful = inference demand served
plus batch progress kept (work lost on a stop is subtracted once; restart overhead, loading
replicas and interference losses are not useful; the progress of a job still running at the window
end since its last checkpoint is not kept either). PWT = sum over jobs of priority weight x
GPU-hours of work KEPT at the window end: a finished job's work, or what an unfinished job has
checkpointed (a running job's un-checkpointed progress does not count: a policy cannot gain by
starting work it never secures). Weighted completions = sum of the priority weights of finished
jobs; JCT (arrival to finish, hours) p50 and p95 by priority class and p95 over all. SLO
shortfall = demanded GPU-minutes not covered / demanded GPU-minutes. Preemptions count stops by
the policy, by planned maintenance, by bursts and by fail-over (replicas a lost node took preempting
batch to come back: room a policy could have left free); failures are reported apart. Lost
GPU-hours = work since the last checkpoint dropped at every stop (jobs.LiveJob.stop, recorded once
in the ledger) plus the restart overhead a restarted job spends before it moves again;
``restart_gpu_hours`` is that second part alone, ``failure_lost_gpu_hours`` the work dropped by
failures (not preemptions, but lost all the same).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from simulator.cluster import Simulator
from simulator.jobs import LiveJob

HOUR_S = 3600.0
PREEMPTION_CAUSES = ("policy", "maintenance", "burst", "failover")


@dataclass(frozen=True)
class RunMetrics:
    scenario: str
    policy: str
    utilization: float
    pwt: float
    slo_shortfall: float
    preemptions: int
    lost_gpu_hours: float
    deadline_misses: int
    decision_ms_p50: float
    decision_ms_p99: float
    jobs_completed: int
    jobs_arrived: int
    weighted_completions: float = 0.0
    jct_p95_hours: float = 0.0
    jct_hours_by_class: dict[str, float] = field(default_factory=dict)
    jct_p50_hours_by_class: dict[str, float] = field(default_factory=dict)
    jct_p95_hours_by_class: dict[str, float] = field(default_factory=dict)
    pwt_to_bound: float | None = None
    """PWT / the bound's PWT at this run's SLO shortfall (simulator/bound.py); None: not computed."""
    pwt_in_flight: float = 0.0
    """Weight x GPU-hours of progress that unfinished jobs had not checkpointed at the window end:
    work done but not in PWT (it is kept only where the job goes on to finish or checkpoint, after
    the window). PWT + this is all the weighted work done in the window, net of work lost."""
    restart_gpu_hours: float = 0.0
    failure_lost_gpu_hours: float = 0.0
    failure_stops: int = 0
    gang_blocked: int = 0
    refused_decisions: int = 0
    busy_fraction: float = 0.0
    steps: int = 0
    wall_s: float = 0.0

    def headline(self) -> dict[str, float | int]:
        """The figures ``ebbtide bench --json`` writes per scenario and policy."""
        keys = (
            "utilization",
            "pwt",
            "slo_shortfall",
            "preemptions",
            "lost_gpu_hours",
            "deadline_misses",
            "weighted_completions",
            "jct_p95_hours",
            "decision_ms_p50",
            "decision_ms_p99",
            "pwt_to_bound",
            "pwt_in_flight",
        )
        return {k: getattr(self, k) for k in keys}

    def details(self) -> dict[str, object]:
        return asdict(self)


def kept_gpu_s(job: LiveJob) -> float:
    """Work a job keeps at the window end: all of it when finished, else what is checkpointed."""
    if job.finished_at_s is not None:
        return max(job.done_gpu_s, 0.0)
    return max(job.done_gpu_s - job.since_checkpoint_gpu_s, 0.0)


def at_risk_gpu_s(sim: Simulator, *, weighted: bool = False) -> float:
    """Progress of unfinished jobs since their last checkpoint (x priority weight with
    ``weighted``): not kept at the window end."""
    return sum(
        (j.spec.priority_weight if weighted else 1.0) * max(j.since_checkpoint_gpu_s, 0.0)
        for j in sim.jobs.values()
        if j.finished_at_s is None
    )


def weighted_pwt(sim: Simulator) -> float:
    """PWT in weighted GPU-hours: priority weight x kept work, over every job of the window."""
    live = list(sim.jobs.values()) + list(sim.finished.values())
    return sum(j.spec.priority_weight * kept_gpu_s(j) for j in live) / HOUR_S


def deadline_misses(sim: Simulator) -> int:
    """Jobs with a deadline that finished after it, or did not finish and it fell in the window."""
    misses = 0
    for job in sim.arrivals:
        if job.spec.deadline is None:
            continue
        deadline_s = (job.spec.deadline - sim.scenario.start).total_seconds()
        done = sim.finished.get(job.spec.job_id)
        if done is not None:
            misses += int(done.finished_at_s is not None and done.finished_at_s > deadline_s + 1e-6)
        elif deadline_s <= sim.window_s:
            misses += 1
    return misses


def jct_hours(sim: Simulator) -> dict[str, list[float]]:
    """Completion times (arrival to finish, hours) of finished jobs by priority class."""
    jct: dict[str, list[float]] = defaultdict(list)
    for done_job in sim.finished.values():
        assert done_job.finished_at_s is not None
        jct[done_job.spec.priority_class].append((done_job.finished_at_s - done_job.sim.arrival_s) / HOUR_S)
    return dict(sorted(jct.items()))


def _percentiles(by_class: dict[str, list[float]], q: float) -> dict[str, float]:
    return {k: float(np.percentile(v, q)) for k, v in by_class.items()}


def compute_metrics(
    sim: Simulator, policy: str, decision_ms: Sequence[float], wall_s: float = 0.0
) -> RunMetrics:
    ledger = sim.ledger
    jct = jct_hours(sim)
    every_jct = [h for v in jct.values() for h in v]
    lat = np.asarray(decision_ms, dtype=float) if decision_ms else np.zeros(1)
    capacity = max(ledger.capacity_gpu_s, 1e-9)
    demanded = ledger.demand_gpu_s
    shortfall = (demanded - ledger.served_gpu_s) / demanded if demanded > 0 else 0.0
    return RunMetrics(
        scenario=sim.scenario.name,
        policy=policy,
        utilization=(ledger.useful_gpu_s - at_risk_gpu_s(sim)) / capacity,
        pwt=weighted_pwt(sim),
        pwt_in_flight=at_risk_gpu_s(sim, weighted=True) / HOUR_S,
        slo_shortfall=shortfall,
        preemptions=sum(ledger.stops[cause] for cause in PREEMPTION_CAUSES),
        lost_gpu_hours=(ledger.lost_work_gpu_s + ledger.restart_overhead_gpu_s) / HOUR_S,
        deadline_misses=deadline_misses(sim),
        decision_ms_p50=float(np.percentile(lat, 50)),
        decision_ms_p99=float(np.percentile(lat, 99)),
        jobs_completed=len(sim.finished),
        jobs_arrived=len(sim.arrivals),
        weighted_completions=sum(j.spec.priority_weight for j in sim.finished.values()),
        jct_p95_hours=float(np.percentile(every_jct, 95)) if every_jct else 0.0,
        jct_hours_by_class={k: float(np.mean(v)) for k, v in jct.items()},
        jct_p50_hours_by_class=_percentiles(jct, 50),
        jct_p95_hours_by_class=_percentiles(jct, 95),
        restart_gpu_hours=ledger.restart_overhead_gpu_s / HOUR_S,
        failure_lost_gpu_hours=ledger.lost_by_cause["failure"] / HOUR_S,
        failure_stops=ledger.stops["failure"],
        gang_blocked=ledger.gang_blocked,
        refused_decisions=ledger.refused,
        busy_fraction=ledger.busy_gpu_s / capacity,
        steps=sim.steps,
        wall_s=wall_s,
    )
