"""Property tests of the simulator's books under arbitrary (even invalid) allocations.

A chaos policy issues random run / hold / preempt decisions (wrong pools and gang sizes
included) and random service capacities. Whatever it does, GPU-time is conserved every step,
no pool is overcommitted, a running job always holds exactly its gang on up nodes, and lost
work is counted once.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import job, tiny_scenario

from loop import ControlLoop, Decision
from schemas import ClusterState, DemandForecast, JobAction, JobDecision, JobStatus, ServiceDecision
from simulator.cluster import Simulator
from simulator.forecast_sources import NoForecastSource
from simulator.policies.common import decision

EPS = 1e-6


class ChaosPolicy:
    """Random decisions, seeded; the simulator must stay physical whatever it is told."""

    def __init__(self, seed: int, pools: list[str]) -> None:
        self.name = "chaos"
        self.rng = random.Random(seed)
        self.pools = pools

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        rng = self.rng
        jobs = []
        for j in state.jobs:
            action = rng.choice([JobAction.RUN, JobAction.RUN, JobAction.HOLD, JobAction.PREEMPT])
            if action == JobAction.RUN:
                gpus = j.spec.gpus if rng.random() < 0.85 else j.spec.gpus + 1
                jobs.append(
                    JobDecision(
                        job_id=j.spec.job_id,
                        action=action,
                        pool=rng.choice(self.pools),
                        gpus=gpus,
                        reason="chaos",
                    )
                )
            elif rng.random() < 0.7:
                jobs.append(JobDecision(job_id=j.spec.job_id, action=action, reason="chaos"))
        services = [
            ServiceDecision(
                service=s.spec.service,
                pool=rng.choice(self.pools),
                replicas=0,
                gpus=rng.choice([0.0, 0.5, 1.0, 2.5, 4.0, 12.0]),
                reason="chaos",
            )
            for s in state.services
            if rng.random() < 0.8
        ]
        return decision(self.name, state, forecasts, now, services, jobs, {"seed": 0})


def check_physical(sim: Simulator) -> None:
    assert sim.ledger.overcommit_ticks == 0
    for pool in sim.pools.values():
        up = pool.up_nodes(sim.now_s)
        used = [0] * pool.nodes
        for j in sim.jobs.values():
            if j.status == JobStatus.RUNNING and j.pool == pool.name:
                assert sum(j.placement.values()) == j.spec.gpus, "job runs on other than its gang size"
                for node, gpus in j.placement.items():
                    assert up[node], "job placed on a node that is down"
                    used[node] += gpus
        assert all(u <= pool.gpus_per_node for u in used)


job_entries = st.lists(
    st.builds(
        lambda i, hours, gpus, ckpt, pre, est: job(
            f"j{i}",
            hours,
            gpus,
            checkpoint_interval_s=ckpt,
            preemptible=pre,
            estimated_gpu_hours=hours * gpus * est,
        ),
        st.integers(0, 10_000),
        st.floats(0.1, 3.0),
        st.sampled_from([1, 1, 2, 3, 4, 5, 8]),
        st.sampled_from([None, 600.0, 1800.0]),
        st.booleans(),
        st.floats(0.3, 3.0),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda e: e["job_id"],
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=job_entries,
    seed=st.integers(0, 2**16),
    share=st.sampled_from([1, 2, 4]),
    mtbf=st.sampled_from([0.0, 3.0]),
    maintenance=st.booleans(),
    arrival_spread=st.floats(0.0, 1.5),
)
def test_books_balance_under_chaos(
    jobs: list[dict[str, Any]], seed: int, share: int, mtbf: float, maintenance: bool, arrival_spread: float
) -> None:
    for n, entry in enumerate(jobs):
        entry["at_hour"] = arrival_spread * n / len(jobs)
    scenario = tiny_scenario(
        seed=seed,
        pools=[
            {"name": "p", "gpu_type": "A100", "nodes": 2, "gpus_per_node": 4},
            {"name": "q", "gpu_type": "T4", "nodes": 2, "gpus_per_node": 2, "max_share": share},
        ],
        services=[
            {
                "spec": {"service": "svc", "startup_s": 90},
                "demand": {
                    "kind": "diurnal",
                    "peak_gpus": 3,
                    "noise_frac": 0.1,
                    "bursts": {"per_day": 12, "magnitude": 2, "duration_minutes": 20},
                },
            },
            {
                "spec": {
                    "service": "emb",
                    "startup_s": 30,
                    "latency_critical": True,
                    "bandwidth_class": "high",
                },
                "demand": {"kind": "flat", "peak_gpus": 0.7},
            },
        ],
        failures={"node_mtbf_hours": mtbf, "repair_hours": 0.5},
        maintenance=[{"pool": "p", "start_hour": 0.5, "duration_hours": 0.75, "nodes_out": 1}]
        if maintenance
        else [],
        workload={"explicit": jobs},
    )
    sim = Simulator(scenario)
    loop = ControlLoop(
        clock=sim.clock,
        state_source=sim,
        forecast_source=NoForecastSource(),
        policy=ChaosPolicy(seed, ["p", "q"]),
        actuator=sim,
    )
    for _ in range(sim.steps):
        loop.step()
        check_physical(sim)
        sim.advance()
        check_physical(sim)

    ledger = sim.ledger
    for row in ledger.rows:
        assert abs(row.capacity_gpu_s - row.busy_gpu_s - row.idle_gpu_s) < EPS
        assert row.busy_gpu_s <= row.capacity_gpu_s + EPS
        assert row.idle_gpu_s >= -EPS
        assert row.useful_gpu_s <= row.busy_gpu_s + EPS
    assert abs(sum(r.capacity_gpu_s for r in ledger.rows) - ledger.capacity_gpu_s) < 1e-3
    everyone = list(sim.jobs.values()) + list(sim.finished.values())
    # Lost work is counted once: per job, kept = gross progress - lost; the ledger agrees.
    for j in everyone:
        assert abs(j.gross_progress_gpu_s - j.lost_gpu_s - j.done_gpu_s) < EPS
        assert j.done_gpu_s <= j.sim.true_gpu_s + EPS
        assert j.done_gpu_s >= -EPS
    assert abs(ledger.lost_work_gpu_s - sum(j.lost_gpu_s for j in everyone)) < EPS
    assert abs(ledger.batch_progress_gpu_s - sum(j.gross_progress_gpu_s for j in everyone)) < 1e-3
    assert sum(ledger.stops.values()) == sum(j.preemptions for j in everyone)
    kept = sum(j.done_gpu_s for j in everyone)
    assert abs(ledger.useful_gpu_s - (ledger.served_gpu_s + kept)) < 1e-3
    assert ledger.served_gpu_s <= ledger.demand_gpu_s + EPS
    for j in sim.finished.values():
        assert abs(j.done_gpu_s - j.sim.true_gpu_s) < 1e-3
