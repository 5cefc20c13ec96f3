"""The actuator engine's guarantees, exercised through the in-memory dry-run backend (no cluster)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from actuators.base import PHASE_PREEMPT, Change, PermanentError, TemporaryError
from actuators.dryrun import DryRunBackend
from actuators.engine import ActuationEngine, RetryPolicy, results_by_target
from actuators.observation import Observation
from schemas import Allocation, JobEventKind

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def clock() -> datetime:
    return NOW


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def seeded_backend() -> DryRunBackend:
    backend = DryRunBackend(cluster="test", clock=clock)
    backend.add_job("j1", phase="held", pool="a", gpus=2)
    backend.add_job("j2", phase="held", pool="a", gpus=2)
    backend.add_job("j3", phase="running", pool="b", gpus=4)
    return backend


def test_same_allocation_twice_changes_nothing_the_second_time(make_allocation) -> None:
    backend = seeded_backend()
    actuator = ActuationEngine(backend, "test", clock=clock, sleep=Sleeps())
    allocation = make_allocation(
        "p1",
        issued_at=NOW,
        jobs=[("j1", "run", "b", 2), ("j2", "hold", None, 0)],
        services=[("chat", "a", 2, 2.0)],
    )

    first = {r.target: r.outcome for r in actuator.apply(allocation)}
    lines_after_first = list(backend.log_lines)
    second = {r.target: r.outcome for r in actuator.apply(allocation)}

    assert first == {"service/chat/a": "applied", "job/j1": "applied", "job/j2": "already-applied"}
    assert second == dict.fromkeys(first, "already-applied")
    assert backend.log_lines == lines_after_first
    assert backend.jobs["j1"].phase == "running" and backend.jobs["j1"].pool == "b"


def test_change_bound_skips_the_rest(make_allocation) -> None:
    actuator = ActuationEngine(seeded_backend(), "test", clock=clock, sleep=Sleeps(), max_changes_per_step=1)
    results = actuator.apply(
        make_allocation("p1", issued_at=NOW, jobs=[("j1", "run", "a", 2), ("j2", "run", "a", 2)])
    )
    assert [r.outcome for r in results] == ["applied", "skipped"]
    assert "bound of 1 changes" in (results[1].error or "")


def test_expired_or_foreign_allocation_changes_nothing(make_allocation) -> None:
    backend = seeded_backend()
    actuator = ActuationEngine(backend, "test", clock=clock, sleep=Sleeps())
    old = make_allocation("p0", issued_at=NOW - timedelta(hours=1), valid_s=900, jobs=[("j1", "run", "a", 2)])
    foreign = make_allocation("p1", issued_at=NOW, cluster="other", jobs=[("j1", "run", "a", 2)])
    assert [r.outcome for r in actuator.apply(old)] == ["skipped"]
    assert [r.outcome for r in actuator.apply(foreign)] == ["skipped"]
    assert backend.jobs["j1"].phase == "held"


class Flaky:
    """A backend wrapper whose changes fail: ``temporary`` times, or always permanently for some targets."""

    name = "flaky"

    def __init__(
        self, inner: DryRunBackend, temporary: int = 0, permanent: frozenset[str] = frozenset()
    ) -> None:
        self.inner = inner
        self.temporary_left = temporary
        self.permanent = permanent

    def observe(self) -> Observation:
        return self.inner.observe()

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        return [self._wrap(c) for c in self.inner.plan(allocation, observed)]

    def _wrap(self, change: Change) -> Change:
        if not change.needed:
            return change
        inner = change.execute
        assert inner is not None

        def execute() -> None:
            if change.target in self.permanent:
                raise PermanentError(f"{change.target}: forbidden")
            if self.temporary_left > 0:
                self.temporary_left -= 1
                raise TemporaryError("connection refused")
            inner()

        return replace(change, execute=execute)


def test_temporary_errors_retry_with_backoff_then_succeed(make_allocation) -> None:
    sleeps = Sleeps()
    actuator = ActuationEngine(
        Flaky(seeded_backend(), temporary=2),
        "test",
        clock=clock,
        sleep=sleeps,
        retry=RetryPolicy(attempts=4, base_delay_s=0.5, max_delay_s=10),
    )
    (result,) = actuator.apply(make_allocation("p1", issued_at=NOW, jobs=[("j1", "run", "a", 2)]))
    assert (result.outcome, result.attempt) == ("applied", 3)
    assert sleeps.calls == [0.5, 1.0]


def test_exhausted_temporary_errors_report_retrying(make_allocation) -> None:
    actuator = ActuationEngine(
        Flaky(seeded_backend(), temporary=99),
        "test",
        clock=clock,
        sleep=Sleeps(),
        retry=RetryPolicy(attempts=3, base_delay_s=0.0),
    )
    (result,) = actuator.apply(make_allocation("p1", issued_at=NOW, jobs=[("j1", "run", "a", 2)]))
    assert (result.outcome, result.attempt, result.permanent) == ("retrying", 3, False)
    assert result.error == "connection refused"


def test_permanent_error_does_not_block_other_targets(make_allocation) -> None:
    inner = seeded_backend()
    flaky = Flaky(inner, permanent=frozenset({"job/j1"}))
    actuator = ActuationEngine(flaky, "test", clock=clock, sleep=Sleeps())
    results = results_by_target(
        actuator.apply(
            make_allocation(
                "p1",
                issued_at=NOW,
                jobs=[("j1", "run", "a", 2), ("j2", "run", "a", 2), ("zz", "run", "a", 1)],
            )
        )
    )
    assert (results["job/j1"].outcome, results["job/j1"].permanent) == ("failed", True)
    assert results["job/j2"].outcome == "applied"
    assert results["job/zz"].outcome == "skipped"
    assert inner.jobs["j2"].phase == "running"


def test_preemptions_share_one_grace_period_and_run_first(make_allocation) -> None:
    prepared: list[str] = []
    order: list[str] = []

    class Preempting(DryRunBackend):
        def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
            return [
                Change(target="job/x", action="run", detail="", execute=lambda: order.append("run")),
                *[
                    Change(
                        target=f"job/p{i}",
                        action="preempt",
                        detail="",
                        phase=PHASE_PREEMPT,
                        grace_s=5.0 + i,
                        prepare=lambda i=i: prepared.append(f"p{i}"),
                        execute=lambda i=i: order.append(f"p{i}"),
                    )
                    for i in range(3)
                ],
            ]

    sleeps = Sleeps()
    ActuationEngine(Preempting(cluster="test", clock=clock), "test", clock=clock, sleep=sleeps).apply(
        make_allocation("p1", issued_at=NOW)
    )
    assert prepared == ["p0", "p1", "p2"]
    assert sleeps.calls == [7.0]
    assert order == ["p0", "p1", "p2", "run"]


def test_observation_differences_become_job_events(make_allocation) -> None:
    backend = seeded_backend()
    actuator = ActuationEngine(backend, "test", clock=clock, sleep=Sleeps())
    _, first = actuator.observe_events()
    assert [(e.job_id, e.kind) for e in first] == [("j3", JobEventKind.STARTED)]
    actuator.apply(
        make_allocation("p1", issued_at=NOW, jobs=[("j1", "run", "a", 2), ("j3", "preempt", None, 0)])
    )
    _, second = actuator.observe_events()
    assert {(e.job_id, e.kind, e.pool) for e in second} == {
        ("j1", JobEventKind.STARTED, "a"),
        ("j3", JobEventKind.PREEMPTED, "b"),
    }
    assert actuator.observe_events()[1] == []


def test_dry_run_over_a_real_backend_only_logs(make_allocation) -> None:
    inner = seeded_backend()
    dry = DryRunBackend(inner=inner)
    results = ActuationEngine(dry, "test", clock=clock, sleep=Sleeps()).apply(
        make_allocation("p1", issued_at=NOW, jobs=[("j1", "run", "b", 2)])
    )
    assert [(r.backend, r.outcome) for r in results] == [("dry-run", "applied")]
    assert dry.log_lines == ["would run job/j1: held -> running"]
    assert inner.jobs["j1"].phase == "held"


def test_bad_settings_fail_at_start() -> None:
    with pytest.raises(ValueError, match="max_changes_per_step"):
        ActuationEngine(seeded_backend(), "test", max_changes_per_step=0)
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)


def test_observation_is_publishable_json() -> None:
    backend = seeded_backend()
    observed = backend.observe()
    again = Observation.model_validate_json(observed.model_dump_json())
    assert again == observed
    assert again.jobs["j3"].phase == "running"
