"""``ebbtide bench-fidelity-slurm``: the simulated priority-backfill baseline against Slurm's own
scheduler on a running cluster (bench/fidelity_slurmsched.py); a table, and JSON on request.

Kept light at import: the simulator and the Slurm client load inside the command.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("bench-fidelity-slurm")(bench_fidelity_slurm)


def bench_fidelity_slurm(
    slurm_conf: Annotated[
        Path | None,
        typer.Option("--slurm-conf", help="slurm.conf of the cluster (default: $SLURM_CONF)."),
    ] = None,
    partition: Annotated[str, typer.Option("--partition", help="Partition of 2 nodes x 8 GPUs.")] = "gpu",
    clock_speedup: Annotated[
        float,
        typer.Option(
            "--clock-speedup", min=1.0, help="How much faster than the wall slurmctld's clock runs."
        ),
    ] = 1.0,
    scale_s: Annotated[
        float | None,
        typer.Option("--scale-s", min=0.5, help="Real seconds a simulated minute (default: 60 / speedup)."),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the comparison as JSON here.")
    ] = None,
) -> None:
    """Run one workload through the priority-backfill baseline and through Slurm; compare start order
    and start times. Exits 1 when the order differs or a start is a step or more apart."""
    from rich.console import Console

    from bench.fidelity_slurmsched import render_table, run_fidelity

    console = Console(stderr=True)
    conf = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
    if conf is None or not conf.is_file():
        console.print(f"setting --slurm-conf: no slurm.conf at {conf} (nor $SLURM_CONF)", style="red")
        raise typer.Exit(2)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        report = run_fidelity(env, partition=partition, clock_speedup=clock_speedup, scale_s=scale_s)
    except ValueError as exc:
        console.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from None
    Console(width=150).print(render_table(report))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report.to_json(), indent=2))
    if report.order_disagreements() or report.max_start_diff_steps >= 1.0:
        raise typer.Exit(1)
