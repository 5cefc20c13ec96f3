"""The local stack (deploy/compose.yaml), its Prometheus and Grafana provisioning, and the Dockerfile
agree with each other and with the code: every service runs `ebbtide run <service>` against the
compose Kafka, Prometheus scrapes each one on the port it serves, and the image exposes that port.
No Docker engine runs here, so these are structural checks; promtool checks the scrape config
(test_prometheus_rules.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ebbtide.settings import load_settings
from streams.metric_series import COMPONENTS, DEFAULT_METRICS_PORT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_runs_every_service_against_its_kafka() -> None:
    services = compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "PLAINTEXT://kafka:9092" in advertised
    for name in COMPONENTS:
        service = services[name]
        assert service["command"] == ["run", name]
        env = service["environment"]
        assert env["EBBTIDE_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert env["EBBTIDE_METRICS_PORT"] == str(DEFAULT_METRICS_PORT)
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["build"]["dockerfile"] == "Dockerfile"
        assert (DEPLOY / service["build"]["context"] / "Dockerfile").is_file()


def test_compose_environment_is_accepted_by_the_settings(monkeypatch: Any) -> None:
    for name in COMPONENTS:
        with monkeypatch.context() as env:
            for key, value in compose()["services"][name]["environment"].items():
                env.setenv(key, str(value))
            settings = load_settings()
        assert settings.metrics_port == DEFAULT_METRICS_PORT, name


def test_prometheus_scrapes_each_compose_service() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {
        job["job_name"]: target
        for job in config["scrape_configs"]
        for sc in job["static_configs"]
        for target in sc["targets"]
    }
    assert targets == {f"ebbtide-{name}": f"{name}:{DEFAULT_METRICS_PORT}" for name in COMPONENTS}
    assert set(COMPONENTS) <= set(compose()["services"])
    assert config["rule_files"] == ["ebbtide-rules.yml"]
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "./prometheus:/etc/prometheus:ro" in mounts


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "ebbtide.yml").read_text())["providers"]
    volumes = dict(v.split(":")[:2] for v in compose()["services"]["grafana"]["volumes"])
    host_dir = next(host for host, inside in volumes.items() if inside == provider["options"]["path"])
    assert list((DEPLOY / host_dir).glob("*.json")), "the provisioned folder holds no dashboard"


def test_dockerfile_runs_ebbtide_on_the_metrics_port_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^EXPOSE {DEFAULT_METRICS_PORT}$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["ebbtide"\]$', text, re.M)
    user = re.search(r"^USER (\d+)", text, re.M)
    assert user and int(user.group(1)) != 0
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
    assert "README.md" not in ignored and "pyproject.toml" not in ignored  # the wheel build needs both
