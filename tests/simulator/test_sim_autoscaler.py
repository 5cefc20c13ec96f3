"""The simulated in-step autoscaler (simulator/autoscaler.py): a service short of demand takes back
its burst headroom within the step, from free GPUs first and then from its own borrowers, never
from other jobs and never beyond its allowance."""

from __future__ import annotations

import pytest
from sim_helpers import allocation, job, tiny_scenario

from schemas import Allocation, JobAction, JobDecision, JobStatus, ServiceDecision
from simulator.cluster import Simulator


def _sim(demand_gpus: float) -> Simulator:
    sim = Simulator(
        tiny_scenario(
            services=[
                {
                    "spec": {"service": "svc", "startup_s": 60},
                    "demand": {"kind": "flat", "peak_gpus": demand_gpus, "noise_frac": 0},
                }
            ],
            workload={
                "explicit": [
                    job(name, 5, gpus=2, checkpoint_interval_s=600.0) for name in ("b1", "b2", "own")
                ]
            },
        )
    )
    sim.snapshot(sim.clock.now())
    return sim


def _allocation(sim: Simulator, *, burst: float, borrowers: tuple[str, ...]) -> Allocation:
    jobs = [
        JobDecision(
            job_id=name,
            action=JobAction.RUN,
            pool="p",
            gpus=2,
            reason="t",
            borrows_from="svc" if name in borrowers else None,
        )
        for name in ("b1", "b2", "own")
    ]
    service = ServiceDecision(service="svc", pool="p", replicas=2, gpus=2, burst_gpus=burst, reason="t")
    return allocation(sim, jobs=jobs, services=[service])


def test_a_short_service_takes_back_its_headroom_from_its_borrowers() -> None:
    sim = _sim(demand_gpus=6)
    sim.apply(_allocation(sim, burst=4, borrowers=("b1", "b2")))
    assert sim.jobs["b1"].status == JobStatus.RUNNING  # nothing happens before the step runs
    sim.advance()
    assert sim.jobs["b1"].status == sim.jobs["b2"].status == JobStatus.QUEUED
    assert sim.jobs["own"].status == JobStatus.RUNNING
    assert sim.ledger.stops["burst"] == 2
    assert sim.capacity["svc"]["p"].footprint == pytest.approx(6)
    # 2 GPUs serve during the first sub-tick, the 4 new ones after their 60 s start-up
    assert sim.ledger.served_gpu_s == pytest.approx(2 * 60 + 6 * 840)


def test_only_what_is_missing_is_taken() -> None:
    sim = _sim(demand_gpus=4)
    sim.apply(_allocation(sim, burst=4, borrowers=("b1", "b2")))
    sim.advance()
    stopped = [j for j in ("b1", "b2") if sim.jobs[j].status == JobStatus.QUEUED]
    assert len(stopped) == 1 and sim.capacity["svc"]["p"].footprint == pytest.approx(4)


def test_jobs_that_do_not_borrow_are_never_taken() -> None:
    sim = _sim(demand_gpus=8)
    sim.apply(_allocation(sim, burst=6, borrowers=("b1",)))
    sim.advance()
    assert sim.jobs["b1"].status == JobStatus.QUEUED
    assert sim.jobs["b2"].status == sim.jobs["own"].status == JobStatus.RUNNING
    assert sim.capacity["svc"]["p"].footprint == pytest.approx(4)  # 2 kept + the 2 b1 gave back


def test_without_an_allowance_nothing_scales() -> None:
    sim = _sim(demand_gpus=6)
    sim.apply(_allocation(sim, burst=0, borrowers=()))
    sim.advance()
    assert all(sim.jobs[j].status == JobStatus.RUNNING for j in ("b1", "b2", "own"))
    assert sim.capacity["svc"]["p"].footprint == pytest.approx(2)
    assert sim.ledger.stops["burst"] == 0
