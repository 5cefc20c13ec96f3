"""The Slurm backend: pools are partitions; batch jobs are held/released/moved/requeued; inference
capacity is held as reservations.

Place in the loop: a ``Backend`` for the ``Actuator`` engine. It maps an Allocation onto Slurm:

- job ``run``: a pending job is moved to the pool's partition (while pending) and released;
  a suspended one is resumed. A job already running in that pool is left alone. Where the decision
  keeps the job off nodes (``avoid_nodes``: maintenance, or nodes held for a heavier gang as they
  drain), they go into its ``ExcNodeList`` beside the user's own exclusions; the nodes ebbtide
  added are recorded in its comment (``ebbtide-excluded:``), so the next start replaces exactly
  those and the user's stay as they were.
- job ``hold``: a pending job is held (``scontrol hold``); a running job is not touched.
- job ``preempt``: the job gets its checkpoint signal (``scancel --full --signal=USR1``), the
  engine waits the grace period once for all preempted jobs, then ``scontrol requeuehold`` puts
  it back in the queue, held until a later step says ``run``.
- service capacity: a reservation ``ebbtide--<service>--<pool>`` of ceil(gpus / GPUs per node)
  nodes of the pool's partition until the allocation's ``valid_until``; updated when the next
  step differs, deleted when capacity goes to zero or the service leaves the allocation.

Jobs are matched by their Slurm job id: the ebbtide job id of Slurm job 42 of cluster ``prod`` is
``prod-42`` (actuators/slurm/records.py), never by name (two users may share one). Each decision
is shown where Slurm users look, in the job's comment (``squeue -o "%i %k"``): ebbtide's note
``ebbtide-decision: <action>: <reason> (plan=<plan_id>)`` after the user's ``ebbtide:`` section,
which stays as it was (actuators/slurm/comment.py). The note is written with every change to the
job, and on its own only when the action or reason differs from the note already there (a held
job's note changes when its reason does, not every step); ``observe`` reads the plan back.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from actuators.base import PHASE_JOBS, PHASE_PREEMPT, PHASE_SERVICES, Change
from actuators.observation import Observation, ObservedJob, ObservedService, service_key
from actuators.slurm.comment import DECISION_MARK, EXCLUDED_MARK, note_of, with_excluded, with_note
from actuators.slurm.maintenance import expand_hostlist
from actuators.slurm.records import (
    gres_gpus,
    job_gpus,
    job_key,
    job_nodes,
    job_phase,
    node_unschedulable,
)
from schemas import Allocation, JobAction, JobDecision, ServiceDecision
from schemas.targets import job_target, reservation_target, service_target

RESERVATION_PREFIX = "ebbtide--"
_PLAN_IN_COMMENT = re.compile(r"\(plan=(\S+)\)|ebbtide plan=(\S+)")
_TERMINAL = {"finished", "failed", "cancelled"}


class SlurmTransport(Protocol):
    """What the backend needs from Slurm; ``SlurmCli`` and ``SlurmRest`` provide it."""

    def jobs(self) -> list[dict[str, Any]]: ...
    def nodes(self) -> list[dict[str, Any]]: ...
    def reservations(self) -> list[dict[str, str]]: ...
    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None: ...
    def hold(self, job_id: str) -> None: ...
    def release(self, job_id: str) -> None: ...
    def resume(self, job_id: str) -> None: ...
    def signal(self, job_id: str, signal: str) -> None: ...
    def requeue_hold(self, job_id: str) -> None: ...
    def create_reservation(self, fields: Mapping[str, str]) -> None: ...
    def update_reservation(self, name: str, fields: Mapping[str, str]) -> None: ...
    def delete_reservation(self, name: str) -> None: ...


def _plan_note(job: Mapping[str, Any]) -> str | None:
    """The plan recorded on a job: its comment's decision note (or an older AdminComment note)."""
    for field in ("comment", "admin_comment"):
        m = _PLAN_IN_COMMENT.search(str(job.get(field) or ""))
        if m:
            return m.group(1) or m.group(2)
    return None


def reservation_name(service: str, pool: str) -> str:
    return f"{RESERVATION_PREFIX}{service}--{pool}"


