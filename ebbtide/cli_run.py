"""``ebbtide run``, ``demo``, ``bench-stream``, ``bench-soak`` and ``bench-scale``: the loop's commands.

Kept light: heavy imports happen inside the commands. The services live in streams/ (the only
layer that imports Kafka clients).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer

SERVICES = ("collector", "state", "forecaster", "optimizer", "actuator", "demand-source", "source")

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="YAML settings file (environment EBBTIDE_* overrides it)")
]


@contextlib.contextmanager
def _bad_settings_exit() -> Iterator[None]:
    """A bad setting ends the command with its message (naming the setting) and exit code 2."""
    from ebbtide.settings import SettingsError

    try:
        yield
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def run(
    service: Annotated[str, typer.Argument(help=f"one of: {', '.join(SERVICES)}")],
    config: ConfigOption = None,
) -> None:
    """Run one stream service until SIGTERM or Ctrl-C."""
    from ebbtide.settings import load_settings

    if service not in SERVICES:
        typer.echo(f"error: service {service!r} is not one of {', '.join(SERVICES)}", err=True)
        raise typer.Exit(2)
    with _bad_settings_exit():
        settings = load_settings(config)
    from ebbtide.services import run_service

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with _bad_settings_exit():
        code = run_service(service, settings, stop)
    raise typer.Exit(code)


def demo(
    steps: Annotated[
        int, typer.Option("--steps", min=1, max=2000, help="simulated steps (15 min each); default a day")
    ] = 96,
    config: ConfigOption = None,
    out: Annotated[Path, typer.Option("--out", help="folder for the PNGs")] = Path("out/demo"),
    bootstrap: Annotated[
        str | None,
        typer.Option("--bootstrap", help="use this Kafka (left running) instead of an embedded Tansu broker"),
    ] = None,
) -> None:
    """The whole loop on this machine: a broker, simulated cluster, all services, vs fifo."""
    from ebbtide.demo import main

    with _bad_settings_exit():
        code = main(steps, config, out, bootstrap)
    raise typer.Exit(code)


def bench_stream(
    events: Annotated[
        int, typer.Option("--events", min=1000, help="GpuSamples for the ingest run")
    ] = 200_000,
    runs: Annotated[int, typer.Option("--runs", min=1, help="repetitions (medians are reported)")] = 3,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the results here")] = None,
) -> None:
    """Stream benchmarks: telemetry ingest rate and event-to-Allocation latency on a local broker."""
    from bench.stream_bench import main
    from ebbtide.bench_wiring import bench_runtime

    sys.exit(main(bench_runtime, events=events, runs=runs, json_path=json_path))


def bench_soak(
    days: Annotated[int, typer.Option("--days", min=1, max=60, help="simulated days (96 steps each)")] = 7,
    jobs: Annotated[int, typer.Option("--jobs", min=16, help="jobs kept in the simulated cluster")] = 2000,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the results here")] = None,
) -> None:
    """Soak: days of a simulated cluster through the services on a local broker; RSS each day."""
    from bench.soak import main
    from ebbtide.soak_wiring import soak_services

    sys.exit(main(soak_services, days=days, jobs=jobs, json_path=json_path))


def bench_scale(
    jobs: Annotated[
        list[int] | None, typer.Option("--jobs", min=16, help="jobs in the system (repeatable)")
    ] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, max=96, help="steps (15 min) per size")] = 3,
    broker: Annotated[str, typer.Option("--broker", help="kafka (local Apache Kafka) or tansu")] = "kafka",
    json_path: Annotated[Path | None, typer.Option("--json", help="write the results here")] = None,
) -> None:
    """The whole loop at 2,000 and 10,000 jobs through a local broker; each topic's largest record."""
    from bench.scale_loop import main
    from ebbtide.soak_wiring import soak_services

    if broker not in ("kafka", "tansu"):
        raise typer.BadParameter(f"{broker!r}: kafka or tansu", param_hint="--broker")
    kind: Literal["kafka", "tansu"] = "kafka" if broker == "kafka" else "tansu"
    sizes = jobs or [2000, 10_000]
    sys.exit(main(soak_services, jobs=sizes, steps=steps, broker_kind=kind, json_path=json_path))


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("demo")(demo)
    app.command("bench-stream")(bench_stream)
    app.command("bench-soak")(bench_soak)
    app.command("bench-scale")(bench_scale)
