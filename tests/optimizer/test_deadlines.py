"""Deadlines as constraints (optimizer/formulation.py's ``deadline`` rows, optimizer/parameters.py's
``deadline_requirement``): a deadline that can still be met is met wherever capacity allows, ahead
of heavier work without one; one that cannot be met is priced, never infeasible, and takes no GPUs
from others for it. Scenario rows (tests/scenario_table.py), then the model itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_cases import NOW, job, pool, state
from scenario_table import Job, Pool, Scenario, hold, preempt, run, run_scenario

from optimizer.config import PlannerConfig
from optimizer.deadlines import margin_steps, planned_deadline_step
from optimizer.formulation import build_structure
from optimizer.inputs import build_inputs
from optimizer.parameters import deadline_requirement, fill_parameters
from optimizer.planner import PlannerPolicy
from optimizer.slot_updates import update_slots
from optimizer.solve_highs import HighsSession

SCENARIOS = [
    Scenario(
        # 8 GPUs: 2 h of work on 8 GPUs due in 2 h, and 10 h of weight-3 work without a deadline.
        # A bonus alone (work before a deadline worth 25% more, the model before these rows) ran
        # the heavier job first.
        "deadline-job-that-must-start-now-runs-ahead-of-heavier-work",
        pools=(Pool("a", 8),),
        jobs=(
            Job("due", 8, weight=1.0, hours=2.0, deadline_min=120),
            Job("heavy", 8, weight=3.0, hours=10.0),
        ),
        want_jobs={"due": run("a", "deadline 14:00"), "heavy": hold("planned to start at 14:00")},
    ),
    Scenario(
        # 4 h of work due in 2 h cannot be met: the heavier job keeps the GPUs, the late one waits
        "deadline-out-of-reach-takes-no-gpus-from-heavier-work",
        pools=(Pool("a", 8),),
        jobs=(
            Job("late", 8, weight=1.0, hours=4.0, deadline_min=120),
            Job("heavy", 8, weight=3.0, hours=10.0),
        ),
        want_jobs={"heavy": run("a"), "late": hold("planned to start at")},
    ),
    Scenario(
        # two deadlines due at the same time on a pool that holds one gang: one is met, the other
        # priced; the plan is the solver's, not a fallback
        "two-deadlines-for-one-gang-one-is-met",
        pools=(Pool("a", 8),),
        jobs=(
            Job("first", 8, weight=2.0, hours=2.0, deadline_min=120),
            Job("second", 8, weight=1.0, hours=2.0, deadline_min=120),
        ),
        want_jobs={"first": run("a"), "second": hold()},
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda r: r.id)
def test_deadline_scenarios(row: Scenario) -> None:
    run_scenario(row)


def test_deadline_that_cannot_be_met_for_lack_of_gpus_is_priced_not_infeasible() -> None:
    """Two gangs due in 2 h, each able to make it alone, on GPUs for one: the LP leaves the other's
    work late at the deadline price, reports that term, and is optimal (no fallback)."""
    cluster = state(
        [pool("a", 8)],
        [job("one", 8, hours=2.0, deadline_hours=2.0), job("two", 8, hours=2.0, deadline_hours=2.0)],
    )
    decision = PlannerPolicy().decide(cluster, {}, NOW)
    assert not decision.allocation.fallback and not decision.plan.solver.fallback
    assert decision.plan.solver.status == "Optimal"
    late = decision.plan.objective["deadline_shortfall"]
    config = PlannerConfig()
    price = config.deadline_penalty * (1 + config.earliness)
    # one gang's 16 GPU-hours are left past the deadline, at the price per GPU-hour
    assert math.isclose(late, 16.0 * price, rel_tol=1e-6)
    running = [d.job_id for d in decision.allocation.jobs if d.action == "run"]
    assert len(running) == 1


def test_only_deadlines_in_reach_ask_for_work() -> None:
    """The requirement is the remaining work where the gang can still do it by the deadline, and
    nothing where it cannot, where the deadline is past, beyond the horizon, or absent."""
    cluster = state(
        [pool("a", 8)],
        [
            job("in-reach", 4, hours=2.0, deadline_hours=3.0),
            job("just", 4, hours=2.0, deadline_hours=2.0),
            job("too-much", 4, hours=3.0, deadline_hours=2.0),
            job("past", 4, hours=1.0, deadline_hours=-1.0),
            job("far", 4, hours=1.0, deadline_hours=30.0),
            job("none", 4, hours=1.0),
        ],
    )
    config = PlannerConfig()
    inputs = build_inputs(cluster, {}, NOW, config)
    need = dict(zip(inputs.job_ids, deadline_requirement(inputs).tolist(), strict=True))
    assert need == {"in-reach": 8.0, "just": 8.0, "too-much": 0.0, "past": 0.0, "far": 0.0, "none": 0.0}


def test_deadline_rows_follow_the_clock_in_place() -> None:
    """A step later the deadline is one step nearer: the rows' coefficients are updated in place,
    and the warm model reaches the optimum of a model built afresh for that step."""
    from datetime import timedelta

    config = PlannerConfig()
    jobs = [job("due", 8, hours=3.0, deadline_hours=5.0), job("heavy", 8, weight=3.0, hours=10.0)]
    inputs = build_inputs(state([pool("a", 8)], jobs), {}, NOW, config)
    margin = margin_steps(config.deadline_margin_s, config.step_s)
    structure = build_structure(inputs, deadline_margin=margin)
    session = HighsSession()
    first = session.solve(structure, fill_parameters(structure, inputs, config), 30.0)
    later = NOW + timedelta(minutes=75)  # the deadline moves inside a 4-step block
    inputs2 = build_inputs(state([pool("a", 8)], jobs).model_copy(update={"as_of": later}), {}, later, config)
    changes = update_slots(structure, inputs2)
    assert changes.at.size > 0
    warm = session.solve(structure, fill_parameters(structure, inputs2, config), 30.0, changes)
    fresh_structure = build_structure(inputs2, deadline_margin=margin)
    assert np.allclose(fresh_structure.matrix.data, structure.matrix.data)
    fresh = HighsSession().solve(fresh_structure, fill_parameters(fresh_structure, inputs2, config), 30.0)
    assert first.ok and warm.ok and warm.warm and fresh.ok
    assert math.isclose(warm.objective, fresh.objective, rel_tol=1e-7, abs_tol=1e-6)


def test_deadline_rows_plan_a_margin_before_the_deadline_where_there_is_room() -> None:
    """2 h of work due in 4 h is planned to finish the margin (30 min) early; due in 2 h 15 min,
    as soon as it can (2 h); out of reach, at its deadline (the row asks for nothing)."""
    config = PlannerConfig()
    jobs = [
        job("room", 4, hours=2.0, deadline_hours=4.0),
        job("tight", 4, hours=2.0, deadline_hours=2.25),
        job("late", 4, hours=3.0, deadline_hours=2.0),
    ]
    inputs = build_inputs(state([pool("a", 8)], jobs), {}, NOW, config)
    margin = margin_steps(config.deadline_margin_s, config.step_s)
    assert margin == 2
    assert planned_deadline_step(inputs, margin).tolist() == [14, 8, 8]


def test_a_stop_pays_for_a_deadline_that_waiting_would_miss() -> None:
    """A weight-3 job (checkpointing, past its minimum run) fills the pool; a weight-1 job due in
    2 h needs the 2 h from now: waiting for the GPUs would push its work past the deadline, whose
    price is above the weight-3 job's loss, so the stop pays. Without the deadline it does not."""
    heavy = Job("heavy", 8, weight=3.0, hours=10.0, running_in="a", checkpoint_interval_s=1800.0)
    due = Scenario(
        "stop-for-a-deadline",
        pools=(Pool("a", 8),),
        jobs=(heavy, Job("due", 8, weight=1.0, hours=2.0, deadline_min=120)),
        want_jobs={
            "heavy": preempt("go to job due (8 GPUs, weight 1), starting now to meet its deadline 14:00"),
            "due": run("a"),
        },
    )
    run_scenario(due)
    no_deadline = Scenario(
        "no-stop-without-the-deadline",
        pools=(Pool("a", 8),),
        jobs=(heavy, Job("due", 8, weight=1.0, hours=2.0)),
        want_jobs={"heavy": run("a"), "due": hold()},
    )
    run_scenario(no_deadline)


