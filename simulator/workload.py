"""Batch workload for the simulator: generated jobs, explicit jobs and the openb pod trace.

Every job gets a true GPU-time (hidden from policies) and an estimate (what JobSpec carries,
wrong as in real clusters). The whole window's arrivals are drawn once from the scenario seed,
so a --quick run sees a prefix of the same workload and every policy sees the same jobs.
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


def _generated(
    gen: JobGeneratorSpec, index: int, start: datetime, window_s: float, rng: np.random.Generator
) -> list[SimJob]:
    gangs = np.array(sorted(gen.gangs))
    gang_p = np.array([gen.gangs[g] for g in gangs], dtype=float)
    class_p = np.array([c.share for c in gen.classes], dtype=float)
    arrivals = [0.0] * gen.initial_backlog
    t = 0.0
    rate_per_s = gen.arrivals_per_hour / HOUR_S
    while rate_per_s > 0:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= window_s:
            break
        arrivals.append(t)
    jobs: list[SimJob] = []
    for n, arrival in enumerate(arrivals):
        gang = int(rng.choice(gangs, p=gang_p / gang_p.sum()))
        cls = gen.classes[int(rng.choice(len(gen.classes), p=class_p / class_p.sum()))]
        hours = min(float(rng.lognormal(np.log(gen.hours_median), gen.hours_sigma)), gen.max_hours)
        hours = max(hours, 0.05)
        true_gpu_s = hours * HOUR_S * gang
        estimate = true_gpu_s * gen.estimate_bias * float(rng.lognormal(0.0, gen.estimate_sigma))
        deadline = None
        if rng.uniform() < cls.deadline_frac:
            deadline = start + timedelta(seconds=arrival + cls.deadline_slack * hours * HOUR_S)
        checkpoints = rng.uniform() < gen.checkpoint_frac
        types = gen.allowed_gpu_types[int(rng.integers(len(gen.allowed_gpu_types)))]
        spec = JobSpec(
            job_id=f"{gen.id_prefix}{index}-{n:05d}",
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
        jobs.append(SimJob(spec=spec, arrival_s=arrival, true_gpu_s=true_gpu_s))
    return jobs


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


def build_workload(scenario: Scenario, rng: np.random.Generator) -> list[SimJob]:
    """All jobs of the full window, sorted by arrival (ties by id)."""
    window_s = scenario.window_s(quick=False)
    jobs: list[SimJob] = []
    for i, gen in enumerate(scenario.workload.generators):
        jobs.extend(_generated(gen, i, scenario.start, window_s, rng))
    jobs.extend(_explicit(j, scenario.start) for j in scenario.workload.explicit)
    if scenario.workload.openb is not None:
        jobs.extend(_openb(scenario.workload.openb, window_s, rng))
    ids = [j.spec.job_id for j in jobs]
    if len(ids) != len(set(ids)):
        raise ValueError("workload: duplicate job ids (check explicit job_id and generator id_prefix)")
    return sorted(jobs, key=lambda j: (j.arrival_s, j.spec.job_id))
