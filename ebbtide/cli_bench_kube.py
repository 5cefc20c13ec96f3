"""``ebbtide bench-kube-source``: the Kubernetes source at 1,000 Jobs on 200 nodes, on a real API server.

Kept light at import: the Kubernetes client loads inside the command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("bench-kube-source")(bench_kube_source)


_JOBS = typer.Option(1000, "--jobs", min=1, help="Suspended, opted-in Jobs to create.")
_NODES = typer.Option(200, "--nodes", min=1, help="GPU nodes (8 GPUs each) to create.")
_CHANGES = typer.Option(1000, "--changes", min=1, help="Job patches (and half as many node cordons) timed.")
_JSON = typer.Option(None, "--json", help="Write the figures as JSON here.")


def bench_kube_source(
    jobs: int = _JOBS, nodes: int = _NODES, changes: int = _CHANGES, json_path: Path | None = _JSON
) -> None:
    """Initial list, event lag and memory of the Kubernetes source against a private kube-apiserver."""
    from rich.console import Console
    from rich.table import Table

    from bench.kube_source import TARGETS, run_kube_source_bench

    figures = run_kube_source_bench(jobs=jobs, nodes=nodes, changes=changes)
    met = figures.met()
    table = Table(
        title=f"Kubernetes source: {figures.jobs} Jobs on {figures.nodes} nodes (real kube-apiserver)"
    )
    for column in ("figure", "value", "target", "met"):
        table.add_column(column)
    rows = [
        ("objects created (s)", figures.create_s, None, None),
        ("initial list (s)", figures.initial_list_s, TARGETS["initial_list_s"], met["initial_list_s"]),
        ("first snapshot (s)", figures.first_snapshot_s, None, None),
        ("jobs / nodes in the snapshot", f"{figures.snapshot_jobs} / {figures.snapshot_nodes}", None, None),
        ("changes timed", figures.changes, None, None),
        ("event lag p50 (s)", figures.event_lag_p50_s, None, None),
        ("event lag p99 (s)", figures.event_lag_p99_s, TARGETS["event_lag_p99_s"], met["event_lag_p99_s"]),
        ("event lag max (s)", figures.event_lag_max_s, None, None),
        ("RSS after the list (MiB)", figures.rss_mib_after_list, None, None),
        ("RSS peak (MiB)", figures.rss_mib_peak, TARGETS["rss_mib"], met["rss_mib"]),
    ]
    for name, value, target, ok in rows:
        table.add_row(
            name, str(value), "" if target is None else f"<= {target:g}", "" if ok is None else str(ok)
        )
    Console().print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(figures.as_dict(), indent=2))
    if not all(met.values()):
        sys.exit(1)
