"""The queue-wait histogram: each job's submission-to-first-start wait, observed once per job.

Driven through the state service's processor (fold, publish) with real events and a manual clock;
a restart is a new processor whose fold is restored from the last published snapshot, fed the
same events again.
"""

from __future__ import annotations

from datetime import timedelta

from loop_factories import at, cluster, spec
from prometheus_client import CollectorRegistry
from tests_clock import ManualClock

from schemas import ClusterState, JobEvent, JobEventKind, JobSpec
from schemas.topics import JOB_EVENTS
from streams.fold import ClusterFold
from streams.metric_series import MAX_PRIORITY_CLASSES
from streams.metrics import EbbtideMetrics
from streams.services.state import StateProcessor, restore_fold
from streams.state_diff import seed_of

WAIT = "ebbtide_job_queue_wait_seconds"


def _event(job_id: str, kind: JobEventKind, minutes: float, job_spec: JobSpec | None = None) -> JobEvent:
    return JobEvent(
        cluster="c1",
        job_id=job_id,
        kind=kind,
        time=at(0) + timedelta(minutes=minutes),
        spec=job_spec if kind == JobEventKind.SUBMITTED else None,
        pool="a100" if kind == JobEventKind.STARTED else None,
    )


def _lifecycle() -> list[JobEvent]:
    """j1 waits 30 min, is preempted and starts again; j2 waits 5 min and finishes within the step."""
    return [
        _event("j1", JobEventKind.SUBMITTED, 0, spec("j1")),
        _event("j1", JobEventKind.STARTED, 30),
        _event("j2", JobEventKind.SUBMITTED, 31, spec("j2").model_copy(update={"priority_class": "low"})),
        _event("j2", JobEventKind.STARTED, 36),
        _event("j2", JobEventKind.FINISHED, 40),
        _event("j1", JobEventKind.PREEMPTED, 50),
        _event("j1", JobEventKind.STARTED, 55),
    ]


def _processor(fold: ClusterFold, clock: ManualClock, metrics: EbbtideMetrics, **kw) -> StateProcessor:
    return StateProcessor(fold=fold, clock=clock, on_first_starts=metrics.record_first_starts, **kw)


def _published(processor: StateProcessor) -> ClusterState:
    [(_, state)] = processor.on_idle()
    return state


def _count(metrics: EbbtideMetrics, priority_class: str) -> float:
    labels = {"cluster": "c1", "priority_class": priority_class}
    value = metrics.registry.get_sample_value(f"{WAIT}_count", labels)
    return 0.0 if value is None else value


def test_first_starts_are_observed_once_when_published_and_not_after_a_restart() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    clock = ManualClock(at(0))
    processor = _processor(ClusterFold(seed=seed_of(cluster(0))), clock, metrics)
    _published(processor)
    for event in _lifecycle():
        processor.on_event(JOB_EVENTS, event)
    assert _count(metrics, "standard") == 0  # folded, not yet in a published snapshot
    clock.when = at(4)
    snapshot = _published(processor)
    assert _count(metrics, "standard") == 1 and _count(metrics, "low") == 1  # j1's restart is no first start
    labels = {"cluster": "c1", "priority_class": "standard"}
    assert metrics.registry.get_sample_value(f"{WAIT}_sum", labels) == 1800.0
    assert metrics.registry.get_sample_value(f"{WAIT}_bucket", {**labels, "le": "900.0"}) == 0.0
    assert metrics.registry.get_sample_value(f"{WAIT}_bucket", {**labels, "le": "1800.0"}) == 1.0

    # A restart from that snapshot, the same events replayed (their offsets were committed with the
    # snapshot, but a replay of all of them is the worst case): j1 is running in it, j2 is gone.
    fold, latest = restore_fold(seed_of(cluster(0)), [snapshot], max_history_steps=96)
    restarted = _processor(fold, clock, metrics, last_published=latest)
    for event in _lifecycle()[:2] + _lifecycle()[5:]:
        restarted.on_event(JOB_EVENTS, event)
    clock.when = at(5)
    _published(restarted)
    assert _count(metrics, "standard") == 1


def test_a_job_seen_running_or_preempted_in_the_seed_never_counts_as_a_first_start() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    clock = ManualClock(at(0))
    processor = _processor(ClusterFold(seed=seed_of(cluster(0))), clock, metrics)
    _published(processor)
    processor.on_event(JOB_EVENTS, _event("j1", JobEventKind.SUBMITTED, 0, spec("j1")))
    processor.on_event(JOB_EVENTS, _event("j1", JobEventKind.STARTED, 1))
    processor.on_event(JOB_EVENTS, _event("j1", JobEventKind.PREEMPTED, 2))
    clock.when = at(1)
    queued_again = _published(processor)
    assert _count(metrics, "standard") == 1
    fold, latest = restore_fold(seed_of(cluster(0)), [queued_again], max_history_steps=96)
    restarted = _processor(fold, clock, metrics, last_published=latest)
    restarted.on_event(JOB_EVENTS, _event("j1", JobEventKind.STARTED, 16))  # preempted once: not a first
    clock.when = at(2)
    _published(restarted)
    assert _count(metrics, "standard") == 1


def test_priority_classes_past_the_cap_read_other() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    clock = ManualClock(at(0))
    processor = _processor(ClusterFold(seed=seed_of(cluster(0))), clock, metrics)
    _published(processor)
    for i in range(MAX_PRIORITY_CLASSES + 3):
        job_spec = spec(f"j{i}").model_copy(update={"priority_class": f"class-{i}"})
        processor.on_event(JOB_EVENTS, _event(f"j{i}", JobEventKind.SUBMITTED, 0, job_spec))
        processor.on_event(JOB_EVENTS, _event(f"j{i}", JobEventKind.STARTED, 2))
    clock.when = at(1)
    _published(processor)
    assert _count(metrics, "other") == 3
    assert _count(metrics, f"class-{MAX_PRIORITY_CLASSES - 1}") == 1
