"""PoolInventory: what a cluster source reports it has (compacted inventory topic, keyed by cluster).

Place in the loop: a cluster source (``ebbtide run source``: Slurm partitions and nodes, Kubernetes
nodes and Deployments) publishes one whenever what it sees changes; the state service folds it
into the pools' available GPUs and their nodes (streams/fold.py). Each node carries whether work
can be placed on it now and, when not, why (``NotReady``, ``cordoned``, ``NoSchedule taint``,
``drained``, ``down``), so a person reading the topic sees why a pool shrank; a pool carries the
maintenance windows announced for its nodes (a Slurm ``MAINT`` reservation), so the planner sees
them coming.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from schemas.base import Event, Name, NodeGpus, Part, Replicas, UtcDatetime
from schemas.cluster import PoolWindow


class InventoryNode(Part):
    """One node of a pool: its allocatable GPUs, those free now, and whether it takes work."""

    name: Name
    gpus: NodeGpus = Field(description="allocatable GPUs")
    gpus_free: NodeGpus = Field(description="allocatable GPUs no running work holds now")
    schedulable: bool = True
    reason: str | None = Field(
        default=None,
        max_length=253,
        description="why it takes no work (NotReady, cordoned, NoSchedule taint, drained, down)",
    )

    @model_validator(mode="after")
    def _free_within_allocatable(self) -> InventoryNode:
        if self.gpus_free > self.gpus:
            raise ValueError(f"gpus_free: {self.gpus_free} exceeds gpus {self.gpus}")
        if not self.schedulable and not self.reason:
            raise ValueError("reason: required when schedulable is false")
        return self


class InventoryPool(Part):
    """A pool as the source sees it: a Slurm partition, a Kubernetes node group."""

    name: Name
    gpu_type: Name
    nodes: list[InventoryNode] = Field(default_factory=list)
    windows: list[PoolWindow] = Field(
        default_factory=list,
        description="announced maintenance that takes some of its nodes out (a Slurm MAINT reservation)",
    )

    @model_validator(mode="after")
    def _unique_nodes(self) -> InventoryPool:
        names = [n.name for n in self.nodes]
        if len(names) != len(set(names)):
            raise ValueError(f"nodes: duplicate names in pool {self.name!r}")
        for i, window in enumerate(self.windows):
            unknown = sorted(set(window.nodes) - set(names))
            if unknown:
                raise ValueError(f"windows[{i}].nodes: {unknown} are not nodes of pool {self.name!r}")
        return self


class InventoryService(Part):
    """An inference service's replicas in a pool, as the source sees them."""

    service: Name
    pool: Name
    replicas: Replicas
    min_replicas: Replicas = 0
    max_replicas: Replicas = 10_000

    @model_validator(mode="after")
    def _replica_bounds(self) -> InventoryService:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas: {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        return self


class PoolInventory(Event):
    """Everything a source sees of a cluster's pools and services at one time."""

    cluster: Name
    time: UtcDatetime
    source: Name = Field(description="who saw it: slurm, kubernetes")
    pools: list[InventoryPool]
    services: list[InventoryService] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_pools(self) -> PoolInventory:
        names = [p.name for p in self.pools]
        if len(names) != len(set(names)):
            raise ValueError("pools: duplicate names")
        return self

    @property
    def key(self) -> str:
        return self.cluster

    def same_as(self, other: PoolInventory | None) -> bool:
        """Whether ``other`` reports the same pools and services (its time aside)."""
        return other is not None and (self.cluster, self.source, self.pools, self.services) == (
            other.cluster,
            other.source,
            other.pools,
            other.services,
        )
