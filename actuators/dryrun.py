"""The dry-run backend: logs what it would do and changes no real cluster.

Place in the loop: a drop-in ``Backend`` for the ``Actuator`` engine. Two modes:

- ``DryRunBackend(inner=backend)``: observes the real cluster through ``inner`` (read-only) and
  plans with ``inner``'s rules, but every change is only logged and recorded in ``log_lines``.
  Use it to see what a plan would do to a live cluster.
- ``DryRunBackend()``: keeps its own in-memory cluster and moves it as if each change had been
  made (so a second apply of the same allocation reports ``already-applied``); useful for
  demos and for exercising the engine without any cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial

import structlog

from actuators.base import PHASE_JOBS, PHASE_PREEMPT, PHASE_SERVICES, Backend, Change
from actuators.observation import Observation, ObservedJob, ObservedService, service_key
from schemas import Allocation, JobAction

log = structlog.get_logger("ebbtide.actuators.dryrun")


class DryRunBackend:
    name = "dry-run"

    def __init__(
        self,
        inner: Backend | None = None,
        *,
        cluster: str = "default",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.inner = inner
        self.cluster = cluster
        self._clock = clock
        self.jobs: dict[str, ObservedJob] = {}
        self.services: dict[str, ObservedService] = {}
        self.log_lines: list[str] = []

    def add_job(self, job_id: str, phase: str = "held", pool: str | None = None, gpus: int = 1) -> None:
        """Seed the in-memory cluster with a job (in-memory mode only)."""
        self.jobs[job_id] = ObservedJob(job_id=job_id, backend_id=job_id, phase=phase, pool=pool, gpus=gpus)  # type: ignore[arg-type]

    def observe(self) -> Observation:
        if self.inner is not None:
            return self.inner.observe()
        return Observation(
            cluster=self.cluster,
            backend=self.name,
            time=self._clock(),
            jobs=dict(self.jobs),
            services=dict(self.services),
        )

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        if self.inner is not None:
            return [self._logged(c) for c in self.inner.plan(allocation, observed)]
        return self._plan_in_memory(allocation, observed)

    def _logged(self, change: Change) -> Change:
        if not change.needed:
            return change

        def execute() -> None:
            self._say(change)

        return replace(change, execute=execute, prepare=None, grace_s=0.0)

    def _say(self, change: Change) -> None:
        line = f"would {change.action} {change.target}: {change.detail}"
        self.log_lines.append(line)
        log.info("dry-run", action=change.action, target=change.target, detail=change.detail)

    def _plan_in_memory(self, allocation: Allocation, observed: Observation) -> list[Change]:
        changes: list[Change] = []
        for s in allocation.services:
            key = service_key(s.service, s.pool)
            have = observed.services.get(key)
            target = f"service/{s.service}/{s.pool}"
            if have is not None and have.replicas == s.replicas:
                changes.append(Change(target=target, action="scale", detail="matches", phase=PHASE_SERVICES))
                continue
            new = ObservedService(
                service=s.service, pool=s.pool, replicas=s.replicas, gpus=s.gpus, plan_id=allocation.plan_id
            )
            changes.append(
                self._change(
                    target,
                    "scale",
                    f"replicas -> {s.replicas}",
                    PHASE_SERVICES,
                    partial(self.services.__setitem__, key, new),
                )
            )
        for j in allocation.jobs:
            target = f"job/{j.job_id}"
            have_job = observed.jobs.get(j.job_id)
            if have_job is None:
                changes.append(
                    Change(
                        target=target,
                        action=j.action.value,
                        detail="unknown job",
                        skip_reason=f"job {j.job_id} not found",
                    )
                )
                continue
            want = {JobAction.RUN: "running", JobAction.HOLD: "held", JobAction.PREEMPT: "held"}[j.action]
            if have_job.phase == want and (j.action != JobAction.RUN or have_job.pool == j.pool):
                changes.append(Change(target=target, action=j.action.value, detail="matches"))
                continue
            if j.action == JobAction.RUN and have_job.phase == "running":
                changes.append(
                    Change(
                        target=target,
                        action="run",
                        detail="running elsewhere",
                        skip_reason=f"running in {have_job.pool}; a running job moves only after a preempt",
                    )
                )
                continue
            if j.action == JobAction.HOLD and have_job.phase == "running":
                changes.append(
                    Change(
                        target=target,
                        action="hold",
                        detail="running",
                        skip_reason="hold applies to waiting jobs; preempt stops a running one",
                    )
                )
                continue
            new_job = have_job.model_copy(
                update={"phase": want, "pool": j.pool or have_job.pool, "plan_id": allocation.plan_id}
            )
            phase = PHASE_PREEMPT if j.action == JobAction.PREEMPT else PHASE_JOBS
            changes.append(
                self._change(
                    target,
                    j.action.value,
                    f"{have_job.phase} -> {want}",
                    phase,
                    partial(self.jobs.__setitem__, j.job_id, new_job),
                )
            )
        return changes

    def _change(
        self, target: str, action: str, detail: str, phase: int, effect: Callable[[], None]
    ) -> Change:
        change = Change(target=target, action=action, detail=detail, phase=phase)

        def execute() -> None:
            self._say(change)
            effect()

        return replace(change, execute=execute)
