"""The topic catalogue: every topic of the loop declared once, as data.

Name, key, partitions, cleanup policy and the event it carries. ``streams/`` creates topics
from this list (idempotently); nothing else names a topic by string.

Sizes: every topic stores zstd and takes record batches up to its ``max_message_bytes``
(compressed: the broker's check); every producer compresses with zstd and sends records up to
``MAX_RECORD_BYTES`` uncompressed (librdkafka checks ``message.max.bytes`` before compressing),
both from ``PRODUCER_LIMITS``. tests/schemas/test_record_sizes.py builds the largest records at
10,000 jobs / 50,000 GPUs and checks them against both limits.
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
MIB = 1024 * 1024

COMPRESSION: Literal["zstd"] = "zstd"
"""Every producer compresses with zstd (librdkafka's default level, 3); every topic stores zstd."""

MAX_RECORD_BYTES = 64 * MIB
"""The largest record (uncompressed JSON) a producer sends: its ``message.max.bytes``."""

SMALL_RECORDS = 1 * MIB
"""max.message.bytes of topics whose records stay small (samples, events, forecasts, actuations)."""

LARGE_RECORDS = 8 * MIB
"""max.message.bytes (compressed) of the per-cluster records that grow with the cluster (inventory,
state, plan, allocation) and of dead letters (they carry a bad record whole)."""

PRODUCER_LIMITS: dict[str, str] = {
    "compression.type": COMPRESSION,
    "message.max.bytes": str(MAX_RECORD_BYTES),
}
"""What every producer of catalogue events sets (librdkafka names)."""


@dataclass(frozen=True)
class Topic:
    name: str
    event: type[Event]
    key: str
    partitions: int
    cleanup_policy: Literal["delete", "compact"]
    retention_ms: int | None = None
    description: str = ""
    max_message_bytes: int = SMALL_RECORDS

    def config(self) -> dict[str, str]:
        """Broker-side topic configuration."""
        conf: dict[str, str] = {
            "cleanup.policy": self.cleanup_policy,
            "compression.type": COMPRESSION,
            "max.message.bytes": str(self.max_message_bytes),
        }
        if self.retention_ms is not None:
            conf["retention.ms"] = str(self.retention_ms)
        return conf


GPU_SAMPLES = Topic(
    "ebbtide.gpu-samples",
    GpuSample,
    "node/gpu_uuid",
    6,
    "delete",
    1 * DAY_MS,
    "GPU telemetry from NVML or the simulator",
)
DEMAND_SAMPLES = Topic(
    "ebbtide.demand-samples",
    DemandSample,
    "service",
    3,
    "delete",
    14 * DAY_MS,
    "inference demand per service",
)
JOB_EVENTS = Topic(
    "ebbtide.job-events",
    JobEvent,
    "job_id",
    3,
    "compact",
    None,
    "batch job lifecycle; compacted so the latest event per job survives",
)
CLUSTER_STATE = Topic(
    "ebbtide.cluster-state",
    ClusterState,
    "cluster",
    3,
    "compact",
    None,
    "folded per-cluster state; compacted",
    max_message_bytes=LARGE_RECORDS,
)
FORECASTS = Topic(
    "ebbtide.forecasts",
    DemandForecast,
    "service",
    3,
    "delete",
    7 * DAY_MS,
    "24 h demand forecasts with quantiles",
)
PLANS = Topic(
    "ebbtide.plans",
    HorizonPlan,
    "cluster",
    3,
    "delete",
    7 * DAY_MS,
    "the plan over the whole horizon, in blocks of steps",
    max_message_bytes=LARGE_RECORDS,
)
ALLOCATIONS = Topic(
    "ebbtide.allocations",
    Allocation,
    "cluster",
    3,
    "delete",
    7 * DAY_MS,
    "step 0 of each plan: what the actuators apply",
    max_message_bytes=LARGE_RECORDS,
)
ACTUATIONS = Topic(
    "ebbtide.actuations",
    ActuationResult,
    "cluster/backend",
    3,
    "delete",
    7 * DAY_MS,
    "what the actuators did",
)
INVENTORY = Topic(
    "ebbtide.inventory",
    PoolInventory,
    "cluster",
    3,
    "compact",
    None,
    "pools, nodes and services as a cluster source sees them; compacted",
    max_message_bytes=LARGE_RECORDS,
)
DEAD_LETTERS = Topic(
    "ebbtide.dead-letters",
    DeadLetter,
    "source topic",
    1,
    "delete",
    14 * DAY_MS,
    "records no consumer could read, with the reason",
    max_message_bytes=LARGE_RECORDS,
)

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
