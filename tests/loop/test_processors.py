"""The stream services' logic without a broker: each processor is driven with real events."""

from __future__ import annotations

from datetime import timedelta

from loop_factories import STEP_S, at, cluster, job
from tests_clock import ManualClock

from actuators.engine import ActuationEngine
from actuators.factory import ActuatorConfig, build_actuator
from forecaster.source import SeasonalNaiveSource
from schemas import (
    ActuationResult,
    Allocation,
    DemandForecast,
    DemandSample,
    JobEvent,
    JobEventKind,
    JobStatus,
)
from schemas.codec import DecodeError, encode
from schemas.topics import (
    ACTUATIONS,
    ALLOCATIONS,
    CLUSTER_STATE,
    DEMAND_SAMPLES,
    FORECASTS,
    GPU_SAMPLES,
    JOB_EVENTS,
    PLANS,
)
from simulator.policies.fifo import FifoPolicy
from streams.fold import ClusterFold
from streams.services.actuator import ActuatorProcessor
from streams.services.forecaster import ForecasterProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.runtime import BatchDecoder
from streams.services.state import StateProcessor
from streams.state_diff import gpu_samples_of, seed_of


class FakeMonotonic:
    """A monotonic clock the test moves (the optimizer's forecast wait uses one)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _forecasts(state, issued_at) -> list[DemandForecast]:
    return list(SeasonalNaiveSource(horizon_steps=4).forecasts(state, issued_at).values())


def test_optimizer_pairs_a_step_state_with_the_forecasts_made_from_it():
    clock = FakeMonotonic()
    processor = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=5.0, monotonic=clock)
    state = cluster(1, [job("j1", JobStatus.QUEUED, 0)], history=[1.0, 2.0])
    for old in _forecasts(state, at(0)):  # last step's forecasts are not this step's
        assert list(processor.on_event(FORECASTS, old)) == []
    assert list(processor.on_event(CLUSTER_STATE, state)) == []
    assert processor.pending()
    out = []
    for fresh in _forecasts(state, at(1)):
        out += list(processor.on_event(FORECASTS, fresh))
    assert [topic for topic, _ in out] == [PLANS, ALLOCATIONS]
    assert not processor.pending()
    allocation = out[1][1]
    assert allocation.issued_at == at(1) and [j.job_id for j in allocation.jobs] == ["j1"]
    # The same inputs again (a replay) give the same plan id: the actuator will ignore it.
    replay = list(processor.on_event(CLUSTER_STATE, state))
    assert replay and replay[1][1].plan_id == allocation.plan_id
    # A state older than one already planned is not planned again.
    assert list(processor.on_event(CLUSTER_STATE, cluster(0, history=[1.0]))) == []


def test_optimizer_stops_waiting_for_forecasts_after_the_deadline():
    clock = FakeMonotonic()
    processor = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=5.0, monotonic=clock)
    state = cluster(1, history=[1.0])
    for old in _forecasts(state, at(0)):
        processor.on_event(FORECASTS, old)
    processor.on_event(CLUSTER_STATE, state)
    assert list(processor.on_idle()) == []
    clock.now_s = 6.0
    assert [topic for topic, _ in processor.on_idle()] == [PLANS, ALLOCATIONS]


def test_optimizer_plans_a_mid_step_state_at_once_with_the_latest_forecasts():
    processor = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=60.0, monotonic=FakeMonotonic())
    state = cluster(1, history=[1.0])
    for forecast in _forecasts(state, at(1)):
        processor.on_event(FORECASTS, forecast)
    urgent = state.model_copy(update={"as_of": at(1) + timedelta(seconds=120)})
    assert [topic for topic, _ in processor.on_event(CLUSTER_STATE, urgent)] == [PLANS, ALLOCATIONS]


def _allocation(plan_id: str) -> Allocation:
    state = cluster(0, [job("j1", JobStatus.QUEUED, 0)], history=[1.0])
    decision = FifoPolicy().decide(state, {}, at(0))
    return decision.allocation.model_copy(update={"plan_id": plan_id})


def _dry_engine(cluster: str = "c1") -> ActuationEngine:
    """The engine-backed dry run, as ``build_actuator`` makes it, on the tests' clock."""
    return build_actuator(ActuatorConfig(), cluster, clock=lambda: at(0))


