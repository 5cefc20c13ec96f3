"""The dry-run backend: logs what it would do and changes no real cluster.

Place in the loop: a drop-in ``Backend`` for the ``ActuationEngine`` (actuators/engine.py), the
one dry run of the project (the actuator service's default, through
``actuators.factory.build_actuator``). Every change it would make is logged, kept in
``log_lines`` and recorded as ``(plan_id, target)`` in ``applied``. Two modes:

- ``DryRunBackend(inner=backend)``: observes the real cluster through ``inner`` (read-only) and
  plans with ``inner``'s rules, but every change is only logged and recorded in ``log_lines``.
  Use it to see what a plan would do to a live cluster.
- ``DryRunBackend()``: keeps its own in-memory cluster and moves it as if each change had been
  made (so a second apply of the same allocation reports ``already-applied``); useful for
  demos and for exercising the engine without any cluster. With ``adopt_unknown_jobs`` a job it
  has not seen is taken as waiting (``held``, in no pool) rather than skipped as unknown: the
  actuator service's dry run has no cluster to find its jobs in; it then forgets the jobs an
  allocation no longer names (finished ones), so its memory follows the active jobs.

Its records are bounded: ``applied`` and ``log_lines`` keep the latest ``DRY_RUN_KEEP`` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial

import structlog

from actuators.base import PHASE_JOBS, PHASE_PREEMPT, PHASE_SERVICES, Backend, Change
from actuators.observation import Observation, ObservedJob, ObservedService, service_key
from schemas import Allocation, JobAction, JobDecision, ServiceDecision
from schemas.targets import job_target, service_target

log = structlog.get_logger("ebbtide.actuators.dryrun")

DRY_RUN_KEEP = 10_000
"""How many of the latest records ``applied`` and ``log_lines`` keep (a day of 2,000 jobs is
some 200,000 changes: unbounded, the records alone grew by tens of MiB a day)."""


class DryRunBackend:
    name = "dry-run"

    def __init__(
        self,
        inner: Backend | None = None,
        *,
        cluster: str = "default",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        adopt_unknown_jobs: bool = False,
    ) -> None:
        self.inner = inner
        self.cluster = cluster
        self.adopt_unknown_jobs = adopt_unknown_jobs
        self._clock = clock
        self.applied: list[tuple[str, str]] = []
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
            return [self._logged(allocation, c) for c in self.inner.plan(allocation, observed)]
        return self._plan_in_memory(allocation, observed)

    def _logged(self, allocation: Allocation, change: Change) -> Change:
        if not change.needed:
            return change

        def execute() -> None:
            self._say(allocation.plan_id, change)

        return replace(change, execute=execute, prepare=None, grace_s=0.0)

    def _say(self, plan_id: str, change: Change) -> None:
        line = f"would {change.action} {change.target}: {change.detail}"
        self.log_lines.append(line)
        self.applied.append((plan_id, change.target))
        if len(self.applied) > 2 * DRY_RUN_KEEP:  # trimmed in halves: amortised O(1) per record
            del self.applied[:-DRY_RUN_KEEP]
            del self.log_lines[:-DRY_RUN_KEEP]
        log.info("dry-run", action=change.action, target=change.target, detail=change.detail)

    def _plan_in_memory(self, allocation: Allocation, observed: Observation) -> list[Change]:
        if self.adopt_unknown_jobs:  # jobs the plan no longer names are gone (adopted again if named)
            named = {j.job_id for j in allocation.jobs}
            for job_id in [j for j in self.jobs if j not in named]:
                del self.jobs[job_id]
        changes = [self._plan_service(allocation, s, observed) for s in allocation.services]
        return changes + [self._plan_job(allocation, j, observed) for j in allocation.jobs]

    def _plan_service(self, allocation: Allocation, s: ServiceDecision, observed: Observation) -> Change:
        key = service_key(s.service, s.pool)
        have = observed.services.get(key)
        target = service_target(s.service, s.pool)
        if have is not None and have.replicas == s.replicas:
            return Change(target=target, action="scale", detail="matches", phase=PHASE_SERVICES)
        new = ObservedService(
            service=s.service, pool=s.pool, replicas=s.replicas, gpus=s.gpus, plan_id=allocation.plan_id
        )
        effect = partial(self.services.__setitem__, key, new)
        return self._change(allocation, target, "scale", f"replicas -> {s.replicas}", PHASE_SERVICES, effect)

    def _plan_job(self, allocation: Allocation, j: JobDecision, observed: Observation) -> Change:
        target, action = job_target(j.job_id), j.action.value
        have = observed.jobs.get(j.job_id)
        if have is None and self.adopt_unknown_jobs:
            have = ObservedJob(job_id=j.job_id, backend_id=j.job_id, phase="held", gpus=j.gpus)
        if have is None:
            return Change(target, action, "unknown job", skip_reason=f"job {j.job_id} not found")
        want = {JobAction.RUN: "running", JobAction.HOLD: "held", JobAction.PREEMPT: "held"}[j.action]
        if have.phase == want and (j.action != JobAction.RUN or have.pool == j.pool):
            return Change(target=target, action=action, detail="matches")
        if j.action == JobAction.RUN and have.phase == "running":
            why = f"running in {have.pool}; a running job moves only after a preempt"
            return Change(target, "run", "running elsewhere", skip_reason=why)
        if j.action == JobAction.HOLD and have.phase == "running":
            why = "hold applies to waiting jobs; preempt stops a running one"
            return Change(target, "hold", "running", skip_reason=why)
        update = {"phase": want, "pool": j.pool or have.pool, "plan_id": allocation.plan_id}
        new = have.model_copy(update=update)
        phase = PHASE_PREEMPT if j.action == JobAction.PREEMPT else PHASE_JOBS
        effect = partial(self.jobs.__setitem__, j.job_id, new)
        return self._change(allocation, target, action, f"{have.phase} -> {want}", phase, effect)

    def _change(
        self,
        allocation: Allocation,
        target: str,
        action: str,
        detail: str,
        phase: int,
        effect: Callable[[], None],
    ) -> Change:
        change = Change(target=target, action=action, detail=detail, phase=phase)

        def execute() -> None:
            self._say(allocation.plan_id, change)
            effect()

        return replace(change, execute=execute)
