"""The actuator service: applies each Allocation through a backend and publishes ActuationResults.

A thin adapter over an :class:`loop.Actuator` backend (dry-run here; Kubernetes or Slurm
from actuators/; the simulated cluster in ``ebbtide demo``). Idempotent on (plan_id, target): it
remembers what it applied, restores that memory at start from its own results on the actuations
topic, and answers a replayed or duplicated Allocation with ``already-applied`` results without
calling the backend again. Only the decisions not yet applied reach the backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from loop import Actuator
from schemas import ActuationResult, Allocation, JobDecision, ServiceDecision
from schemas.actuation import Outcome
from schemas.base import Event
from schemas.topics import ACTUATIONS, ALLOCATIONS, Topic
from streams.services.runtime import Outgoing

DONE = ("applied", "already-applied")


def service_target(decision: ServiceDecision) -> str:
    return f"service/{decision.service}@{decision.pool}"


def job_target(decision: JobDecision) -> str:
    return f"job/{decision.job_id}"


def targets_of(allocation: Allocation) -> list[str]:
    return [service_target(s) for s in allocation.services] + [job_target(j) for j in allocation.jobs]


@dataclass
class DryRunBackend:
    """Applies nothing; reports every decision of the allocation as applied (and remembers them)."""

    name: str = "dry-run"
    applied: list[tuple[str, str]] = field(default_factory=list)

    @property
    def applied_plans(self) -> set[str]:
        return {plan_id for plan_id, _ in self.applied}

    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]:
        now = datetime.now(UTC)
        results = []
        for target, action in [(service_target(s), f"scale:{s.replicas}") for s in allocation.services] + [
            (job_target(j), j.action.value) for j in allocation.jobs
        ]:
            self.applied.append((allocation.plan_id, target))
            results.append(
                ActuationResult(
                    cluster=allocation.cluster,
                    backend=self.name,
                    plan_id=allocation.plan_id,
                    action=action,
                    target=target,
                    outcome="applied",
                    time=now,
                )
            )
        return results


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

    def remember(self, results: Iterable[Event]) -> None:
        """Restore what was applied from earlier ActuationResults (read back at start)."""
        for result in results:
            if isinstance(result, ActuationResult) and result.outcome in DONE:
                self.done.add((result.plan_id, result.target))
                self.plans_done.add(result.plan_id)

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        assert isinstance(event, Allocation)
        allocation = event
        now = datetime.now(UTC)
        if allocation.plan_id in self.plans_done:
            todo_services = [
                s for s in allocation.services if (allocation.plan_id, service_target(s)) not in self.done
            ]
            todo_jobs = [j for j in allocation.jobs if (allocation.plan_id, job_target(j)) not in self.done]
        else:
            todo_services, todo_jobs = list(allocation.services), list(allocation.jobs)
        skipped = [t for t in targets_of(allocation) if (allocation.plan_id, t) in self.done]
        out = [self._note(allocation, t, "already-applied", now) for t in skipped]
        if not todo_services and not todo_jobs and (skipped or allocation.plan_id in self.plans_done):
            self.replays += 1
            return out
        partial = allocation.model_copy(update={"services": todo_services, "jobs": todo_jobs})
        self.backend_calls += 1
        results = self.backend.apply(partial)
        self.plans_done.add(allocation.plan_id)
        for result in results:
            if result.outcome in DONE:
                self.done.add((result.plan_id, result.target))
            out.append((ACTUATIONS, result))
        if not results:
            out.append(self._note(allocation, f"plan/{allocation.plan_id}", "applied", now))
            self.done.add((allocation.plan_id, f"plan/{allocation.plan_id}"))
        return out

    def _note(self, allocation: Allocation, target: str, outcome: Outcome, now: datetime) -> Outgoing:
        """An ActuationResult that changed nothing (``action="none"``) for ``target``."""
        result = ActuationResult(
            cluster=allocation.cluster,
            backend=self.backend_name,
            plan_id=allocation.plan_id,
            action="none",
            target=target,
            outcome=outcome,
            time=now,
        )
        return (ACTUATIONS, result)

    def on_idle(self) -> Iterable[Outgoing]:
        return ()

    def pending(self) -> bool:
        return False
