"""loop.sources.lifecycle_events: each transition of a sourced job published once, as a table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from loop.sources import SourcedJob, SourceSnapshot, latest_kinds, lifecycle_events
from schemas import JobEvent, JobEventKind, JobSpec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
K = JobEventKind
SPEC = JobSpec(job_id="j", gpus=2, estimated_gpu_s=3600.0)


def snap(*jobs: SourcedJob, at: int = 0) -> SourceSnapshot:
    return SourceSnapshot(cluster="c", time=T0 + timedelta(seconds=at), jobs={j.job_id: j for j in jobs})


def job(phase: str, spec: JobSpec | None = SPEC, **kw: object) -> SourcedJob:
    return SourcedJob(job_id="j", phase=phase, spec=spec, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("last", "phase", "kinds"),
    [
        # new jobs
        (None, "held", [K.SUBMITTED]),
        (None, "pending", [K.SUBMITTED]),
        (None, "running", [K.SUBMITTED, K.STARTED]),
        (None, "suspended", [K.SUBMITTED]),
        (None, "finished", []),  # first seen ended: never ours to plan
        (None, "cancelled", []),
        # waiting jobs
        (K.SUBMITTED, "held", []),
        (K.SUBMITTED, "pending", []),
        (K.SUBMITTED, "running", [K.STARTED]),
        (K.SUBMITTED, "finished", [K.FINISHED]),
        (K.SUBMITTED, "failed", [K.FAILED]),
        (K.SUBMITTED, "cancelled", [K.CANCELLED]),
        (K.PREEMPTED, "held", []),
        (K.PREEMPTED, "running", [K.STARTED]),
        # running jobs
        (K.STARTED, "running", []),
        (K.PROGRESS, "running", []),
        (K.STARTED, "held", [K.PREEMPTED]),
        (K.STARTED, "suspended", [K.PREEMPTED]),
        (K.STARTED, "pending", [K.PREEMPTED]),
        (K.STARTED, "finished", [K.FINISHED]),
        (K.STARTED, "failed", [K.FAILED]),
        (K.STARTED, "cancelled", [K.CANCELLED]),
        # ended jobs stay ended
        (K.FINISHED, "finished", []),
        (K.FINISHED, "running", []),
        (K.CANCELLED, "failed", []),
    ],
)
def test_transition_table(last: JobEventKind | None, phase: str, kinds: list[JobEventKind]) -> None:
    known = {} if last is None else {"j": last}
    events = lifecycle_events(known, snap(job(phase, pool="a", nodes={"n1": 2})))
    assert [e.kind for e in events] == kinds


def test_submitted_carries_the_spec_and_started_the_pool_and_nodes() -> None:
    submitted, started = lifecycle_events({}, snap(job("running", pool="a", nodes={"n1": 2})))
    assert submitted.spec == SPEC and submitted.pool is None
    assert (started.pool, started.nodes, started.spec) == ("a", {"n1": 2}, None)
    assert started.time == submitted.time == T0


def test_a_job_without_a_spec_is_not_submitted() -> None:
    assert lifecycle_events({}, snap(job("held", spec=None))) == []


@pytest.mark.parametrize(("last", "cancelled"), [(K.SUBMITTED, True), (K.STARTED, True), (K.FINISHED, False)])
def test_a_known_job_that_vanished_is_cancelled_once(last: JobEventKind, cancelled: bool) -> None:
    events = lifecycle_events({"j": last}, snap())
    assert [(e.job_id, e.kind) for e in events] == ([("j", K.CANCELLED)] if cancelled else [])


def _replay(history: list[SourceSnapshot]) -> list[JobEvent]:
    """Run a source over snapshots, restarting (rebuilding ``last`` from what was published) before each."""
    published: list[JobEvent] = []
    for snapshot in history:
        published += lifecycle_events(latest_kinds(published, "c"), snapshot)
    return published


def test_each_transition_once_over_a_life_and_a_restart_repeats_nothing() -> None:
    life = [
        snap(job("held"), at=0),
        snap(job("held"), at=10),
        snap(job("running", pool="a"), at=20),
        snap(job("running", pool="a"), at=30),
        snap(job("held"), at=40),  # requeued held: preempted
        snap(job("running", pool="b"), at=50),
        snap(job("finished", pool="b"), at=60),
        snap(job("finished", pool="b"), at=70),
        snap(at=80),  # left squeue after it ended: nothing
    ]
    kinds = [e.kind for e in _replay(life)]
    assert kinds == [K.SUBMITTED, K.STARTED, K.PREEMPTED, K.STARTED, K.FINISHED]
    # every snapshot taken twice (a restart between them) publishes the same
    doubled = [s for s in life for _ in (0, 1)]
    assert [e.kind for e in _replay(doubled)] == kinds


def test_latest_kinds_keeps_only_this_cluster_and_the_last_event_per_job() -> None:
    def ev(cluster: str, job_id: str, kind: JobEventKind) -> JobEvent:
        spec = JobSpec(job_id=job_id, gpus=1, estimated_gpu_s=1.0) if kind == K.SUBMITTED else None
        return JobEvent(cluster=cluster, job_id=job_id, kind=kind, time=T0, spec=spec)

    events = [ev("c", "a", K.SUBMITTED), ev("x", "b", K.SUBMITTED), ev("c", "a", K.STARTED)]
    assert latest_kinds(events, "c") == {"a": K.STARTED}
