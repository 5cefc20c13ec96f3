"""Node-level gang fit for step 0: can a gang of g GPUs be placed on a pool's nodes now?

Pools report free GPUs per node (PoolState.free_gpus_by_node, after running batch jobs).
Inference is packed onto the fullest nodes first and gangs go best-fit (a gang larger than a
node takes whole empty nodes plus one remainder), the way the cluster places them. Without node
detail only pool totals are checked. Pure.
"""

from __future__ import annotations


def place_gang(free: list[int], gang: int, gpus_per_node: int) -> dict[int, int] | None:
    """Best-fit placement of a gang on per-node free counts; None if it does not fit."""
    if gang <= gpus_per_node:
        best = -1
        for i, f in enumerate(free):
            if f >= gang and (best < 0 or f < free[best]):
                best = i
        return None if best < 0 else {best: gang}
    whole, rest = divmod(gang, gpus_per_node)
    empty = [i for i, f in enumerate(free) if f == gpus_per_node]
    if len(empty) < whole:
        return None
    placement = {i: gpus_per_node for i in empty[:whole]}
    if rest:
        fits = [(f, i) for i, f in enumerate(free) if f >= rest and i not in placement]
        if not fits:
            return None
        placement[min(fits)[1]] = rest
    return placement


def reserve_packed(free: list[int], gpus: int) -> list[int]:
    """Take ``gpus`` GPUs from the fullest nodes first (keeps big holes for gangs)."""
    left = list(free)
    need = gpus
    for i in sorted(range(len(left)), key=lambda i: (left[i], i)):
        if need <= 0:
            break
        take = min(left[i], need)
        left[i] -= take
        need -= take
    return left


class NodeBook:
    """Free GPUs per node for each pool in step 0 (None where the state gives no node detail)."""

    def __init__(self, free_by_node: list[list[int] | None], gpus_per_node: list[int]) -> None:
        self.free = [None if nodes is None else list(nodes) for nodes in free_by_node]
        self.per_node = gpus_per_node

    def release(self, pool: int, gpus: float) -> None:
        """A preempted gang's GPUs: which nodes is unknown, so count them as their own nodes."""
        gpus = int(gpus)
        nodes = self.free[pool]
        if nodes is not None:
            whole, rest = divmod(gpus, self.per_node[pool])
            nodes.extend([self.per_node[pool]] * whole + ([rest] if rest else []))

    def reserve_inference(self, pool: int, gpus: int) -> None:
        nodes = self.free[pool]
        if nodes is not None and gpus > 0:
            self.free[pool] = reserve_packed(nodes, gpus)

    def fits(self, pool: int, gang: float) -> bool:
        nodes = self.free[pool]
        return nodes is None or place_gang(nodes, int(gang), self.per_node[pool]) is not None

    def take(self, pool: int, gang: float) -> None:
        gang = int(gang)
        nodes = self.free[pool]
        if nodes is None:
            return
        placement = place_gang(nodes, gang, self.per_node[pool])
        if placement is not None:
            for node, used in placement.items():
                nodes[node] -= used
