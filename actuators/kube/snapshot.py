"""From the Kubernetes source's records to the loop's SourceSnapshot: pure, no I/O.

Place in the loop: ``KubernetesSource.snapshot`` reads its view's records under the lock and hands
them here. What comes out:

- one ``SourcedJob`` per opted-in workload with a valid spec (one with an invalid spec was
  reported on the Job and is left out, as loop/sources.py asks), its phase in the loop's words:
  suspended and never started ``held``, suspended again by ebbtide ``suspended``, resumed
  ``running`` (with the GPUs its pods hold per node), ``finished`` / ``failed`` from the Job's
  conditions, deleted ``cancelled``;
- the ``PoolInventory``: per pool (node label) its nodes with allocatable GPUs, GPUs free (those
  no bound, unfinished pod requests) and whether they take work, and the maintenance windows its
  nodes announce that have not ended (nodes with the same window in one ``PoolWindow``); per
  labelled Deployment its replicas in its pool and, when an HPA targets it, the HPA's bounds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime

from actuators.kube.records import DeploymentRecord, NodeRecord, PodRecord, WorkloadRecord
from loop.sources import JobPhase, SourcedJob, SourceSnapshot
from schemas import InventoryNode, InventoryPool, InventoryService, PoolInventory, PoolWindow
from schemas.bounds import MAX_REPLICAS

PHASE: dict[str, JobPhase] = {
    "queued": "held",
    "preempted": "suspended",
    "running": "running",
    "finished": "finished",
    "failed": "failed",
    "cancelled": "cancelled",
}


def _held_by_owner(pods: Iterable[PodRecord]) -> dict[tuple[str, str, str], dict[str, int]]:
    held: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    for pod in pods:
        owner = pod.owner()
        if owner is not None:
            held[owner][pod.node] = held[owner].get(pod.node, 0) + pod.gpus
    return held


def sourced_jobs(workloads: Iterable[WorkloadRecord], pods: Iterable[PodRecord]) -> dict[str, SourcedJob]:
    held = _held_by_owner(pods)
    jobs: dict[str, SourcedJob] = {}
    for w in sorted(workloads, key=lambda w: (w.job_id, w.phase != "cancelled")):
        if w.spec is None:
            continue
        phase = PHASE[w.phase]
        jobs[w.job_id] = SourcedJob(
            job_id=w.job_id,
            phase=phase,
            spec=w.spec,
            pool=w.pool,
            nodes=held.get((w.kind, w.namespace, w.name), {}) if phase == "running" else {},
            message=w.message,
        )
    return jobs


def announced_windows(members: Iterable[NodeRecord], now: datetime) -> list[PoolWindow]:
    """The maintenance windows the nodes of one pool announce that have not ended, one per
    distinct (start, end, announcement) naming every node that shares it."""
    shared: dict[tuple[datetime, datetime, str], list[NodeRecord]] = defaultdict(list)
    for node in members:
        window = node.maintenance
        if window is not None and window.end > now and node.gpus > 0:
            shared[(window.start, window.end, window.source)].append(node)
    return [
        PoolWindow(
            start=start,
            end=end,
            gpus_out=sum(n.gpus for n in out),
            nodes=sorted(n.name for n in out),
            reason=f"maintenance ({source})",
        )
        for (start, end, source), out in sorted(shared.items())
    ]


def inventory_pools(
    nodes: Iterable[NodeRecord], pods: Iterable[PodRecord], now: datetime
) -> list[InventoryPool]:
    used: Counter[str] = Counter()
    for pod in pods:
        used[pod.node] += pod.gpus
    by_pool: dict[str, list[NodeRecord]] = defaultdict(list)
    for node in nodes:
        if node.pool is not None:
            by_pool[node.pool].append(node)
    pools = []
    for name, members in sorted(by_pool.items()):
        gpu_type = Counter(n.gpu_type for n in members).most_common(1)[0][0]
        pools.append(
            InventoryPool(
                name=name,
                gpu_type=gpu_type,
                nodes=[
                    InventoryNode(
                        name=n.name,
                        gpus=n.gpus,
                        gpus_free=max(n.gpus - used[n.name], 0),
                        schedulable=n.schedulable,
                        reason=n.reason,
                    )
                    for n in sorted(members, key=lambda n: n.name)
                ],
                windows=announced_windows(members, now),
            )
        )
    return pools


def inventory_services(
    deployments: Iterable[DeploymentRecord], hpas: Iterable[tuple[str, str, int, int]]
) -> list[InventoryService]:
    bounds = {(ns, name): (low, high) for ns, name, low, high in hpas}
    replicas: Counter[tuple[str, str]] = Counter()
    low_high: dict[tuple[str, str], tuple[int, int]] = {}
    for dep in deployments:
        key = (dep.service, dep.pool)
        replicas[key] += dep.replicas
        low, high = bounds.get((dep.namespace, dep.name), (0, MAX_REPLICAS))
        old_low, old_high = low_high.get(key, (0, 0))
        low_high[key] = (old_low + low, min(old_high + high, MAX_REPLICAS))
    return [
        InventoryService(
            service=service,
            pool=pool,
            replicas=replicas[(service, pool)],
            min_replicas=low,
            max_replicas=high,
        )
        for (service, pool), (low, high) in sorted(low_high.items())
    ]


def build_snapshot(
    cluster: str,
    time: datetime,
    *,
    workloads: Iterable[WorkloadRecord],
    pods: list[PodRecord],
    nodes: Iterable[NodeRecord],
    deployments: Iterable[DeploymentRecord],
    hpas: Iterable[tuple[str, str, int, int]],
) -> SourceSnapshot:
    inventory = PoolInventory(
        cluster=cluster,
        time=time,
        source="kubernetes",
        pools=inventory_pools(nodes, pods, time),
        services=inventory_services(deployments, hpas),
    )
    return SourceSnapshot(cluster=cluster, time=time, jobs=sourced_jobs(workloads, pods), inventory=inventory)
