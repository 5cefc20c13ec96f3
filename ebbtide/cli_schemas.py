"""``ebbtide schemas generate|check``: the JSON Schema files under schemas/json/."""

from __future__ import annotations

import typer

from schemas import jsonschema

app = typer.Typer(no_args_is_help=True, help="JSON Schema files of the event contracts")


@app.command()
def generate() -> None:
    """Write schemas/json/<Event>.json for every event."""
    written = jsonschema.write_all()
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(f"{len(jsonschema.events())} schemas, {len(written)} changed")


@app.command()
def check() -> None:
    """Fail when a schema file is missing or stale."""
    stale = jsonschema.stale_files()
    for line in stale:
        typer.echo(line, err=True)
    if stale:
        raise typer.Exit(1)
    typer.echo("schemas up to date")
