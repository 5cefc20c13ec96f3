"""ClusterState: the per-cluster snapshot the planner reads (compacted state topic, keyed by cluster).

The state service folds JobEvents, DemandSamples and GpuSamples into it; the simulator builds
the same object from its own bookkeeping. Every policy decides from a ClusterState and the
services' DemandForecasts, and nothing else.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from schemas.base import (
    Attempts,
    DemandGpus,
    DurationS,
    Event,
    GangGpus,
    GpuSeconds,
    Name,
    NodeGpus,
    Part,
    PoolGpus,
    PosNodeGpus,
    PosPoolGpus,
    Replicas,
    Share,
    StepS,
    UtcDatetime,
)
from schemas.jobs import BandwidthClass, JobSpec

__all__ = [
    "BandwidthClass",
    "ClusterState",
    "JobState",
    "JobStatus",
    "PoolState",
    "PoolWindow",
    "ServiceSpec",
    "ServiceState",
]


class PoolWindow(Part):
    """GPUs of a pool out of service in a known window (maintenance), end exclusive."""

    start: UtcDatetime
    end: UtcDatetime
    gpus_out: PosPoolGpus
    reason: str = "maintenance"
    nodes: list[Name] = Field(
        default_factory=list,
        description="the nodes it takes out (names as in PoolState.node_names), where known; empty: unknown",
    )

    @model_validator(mode="after")
    def _end_after_start(self) -> PoolWindow:
        if self.end <= self.start:
            raise ValueError(f"end: {self.end.isoformat()} is not after start {self.start.isoformat()}")
        return self


class PoolState(Part):
    name: Name
    gpu_type: Name
    gpus_total: PoolGpus
    gpus_available: PoolGpus = Field(description="total minus failed or drained GPUs now")
    gpus_per_node: PosNodeGpus = 8
    max_share: Share = Field(default=1, description="time-slicing replicas per GPU; 1: no sharing")
    windows: list[PoolWindow] = Field(default_factory=list)
    free_gpus_by_node: list[NodeGpus] = Field(
        default_factory=list,
        description="free GPUs on each node that is up, after running batch jobs (inference replicas "
        "are movable and not counted), for gang fit; empty: unknown",
    )
    node_names: list[Name] = Field(
        default_factory=list,
        description="names of the nodes free_gpus_by_node counts, in the same order; empty: unknown",
    )

    @model_validator(mode="after")
    def _available_within_total(self) -> PoolState:
        if self.gpus_available > self.gpus_total:
            raise ValueError(f"gpus_available: {self.gpus_available} exceeds gpus_total {self.gpus_total}")
        for i, window in enumerate(self.windows):
            if window.gpus_out > self.gpus_total:
                raise ValueError(
                    f"windows[{i}].gpus_out: {window.gpus_out} exceeds gpus_total {self.gpus_total}"
                )
        if self.node_names and len(self.node_names) != len(self.free_gpus_by_node):
            raise ValueError(
                f"node_names: {len(self.node_names)} names for {len(self.free_gpus_by_node)} nodes "
                "in free_gpus_by_node"
            )
        return self


class ServiceSpec(Part):
    """An inference service. Demand and capacity are counted in GPUs."""

    service: Name
    gpus_per_replica: GangGpus = 1
    min_replicas: Replicas = 0
    max_replicas: Replicas = 10_000
    slo_quantile: Name = Field(default="p90", pattern=r"^p\d{1,2}(\.\d+)?$")
    startup_s: DurationS = 60.0
    allowed_pools: list[Name] = Field(default_factory=list, description="empty: any pool")
    latency_critical: bool = False
    max_cotenants: Share = Field(default=1, description="most tenants it tolerates on one GPU")
    bandwidth_class: BandwidthClass = "medium"

    @model_validator(mode="after")
    def _replica_bounds(self) -> ServiceSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas: {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        return self


class ServiceState(Part):
    spec: ServiceSpec
    replicas: dict[Name, Replicas] = Field(default_factory=dict, description="running replicas by pool")
    demand_history: list[DemandGpus] = Field(
        default_factory=list, description="busy GPUs per step, oldest first, the last ending at as_of"
    )


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobState(Part):
    spec: JobSpec
    status: JobStatus
    submitted_at: UtcDatetime
    pool: Name | None = None
    started_at: UtcDatetime | None = None
    done_gpu_s: GpuSeconds = Field(default=0.0, description="work done and kept (checkpointed or live)")
    since_checkpoint_gpu_s: GpuSeconds = Field(default=0.0, description="work lost if preempted now")
    preemptions: Attempts = 0
    nodes: dict[Name, PosNodeGpus] = Field(
        default_factory=dict, description="GPUs the job holds on each node, by node name; empty: unknown"
    )

    @property
    def remaining_gpu_s(self) -> float:
        """Remaining work by the job's own estimate (never below one step of its gang)."""
        return max(self.spec.estimated_gpu_s - self.done_gpu_s, 0.0)

    @model_validator(mode="after")
    def _pool_when_running(self) -> JobState:
        if self.status == JobStatus.RUNNING and self.pool is None:
            raise ValueError("pool: required when status is 'running'")
        return self


class ClusterState(Event):
    cluster: Name
    as_of: UtcDatetime
    step_s: StepS
    pools: list[PoolState] = Field(min_length=1, description="a cluster has at least one pool")
    services: list[ServiceState] = Field(default_factory=list)
    jobs: list[JobState] = Field(default_factory=list)
    quotas_gpus: dict[Name, PoolGpus] = Field(default_factory=dict, description="GPU quota by team")

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterState:
        for label, names in (
            ("pools", [p.name for p in self.pools]),
            ("services", [s.spec.service for s in self.services]),
            ("jobs", [j.spec.job_id for j in self.jobs]),
        ):
            if len(names) != len(set(names)):
                raise ValueError(f"{label}: duplicate names")
        return self

    @property
    def key(self) -> str:
        return self.cluster
