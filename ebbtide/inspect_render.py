"""Rich tables for ``ebbtide explain``, ``plan`` and ``status`` (the data: ebbtide/inspect_views.py)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def render_explain(console: Console, data: dict[str, Any]) -> None:
    where = f" on {data['pool']} ({data['gpus']} GPUs)" if data["pool"] else ""
    console.print(f"[bold]{data['job_id']}[/] in {data['cluster']}: [cyan]{data['action']}[/]{where}")
    cause = f" ({data['cause']})" if data.get("cause") else ""
    console.print(f"  why{cause}: {data['reason']}", markup=False, highlight=False)
    if data["status"] is not None:
        console.print(
            f"  status {data['status']}, gang {data['gang_gpus']} GPUs, submitted {data['submitted_at']}",
            highlight=False,
        )
    start = data["planned_start"]
    if start is None:
        console.print("  planned start: the plan of this decision was not found on the plans topic")
    elif start["start"] is None:
        console.print("  planned start: not within the plan's 24-hour horizon")
    else:
        console.print(f"  planned start: {start['start']} (step {start['step']}) in pool {start['pool']}")
    fallback = " (a fallback decision)" if data["fallback"] else ""
    console.print(f"  decided at {data['as_of']} by plan {data['plan_id']}{fallback}", highlight=False)
    table = Table(title="last changes of its decision")
    for column in ("at", "action", "pool", "reason"):
        table.add_column(column, overflow="fold")
    for change in data["changes"]:
        table.add_row(change["at"], change["action"], change["pool"] or "-", change["reason"])
    console.print(table)


def render_plan(console: Console, data: dict[str, Any]) -> None:
    fallback = " [red](fallback)[/]" if data["fallback"] else ""
    console.print(f"[bold]plan {data['plan_id']}[/] issued {data['issued_at']}{fallback}")
    services = Table(title=f"step {data['step']} at {data['start']}: inference capacity")
    for column in ("service", "pool", "replicas", "GPUs"):
        services.add_column(column, justify="left" if column in ("service", "pool") else "right")
    for row in data["services"]:
        services.add_row(row["service"], row["pool"], str(row["replicas"]), f"{row['gpus']:.1f}")
    console.print(services)
    jobs = Table(title=f"step {data['step']}: batch jobs planned ({len(data['jobs'])})")
    for column in ("job", "pool", "GPUs"):
        jobs.add_column(column, justify="right" if column == "GPUs" else "left")
    for row in data["jobs"]:
        jobs.add_row(row["job_id"], row["pool"], str(row["gpus"]))
    console.print(jobs)
    hours = Table(title="the horizon, hour by hour")
    for column in ("start", "service GPUs", "batch GPUs", "jobs"):
        hours.add_column(column, justify="left" if column == "start" else "right")
    for row in data["hours"]:
        hours.add_row(row["start"], f"{row['service_gpus']:.1f}", str(row["batch_gpus"]), str(row["jobs"]))
    console.print(hours)


def render_status(console: Console, data: dict[str, Any]) -> None:
    last = data["last_step"]
    if last is None:
        console.print(f"[bold]{data['cluster']}[/]: [red]no Allocation yet[/]")
    else:
        fallback = f" [red]fallback: {last['fallback_reason']}[/]" if last["fallback"] else ""
        console.print(
            f"[bold]{data['cluster']}[/]: last step {last['issued_at']} ({last['age_s']:.0f} s ago), "
            f"plan {last['plan_id']} by {last['policy']}{fallback}",
            highlight=False,
        )
    fb = data["fallbacks"]
    console.print(
        f"fallbacks: {fb['in_last_steps']} of the last {fb['steps']} steps, {fb['in_a_row']} in a row"
    )
    lag = Table(title="consumer lag")
    for column in ("service", "group", "topic", "lag"):
        lag.add_column(column, justify="right" if column == "lag" else "left")
    for row in data["lag"]:
        lag.add_row(row["service"], row["group"], row["topic"], str(row["lag"]))
    console.print(lag)
    letters = Table(title="dead letters by reason")
    for column in ("source topic", "reason", "count", "last"):
        letters.add_column(column, justify="right" if column == "count" else "left", overflow="fold")
    for row in data["dead_letters"]:
        letters.add_row(row["source_topic"], row["reason"], str(row["count"]), row["last_at"])
    console.print(letters)
