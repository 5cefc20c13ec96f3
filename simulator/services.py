"""Inference capacity in the simulator: replicas per pool, start-up lead time, and sharing.

A capacity increase becomes ready only ``startup_s`` after the step that asked for it (model
load); the GPUs are busy meanwhile. Decreases are immediate. In a pool without time-slicing a
service holds whole GPUs (rounded up to whole replicas); in a pool with max_share > 1 the
fractional parts of services share GPUs and pay the interference curve of optimizer.interference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optimizer.interference import InterferenceCurve
from schemas import ServiceSpec
from simulator.pools import sharing_footprint


@dataclass
class PoolCapacity:
    ready_gpus: float = 0.0
    pending: list[tuple[float, float]] = field(default_factory=list)
    efficiency: float = 1.0

    @property
    def footprint(self) -> float:
        return self.ready_gpus + sum(g for _, g in self.pending)

    def set_target(self, target: float, now_s: float, startup_s: float) -> None:
        current = self.footprint
        if target > current + 1e-9:
            self.pending.append((now_s + startup_s, target - current))
            return
        cut = current - target
        while cut > 1e-9 and self.pending:
            ready_at, gpus = self.pending.pop()
            if gpus > cut:
                self.pending.append((ready_at, gpus - cut))
                cut = 0.0
            else:
                cut -= gpus
        self.ready_gpus = max(self.ready_gpus - cut, 0.0)

    def promote(self, t_s: float) -> None:
        if self.pending and any(ready_at <= t_s for ready_at, _ in self.pending):
            self.ready_gpus += sum(g for at, g in self.pending if at <= t_s)
            self.pending = [(at, g) for at, g in self.pending if at > t_s]

    def effective_ready(self) -> float:
        return self.ready_gpus * self.efficiency


def round_to_pool(spec: ServiceSpec, gpus: float, max_share: int) -> float:
    """Physical request of a service in a pool: whole replicas unless the pool time-slices."""
    if max_share > 1:
        return max(gpus, 0.0)
    per = spec.gpus_per_replica
    return float(math.ceil(max(gpus, 0.0) / per - 1e-9) * per)


def pool_physical_gpus(
    targets: dict[str, float], specs: dict[str, ServiceSpec], max_share: int, curve: InterferenceCurve
) -> tuple[int, dict[str, float]]:
    """Whole GPUs the services take in one pool, and each service's capacity efficiency there."""
    if max_share <= 1:
        return math.ceil(sum(targets.values()) - 1e-9), {s: 1.0 for s in targets}
    wholes = {s: math.floor(g + 1e-9) for s, g in targets.items()}
    fractions = {s: g - wholes[s] for s, g in targets.items() if g - wholes[s] > 1e-9}
    shared, tenants = sharing_footprint(list(fractions.values()), max_share)
    classes = [specs[s].bandwidth_class for s in fractions]
    per_tenant = curve.efficiency(tenants, classes)
    efficiency: dict[str, float] = {}
    for s, g in targets.items():
        if g <= 1e-9:
            efficiency[s] = 1.0
            continue
        frac = fractions.get(s, 0.0)
        factor = per_tenant
        if specs[s].latency_critical:
            factor *= curve.latency_critical_capacity_factor(tenants, specs[s].max_cotenants)
        efficiency[s] = (wholes[s] + frac * factor) / g
    return sum(wholes.values()) + shared, efficiency
