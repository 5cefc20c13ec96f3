"""Building actuators from configuration: bad settings fail at start, naming the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actuators.dryrun import DryRunBackend
from actuators.factory import ActuatorConfig, SlurmConfig, build_actuator
from actuators.slurm import SlurmBackend, SlurmCli
from actuators.slurm.rest import SlurmRest


def test_default_is_a_dry_run() -> None:
    actuator = build_actuator(ActuatorConfig(), "c1")
    assert isinstance(actuator.backend, DryRunBackend)
    assert actuator.cluster == "c1"


def test_slurm_cli_unless_slurmrestd_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JWT", raising=False)
    cli = build_actuator(ActuatorConfig(backend="slurm", checkpoint_grace_s=5), "c1").backend
    assert isinstance(cli, SlurmBackend) and isinstance(cli.transport, SlurmCli)
    assert cli.checkpoint_grace_s == 5
    rest_config = ActuatorConfig(backend="slurm", slurm=SlurmConfig(rest_url="http://h:6820", rest_token="t"))
    rest = build_actuator(rest_config, "c1").backend
    assert isinstance(rest, SlurmBackend) and isinstance(rest.transport, SlurmRest)


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"backend": "slurm", "slurm": {"rest_url": "http://h:6820"}}, "slurm.rest_token"),
        ({"backend": "slurm", "slurm": {"slurm_conf": "/nonexistent/slurm.conf"}}, "slurm.slurm_conf"),
        (
            {"backend": "kubernetes", "kubernetes": {"kubeconfig": "/nonexistent/kubeconfig"}},
            "kubernetes.kubeconfig",
        ),
        ({"max_changes_per_step": 0}, "max_changes_per_step"),
        ({"backend": "nomad"}, "backend"),
    ],
)
def test_bad_settings_name_themselves(config: dict, names: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JWT", raising=False)
    with pytest.raises(ValidationError, match=names.replace(".", r"\.")):
        ActuatorConfig.model_validate(config)
