"""Simulated GPU pools: nodes of N GPUs, which of them are up, and where gangs fit.

Planned maintenance takes the highest-numbered nodes of a pool out for a known window (the
state shows it in PoolState.windows); failures take random nodes out for a repair time and are
not announced. Both schedules are drawn once from the scenario seed, so every policy meets the
same outages. Gang placement is node-aware: a gang of g <= N GPUs needs one node with g free
GPUs; a larger gang needs whole free nodes for all but its last g mod N GPUs. That placement rule
is the one the planner assumes (optimizer/nodes.py), defined once there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator.scenario import Scenario


@dataclass(frozen=True)
class Outage:
    start_s: float
    end_s: float
    node: int
    planned: bool


@dataclass
class SimPool:
    name: str
    gpu_type: str
    nodes: int
    gpus_per_node: int
    max_share: int
    outages: list[Outage] = field(default_factory=list)

    @property
    def gpus_total(self) -> int:
        return self.nodes * self.gpus_per_node

    def up_nodes(self, t_s: float) -> list[bool]:
        up = [True] * self.nodes
        for o in self.outages:
            if o.start_s <= t_s < o.end_s:
                up[o.node] = False
        return up

    def gpus_up(self, t_s: float) -> int:
        return sum(self.up_nodes(t_s)) * self.gpus_per_node


def build_pools(scenario: Scenario, rng: np.random.Generator, horizon_s: float) -> dict[str, SimPool]:
    pools = {
        p.name: SimPool(p.name, p.gpu_type, p.nodes, p.gpus_per_node, p.max_share) for p in scenario.pools
    }
    for m in scenario.maintenance:
        pool = pools[m.pool]
        start = m.start_hour * 3600.0
        for node in range(max(pool.nodes - m.nodes_out, 0), pool.nodes):
            pool.outages.append(Outage(start, start + m.duration_hours * 3600.0, node, planned=True))
    mtbf_s = scenario.failures.node_mtbf_hours * 3600.0
    if mtbf_s > 0:
        repair_s = scenario.failures.repair_hours * 3600.0
        for name in sorted(pools):
            pool = pools[name]
            for node in range(pool.nodes):
                t = 0.0
                while True:
                    t += float(rng.exponential(mtbf_s))
                    if t >= horizon_s:
                        break
                    pool.outages.append(Outage(t, t + repair_s, node, planned=False))
                    t += repair_s
    for pool in pools.values():
        pool.outages.sort(key=lambda o: (o.start_s, o.node))
    return pools


def sharing_footprint(fractions: list[float], max_share: int) -> tuple[int, float]:
    """GPUs used by the fractional parts of shared services, and the mean tenants per shared GPU."""
    parts = [f for f in fractions if f > 1e-9]
    if not parts:
        return 0, 1.0
    shared = max(math.ceil(sum(parts) - 1e-9), math.ceil(len(parts) / max_share))
    return shared, len(parts) / shared
