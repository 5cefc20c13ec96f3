"""The Slurm source: the ebbtide jobs of a Slurm cluster and its partitions, as a ClusterSource.

Place in the loop: behind ``ebbtide run source`` with ``source.backend: slurm``
(streams/services/source.py publishes what it reports). Each snapshot reads ``squeue --json``
(every job slurmctld still knows, ended ones for ``MinJobAge`` seconds) and ``sinfo --json``
through the backend's transport (the CLI, or slurmrestd), and ``sacct --json`` for jobs it
reported before that left squeue (when the cluster keeps accounting):

- A job is an ebbtide job when its comment has an ``ebbtide:`` section (actuators/slurm/comment.py:
  ``sbatch --hold --comment "ebbtide: est_gpu_h=4 weight=3" -p pool-a,pool-b --gres=gpu:4``). Its
  id is ``<cluster>-<Slurm job id>``, its gang the GRES request times its nodes, its allowed pools
  its partitions, its time limit (Slurm starts it near maintenance only if the limit ends before),
  its phase from the job state (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY: failed).
- A job whose section cannot be read gets ``ebbtide-error: <key>: <why>`` written into its comment
  (once: not again while the note says the same) and is left out: never planned, never a crash.
- The inventory: one pool per partition with GPU nodes, each node with its GRES GPUs, those not in
  use, and, for a down, drained, failing or maintenance node, schedulable false with the reason;
  each partition with the maintenance windows (``MAINT`` reservations) that take its nodes out
  (actuators/slurm/maintenance.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from actuators.base import ActuationError
from actuators.factory import SlurmConfig, slurm_transport
from actuators.slurm.backend import SlurmTransport
from actuators.slurm.comment import ERROR_MARK, CommentError, note_of, parse_spec, spec_section, with_note
from actuators.slurm.maintenance import maintenance_windows
from actuators.slurm.records import (
    job_gpus,
    job_key,
    job_nodes,
    job_phase,
    job_time_limit_s,
    node_gpus,
    node_unschedulable,
)
from loop.sources import SourcedJob, SourceSnapshot
from schemas import InventoryNode, InventoryPool, PoolInventory

log = logging.getLogger(__name__)

Accounting = Callable[[Sequence[str]], list[dict[str, Any]]]
"""Slurm job ids -> their accounting records in squeue's field names (``SlurmCli.accounted_jobs``)."""


class SlurmSource:
    name = "slurm"

    def __init__(
        self,
        transport: SlurmTransport,
        *,
        cluster: str,
        accounting: Accounting | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.transport = transport
        self.cluster = cluster
        self.accounting = accounting
        self._clock = clock
        self._reported: set[str] = set()
        self.rejected: dict[str, str] = {}
        """Slurm job id -> why its comment could not be read (the last snapshot's)."""

    def snapshot(self) -> SourceSnapshot:
        now = self._clock()
        raw = self.transport.jobs()
        missing = sorted(self._reported - {str(j.get("job_id")) for j in raw}, key=int)
        if missing and self.accounting is not None:
            raw = raw + self.accounting(missing)
        jobs: dict[str, SourcedJob] = {}
        self.rejected = {}
        for record in raw:
            job = self._sourced(record)
            if job is not None:
                jobs[job.job_id] = job
        # Jobs to look up in accounting should they leave squeue: those that have not ended.
        ended = {"finished", "failed", "cancelled"}
        self._reported = {j.job_id.rsplit("-", 1)[1] for j in jobs.values() if j.phase not in ended}
        return SourceSnapshot(cluster=self.cluster, time=now, jobs=jobs, inventory=self._inventory(now))

    def _sourced(self, record: Mapping[str, Any]) -> SourcedJob | None:
        """The job as ebbtide sees it; None when it is no ebbtide job or its spec cannot be read."""
        section = spec_section(str(record.get("comment") or ""))
        if section is None or "job_id" not in record:
            return None
        sid = str(record["job_id"])
        key = job_key(self.cluster, sid)
        phase = job_phase(record)
        partition = str(record.get("partition") or "")
        try:
            pools = [p for p in partition.split(",") if p]
            spec = parse_spec(section, key, job_gpus(record), pools, job_time_limit_s(record))
        except CommentError as exc:
            self.rejected[sid] = str(exc)
            self._note_error(sid, str(record.get("comment") or ""), str(exc), phase)
            return None
        state = str(record.get("job_state", ""))
        reason = str(record.get("state_reason") or "None")
        return SourcedJob(
            job_id=key,
            phase=phase,
            spec=spec,
            pool=partition if phase == "running" else None,
            nodes=job_nodes(record) if phase == "running" else {},
            message=f"slurm job {sid} {state}" + ("" if reason == "None" else f" ({reason})"),
        )

    def _note_error(self, sid: str, comment: str, why: str, phase: str) -> None:
        """Write why the spec is unreadable into the job's comment, unless it says so already."""
        if note_of(comment, ERROR_MARK) == why or phase in {"finished", "failed", "cancelled"}:
            return
        log.warning("slurm job %s: its ebbtide comment cannot be read (%s); it is not planned", sid, why)
        try:
            self.transport.update_job(sid, {"Comment": with_note(comment, ERROR_MARK, why)})
        except ActuationError as exc:
            log.warning("slurm job %s: could not note the error on it: %s", sid, exc)

    def _inventory(self, now: datetime) -> PoolInventory:
        pools: dict[str, list[InventoryNode]] = {}
        types: dict[str, str] = {}
        for node in self.transport.nodes():
            gpus, used, kind = node_gpus(node)
            if gpus <= 0:
                continue
            why = node_unschedulable(node)
            entry = InventoryNode(
                name=str(node.get("name") or node.get("hostname")),
                gpus=gpus,
                gpus_free=0 if why else max(gpus - used, 0),
                schedulable=why is None,
                reason=why,
            )
            for partition in node.get("partitions") or []:
                pools.setdefault(str(partition), []).append(entry)
                types.setdefault(str(partition), kind)
        node_gpus_by_pool = {p: {n.name: n.gpus for n in nodes} for p, nodes in pools.items()}
        windows = maintenance_windows(self.transport.reservations(), node_gpus_by_pool, now)
        return PoolInventory(
            cluster=self.cluster,
            time=now,
            source=self.name,
            pools=[
                InventoryPool(
                    name=name,
                    gpu_type=types[name],
                    nodes=sorted(nodes, key=lambda x: x.name),
                    windows=windows.get(name, []),
                )
                for name, nodes in sorted(pools.items())
            ],
        )


def slurm_source(config: SlurmConfig, cluster: str) -> SlurmSource:
    """The source over the transport ``actuator.slurm``'s settings describe."""
    transport, cli = slurm_transport(config)
    return SlurmSource(transport, cluster=cluster, accounting=cli.accounted_jobs)