def test_actuator_applies_each_plan_target_once_and_remembers_across_restarts():
    backend = _dry_engine()
    actuator = ActuatorProcessor(backend=backend)
    allocation = _allocation("plan-1")
    first = [event for _, event in actuator.on_event(ALLOCATIONS, allocation)]
    assert first and all(r.outcome == "applied" for r in first)
    again = [event for _, event in actuator.on_event(ALLOCATIONS, allocation)]
    assert again and all(r.outcome == "already-applied" for r in again)
    assert [r.target for r in again] == [r.target for r in first]
    assert len(backend.backend.applied) == len(first)
    # A restarted actuator that read its earlier results back does not apply them again.
    restarted = ActuatorProcessor(backend=_dry_engine())
    restarted.remember(first)
    replay = [event for topic, event in restarted.on_event(ALLOCATIONS, allocation) if topic == ACTUATIONS]
    assert all(isinstance(r, ActuationResult) and r.outcome == "already-applied" for r in replay)
    assert restarted.backend.backend.applied == []


def test_forecaster_forecasts_every_service_each_step_and_again_only_on_drift():
    processor = ForecasterProcessor(source=SeasonalNaiveSource(horizon_steps=4))
    state = cluster(1, history=[2.0, 2.0, 2.0])
    out = list(processor.on_event(CLUSTER_STATE, state))
    assert [(t, f.issued_at) for t, f in out] == [(FORECASTS, at(1))]
    mid = at(1) + timedelta(seconds=STEP_S // 2)
    steady = state.model_copy(update={"as_of": mid})
    assert list(processor.on_event(CLUSTER_STATE, steady)) == []
    surge = cluster(1, history=[2.0, 2.0, 50.0]).model_copy(update={"as_of": mid})
    redone = list(processor.on_event(CLUSTER_STATE, surge))
    assert len(redone) == 1 and processor.drift_forecasts == 1


def test_forecaster_serves_its_own_cluster_and_forgets_services_that_are_gone():
    from forecaster.source import BankForecastSource

    source = BankForecastSource()
    processor = ForecasterProcessor(source=source, cluster="c1")
    two = cluster(1, history=[2.0] * 8)
    chat = two.services[0]
    rag = chat.model_copy(update={"spec": chat.spec.model_copy(update={"service": "rag"})})
    two = two.model_copy(update={"services": [chat, rag]})
    assert sorted(f.service for _, f in processor.on_event(CLUSTER_STATE, two)) == ["chat", "rag"]
    other = cluster(1, history=[2.0] * 8).model_copy(update={"cluster": "c2"})
    assert list(processor.on_event(CLUSTER_STATE, other)) == [], "c2's forecaster serves c2"
    assert set(source.banks) == {"c1"}
    one = cluster(2, history=[2.0] * 8)  # rag is gone from the cluster
    assert [f.service for _, f in processor.on_event(CLUSTER_STATE, one)] == ["chat"]
    assert set(processor.latest) == {("c1", "chat")}
    bank = source.banks["c1"]
    assert not bank.refit_due("chat", one.as_of) and bank.refit_due("rag", one.as_of), "rag's model forgotten"


def test_state_publishes_at_boundaries_and_holds_offsets_until_it_has():
    first = cluster(0, history=[1.0])
    clock = ManualClock(at(0))
    processor = StateProcessor(fold=ClusterFold(seed=seed_of(first)), clock=clock, high_priority_weight=5.0)
    assert [t for t, _ in processor.on_idle()] == [CLUSTER_STATE]  # nothing published yet: publish now
    for sample in gpu_samples_of(first):
        processor.on_event(GPU_SAMPLES, sample)
    assert processor.pending()  # folded but unpublished: offsets must wait
    assert list(processor.on_idle()) == []
    clock.when = at(1)
    published = [s for _, s in processor.on_idle()]
    assert [s.as_of for s in published] == [at(1)] and not processor.pending()


def test_state_replans_at_once_on_a_high_priority_job():
    first = cluster(0, history=[1.0])
    clock = ManualClock(at(0) + timedelta(seconds=60))
    processor = StateProcessor(fold=ClusterFold(seed=seed_of(first)), clock=clock, high_priority_weight=5.0)
    list(processor.on_idle())
    urgent = job("vip", JobStatus.QUEUED, 0).spec.model_copy(update={"priority_weight": 9.0})
    processor.on_event(
        JOB_EVENTS,
        JobEvent(cluster="c1", job_id="vip", kind=JobEventKind.SUBMITTED, time=clock.when, spec=urgent),
    )
    out = [s for _, s in processor.on_idle()]
    assert len(out) == 1 and out[0].as_of == clock.when and [j.spec.job_id for j in out[0].jobs] == ["vip"]
    assert processor.triggers[-1].startswith("high-priority job vip")


def test_batch_decoder_names_the_bad_field_and_keeps_the_good_records():
    good = list(gpu_samples_of(cluster(0)))[:3]
    bad = encode(good[0]).replace(b'"utilization_pct":0.0', b'"utilization_pct":250.0')
    results = BatchDecoder(GPU_SAMPLES).decode([encode(good[0]), bad, b"{nope", encode(good[1])])
    assert results[0] == good[0] and results[3] == good[1]
    assert isinstance(results[1], DecodeError) and "utilization_pct" in str(results[1])
    assert isinstance(results[2], DecodeError)


def test_an_optimizer_for_one_cluster_leaves_other_clusters_alone():
    processor = OptimizerProcessor(
        policy=FifoPolicy(), forecast_wait_s=0.0, monotonic=FakeMonotonic(), cluster="c2"
    )
    state = cluster(1, history=[1.0])  # cluster c1
    assert list(processor.on_event(CLUSTER_STATE, state)) == []
    assert not processor.pending()
    mine = state.model_copy(update={"cluster": "c2"})
    assert [t for t, _ in processor.on_event(CLUSTER_STATE, mine)] == [PLANS, ALLOCATIONS]


def test_a_forecast_miss_replans_at_once_and_again_with_the_redone_forecast():
    first = cluster(1, history=[2.0, 2.0, 2.0])
    clock = ManualClock(at(1) + timedelta(seconds=300))
    state = StateProcessor(fold=ClusterFold(seed=seed_of(first)), clock=clock, high_priority_weight=5.0)
    forecaster = ForecasterProcessor(source=SeasonalNaiveSource(horizon_steps=4))
    optimizer = OptimizerProcessor(policy=FifoPolicy(), forecast_wait_s=5.0, monotonic=FakeMonotonic())
    [(_, boundary)] = state.on_idle()
    for _, forecast in forecaster.on_event(CLUSTER_STATE, boundary):
        state.on_event(FORECASTS, forecast)
        optimizer.on_event(FORECASTS, forecast)
    optimizer.on_event(CLUSTER_STATE, boundary)
    # Demand far above the band of the step's forecast: a snapshot between steps, re-planned at once.
    surge = DemandSample(cluster="c1", service="chat", time=clock.when, requests_per_s=0.0, gpus_busy=40.0)
    state.on_event(DEMAND_SAMPLES, surge)
    [(_, urgent)] = state.on_idle()
    assert urgent.as_of == clock.when and state.triggers[-1].startswith("forecast miss: chat")
    assert [t for t, _ in optimizer.on_event(CLUSTER_STATE, urgent)] == [PLANS, ALLOCATIONS]
    # The forecaster redoes the drifted forecast from that snapshot; the optimizer plans with it.
    redone = list(forecaster.on_event(CLUSTER_STATE, urgent))
    assert len(redone) == 1 and forecaster.drift_forecasts == 1
    again = list(optimizer.on_event(FORECASTS, redone[0][1]))
    assert [t for t, _ in again] == [PLANS, ALLOCATIONS]
    assert optimizer.decisions == 3
