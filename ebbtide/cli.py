"""The ``ebbtide`` command line. Each area registers its commands from its own small module.

Kept thin: it parses arguments and calls into the parts; the parts never import it.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="ebbtide: forecast-driven GPU allocator")

# (module, attribute): each is a typer.Typer sub-app or a function registered as a command.
_SUB_APPS = {
    "schemas": "ebbtide.cli_schemas",
    "broker": "ebbtide.cli_broker",
    "forecast": "ebbtide.cli_forecast",
    "job": "ebbtide.cli_job",
    "kafka": "ebbtide.cli_kafka",
}
_COMMAND_MODULES = (
    "ebbtide.cli_bench",
    "ebbtide.cli_bench_targets",
    "ebbtide.cli_run",
    "ebbtide.cli_bench_decisions",
    "ebbtide.cli_bench_kube",
    "ebbtide.cli_bench_fidelity_kueue",
    "ebbtide.cli_bench_fidelity_slurm",
    "ebbtide.cli_inspect",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ebbtide {version('ebbtide')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """ebbtide: forecast-driven GPU allocator."""


def _register() -> None:
    for name, module_name in _SUB_APPS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        app.add_typer(module.app, name=name)
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(app)


def main() -> None:
    _register()
    app(prog_name="ebbtide")


if __name__ == "__main__":
    main()
