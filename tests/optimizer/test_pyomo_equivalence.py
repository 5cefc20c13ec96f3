"""The hot path (HiGHS matrix from optimizer/formulation.py) solves the same model as the Pyomo
statement in optimizer/pyomo_model.py: same optimal objective on the same instances, and the
warm-started in-place update gives the same optimum as a fresh model."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest
from optimizer_cases import NOW, day_curve, forecast, job, pool, service, state

from optimizer.config import PlannerConfig
from optimizer.deadlines import margin_steps
from optimizer.formulation import build_structure
from optimizer.inputs import build_inputs
from optimizer.parameters import deadline_requirement, fill_parameters
from optimizer.pyomo_model import solve_with_pyomo
from optimizer.slot_updates import update_slots
from optimizer.solve_highs import HighsSession
from schemas import ClusterState, JobStatus, PoolWindow

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)
MARGIN = margin_steps(CONFIG.deadline_margin_s, CONFIG.step_s)


def random_instance(seed: int) -> tuple[ClusterState, dict]:
    rng = random.Random(seed)
    pools = [
        pool("a", 32, gpu_type="a100", max_share=4),
        pool("b", 16, gpu_type="h100", available=12),
        pool("c", 24, gpu_type="h100"),
    ]
    pools[2] = pools[2].model_copy(
        update={
            "windows": [PoolWindow(start=NOW + timedelta(hours=2), end=NOW + timedelta(hours=4), gpus_out=8)]
        }
    )
    services = [
        service("chat", replicas={"a": 6}, min_replicas=2, latency_critical=True, max_cotenants=1),
        service("embed", replicas={"b": 2}, min_replicas=3, max_cotenants=4, allowed_pools=["a", "b"]),
    ]
    forecasts = {
        "chat": forecast("chat", day_curve(20, 4, steps=24, peak_step=10), spread=2.0),
        "embed": forecast("embed", [rng.uniform(0.2, 3) for _ in range(24)], spread=0.5),
    }
    jobs = []
    used = {"a": 6.0, "b": 2.0, "c": 0.0}
    for i in range(12):
        gang = rng.choice([1, 2, 4, 8])
        allowed = rng.choice([[], ["a"], ["b", "c"]])
        run_in = None
        if rng.random() < 0.4:
            target = (allowed or ["a", "b", "c"])[0]
            capacity = {"a": 32, "b": 12, "c": 24}[target]
            if used[target] + gang <= capacity:
                run_in, used[target] = target, used[target] + gang
        jobs.append(
            job(
                f"j{i}",
                gang,
                weight=rng.choice([1.0, 3.0]),
                hours=rng.uniform(0.5, 10),
                running_in=run_in,
                preemptible=rng.random() < 0.7,
                allowed_pools=allowed,
                team=rng.choice(["x", "y"]),
                restart_cost_s=rng.choice([0.0, 120.0]),
                since_checkpoint_gpu_s=rng.choice([0.0, 1800.0]),
                # deadlines in reach, out of reach, in the first steps and inside longer blocks
                deadline_hours=rng.choice([None, None, rng.uniform(0.5, 5.0), rng.uniform(4.0, 7.0)]),
            )
        )
    return state(pools, jobs, services, quotas_gpus={"x": 24}), forecasts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_highspy_matrix_and_pyomo_model_reach_the_same_objective(seed: int) -> None:
    cluster, forecasts = random_instance(seed)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    structure = build_structure(inputs, deadline_margin=MARGIN)
    outcome = HighsSession().solve(structure, fill_parameters(structure, inputs, CONFIG), 30.0)
    pyomo = solve_with_pyomo(inputs, CONFIG, time_limit_s=30.0)
    assert outcome.ok and pyomo.relaxed is not None
    # HiGHS minimises cost; the Pyomo model maximises value minus losses: the same number, negated.
    assert math.isclose(-outcome.objective, pyomo.objective, rel_tol=1e-6, abs_tol=1e-6)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_both_models_hold_the_same_deadline_rows(seed: int) -> None:
    """The instances carry deadlines: some in reach (a row each), some not; with the rows priced
    so high that each would decide the plan, both models still agree, with deadline work late."""
    cluster, forecasts = random_instance(seed)
    config = replace(CONFIG, deadline_penalty=50.0)
    inputs = build_inputs(cluster, forecasts, NOW, config)
    need = deadline_requirement(inputs)
    assert (need > 0).any() and ((need == 0) & (inputs.job_deadline_step <= CONFIG.horizon_steps)).any()
    structure = build_structure(inputs, deadline_margin=MARGIN)
    outcome = HighsSession().solve(structure, fill_parameters(structure, inputs, config), 30.0)
    pyomo = solve_with_pyomo(inputs, config, time_limit_s=30.0)
    assert outcome.ok and outcome.x is not None and pyomo.relaxed is not None
    assert math.isclose(-outcome.objective, pyomo.objective, rel_tol=1e-6, abs_tol=1e-6)


def test_warm_started_update_matches_a_fresh_solve() -> None:
    cluster, forecasts = random_instance(7)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    structure = build_structure(inputs)
    session = HighsSession()
    first = session.solve(structure, fill_parameters(structure, inputs, CONFIG), 30.0)
    # Next step: the same jobs and services, new demand and capacity: an in-place update.
    later = NOW + timedelta(minutes=15)
    shifted = {
        k: forecast(k, [v * 1.3 for v in f.quantiles["p50"]], spread=1.0) for k, f in forecasts.items()
    }
    cluster2 = cluster.model_copy(update={"as_of": later})
    inputs2 = build_inputs(cluster2, shifted, later, CONFIG)
    structure2 = build_structure(inputs2)
    assert structure2.key == structure.key
    # the deadlines came a step nearer: their coefficients change in place, as the planner does it
    changes = update_slots(structure, inputs2)
    assert changes.at.size and np.array_equal(structure.matrix.data, structure2.matrix.data)
    warm = session.solve(structure, fill_parameters(structure, inputs2, CONFIG), 30.0, changes)
    fresh = HighsSession().solve(structure2, fill_parameters(structure2, inputs2, CONFIG), 30.0)
    assert first.ok and warm.ok and fresh.ok
    assert warm.warm and not fresh.warm
    assert session.updates == 1 and session.rebuilds == 1
    assert math.isclose(warm.objective, fresh.objective, rel_tol=1e-7, abs_tol=1e-6)
    assert not math.isclose(warm.objective, first.objective, rel_tol=1e-3)


def test_jobs_arriving_and_leaving_keep_the_model_and_its_optimum() -> None:
    """Job slots: a new job takes a departed job's slot; the warm model reaches the same optimum
    as a planner that builds the model from scratch for the same inputs."""
    from optimizer.planner import PlannerPolicy

    cluster, forecasts = random_instance(11)
    warm = PlannerPolicy(config=CONFIG)
    warm.decide(cluster, forecasts, NOW)
    jobs = list(cluster.jobs)
    for step in range(1, 4):
        later = NOW + timedelta(minutes=15 * step)
        # one job leaves, one arrives with the same allowed pools and team but another gang
        gone = jobs.pop(0)
        spec = gone.spec.model_copy(update={"job_id": f"new{step}", "gpus": 1 + step})
        jobs.append(gone.model_copy(update={"spec": spec, "status": JobStatus.QUEUED, "pool": None}))
        now_state = cluster.model_copy(update={"as_of": later, "jobs": jobs})
        shifted = {k: f.model_copy(update={"issued_at": later}) for k, f in forecasts.items()}
        one = warm.decide(now_state, shifted, later)
        two = PlannerPolicy(config=CONFIG).decide(now_state, shifted, later)
        assert not one.allocation.fallback and not two.allocation.fallback
        total_one = sum(one.plan.objective.values()) - 2 * one.plan.objective["work_value"]
        total_two = sum(two.plan.objective.values()) - 2 * two.plan.objective["work_value"]
        assert math.isclose(total_one, total_two, rel_tol=1e-6, abs_tol=1e-6)
    assert warm.session_stats()["updates"] >= 2


def test_pairs_that_cannot_time_slice_have_no_gpu_column_and_use_whole_replicas() -> None:
    """Where one tenant per GPU is allowed, G = gpr * R: the matrix drops G and its packing rows
    there (the objective test above shows it is the same model); the plan reads GPUs as gpr * R."""
    from optimizer.extract import relaxed_shares

    cluster, forecasts = random_instance(5)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    structure = build_structure(inputs)
    pairs = structure.sp_pairs
    shared = inputs.svc_tenants[pairs[:, 0], pairs[:, 1]] > 1
    assert shared.any() and (~shared).any()
    assert structure.cols["G"].shape == (int(shared.sum()), inputs.blocks.count)
    assert structure.rows["pack"].shape[0] == int(shared.sum())
    outcome = HighsSession().solve(structure, fill_parameters(structure, inputs, CONFIG), 30.0)
    assert outcome.ok and outcome.x is not None
    replicas, gpus, _, _ = relaxed_shares(structure, inputs, outcome.x)
    s, p = pairs[~shared, 0], pairs[~shared, 1]
    assert np.allclose(gpus[s, p], replicas[s, p] * inputs.svc_gpr[s][:, None])
    s, p = pairs[shared, 0], pairs[shared, 1]
    # time-sliced pairs: between gpr * R / tenants and gpr * R
    tenants = inputs.svc_tenants[s, p][:, None]
    assert np.all(gpus[s, p] <= replicas[s, p] * inputs.svc_gpr[s][:, None] + 1e-6)
    assert np.all(gpus[s, p] * tenants >= replicas[s, p] * inputs.svc_gpr[s][:, None] - 1e-6)


def test_gpus_added_count_per_pool_in_step_0_and_per_service_later() -> None:
    """Step 0 (committed) counts each pool's GPUs added against the replicas running there now;
    later blocks count what a service adds over all its pools, as jobs' later blocks aggregate
    pools. At the optimum each is exactly the increase, or zero (churn has a cost)."""
    from optimizer.extract import relaxed_shares

    cluster, forecasts = random_instance(5)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    structure = build_structure(inputs)
    pairs = structure.sp_pairs
    assert structure.cols["up0"].shape == (pairs.shape[0],)
    assert structure.cols["up"].shape == (inputs.n_services, inputs.blocks.count - 1)
    assert CONFIG.churn_penalty_gpu > 0
    outcome = HighsSession().solve(structure, fill_parameters(structure, inputs, CONFIG), 30.0)
    assert outcome.ok and outcome.x is not None
    _, gpus, _, _ = relaxed_shares(structure, inputs, outcome.x)
    s, p = pairs[:, 0], pairs[:, 1]
    now = inputs.svc_replicas_now[s, p] * inputs.svc_gpr[s]
    added0 = outcome.x[structure.cols["up0"]]
    assert np.allclose(added0, np.maximum(gpus[s, p, 0] - now, 0.0), atol=1e-6)
    assert added0.max() > 0.5  # the instance scales up in step 0
    per_service = gpus.sum(axis=1)  # [S, B]
    added = outcome.x[structure.cols["up"]]
    assert np.allclose(added, np.maximum(np.diff(per_service, axis=1), 0.0), atol=1e-6)
    assert added.max() > 0.5  # and later
