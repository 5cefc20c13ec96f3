"""Settings of the stream services and the demo: environment (``EBBTIDE_*``) over a YAML file over defaults.

Nested groups use ``__`` in the environment: ``EBBTIDE_KAFKA__BOOTSTRAP_SERVERS=host:9092``,
``EBBTIDE_OPTIMIZER__TRANSACTIONS=off``. A YAML file given with ``--config`` holds the same keys
(``kafka: {bootstrap_servers: ...}``). Every value is checked when the service starts; a bad
one stops it with :class:`SettingsError` naming the setting and its environment variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from actuators.factory import ActuatorConfig
from streams.fold import DEFAULT_HISTORY_STEPS
from streams.kafka_client import KafkaConnection
from streams.topics_admin import TopicDurability

ENV_PREFIX = "EBBTIDE_"


class SettingsError(ValueError):
    """A setting that cannot be used; the message names it."""


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KafkaSettings(KafkaConnection):
    """The ``kafka`` group: the connection and its security (streams.kafka_client.KafkaConnection:
    ``security_protocol``, ``sasl_*``, ``ssl_*``, ``oauthbearer_*``), then how the services use it."""

    group_prefix: str = Field(default="ebbtide", min_length=1)
    session_timeout_ms: int = Field(default=6000, ge=1000, le=300_000)
    heartbeat_interval_ms: int = Field(default=500, ge=100, le=60_000)
    batch_size: int = Field(default=5000, ge=1, le=1_000_000, description="records per consume() call")
    poll_timeout_s: float = Field(default=0.2, gt=0.0, le=30.0)
    create_topics: bool = True
    topic_prefix: str = Field(
        default="", pattern=r"^[A-Za-z0-9._-]*$", description="isolates a deployment's topics"
    )
    replication_factor: int = Field(
        default=3, ge=1, le=32, description="replicas of every topic ebbtide creates (1 on a local broker)"
    )
    min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description="min.insync.replicas of every topic ebbtide creates (acks=all waits for this many); "
        "unset: replication_factor - 1, at least 1 and at most 2 (3 replicas: 2)",
    )

    @field_validator("min_insync_replicas")
    @classmethod
    def _isr_within_replicas(cls, value: int | None, info: ValidationInfo) -> int | None:
        replicas = info.data.get("replication_factor")
        if value is not None and replicas is not None and value > replicas:
            raise ValueError(f"{value} is more than replication_factor {replicas}: no write could succeed")
        return value

    def durability(self) -> TopicDurability:
        """Replicas and min ISR of the topics the services create (``kafka.create_topics``)."""
        rf = self.replication_factor
        return TopicDurability(rf, self.min_insync_replicas or max(1, min(2, rf - 1)))


class CollectorSettings(_Group):
    source: Literal["nvml", "simulator"] = "nvml"
    interval_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    pool: str = Field(default="default", min_length=1)
    node: str = Field(default="", description="node name; empty: this host's name")


class StateSettings(_Group):
    max_history_steps: int = Field(default=DEFAULT_HISTORY_STEPS, ge=1, le=100_000)
    high_priority_weight: float = Field(default=5.0, gt=0.0, description="a job at or above re-plans at once")
    max_event_skew_s: float = Field(
        default=86_400.0,
        gt=0.0,
        le=366 * 86_400.0,
        description="an input event dated more than this past the service's clock is dead-lettered",
    )
    gpu_vanished_steps: int = Field(
        default=96, ge=1, le=100_000, description="a GPU with no sample for this many steps is forgotten"
    )
    job_abandoned_s: float = Field(
        default=30 * 86_400.0,
        gt=0.0,
        description="a job not running with no event for this long is forgotten (counted as abandoned)",
    )


class ForecasterSettings(_Group):
    drift_band: str = Field(default="p99", pattern=r"^p\d{1,2}$", description="a demand above it is drift")


class OptimizerSettings(_Group):
    transactions: Literal["auto", "on", "off"] = "auto"
    forecast_wait_s: float = Field(
        default=2.0, ge=0.0, le=600.0, description="wait for this step's forecasts"
    )
    lend_headroom: bool | None = Field(
        default=None,
        description="lend idle inference headroom to preemptible jobs; it needs an autoscaler that "
        "takes it back within the step (a Kubernetes HPA). Unset: on, except with the slurm backend",
    )
    max_state_skew_s: float = Field(
        default=86_400.0,
        gt=0.0,
        le=366 * 86_400.0,
        description="a ClusterState dated more than this past the optimizer's clock is dead-lettered",
    )
    decision_budget_s: float = Field(
        default=0.8,
        gt=0.0,
        le=600.0,
        description="wall-clock budget of one planner decision (model update, solve, plan, reasons); "
        "the solve gets what is left of it, and past its limit a flagged fallback is published",
    )


class DemandQueries(_Group):
    """One inference service's PromQL queries; an unset one falls back to the demand.*_query template."""

    gpus_busy: str | None = Field(
        default=None, min_length=1, description="PromQL: the service's busy GPUs, one series"
    )
    requests_per_s: str | None = Field(
        default=None, min_length=1, description="PromQL: the service's requests per second, one series"
    )


