"""Broker providers and ``ebbtide broker up|status|down`` across separate processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.broker import BrokerError, free_port
from streams.broker_providers import (
    BOOTSTRAP_ENV,
    SETTINGS_BOOTSTRAP_ENV,
    docker_engine_answers,
    start_broker,
)

EBBTIDE = str(Path(sys.executable).with_name("ebbtide"))


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EBBTIDE, "broker", *args], env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.kafka
def test_up_status_down_across_processes(tmp_path) -> None:
    env = {**os.environ, "EBBTIDE_CACHE_DIR": str(tmp_path)}
    env.pop(BOOTSTRAP_ENV, None)
    env.pop(SETTINGS_BOOTSTRAP_ENV, None)
    up = _cli("up", "--kind", "tansu", "--name", "cli", env=env)
    assert up.returncode == 0, up.stderr
    bootstrap = up.stdout.strip()
    assert bootstrap.startswith("127.0.0.1:")
    try:
        status = _cli("status", "--name", "cli", "--json", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        info = json.loads(status.stdout)
        assert info["answers"] and info["bootstrap"] == bootstrap and info["kind"] == "tansu"
        again = _cli("up", "--kind", "tansu", "--name", "cli", env=env)
        assert again.stdout.strip() == bootstrap and "already up" in again.stderr
    finally:
        down = _cli("down", "--name", "cli", env=env)
    assert down.returncode == 0 and "stopped" in down.stdout
    after = _cli("status", "--name", "cli", env=env)
    assert after.returncode == 1 and "not started" in after.stdout
    assert not (tmp_path / "brokers" / "cli.json").exists()


def test_no_docker_engine_is_detected_quickly(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert docker_engine_answers(timeout_s=1.0) is False
    assert time.monotonic() - started < 5.0


def test_external_kind_names_the_setting(monkeypatch) -> None:
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    monkeypatch.delenv(SETTINGS_BOOTSTRAP_ENV, raising=False)
    with pytest.raises(BrokerError, match=BOOTSTRAP_ENV):
        start_broker("external")
    monkeypatch.setenv(BOOTSTRAP_ENV, f"127.0.0.1:{free_port()}")
    with pytest.raises(BrokerError, match=f"{BOOTSTRAP_ENV}=.*no Kafka broker answers"):
        start_broker("auto")
    with pytest.raises(BrokerError, match="kind: 'zookeeper'"):
        start_broker("zookeeper")  # type: ignore[arg-type]


@pytest.mark.kafka
def test_broker_that_dies_at_start_fails_with_its_log(tmp_path) -> None:
    from streams.broker_kafka import start_local_kafka

    log_dir = tmp_path / "doomed" / "log"
    log_dir.mkdir(parents=True)
    # a log directory "formatted" for another node: formatting is skipped and the broker refuses it
    (log_dir / "meta.properties").write_text("version=1\nnode.id=99\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    with pytest.raises(BrokerError, match=r"(?s)exited with status \d+ before it was ready.*last lines of"):
        start_local_kafka("doomed", data_dir=tmp_path / "doomed", ready_timeout_s=60)


@pytest.mark.kafka
def test_jvm_that_cannot_start_fails_clearly(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EBBTIDE_KAFKA_HEAP", "-Xmx1k")  # the JVM refuses this heap before Kafka runs
    from streams.broker_kafka import start_local_kafka

    with pytest.raises(BrokerError, match=r"(?s)formatting the Kafka log directory .* failed.*heap"):
        start_local_kafka("tiny", data_dir=tmp_path / "tiny", ready_timeout_s=30)
