"""A replayed Allocation reaches no backend twice: the actuator service over the actuation engine.

The actuator service (streams/services/actuator.py) remembers (plan_id, target) from the results
it published; the engine's backends name their targets the same way (schemas/targets.py), so a
duplicated Allocation, or one replayed to a restarted service that read its results back, makes
no backend execute any Change, for service and job targets alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from actuators.base import Change, TemporaryError
from actuators.dryrun import DryRunBackend
from actuators.engine import ActuationEngine, RetryPolicy
from actuators.observation import Observation
from loop import Actuator
from schemas import ActuationResult, Allocation
from schemas.targets import job_target, parse_target, service_target
from schemas.topics import ACTUATIONS, ALLOCATIONS
from streams.services.actuator import ActuatorProcessor

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TARGETS = {service_target("chat", "a"), service_target("embed", "b"), job_target("j1"), job_target("j2")}


class Recording:
    """A Backend over the in-memory dry run that records what it was asked to plan and executed."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.inner = DryRunBackend(cluster="test", clock=lambda: NOW, adopt_unknown_jobs=True)
        self.name = "recording"
        self.failing = failing
        self.planned: list[set[str]] = []
        self.executed: list[str] = []

    def observe(self) -> Observation:
        return self.inner.observe()

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        changes = [self._recorded(c) for c in self.inner.plan(allocation, observed)]
        self.planned.append({c.target for c in changes})
        return changes

    def _recorded(self, change: Change) -> Change:
        if not change.needed:
            return change
        inner = change.execute
        assert inner is not None

        def execute() -> None:
            if change.target in self.failing:
                raise TemporaryError(f"{change.target}: API server unavailable")
            self.executed.append(change.target)
            inner()

        return Change(change.target, change.action, change.detail, execute=execute, phase=change.phase)


def engine(backend: Recording) -> ActuationEngine:
    retry = RetryPolicy(attempts=1, base_delay_s=0.0)
    return ActuationEngine(backend, "test", clock=lambda: NOW, sleep=lambda _: None, retry=retry)


def allocation(make_allocation) -> Allocation:  # type: ignore[no-untyped-def]
    return make_allocation(
        "plan-1",
        issued_at=NOW,
        services=[("chat", "a", 2, 2.0), ("embed", "b", 1, 1.0)],
        jobs=[("j1", "run", "a", 2), ("j2", "run", "b", 1)],
    )


def results(out) -> list[ActuationResult]:  # type: ignore[no-untyped-def]
    return [event for topic, event in out if topic == ACTUATIONS]


def test_the_port_is_the_engine() -> None:
    port: Actuator = engine(Recording())
    assert port.apply is not None


def test_a_duplicated_allocation_executes_no_change_the_second_time(make_allocation) -> None:
    backend = Recording()
    service = ActuatorProcessor(backend=engine(backend))
    wanted = allocation(make_allocation)
    first = results(service.on_event(ALLOCATIONS, wanted))
    assert {r.target: r.outcome for r in first} == dict.fromkeys(TARGETS, "applied")
    assert sorted(backend.executed) == sorted(TARGETS)
    executed, planned = list(backend.executed), list(backend.planned)

    again = results(service.on_event(ALLOCATIONS, wanted))

    assert {r.target: r.outcome for r in again} == dict.fromkeys(TARGETS, "already-applied")
    assert backend.executed == executed and backend.planned == planned  # the backend was not asked
    assert service.replays == 1 and service.backend_calls == 1


def test_a_restarted_service_reaches_no_backend_with_a_replayed_allocation(make_allocation) -> None:
    wanted = allocation(make_allocation)
    first = results(ActuatorProcessor(backend=engine(Recording())).on_event(ALLOCATIONS, wanted))
    # After a restart: a fresh backend whose cluster has none of it, so any Change reaching it
    # would execute. The service reads its own results back first, as wiring's restore does.
    fresh = Recording()
    restarted = ActuatorProcessor(backend=engine(fresh))
    restarted.remember(first)

    replay = results(restarted.on_event(ALLOCATIONS, wanted))

    assert {r.target: r.outcome for r in replay} == dict.fromkeys(TARGETS, "already-applied")
    assert {parse_target(r.target).kind for r in replay} == {"service", "job"}
    assert fresh.executed == [] and fresh.planned == []
    assert restarted.backend_calls == 0


def test_a_partly_applied_plan_executes_only_what_is_left(make_allocation) -> None:
    wanted = allocation(make_allocation)
    backend = Recording(failing=frozenset({job_target("j1")}))
    service = ActuatorProcessor(backend=engine(backend))
    first = {r.target: r.outcome for r in results(service.on_event(ALLOCATIONS, wanted))}
    assert first[job_target("j1")] == "retrying"
    assert {t for t, o in first.items() if o == "applied"} == TARGETS - {job_target("j1")}
    backend.failing, backend.executed, backend.planned = frozenset(), [], []

    replay = {r.target: r.outcome for r in results(service.on_event(ALLOCATIONS, wanted))}

    assert backend.executed == [job_target("j1")]
    # Services travel whole (a backend reconciles them as a set) but match, so none executes;
    # the job already applied does not reach the backend at all.
    assert backend.planned == [{service_target("chat", "a"), service_target("embed", "b"), job_target("j1")}]
    assert replay == {**dict.fromkeys(TARGETS, "already-applied"), job_target("j1"): "applied"}
