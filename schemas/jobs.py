"""Batch job contracts: the job's specification and its lifecycle events (keyed by job id)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import (
    DurationS,
    Event,
    GangGpus,
    GpuSeconds,
    Name,
    Part,
    PosDurationS,
    PosGpuSeconds,
    PosNodeGpus,
    PriorityWeight,
    UtcDatetime,
)

BandwidthClass = Literal["low", "medium", "high"]


class JobSpec(Part):
    """What a batch job needs. ``gpus`` is the gang size: all of them or none."""

    job_id: Name
    gpus: GangGpus
    allowed_pools: list[Name] = Field(default_factory=list, description="empty: any pool")
    allowed_gpu_types: list[Name] = Field(default_factory=list, description="empty: any type")
    priority_class: Name = "standard"
    priority_weight: PriorityWeight = 1.0
    estimated_gpu_s: PosGpuSeconds
    deadline: UtcDatetime | None = None
    preemptible: bool = True
    checkpoint_interval_s: PosDurationS | None = Field(
        default=None, description="wall seconds between checkpoints; None: never checkpoints"
    )
    restart_cost_s: DurationS = 0.0
    team: Name = "default"
    bandwidth_class: BandwidthClass = "medium"
    time_limit_s: PosDurationS | None = Field(
        default=None,
        description="wall seconds the cluster lets one run last (Slurm's time limit; a year: unlimited), "
        "which it starts the job on a node only if it ends before that node's maintenance; None: no limit",
    )


class JobEventKind(StrEnum):
    SUBMITTED = "submitted"
    STARTED = "started"
    PROGRESS = "progress"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobEvent(Event):
    """A change in a job's life. ``submitted`` carries the spec; the others refer to it by id."""

    cluster: Name
    job_id: Name
    kind: JobEventKind
    time: UtcDatetime
    spec: JobSpec | None = None
    pool: Name | None = None
    done_gpu_s: GpuSeconds | None = Field(default=None, description="work done and kept so far")
    checkpointed_gpu_s: GpuSeconds | None = None
    message: str | None = None
    nodes: dict[Name, PosNodeGpus] | None = Field(
        default=None,
        description="GPUs the job holds on each node, by node name (on started, or progress after a "
        "move); None: not reported",
    )

    @model_validator(mode="after")
    def _spec_on_submit(self) -> JobEvent:
        if self.kind == JobEventKind.SUBMITTED and self.spec is None:
            raise ValueError("spec: required when kind is 'submitted'")
        if self.spec is not None and self.spec.job_id != self.job_id:
            raise ValueError(f"spec.job_id: {self.spec.job_id!r} differs from job_id {self.job_id!r}")
        return self

    @property
    def key(self) -> str:
        return self.job_id
