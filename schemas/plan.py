"""Decisions: the HorizonPlan (every step of the horizon) and the Allocation (step 0 only).

The HorizonPlan carries the horizon as blocks of consecutive steps that share one content (the
planner decides per block, so a step-by-step list would repeat every job placement in every
step of a block): ``blocks[k]`` covers steps ``first_step .. first_step + steps - 1``, and the
blocks tile the horizon from step 0 with no gap or overlap. Consumers read a step through
``plan.step(i)`` or ``plan.steps_expanded()`` (a :class:`PlanStep` view, not a wire record).

Both are keyed by cluster and carry a deterministic ``plan_id`` derived from the planner's
inputs, so a replayed decision is recognisably the same decision. Actuators consume only the
Allocation; every decision in it carries a reason a person can read.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta
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
        default=None,
        description="the service whose autoscaler may preempt it within the step, first: it runs on "
        "that service's burst headroom, or is among the cheapest to stop in its surge",
    )


class PlanBlock(Part):
    """Consecutive steps of the horizon that share one content: the services' capacity and the
    jobs' placements in each of them."""

    first_step: StepIndex
    steps: HorizonSteps = Field(description="how many steps the block covers, from first_step")
    services: list[ServiceCapacity] = Field(default_factory=list)
    jobs: list[JobPlacement] = Field(default_factory=list)


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan, as its block has it (a view for consumers; not on the wire)."""

    index: int
    start: datetime
    services: list[ServiceCapacity]
    jobs: list[JobPlacement]


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
    blocks: list[PlanBlock] = Field(min_length=1, description="the horizon in blocks, from step 0")
    objective: dict[str, float] = Field(default_factory=dict, description="objective terms by name")
    solver: SolverInfo
    inputs_digest: Name

    @model_validator(mode="after")
    def _blocks_tile_horizon(self) -> HorizonPlan:
        expected = 0
        for k, block in enumerate(self.blocks):
            if block.first_step != expected:
                raise ValueError(f"blocks[{k}].first_step: expected {expected}, got {block.first_step}")
            expected += block.steps
        if expected != self.horizon_steps:
            raise ValueError(f"blocks: cover {expected} steps, horizon_steps says {self.horizon_steps}")
        return self

    def step_start(self, index: int) -> datetime:
        return self.issued_at + timedelta(seconds=self.step_s * index)

    def block_at(self, index: int) -> PlanBlock:
        """The block that holds step ``index`` (IndexError outside the horizon)."""
        if not 0 <= index < self.horizon_steps:
            raise IndexError(f"step {index} is outside the plan's {self.horizon_steps} steps")
        firsts = [block.first_step for block in self.blocks]
        return self.blocks[bisect_right(firsts, index) - 1]

    def step(self, index: int) -> PlanStep:
        """Step ``index`` of the horizon (its block's services and jobs)."""
        block = self.block_at(index)
        return PlanStep(index, self.step_start(index), block.services, block.jobs)

    def steps_expanded(self) -> list[PlanStep]:
        """Every step of the horizon, in order."""
        return [
            PlanStep(t, self.step_start(t), block.services, block.jobs)
            for block in self.blocks
            for t in range(block.first_step, block.first_step + block.steps)
        ]

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
        description="preempted first when this service scales up within the step: it runs on the "
        "service's burst headroom, or is among the cheapest to stop in the service's surge",
    )
    avoid_nodes: list[Name] = Field(
        default_factory=list,
        description="nodes of its pool a job started now must not be placed on: maintenance takes them "
        "out before it would end, or they are held for a heavier gang as they drain (the Kubernetes "
        "backend adds them to its pods' node affinity, the Slurm backend to the job's ExcNodeList)",
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
