"""The simulator's physics on tiny hand-made scenarios: lead time, gangs on nodes, truth vs
estimates, maintenance, sharing, lost work, forecast sources and determinism."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sim_helpers import T0, allocation, job, tiny_scenario

from forecaster.source import SeasonalNaiveSource
from schemas import JobAction, JobDecision, JobStatus, ServiceDecision
from simulator.cluster import Simulator
from simulator.forecast_sources import OracleSource
from simulator.registry import baseline_factories
from simulator.runner import run_scenario


def run_job(job_id: str, gpus: int, pool: str = "p") -> JobDecision:
    return JobDecision(job_id=job_id, action=JobAction.RUN, pool=pool, gpus=gpus, reason="test")


def test_new_replicas_serve_only_after_startup() -> None:
    sim = Simulator(
        tiny_scenario(
            services=[
                {
                    "spec": {"service": "svc", "startup_s": 300},
                    "demand": {"kind": "flat", "peak_gpus": 6, "noise_frac": 0},
                }
            ]
        )
    )
    assert sim.capacity["svc"]["p"].ready_gpus == 6  # the initial fleet is warm
    sim.apply(
        allocation(sim, services=[ServiceDecision(service="svc", pool="p", replicas=2, gpus=2, reason="t")])
    )
    sim.advance()
    assert sim.ledger.served_gpu_s == pytest.approx(2 * 900)  # cut at once
    sim.apply(
        allocation(sim, services=[ServiceDecision(service="svc", pool="p", replicas=6, gpus=6, reason="t")])
    )
    sim.advance()
    # 300 s at 2 GPUs, then 600 s at 6 GPUs; the loading replicas are busy, not useful.
    assert sim.ledger.served_gpu_s == pytest.approx(2 * 900 + 2 * 300 + 6 * 600)
    assert sim.ledger.rows[-1].busy_gpu_s == pytest.approx(6 * 900)


def test_gang_must_fit_on_nodes_not_just_in_the_pool() -> None:
    sim = Simulator(
        tiny_scenario(services=[], workload={"explicit": [job("a", 2), job("b", 2), job("big", 2, gpus=4)]})
    )
    sim.snapshot(sim.clock.now())
    sim.apply(allocation(sim, jobs=[run_job("a", 1), run_job("b", 1)]))
    # Best fit puts both singles on one node, so a 4-gang still fits on the other.
    assert sim.jobs["big"].status == JobStatus.QUEUED
    sim.jobs["b"].stop()
    sim.jobs["b"].start("p", {1: 1}, 0.0)  # force fragmentation: one single on each node
    sim.apply(allocation(sim, jobs=[run_job("big", 4)]))
    assert sim.jobs["big"].status == JobStatus.QUEUED
    assert sim.ledger.gang_blocked == 1
    assert sim.snapshot(sim.clock.now()).pools[0].free_gpus_by_node == [3, 3]


def test_jobs_end_on_true_work_not_the_estimate() -> None:
    sim = Simulator(
        tiny_scenario(
            services=[],
            workload={
                "explicit": [
                    job("short", 0.25, gpus=2, estimated_gpu_hours=10.0),
                ]
            },
        )
    )
    sim.snapshot(sim.clock.now())
    sim.apply(allocation(sim, jobs=[run_job("short", 2)]))
    sim.advance()
    done = sim.finished["short"]
    assert done.finished_at_s == pytest.approx(900.0)
    assert done.done_gpu_s == pytest.approx(0.25 * 2 * 3600)


def test_preemption_loses_work_since_checkpoint_once() -> None:
    sim = Simulator(
        tiny_scenario(
            services=[],
            workload={
                "explicit": [
                    job("ckpt", 5, gpus=2, checkpoint_interval_s=1200.0),
                    job("none", 5, gpus=2, checkpoint_interval_s=None),
                ]
            },
        )
    )
    sim.snapshot(sim.clock.now())
    sim.apply(allocation(sim, jobs=[run_job("ckpt", 2), run_job("none", 2)]))
    sim.advance()
    sim.advance()  # 1800 s: ckpt checkpointed at 1200 s, so 600 s x 2 GPUs at risk
    preempt = [JobDecision(job_id=j, action=JobAction.PREEMPT, reason="t") for j in ("ckpt", "none")]
    sim.apply(allocation(sim, jobs=preempt))
    assert sim.jobs["ckpt"].lost_gpu_s == pytest.approx(600 * 2)
    assert sim.jobs["none"].lost_gpu_s == pytest.approx(1800 * 2)
    assert sim.ledger.lost_work_gpu_s == pytest.approx(2400 * 2)
    sim.apply(allocation(sim, jobs=preempt))  # preempting a queued job loses nothing more
    assert sim.ledger.lost_work_gpu_s == pytest.approx(2400 * 2)
    # Restart costs its restart time on the gang before progress resumes.
    sim.apply(allocation(sim, jobs=[run_job("ckpt", 2)]))
    sim.advance()
    assert sim.jobs["ckpt"].restart_overhead_gpu_s == pytest.approx(120 * 2)


def test_non_preemptible_jobs_are_not_stopped() -> None:
    sim = Simulator(tiny_scenario(services=[], workload={"explicit": [job("pinned", 5, preemptible=False)]}))
    sim.snapshot(sim.clock.now())
    sim.apply(allocation(sim, jobs=[run_job("pinned", 1)]))
    sim.apply(allocation(sim, jobs=[JobDecision(job_id="pinned", action=JobAction.PREEMPT, reason="t")]))
    assert sim.jobs["pinned"].status == JobStatus.RUNNING
    assert sim.ledger.refused == 1


def test_maintenance_is_announced_and_drains_its_nodes() -> None:
    sim = Simulator(
        tiny_scenario(
            services=[],
            maintenance=[{"pool": "p", "start_hour": 0.5, "duration_hours": 0.5, "nodes_out": 1}],
            workload={"explicit": [job("a", 5, gpus=4), job("b", 5, gpus=4)]},
        )
    )
    state = sim.snapshot(sim.clock.now())
    assert state.pools[0].windows[0].start == T0 + timedelta(minutes=30)
    assert state.pools[0].windows[0].nodes == [state.pools[0].node_names[1]]  # the node it takes
    assert state.pools[0].gpus_available == 8
    sim.apply(allocation(sim, jobs=[run_job("a", 4), run_job("b", 4)]))
    assert list(sim.jobs["b"].placement) == [1]  # the last node, which maintenance takes
    sim.advance()
    sim.advance()
    assert sim.jobs["a"].status == JobStatus.RUNNING
    assert sim.jobs["b"].status == JobStatus.QUEUED
    assert sim.ledger.stops["maintenance"] == 1
    assert sim.snapshot(sim.clock.now()).pools[0].gpus_available == 4


def test_replicas_an_outage_takes_preempt_batch_to_come_back() -> None:
    """A Deployment's pods lost with their node are recreated and, outranking batch, preempt it."""
    sim = Simulator(
        tiny_scenario(
            pools=[{"name": "p", "gpu_type": "A100", "nodes": 3, "gpus_per_node": 4}],
            services=[
                {
                    "spec": {"service": "svc", "startup_s": 120, "min_replicas": 0},
                    "demand": {"kind": "flat", "peak_gpus": 4, "noise_frac": 0},
                }
            ],
            maintenance=[{"pool": "p", "start_hour": 0.5, "duration_hours": 1, "nodes_out": 1}],
            workload={"explicit": [job("light", 4, gpus=4), job("heavy", 4, gpus=4, priority_weight=3)]},
        )
    )
    sim.snapshot(sim.clock.now())
    no_replicas = ServiceDecision(service="svc", pool="p", replicas=0, gpus=0, reason="t")
    sim.apply(allocation(sim, jobs=[run_job("light", 4), run_job("heavy", 4)], services=[no_replicas]))
    assert sim.jobs["light"].placement == {0: 4} and sim.jobs["heavy"].placement == {1: 4}
    sim.advance()
    # the service's 4 GPUs land on node 2, the one the maintenance window takes at 0.5 h
    sim.apply(
        allocation(sim, services=[ServiceDecision(service="svc", pool="p", replicas=4, gpus=4, reason="t")])
    )
    sim.advance()
    assert sim.ledger.stops["failover"] == 1
    assert sim.jobs["light"].status == JobStatus.QUEUED  # the lighter job made room
    assert sim.jobs["heavy"].status == JobStatus.RUNNING
    capacity = sim.capacity["svc"]["p"]
    assert capacity.footprint == 4
    assert capacity.ready_gpus == 0 and capacity.pending == [(1800.0 + 120, 4)]  # they start up again


