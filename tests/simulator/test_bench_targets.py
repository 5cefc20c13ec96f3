"""The planner's targets per run (bench/targets.py): each verdict from hand-made figures, then
``ebbtide bench`` writing them and ``ebbtide bench-targets`` tallying them from its JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from test_sim_bench_cli import TINY
from typer.testing import CliRunner

from bench.targets import check_run, tally
from ebbtide import cli_bench, cli_bench_targets


def figures(**changes: Any) -> dict[str, Any]:
    base = {
        "pwt": 100.0,
        "weighted_completions": 10.0,
        "lost_gpu_hours": 4.0,
        "slo_shortfall": 0.001,
        "preemptions": 3,
        "pwt_to_bound": 0.95,
    }
    return {**base, **changes}


def run_of(**policies: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name.replace("_", "-"): f for name, f in policies.items()}


def test_each_target_is_met_at_a_tie_and_missed_just_past_it() -> None:
    tied = run_of(
        fifo=figures(pwt=90.0, lost_gpu_hours=0.0),
        kueue_hpa=figures(),  # the best baseline: allowance 1.5 x 4 + 2 = 8
        ebbtide=figures(lost_gpu_hours=8.0, pwt_to_bound=0.9),
        ebbtide_naive=figures(),
    )
    verdict = check_run("s", 1, tied)
    assert verdict is not None and verdict.best == "kueue-hpa" and verdict.allowance_gpu_h == 8.0
    assert verdict.met == dict.fromkeys(
        ("PWT", "wtd done", "lost", "SLO", "PWT vs naive", "SLO vs naive", "bound"), True
    )
    worse = {
        "PWT": figures(pwt=99.9, lost_gpu_hours=8.0, pwt_to_bound=0.9),
        "lost": figures(lost_gpu_hours=8.01, pwt_to_bound=0.9),
        "SLO": figures(slo_shortfall=0.0011, lost_gpu_hours=8.0, pwt_to_bound=0.9),
        "bound": figures(lost_gpu_hours=8.0, pwt_to_bound=0.899),
    }
    for target, planner in worse.items():
        missed = check_run("s", 1, {**tied, "ebbtide": planner})
        assert missed is not None
        assert [name for name, met in missed.met.items() if not met] == [target] + (
            ["PWT vs naive"] if target == "PWT" else ["SLO vs naive"] if target == "SLO" else []
        )


def test_weighted_completions_must_reach_every_baseline_not_only_the_best() -> None:
    run = run_of(
        fifo=figures(pwt=50.0, weighted_completions=12.0), reactive=figures(), ebbtide=figures(pwt=101.0)
    )
    verdict = check_run("s", None, run)
    assert verdict is not None and verdict.best == "reactive"
    assert verdict.met["PWT"] and not verdict.met["wtd done"]


def test_a_target_whose_policies_did_not_run_is_not_checked() -> None:
    verdict = check_run("s", 1, run_of(reactive=figures(), ebbtide=figures(pwt_to_bound=None)))
    assert verdict is not None and set(verdict.met) == {"PWT", "wtd done", "lost"}
    assert check_run("s", 1, run_of(reactive=figures())) is None  # no ebbtide
    assert check_run("s", 1, run_of(ebbtide=figures(), ebbtide_naive=figures())) is None  # no baseline
    counts = tally([verdict])
    assert counts == {"PWT": (1, 1), "wtd done": (1, 1), "lost": (1, 1)}


def app() -> typer.Typer:
    application = typer.Typer()
    cli_bench.register(application)
    cli_bench_targets.register(application)
    return application


def test_bench_writes_the_verdicts_and_bench_targets_tallies_them(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "out.json"
    args = ["bench", "--quick", "--scenario-file", str(scenario), "--seed", "3", "--seeds", "2"]
    for policy in ("fifo", "kueue-hpa", "ebbtide", "ebbtide-naive"):
        args += ["--policy", policy]
    result = CliRunner().invoke(app(), [*args, "--json", str(out), "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ebbtide against the targets" in result.output
    data = json.loads(out.read_text())
    written = data["targets"]
    assert [(t["scenario"], t["seed"]) for t in written] == [("tiny-bench", 3), ("tiny-bench", 4)]
    for verdict, run in zip(written, data["runs"]["tiny-bench"], strict=True):
        by_policy = run["policies"]
        best = max(("fifo", "kueue-hpa"), key=lambda p: by_policy[p]["pwt"])
        assert verdict["best_baseline"] == best
        assert verdict["met"]["PWT"] == (by_policy["ebbtide"]["pwt"] >= by_policy[best]["pwt"])
        assert verdict["met"]["SLO vs naive"] == (
            by_policy["ebbtide"]["slo_shortfall"] <= by_policy["ebbtide-naive"]["slo_shortfall"]
        )

    # a file of an earlier commit (no per-run figures, one seed) reads from its scenarios
    older = tmp_path / "older.json"
    single = {
        "seeds": {"tiny-bench": [4]},
        "scenarios": {"tiny-bench": data["runs"]["tiny-bench"][1]["policies"]},
    }
    older.write_text(json.dumps(single))
    tallied = tmp_path / "tally.json"
    result = CliRunner().invoke(app(), ["bench-targets", str(out), str(older), "--json", str(tallied)])
    assert result.exit_code == 0, result.output
    counts = json.loads(tallied.read_text())["met"]
    for target, count in counts.items():
        in_file = [t["met"][target] for t in written if target in t["met"]]
        assert count["of"] == 3 and count["met"] == sum(in_file) + int(in_file[1])


def test_bench_targets_names_a_file_that_is_not_a_bench_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    result = CliRunner().invoke(app(), ["bench-targets", str(bad)])
    assert result.exit_code == 2 and "bad.json" in result.output
