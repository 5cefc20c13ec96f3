"""Pure state folding: job events, demand samples, GPU telemetry and allocations -> ClusterState.

The state service is a thin Kafka adapter around :class:`ClusterFold`. The fold starts from a
seed (the cluster's pools, services and quotas, from configuration or from the last ClusterState
published on the compacted cluster-state topic) and applies events in any order they arrive:

- JobEvents move a job through queued / running / gone; an event older than the last one applied
  to that job, or the same (time, kind) again, is ignored, so a replayed record changes nothing.
- DemandSamples are bucketed by step (the step that ends at or after the sample's time); a
  replayed sample overwrites its own bucket.
- GpuSamples mark a GPU (of a node) as seen at a time; only the latest time per GPU is kept. A
  pool's available GPUs are the GPUs seen within ``stale_after_s`` of ``as_of`` (capped by its
  total), once the pool has reported at all; its nodes (``node_names``) are the nodes with such a
  GPU, and ``free_gpus_by_node`` is each node's fresh GPUs less those running jobs hold there
  (``JobState.nodes``, from the ``nodes`` of started/progress JobEvents).
- Allocations set the services' running replicas (the latest decision wins).
- PoolInventories (from a cluster source) set a reported pool's available GPUs and its nodes from
  the source's nodes (streams/fold_inventory.py), over telemetry; the latest per pool wins.

:meth:`ClusterFold.unknown_reference` says why an event of this cluster names what the fold does
not know (a pool that is not one of the seed's, a job never submitted); the state service
dead-letters such an event rather than folding it. Jobs already gone (finished, failed,
cancelled, and forgotten after a snapshot) are remembered by id, up to ``GONE_REMEMBERED`` of
them, so a replayed or duplicated last event of theirs is ignored as a replay, not rejected.

A job's first start (a STARTED event folded into a job that was queued, never started and never
preempted) is kept in ``first_starts`` until the state service takes them with
:meth:`ClusterFold.take_first_starts` (for the queue-wait histogram). A job the seed already shows
running or preempted never counts as starting for the first time.

Pruning (:meth:`ClusterFold.prune`, after each published snapshot) keeps the fold bounded under
churn, by the rules of :class:`Pruning`: a GPU with no sample for ``gpu_vanished_steps`` steps
before ``as_of`` has vanished (a node removed, a GPU replaced) and its telemetry is dropped; a job
that is not running and has had no event for ``job_abandoned_s`` (its end never came) is
abandoned: dropped, remembered among the gone ids, and counted in ``counters.jobs_abandoned``.
A running job is never pruned, however quiet (its GPUs are held until an event says otherwise).

No I/O, no clock reads: ``snapshot(as_of)`` and ``prune(as_of)`` are given the time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from schemas import (
    Allocation,
    ClusterState,
    DemandSample,
    GpuSample,
    InventoryPool,
    JobEvent,
    JobEventKind,
    JobState,
    JobStatus,
    PoolInventory,
    PoolState,
    ServiceState,
)
from streams.fold_inventory import newer_pools, pool_from_inventory, unknown_inventory_pool

FoldedEvent = JobEvent | DemandSample | GpuSample | Allocation | PoolInventory
"""What the fold folds."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
GONE_REMEMBERED = 100_000
"""How many forgotten (gone) job ids the fold keeps, so their replays are told from unknown jobs."""
DEFAULT_HISTORY_STEPS = 21 * 96
"""Demand history kept per service: three weeks of 15-minute steps. The forecaster's weekly
candidates need it (MSTL daily + weekly is a candidate from 15 days, and a candidate is chosen
only when scored on 3 or more origins). On GenTD26's busy GPUs (`ebbtide forecast backtest
--window-days N`), forecasting from only the last 7 days (the default until then) scored 1.304
relative MAE, worse than seasonal naive, with 90% coverage 0.847 over 9 daily origins; from the last
21 days 0.686 and 0.901 on the 8 origins every model forecasts from (the whole past: 0.683 and
0.917). ``tests/forecaster/test_history_window.py`` checks a weekly pattern is learned from it."""
_GONE = {JobEventKind.FINISHED, JobEventKind.FAILED, JobEventKind.CANCELLED}
# Order of kinds at the same instant: a job can be submitted, started, and preempted in one step.
_KIND_ORDER = {
    JobEventKind.SUBMITTED: 0,
    JobEventKind.PREEMPTED: 1,
    JobEventKind.STARTED: 2,
    JobEventKind.PROGRESS: 3,
    JobEventKind.FINISHED: 4,
    JobEventKind.FAILED: 4,
    JobEventKind.CANCELLED: 4,
}


