"""Node-level gang fit for step 0: can a gang of g GPUs be placed on a pool's nodes now?

Pools report free GPUs per node (PoolState.free_gpus_by_node, after running batch jobs).
Inference is packed onto the fullest nodes first and gangs go best-fit (a gang larger than a
node takes whole empty nodes plus one remainder), the way the cluster places them. Without node
detail only pool totals are checked. Pure.
"""

from __future__ import annotations

import math


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


NodeHolds = dict[str, tuple[int, tuple[int, ...]]]
"""Nodes held for blocked gangs: job id -> (pool index, node indices), kept between decisions."""


class NodeBook:
    """Free GPUs per node for each pool in step 0 (None where the state gives no node detail).

    Nodes may be held for a gang that does not fit yet (``hold``, as Slurm reserves nodes for the
    top job): work of a lower weight then stays off them, so they drain as their jobs end.
    """

    def __init__(self, free_by_node: list[list[int] | None], gpus_per_node: list[int]) -> None:
        self.free = [None if nodes is None else list(nodes) for nodes in free_by_node]
        self.per_node = gpus_per_node
        self.held: list[dict[int, float]] = [{} for _ in free_by_node]  # node -> weight it is held for

    def release(self, pool: int, gpus: float) -> list[int]:
        """A preempted gang's GPUs: which nodes is unknown, so count them as their own nodes.
        Returns the indices of those nodes (empty without node detail)."""
        gpus = int(gpus)
        nodes = self.free[pool]
        if nodes is None:
            return []
        whole, rest = divmod(gpus, self.per_node[pool])
        first = len(nodes)
        nodes.extend([self.per_node[pool]] * whole + ([rest] if rest else []))
        return list(range(first, len(nodes)))

    def reserve_inference(self, pool: int, gpus: int) -> None:
        nodes = self.free[pool]
        if nodes is not None and gpus > 0:
            self.free[pool] = reserve_packed(nodes, gpus)

    def hold(
        self, pool: int, gang: float, weight: float, prefer: tuple[int, ...] = (), real_nodes: int = 0
    ) -> tuple[int, ...]:
        """Hold enough nodes for ``gang`` against work of a lower ``weight``: the ``prefer``red
        ones (those held for it last time, among the first ``real_nodes``) while still free of
        other holds, else the emptiest. Returns the nodes held (empty without node detail)."""
        nodes = self.free[pool]
        if nodes is None:
            return ()
        held = self.held[pool]
        count = max(-(-int(gang) // self.per_node[pool]), 1)
        kept = [i for i in prefer if i < min(real_nodes, len(nodes)) and i not in held][:count]
        emptiest = sorted(
            (i for i in range(len(nodes)) if i not in held and i not in kept), key=lambda i: (-nodes[i], i)
        )
        chosen = kept + emptiest[: count - len(kept)]
        for i in chosen:
            held[i] = weight
        return tuple(chosen)

    def _open(self, pool: int, weight: float) -> list[int] | None:
        """Free GPUs per node that work of ``weight`` may use (held nodes of a higher weight: 0)."""
        nodes = self.free[pool]
        held = self.held[pool]
        if nodes is None or not held:
            return nodes
        return [0 if held.get(i, -math.inf) > weight else f for i, f in enumerate(nodes)]

    def fits(self, pool: int, gang: float, weight: float = math.inf) -> bool:
        nodes = self._open(pool, weight)
        return nodes is None or place_gang(nodes, int(gang), self.per_node[pool]) is not None

    def take(self, pool: int, gang: float, weight: float = math.inf) -> dict[int, int]:
        """Place a gang (best fit); returns its GPUs per node (empty without node detail)."""
        nodes = self.free[pool]
        view = self._open(pool, weight)
        if nodes is None or view is None:
            return {}
        placement = place_gang(view, int(gang), self.per_node[pool])
        if placement is None:
            return {}
        for node, used in placement.items():
            nodes[node] -= used
        return placement