def slurm_time(when: datetime) -> str:
    """Slurm reads and prints times in the controller's local time zone."""
    return when.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        transport: SlurmTransport,
        *,
        cluster: str,
        checkpoint_signal: str = "USR1",
        checkpoint_grace_s: float = 30.0,
        reservation_users: str = "root",
        reservation_flags: str = "",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if checkpoint_grace_s < 0:
            raise ValueError(f"checkpoint_grace_s: must be >= 0, got {checkpoint_grace_s}")
        self.transport = transport
        self.cluster = cluster
        self.checkpoint_signal = checkpoint_signal
        self.checkpoint_grace_s = checkpoint_grace_s
        self.reservation_users = reservation_users
        self.reservation_flags = reservation_flags
        self._clock = clock
        self._gpus_per_node: dict[str, int] = {}
        self._reservations: dict[str, dict[str, str]] = {}
        self._comments: dict[str, str] = {}
        self._excluded: dict[str, str] = {}

    # -- observe ---------------------------------------------------------------------------

    def observe(self) -> Observation:
        jobs_raw = self.transport.jobs()
        nodes = self.transport.nodes()
        reservations = [
            r
            for r in self.transport.reservations()
            if r.get("ReservationName", "").startswith(RESERVATION_PREFIX)
        ]
        total, free, per_node = _pool_gpus(nodes)
        self._gpus_per_node = per_node

        chosen = {job_key(self.cluster, job["job_id"]): job for job in jobs_raw if "job_id" in job}
        self._comments = {str(job["job_id"]): str(job.get("comment") or "") for job in chosen.values()}
        self._excluded = {str(job["job_id"]): str(job.get("excluded_nodes") or "") for job in chosen.values()}
        jobs = {
            key: ObservedJob(
                job_id=key,
                backend_id=str(job["job_id"]),
                phase=job_phase(job),
                pool=str(job.get("partition") or "") or None,
                gpus=job_gpus(job),
                plan_id=_plan_note(job),
                nodes=job_nodes(job) if job_phase(job) == "running" else {},
            )
            for key, job in chosen.items()
        }

        services: dict[str, ObservedService] = {}
        self._reservations = {}
        for resv in reservations:
            name = resv["ReservationName"]
            self._reservations[name] = resv
            parts = name[len(RESERVATION_PREFIX) :].split("--")
            if len(parts) != 2:
                continue
            service, pool = parts
            nodes_held = int(resv.get("NodeCnt", "0") or 0)
            services[service_key(service, pool)] = ObservedService(
                service=service,
                pool=pool,
                replicas=nodes_held,
                gpus=float(nodes_held * per_node.get(pool, 0)),
            )
        return Observation(
            cluster=self.cluster,
            backend=self.name,
            time=self._clock(),
            jobs=jobs,
            services=services,
            gpus_total=total,
            gpus_free=free,
        )

    # -- plan ------------------------------------------------------------------------------

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        changes = [self._plan_service(allocation, s) for s in allocation.services]
        wanted = {reservation_name(s.service, s.pool) for s in allocation.services}
        for name in sorted(self._reservations):
            if name not in wanted:
                changes.append(
                    Change(
                        target=reservation_target(name),
                        action="unreserve",
                        detail="service left the allocation",
                        execute=partial(self.transport.delete_reservation, name),
                        phase=PHASE_SERVICES,
                    )
                )
        changes += [self._plan_job(allocation, j, observed) for j in allocation.jobs]
        return changes

    def _plan_service(self, allocation: Allocation, decision: ServiceDecision) -> Change:
        target = service_target(decision.service, decision.pool)
        name = reservation_name(decision.service, decision.pool)
        per_node = self._gpus_per_node.get(decision.pool)
        if not per_node:
            return Change(
                target=target,
                action="reserve",
                detail="no GPUs",
                skip_reason=f"pool {decision.pool!r} is not a Slurm partition with GPU nodes",
            )
        nodes = math.ceil(decision.gpus / per_node) if decision.replicas > 0 else 0
        have = self._reservations.get(name)
        end = slurm_time(allocation.valid_until)
        if nodes == 0:
            if have is None:
                return Change(
                    target=target, action="unreserve", detail="no capacity, none held", phase=PHASE_SERVICES
                )
            return Change(
                target=target,
                action="unreserve",
                detail=f"delete {name}",
                phase=PHASE_SERVICES,
                execute=lambda: self.transport.delete_reservation(name),
            )
        if have is None:
            fields = {
                "ReservationName": name,
                "PartitionName": decision.pool,
                "NodeCnt": str(nodes),
                "StartTime": "now",
                "EndTime": end,
                "Users": self.reservation_users,
            }
            if self.reservation_flags:
                fields["Flags"] = self.reservation_flags
            return Change(
                target=target,
                action="reserve",
                detail=f"create {name}: {nodes} nodes until {end}",
                phase=PHASE_SERVICES,
                execute=lambda: self.transport.create_reservation(fields),
            )
        if int(have.get("NodeCnt", "0") or 0) == nodes and have.get("EndTime") == end:
            return Change(target=target, action="reserve", detail="matches", phase=PHASE_SERVICES)
        update = {"NodeCnt": str(nodes), "EndTime": end}
        return Change(
            target=target,
            action="reserve",
            detail=f"update {name}: {nodes} nodes until {end}",
            phase=PHASE_SERVICES,
            execute=lambda: self.transport.update_reservation(name, update),
        )

    def _plan_job(self, allocation: Allocation, decision: JobDecision, observed: Observation) -> Change:
        target = job_target(decision.job_id)
        action = decision.action.value
        job = observed.jobs.get(decision.job_id)
        if job is None:
            return Change(
                target=target,
                action=action,
                detail="unknown",
                skip_reason=f"no Slurm job {decision.job_id!r} (Slurm jobs are {self.cluster}-<job id>)",
            )
        if job.phase in _TERMINAL:
            return Change(target=target, action=action, detail=job.phase, skip_reason=f"job is {job.phase}")
        note = self._decision_note(job.backend_id, allocation.plan_id, decision)
        if decision.action == JobAction.RUN:
            change = self._plan_run(target, action, decision, job, note)
        elif decision.action == JobAction.HOLD:
            change = self._plan_hold(target, action, job, note)
        else:
            change = self._plan_preempt(target, action, job, note)
        return self._with_note_only_change(change, job.backend_id, note)

    def _decision_note(self, sid: str, plan_id: str, decision: JobDecision) -> dict[str, str]:
        """The comment update that shows the decision: the user's section kept, ebbtide's note new,
        or nothing when the note there already says this action and reason."""
        comment = self._comments.get(sid, "")
        action = decision.action.value
        said = decision.reason if decision.reason.startswith(f"{action}:") else f"{action}: {decision.reason}"
        there = note_of(comment, DECISION_MARK) or ""
        if there.rsplit(" (plan=", 1)[0] == said:
            return {}
        return {"Comment": with_note(comment, DECISION_MARK, f"{said} (plan={plan_id})")}

    def _with_note_only_change(self, change: Change, sid: str, note: dict[str, str]) -> Change:
        """A target that needs nothing but whose decision note is new: write just the note."""
        if change.execute is not None or change.skip_reason is not None or not note:
            return change
        return dataclasses.replace(
            change,
            detail=f"{change.detail}; note the decision",
            execute=partial(self.transport.update_job, sid, note),
        )

    def _plan_run(
        self, target: str, action: str, decision: JobDecision, job: ObservedJob, note: dict[str, str]
    ) -> Change:
        sid = job.backend_id
        if job.phase == "running":
            if job.pool == decision.pool:
                return Change(target=target, action=action, detail="running in pool")
            return Change(
                target=target,
                action=action,
                detail="running elsewhere",
                skip_reason=f"running in {job.pool}; a running job moves only after a preempt",
            )
        # A requeued job is not eligible again for a while (Slurm sets its begin time ahead);
        # the plan says now, so say so.
        fields = {**note, "StartTime": "now"}
        detail = f"{job.phase} -> release in {decision.pool}"
        if job.phase != "suspended":
            fields |= self._exclusions(sid, decision.avoid_nodes, note)
            if job.pool != decision.pool:
                fields["Partition"] = str(decision.pool)
            if decision.avoid_nodes:
                detail += f" off {', '.join(decision.avoid_nodes)} (maintenance, or held for a heavier gang)"
        if job.phase == "pending" and "Partition" not in fields and "ExcNodeList" not in fields:
            return Change(target=target, action=action, detail="released, waiting for Slurm to start it")

        def run() -> None:
            self.transport.update_job(sid, fields)
            if job.phase == "held":
                self.transport.release(sid)
            elif job.phase == "suspended":
                self.transport.resume(sid)

        return Change(target=target, action=action, execute=run, detail=detail)

    def _exclusions(self, sid: str, avoid: Sequence[str], note: Mapping[str, str]) -> dict[str, str]:
        """The job fields that keep a job to be started off ``avoid``: its ``ExcNodeList`` (the user's
        own exclusions, then these) where that changes, and its comment with the record of the nodes
        ebbtide excluded (on top of this step's decision note, if any) where that changes. The user's
        own are what the list holds beyond the record; a node they excluded stays theirs."""
        comment = note.get("Comment", self._comments.get(sid, ""))
        ours_before = set(expand_hostlist(note_of(comment, EXCLUDED_MARK) or ""))
        excluded = expand_hostlist(self._excluded.get(sid, ""))
        users = [node for node in excluded if node not in ours_before]
        ours = sorted(set(avoid) - set(users))
        fields: dict[str, str] = {}
        if set(users) | set(ours) != set(excluded):
            fields["ExcNodeList"] = ",".join([*users, *ours])
        recorded = with_excluded(comment, ours)
        if recorded != self._comments.get(sid, ""):
            fields["Comment"] = recorded
        return fields

    def _plan_hold(self, target: str, action: str, job: ObservedJob, note: dict[str, str]) -> Change:
        sid = job.backend_id
        if job.phase in {"held", "suspended"}:
            return Change(target=target, action=action, detail=job.phase)
        if job.phase == "running":
            return Change(
                target=target,
                action=action,
                detail="running",
                skip_reason="hold applies to waiting jobs; preempt stops a running one",
            )

        def hold() -> None:
            self.transport.hold(sid)
            if note:
                self.transport.update_job(sid, note)

        return Change(target=target, action=action, detail="pending -> held", execute=hold)

    def _plan_preempt(self, target: str, action: str, job: ObservedJob, note: dict[str, str]) -> Change:
        """Preempt: hold what waits; checkpoint-signal, then requeue held, what runs."""
        sid = job.backend_id
        if job.phase == "held":
            return Change(target=target, action=action, detail="held", phase=PHASE_PREEMPT)
        if job.phase == "pending":

            def hold_pending() -> None:
                self.transport.hold(sid)
                if note:
                    self.transport.update_job(sid, note)

            return Change(
                target=target,
                action=action,
                detail="pending -> held",
                execute=hold_pending,
                phase=PHASE_PREEMPT,
            )

        def requeue() -> None:
            self.transport.requeue_hold(sid)
            if note:
                self.transport.update_job(sid, note)

        prepare = None
        if job.phase == "running":

            def prepare() -> None:
                self.transport.signal(sid, self.checkpoint_signal)

        return Change(
            target=target,
            action=action,
            detail=f"{job.phase} -> checkpoint, requeue held",
            execute=requeue,
            prepare=prepare,
            grace_s=self.checkpoint_grace_s,
            phase=PHASE_PREEMPT,
        )


__all__ = ["PHASE_JOBS", "SlurmBackend", "SlurmTransport", "job_gpus", "job_phase", "reservation_name"]


def _pool_gpus(nodes: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Per partition: GPUs in all, GPUs free on usable nodes (down, drained and failing ones count
    none), and the most GPUs one node holds."""
    total: dict[str, int] = {}
    free: dict[str, int] = {}
    per_node: dict[str, int] = {}
    for node in nodes:
        gpus = gres_gpus(str(node.get("gres") or ""))
        used = gres_gpus(str(node.get("gres_used") or ""))
        usable = node_unschedulable(node) is None
        for pool in node.get("partitions") or []:
            total[pool] = total.get(pool, 0) + gpus
            free[pool] = free.get(pool, 0) + (max(gpus - used, 0) if usable else 0)
            per_node[pool] = max(per_node.get(pool, 0), gpus)
    return total, free, per_node
