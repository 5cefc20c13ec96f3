"""Choosing a broker: an external cluster by configuration, testcontainers, or one started here.

Order for ``auto``: ``EBBTIDE_KAFKA_BOOTSTRAP`` names an external cluster (nothing is started);
else testcontainers' KafkaContainer when a Docker engine answers (detected in well under a
second, never hanging); else the local Apache Kafka from cached jars. Tansu is chosen only by
name (``kind="tansu"``): it is the demo's broker, not the one that proves guarantees.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from streams.broker import READY_TIMEOUT_S, BrokerError, BrokerHandle, answers_metadata

RequestedKind = Literal["auto", "external", "testcontainers", "kafka", "tansu"]
KINDS: tuple[str, ...] = ("auto", "external", "testcontainers", "kafka", "tansu")
BOOTSTRAP_ENV = "EBBTIDE_KAFKA_BOOTSTRAP"
SETTINGS_BOOTSTRAP_ENV = "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS"  # ebbtide/settings.py's name for the same thing
TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.6.0"


def external_bootstrap() -> str | None:
    """``EBBTIDE_KAFKA_BOOTSTRAP``, or the services' setting ``EBBTIDE_KAFKA__BOOTSTRAP_SERVERS`` when set."""
    for variable in (BOOTSTRAP_ENV, SETTINGS_BOOTSTRAP_ENV):
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    return None


def _any_host_accepts(bootstrap: str, timeout_s: float) -> bool:
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def connect_external(bootstrap: str, *, timeout_s: float = 10.0, transactions: bool = True) -> BrokerHandle:
    """A handle on a cluster someone else runs; fails at once, naming the setting, if it does not answer."""
    if not _any_host_accepts(bootstrap, min(timeout_s, 3.0)) or not answers_metadata(
        bootstrap, timeout_s=timeout_s
    ):
        raise BrokerError(f"{BOOTSTRAP_ENV}={bootstrap!r}: no Kafka broker answers a metadata request there")
    return BrokerHandle(bootstrap=bootstrap, kind="external", transactions=transactions, name="external")


def docker_engine_answers(timeout_s: float = 2.0) -> bool:
    """True only when a Docker engine answers a ping. No socket and no DOCKER_HOST: False at once."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker  # comes with the "containers" extra; without it there is no engine to use

        client = docker.from_env(timeout=int(max(timeout_s, 1)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def start_testcontainers(
    *, image: str = TESTCONTAINERS_IMAGE, ready_timeout_s: float = READY_TIMEOUT_S
) -> BrokerHandle:
    """Kafka in a container (KRaft). Only where a Docker engine runs; untested on machines without one.

    Needs the optional extra: ``pip install 'ebbtide[containers]'``."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError as exc:
        raise BrokerError(
            f"testcontainers is not installed ({exc}): pip install 'ebbtide[containers]'"
        ) from exc

    container = KafkaContainer(image=image).with_kraft()
    try:
        container.start(timeout=int(ready_timeout_s))
    except Exception as exc:
        raise BrokerError(f"testcontainers could not start {image}: {exc}") from exc
    return BrokerHandle(
        bootstrap=container.get_bootstrap_server(),
        kind="testcontainers",
        transactions=True,
        name="testcontainers",
        _stopper=container.stop,
    )


def start_broker(
    kind: RequestedKind = "auto",
    *,
    name: str = "default",
    data_dir: Path | None = None,
    port: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> BrokerHandle:
    """Start (or reach) a broker of the requested kind; ``auto`` follows the order in this module's doc."""
    if kind not in KINDS:
        raise BrokerError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind in ("auto", "external"):
        bootstrap = external_bootstrap()
        if bootstrap is not None:
            handle = connect_external(bootstrap)
            handle.name = name
            return handle
        if kind == "external":
            raise BrokerError(f"{BOOTSTRAP_ENV}: not set, so there is no external cluster to use")
        if docker_engine_answers():
            return start_testcontainers(ready_timeout_s=ready_timeout_s)
        kind = "kafka"
    if kind == "testcontainers":
        if not docker_engine_answers():
            raise BrokerError(
                "testcontainers: no Docker engine answers (DOCKER_HOST or /var/run/docker.sock)"
            )
        return start_testcontainers(ready_timeout_s=ready_timeout_s)
    if kind == "tansu":
        from streams.broker_tansu import start_tansu

        return start_tansu(name, data_dir=data_dir, port=port, ready_timeout_s=ready_timeout_s)
    from streams.broker_kafka import start_local_kafka

    return start_local_kafka(name, data_dir=data_dir, port=port, ready_timeout_s=ready_timeout_s)
