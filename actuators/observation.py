"""What a backend observes: jobs, inference capacity and free GPUs, and the JobEvents they imply.

Place in the loop: every ``Actuator.apply`` starts with an observation (desired is compared with
it), and ``Actuator.observe_events`` turns the difference between two observations into
``schemas.JobEvent`` records (started / preempted / finished / failed / cancelled) that the
streams layer publishes, so the state service sees what really happened rather than what was
asked for. ``Observation`` itself is JSON-serialisable for publishing as-is.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from loop.sources import JobPhase, phase_event, standing_of_phase
from schemas import JobEvent, JobEventKind

__all__ = ["JobPhase", "Observation", "ObservedJob", "ObservedService", "job_events", "service_key"]
_WITH_NODES = frozenset({JobEventKind.STARTED, JobEventKind.PROGRESS})


class ObservedJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    backend_id: str = Field(description="the backend's own id: Slurm job id, namespace/name in Kubernetes")
    phase: JobPhase
    pool: str | None = None
    gpus: int = 0
    plan_id: str | None = Field(default=None, description="the plan that last changed it, when recorded")
    nodes: dict[str, int] = Field(
        default_factory=dict, description="GPUs it holds on each node while running; empty: not reported"
    )


class ObservedService(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    service: str
    pool: str
    replicas: int = Field(description="replicas (Kubernetes); nodes reserved (Slurm reservations)")
    gpus: float
    plan_id: str | None = None


class Observation(BaseModel):
    """A backend's view of one cluster at one time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str
    backend: str
    time: datetime
    jobs: dict[str, ObservedJob] = Field(default_factory=dict)
    services: dict[str, ObservedService] = Field(default_factory=dict, description="keyed service/pool")
    gpus_total: dict[str, int] = Field(default_factory=dict, description="GPUs per pool")
    gpus_free: dict[str, int] = Field(default_factory=dict, description="GPUs per pool not allocated now")

    def service(self, service: str, pool: str) -> ObservedService | None:
        return self.services.get(service_key(service, pool))


def service_key(service: str, pool: str) -> str:
    return f"{service}/{pool}"


def job_events(previous: Observation | None, current: Observation) -> list[JobEvent]:
    """JobEvents for every job whose phase changed between two observations (the transition
    table is loop.sources.phase_event, shared with the cluster sources).

    A job seen for the first time already running yields ``started``; a first sighting while
    pending yields nothing (its ``submitted`` event, with the spec, comes from the submitter).
    ``started`` carries the nodes the job holds when the backend reports them; a running job whose
    nodes are first reported, or change, later yields ``progress`` with them.
    """
    events: list[JobEvent] = []
    before = previous.jobs if previous is not None else {}
    for job_id, job in sorted(current.jobs.items()):
        prior = before.get(job_id)
        kind = phase_event(standing_of_phase(prior.phase) if prior else None, job.phase)
        if kind is None:
            if job.phase != "running" or not job.nodes or prior is None or prior.nodes == job.nodes:
                continue
            kind = JobEventKind.PROGRESS
        events.append(
            JobEvent(
                cluster=current.cluster,
                job_id=job_id,
                kind=kind,
                time=current.time,
                pool=job.pool or (prior.pool if prior else None),
                message=f"{current.backend}: {prior.phase if prior else 'unseen'} -> {job.phase}",
                nodes=dict(job.nodes) if kind in _WITH_NODES and job.nodes else None,
            )
        )
    return events