def test_a_start_is_kept_off_the_nodes_its_decision_avoids() -> None:
    sim = Simulator(
        tiny_scenario(services=[], workload={"explicit": [job("a", 5, gpus=2), job("b", 5, gpus=2)]})
    )
    names = sim.snapshot(sim.clock.now()).pools[0].node_names
    sim.apply(allocation(sim, jobs=[run_job("a", 2)]))
    assert list(sim.jobs["a"].placement) == [0]  # node 0 has 2 GPUs left: best fit for another 2
    off_node_0 = run_job("b", 2).model_copy(update={"avoid_nodes": [names[0]]})
    sim.apply(allocation(sim, jobs=[off_node_0]))
    assert list(sim.jobs["b"].placement) == [1], "kept off node 0, which best fit would take"


def test_time_slicing_packs_fractions_and_charges_interference() -> None:
    services = [
        {
            "spec": {"service": s, "startup_s": 0},
            "demand": {"kind": "flat", "peak_gpus": 0.5, "noise_frac": 0},
        }
        for s in ("a", "b")
    ]
    shared = Simulator(
        tiny_scenario(
            services=services,
            pools=[{"name": "p", "gpu_type": "T4", "nodes": 1, "gpus_per_node": 4, "max_share": 4}],
        )
    )
    shared.apply(
        allocation(
            shared,
            services=[
                ServiceDecision(service=s, pool="p", replicas=1, gpus=0.5, reason="t") for s in ("a", "b")
            ],
        )
    )
    assert shared.service_phys["p"] == 1  # two half-GPU tenants on one GPU
    assert shared.capacity["a"]["p"].effective_ready() < 0.5
    exclusive = Simulator(
        tiny_scenario(
            services=services,
            pools=[{"name": "p", "gpu_type": "T4", "nodes": 1, "gpus_per_node": 4}],
        )
    )
    exclusive.apply(
        allocation(
            exclusive,
            services=[
                ServiceDecision(service=s, pool="p", replicas=1, gpus=0.5, reason="t") for s in ("a", "b")
            ],
        )
    )
    assert exclusive.service_phys["p"] == 2  # no sharing: whole GPUs each