def test_a_stop_for_heavier_work_names_it_even_beside_a_start_with_a_deadline() -> None:
    """A weight-2 job's 8 GPUs go to a weight-5 job and to a weight-1 job due in 2 h: the heavier
    start is reason enough, and the reason names it, not the deadline."""
    mid = Job("mid", 8, weight=2.0, hours=10.0, running_in="a", checkpoint_interval_s=1800.0)
    both = Scenario(
        "stop-for-heavier-work-and-a-deadline",
        pools=(Pool("a", 8),),
        jobs=(
            mid,
            Job("heavy", 4, weight=5.0, hours=2.0),
            Job("due", 4, weight=1.0, hours=2.0, deadline_min=120),
        ),
        want_jobs={
            "mid": preempt("go to job heavy (4 GPUs, weight 5) and 1 more, starting now (its own weight 2)"),
            "heavy": run("a"),
            "due": run("a"),
        },
    )
    run_scenario(both)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4, 8]),
            st.floats(0.25, 6.0),
            st.one_of(st.none(), st.floats(-1.0, 30.0)),
            st.sampled_from([1.0, 3.0]),
            st.booleans(),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_any_mix_of_deadlines_is_planned_by_the_solver(
    specs: list[tuple[int, float, float | None, float, bool]],
) -> None:
    """Deadlines past, in reach, out of reach, beyond the horizon, on a pool too small for all of
    them: the LP is never infeasible (the plan is the solver's, not a fallback), every invariant
    holds, and the next step (deadlines a step nearer, coefficients updated in place) too."""
    from datetime import timedelta

    from plan_checks import check_plan

    used, jobs = 0, []
    for i, (gang, hours, due, weight, running) in enumerate(specs):
        runs = running and used + gang <= 16  # running jobs only while they fit the pool
        used += gang if runs else 0
        where = "a" if runs else None
        jobs.append(job(f"j{i}", gang, weight=weight, hours=hours, deadline_hours=due, running_in=where))
    cluster = state([pool("a", 16)], jobs)
    policy = PlannerPolicy()
    for step in range(2):
        now = NOW + timedelta(minutes=15 * step)
        decision = policy.decide(cluster.model_copy(update={"as_of": now}), {}, now)
        assert not decision.allocation.fallback, decision.allocation.fallback_reason
        assert decision.plan.solver.status == "Optimal"
        check_plan(cluster.model_copy(update={"as_of": now}), decision, 96, 900)
