"""Cluster sources: the port every source implements, and the job lifecycle they all share.

Place in the loop: at its start. A source (actuators/slurm/source.py from squeue and sacct, the
Kubernetes source from Jobs and nodes) takes a :class:`SourceSnapshot` of what its cluster runs
and has; the source service (streams/services/source.py) turns the difference between the last
event it published per job and that snapshot into JobEvents with :func:`lifecycle_events`, and
publishes the snapshot's inventory. The same transition table (:func:`phase_event`) gives the
actuators' own observed events (actuators/observation.py), so there is one copy of it.

A source reports a job it cannot read (a malformed spec) on the job itself, where its users look,
and leaves it out of the snapshot: ebbtide neither plans nor cancels it.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from schemas import JobEvent, JobEventKind, JobSpec, PoolInventory

JobPhase = Literal["pending", "held", "running", "suspended", "finished", "failed", "cancelled"]
Standing = Literal["waiting", "running", "ended"]
"""Where a job stands for the planner: waiting for GPUs, holding them, or done."""

_STANDING_OF_PHASE: dict[str, Standing] = {
    "pending": "waiting",
    "held": "waiting",
    "suspended": "waiting",
    "running": "running",
    "finished": "ended",
    "failed": "ended",
    "cancelled": "ended",
}
_STANDING_AFTER_EVENT: dict[JobEventKind, Standing] = {
    JobEventKind.SUBMITTED: "waiting",
    JobEventKind.PREEMPTED: "waiting",
    JobEventKind.STARTED: "running",
    JobEventKind.PROGRESS: "running",
    JobEventKind.FINISHED: "ended",
    JobEventKind.FAILED: "ended",
    JobEventKind.CANCELLED: "ended",
}
_END_OF_PHASE = {
    "finished": JobEventKind.FINISHED,
    "failed": JobEventKind.FAILED,
    "cancelled": JobEventKind.CANCELLED,
}


@dataclass(frozen=True)
class SourcedJob:
    """One job as a source sees it. ``spec`` is None when the source cannot tell it (a job it
    has seen but whose spec it cannot read); ``nodes`` the GPUs it holds per node while running."""

    job_id: str
    phase: JobPhase
    spec: JobSpec | None = None
    pool: str | None = None
    nodes: dict[str, int] = field(default_factory=dict)
    message: str | None = None


@dataclass(frozen=True)
class SourceSnapshot:
    """What a source saw of one cluster at one time."""

    cluster: str
    time: datetime
    jobs: dict[str, SourcedJob]
    inventory: PoolInventory | None = None


class ClusterSource(Protocol):
    """Observes one cluster. ``snapshot`` raises when the cluster cannot be read (the service
    counts it and retries next interval); a job it cannot read is reported on the job, not here."""

    name: str

    def snapshot(self) -> SourceSnapshot: ...


def standing_of_phase(phase: str) -> Standing:
    return _STANDING_OF_PHASE[phase]


def standing_after(kind: JobEventKind) -> Standing:
    """Where the last event published for a job left it."""
    return _STANDING_AFTER_EVENT[kind]


def phase_event(before: Standing | None, phase: str) -> JobEventKind | None:
    """The event a job now in ``phase`` implies, from where it stood (None: never seen).

    Each transition once: waiting -> running is ``started``; running -> waiting (held, requeued,
    suspended) is ``preempted``; waiting or running -> an end is ``finished``/``failed``/
    ``cancelled``. A first sighting running is ``started``, a first sighting ended its end. An
    ended job stays ended: nothing after it.
    """
    after = standing_of_phase(phase)
    if after == before or before == "ended":
        return None
    if after == "running":
        return JobEventKind.STARTED
    if after == "waiting":
        return JobEventKind.PREEMPTED if before == "running" else None
    return _END_OF_PHASE[phase]


def lifecycle_events(last: Mapping[str, JobEventKind], snapshot: SourceSnapshot) -> list[JobEvent]:
    """The JobEvents that bring the published lifecycle (``last``: the latest event kind per job)
    up to ``snapshot``, each transition once, in job-id order.

    A job new to ``last`` gets ``submitted`` with its spec (a job without a spec, or one first
    seen already ended, is not ours to plan: nothing), then ``started`` if it already runs. A
    known job that has not ended and is gone from the snapshot is ``cancelled``. A job whose
    standing did not change gets nothing, so feeding the events back into ``last`` (or
    restoring ``last`` from the job-events topic after a restart) makes the next call quiet.
    """
    events: list[JobEvent] = []
    for job_id, job in sorted(snapshot.jobs.items()):
        kind = last.get(job_id)
        if kind is None:
            if job.spec is None or standing_of_phase(job.phase) == "ended":
                continue
            events.append(_event(snapshot, job, JobEventKind.SUBMITTED, "unseen"))
            before: Standing = "waiting"
        else:
            before = standing_after(kind)
        new = phase_event(before, job.phase)
        if new is not None:
            events.append(_event(snapshot, job, new, before))
    for job_id, kind in sorted(last.items()):
        if job_id not in snapshot.jobs and standing_after(kind) != "ended":
            events.append(
                JobEvent(
                    cluster=snapshot.cluster,
                    job_id=job_id,
                    kind=JobEventKind.CANCELLED,
                    time=snapshot.time,
                    message=f"{standing_after(kind)} job no longer reported by the cluster",
                )
            )
    return events


def _event(snapshot: SourceSnapshot, job: SourcedJob, kind: JobEventKind, before: str) -> JobEvent:
    note = f"{before} -> {job.phase}"
    return JobEvent(
        cluster=snapshot.cluster,
        job_id=job.job_id,
        kind=kind,
        time=snapshot.time,
        spec=job.spec if kind == JobEventKind.SUBMITTED else None,
        pool=job.pool if kind == JobEventKind.STARTED else None,
        nodes=dict(job.nodes) if kind == JobEventKind.STARTED and job.nodes else None,
        message=f"{note}: {job.message}" if job.message else note,
    )


def latest_kinds(events: list[JobEvent], cluster: str) -> dict[str, JobEventKind]:
    """The latest event kind per job of ``cluster``, from events in offset order (the job-events
    topic read back at start): the ``last`` that :func:`lifecycle_events` continues from."""
    last: dict[str, JobEventKind] = {}
    for event in events:
        if event.cluster == cluster:
            last[event.job_id] = event.kind
    return last
