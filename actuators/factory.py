"""Building the loop's Actuator from configuration: which backend, how to reach it, its limits.

Place in the loop: the composition root (ebbtide/) turns its settings into an
:class:`ActuatorConfig` and calls :func:`build_actuator` once at start; a bad value fails there,
naming the setting. Every backend, the dry run included, is driven by the one
:class:`~actuators.engine.ActuationEngine` (the ``loop.Actuator`` port). Heavy client imports
happen only for the backend chosen.

Pointing a backend at a real cluster:

- Kubernetes: in a Pod, the service account (``deploy/rbac/actuator.yaml``) is used when
  ``kubernetes.kubeconfig`` is unset; elsewhere ``kubeconfig`` (default ``$KUBECONFIG`` or
  ``~/.kube/config``) and ``context``. ``namespaces`` hold the Deployments and Jobs: the actuator
  drives those and the Kubernetes source (``ebbtide run source``) watches them; an empty list lets
  the source watch every namespace (by label selector) but the actuator needs at least one.
- Slurm: with ``slurm.rest_url`` (``http://host:6820``), ``rest_user`` and ``rest_token`` (or the
  ``SLURM_JWT`` environment variable; from ``scontrol token username=<user> lifespan=<s>``) it uses
  slurmrestd, and the CLI for requeue and reservations; without, the CLI only, reading
  ``slurm.slurm_conf`` (default: ``$SLURM_CONF`` or /etc/slurm/slurm.conf).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actuators.base import Backend
from actuators.dryrun import DryRunBackend
from actuators.engine import ActuationEngine, RetryPolicy, utc_now

if TYPE_CHECKING:
    from actuators.slurm import SlurmCli
    from actuators.slurm.backend import SlurmTransport


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesConfig(_Part):
    kubeconfig: Path | None = Field(default=None, description="unset: in-cluster, else $KUBECONFIG")
    context: str | None = None
    namespaces: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=lambda: ["ebbtide-workloads"],
        description="workload namespaces (Deployments, Jobs); empty: the source watches all",
    )
    pool_label: str = Field(default="ebbtide.io/pool", min_length=1)
    gpu_resource: str = Field(default="nvidia.com/gpu", min_length=1)
    jobsets: bool = True
    include_kueue: bool = Field(
        default=False, description="also drive Jobs labelled kueue.x-k8s.io/queue-name (else Kueue's alone)"
    )
    priority_weights: list[tuple[int, Annotated[float, Field(gt=0, le=1e6)]]] = Field(
        default_factory=lambda: [(1_000, 2.0), (100_000, 4.0)],
        description="[PriorityClass value, weight] pairs: a Job's weight is that of the highest value"
        " at or below its class's",
    )
    default_priority_weight: float = Field(default=1.0, gt=0, le=1e6, description="below every pair")
    request_timeout_s: float = Field(default=10.0, gt=0)


class SlurmConfig(_Part):
    rest_url: str | None = Field(default=None, description="slurmrestd URL; unset: the CLI")
    rest_user: str = "ebbtide"
    rest_token: str | None = Field(default=None, description="unset: $SLURM_JWT")
    slurm_conf: Path | None = Field(default=None, description="unset: $SLURM_CONF or the system default")
    checkpoint_signal: str = Field(default="USR1", pattern=r"^[A-Z0-9]+$")
    reservation_users: str = Field(default="root", min_length=1)
    reservation_flags: str = ""
    command_timeout_s: float = Field(default=20.0, gt=0)


class ActuatorConfig(_Part):
    backend: Literal["dry-run", "kubernetes", "slurm"] = "dry-run"
    max_changes_per_step: int = Field(default=50, ge=1)
    checkpoint_grace_s: float = Field(default=30.0, ge=0)
    retry_attempts: int = Field(default=4, ge=1, le=20)
    retry_base_delay_s: float = Field(default=0.5, ge=0)
    retry_max_delay_s: float = Field(default=10.0, ge=0)
    max_allocation_skew_s: float = Field(
        default=86_400.0,
        gt=0.0,
        le=366 * 86_400.0,
        description="an Allocation issued more than this past the actuator's clock is dead-lettered",
    )
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)

    @model_validator(mode="after")
    def _reachable(self) -> ActuatorConfig:
        if (
            self.backend == "slurm"
            and self.slurm.rest_url
            and not (self.slurm.rest_token or os.environ.get("SLURM_JWT"))
        ):
            raise ValueError("slurm.rest_token: required with slurm.rest_url (or set SLURM_JWT)")
        if self.slurm.slurm_conf is not None and not self.slurm.slurm_conf.is_file():
            raise ValueError(f"slurm.slurm_conf: file {self.slurm.slurm_conf} does not exist")
        if self.backend == "kubernetes" and not self.kubernetes.namespaces:
            raise ValueError("kubernetes.namespaces: the kubernetes backend needs at least one namespace")
        if self.kubernetes.kubeconfig is not None and not self.kubernetes.kubeconfig.is_file():
            raise ValueError(f"kubernetes.kubeconfig: file {self.kubernetes.kubeconfig} does not exist")
        return self


def slurm_transport(s: SlurmConfig) -> tuple[SlurmTransport, SlurmCli]:
    """slurmrestd when ``rest_url`` is set (the CLI beside it for what REST lacks), else the CLI."""
    from actuators.slurm import SlurmCli
    from actuators.slurm.rest import SlurmRest

    env = {"SLURM_CONF": str(s.slurm_conf)} if s.slurm_conf else None
    cli = SlurmCli(env=env, timeout_s=s.command_timeout_s)
    if not s.rest_url:
        return cli, cli
    token = s.rest_token or os.environ.get("SLURM_JWT", "")
    return SlurmRest(s.rest_url, s.rest_user, token, cli=cli, timeout_s=s.command_timeout_s), cli


def build_backend(config: ActuatorConfig, cluster: str) -> Backend:
    grace = config.checkpoint_grace_s
    if config.backend == "kubernetes":
        from actuators.kube import KubernetesBackend, connect

        k = config.kubernetes
        api = connect(str(k.kubeconfig) if k.kubeconfig else None, k.context)
        return KubernetesBackend(
            api,
            cluster=cluster,
            namespace=k.namespaces,
            pool_label=k.pool_label,
            gpu_resource=k.gpu_resource,
            checkpoint_grace_s=grace,
            request_timeout_s=k.request_timeout_s,
            jobsets=k.jobsets,
            include_kueue=k.include_kueue,
        )
    if config.backend == "slurm":
        from actuators.slurm import SlurmBackend

        s = config.slurm
        transport, _ = slurm_transport(s)
        return SlurmBackend(
            transport,
            cluster=cluster,
            checkpoint_signal=s.checkpoint_signal,
            checkpoint_grace_s=grace,
            reservation_users=s.reservation_users,
            reservation_flags=s.reservation_flags,
        )
    return DryRunBackend(cluster=cluster, adopt_unknown_jobs=True)


def build_actuator(
    config: ActuatorConfig, cluster: str, *, clock: Callable[[], datetime] = utc_now
) -> ActuationEngine:
    """The engine over the configured backend (``dry-run``, ``kubernetes`` or ``slurm``)."""
    retry = RetryPolicy(config.retry_attempts, config.retry_base_delay_s, config.retry_max_delay_s)
    backend = build_backend(config, cluster)
    return ActuationEngine(
        backend, cluster, max_changes_per_step=config.max_changes_per_step, retry=retry, clock=clock
    )