def test_oracle_sees_truth_and_naive_sees_only_history() -> None:
    sim = Simulator(
        tiny_scenario(
            services=[
                {
                    "spec": {"service": "svc"},
                    "demand": {"kind": "diurnal", "peak_gpus": 10, "noise_frac": 0.1},
                }
            ]
        )
    )
    state = sim.snapshot(sim.clock.now())
    assert len(state.services[0].demand_history) >= 7 * 96
    oracle = OracleSource(sim, 96).forecasts(state, sim.clock.now())["svc"]
    truth = sim.true_step_demand("svc", 0.0, 96)
    assert oracle.quantiles["p50"] == truth == oracle.quantiles["p99"]
    first_step = sum(sim.demand_at("svc", t) for t in range(0, 900, 60)) / 15
    assert truth[0] == pytest.approx(first_step)
    naive = SeasonalNaiveSource(96).forecasts(state, sim.clock.now())["svc"]
    assert naive.quantiles["p50"][0] == pytest.approx(state.services[0].demand_history[-96])


def test_same_seed_same_run_different_seed_different_run() -> None:
    scenario = tiny_scenario(
        window_hours=4,
        workload={
            "generators": [
                {
                    "arrivals_per_hour": 4,
                    "gangs": {1: 1, 2: 1},
                    "hours_median": 1,
                    "classes": [{"name": "s", "weight": 1, "share": 1}],
                }
            ]
        },
    )
    factory = baseline_factories()["reactive"]
    first, _ = run_scenario(scenario, "reactive", factory)
    again, _ = run_scenario(scenario, "reactive", factory)
    other, _ = run_scenario(scenario, "reactive", factory, seed=99)
    keys = ("utilization", "pwt", "slo_shortfall", "preemptions", "lost_gpu_hours", "deadline_misses")
    assert [getattr(first, k) for k in keys] == [getattr(again, k) for k in keys]
    assert [getattr(first, k) for k in keys] != [getattr(other, k) for k in keys]