def step_index(time: datetime, step_s: int) -> int:
    """Index of the step that ends at or after ``time`` (a sample at a boundary closes that step)."""
    return math.ceil((time - EPOCH).total_seconds() / step_s - 1e-9)


def step_start(index: int, step_s: int) -> datetime:
    return EPOCH + timedelta(seconds=index * step_s)


def floor_to_step(time: datetime, step_s: int) -> datetime:
    seconds = (time - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=math.floor(seconds / step_s) * step_s)


@dataclass
class _JobRecord:
    state: JobState | None
    last_event: tuple[datetime, int] | None = None
    gone: bool = False


@dataclass(frozen=True)
class Pruning:
    """When the fold forgets a vanished GPU's telemetry and an abandoned job (see the module doc)."""

    gpu_vanished_steps: int = 96
    job_abandoned_s: float = 30 * 86_400.0
    """30 days: a queued job can wait days behind higher-priority work; one with no event for a month
    (no start, no end, no cancel) is taken as abandoned by its submitter."""


@dataclass
class FoldCounters:
    job_events: int = 0
    demand_samples: int = 0
    gpu_samples: int = 0
    allocations: int = 0
    inventories: int = 0
    ignored: int = 0
    gpus_vanished: int = 0
    jobs_abandoned: int = 0


