"""Work run alongside the solve (optimizer/alongside.py): same value as inline, errors reach the
caller, and a plan whose steps were made ahead is the plan made in place."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from optimizer_cases import NOW, three_pool_cluster

from optimizer.alongside import Alongside
from optimizer.config import PlannerConfig
from optimizer.fallback import greedy_plan
from optimizer.inputs import build_inputs
from optimizer.plan_build import PartCache, build_horizon_plan, step_shells
from schemas import SolverInfo


def test_started_work_runs_on_the_worker_and_gives_its_value() -> None:
    ran_on: list[str] = []

    def work() -> int:
        ran_on.append(threading.current_thread().name)
        return 42

    job = Alongside(work)
    job.start()
    job.start()  # a second start changes nothing
    assert job.result() == 42
    assert ran_on and ran_on[0].startswith("ebbtide-alongside")
    assert len(ran_on) == 1


def test_work_never_started_runs_inline() -> None:
    ran_on: list[str] = []
    job = Alongside(lambda: ran_on.append(threading.current_thread().name) or "done")
    assert job.result() == "done"
    assert ran_on == [threading.current_thread().name]


def test_an_error_in_the_work_reaches_the_caller() -> None:
    def broken() -> None:
        raise ValueError("bad input")

    job = Alongside(broken)
    job.start()
    with pytest.raises(ValueError, match="bad input"):
        job.result()


def test_steps_made_ahead_give_the_plan_made_in_place_and_must_match_it() -> None:
    config = PlannerConfig(
        horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
    )
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, config)
    rounded = greedy_plan(inputs, config, None)
    solver = SolverInfo(solver="greedy", status="ok", time_ms=0.0)

    def plan(shells):  # type: ignore[no-untyped-def]
        return build_horizon_plan(
            inputs,
            rounded,
            plan_id="p",
            policy="t",
            digest="d",
            solver=solver,
            objective={},
            cache=PartCache(),
            shells=shells,
        )

    in_place = plan(None)
    ahead = plan(step_shells(NOW, config.step_s, config.horizon_steps))
    assert ahead.model_dump_json() == in_place.model_dump_json()
    assert any(step.jobs for step in ahead.steps)
    with pytest.raises(ValueError, match="another plan"):
        plan(step_shells(NOW + timedelta(minutes=15), config.step_s, config.horizon_steps))
    with pytest.raises(ValueError, match="another plan"):
        plan(step_shells(NOW, config.step_s, config.horizon_steps - 1))
