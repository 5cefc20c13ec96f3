"""Batch workload for the simulator: generated jobs, explicit jobs and the openb pod trace.

Every job gets a true GPU-time (hidden from policies) and an estimate (what JobSpec carries,
wrong as in real clusters). The whole window's arrivals are drawn once from the scenario seed,
so a --quick run sees a prefix of the same workload and every policy sees the same jobs. A
closed-loop generator (``population``, for soak runs) instead draws a new job each time one of
its jobs finishes, so what arrives then depends on the policy.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from schemas import JobSpec
from simulator.demand import HOUR_S, traces_dir
from simulator.scenario import ExplicitJobSpec, JobGeneratorSpec, OpenbReplaySpec, Scenario


@dataclass(frozen=True)
class SimJob:
    spec: JobSpec
    arrival_s: float
    true_gpu_s: float


class JobDrawer:
    """Draws one generator's jobs one at a time, numbered in order (``<prefix><index>-<n>``)."""

    def __init__(self, gen: JobGeneratorSpec, index: int, start: datetime, rng: np.random.Generator) -> None:
        self.gen = gen
        self.index = index
        self.start = start
        self.rng = rng
        self.drawn = 0
        self._gangs = np.array(sorted(gen.gangs))
        gang_p = np.array([gen.gangs[g] for g in self._gangs], dtype=float)
        self._gang_p = gang_p / gang_p.sum()
        class_p = np.array([c.share for c in gen.classes], dtype=float)
        self._class_p = class_p / class_p.sum()

    def draw(self, arrival_s: float) -> SimJob:
        gen, rng = self.gen, self.rng
        gang = int(rng.choice(self._gangs, p=self._gang_p))
        cls = gen.classes[int(rng.choice(len(gen.classes), p=self._class_p))]
        hours = min(float(rng.lognormal(np.log(gen.hours_median), gen.hours_sigma)), gen.max_hours)
        hours = max(hours, 0.05)
        true_gpu_s = hours * HOUR_S * gang
        estimate = true_gpu_s * gen.estimate_bias * float(rng.lognormal(0.0, gen.estimate_sigma))
        deadline = None
        if rng.uniform() < cls.deadline_frac:
            deadline = self.start + timedelta(seconds=arrival_s + cls.deadline_slack * hours * HOUR_S)
        checkpoints = rng.uniform() < gen.checkpoint_frac
        types = gen.allowed_gpu_types[int(rng.integers(len(gen.allowed_gpu_types)))]
        spec = JobSpec(
            job_id=f"{gen.id_prefix}{self.index}-{self.drawn:05d}",
            gpus=gang,
            allowed_gpu_types=list(types),
            priority_class=cls.name,
            priority_weight=cls.weight,
            estimated_gpu_s=max(estimate, 60.0),
            deadline=deadline,
            preemptible=cls.preemptible,
            checkpoint_interval_s=gen.checkpoint_interval_s if checkpoints else None,
            restart_cost_s=gen.restart_cost_s,
            team=gen.team,
            bandwidth_class=gen.bandwidth_class,
        )
        self.drawn += 1
        return SimJob(spec=spec, arrival_s=arrival_s, true_gpu_s=true_gpu_s)


def _arrival_times(gen: JobGeneratorSpec, window_s: float, rng: np.random.Generator) -> list[float]:
    """The initial backlog (or the closed loop's population) at 0, then Poisson arrivals."""
    if gen.population is not None:
        return [0.0] * gen.population
    arrivals = [0.0] * gen.initial_backlog
    t = 0.0
    rate_per_s = gen.arrivals_per_hour / HOUR_S
    while rate_per_s > 0:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= window_s:
            break
        arrivals.append(t)
    return arrivals


def _explicit(job: ExplicitJobSpec, start: datetime) -> SimJob:
    deadline = None if job.deadline_hour is None else start + timedelta(hours=job.deadline_hour)
    spec = JobSpec(
        job_id=job.job_id,
        gpus=job.gpus,
        allowed_pools=list(job.allowed_pools),
        allowed_gpu_types=list(job.allowed_gpu_types),
        priority_class=job.priority_class,
        priority_weight=job.priority_weight,
        estimated_gpu_s=job.estimated_gpu_hours * HOUR_S,
        deadline=deadline,
        preemptible=job.preemptible,
        checkpoint_interval_s=job.checkpoint_interval_s,
        restart_cost_s=job.restart_cost_s,
    )
    return SimJob(spec=spec, arrival_s=job.at_hour * HOUR_S, true_gpu_s=job.true_gpu_hours * HOUR_S)


def _openb(spec: OpenbReplaySpec, window_s: float, rng: np.random.Generator) -> list[SimJob]:
    """BE pods (by default) of the openb trace as batch jobs; a fractional GPU counts as one."""
    path = traces_dir() / "alibaba_openb_pod_list_default.csv"
    origin_s = spec.start_day * 86400.0
    jobs: list[SimJob] = []
    with path.open() as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"])
            if row["qos"] not in spec.qos or gpus < 1:
                continue
            created = float(row["creation_time"])
            arrival = (created - origin_s) / spec.time_compression
            if not 0.0 <= arrival < window_s:
                continue
            began = float(row["scheduled_time"] or row["creation_time"])
            runtime = (float(row["deletion_time"]) - began) * spec.runtime_scale
            runtime = min(max(runtime, spec.min_runtime_s), spec.max_runtime_hours * HOUR_S)
            true_gpu_s = runtime * gpus
            estimate = true_gpu_s * spec.estimate_bias * float(rng.lognormal(0.0, spec.estimate_sigma))
            job_spec = JobSpec(
                job_id=row["name"],
                gpus=gpus,
                allowed_gpu_types=[t for t in row["gpu_spec"].split("|") if t],
                priority_class="best-effort",
                priority_weight=spec.priority_weight,
                estimated_gpu_s=max(estimate, 60.0),
                checkpoint_interval_s=spec.checkpoint_interval_s,
            )
            jobs.append(SimJob(spec=job_spec, arrival_s=arrival, true_gpu_s=true_gpu_s))
            if len(jobs) >= spec.max_jobs:
                break
    return jobs


def build_workload(scenario: Scenario, rng: np.random.Generator) -> tuple[list[SimJob], dict[str, JobDrawer]]:
    """All jobs of the full window sorted by arrival (ties by id), and the drawers of the closed
    loops (by id prefix of their jobs), which go on drawing a job each time one of theirs ends."""
    window_s = scenario.window_s(quick=False)
    jobs: list[SimJob] = []
    closed: dict[str, JobDrawer] = {}
    for i, gen in enumerate(scenario.workload.generators):
        drawer = JobDrawer(gen, i, scenario.start, rng)
        jobs.extend(drawer.draw(arrival) for arrival in _arrival_times(gen, window_s, rng))
        if gen.population is not None:
            closed[f"{gen.id_prefix}{i}-"] = drawer
    jobs.extend(_explicit(j, scenario.start) for j in scenario.workload.explicit)
    if scenario.workload.openb is not None:
        jobs.extend(_openb(scenario.workload.openb, window_s, rng))
    ids = [j.spec.job_id for j in jobs]
    if len(ids) != len(set(ids)):
        raise ValueError("workload: duplicate job ids (check explicit job_id and generator id_prefix)")
    return sorted(jobs, key=arrival_order), closed


def arrival_order(job: SimJob) -> tuple[float, str]:
    return job.arrival_s, job.spec.job_id