@dataclass
class ClusterFold:
    """The per-cluster aggregate. Seed it, apply events, take snapshots."""

    seed: ClusterState
    max_history_steps: int = DEFAULT_HISTORY_STEPS
    stale_after_s: float = 0.0
    pruning: Pruning = field(default_factory=Pruning)
    jobs: dict[str, _JobRecord] = field(default_factory=dict)
    demand: dict[str, dict[int, float]] = field(default_factory=dict)
    gpu_seen: dict[str, dict[str, datetime]] = field(default_factory=dict)
    gpu_node: dict[str, dict[str, str]] = field(default_factory=dict)
    replicas: dict[str, dict[str, int]] = field(default_factory=dict)
    last_allocation_at: datetime | None = None
    counters: FoldCounters = field(default_factory=FoldCounters)
    first_starts: list[JobState] = field(default_factory=list)
    gone_ids: dict[str, None] = field(default_factory=dict)
    inventory: dict[str, tuple[datetime, InventoryPool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        step_s = self.seed.step_s
        if self.stale_after_s <= 0.0:
            self.stale_after_s = float(step_s)
        end = step_index(self.seed.as_of, step_s)
        for svc in self.seed.services:
            history = svc.demand_history
            first = end - len(history) + 1
            self.demand[svc.spec.service] = {first + i: v for i, v in enumerate(history)}
            self.replicas[svc.spec.service] = dict(svc.replicas)
        for job in self.seed.jobs:
            self.jobs[job.spec.job_id] = _JobRecord(state=job)

    @property
    def cluster(self) -> str:
        return self.seed.cluster

    @property
    def step_s(self) -> int:
        return self.seed.step_s

    # ---- applying events -------------------------------------------------------------------

    def apply(self, event: FoldedEvent) -> bool:
        """Fold one event. Returns False when it was ignored (other cluster, stale or a replay)."""
        if event.cluster != self.cluster:
            self.counters.ignored += 1
            return False
        if isinstance(event, PoolInventory):
            return self._apply_inventory(event)
        if isinstance(event, GpuSample):
            return self.apply_gpu_sample(event)
        if isinstance(event, DemandSample):
            return self._apply_demand(event)
        if isinstance(event, JobEvent):
            return self._apply_job(event)
        return self._apply_allocation(event)

    def unknown_reference(self, event: FoldedEvent) -> str | None:
        """Why ``event`` (of this cluster) refers to a pool or job the fold does not know, or None."""
        if event.cluster != self.cluster:
            return None
        if isinstance(event, PoolInventory):
            return unknown_inventory_pool(event, [p.name for p in self.seed.pools], self.cluster)
        if isinstance(event, GpuSample):
            return self._unknown_pool(event.pool)
        if not isinstance(event, JobEvent):
            return None
        known = event.job_id in self.jobs
        if not known and event.kind != JobEventKind.SUBMITTED and event.job_id not in self.gone_ids:
            kind = event.kind.value
            return f"job {event.job_id!r}: a {kind} event for a job never submitted to {self.cluster}"
        if event.kind in (JobEventKind.STARTED, JobEventKind.PROGRESS) and event.pool is not None:
            return self._unknown_pool(event.pool)
        record = self.jobs.get(event.job_id)
        current = record.state.pool if record is not None and record.state is not None else None
        if event.kind == JobEventKind.STARTED and event.pool is None and current is None:
            return f"pool: job {event.job_id!r} started in no pool"
        return None

    def _unknown_pool(self, pool: str) -> str | None:
        names = [p.name for p in self.seed.pools]
        if pool in names:
            return None
        return f"pool {pool!r}: not a pool of cluster {self.cluster} (its pools: {', '.join(names)})"

    def apply_gpu_sample(self, sample: GpuSample) -> bool:
        return self.apply_gpu_samples((sample,)) == 1

    def apply_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        """Fold a batch of telemetry (the hot path): keep the latest time and the node per GPU.

        Returns how many samples were of this cluster (the others are counted as ignored).
        """
        cluster = self.cluster
        gpu_seen = self.gpu_seen
        gpu_node = self.gpu_node
        pool_name = ""
        seen: dict[str, datetime] = {}
        nodes: dict[str, str] = {}
        folded = 0
        for sample in samples:
            if sample.cluster != cluster:
                continue
            folded += 1
            if sample.pool != pool_name:
                pool_name = sample.pool
                seen = gpu_seen.setdefault(pool_name, {})
                nodes = gpu_node.setdefault(pool_name, {})
            uuid = sample.gpu_uuid
            previous = seen.get(uuid)
            if previous is None or sample.time > previous:
                seen[uuid] = sample.time
                nodes[uuid] = sample.node
        self.counters.gpu_samples += folded
        self.counters.ignored += len(samples) - folded
        return folded

    def _apply_demand(self, sample: DemandSample) -> bool:
        if sample.service not in self.replicas:
            self.counters.ignored += 1
            return False
        buckets = self.demand.setdefault(sample.service, {})
        buckets[step_index(sample.time, self.step_s)] = sample.gpus_busy
        if len(buckets) > 2 * self.max_history_steps:
            for old in sorted(buckets)[: len(buckets) - self.max_history_steps]:
                del buckets[old]
        self.counters.demand_samples += 1
        return True

    def _apply_inventory(self, inventory: PoolInventory) -> bool:
        newer = newer_pools(self.inventory, inventory, {p.name for p in self.seed.pools})
        if not newer:
            self.counters.ignored += 1
            return False
        self.inventory.update(newer)
        self.counters.inventories += 1
        return True

    def _apply_allocation(self, allocation: Allocation) -> bool:
        if self.last_allocation_at is not None and allocation.issued_at < self.last_allocation_at:
            self.counters.ignored += 1
            return False
        self.last_allocation_at = allocation.issued_at
        decided: dict[str, dict[str, int]] = {name: {} for name in self.replicas}
        for decision in allocation.services:
            if decision.service in decided and decision.replicas > 0:
                decided[decision.service][decision.pool] = decision.replicas
        self.replicas = decided
        self.counters.allocations += 1
        return True

    def _apply_job(self, event: JobEvent) -> bool:
        record = self.jobs.get(event.job_id)
        order = (event.time, _KIND_ORDER[event.kind])
        if record is not None and record.last_event is not None and order <= record.last_event:
            self.counters.ignored += 1
            return False
        if record is None:
            if event.kind != JobEventKind.SUBMITTED or event.spec is None:
                # An update for a job we never saw submitted (its submit was compacted away or
                # belongs to another instance's partition): nothing to fold it into.
                self.counters.ignored += 1
                return False
            record = _JobRecord(state=None)
        before = record.state
        after = _next_job_state(before, event)  # raises before the record changes when unusable
        self.jobs[event.job_id] = record
        record.last_event = order
        self.counters.job_events += 1
        record.state = after
        record.gone = event.kind in _GONE
        if event.kind == JobEventKind.STARTED and _never_started(before):
            self.first_starts.append(record.state)
        return True

    def take_first_starts(self) -> list[JobState]:
        """The jobs that started for the first time since the last call (each job once)."""
        taken, self.first_starts = self.first_starts, []
        return taken

    # ---- snapshots ---------------------------------------------------------------------------

    def pool_available(self, pool: PoolState, as_of: datetime) -> int:
        seen = self.gpu_seen.get(pool.name)
        if seen is None:  # never reported (a pool whose GPUs all vanished has reported: none)
            return pool.gpus_available
        horizon = as_of - timedelta(seconds=self.stale_after_s)
        fresh = sum(1 for t in seen.values() if horizon < t <= as_of + timedelta(seconds=self.step_s))
        return min(fresh, pool.gpus_total)

    def fresh_gpus_by_node(self, pool: str, as_of: datetime) -> dict[str, int]:
        """GPUs of each node of a pool seen within ``stale_after_s`` of ``as_of`` (silent nodes left out)."""
        seen = self.gpu_seen.get(pool)
        if not seen:
            return {}
        node_of = self.gpu_node.get(pool, {})
        horizon = as_of - timedelta(seconds=self.stale_after_s)
        latest = as_of + timedelta(seconds=self.step_s)
        counts: dict[str, int] = {}
        for uuid, t in seen.items():
            if horizon < t <= latest:
                node = node_of[uuid]
                counts[node] = counts.get(node, 0) + 1
        return counts

    def pool_nodes(self, pool: PoolState, as_of: datetime, jobs: Sequence[JobState]) -> PoolState:
        """The pool with what telemetry says now: available GPUs, and nodes up with their free GPUs.

        A pool that has not reported keeps its seed values. Free GPUs on a node are its fresh
        GPUs (at most ``gpus_per_node``) less the GPUs running jobs hold there. A pool a cluster
        source reported takes its source's nodes instead (streams/fold_inventory.py).
        """
        reported = self.inventory.get(pool.name)
        if reported is not None:
            return pool_from_inventory(pool, reported[1], as_of)
        update: dict[str, object] = {"gpus_available": self.pool_available(pool, as_of)}
        fresh = self.fresh_gpus_by_node(pool.name, as_of)
        if fresh:
            held: dict[str, int] = {}
            for job in jobs:
                if job.status == JobStatus.RUNNING and job.pool == pool.name:
                    for node, gpus in job.nodes.items():
                        held[node] = held.get(node, 0) + gpus
            names = sorted(fresh)
            update["node_names"] = names
            update["free_gpus_by_node"] = [
                max(min(fresh[n], pool.gpus_per_node) - held.get(n, 0), 0) for n in names
            ]
        return pool.model_copy(update=update)

    def demand_history(self, service: str, as_of: datetime) -> list[float]:
        buckets = self.demand.get(service, {})
        if not buckets:
            return []
        end = step_index(as_of, self.step_s)
        first = min(buckets)
        start = max(first, end - self.max_history_steps + 1)
        values = []
        last = 0.0
        for index in range(start, end + 1):
            # A gap (no sample that step) repeats the previous value rather than inventing a zero.
            last = buckets.get(index, last)
            values.append(last)
        return values

    def snapshot(self, as_of: datetime) -> ClusterState:
        jobs = [
            record.state
            for _, record in sorted(self.jobs.items())
            if record.state is not None and not record.gone
        ]
        pools = [self.pool_nodes(pool, as_of, jobs) for pool in self.seed.pools]
        services = [
            ServiceState(
                spec=svc.spec,
                replicas=dict(sorted(self.replicas.get(svc.spec.service, {}).items())),
                demand_history=self.demand_history(svc.spec.service, as_of),
            )
            for svc in self.seed.services
        ]
        return ClusterState(
            cluster=self.cluster,
            as_of=as_of,
            step_s=self.step_s,
            pools=pools,
            services=services,
            jobs=jobs,
            quotas_gpus=dict(self.seed.quotas_gpus),
        )

    def forget_gone_jobs(self) -> int:
        """Drop finished jobs from memory (after a snapshot has been published). Returns how many."""
        gone = [job_id for job_id, record in self.jobs.items() if record.gone]
        self._forget(gone)
        return len(gone)

    def _forget(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            del self.jobs[job_id]
            self.gone_ids.pop(job_id, None)
            self.gone_ids[job_id] = None
        while len(self.gone_ids) > GONE_REMEMBERED:
            del self.gone_ids[next(iter(self.gone_ids))]

    def prune(self, as_of: datetime) -> tuple[int, int]:
        """Drop vanished GPUs' telemetry and abandoned jobs (see the module doc); how many of each."""
        vanished_before = as_of - timedelta(seconds=self.pruning.gpu_vanished_steps * self.step_s)
        gpus = 0
        for pool, seen in self.gpu_seen.items():
            old = [uuid for uuid, t in seen.items() if t < vanished_before]
            nodes = self.gpu_node.get(pool, {})
            for uuid in old:
                del seen[uuid]
                nodes.pop(uuid, None)
            gpus += len(old)
        abandoned_before = as_of - timedelta(seconds=self.pruning.job_abandoned_s)
        abandoned = [
            job_id
            for job_id, record in self.jobs.items()
            if _last_heard(record) < abandoned_before
            and (record.state is None or record.state.status != JobStatus.RUNNING)
        ]
        self._forget(abandoned)
        self.counters.gpus_vanished += gpus
        self.counters.jobs_abandoned += len(abandoned)
        return gpus, len(abandoned)


def _last_heard(record: _JobRecord) -> datetime:
    """When a job last had an event (a job from the seed: when it was submitted or last started)."""
    if record.last_event is not None:
        return record.last_event[0]
    if record.state is None:
        return EPOCH
    return max(t for t in (record.state.submitted_at, record.state.started_at) if t is not None)


def _never_started(job: JobState | None) -> bool:
    return (
        job is not None and job.status == JobStatus.QUEUED and job.started_at is None and job.preemptions == 0
    )


def _next_job_state(current: JobState | None, event: JobEvent) -> JobState:
    if current is None:
        assert event.spec is not None
        current = JobState(spec=event.spec, status=JobStatus.QUEUED, submitted_at=event.time)
    update: dict[str, object] = {}
    if event.kind == JobEventKind.SUBMITTED and event.spec is not None:
        update["spec"] = event.spec
    elif event.kind == JobEventKind.STARTED:
        update |= {
            "status": JobStatus.RUNNING,
            "pool": event.pool or current.pool,
            "started_at": event.time,
            "nodes": dict(event.nodes or {}),
        }
    elif event.kind == JobEventKind.PREEMPTED:
        update |= {
            "status": JobStatus.QUEUED,
            "pool": None,
            "started_at": None,
            "preemptions": current.preemptions + 1,
            "nodes": {},
        }
    elif event.kind == JobEventKind.FINISHED:
        update["status"] = JobStatus.FINISHED
    elif event.kind == JobEventKind.FAILED:
        update["status"] = JobStatus.FAILED
    elif event.kind == JobEventKind.CANCELLED:
        update["status"] = JobStatus.CANCELLED
    if event.done_gpu_s is not None:
        update["done_gpu_s"] = event.done_gpu_s
        checkpointed = event.checkpointed_gpu_s if event.checkpointed_gpu_s is not None else event.done_gpu_s
        update["since_checkpoint_gpu_s"] = max(event.done_gpu_s - checkpointed, 0.0)
    if event.kind == JobEventKind.PROGRESS and current.status == JobStatus.RUNNING:
        if event.pool is not None and event.pool != current.pool:
            update |= {"pool": event.pool, "nodes": {}}  # moved: its old nodes no longer hold it
        if event.nodes is not None:
            update["nodes"] = dict(event.nodes)
    merged = current.model_dump() | update
    return JobState.model_validate(merged, strict=False)
