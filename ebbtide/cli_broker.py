"""``ebbtide broker up|status|down|topics``: a broker for the loop, started and stopped across processes.

``up`` starts one (default: the local Apache Kafka; ``--kind tansu`` for the quick memory-only
demo broker; ``--kind auto`` for external, then testcontainers, then local Kafka) and prints its
bootstrap address; the broker keeps running after the command returns. Heavy imports stay
inside the commands so ``ebbtide --help`` stays fast.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="start, inspect and stop the Kafka broker the loop uses")

_NAME = typer.Option("default", "--name", help="which broker (state is kept per name)")
_DATA_DIR = typer.Option(None, "--data-dir", help="log directory (default under ~/.cache/ebbtide)")


@app.command()
def up(
    kind: str = typer.Option("kafka", "--kind", help="kafka | tansu | auto | external | testcontainers"),
    name: str = _NAME,
    data_dir: Path | None = _DATA_DIR,
    port: int | None = typer.Option(
        None, "--port", help="client port (default: a free one, reused on restart)"
    ),
    topics: bool = typer.Option(True, "--topics/--no-topics", help="create the catalogue's topics"),
    ready_timeout_s: float = typer.Option(120.0, "--ready-timeout-s"),
) -> None:
    """Start a broker (if this name is not already running) and print its bootstrap address."""
    from streams.broker import BrokerError
    from streams.broker_providers import KINDS, start_broker
    from streams.broker_state import clear_state, describe, save_state

    if kind not in KINDS:
        raise typer.BadParameter(f"{kind!r} is not one of {', '.join(KINDS)}", param_hint="--kind")
    current = describe(name)
    if current["recorded"] and current["answers"]:
        typer.echo(current["bootstrap"])
        typer.echo(f"broker {name!r} ({current['kind']}) is already up", err=True)
        return
    if current["recorded"]:
        clear_state(name)
    started = time.monotonic()
    try:
        handle = start_broker(kind, name=name, data_dir=data_dir, port=port, ready_timeout_s=ready_timeout_s)  # type: ignore[arg-type]
        if topics:
            from streams.topics_admin import ensure_topics

            ensure_topics(handle.bootstrap, tolerate_config_errors=handle.kind == "tansu")
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if handle.kind == "testcontainers":
        typer.echo("note: a testcontainers broker stops when this command exits (Ryuk reaps it)", err=True)
    else:
        save_state(handle)
    typer.echo(handle.bootstrap)
    typer.echo(
        f"broker {name!r}: {handle.kind}, transactions {'real' if handle.transactions else 'NOT real'}, "
        f"ready in {time.monotonic() - started:.1f} s"
        + (f", data {handle.data_dir}" if handle.data_dir else ""),
        err=True,
    )


@app.command()
def status(name: str = _NAME, as_json: bool = typer.Option(False, "--json")) -> None:
    """Whether the recorded broker runs and answers a metadata request (exit 1 if not)."""
    from streams.broker_state import describe

    info = describe(name)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    elif not info["recorded"]:
        typer.echo(f"broker {name!r}: not started (no state recorded)")
    else:
        verdict = (
            "answers" if info["answers"] else ("runs but does not answer" if info["running"] else "is down")
        )
        typer.echo(
            f"broker {name!r} ({info['kind']}) at {info['bootstrap']} {verdict}; pid {info['pid']}, "
            f"data {info['data_dir']}"
        )
    if not info["answers"]:
        raise typer.Exit(1)


@app.command()
def down(name: str = _NAME) -> None:
    """Stop the recorded broker and forget it (its log directory stays)."""
    from streams.broker import BrokerError
    from streams.broker_state import stop_recorded

    try:
        state = stop_recorded(name)
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if state is None:
        typer.echo(f"broker {name!r}: nothing recorded, nothing to stop")
    else:
        typer.echo(f"broker {name!r} ({state.kind}) at {state.bootstrap} stopped")


@app.command()
def topics(
    name: str = _NAME,
    bootstrap: str | None = typer.Option(None, "--bootstrap", help="default: the recorded broker's address"),
) -> None:
    """Create (or align) the catalogue's topics and show what happened to each."""
    from streams.broker_state import load_state
    from streams.topics_admin import ensure_topics

    state = load_state(name)
    address = bootstrap or (state.bootstrap if state else None)
    if address is None:
        typer.echo(
            f"error: no --bootstrap and no broker {name!r} recorded (run `ebbtide broker up`)", err=True
        )
        raise typer.Exit(1)
    outcomes = ensure_topics(address, tolerate_config_errors=bool(state and state.kind == "tansu"))
    for topic_name, outcome in outcomes.items():
        typer.echo(f"{topic_name}: {outcome}")
