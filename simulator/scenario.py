"""The scenario file format: pydantic models for the YAML data files under simulator/scenarios/.

A scenario fixes the cluster (pools, maintenance, failure rate), the inference services and
their demand curves, and the batch workload (generators, explicit jobs, the openb trace), with a
seed, and the teams' GPU quotas. The built-ins (``scenarios/*.yaml``) are the default benchmark
set; ``scenarios/extra/`` holds more kinds, run with ``ebbtide bench --extra``. ``load_scenario``
turns a bad file into a ScenarioError naming the file and the field.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas import ServiceSpec

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
EXTRA_SCENARIO_DIR = SCENARIO_DIR / "extra"


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolSpec(_Model):
    name: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1)
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    max_share: int = Field(default=1, ge=1)


class MaintenanceSpec(_Model):
    pool: str
    start_hour: float = Field(ge=0)
    duration_hours: float = Field(gt=0)
    nodes_out: int = Field(ge=1)


class FailureSpec(_Model):
    node_mtbf_hours: float = Field(default=0.0, ge=0, description="0: no failures")
    repair_hours: float = Field(default=4.0, gt=0)


class BurstSpec(_Model):
    per_day: float = Field(ge=0)
    magnitude: float = Field(gt=0, description="multiplier of the base demand during a burst")
    duration_minutes: float = Field(gt=0)


class StepChangeSpec(_Model):
    at_hour: float = Field(description="hours from the window start (negative: in the history)")
    factor: float = Field(gt=0)
    ramp_hours: float = Field(default=0.0, ge=0, description="reach the factor linearly over this; 0: a step")


class DemandSpec(_Model):
    """A demand curve in busy GPUs: a base shape, then modifiers, scaled to the cluster."""

    kind: Literal["flat", "diurnal", "gentd26_hourly", "gentd26_qps_10min", "openb_ls"]
    peak_gpus: float = Field(gt=0, description="the base shape is scaled so its peak is this")
    trough_frac: float = Field(default=0.3, ge=0, le=1, description="diurnal: trough / peak")
    peak_hour: float = Field(default=20.0, ge=0, lt=24)
    weekend_factor: float = Field(default=1.0, gt=0)
    noise_frac: float = Field(default=0.05, ge=0)
    trend_per_day: float = Field(default=0.0, description="relative change per day")
    bursts: BurstSpec | None = None
    step_changes: list[StepChangeSpec] = Field(default_factory=list)
    trace_start_hour: int = Field(default=0, ge=0, description="trace kinds: row where the history starts")
    request_type: str = "Generative Requests"
    trace_start_day: float = Field(default=120.0, ge=0, description="openb_ls: trace day at history start")
    time_compression: float = Field(default=1.0, gt=0, description="openb_ls: trace seconds per simulated s")


class ServiceScenario(_Model):
    spec: ServiceSpec
    demand: DemandSpec


class PriorityClassSpec(_Model):
    name: str = Field(min_length=1)
    weight: float = Field(gt=0)
    share: float = Field(gt=0, description="relative frequency among generated jobs")
    deadline_frac: float = Field(default=0.0, ge=0, le=1, description="share of jobs with a deadline")
    deadline_slack: float = Field(default=3.0, gt=0, description="deadline = arrival + slack x true runtime")
    preemptible: bool = True


class JobGeneratorSpec(_Model):
    arrivals_per_hour: float = Field(default=0.0, ge=0)
    initial_backlog: int = Field(default=0, ge=0)
    gangs: dict[int, float] = Field(description="gang size -> relative frequency")
    hours_median: float = Field(gt=0, description="true wall hours on the full gang (median)")
    hours_sigma: float = Field(default=0.8, ge=0)
    max_hours: float = Field(default=48.0, gt=0)
    estimate_sigma: float = Field(default=0.5, ge=0, description="lognormal spread of estimate / truth")
    estimate_bias: float = Field(default=1.3, gt=0, description="median of estimate / truth (users pad)")
    classes: list[PriorityClassSpec] = Field(min_length=1)
    checkpoint_interval_s: float | None = Field(default=1800.0, gt=0)
    checkpoint_frac: float = Field(default=0.8, ge=0, le=1, description="share of jobs that checkpoint")
    restart_cost_s: float = Field(default=120.0, ge=0)
    allowed_gpu_types: list[list[str]] = Field(
        default_factory=lambda: [list[str]()], description="allowed-type choices, drawn uniformly; [] = any"
    )
    team: str = "default"
    bandwidth_class: Literal["low", "medium", "high"] = "medium"
    id_prefix: str = "job"
    population: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "closed loop: this many of the generator's jobs are in the system at any time (all at the start,"
            " and a new one each time one finishes); takes no arrivals_per_hour or initial_backlog."
            " For soak runs: the LP bound sees only the jobs that arrived in that run"
        ),
    )

    @model_validator(mode="after")
    def _closed_loop_alone(self) -> JobGeneratorSpec:
        if self.population is not None and (self.arrivals_per_hour or self.initial_backlog):
            raise ValueError("population: a closed loop takes no arrivals_per_hour or initial_backlog")
        return self

    @field_validator("gangs")
    @classmethod
    def _gangs_positive(cls, value: dict[int, float]) -> dict[int, float]:
        if not value or any(g < 1 or w <= 0 for g, w in value.items()):
            raise ValueError("gang sizes must be >= 1 with positive frequencies")
        return value


class ExplicitJobSpec(_Model):
    job_id: str = Field(min_length=1)
    at_hour: float = Field(ge=0)
    gpus: int = Field(ge=1)
    true_gpu_hours: float = Field(gt=0)
    estimated_gpu_hours: float = Field(gt=0)
    priority_class: str = "standard"
    priority_weight: float = Field(default=1.0, gt=0)
    deadline_hour: float | None = None
    preemptible: bool = True
    checkpoint_interval_s: float | None = Field(default=1800.0, gt=0)
    restart_cost_s: float = Field(default=120.0, ge=0)
    allowed_pools: list[str] = Field(default_factory=list)
    allowed_gpu_types: list[str] = Field(default_factory=list)


class OpenbReplaySpec(_Model):
    """Batch arrivals replayed from alibaba_openb_pod_list_default.csv (BE pods by default)."""

    qos: list[str] = Field(default_factory=lambda: ["BE"])
    start_day: float = Field(default=115.0, ge=0)
    time_compression: float = Field(default=1.0, gt=0, description="trace seconds per simulated second")
    min_runtime_s: float = Field(default=300.0, gt=0)
    max_runtime_hours: float = Field(default=24.0, gt=0)
    runtime_scale: float = Field(default=1.0, gt=0)
    max_jobs: int = Field(default=2000, ge=1)
    estimate_sigma: float = Field(default=0.5, ge=0)
    estimate_bias: float = Field(default=1.3, gt=0)
    priority_weight: float = Field(default=1.0, gt=0)
    checkpoint_interval_s: float | None = Field(default=1800.0, gt=0)


class WorkloadSpec(_Model):
    generators: list[JobGeneratorSpec] = Field(default_factory=list)
    explicit: list[ExplicitJobSpec] = Field(default_factory=list)
    openb: OpenbReplaySpec | None = None


class Scenario(_Model):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    cluster: str = "sim"
    seed: int = 0
    start: datetime = datetime(2026, 1, 5, tzinfo=UTC)
    step_s: int = Field(default=900, ge=60)
    subtick_s: int = Field(default=60, ge=1)
    history_days: float = Field(default=8.0, ge=7.0)
    window_hours: float = Field(default=48.0, gt=0)
    quick_window_hours: float = Field(default=24.0, gt=0)
    pools: list[PoolSpec] = Field(min_length=1)
    maintenance: list[MaintenanceSpec] = Field(default_factory=list)
    failures: FailureSpec = FailureSpec()
    services: list[ServiceScenario] = Field(default_factory=list)
    workload: WorkloadSpec = WorkloadSpec()
    quotas_gpus: dict[str, int] = Field(default_factory=dict, description="nominal GPU quota by team")

    @field_validator("start")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        pools = {p.name for p in self.pools}
        if len(pools) != len(self.pools):
            raise ValueError("pools: duplicate pool names")
        for i, m in enumerate(self.maintenance):
            if m.pool not in pools:
                raise ValueError(f"maintenance[{i}].pool: unknown pool {m.pool!r}")
        for i, s in enumerate(self.services):
            for p in s.spec.allowed_pools:
                if p not in pools:
                    raise ValueError(f"services[{i}].spec.allowed_pools: unknown pool {p!r}")
        if self.step_s % self.subtick_s:
            raise ValueError("subtick_s: must divide step_s")
        if self.quick_window_hours > self.window_hours:
            raise ValueError("quick_window_hours: longer than window_hours")
        self._check_quotas()
        return self

    def _check_quotas(self) -> None:
        teams = {g.team for g in self.workload.generators}
        for team, gpus in self.quotas_gpus.items():
            if gpus < 0:
                raise ValueError(f"quotas_gpus.{team}: negative quota {gpus}")
            if team not in teams:
                raise ValueError(f"quotas_gpus.{team}: no generator has team {team!r}")

    def window_s(self, quick: bool) -> float:
        return 3600.0 * (self.quick_window_hours if quick else self.window_hours)


def _format_error(path: Path, exc: ValidationError) -> str:
    lines = [f"{path}: invalid scenario"]
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  field {loc}: {err['msg']}")
    return "\n".join(lines)


def parse_scenario(data: object, source: Path) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: invalid scenario\n  field (top level): expected a mapping")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(source, exc)) from None


def load_scenario(path: Path) -> Scenario:
    """Read and validate one scenario file; raise ScenarioError naming the file and the field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML ({exc})") from None
    return parse_scenario(data, path)


def builtin_scenarios() -> dict[str, Path]:
    """Built-in scenario files by scenario name (the file stem): the default benchmark set."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def extra_scenarios() -> dict[str, Path]:
    """The extra scenario files (simulator/scenarios/extra/), run by ``ebbtide bench --extra``."""
    return {p.stem: p for p in sorted(EXTRA_SCENARIO_DIR.glob("*.yaml"))}


def scenario_paths(names: list[str]) -> list[Path]:
    """The files of scenarios named built-in or extra, in order; ScenarioError names the unknown ones."""
    builtin, extras = builtin_scenarios(), extra_scenarios()
    known = {**extras, **builtin}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ScenarioError(
            f"unknown scenario {', '.join(unknown)}; "
            f"built-in: {', '.join(builtin)}; extra: {', '.join(extras)}"
        )
    return [known[name] for name in names]
