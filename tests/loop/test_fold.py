"""The state fold (pure): folding a cluster's events onto its previous snapshot gives the next one."""

from __future__ import annotations

from loop_factories import at, cluster, job

from schemas import Allocation, JobEvent, JobEventKind, JobStatus, ServiceDecision
from streams.fold import ClusterFold
from streams.state_diff import events_between, seed_of


def _fold_all(fold: ClusterFold, previous, current) -> None:
    jobs, demand, gpus = events_between(previous, current)
    for event in [*jobs, *demand, *gpus]:
        fold.apply(event)


def _run(states):
    fold = ClusterFold(seed=seed_of(states[0]))
    previous = None
    for state in states:
        _fold_all(fold, previous, state)
        previous = state
        fold.apply(
            Allocation(
                cluster="c1",
                plan_id=f"p{state.as_of.isoformat()}",
                policy="t",
                issued_at=state.as_of,
                step_s=state.step_s,
                valid_until=at(99),
                services=[
                    ServiceDecision(service="chat", pool=p, replicas=r, gpus=float(r), reason="r")
                    for p, r in state.services[0].replicas.items()
                ],
            )
        )
        assert fold.snapshot(state.as_of) == state
    return fold


def test_round_trip_through_a_job_lifecycle():
    states = [
        cluster(0, [job("j1", JobStatus.QUEUED, 0)], history=[1.0, 2.0, 3.0]),
        cluster(
            1,
            [job("j1", JobStatus.RUNNING, 0, pool="a100", started_step=1), job("j2", JobStatus.QUEUED, 1)],
            history=[1.0, 2.0, 3.0, 4.0],
            replicas={"a100": 2},
        ),
        cluster(
            2,
            [
                job("j1", JobStatus.RUNNING, 0, pool="a100", started_step=1, done=1800.0, since_ckpt=600.0),
                job("j2", JobStatus.RUNNING, 1, pool="t4", started_step=2),
            ],
            history=[1.0, 2.0, 3.0, 4.0, 2.5],
            available=12,
        ),
        # j1 preempted back to the queue (work since its checkpoint lost); j2 done.
        cluster(
            3,
            [job("j1", JobStatus.QUEUED, 0, done=1200.0, preemptions=1)],
            history=[1.0, 2.0, 3.0, 4.0, 2.5, 0.5],
            available=12,
            replicas={"t4": 1},
        ),
        # j1 restarted on another pool in the same step as a second preemption.
        cluster(
            4,
            [job("j1", JobStatus.RUNNING, 0, pool="t4", started_step=4, done=1200.0, preemptions=2)],
            history=[1.0, 2.0, 3.0, 4.0, 2.5, 0.5, 0.0],
        ),
    ]
    fold = _run(states)
    assert fold.counters.job_events > 0


def test_a_replayed_event_changes_nothing():
    states = [cluster(0, [job("j1", JobStatus.RUNNING, 0, pool="a100", started_step=0)], history=[1.0])]
    fold = _run(states)
    before = fold.snapshot(at(0))
    preempt = JobEvent(cluster="c1", job_id="j1", kind=JobEventKind.PREEMPTED, time=at(1))
    assert fold.apply(preempt)
    once = fold.snapshot(at(0))
    assert not fold.apply(preempt)
    assert fold.snapshot(at(0)) == once != before
    assert once.jobs[0].preemptions == 1


def test_silent_gpus_become_unavailable_and_other_clusters_are_ignored():
    state = cluster(0, history=[1.0])
    fold = ClusterFold(seed=seed_of(state))
    _fold_all(fold, None, state)
    assert fold.snapshot(at(0)).pools[0].gpus_available == 16
    # Nothing heard for a whole step: the pool's GPUs are counted as lost.
    assert fold.snapshot(at(1)).pools[0].gpus_available == 0
    foreign = JobEvent(cluster="other", job_id="x", kind=JobEventKind.CANCELLED, time=at(0))
    assert not fold.apply(foreign)


def test_update_for_an_unknown_job_is_ignored_not_invented():
    fold = ClusterFold(seed=seed_of(cluster(0)))
    assert not fold.apply(
        JobEvent(cluster="c1", job_id="ghost", kind=JobEventKind.STARTED, time=at(0), pool="a100")
    )
    assert fold.snapshot(at(0)).jobs == []
