"""``ebbtide bench`` end to end on a tiny scenario file: JSON shape, PNG, bad-file message."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from ebbtide import cli_bench

TINY = """
name: tiny-bench
window_hours: 3
quick_window_hours: 2
pools: [{name: p, gpu_type: A100, nodes: 2, gpus_per_node: 4}]
services:
  - spec: {service: svc}
    demand: {kind: diurnal, peak_gpus: 4}
workload:
  generators:
    - arrivals_per_hour: 3
      initial_backlog: 4
      gangs: {1: 1, 4: 1}
      hours_median: 1
      classes: [{name: s, weight: 1, share: 1}]
"""

KEYS = {
    "utilization",
    "pwt",
    "slo_shortfall",
    "preemptions",
    "lost_gpu_hours",
    "deadline_misses",
    "weighted_completions",
    "jct_p95_hours",
    "decision_ms_p50",
    "decision_ms_p99",
    "pwt_to_bound",
    "pwt_in_flight",
}


def app() -> typer.Typer:
    application = typer.Typer()
    cli_bench.register(application)
    application.command("noop")(lambda: None)  # keep a multi-command app so 'bench' is a subcommand
    return application


def test_bench_writes_json_and_png(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        app(),
        [
            "bench",
            "--quick",
            "--scenario-file",
            str(scenario),
            "--policy",
            "fifo",
            "--policy",
            "reactive",
            "--json",
            str(out),
            "--out-dir",
            str(tmp_path / "png"),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    cells = data["scenarios"]["tiny-bench"]
    assert set(cells) == {"fifo", "reactive", "bound"}
    bound = cells.pop("bound")
    assert {"pwt", "utilization", "pwt_any"} <= set(bound)
    assert data["versions"]["highspy"] and data["seeds"] == {"tiny-bench": [0]}
    assert "git_commit" in data
    for figures in cells.values():
        assert set(figures) == KEYS
        assert 0.0 <= figures["pwt_to_bound"] <= 1.0 + 1e-9 and figures["pwt"] <= bound["pwt_any"] + 1e-9
        assert 0.0 <= figures["utilization"] <= 1.0 and 0.0 <= figures["slo_shortfall"] <= 1.0
        assert isinstance(figures["lost_gpu_hours"], float) and figures["lost_gpu_hours"] >= 0.0
    for details in data["details"]["tiny-bench"].values():  # the parts the PNG's lost-work panel stacks
        parts = details["restart_gpu_hours"] + details["failure_lost_gpu_hours"]
        assert 0.0 <= parts <= details["lost_gpu_hours"] + 1e-9
    assert (tmp_path / "png" / "bench_quick.png").stat().st_size > 0
    assert "peak memory" in result.output


def test_history_days_sets_the_history_every_policy_sees(tmp_path: Path) -> None:
    """``--history-days`` overrides each scenario's history: a policy's first state carries that many
    days of demand steps, and the JSON says which history the figures come from."""
    from simulator.forecast_sources import NoForecastSource
    from simulator.policies.fifo import FifoPolicy
    from simulator.registry import _EXTRA, register_policy

    seen: list[int] = []

    class Recording(FifoPolicy):
        def decide(self, state, forecasts, now):  # type: ignore[no-untyped-def]
            seen.append(len(state.services[0].demand_history))
            return super().decide(state, forecasts, now)

    register_policy("recording", lambda sim: (Recording(name="recording"), NoForecastSource()))
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "out.json"
    try:
        for days, json_path in ((None, None), (21, out)):
            seen.clear()
            args = ["bench", "--quick", "--scenario-file", str(scenario), "--policy", "recording"]
            args += ["--out-dir", str(tmp_path / "png")]
            args += [] if days is None else ["--history-days", str(days), "--json", str(json_path)]
            result = CliRunner().invoke(app(), args)
            assert result.exit_code == 0, result.output
            assert seen[0] == (8 if days is None else days) * 96  # 15-minute steps; the scenario default: 8
    finally:
        _EXTRA.pop("recording", None)
    assert json.loads(out.read_text())["history_days"] == 21
    result = CliRunner().invoke(app(), ["bench", "--scenario-file", str(scenario), "--history-days", "3"])
    assert result.exit_code != 0 and "history-days" in result.output


def test_bench_rejects_a_bad_file_naming_file_and_field(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(TINY.replace("nodes: 2", "nodes: -1"))
    result = CliRunner().invoke(app(), ["bench", "--scenario-file", str(scenario), "--policy", "fifo"])
    assert result.exit_code == 2
    assert "bad.yaml" in result.output and "pools.0.nodes" in result.output


def test_bench_rejects_unknown_names() -> None:
    result = CliRunner().invoke(app(), ["bench", "--scenario", "nope"])
    assert result.exit_code != 0 and "nope" in result.output
    result = CliRunner().invoke(app(), ["bench", "--scenario", "steady", "--policy", "nope"])
    assert result.exit_code != 0 and "nope" in result.output


def test_a_failing_policy_is_reported_without_hiding_the_others(tmp_path: Path) -> None:
    from bench.scenarios_bench import run_bench
    from simulator.registry import baseline_factories
    from simulator.scenario import load_scenario

    scenario_path = tmp_path / "tiny.yaml"
    scenario_path.write_text(TINY)

    def broken(sim):  # type: ignore[no-untyped-def]
        raise RuntimeError("solver exploded")

    result = run_bench(
        [load_scenario(scenario_path)], {"fifo": baseline_factories()["fifo"], "broken": broken}, quick=True
    )
    assert set(result.results["tiny-bench"]) == {"fifo"}
    assert "solver exploded" in result.failures["tiny-bench"]["broken"]
    assert result.to_json()["failures"] == result.failures


def test_bench_seeds_report_median_and_min(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "out.json"
    args = ["bench", "--quick", "--scenario-file", str(scenario), "--policy", "fifo", "--seed", "5"]
    args += ["--seeds", "3", "--json", str(out), "--out-dir", str(tmp_path)]
    result = CliRunner().invoke(app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["seeds"] == {"tiny-bench": [5, 6, 7]}
    fifo = data["scenarios"]["tiny-bench"]["fifo"]
    assert set(fifo["min"]) == KEYS and fifo["min"]["pwt"] <= fifo["pwt"]
    bound = data["scenarios"]["tiny-bench"]["bound"]
    assert bound["min"]["pwt"] <= bound["pwt"]
    assert "medians of 3 seeds" in result.output
