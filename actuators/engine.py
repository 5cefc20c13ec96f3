"""The actuator engine: applies one Allocation through any Backend, idempotently and safely.

Place in the loop: :class:`ActuationEngine` is what the loop's ``loop.Actuator`` port is in
production: ``ControlLoop`` (loop/control.py) or the actuator service
(streams/services/actuator.py) calls ``apply(allocation)`` with step 0 of the plan, and the
returned ``ActuationResult`` records go to the actuation topic. Every backend (Kubernetes,
Slurm, dry run) goes through it; targets are named as schemas/targets.py names them.

What the engine guarantees, whatever the backend:

- Idempotent on (plan_id, target): each target is compared with what the backend observes now,
  so applying the same allocation twice changes nothing the second time (``already-applied``).
  The state lives in the cluster (labels, annotations, job fields), so this survives restarts.
- Order within a step: preemptions (checkpoint signal, one shared grace period, then the stop),
  then inference capacity, then batch holds and starts.
- A bound on changes per step: changes beyond ``max_changes_per_step`` are ``skipped``.
- Temporary errors are retried with exponential backoff, re-observing before each new attempt
  (so a half-done change is finished, not redone); after the last attempt the target is
  reported ``retrying`` (the next apply picks it up). Permanent errors are reported ``failed``
  and never block the other targets.
- An allocation for another cluster, or one past its ``valid_until``, changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from actuators.base import Backend, Change, PermanentError, TemporaryError
from actuators.observation import Observation, job_events
from schemas import ActuationResult, Allocation, JobEvent
from schemas.actuation import Outcome
from schemas.targets import job_target, service_target

log = structlog.get_logger("ebbtide.actuators")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts: must be >= 1, got {self.attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("base_delay_s/max_delay_s: must be >= 0")

    def delay_s(self, attempt: int) -> float:
        """Backoff before attempt ``attempt + 1`` (attempt counts from 1)."""
        return float(min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1))))


def targets_of(allocation: Allocation) -> list[str]:
    """The targets an allocation names (schemas/targets.py), as every backend names them."""
    names = [service_target(s.service, s.pool) for s in allocation.services]
    return names + [job_target(j.job_id) for j in allocation.jobs]


class ActuationEngine:
    """Applies Allocations through one backend: implements the loop's ``loop.Actuator`` port.

    See the module docstring for the guarantees.
    """

    def __init__(
        self,
        backend: Backend,
        cluster: str,
        *,
        max_changes_per_step: int = 50,
        retry: RetryPolicy | None = None,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_changes_per_step < 1:
            raise ValueError(f"max_changes_per_step: must be >= 1, got {max_changes_per_step}")
        self.backend = backend
        self.cluster = cluster
        self.max_changes_per_step = max_changes_per_step
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._last_observation: Observation | None = None

    # -- observing -------------------------------------------------------------------------

    def observe_events(self) -> tuple[Observation, list[JobEvent]]:
        """Observe now and return the JobEvents since the previous observation."""
        current = self._observe_with_retry()
        events = job_events(self._last_observation, current)
        self._last_observation = current
        return current, events

    def _observe_with_retry(self) -> Observation:
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return self.backend.observe()
            except TemporaryError:
                if attempt == self.retry.attempts:
                    raise
                self._sleep(self.retry.delay_s(attempt))
        raise AssertionError("unreachable")

    # -- applying --------------------------------------------------------------------------

    def apply(self, allocation: Allocation) -> list[ActuationResult]:
        now = self._clock()
        if allocation.cluster != self.cluster:
            return self._all(allocation, "skipped", f"allocation is for cluster {allocation.cluster!r}")
        if now >= allocation.valid_until:
            return self._all(
                allocation, "skipped", f"allocation expired at {allocation.valid_until.isoformat()}"
            )
        try:
            observed = self._observe_with_retry()
        except TemporaryError as exc:
            return self._all(allocation, "retrying", f"observe failed: {exc}", attempt=self.retry.attempts)
        except Exception as exc:
            return self._all(allocation, "failed", f"observe failed: {exc}", permanent=True)
        changes = sorted(self.backend.plan(allocation, observed), key=lambda c: c.phase)
        results, to_run = self._triage(allocation, changes)
        self._prepare(allocation, to_run)
        for change in to_run:
            results[change.target] = self._execute_with_retry(allocation, change)
        ordered = [results[c.target] for c in changes if c.target in results]
        for result in ordered:
            log.info(
                "actuation",
                backend=result.backend,
                plan_id=result.plan_id,
                target=result.target,
                action=result.action,
                outcome=result.outcome,
                attempt=result.attempt,
                error=result.error,
            )
        return ordered

    def _triage(
        self, allocation: Allocation, changes: Sequence[Change]
    ) -> tuple[dict[str, ActuationResult], list[Change]]:
        """Results for the changes that will not run (skipped, matching, over the bound); the rest."""
        results: dict[str, ActuationResult] = {}
        budget = self.max_changes_per_step
        to_run: list[Change] = []
        for change in changes:
            if change.skip_reason is not None:
                results[change.target] = self._result(allocation, change, "skipped", error=change.skip_reason)
            elif not change.needed:
                results[change.target] = self._result(allocation, change, "already-applied")
            elif budget <= 0:
                error = f"bound of {self.max_changes_per_step} changes per step reached"
                results[change.target] = self._result(allocation, change, "skipped", error=error)
            else:
                budget -= 1
                to_run.append(change)
        return results, to_run

    def _prepare(self, allocation: Allocation, to_run: Sequence[Change]) -> None:
        """Every checkpoint signal of the step first, then one shared grace period."""
        grace_s = 0.0
        for change in to_run:
            if change.prepare is None:
                continue
            try:
                change.prepare()
                grace_s = max(grace_s, change.grace_s)
            except Exception as exc:  # the checkpoint signal is best effort: stop anyway
                log.warning("prepare failed", target=change.target, action=change.action, error=str(exc))
        if grace_s > 0:
            log.info("checkpoint grace", grace_s=grace_s, plan_id=allocation.plan_id)
            self._sleep(grace_s)

    def _execute_with_retry(self, allocation: Allocation, change: Change) -> ActuationResult:
        current: Change | None = change
        last_error = ""
        for attempt in range(1, self.retry.attempts + 1):
            if current is None or not current.needed:
                # An earlier attempt got through before its error, or someone else did it.
                return self._result(allocation, change, "applied", attempt=attempt)
            try:
                assert current.execute is not None
                current.execute()
                return self._result(allocation, current, "applied", attempt=attempt)
            except TemporaryError as exc:
                last_error = str(exc)
            except PermanentError as exc:
                return self._result(
                    allocation, current, "failed", attempt=attempt, error=str(exc), permanent=True
                )
            except Exception as exc:
                return self._result(
                    allocation,
                    current,
                    "failed",
                    attempt=attempt,
                    error=f"{type(exc).__name__}: {exc}",
                    permanent=True,
                )
            if attempt == self.retry.attempts:
                break
            self._sleep(self.retry.delay_s(attempt))
            current = self._replan(allocation, change.target, current)
        return self._result(allocation, change, "retrying", attempt=self.retry.attempts, error=last_error)

    def _replan(self, allocation: Allocation, target: str, fallback: Change) -> Change | None:
        """Re-observe and re-plan one target; keep the old change when observing still fails."""
        try:
            observed = self.backend.observe()
        except Exception:
            return fallback
        for change in self.backend.plan(allocation, observed):
            if change.target == target:
                return change
        return None

    # -- records ---------------------------------------------------------------------------

    def _result(
        self,
        allocation: Allocation,
        change: Change,
        outcome: Outcome,
        *,
        attempt: int = 1,
        error: str | None = None,
        permanent: bool = False,
    ) -> ActuationResult:
        return ActuationResult(
            cluster=allocation.cluster,
            backend=self.backend.name,
            plan_id=allocation.plan_id,
            action=change.action,
            target=change.target,
            outcome=outcome,
            time=self._clock(),
            attempt=attempt,
            error=error,
            permanent=permanent,
        )

    def _all(
        self,
        allocation: Allocation,
        outcome: Outcome,
        error: str,
        *,
        attempt: int = 1,
        permanent: bool = False,
    ) -> list[ActuationResult]:
        return [
            self._result(
                allocation,
                Change(target=t, action="apply", detail=error),
                outcome,
                attempt=attempt,
                error=error,
                permanent=permanent,
            )
            for t in targets_of(allocation)
        ]


def results_by_target(results: Sequence[ActuationResult]) -> dict[str, ActuationResult]:
    return {r.target: r for r in results}
