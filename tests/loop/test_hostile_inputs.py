"""Hostile but schema-valid input to the state service, the optimizer and the actuator: dead-lettered with the
reason, never folded or planned, and the loop goes on deciding.

Covers: an event dated far past the service's clock (it would freeze its job: the job's later
FINISHED ignored), a ClusterState dated far ahead (the optimizer would drop every later state, and
the state service restore from it), a job reported running in a pool that does not exist, and
progress / finish / preemption of a job never submitted, an Allocation issued far ahead (the actuator
would skip every later one as superseded).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from loop_factories import STEP_S, at, cluster, spec
from tests_clock import ManualClock

from actuators.factory import ActuatorConfig, build_actuator
from schemas import ActuationResult, Allocation, ClusterState, DeadLetter, GpuSample, JobEvent, JobEventKind
from schemas.topics import (
    ACTUATIONS,
    ALLOCATIONS,
    CLUSTER_STATE,
    DEAD_LETTERS,
    FORECASTS,
    GPU_SAMPLES,
    JOB_EVENTS,
)
from simulator.policies.fifo import FifoPolicy
from streams.fold import ClusterFold
from streams.memory_bus import MemoryBus
from streams.services.actuator import ActuatorProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor, restore_fold
from streams.state_diff import seed_of

FAR = datetime(2176, 1, 1, tzinfo=UTC)  # year 2176: inside the contracts' range, far past the clock


def _state(clock: ManualClock) -> StateProcessor:
    return StateProcessor(fold=ClusterFold(seed=seed_of(cluster(0))), clock=clock, replan_on_events=False)


def _job(kind: JobEventKind, job_id: str = "j1", step: int = 0, **over: object) -> JobEvent:
    fields: dict[str, object] = {"cluster": "c1", "job_id": job_id, "kind": kind, "time": at(step)}
    if kind == JobEventKind.SUBMITTED:
        fields["spec"] = spec(job_id)
    return JobEvent.model_validate(fields | over)


def _letters(bus: MemoryBus) -> list[DeadLetter]:
    return [d for d in bus.read(DEAD_LETTERS) if isinstance(d, DeadLetter)]


def test_a_far_future_event_is_dead_lettered_and_the_jobs_later_finish_is_folded() -> None:
    clock = ManualClock(at(1))
    state = _state(clock)
    bus = MemoryBus([state])
    bus.publish(JOB_EVENTS, [_job(JobEventKind.SUBMITTED), _job(JobEventKind.STARTED, step=1, pool="a100")])
    bus.publish(JOB_EVENTS, [_job(JobEventKind.PROGRESS, time=FAR, done_gpu_s=1.0)])
    bus.run()
    [letter] = _letters(bus)
    assert letter.source_topic == JOB_EVENTS.name and letter.consumer == "state"
    assert "is more than 86400 s past the state service's clock" in letter.error
    assert letter.error.startswith("JobEvent: time: 2176-")
    clock.when = at(2)
    bus.publish(JOB_EVENTS, [_job(JobEventKind.FINISHED, step=2)])
    bus.run()
    assert len(_letters(bus)) == 1
    assert all(j.spec.job_id != "j1" for j in state.fold.snapshot(at(2)).jobs)  # finished, not frozen


def test_a_skew_within_the_setting_is_folded() -> None:
    state = _state(ManualClock(at(0)))
    state.max_event_skew_s = 2 * STEP_S
    assert state.fold.apply(_job(JobEventKind.SUBMITTED, step=1))
    state.on_event(JOB_EVENTS, _job(JobEventKind.STARTED, step=2, pool="a100"))
    with pytest.raises(ValueError, match="past the state service's clock"):
        state.on_event(JOB_EVENTS, _job(JobEventKind.PROGRESS, step=3))


def test_unknown_pools_and_jobs_are_dead_lettered_with_the_reason_and_the_loop_goes_on() -> None:
    clock = ManualClock(at(1))
    state = _state(clock)
    optimizer = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=0.0, cluster="c1", clock=clock)
    bus = MemoryBus([state, optimizer])
    sample = GpuSample(
        cluster="c1", pool="atlantis", node="n", gpu_index=0, gpu_uuid="G", time=at(1),
        utilization_pct=1.0, memory_used_mib=1.0, memory_total_mib=2.0, power_w=1.0,
    )  # fmt: skip
    bus.publish(
        JOB_EVENTS,
        [
            _job(JobEventKind.SUBMITTED),
            _job(JobEventKind.STARTED, step=1, pool="atlantis"),
            _job(JobEventKind.PROGRESS, job_id="ghost", step=1, done_gpu_s=5.0),
            _job(JobEventKind.FINISHED, job_id="ghost", step=1),
            _job(JobEventKind.PREEMPTED, job_id="ghost2", step=1),
        ],
    )
    bus.publish(GPU_SAMPLES, [sample])
    bus.run()
    errors = [d.error for d in _letters(bus)]
    assert errors == [
        "JobEvent: pool 'atlantis': not a pool of cluster c1 (its pools: a100, t4)",
        "JobEvent: job 'ghost': a progress event for a job never submitted to c1",
        "JobEvent: job 'ghost': a finished event for a job never submitted to c1",
        "JobEvent: job 'ghost2': a preempted event for a job never submitted to c1",
        "GpuSample: pool 'atlantis': not a pool of cluster c1 (its pools: a100, t4)",
    ]
    [j1] = state.fold.snapshot(at(1)).jobs
    assert j1.status == "queued" and j1.pool is None  # not folded as running in atlantis
    assert "atlantis" not in state.fold.gpu_seen
    # The loop goes on: the job is started in a real pool, and every step is still decided.
    bus.publish(JOB_EVENTS, [_job(JobEventKind.STARTED, step=1, pool="a100")])
    clock.when = at(2)
    bus.run()
    allocations = [a for a in bus.read(ALLOCATIONS) if isinstance(a, Allocation)]
    assert [a.issued_at for a in allocations] == [at(1), at(2)]
    assert state.fold.snapshot(at(2)).jobs[0].pool == "a100"
    assert len(_letters(bus)) == 5


def test_a_replayed_finish_of_a_forgotten_job_is_ignored_not_dead_lettered() -> None:
    state = _state(ManualClock(at(2)))
    for event in (_job(JobEventKind.SUBMITTED), _job(JobEventKind.FINISHED, step=1)):
        state.on_event(JOB_EVENTS, event)
    assert state.fold.forget_gone_jobs() == 1
    assert list(state.on_event(JOB_EVENTS, _job(JobEventKind.FINISHED, step=1))) == []


def test_the_optimizer_dead_letters_a_far_future_state_and_plans_the_next_one() -> None:
    clock = ManualClock(at(1))
    optimizer = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=0.0, cluster="c1", clock=clock)
    bus = MemoryBus([optimizer])
    hostile = cluster(0).model_copy(update={"as_of": FAR})
    bus.publish(CLUSTER_STATE, [hostile, cluster(1)])
    bus.run()
    [letter] = _letters(bus)
    assert letter.source_topic == CLUSTER_STATE.name and letter.consumer == "optimizer"
    assert letter.error.startswith("ClusterState: as_of: 2176-")
    assert "optimizer.max_state_skew_s" in letter.error
    clock.when = at(2)
    bus.publish(CLUSTER_STATE, [cluster(2)])
    bus.run()
    allocations = [a for a in bus.read(ALLOCATIONS) if isinstance(a, Allocation)]
    assert [a.issued_at for a in allocations] == [at(1), at(2)]


def test_a_restart_does_not_restore_from_a_far_future_snapshot() -> None:
    seed = seed_of(cluster(0))
    hostile: ClusterState = cluster(3).model_copy(update={"as_of": FAR})
    _, latest = restore_fold(seed, [cluster(3), hostile], 96, not_after=at(3) + timedelta(days=1))
    assert latest is not None and latest.as_of == at(3)
    _, unchecked = restore_fold(seed, [cluster(3), hostile], 96)
    assert unchecked is not None and unchecked.as_of == FAR


def test_the_optimizer_dead_letters_a_far_future_forecast_and_forgets_services_gone() -> None:
    from forecaster.source import SeasonalNaiveSource

    clock = ManualClock(at(1))
    optimizer = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=0.0, cluster="c1", clock=clock)
    bus = MemoryBus([optimizer])
    state = cluster(1, history=[2.0] * 4)
    [good] = SeasonalNaiveSource(horizon_steps=4).forecasts(state, at(1)).values()
    future = good.model_copy(update={"issued_at": FAR})
    stray = good.model_copy(update={"service": "gone"})
    bus.publish(FORECASTS, [future, good, stray])
    bus.run()
    [letter] = _letters(bus)
    assert letter.source_topic == FORECASTS.name
    assert letter.error.startswith("DemandForecast: issued_at: 2176-")
    assert optimizer.forecasts["c1"] == {"chat": good, "gone": stray}
    bus.publish(CLUSTER_STATE, [state])
    bus.run()
    assert optimizer.forecasts["c1"] == {"chat": good}, "the state has no service 'gone'"
    assert [a.issued_at for a in bus.read(ALLOCATIONS) if isinstance(a, Allocation)] == [at(1)]


def test_the_actuator_dead_letters_a_far_future_allocation_and_applies_the_next_one() -> None:
    """Before the check, one Allocation dated 2176 made every later one 'expired: superseded'."""
    clock = ManualClock(at(1))
    engine = build_actuator(ActuatorConfig(), "c1", clock=clock.now)
    actuator = ActuatorProcessor(backend=engine, clock=clock, max_allocation_skew_s=STEP_S)
    bus = MemoryBus([actuator])
    genuine = FifoPolicy().decide(cluster(1), {}, at(1)).allocation
    hostile = genuine.model_copy(
        update={"plan_id": "hostile", "issued_at": FAR, "valid_until": FAR + timedelta(seconds=STEP_S)}
    )
    bus.publish(ALLOCATIONS, [hostile, genuine])
    bus.run()
    [letter] = _letters(bus)
    assert letter.source_topic == ALLOCATIONS.name and letter.consumer == "actuator"
    assert letter.error.startswith("Allocation: issued_at: 2176-")
    assert "actuator.max_allocation_skew_s" in letter.error
    results = [r for r in bus.read(ACTUATIONS) if isinstance(r, ActuationResult)]
    assert results and {r.plan_id for r in results} == {genuine.plan_id}
    assert all(r.outcome in ("applied", "already-applied") for r in results), results
