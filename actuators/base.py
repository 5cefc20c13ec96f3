"""The one small actuator interface: observe what a backend runs now, and plan/execute changes.

Place in the loop: the optimizer commits step 0 of its plan as an ``Allocation``; the
:class:`~actuators.engine.ActuationEngine` hands it to a :class:`Backend`, which compares the desired
state with what it observes and proposes :class:`Change` objects, one per target. The engine
(not the backend) owns idempotency, ordering, the bound on changes per step, retries with
backoff and the ``ActuationResult`` records. A backend only knows its cluster.

Errors: a backend raises :class:`TemporaryError` for what may work on a retry (API server down,
slurmctld restarting, a conflict) and :class:`PermanentError` for what will not (an unknown
job, a forbidden verb). Anything else is treated as permanent so a broken target never blocks
the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from actuators.observation import Observation
from schemas import Allocation


class ActuationError(Exception):
    """Base of actuator errors."""


class TemporaryError(ActuationError):
    """May succeed if tried again later (connection refused, timeout, 409 conflict, 5xx)."""


class PermanentError(ActuationError):
    """Will not succeed by retrying (not found, forbidden, invalid request)."""


# Order in which kinds of change run within a step: free capacity first (preempt), then
# claim it for inference, then hold and start batch work. Lower runs first.
PHASE_PREEMPT = 0
PHASE_SERVICES = 1
PHASE_JOBS = 2


@dataclass(frozen=True)
class Change:
    """One target's way from observed to desired.

    ``target`` is a name from schemas/targets.py (``service/<service>/<pool>``, ``job/<job_id>``, ...).
    ``execute`` is None when the target already matches the allocation (``already-applied``).
    ``prepare`` runs for all changes of the step before any ``execute`` (a checkpoint signal),
    and the engine then waits the longest ``grace_s`` once, not once per job.
    ``skip_reason`` marks a target the backend will not touch (reported ``skipped``).
    """

    target: str
    action: str
    detail: str
    execute: Callable[[], object] | None = None
    prepare: Callable[[], object] | None = None
    grace_s: float = 0.0
    phase: int = PHASE_JOBS
    skip_reason: str | None = None

    @property
    def needed(self) -> bool:
        return self.execute is not None and self.skip_reason is None


class Backend(Protocol):
    """A cluster manager the actuator drives (Kubernetes, Slurm, or a dry run)."""

    name: str

    def observe(self) -> Observation:
        """What runs now: jobs with their state and pool, service capacity, free GPUs per pool."""
        ...

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        """One Change per target of the allocation (and per stale target the backend owns)."""
        ...
