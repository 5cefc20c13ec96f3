"""The actuator service: applies each Allocation through a backend and publishes ActuationResults.

Place in the loop: consumes the allocations topic, hands each Allocation to a
:class:`loop.Actuator` (the actuation engine of actuators/ over a dry-run, Kubernetes or Slurm
backend, built by ``actuators.factory.build_actuator``; the simulated cluster in
``ebbtide demo``), and publishes what it did on the actuations topic.

Idempotent on (plan_id, target), with targets named as schemas/targets.py names them (the same
names the backends report): it remembers what it applied, restores that memory at start from its
own results on the actuations topic, and answers a replayed or duplicated Allocation with
``already-applied`` results without calling the backend again. When part of a plan is still to
do, the backend gets the jobs not yet applied and all of the plan's services: a backend
reconciles services as a set (Slurm removes the reservations of services an allocation does not
name), so a service that is already applied travels again and the engine finds it matching
(``already-applied``, nothing executed).

Its memory is bounded: a plan is remembered until ``retain_s`` after its ``valid_until``, by
the data's own time (the newest ``issued_at`` seen: the wall clock of a replay or a simulation
may be anywhere), then forgotten. An Allocation already expired by then (``valid_until`` before
the newest ``issued_at`` less ``retain_s``) and not remembered is superseded by newer plans: it
is answered ``skipped``, never handed to the backend. Plans restored from the actuations topic
are remembered until ``retain_s`` after their result's time (or until replayed, which dates them).

With a ``clock``, an Allocation issued more than ``max_allocation_skew_s`` past it is
dead-lettered (``on_event`` raises ValueError) before it dates anything: otherwise one Allocation
dated 2200 would make every later one "expired: superseded", and nothing would be applied again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from loop import Actuator, Clock
from schemas import ActuationResult, Allocation
from schemas.actuation import Outcome
from schemas.base import Event
from schemas.targets import job_target, parse_target, plan_target, service_target
from schemas.topics import ACTUATIONS, ALLOCATIONS, Topic
from streams.services.runtime import Outgoing

DONE = ("applied", "already-applied")
RETAIN_S = 6 * 3600.0
"""How long past its valid_until a plan's applied targets are remembered (replays come from
uncommitted offsets, minutes old; six hours is 24 steps of 15 minutes)."""


def targets_of(allocation: Allocation) -> list[str]:
    """The targets an allocation names, as schemas/targets.py names them."""
    services = [service_target(s.service, s.pool) for s in allocation.services]
    return services + [job_target(j.job_id) for j in allocation.jobs]


@dataclass
class ActuatorProcessor:
    backend: Actuator
    backend_name: str = "dry-run"
    name: str = "actuator"
    inputs: tuple[Topic, ...] = (ALLOCATIONS,)
    done: set[tuple[str, str]] = field(default_factory=set)
    plans_done: set[str] = field(default_factory=set)
    backend_calls: int = 0
    replays: int = 0
    expired: int = 0
    retain_s: float = RETAIN_S
    expires: dict[str, datetime] = field(default_factory=dict)
    targets: dict[str, set[str]] = field(default_factory=dict)
    newest_issued_at: datetime | None = None
    clock: Clock | None = None
    max_allocation_skew_s: float = 86_400.0

    def remember(self, results: Iterable[Event]) -> None:
        """Restore what was applied from earlier ActuationResults (read back at start)."""
        for result in results:
            if isinstance(result, ActuationResult) and result.outcome in DONE:
                self._done(result.plan_id, result.target)
                self.expires.setdefault(result.plan_id, result.time)

    def _done(self, plan_id: str, target: str) -> None:
        self.done.add((plan_id, target))
        self.plans_done.add(plan_id)
        self.targets.setdefault(plan_id, set()).add(target)

    def _advance(self, allocation: Allocation) -> bool:
        """Date the plan, forget the plans expired by the newest issued_at; whether this one expired."""
        if self.newest_issued_at is None or allocation.issued_at > self.newest_issued_at:
            self.newest_issued_at = allocation.issued_at
        horizon = self.newest_issued_at - timedelta(seconds=self.retain_s)
        for plan_id in [p for p, until in self.expires.items() if until < horizon]:
            del self.expires[plan_id]
            self.plans_done.discard(plan_id)
            for target in self.targets.pop(plan_id, ()):
                self.done.discard((plan_id, target))
        if allocation.plan_id not in self.plans_done and allocation.valid_until < horizon:
            return True
        self.expires[allocation.plan_id] = allocation.valid_until
        return False

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        assert isinstance(event, Allocation)
        allocation = event
        self._check_time(allocation)
        plan_id, now = allocation.plan_id, datetime.now(UTC)
        if self._advance(allocation):
            self.expired += 1
            return [self._note(allocation, plan_target(plan_id), "skipped", now, "expired: superseded")]
        done = [t for t in targets_of(allocation) if (plan_id, t) in self.done]
        todo_jobs = [j for j in allocation.jobs if job_target(j.job_id) not in done]
        services_done = all(service_target(s.service, s.pool) in done for s in allocation.services)
        if plan_id in self.plans_done and not todo_jobs and services_done:
            self.replays += 1
            return [self._note(allocation, t, "already-applied", now) for t in done]
        # Services travel whole (see the module docstring); only the jobs already applied stay back.
        jobs_done = [t for t in done if parse_target(t).kind == "job"]
        out = [self._note(allocation, t, "already-applied", now) for t in jobs_done]
        partial = allocation.model_copy(update={"jobs": todo_jobs})
        self.backend_calls += 1
        results = self.backend.apply(partial)
        self.plans_done.add(plan_id)
        for result in results:
            if result.outcome in DONE:
                self._done(result.plan_id, result.target)
            out.append((ACTUATIONS, result))
        if not results:
            marker = plan_target(plan_id)
            out.append(self._note(allocation, marker, "applied", now))
            self._done(plan_id, marker)
        return out

    def _check_time(self, allocation: Allocation) -> None:
        """ValueError (a dead letter) when the Allocation is issued too far past the clock."""
        if self.clock is None:
            return
        now = self.clock.now()
        if allocation.issued_at > now + timedelta(seconds=self.max_allocation_skew_s):
            raise ValueError(
                f"issued_at: {allocation.issued_at.isoformat()} is more than "
                f"{self.max_allocation_skew_s:g} s past the actuator's clock ({now.isoformat()}; "
                "setting actuator.max_allocation_skew_s)"
            )

    def _note(
        self, allocation: Allocation, target: str, outcome: Outcome, now: datetime, error: str | None = None
    ) -> Outgoing:
        """An ActuationResult that changed nothing (``action="none"``) for ``target``."""
        result = ActuationResult(
            cluster=allocation.cluster,
            backend=self.backend_name,
            plan_id=allocation.plan_id,
            action="none",
            target=target,
            outcome=outcome,
            time=now,
            error=error,
        )
        return (ACTUATIONS, result)

    def on_idle(self) -> Iterable[Outgoing]:
        return ()

    def pending(self) -> bool:
        return False
