"""The simulator's books: GPU-time per pool and tick, work lost, stops by cause.

Every tick and pool records capacity (GPUs up x tick), busy (GPUs held by jobs, including a
restarting job's overhead and a finishing job's tail, and by inference replicas, including ones
still loading) and useful GPU-time (batch progress and inference demand actually served). Idle is
capacity minus busy. Work lost to a stop is recorded once, when the stop happens, also by cause.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

EPS_GPU_S = 1e-6


@dataclass
class StepRow:
    step: int
    pool: str
    capacity_gpu_s: float = 0.0
    busy_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0


@dataclass
class Ledger:
    pools: Mapping[str, object]
    rows: list[StepRow] = field(default_factory=list)
    step: int = 0
    capacity_gpu_s: float = 0.0
    busy_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    demand_gpu_s: float = 0.0
    served_gpu_s: float = 0.0
    batch_progress_gpu_s: float = 0.0
    restart_overhead_gpu_s: float = 0.0
    lost_work_gpu_s: float = 0.0
    stops: Counter[str] = field(default_factory=Counter)
    lost_by_cause: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    refused: int = 0
    gang_blocked: int = 0
    overcommit_ticks: int = 0

    def __post_init__(self) -> None:
        self._current = {p: StepRow(0, p) for p in self.pools}

    def record_tick(self, pool: str, capacity_gpu_s: float, busy_gpu_s: float, useful_gpu_s: float) -> None:
        if busy_gpu_s > capacity_gpu_s + EPS_GPU_S:
            self.overcommit_ticks += 1
        row = self._current[pool]
        row.capacity_gpu_s += capacity_gpu_s
        row.busy_gpu_s += busy_gpu_s
        row.idle_gpu_s += capacity_gpu_s - busy_gpu_s
        row.useful_gpu_s += useful_gpu_s
        self.capacity_gpu_s += capacity_gpu_s
        self.busy_gpu_s += busy_gpu_s
        self.useful_gpu_s += useful_gpu_s

    def record_stop(self, cause: str, lost_gpu_s: float) -> None:
        self.stops[cause] += 1
        self.lost_work_gpu_s += lost_gpu_s
        self.lost_by_cause[cause] += lost_gpu_s
        self.useful_gpu_s -= lost_gpu_s

    def close_step(self) -> None:
        self.rows.extend(self._current.values())
        self.step += 1
        self._current = {p: StepRow(self.step, p) for p in self.pools}