class DemandSettings(_Group):
    """The Prometheus demand source (``ebbtide run demand-source``)."""

    prometheus_url: str = Field(
        default="", pattern=r"^(https?://[^\s/]+(/\S*)?)?$", description="Prometheus base URL; required"
    )
    interval_s: float = Field(default=30.0, gt=0.0, le=3600.0, description="seconds between query rounds")
    query_timeout_s: float = Field(default=10.0, gt=0.0, le=300.0)
    gpus_busy_query: str | None = Field(
        default=None, min_length=1, description="template for services without their own; {service}: the name"
    )
    requests_per_s_query: str | None = Field(default=None, min_length=1, description="template, as above")
    services: dict[str, DemandQueries] = Field(default_factory=dict, description="service name -> queries")


class SourceSettings(_Group):
    """The cluster source (``ebbtide run source``); it reaches Slurm through ``actuator.slurm``'s
    connection settings and Kubernetes through ``actuator.kubernetes``'s."""

    backend: Literal["slurm", "kubernetes"] | None = Field(
        default=None, description="the cluster the source observes; required by ebbtide run source"
    )
    interval_s: float = Field(default=30.0, gt=0.0, le=3600.0, description="seconds between snapshots")


ActuatorSettings = ActuatorConfig
"""The actuator's settings are the actuators package's own config (backend, change bound, retries,
Kubernetes and Slurm connection), so there is one definition of each setting."""


class Settings(BaseSettings):
    """Everything a service or the demo reads at start."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    cluster: str = Field(default="demo", min_length=1, max_length=253)
    step_s: int = Field(default=900, ge=1, le=24 * 3600)
    horizon_steps: int = Field(default=96, ge=1, le=10_000)
    metrics_enabled: bool = True
    metrics_port: int = Field(
        default=9095, ge=0, le=65535, description="serve /metrics here; 0: any free port"
    )
    health_stale_after_s: float | None = Field(
        default=None,
        gt=0.0,
        le=24 * 3600.0,
        description="/healthz answers 503 once the loop has not stepped for this long; "
        "unset: 120 s, the collector max(120 s, 3 x collector.interval_s)",
    )
    cluster_spec: Path | None = Field(
        default=None, description="YAML or JSON ClusterState: the pools, services and quotas to start from"
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    collector: CollectorSettings = Field(default_factory=CollectorSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    forecaster: ForecasterSettings = Field(default_factory=ForecasterSettings)
    optimizer: OptimizerSettings = Field(default_factory=OptimizerSettings)
    actuator: ActuatorSettings = Field(default_factory=ActuatorSettings)
    demand: DemandSettings = Field(default_factory=DemandSettings)
    source: SourceSettings = Field(default_factory=SourceSettings)

    def lends_headroom(self) -> bool:
        """Whether the planner lends idle inference headroom (optimizer.lend_headroom, else on
        unless the actuator backend is slurm, which has nothing to take it back within a step)."""
        if self.optimizer.lend_headroom is not None:
            return self.optimizer.lend_headroom
        return self.actuator.backend != "slurm"

    @field_validator("cluster_spec")
    @classmethod
    def _spec_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"file {value} does not exist")
        return value


def _yaml_source(settings_cls: type[BaseSettings], path: Path) -> YamlConfigSettingsSource:
    """pydantic-settings' own YAML source for ``--config``, with its failures named."""
    if not path.is_file():
        raise SettingsError(f"--config: file {path} does not exist")
    try:
        source = YamlConfigSettingsSource(settings_cls, yaml_file=path)
    except yaml.YAMLError as exc:
        raise SettingsError(f"--config: {path} is not valid YAML: {exc}") from None
    except (TypeError, ValueError, AttributeError):
        source = None
    if source is None or not isinstance(source.yaml_data, dict):
        raise SettingsError(f"--config: {path} must hold a mapping of settings")
    return source


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors(include_url=False):
        path = [str(p) for p in item["loc"]]
        name = ".".join(path) or "<settings>"
        env = ENV_PREFIX + "__".join(p.upper() for p in path)
        got = item.get("input")
        # Never echoed: a secret's value, nor an unknown key's (it may be a misspelt secret).
        secret = item["type"] == "extra_forbidden" or any(w in name for w in ("pass", "secret", "token"))
        shown = "" if isinstance(got, dict) or secret else f" (got {got!r})"
        lines.append(f"setting {name} [{env}]: {item['msg']}{shown}")
    return "; ".join(lines)


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Settings from keyword overrides, then the environment, then ``config`` (YAML), then defaults."""

    class _Loaded(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if config is None:
                return (init_settings, env_settings)
            return (init_settings, env_settings, _yaml_source(settings_cls, config))

    try:
        loaded = _Loaded(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    return loaded
