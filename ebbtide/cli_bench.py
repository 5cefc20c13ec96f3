"""``ebbtide bench``: every policy on every scenario in one run; table, JSON and PNG.

Kept light at import: the simulator, policies and matplotlib load inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def bench(
    quick: Annotated[bool, typer.Option("--quick", help="Shorter window, same shape.")] = False,
    scenario: Annotated[
        list[str] | None,
        typer.Option("--scenario", help="Scenario name, built-in or extra (repeatable); default: built-ins."),
    ] = None,
    extra: Annotated[
        bool, typer.Option("--extra", help="Add the extra scenarios (scenarios/extra/); alone: only those.")
    ] = False,
    scenario_file: Annotated[
        list[Path] | None, typer.Option("--scenario-file", help="Scenario YAML file (repeatable).")
    ] = None,
    policy: Annotated[list[str] | None, typer.Option("--policy", help="Policy name (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Override every scenario's seed.")] = None,
    history_days: Annotated[
        float | None,
        typer.Option(
            "--history-days",
            min=7.0,
            help="Override every scenario's demand history before the window (default 8 days; the state "
            "service keeps 21). A trace replay's window then falls that much later in its trace.",
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs per cell; latency medians.")] = 1,
    seeds: Annotated[
        int, typer.Option("--seeds", min=1, help="Seeds per scenario (from --seed or its own): min, median.")
    ] = 1,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the PNG goes.")] = Path("bench-out"),
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
) -> None:
    """Run the benchmark: policies x scenarios, same seeds, and the LP bound; print a table against fifo."""
    from rich.console import Console

    from bench.plot_bench import write_png
    from bench.scenarios_bench import render_table, run_bench
    from bench.targets import render_targets
    from simulator.registry import available_policies
    from simulator.scenario import ScenarioError, load_scenario

    console = Console(stderr=True)
    policy = policy or []
    paths = chosen_scenario_files(scenario or [], list(scenario_file or []), extra)
    try:
        scenarios = [load_scenario(p) for p in paths]
    except ScenarioError as exc:
        console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if history_days is not None:
        scenarios = [s.model_copy(update={"history_days": history_days}) for s in scenarios]
    names = [s.name for s in scenarios]
    if len(names) != len(set(names)):
        raise typer.BadParameter(f"two scenarios share a name: {names}", param_hint="--scenario-file")
    registry = available_policies()
    missing = [p for p in policy if p not in registry]
    if missing:
        raise typer.BadParameter(
            f"unknown policy {', '.join(missing)}; available: {', '.join(registry)}", param_hint="--policy"
        )
    chosen = {p: registry[p] for p in (policy or registry)}
    result = run_bench(
        scenarios, chosen, quick=quick, seed=seed, repeat=repeat, n_seeds=seeds, console=console
    )
    out = Console(width=None if Console().is_terminal else 190)
    out.print(render_table(result))
    targets = result.targets()
    if targets:
        out.print(render_targets(targets))
    png = write_png(result, out_dir)
    out.print(
        f"{len(scenarios)} scenarios x {len(chosen)} policies in {result.wall_s:.1f} s; "
        f"peak memory {result.peak_rss_mib:.0f} MiB (max RSS); plot: {png}"
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        figures = {**result.to_json(), "history_days": history_days}  # None: each scenario's own
        json_path.write_text(json.dumps(figures, indent=2, sort_keys=False))
        out.print(f"JSON: {json_path}")
    if result.failures:
        for scenario_name, errors in result.failures.items():
            for policy_name, error in errors.items():
                console.print(f"FAILED {scenario_name} / {policy_name}: {error}", style="red", markup=False)
        raise typer.Exit(1)


def chosen_scenario_files(names: list[str], files: list[Path], extra: bool) -> list[Path]:
    """Named scenarios (built-in or extra), then files, then the extra set with ``--extra``.

    With none of these the built-in set runs; ``--extra`` alone runs only the extra set.
    """
    from simulator.scenario import ScenarioError, builtin_scenarios, extra_scenarios, scenario_paths

    try:
        paths = scenario_paths(names) + files
    except ScenarioError as exc:
        raise typer.BadParameter(str(exc), param_hint="--scenario") from None
    if extra:
        paths += [p for p in extra_scenarios().values() if p not in paths]
    return paths or list(builtin_scenarios().values())
