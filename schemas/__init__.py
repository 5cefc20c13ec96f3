"""Event contracts of the ebbtide loop.

Every record that crosses a topic is one of the versioned models defined here. They are
validated at every edge (strict types, finite numbers, UTC times, non-negative counts), and a
JSON Schema per event is generated into ``schemas/json/`` for consumers in other languages.
This package imports none of the other parts of ebbtide.
"""

from schemas.actuation import ActuationResult
from schemas.causes import DecisionCause
from schemas.cluster import (
    BandwidthClass,
    ClusterState,
    JobState,
    JobStatus,
    PoolState,
    PoolWindow,
    ServiceSpec,
    ServiceState,
)
from schemas.deadletter import DeadLetter
from schemas.forecast import DemandForecast
from schemas.inventory import InventoryNode, InventoryPool, InventoryService, PoolInventory
from schemas.jobs import JobEvent, JobEventKind, JobSpec
from schemas.plan import (
    Allocation,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    PlanBlock,
    PlanStep,
    ServiceCapacity,
    ServiceDecision,
    SolverInfo,
)
from schemas.telemetry import DemandSample, GpuSample

__all__ = [
    "ActuationResult",
    "Allocation",
    "BandwidthClass",
    "ClusterState",
    "DeadLetter",
    "DecisionCause",
    "DemandForecast",
    "DemandSample",
    "GpuSample",
    "HorizonPlan",
    "InventoryNode",
    "InventoryPool",
    "InventoryService",
    "JobAction",
    "JobDecision",
    "JobEvent",
    "JobEventKind",
    "JobPlacement",
    "JobSpec",
    "JobState",
    "JobStatus",
    "PlanBlock",
    "PlanStep",
    "PoolInventory",
    "PoolState",
    "PoolWindow",
    "ServiceCapacity",
    "ServiceDecision",
    "ServiceSpec",
    "ServiceState",
    "SolverInfo",
]
