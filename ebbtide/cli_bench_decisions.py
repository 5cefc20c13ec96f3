"""``ebbtide bench-decisions``: the planner's decision-latency and memory benchmark.

Kept light at import: the planner, numpy and matplotlib load inside the command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

TARGETS = {
    "seed": {"decision_ms_p50": 5.0, "decision_ms_p99": 10.0},
    "mid": {"decision_ms_p99": 50.0},
    "large": {"decision_ms_p99": 1000.0},
    "xlarge": {"decision_ms_p99": 3000.0},
}
MEMORY_LIMIT_MIB = {"large": 1024.0, "xlarge": 2048.0}


def register(app: typer.Typer) -> None:
    app.command("bench-decisions")(bench_decisions)


_CASE = typer.Option([], "--case", help="seed, mid, medium, large or xlarge (repeatable); default all.")
_DECISIONS = typer.Option(None, "--decisions", min=3, help="Decisions per case (default per case).")
_REPEAT = typer.Option(3, "--repeat", min=1, help="Runs per case; figures are medians over the runs.")
_JSON = typer.Option(None, "--json", help="Write the figures as JSON here.")
_OUT_DIR = typer.Option(None, "--out-dir", help="Write a PNG of the latencies here.")


def bench_decisions(
    case: list[str] = _CASE,
    decisions: int | None = _DECISIONS,
    repeat: int = _REPEAT,
    json_path: Path | None = _JSON,
    out_dir: Path | None = _OUT_DIR,
) -> None:
    """Time the planner decision by decision from seed scale to 10,000 jobs / 50,000 GPUs."""
    from dataclasses import replace

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table

    from bench.decisions import CASES, max_rss_mib, run_repeated
    from optimizer.config import PlannerConfig

    unknown = [c for c in case if c not in CASES]
    if unknown:
        raise typer.BadParameter(
            f"unknown case {', '.join(unknown)}; known: {', '.join(CASES)}", param_hint="--case"
        )
    chosen = [CASES[c] for c in (case or list(CASES))]
    if decisions is not None:
        chosen = [replace(c, decisions=decisions) for c in chosen]
    config = PlannerConfig()
    results = {}
    with Progress(console=Console(stderr=True), transient=True) as progress:
        for c in chosen:
            task = progress.add_task(f"{c.name}: {c.jobs} jobs, {c.gpus} GPUs", total=c.decisions * repeat)

            def advance(_step: int, task_id: TaskID = task) -> None:
                progress.advance(task_id)

            results[c.name] = run_repeated(c, config, repeat, on_step=advance)
    table = Table(
        title="ebbtide bench-decisions: wall time per decision (update + solve + extraction), "
        f"median of {repeat} run(s) per case"
    )
    for column in (
        "case",
        "jobs",
        "GPUs",
        "steps",
        "n",
        "p50 ms",
        "p99 ms",
        "p50 per run",
        "HiGHS p50 ms",
        "ratio",
        "rebuilt/updated",
        "fallbacks",
        "peak MiB",
        "target",
    ):
        table.add_column(column, justify="right")
    payload = {}
    for name, res in results.items():
        row = res.to_json()
        payload[name] = row
        verdicts = [
            f"{key.split('_')[-1]}<={limit:g} {'ok' if row[key] <= limit else 'MISS'}"
            for key, limit in TARGETS.get(name, {}).items()
        ]
        if name in MEMORY_LIMIT_MIB:
            ok = row["peak_memory_mib"] <= MEMORY_LIMIT_MIB[name]
            verdicts.append(f"mem<={MEMORY_LIMIT_MIB[name]:g} {'ok' if ok else 'MISS'}")
        table.add_row(
            name,
            str(row["jobs"]),
            str(row["gpus"]),
            str(row["steps"]),
            str(row["decisions"]),
            f"{row['decision_ms_p50']:.2f}",
            f"{row['decision_ms_p99']:.2f}",
            " ".join(f"{v:.2f}" for v in row["decision_ms_p50_runs"]),
            f"{row['solver_ms_p50']:.2f}",
            f"{row['decision_to_solver_ratio_p50']:.1f}x",
            f"{row['model_rebuilds']}/{row['model_updates']}",
            str(row["fallbacks"]),
            f"{row['peak_memory_mib']:.0f}",
            "; ".join(verdicts) or "-",
        )
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    console.print(
        f"process max RSS {max_rss_mib():.0f} MiB; peak MiB: tracemalloc of one decision with a fresh model"
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"cases": payload, "max_rss_mib": max_rss_mib()}, indent=2))
        console.print(f"JSON: {json_path}")
    if out_dir is not None:
        from bench.decisions import write_png

        console.print(f"plot: {write_png(results, out_dir)}")
