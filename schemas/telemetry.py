"""Telemetry events: what the collector reads from GPUs and what inference services report.

GpuSample (keyed ``node/gpu_uuid``) comes from NVML or the simulator; DemandSample (keyed by
service) is the demand signal the forecaster learns from.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from schemas.base import (
    ClockMhz,
    DemandGpus,
    Event,
    GpuIndex,
    LatencyMs,
    MemoryMib,
    Name,
    PowerW,
    Processes,
    RequestsPerS,
    Share,
    UtcDatetime,
)


class GpuSample(Event):
    """One reading of one GPU."""

    cluster: Name
    pool: Name
    node: Name
    gpu_index: GpuIndex
    gpu_uuid: Name
    time: UtcDatetime
    utilization_pct: float = Field(ge=0.0, le=100.0)
    memory_used_mib: MemoryMib
    memory_total_mib: MemoryMib
    power_w: PowerW
    sm_clock_mhz: ClockMhz = 0.0
    mem_clock_mhz: ClockMhz = 0.0
    timeslice_replicas: Share = 1
    processes: Processes = 0

    @property
    def key(self) -> str:
        return f"{self.node}/{self.gpu_uuid}"


class DemandSample(Event):
    """Demand of one inference service at one time, in requests and in busy GPUs."""

    cluster: Name
    service: Name
    time: UtcDatetime
    requests_per_s: RequestsPerS
    gpus_busy: DemandGpus
    latency_ms_p50: LatencyMs | None = None
    latency_ms_p99: LatencyMs | None = None

    @model_validator(mode="after")
    def _latency_quantiles_ordered(self) -> DemandSample:
        p50, p99 = self.latency_ms_p50, self.latency_ms_p99
        if p50 is not None and p99 is not None and p50 > p99:
            raise ValueError(f"latency_ms_p99: {p99} is below latency_ms_p50 {p50}")
        return self

    @property
    def key(self) -> str:
        return self.service
