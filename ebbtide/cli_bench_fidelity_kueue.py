"""``ebbtide bench-fidelity-kueue``: the simulated kueue-hpa baseline against a real Kueue.

Runs bench/fidelity_kueue.py's workload through the simulator and through the Kueue of the cluster
named by --server/--token/--ca-file (nodes labelled ``ebbtide.io/pool=<--pool>`` with 16
nvidia.com/gpu between them, KWOK's pod-complete stage), prints both timelines (rich) and writes
JSON; exits 1 when Kueue decided otherwise (another number of admissions of a job, i.e. other
preemptions, admissions in another order, or a job not finished). Kept light at import.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("bench-fidelity-kueue")(bench_fidelity_kueue)


def bench_fidelity_kueue(
    server: Annotated[str, typer.Option("--server", help="API server URL, https://host:port.")],
    token: Annotated[
        str, typer.Option("--token", help="Bearer token with rights on Kueue's objects and Jobs.")
    ],
    ca_file: Annotated[
        Path, typer.Option("--ca-file", exists=True, help="CA of the API server's certificate.")
    ],
    namespace: Annotated[
        str, typer.Option("--namespace", help="Existing namespace for the Jobs.")
    ] = "default",
    pool: Annotated[
        str, typer.Option("--pool", help="Value of the nodes' ebbtide.io/pool label.")
    ] = "fidelity",
    step_real_s: Annotated[
        float, typer.Option("--step-real-s", min=0.5, help="Wall seconds per simulated minute (one step).")
    ] = 16.0,
    kueue_version: Annotated[str, typer.Option("--kueue-version", help="Recorded in the JSON.")] = "v0.17.0",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
) -> None:
    """Admission order, start and finish times of one workload: simulated kueue-hpa vs the real Kueue."""
    from rich.console import Console

    from bench.fidelity_kueue import render_table
    from bench.fidelity_kueue_cluster import ApiTarget, run_fidelity

    target = ApiTarget(server=server, token=token, ca_file=ca_file)
    report = run_fidelity(
        target, namespace=namespace, pool=pool, step_real_s=step_real_s, kueue_version=kueue_version
    )
    Console().print(render_table(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report.as_dict(), indent=2))
    summary = report.summary()
    if not summary["same_admission_counts"] or summary["discordant_pairs"] or summary["unfinished_real"]:
        sys.exit(1)  # another decision than the simulated baseline's (latency alone does not fail it)
