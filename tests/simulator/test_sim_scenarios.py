"""Scenario files: the built-ins load and run, bad files name the file and the field."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from simulator.registry import available_policies, baseline_factories
from simulator.runner import run_scenario
from simulator.scenario import ScenarioError, builtin_scenarios, load_scenario

EXPECTED = {
    "steady",
    "diurnal",
    "bursty",
    "priority-inversion",
    "gang-fragmentation",
    "heterogeneous",
    "overload-deadlines",
    "replay",
}


def test_builtin_scenarios_load_with_a_week_of_history() -> None:
    files = builtin_scenarios()
    assert set(files) == EXPECTED
    for name, path in files.items():
        scenario = load_scenario(path)
        assert scenario.name == name
        assert scenario.history_days >= 7
        assert scenario.quick_window_hours < scenario.window_hours


def test_replay_scenario_uses_the_real_traces() -> None:
    from simulator.cluster import Simulator

    sim = Simulator(load_scenario(builtin_scenarios()["replay"]), quick=True)
    assert any(j.spec.job_id.startswith("openb-pod-") for j in sim.arrivals)
    assert max(sim.curves["diffusion"]) > 0


def test_a_quick_builtin_runs_every_baseline() -> None:
    scenario = load_scenario(builtin_scenarios()["priority-inversion"])
    results = {n: run_scenario(scenario, n, f, quick=True)[0] for n, f in baseline_factories().items()}
    assert all(0.0 < r.utilization <= 1.0 for r in results.values())
    assert all(r.steps == 96 for r in results.values())


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: x\npools: [{name: p, gpu_type: A, nodes: 0}]\n", "pools.0.nodes"),
        ("name: x\npools: []\n", "pools"),
        (
            "name: x\npools: [{name: p, gpu_type: A, nodes: 1}]\nmaintenance: [{pool: q, start_hour: 1, "
            "duration_hours: 1, nodes_out: 1}]\n",
            "maintenance[0].pool",
        ),
        (
            "name: x\npools: [{name: p, gpu_type: A, nodes: 1}]\nservices: [{spec: {service: s}, "
            "demand: {kind: sine, peak_gpus: 1}}]\n",
            "services.0.demand.kind",
        ),
        (
            "name: x\npools: [{name: p, gpu_type: A, nodes: 1}]\nwindow_hours: 2\nquick_window_hours: 2\n"
            "colour: blue\n",
            "colour",
        ),
        ("- just\n- a list\n", "(top level)"),
    ],
)
def test_bad_scenario_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_unreadable_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"broken\.yaml"):
        load_scenario(path)


def test_registry_has_baselines_and_the_planner_when_present() -> None:
    names = list(available_policies())
    assert names[:4] == ["fifo", "priority-backfill", "reactive", "kueue-hpa"]
    has_planner = importlib.util.find_spec("optimizer.planner") is not None
    assert ("ebbtide" in names and "ebbtide-true-demand" in names) == has_planner


def test_builtin_windows_are_what_the_readme_says() -> None:
    """The benchmark of record is 48-hour windows; ``--quick`` 24 hours (README, "Where it stands")."""
    for name, path in builtin_scenarios().items():
        scenario = load_scenario(path)
        assert (scenario.window_s(False), scenario.window_s(True)) == (48 * 3600.0, 24 * 3600.0), name
