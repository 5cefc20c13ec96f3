"""Decisions: the HorizonPlan (every step of the horizon) and the Allocation (step 0 only).

Both are keyed by cluster and carry a deterministic ``plan_id`` derived from the planner's
inputs, so a replayed decision is recognisably the same decision. Actuators consume only the
Allocation; every decision in it carries a reason a person can read.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from schemas.base import (
    Event,
    GangGpus,
    HorizonSteps,
    Name,
    NonNegGangGpus,
    Part,
    PoolGpusFloat,
    Relative,
    Replicas,
    SolveMs,
    StepIndex,
    StepS,
    UtcDatetime,
)
from schemas.causes import DecisionCause


class ServiceCapacity(Part):
    service: Name
    pool: Name
    replicas: Replicas
    gpus: PoolGpusFloat
    burst_gpus: PoolGpusFloat = Field(
        default=0.0, description="GPUs its autoscaler may add within the step, taken from borrowers"
    )


class JobPlacement(Part):
    job_id: Name
    pool: Name
    gpus: GangGpus
    borrows_from: Name | None = Field(
        default=None, description="the service whose burst headroom it runs on (preempted first)"
    )


class PlanStep(Part):
    index: StepIndex
    start: UtcDatetime
    services: list[ServiceCapacity] = Field(default_factory=list)
    jobs: list[JobPlacement] = Field(default_factory=list)


class SolverInfo(Part):
    solver: Name
    status: Name
    time_ms: SolveMs
    gap: Relative | None = None
    fallback: bool = False
    fallback_reason: str | None = None

    @model_validator(mode="after")
    def _reason_with_fallback(self) -> SolverInfo:
        if self.fallback and not self.fallback_reason:
            raise ValueError("fallback_reason: required when fallback is true")
        return self


class HorizonPlan(Event):
    cluster: Name
    plan_id: Name
    policy: Name
    issued_at: UtcDatetime
    step_s: StepS
    horizon_steps: HorizonSteps
    steps: list[PlanStep]
    objective: dict[str, float] = Field(default_factory=dict, description="objective terms by name")
    solver: SolverInfo
    inputs_digest: Name

    @model_validator(mode="after")
    def _steps_match_horizon(self) -> HorizonPlan:
        if len(self.steps) != self.horizon_steps:
            raise ValueError(f"steps: {len(self.steps)} steps, horizon_steps says {self.horizon_steps}")
        for i, step in enumerate(self.steps):
            if step.index != i:
                raise ValueError(f"steps[{i}].index: expected {i}, got {step.index}")
        return self

    @property
    def key(self) -> str:
        return self.cluster


class JobAction(StrEnum):
    RUN = "run"
    HOLD = "hold"
    PREEMPT = "preempt"


class ServiceDecision(Part):
    service: Name
    pool: Name
    replicas: Replicas
    gpus: PoolGpusFloat
    reason: str = Field(min_length=1)
    cause: DecisionCause | None = Field(default=None, description="the code the reason is made from")
    burst_gpus: PoolGpusFloat = Field(
        default=0.0,
        description="GPUs the service's autoscaler may add within the step on a demand burst, "
        "preempting the jobs that borrow them (see JobDecision.borrows_from)",
    )


class JobDecision(Part):
    job_id: Name
    action: JobAction
    pool: Name | None = None
    gpus: NonNegGangGpus = 0
    reason: str = Field(min_length=1)
    cause: DecisionCause | None = Field(default=None, description="the code the reason is made from")
    borrows_from: Name | None = Field(
        default=None,
        description="run on this service's burst headroom: preempted first when the service scales up",
    )

    @model_validator(mode="after")
    def _pool_when_running(self) -> JobDecision:
        if self.action == JobAction.RUN and (self.pool is None or self.gpus < 1):
            raise ValueError("pool: a job decided 'run' needs a pool and gpus >= 1")
        return self


class Allocation(Event):
    cluster: Name
    plan_id: Name
    policy: Name
    issued_at: UtcDatetime
    step_s: StepS
    valid_until: UtcDatetime
    services: list[ServiceDecision] = Field(default_factory=list)
    jobs: list[JobDecision] = Field(default_factory=list)
    fallback: bool = False
    fallback_reason: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Allocation:
        if self.valid_until <= self.issued_at:
            raise ValueError("valid_until: must be after issued_at")
        if self.fallback and not self.fallback_reason:
            raise ValueError("fallback_reason: required when fallback is true")
        ids = [j.job_id for j in self.jobs]
        if len(ids) != len(set(ids)):
            raise ValueError("jobs: a job appears more than once")
        return self

    @property
    def key(self) -> str:
        return self.cluster
