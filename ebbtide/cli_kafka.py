"""``ebbtide kafka acls|topics``: setting up a production Kafka cluster for the loop, as its admin.

``acls`` prints (or, with ``--apply``, creates) the ACLs each client's principal needs and no
more, from the one map in streams/access.py; ``topics`` creates the catalogue's topics with the
settings' replication (``kafka.replication_factor``, ``kafka.min_insync_replicas``). Both connect
with the settings' security (``--config``, ``EBBTIDE_KAFKA__*``): run them with the admin
principal's credentials, and the services with ``kafka.create_topics: false`` and their own.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ebbtide.cli_run import _bad_settings_exit

app = typer.Typer(
    no_args_is_help=True, help="ACLs and topics of a production Kafka cluster (run as its admin)"
)

_CONFIG = typer.Option(None, "--config", help="YAML settings (the environment overrides it)")
_PRINCIPAL = typer.Option(
    [], "--principal", help="SERVICE=User:NAME (repeat); default User:ebbtide-<service> for each"
)


def _settings(config: Path | None):  # type: ignore[no-untyped-def]
    from ebbtide.settings import load_settings

    with _bad_settings_exit():
        return load_settings(config)


@app.command()
def acls(
    config: Path | None = _CONFIG,
    principal: list[str] = _PRINCIPAL,
    command_config: str = typer.Option(
        "admin.properties",
        "--command-config",
        help="the admin's client properties file, in the printed lines",
    ),
    apply: bool = typer.Option(False, "--apply", help="create them on the cluster instead of printing"),
) -> None:
    """The ACLs of every client of the loop under the settings' topic and group prefixes."""
    from streams.access import acl_grants, apply_acls, default_principals

    settings = _settings(config)
    principals = default_principals()
    for item in principal:
        service, sep, who = item.partition("=")
        if not sep or not who.startswith("User:"):
            raise typer.BadParameter(f"{item!r} is not SERVICE=User:NAME", param_hint="--principal")
        principals[service] = who
    kafka = settings.kafka
    try:
        grants = acl_grants(principals, topic_prefix=kafka.topic_prefix, group_prefix=kafka.group_prefix)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--principal") from None
    if not apply:
        for grant in grants:
            typer.echo(grant.command(kafka.bootstrap_servers, command_config))
        return
    typer.echo(f"{apply_acls(kafka, grants)} ACLs created at {kafka}")


@app.command()
def topics(config: Path | None = _CONFIG) -> None:
    """Create (or align) the catalogue's topics with the settings' replication and min ISR."""
    from schemas.topics import CATALOGUE
    from streams.topics_admin import TopicSetupError, ensure_topics, prefixed

    settings = _settings(config)
    kafka = settings.kafka
    try:
        wanted = [prefixed(t, kafka.topic_prefix) for t in CATALOGUE]
        outcomes = ensure_topics(kafka, wanted, durability=kafka.durability())
    except TopicSetupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    durability = kafka.durability()
    for name, outcome in outcomes.items():
        typer.echo(
            f"{name}: {outcome} (replicas {durability.replication_factor}, "
            f"min.insync.replicas {durability.min_insync_replicas})"
        )
