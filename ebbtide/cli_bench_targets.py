"""``ebbtide bench-targets FILE...``: the planner's targets (bench/targets.py) tallied over the JSON
files of ``ebbtide bench --json``, such as one file per seed or held-out scenario files run apart.

Reads each file's per-run figures (``runs``; a file from before they were written, with one seed
per scenario, is read from its ``scenarios``), checks every run and prints one table with the
counts; exit 2 names a file that is not a bench JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer


def register(app: typer.Typer) -> None:
    app.command("bench-targets")(bench_targets)


def bench_targets(
    files: Annotated[list[Path], typer.Argument(help="JSON files written by `ebbtide bench --json`.")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the verdicts as JSON here.")] = None,
) -> None:
    """Check the planner's targets on every run of the given bench JSON files and count them."""
    from rich.console import Console

    from bench.targets import check_run, render_targets, tally

    runs = []
    for path in files:
        for scenario, seed, figures in _runs_of(path):
            checked = check_run(scenario, seed, figures)
            if checked is not None:
                runs.append(checked)
    if not runs:
        Console(stderr=True).print("no run in these files has ebbtide and a baseline", style="red")
        raise typer.Exit(1)
    out = Console(width=None if Console().is_terminal else 190)
    out.print(render_targets(runs))
    if json_path is not None:
        counts = {name: {"met": met, "of": of} for name, (met, of) in tally(runs).items()}
        json_path.write_text(json.dumps({"runs": [r.to_json() for r in runs], "met": counts}, indent=2))
        out.print(f"JSON: {json_path}")


def _runs_of(path: Path) -> list[tuple[str, int | None, dict[str, Any]]]:
    """(scenario, seed, policy -> headline figures) for each run the file holds."""
    from bench.scenarios_bench import runs_in_json

    try:
        return runs_in_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise typer.BadParameter(f"{path}: not a JSON of `ebbtide bench --json` ({exc})") from None
