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


def without(free: list[int], nodes: set[int]) -> list[int]:
    """Free GPUs per node with ``nodes`` counted as having none (nodes a gang must stay off)."""
    return [0 if i in nodes else f for i, f in enumerate(free)]


def going_out(node_out_s: dict[int, float], run_s: float) -> list[int]:
    """The nodes (ascending) that a maintenance window takes out within ``run_s`` seconds, of
    ``node_out_s`` (node -> seconds until it goes out: PlanInputs.pool_node_out_s)."""
    return sorted(i for i, out_s in node_out_s.items() if out_s < run_s)


NodeHolds = dict[str, tuple[int, tuple[int, ...]]]
"""Nodes held for blocked gangs: job id -> (pool index, node indices), kept between decisions."""


class NodeBook:
    """Free GPUs per node for each pool in step 0 (None where the state gives no node detail).

    Nodes may be held for a gang that does not fit yet (``hold``, as Slurm reserves nodes for the
    top job): work of a lower weight then stays off them, so they drain as their jobs end, unless
    it would end before they drain (EASY backfill): where the state says which nodes hold which
    running jobs (``note_running``), a hold knows when its nodes drain (its shadow time), and work
    that ends by then may use them without delaying the gang.

    A node a maintenance window takes out in ``out_s`` seconds (``node_out_s``, per pool) takes
    only work that ends by then: work still running would be stopped with it.
    """

    def __init__(
        self,
        free_by_node: list[list[int] | None],
        gpus_per_node: list[int],
        node_out_s: list[dict[int, float]] | None = None,
    ) -> None:
        self.free = [None if nodes is None else list(nodes) for nodes in free_by_node]
        self.out_s = node_out_s or [{} for _ in free_by_node]  # per pool: node -> seconds until it goes out
        self.per_node = gpus_per_node
        self.held: list[dict[int, float]] = [{} for _ in free_by_node]  # node -> weight it is held for
        self.held_job: list[dict[int, int]] = [{} for _ in free_by_node]  # node -> job it is held for
        self.shadow_s: list[dict[int, float]] = [{} for _ in free_by_node]  # held node -> drain time
        self.drain_s: list[dict[int, float]] = [{} for _ in free_by_node]  # node -> its jobs' last end
        self.unknown: list[bool] = [False] * len(free_by_node)  # a running job on unknown nodes
        self.inference_gpus = [0] * len(free_by_node)  # GPUs reserved for inference, per pool
        self.job_free = [None if nodes is None else list(nodes) for nodes in free_by_node]  # no inference

    def note_running(self, pool: int, on_nodes: dict[int, int] | None, run_s: float) -> None:
        """A job that keeps running ``run_s`` more seconds on ``on_nodes`` (None: nodes unknown)."""
        nodes = self.free[pool]
        if nodes is None:
            return
        if not on_nodes or any(i >= len(nodes) for i in on_nodes):
            self.unknown[pool] = True
            return
        drain = self.drain_s[pool]
        for i in on_nodes:
            drain[i] = max(drain.get(i, 0.0), run_s)

    def release(self, pool: int, gpus: float, on_nodes: dict[int, int] | None = None) -> list[int]:
        """A preempted gang's GPUs back on the nodes it held (``on_nodes``); where those are
        unknown, counted as nodes of their own. Returns the nodes (empty without node detail)."""
        gpus = int(gpus)
        nodes = self.free[pool]
        if nodes is None:
            return []
        if on_nodes and all(i < len(nodes) for i in on_nodes) and sum(on_nodes.values()) == gpus:
            job_free = self.job_free[pool]
            assert job_free is not None
            for i, g in on_nodes.items():
                nodes[i] = min(nodes[i] + g, self.per_node[pool])
                job_free[i] = min(job_free[i] + g, self.per_node[pool])
            return sorted(on_nodes)
        whole, rest = divmod(gpus, self.per_node[pool])
        first = len(nodes)
        extra = [self.per_node[pool]] * whole + ([rest] if rest else [])
        nodes.extend(extra)
        (self.job_free[pool] or []).extend(extra)
        return list(range(first, len(nodes)))

    def reserve_inference(self, pool: int, gpus: int) -> None:
        nodes = self.free[pool]
        if nodes is not None and gpus > 0:
            self.free[pool] = reserve_packed(nodes, gpus)
            self.inference_gpus[pool] += gpus

    def without_inference(self, pool: int) -> list[int]:
        """Free GPUs per node counting only batch jobs (inference moves: it is packed anew)."""
        return list(self.job_free[pool] or [])

    def repack(self, pool: int, job_free: list[int]) -> None:
        """Set the batch-only free GPUs per node, then pack inference on them again."""
        self.job_free[pool] = list(job_free)
        self.free[pool] = reserve_packed(job_free, self.inference_gpus[pool])

    def hold(
        self,
        pool: int,
        gang: float,
        weight: float,
        prefer: tuple[int, ...] = (),
        real_nodes: int = 0,
        job: int = -1,
        run_s: float = math.inf,
    ) -> tuple[int, ...]:
        """Hold enough nodes for ``gang`` against work of a lower ``weight``: the ``prefer``red
        ones (those held for it last time, among the first ``real_nodes``) while still free of
        other holds, else those that drain first (where known), then the emptiest; never a node
        that goes out for maintenance within the gang's ``run_s`` (it could not run there).
        Returns the nodes held (empty without node detail)."""
        nodes = self.free[pool]
        if nodes is None:
            return ()
        held = self.held[pool]
        barred = held.keys() | self.going(pool, run_s)
        drain = {} if self.unknown[pool] else self.drain_s[pool]
        count = max(-(-int(gang) // self.per_node[pool]), 1)
        kept = [i for i in prefer if i < min(real_nodes, len(nodes)) and i not in barred][:count]
        others = sorted(
            (i for i in range(len(nodes)) if i not in barred and i not in kept),
            key=lambda i: (drain.get(i, 0.0), -nodes[i], i),
        )
        chosen = kept + others[: count - len(kept)]
        # EASY backfill needs every job on the pool's nodes placed; else the hold is strict
        shadow = 0.0 if self.unknown[pool] else max((drain.get(i, 0.0) for i in chosen), default=0.0)
        for i in chosen:
            held[i] = weight
            self.held_job[pool][i] = job
            self.shadow_s[pool][i] = shadow
        return tuple(chosen)

    def _open(
        self, pool: int, weight: float, run_s: float = math.inf, out_s: float | None = None
    ) -> list[int] | None:
        """Free GPUs per node that work of ``weight`` running ``run_s`` seconds may use: nodes
        held for a higher weight only when it ends before they drain, nodes going out for
        maintenance only when it ends before they go (or, given ``out_s``, when they stay up that
        long: a job that checkpoints loses at most an interval to a window, PlanInputs.exposed_s)."""
        nodes = self._staying(pool, run_s if out_s is None else out_s)
        held = self.held[pool]
        if nodes is None or not held:
            return nodes
        shadow = self.shadow_s[pool]
        return [
            0 if held.get(i, -math.inf) > weight and run_s > shadow.get(i, 0.0) else f
            for i, f in enumerate(nodes)
        ]

    def going(self, pool: int, run_s: float) -> set[int]:
        """The pool's nodes that go out for maintenance within ``run_s`` seconds."""
        return set(going_out(self.out_s[pool], run_s))

    def _staying(self, pool: int, run_s: float) -> list[int] | None:
        """Free GPUs per node, none on the nodes that go out for maintenance within ``run_s``."""
        nodes = self.free[pool]
        going = self.going(pool, run_s)
        return nodes if nodes is None or not going else without(nodes, going)

    def fits_but_for_maintenance(self, pool: int, gang: float, run_s: float) -> bool:
        """The gang fits the pool's free nodes now, but not those that stay up for ``run_s``."""
        nodes = self.free[pool]
        if nodes is None or place_gang(nodes, int(gang), self.per_node[pool]) is None:
            return False
        staying = self._staying(pool, run_s)
        return staying is not None and place_gang(staying, int(gang), self.per_node[pool]) is None

    def fits(
        self,
        pool: int,
        gang: float,
        weight: float = math.inf,
        run_s: float = math.inf,
        out_s: float | None = None,
    ) -> bool:
        nodes = self._open(pool, weight, run_s, out_s)
        return nodes is None or place_gang(nodes, int(gang), self.per_node[pool]) is not None

    def take(
        self,
        pool: int,
        gang: float,
        weight: float = math.inf,
        run_s: float = math.inf,
        out_s: float | None = None,
    ) -> dict[int, int]:
        """Place a gang (best fit) on nodes that stay up for its whole run where it fits there, else
        on those that stay up for ``out_s``; returns its GPUs per node (empty without node detail)."""
        nodes = self.free[pool]
        views = [self._open(pool, weight, run_s), self._open(pool, weight, run_s, out_s)]
        if nodes is None or views[1] is None:
            return {}
        placements = (place_gang(v, int(gang), self.per_node[pool]) for v in views if v is not None)
        placement = next((p for p in placements if p is not None), None)
        if placement is None:
            return {}
        job_free = self.job_free[pool]
        assert job_free is not None
        for node, used in placement.items():
            nodes[node] -= used
            job_free[node] -= used
        return placement
