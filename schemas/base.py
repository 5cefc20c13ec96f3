"""Shared building blocks of the event contracts: the strict base model and checked field types.

Every event inherits :class:`Event`: unknown fields, wrong types, NaN and infinity are rejected,
and times must carry a UTC offset of zero and lie between ``EARLIEST_TIME`` and ``LATEST_TIME``.
Units live in field names (``_s``, ``_gpus``, ``_mib``). Every quantity has an upper bound
(schemas/bounds.py): the bounded types below carry them, so each field names its own limit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from schemas import bounds as b


def _require_utc(value: datetime) -> datetime:
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("time must be timezone-aware UTC (got a naive datetime)")
    if offset != timedelta(0):
        raise ValueError(f"time must be UTC (got offset {offset})")
    if not b.EARLIEST_TIME <= value <= b.LATEST_TIME:
        raise ValueError(
            f"time {value.isoformat()} is outside "
            f"{b.EARLIEST_TIME.isoformat()} .. {b.LATEST_TIME.isoformat()}"
        )
    return value


UtcDatetime = Annotated[
    datetime,
    AfterValidator(_require_utc),
    Field(
        json_schema_extra={
            "x-earliest": b.EARLIEST_TIME.isoformat(),
            "x-latest": b.LATEST_TIME.isoformat(),
        }
    ),
]
"""A timezone-aware datetime whose offset is zero, within EARLIEST_TIME .. LATEST_TIME."""

NonNegFloat = Annotated[float, Field(ge=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0.0)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]

# Bounded quantities (schemas/bounds.py says why each bound is what it is).
PoolGpus = Annotated[int, Field(ge=0, le=b.MAX_POOL_GPUS)]
PosPoolGpus = Annotated[int, Field(ge=1, le=b.MAX_POOL_GPUS)]
PoolGpusFloat = Annotated[float, Field(ge=0.0, le=float(b.MAX_POOL_GPUS))]
GangGpus = Annotated[int, Field(ge=1, le=b.MAX_GANG_GPUS)]
NonNegGangGpus = Annotated[int, Field(ge=0, le=b.MAX_GANG_GPUS)]
NodeGpus = Annotated[int, Field(ge=0, le=b.MAX_NODE_GPUS)]
PosNodeGpus = Annotated[int, Field(ge=1, le=b.MAX_NODE_GPUS)]
GpuIndex = Annotated[int, Field(ge=0, lt=b.MAX_NODE_GPUS)]
Share = Annotated[int, Field(ge=1, le=b.MAX_SHARE)]
Replicas = Annotated[int, Field(ge=0, le=b.MAX_REPLICAS)]
DemandGpus = Annotated[float, Field(ge=0.0, le=b.MAX_DEMAND_GPUS)]
PriorityWeight = Annotated[float, Field(gt=0.0, le=b.MAX_PRIORITY_WEIGHT)]
GpuSeconds = Annotated[float, Field(ge=0.0, le=b.MAX_GPU_SECONDS)]
PosGpuSeconds = Annotated[float, Field(gt=0.0, le=b.MAX_GPU_SECONDS)]
DurationS = Annotated[float, Field(ge=0.0, le=b.MAX_DURATION_S)]
PosDurationS = Annotated[float, Field(gt=0.0, le=b.MAX_DURATION_S)]
StepS = Annotated[int, Field(ge=1, le=b.MAX_STEP_S)]
HorizonSteps = Annotated[int, Field(ge=1, le=b.MAX_HORIZON_STEPS)]
StepIndex = Annotated[int, Field(ge=0, lt=b.MAX_HORIZON_STEPS)]
RequestsPerS = Annotated[float, Field(ge=0.0, le=b.MAX_REQUESTS_PER_S)]
LatencyMs = Annotated[float, Field(ge=0.0, le=b.MAX_LATENCY_MS)]
MemoryMib = Annotated[float, Field(ge=0.0, le=b.MAX_GPU_MEMORY_MIB)]
PowerW = Annotated[float, Field(ge=0.0, le=b.MAX_POWER_W)]
ClockMhz = Annotated[float, Field(ge=0.0, le=b.MAX_CLOCK_MHZ)]
Processes = Annotated[int, Field(ge=0, le=b.MAX_PROCESSES)]
Attempts = Annotated[int, Field(ge=0, le=b.MAX_ATTEMPTS)]
SolveMs = Annotated[float, Field(ge=0.0, le=b.MAX_SOLVE_MS)]
Relative = Annotated[float, Field(ge=0.0, le=b.MAX_RELATIVE)]
Partition = Annotated[int, Field(ge=0, le=b.MAX_PARTITION)]
Offset = Annotated[int, Field(ge=0, le=b.MAX_OFFSET)]

SCHEMA_VERSION: Literal[1] = 1


class Event(BaseModel):
    """Base of every wire event: strict, closed, immutable, finite, versioned."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
    )

    schema_version: Literal[1] = SCHEMA_VERSION


class Part(BaseModel):
    """Base of nested parts of events: same strictness, no version of its own."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    def revised(self, **changes: Any) -> Self:
        """A copy with ``changes``, validated as a new part would be (``model_copy(update=...)``
        does not validate). A record built from validated parts does not validate them again."""
        return self.model_validate({**self.model_dump(), **changes})
