"""``ebbtide bench-decisions`` end to end on a few seed-scale decisions: the JSON the issue asks for,
figures as medians over repeated runs, each run's figures kept, and a bad case name refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
from typer.testing import CliRunner

from ebbtide import cli_bench_decisions


def _app() -> typer.Typer:
    app = typer.Typer()
    cli_bench_decisions.register(app)
    app.command("noop")(lambda: None)  # a second command keeps typer from flattening the app
    return app


def _run_case(tmp_path: Path, case: str, decisions: int, repeat: int) -> tuple[str, dict]:
    """``bench-decisions --case <case>``: its printed table and its JSON figures for the case."""
    out = tmp_path / "d.json"
    args = ["bench-decisions", "--case", case, "--decisions", str(decisions), "--repeat", str(repeat)]
    result = CliRunner().invoke(_app(), [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())["cases"][case]


def test_repeated_runs_report_medians_and_every_run(tmp_path: Path) -> None:
    _, seed = _run_case(tmp_path, "seed", decisions=4, repeat=3)
    assert (seed["jobs"], seed["gpus"], seed["steps"]) == (50, 256, 96)
    assert seed["runs"] == 3 and seed["decisions"] == 12
    assert len(seed["decision_ms_p50_runs"]) == 3 and len(seed["decision_ms_p99_runs"]) == 3
    assert seed["decision_ms_p50"] == float(np.median(seed["decision_ms_p50_runs"]))
    assert seed["decision_ms_p99"] == float(np.median(seed["decision_ms_p99_runs"]))
    assert 0 < seed["solver_ms_p50"] <= seed["decision_ms_p50"]
    assert seed["model_rebuilds"] + seed["model_updates"] == 12
    assert seed["peak_memory_mib"] > 0


def test_unknown_case_is_refused_by_name() -> None:
    result = CliRunner().invoke(_app(), ["bench-decisions", "--case", "huge"])
    assert result.exit_code != 0
    assert "huge" in result.output


def test_mid_case_is_200_jobs_on_1000_gpus_with_its_target(tmp_path: Path) -> None:
    """Issue 22's case: 200 jobs on 1,000 GPUs, p99 judged against 50 ms."""
    output, mid = _run_case(tmp_path, "mid", decisions=3, repeat=1)
    assert (mid["jobs"], mid["gpus"], mid["decisions"]) == (200, 1000, 3)
    assert cli_bench_decisions.TARGETS["mid"] == {"decision_ms_p99": 50.0}
    assert "p99<=50" in output
