"""``ebbtide explain``, ``ebbtide plan`` and ``ebbtide status``: the loop's records, for a person.

They read the topics the services write (Allocations, HorizonPlans, ClusterStates, dead letters)
and consumer-group offsets, print rich tables, or JSON with ``--json`` for scripts. Read-only:
they join no service's consumer group and commit nothing. The views are pure
(ebbtide/inspect_views.py); the reading is streams/inspect.py's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Annotated, Any

import typer

from ebbtide.cli_run import ConfigOption, _bad_settings_exit

ClusterOption = Annotated[
    str | None, typer.Option("--cluster", help="cluster (default: the settings' cluster)")
]
BootstrapOption = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap servers (default: the settings')")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]


def _where(config: Path | None, bootstrap: str | None, cluster: str | None) -> tuple[Any, Any, str]:
    """(settings, the Kafka connection: the settings' with ``--bootstrap``'s servers, cluster)."""
    from ebbtide.settings import load_settings

    with _bad_settings_exit():
        settings = load_settings(config)
    kafka = settings.kafka
    if bootstrap is not None:
        kafka = kafka.model_copy(update={"bootstrap_servers": bootstrap})
    return settings, kafka, cluster or settings.cluster


def _read(bootstrap: Any, prefix: str, *topics: Any) -> list[list[Any]]:
    from streams.inspect import TopicReadError, read_records

    try:
        return [read_records(bootstrap, topic, prefix) for topic in topics]
    except TopicReadError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from None


def _emit(data: dict[str, Any], as_json: bool, render: Any) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        from rich.console import Console

        render(Console(), data)


def _not_found(exc: LookupError) -> typer.Exit:
    typer.echo(f"error: {exc.args[0]}", err=True)
    return typer.Exit(1)


def explain(
    job: Annotated[str, typer.Argument(help="job id")],
    cluster: ClusterOption = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why a job runs, waits or was stopped, its planned start, and its last changes."""
    from ebbtide.inspect_render import render_explain
    from ebbtide.inspect_views import NotFound, explain_job
    from schemas.topics import ALLOCATIONS, CLUSTER_STATE, PLANS

    settings, servers, name = _where(config, bootstrap, cluster)
    allocations, plans, states = _read(
        servers, settings.kafka.topic_prefix, ALLOCATIONS, PLANS, CLUSTER_STATE
    )
    try:
        data = explain_job(job, allocations, plans, states, name)
    except NotFound as exc:
        raise _not_found(exc) from None
    _emit(data, as_json, render_explain)


def _parse_at(at: str | None) -> time | None:
    if at is None:
        return None
    try:
        return time.fromisoformat(at)
    except ValueError:
        raise typer.BadParameter(f"--at {at!r}: expected HH:MM (UTC)") from None


def plan(
    cluster: ClusterOption = None,
    at: Annotated[str | None, typer.Option("--at", help="time of day HH:MM (UTC) within the horizon")] = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The latest HorizonPlan: capacity per service and pool and the jobs planned at a step."""
    from ebbtide.inspect_render import render_plan
    from ebbtide.inspect_views import NotFound, latest_for, plan_view
    from schemas.topics import PLANS

    wanted = _parse_at(at)
    settings, servers, name = _where(config, bootstrap, cluster)
    (plans,) = _read(servers, settings.kafka.topic_prefix, PLANS)
    latest = latest_for(plans, name)
    if latest is None:
        raise _not_found(LookupError(f"cluster {name}: no HorizonPlan on the plans topic yet"))
    try:
        data = plan_view(latest, wanted)
    except NotFound as exc:
        raise _not_found(exc) from None
    _emit(data, as_json, render_plan)


def status(
    cluster: ClusterOption = None,
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The last committed step, recent fallbacks, consumer lag and dead letters by reason."""
    from ebbtide.inspect_render import render_status
    from ebbtide.inspect_views import status_view
    from schemas.topics import ALLOCATIONS, DEAD_LETTERS

    settings, servers, name = _where(config, bootstrap, cluster)
    prefix = settings.kafka.topic_prefix
    allocations, dead_letters = _read(servers, prefix, ALLOCATIONS, DEAD_LETTERS)
    lag = _lag(settings.model_copy(update={"cluster": name}), servers)
    _emit(status_view(allocations, dead_letters, lag, name, datetime.now(UTC)), as_json, render_status)


def _lag(settings: Any, servers: Any) -> list[dict[str, Any]]:
    from ebbtide.wiring import group_id_for, service_inputs
    from streams.inspect import TopicReadError, group_lag

    rows = []
    try:
        for service, topics in service_inputs().items():
            names = [settings.kafka.topic_prefix + t.name for t in topics]
            for row in group_lag(servers, group_id_for(service, settings), names):
                rows.append(
                    {"service": service, "group": row.group_id, "topic": row.topic, "lag": row.lag_messages}
                )
    except TopicReadError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from None
    return rows


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
    app.command("plan")(plan)
    app.command("status")(status)
