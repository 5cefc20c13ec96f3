"""The extra scenarios (simulator/scenarios/extra/): each loads, runs a few loop steps under a
baseline and the planner, and has the feature its kind is about; the level-shift ramp, team
quotas in the snapshot and the ``--extra`` selection of ``ebbtide bench``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import typer
from sim_helpers import tiny_scenario

from ebbtide.cli_bench import chosen_scenario_files
from loop import ControlLoop
from simulator.cluster import Simulator
from simulator.demand import demand_curve, level_factor
from simulator.registry import available_policies
from simulator.scenario import (
    DemandSpec,
    Scenario,
    ScenarioError,
    StepChangeSpec,
    builtin_scenarios,
    extra_scenarios,
    load_scenario,
    parse_scenario,
)

EXTRA = {
    "weekend-multiday",
    "level-shift",
    "timeslice-mixed",
    "team-quotas",
    "mass-arrivals",
    "gang-failures",
    "mixed-site",
}


def extra(name: str) -> Scenario:
    return load_scenario(extra_scenarios()[name])


def test_extra_scenarios_load_apart_from_the_builtins() -> None:
    files = extra_scenarios()
    assert set(files) == EXTRA
    assert not set(files) & set(builtin_scenarios())
    for name, path in files.items():
        scenario = load_scenario(path)
        assert scenario.name == name
        assert scenario.history_days >= 7
        assert scenario.quick_window_hours < scenario.window_hours


@pytest.mark.parametrize("name", sorted(EXTRA))
@pytest.mark.parametrize("policy", ["kueue-hpa", "ebbtide-naive"])
def test_extra_scenario_runs_three_loop_steps(name: str, policy: str) -> None:
    sim = Simulator(extra(name), quick=True)
    chosen, forecasts = available_policies()[policy](sim)
    loop = ControlLoop(
        clock=sim.clock, state_source=sim, forecast_source=forecasts, policy=chosen, actuator=sim
    )
    for _ in range(3):
        loop.step()
        sim.advance()
    assert sim.now_s == 3 * sim.step_s
    running = [j for j in sim.jobs.values() if j.started_at_s is not None] + list(sim.finished.values())
    assert running, f"{name}/{policy}: no job started in three steps"
    assert sim.ledger.served_gpu_s > 0


def test_weekend_window_spans_a_weekend_and_four_days() -> None:
    scenario = extra("weekend-multiday")
    days = {(scenario.start.weekday() + d) % 7 for d in range(int(scenario.window_hours // 24))}
    assert {5, 6} <= days and scenario.window_hours >= 96
    sim = Simulator(scenario)
    hour = 3600 // sim.step_s
    assistant = sim.step_curves["assistant"][sim.history_steps :]
    friday, saturday = assistant[: 24 * hour].mean(), assistant[24 * hour : 48 * hour].mean()
    assert saturday < 0.5 * friday


def test_level_shifts_are_not_in_the_history() -> None:
    scenario = extra("level-shift")
    changes = [c for s in scenario.services for c in s.demand.step_changes]
    assert len(changes) >= 2 and all(c.at_hour > 0 for c in changes)
    assert {c.factor > 1 for c in changes} == {True, False}


def test_timeslice_pool_is_shared_by_critical_and_tolerant_services() -> None:
    scenario = extra("timeslice-mixed")
    shared = {p.name for p in scenario.pools if p.max_share > 1}
    tenants = [s.spec for s in scenario.services if set(s.spec.allowed_pools) & shared]
    assert any(t.latency_critical and t.max_cotenants == 1 for t in tenants)
    assert any(not t.latency_critical and t.max_cotenants > 1 for t in tenants)


def test_team_quotas_reach_the_policies_and_loads_differ_from_them() -> None:
    scenario = extra("team-quotas")
    assert len(scenario.quotas_gpus) >= 6
    sim = Simulator(scenario)
    state = sim.snapshot(sim.clock.now())
    assert state.quotas_gpus == scenario.quotas_gpus
    offered: dict[str, float] = {}
    for job in sim.arrivals:
        offered[job.spec.team] = offered.get(job.spec.team, 0.0) + job.true_gpu_s / sim.window_s
    over = [t for t, q in scenario.quotas_gpus.items() if offered[t] > 1.5 * q]
    under = [t for t, q in scenario.quotas_gpus.items() if offered[t] < 0.5 * q]
    assert over and under


def test_mass_arrivals_bring_over_a_hundred_jobs_within_half_an_hour() -> None:
    sim = Simulator(extra("mass-arrivals"))
    arrivals = np.sort([j.arrival_s for j in sim.arrivals])
    most_in_half_hour = max(
        np.searchsorted(arrivals, t + 1800, side="left") - i for i, t in enumerate(arrivals)
    )
    assert most_in_half_hour > 100


@pytest.mark.parametrize("seed", [None, 11])
def test_nodes_fail_under_gangs_in_the_window(seed: int | None) -> None:
    sim = Simulator(extra("gang-failures"), seed=seed)
    failures = [
        o for p in sim.pools.values() for o in p.outages if not o.planned and o.start_s < sim.window_s
    ]
    assert failures
    assert max(j.spec.gpus for j in sim.arrivals) > sim.pools["h100"].gpus_per_node


def test_level_factor_ramps_linearly_and_steps_without_a_ramp() -> None:
    times = np.array([0.0, 3600.0, 5400.0, 7200.0, 9000.0])
    ramp = StepChangeSpec(at_hour=1, factor=3.0, ramp_hours=1)
    np.testing.assert_allclose(level_factor(ramp, times), [1.0, 1.0, 2.0, 3.0, 3.0])
    step = StepChangeSpec(at_hour=1, factor=3.0)
    np.testing.assert_allclose(level_factor(step, times), [1.0, 3.0, 3.0, 3.0, 3.0])


def test_a_ramped_shift_scales_the_curve() -> None:
    spec = DemandSpec(
        kind="flat",
        peak_gpus=10,
        noise_frac=0,
        step_changes=[StepChangeSpec(at_hour=1, factor=0.5, ramp_hours=2)],
    )
    start = datetime(2026, 1, 5, tzinfo=UTC)
    curve = demand_curve(
        spec, start=start, first_s=0, last_s=4 * 3600, tick_s=1800, rng=np.random.default_rng(0)
    )
    np.testing.assert_allclose(curve, [10, 10, 10, 8.75, 7.5, 6.25, 5, 5])


def test_a_quota_for_a_team_without_jobs_is_refused(tmp_path: Path) -> None:
    data = tiny_scenario().model_dump(mode="json") | {"quotas_gpus": {"ghost": 4}}
    with pytest.raises(ScenarioError, match=r"quotas_gpus\.ghost"):
        parse_scenario(data, tmp_path / "q.yaml")


def test_bench_selection_finds_extra_names_and_runs_them_only_with_extra() -> None:
    builtin, extras = builtin_scenarios(), extra_scenarios()
    assert chosen_scenario_files([], [], extra=False) == list(builtin.values())
    assert chosen_scenario_files([], [], extra=True) == list(extras.values())
    assert chosen_scenario_files(["level-shift"], [], extra=False) == [extras["level-shift"]]
    both = chosen_scenario_files(["steady", "level-shift"], [], extra=True)
    assert both[:2] == [builtin["steady"], extras["level-shift"]] and len(both) == 1 + len(extras)
    with pytest.raises(typer.BadParameter, match=r"extra: .*team-quotas"):
        chosen_scenario_files(["no-such"], [], extra=False)
