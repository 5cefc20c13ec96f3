"""Folding a source's PoolInventory into the pools of the ClusterState (pure).

Place in the loop: part of the state fold (streams/fold.py). A pool a cluster source has reported
takes its capacity from the source, not from GPU telemetry: ``gpus_available`` is the allocatable
GPUs of its schedulable nodes (capped by the pool's configured total), ``node_names`` those nodes
and ``free_gpus_by_node`` their free GPUs as the source reports them (after every job running
there, ebbtide's or not). A drained, down, cordoned or NotReady node counts none. The pool's
maintenance windows are the seed's and those the source announces (a Slurm ``MAINT``
reservation, a Kubernetes node's ``ebbtide.io/maintenance`` annotation or GKE's label). A pool no
source has reported keeps what telemetry (or its seed) says.
"""

from __future__ import annotations

from datetime import datetime

from schemas import InventoryPool, PoolInventory, PoolState


def newer_pools(
    held: dict[str, tuple[datetime, InventoryPool]], inventory: PoolInventory, known: set[str]
) -> dict[str, tuple[datetime, InventoryPool]]:
    """The pools of ``inventory`` (of the ``known`` ones) newer than what ``held`` has for them."""
    newer: dict[str, tuple[datetime, InventoryPool]] = {}
    for pool in inventory.pools:
        prior = held.get(pool.name)
        if pool.name in known and (prior is None or inventory.time > prior[0]):
            newer[pool.name] = (inventory.time, pool)
    return newer


def pool_from_inventory(pool: PoolState, reported: InventoryPool, now: datetime) -> PoolState:
    """``pool`` with the capacity and nodes its source reported, and the maintenance windows it
    announced after the seed's own (those that have ended left out, GPUs out capped at the pool's
    total)."""
    usable = sorted((n for n in reported.nodes if n.schedulable), key=lambda n: n.name)
    available = min(sum(n.gpus for n in usable), pool.gpus_total)
    windows = [
        w.model_copy(update={"gpus_out": min(w.gpus_out, pool.gpus_total)})
        for w in [*pool.windows, *reported.windows]
        if w.end > now and pool.gpus_total > 0
    ]
    return pool.model_copy(
        update={
            "gpus_available": available,
            "node_names": [n.name for n in usable],
            "free_gpus_by_node": [min(n.gpus_free, pool.gpus_per_node) for n in usable],
            "windows": windows,
        }
    )


def unknown_inventory_pool(inventory: PoolInventory, pools: list[str], cluster: str) -> str | None:
    """Why an inventory of this cluster names a pool the cluster does not have, or None."""
    unknown = [p.name for p in inventory.pools if p.name not in pools]
    if not unknown:
        return None
    return (
        f"pools {unknown}: not pools of cluster {cluster} (its pools: {', '.join(pools)}); "
        f"reported by source {inventory.source!r}"
    )
