"""Settings (environment over YAML over defaults; a bad one named at start) and the run commands."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from ebbtide.settings import SettingsError, load_settings
from streams.services.nvml_reader import NvmlUnavailable, open_nvml

EBBTIDE = [sys.executable, "-m", "ebbtide.cli"]


def test_environment_overrides_yaml_which_overrides_defaults(tmp_path: Path, monkeypatch):
    config = tmp_path / "ebbtide.yaml"
    config.write_text("cluster: west\nkafka:\n  bootstrap_servers: kafka:9092\n  batch_size: 10\n")
    monkeypatch.setenv("EBBTIDE_KAFKA__BATCH_SIZE", "77")
    settings = load_settings(config)
    assert settings.cluster == "west"
    assert settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.kafka.batch_size == 77
    assert settings.step_s == 900


def test_a_bad_setting_is_named_with_its_environment_variable(monkeypatch):
    monkeypatch.setenv("EBBTIDE_KAFKA__BOOTSTRAP_SERVERS", "no-port-here")
    monkeypatch.setenv("EBBTIDE_OPTIMIZER__TRANSACTIONS", "sometimes")
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert "kafka.bootstrap_servers [EBBTIDE_KAFKA__BOOTSTRAP_SERVERS]" in message
    assert "optimizer.transactions [EBBTIDE_OPTIMIZER__TRANSACTIONS]" in message


def test_headroom_is_lent_unless_nothing_can_take_it_back(monkeypatch):
    assert load_settings().lends_headroom()  # dry-run and kubernetes (an HPA takes it back)
    monkeypatch.setenv("EBBTIDE_ACTUATOR__BACKEND", "slurm")
    assert not load_settings().lends_headroom()  # Slurm has no in-step autoscaler
    monkeypatch.setenv("EBBTIDE_OPTIMIZER__LEND_HEADROOM", "true")
    assert load_settings().lends_headroom()  # said explicitly: as said


def test_the_decision_budget_reaches_the_planner_and_a_bad_one_is_named(monkeypatch):
    from ebbtide.wiring import default_policy

    monkeypatch.setenv("EBBTIDE_OPTIMIZER__DECISION_BUDGET_S", "2.5")
    policy = default_policy(load_settings())
    assert policy.config.time_limit_s == 2.5  # type: ignore[attr-defined]
    monkeypatch.setenv("EBBTIDE_OPTIMIZER__DECISION_BUDGET_S", "0")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "optimizer.decision_budget_s [EBBTIDE_OPTIMIZER__DECISION_BUDGET_S]" in str(err.value)


def test_a_planner_that_cannot_load_stops_the_service_and_says_why(monkeypatch):
    """No silent stand-in: without the planner the optimizer exits, it never plans with fifo."""
    import sys
    import threading

    from ebbtide.services import EXIT_NO_PLANNER, run_service
    from ebbtide.wiring import PlannerUnavailable, default_policy

    monkeypatch.setitem(sys.modules, "optimizer.planner", None)  # import fails as if not installed
    with pytest.raises(PlannerUnavailable) as err:
        default_policy(load_settings())
    assert "the ebbtide planner cannot be loaded" in str(err.value)
    monkeypatch.setattr("ebbtide.services.answers_metadata", lambda bootstrap, timeout_s: True)
    monkeypatch.setattr("ebbtide.services.serve_metrics", lambda port: None)
    settings = load_settings(kafka={"create_topics": False}, metrics_enabled=False)
    assert run_service("optimizer", settings, threading.Event()) == EXIT_NO_PLANNER


def test_a_bad_config_file_is_named(tmp_path: Path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kafka: [unclosed\n")
    with pytest.raises(SettingsError, match="--config"):
        load_settings(broken)
    (tmp_path / "extra.yaml").write_text("unknown_key: 1\n")
    with pytest.raises(SettingsError, match=r"setting unknown_key \[EBBTIDE_UNKNOWN_KEY\]"):
        load_settings(tmp_path / "extra.yaml")


def test_run_fails_at_start_naming_the_bad_setting():
    result = subprocess.run(
        [*EBBTIDE, "run", "state"],
        env={"EBBTIDE_STEP_S": "-3", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "step_s [EBBTIDE_STEP_S]" in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py not installed")
def test_collector_without_a_gpu_says_so_instead_of_a_traceback():
    try:
        open_nvml().nvmlShutdown()
    except NvmlUnavailable:
        pass
    else:
        pytest.skip("this machine has a GPU: the NVML path is exercised for real")
    result = subprocess.run([*EBBTIDE, "run", "collector"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert "no NVIDIA driver here" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "setting source.backend [EBBTIDE_SOURCE__BACKEND]: required by the source"),
        ({"EBBTIDE_SOURCE__BACKEND": "yarn"}, "source.backend [EBBTIDE_SOURCE__BACKEND]: Input should be"),
        ({"EBBTIDE_SOURCE__BACKEND": "slurm", "EBBTIDE_SOURCE__INTERVAL_S": "0"}, "source.interval_s"),
        (
            {"EBBTIDE_SOURCE__BACKEND": "slurm", "EBBTIDE_ACTUATOR__SLURM__REST_URL": "http://127.0.0.1:1"},
            "actuator.slurm.rest_token [EBBTIDE_ACTUATOR__SLURM__REST_TOKEN]: required",
        ),
    ],
)
def test_run_source_fails_at_start_naming_its_setting(env: dict[str, str], named: str):
    """Before any broker or cluster is asked (no broker answers here)."""
    result = subprocess.run(
        [*EBBTIDE, "run", "source"],
        env={**env, "PATH": "", "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr + result.stdout
    assert named in result.stderr
