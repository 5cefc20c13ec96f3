"""A batch job's life inside the simulator: run, checkpoint, preemption and the work it keeps.

Truth (the job's real GPU-time) lives here and never reaches a policy; the snapshot exposes the
estimate, the kept work and the work at risk since the last checkpoint, as a real scheduler would.
Work since the last checkpoint is lost on preemption, counted once, and a restarted job spends
its restart cost (busy GPUs, no progress) before it moves again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import JobSpec, JobStatus
from simulator.workload import SimJob


@dataclass
class LiveJob:
    sim: SimJob
    status: JobStatus = JobStatus.QUEUED
    pool: str | None = None
    placement: dict[int, int] = field(default_factory=dict)
    done_gpu_s: float = 0.0
    since_checkpoint_gpu_s: float = 0.0
    wall_since_checkpoint_s: float = 0.0
    restart_left_s: float = 0.0
    started_at_s: float | None = None
    ever_started: bool = False
    preemptions: int = 0
    finished_at_s: float | None = None
    gross_progress_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    restart_overhead_gpu_s: float = 0.0

    @property
    def spec(self) -> JobSpec:
        return self.sim.spec

    def cheapest_stop_first(self) -> tuple[float, float, str]:
        """Sort key of the cluster's own preemptions (the in-step autoscaler's, a lost replica's
        fail-over): the lowest weight first, then the least work since the last checkpoint."""
        return (self.spec.priority_weight, self.since_checkpoint_gpu_s, self.job_id)

    @property
    def job_id(self) -> str:
        return self.sim.spec.job_id

    def start(self, pool: str, placement: dict[int, int], t_s: float) -> None:
        self.status = JobStatus.RUNNING
        self.pool = pool
        self.placement = dict(placement)
        self.started_at_s = t_s
        self.wall_since_checkpoint_s = 0.0
        self.restart_left_s = self.spec.restart_cost_s if self.ever_started else 0.0
        self.ever_started = True

    def stop(self) -> float:
        """Preempt or kill: drop the work since the last checkpoint; return it (counted once)."""
        lost = self.since_checkpoint_gpu_s
        self.done_gpu_s -= lost
        self.lost_gpu_s += lost
        self.since_checkpoint_gpu_s = 0.0
        self.wall_since_checkpoint_s = 0.0
        self.status = JobStatus.QUEUED
        self.pool = None
        self.placement = {}
        self.started_at_s = None
        self.preemptions += 1
        return lost

    def run_for(self, t_s: float, dt_s: float) -> tuple[float, float]:
        """Advance a running job by one tick; return (progress GPU-s, restart overhead GPU-s)."""
        gang = self.spec.gpus
        restart = min(self.restart_left_s, dt_s)
        self.restart_left_s -= restart
        run_s = dt_s - restart
        work = min(gang * run_s, max(self.sim.true_gpu_s - self.done_gpu_s, 0.0))
        self.done_gpu_s += work
        self.since_checkpoint_gpu_s += work
        self.gross_progress_gpu_s += work
        self.restart_overhead_gpu_s += gang * restart
        interval = self.spec.checkpoint_interval_s
        self.wall_since_checkpoint_s += dt_s
        if interval is not None and self.wall_since_checkpoint_s >= interval:
            self.since_checkpoint_gpu_s = 0.0
            self.wall_since_checkpoint_s = 0.0
        if self.done_gpu_s >= self.sim.true_gpu_s - 1e-6:
            self.status = JobStatus.FINISHED
            self.finished_at_s = t_s + restart + (work / gang if gang else 0.0)
            self.since_checkpoint_gpu_s = 0.0
        return work, gang * restart
