"""The topic catalogue: every topic of the loop declared once, as data.

Name, key, partitions, cleanup policy and the event it carries. ``streams/`` creates topics
from this list (idempotently); nothing else names a topic by string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas.actuation import ActuationResult
from schemas.base import Event
from schemas.cluster import ClusterState
from schemas.deadletter import DeadLetter
from schemas.forecast import DemandForecast
from schemas.inventory import PoolInventory
from schemas.jobs import JobEvent
from schemas.plan import Allocation, HorizonPlan
from schemas.telemetry import DemandSample, GpuSample

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class Topic:
    name: str
    event: type[Event]
    key: str
    partitions: int
    cleanup_policy: Literal["delete", "compact"]
    retention_ms: int | None = None
    description: str = ""

    def config(self) -> dict[str, str]:
        """Broker-side topic configuration."""
        conf: dict[str, str] = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            conf["retention.ms"] = str(self.retention_ms)
        return conf


GPU_SAMPLES = Topic("ebbtide.gpu-samples", GpuSample, "node/gpu_uuid", 6, "delete", 1 * DAY_MS,
                    "GPU telemetry from NVML or the simulator")
DEMAND_SAMPLES = Topic("ebbtide.demand-samples", DemandSample, "service", 3, "delete", 14 * DAY_MS,
                       "inference demand per service")
JOB_EVENTS = Topic("ebbtide.job-events", JobEvent, "job_id", 3, "compact", None,
                   "batch job lifecycle; compacted so the latest event per job survives")
CLUSTER_STATE = Topic("ebbtide.cluster-state", ClusterState, "cluster", 3, "compact", None,
                      "folded per-cluster state; compacted")
FORECASTS = Topic("ebbtide.forecasts", DemandForecast, "service", 3, "delete", 7 * DAY_MS,
                  "24 h demand forecasts with quantiles")
PLANS = Topic("ebbtide.plans", HorizonPlan, "cluster", 3, "delete", 7 * DAY_MS,
              "the whole horizon plan of every step")
ALLOCATIONS = Topic("ebbtide.allocations", Allocation, "cluster", 3, "delete", 7 * DAY_MS,
                    "step 0 of each plan: what the actuators apply")
ACTUATIONS = Topic("ebbtide.actuations", ActuationResult, "cluster/backend", 3, "delete", 7 * DAY_MS,
                   "what the actuators did")
INVENTORY = Topic("ebbtide.inventory", PoolInventory, "cluster", 3, "compact", None,
                  "pools, nodes and services as a cluster source sees them; compacted")
DEAD_LETTERS = Topic("ebbtide.dead-letters", DeadLetter, "source topic", 1, "delete", 14 * DAY_MS,
                     "records no consumer could read, with the reason")

CATALOGUE: tuple[Topic, ...] = (
    GPU_SAMPLES,
    DEMAND_SAMPLES,
    JOB_EVENTS,
    INVENTORY,
    CLUSTER_STATE,
    FORECASTS,
    PLANS,
    ALLOCATIONS,
    ACTUATIONS,
    DEAD_LETTERS,
)

BY_NAME: dict[str, Topic] = {t.name: t for t in CATALOGUE}


def topic(name: str) -> Topic:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown topic {name!r}; known: {', '.join(BY_NAME)}") from None
