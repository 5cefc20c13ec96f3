"""Round step 0 (part of pipeline stage 5, called from optimizer/rounding.py): step 0 made whole,
which running jobs stay, which are preempted, which waiting jobs start.

Running jobs the relaxed plan keeps (share of their gang at least the threshold) stay, and
non-preemptible ones always stay (optimizer/step0_kept.py); the preemption bound is honoured by
keeping the jobs the plan least wants out. Waiting jobs start in the order of their relaxed share,
then idle GPUs are backfilled by weight; where that leaves GPUs idle that a larger waiting gang
would use in place of some new starts, step 0 is placed again with the gang first
(optimizer/step0_promote.py). Every start is checked against the pool's free GPUs, its team's quota
and, where the state reports them, its nodes (optimizer/nodes.py).

A preemption must make room for something: the relaxed plan knows pools, not nodes, so it may stop
small jobs for a gang that then does not fit on any node. Step 0 is therefore placed backfilling
only work of a higher weight than the stopped jobs', to see what really uses the GPUs the
preemptions free: preemptions whose GPUs neither the plan's starts, nor inference, nor
higher-weight work use are withdrawn (the job keeps running); placed again the same way until no
stop is withdrawn (each pass only keeps more jobs: a kept job may take the room a gang found in the
last pass), and only then with full backfill. Swapping a stopped job for work of the same weight
would only lose the stopped job's work since its checkpoint.

Where the state says which nodes hold which running jobs (``PlanInputs.job_nodes``), a stopped job's
GPUs go back on its own nodes, and a gang the plan starts that fits no node (a gang of several nodes
also where its pool lacks the GPUs: the relaxed plan may start it on a part of them) first tries to
empty the nodes cheapest to empty (optimizer/step0_clearing.py, choosing with
optimizer/node_clearing.py: checkpointing jobs past their minimum run, of a lower weight than the
gang, each costing its weight times the work it would lose; worth it only where the stops pay for
themselves as any stop does, against the gang's wait for the nodes to drain:
optimizer/stop_pays.py's ``clearing_pays``). Running jobs the plan wants out stay unless the stop
pays for itself (optimizer/stop_pays.py). Failing that it holds the nodes of its pool that drain
first (else the emptiest) against lower-weight backfill, so they drain for it, where its team's
quota (or what idle quota lends) admits it now: nodes drained for a gang the quota keeps out would
only idle. The same nodes are held again at the next decisions (the planner hands the holds back in
``PlanInputs.held_nodes``), as Slurm keeps a reservation, or no node would ever drain. Work that
ends before the held nodes drain may still use them (EASY backfill).
Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from optimizer.deadlines import steps_of_work
from optimizer.inputs import PlanInputs
from optimizer.nodes import NodeBook, NodeHolds, place_gang
from optimizer.quota import (
    Borrower,
    Reclaim,
    cheapest_reclaim,
    cohort_excess,
    fits_cohort,
    fits_quota,
    reclaim_pays,
)
from optimizer.step0_clearing import clear_for
from optimizer.step0_kept import EPS, Plan0, kept_by_plan, withdraw_idle_preemptions
from optimizer.step0_outcome import Blocked, Step0Outcome
from optimizer.step0_promote import place_promoting
from optimizer.stop_pays import StopRules, stop_cost_gpu_s
from schemas import DecisionCause


def round_step0(
    inputs: PlanInputs,
    free0: np.ndarray,
    svc_gpus0: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
    threshold: float,
    max_preemptions: int,
    preemption_penalty_gpu_s: float = 0.0,
    rules: StopRules | None = None,
) -> tuple[np.ndarray, np.ndarray, NodeHolds, Step0Outcome]:
    """(pool [J], -1 when not running in step 0; GPU-seconds left after step 0 [J]; the nodes
    held for blocked gangs, to hold again next time: a hold that moved each decision would
    never let a node drain; what the placement saw, for the reasons)."""
    rules = rules or StopRules(penalty_gpu_s=preemption_penalty_gpu_s)
    plan = kept_by_plan(inputs, share0, share, threshold, max_preemptions, free0, rules)
    running = inputs.job_running_pool >= 0
    stopped = running & ~plan.keep
    budget = max_preemptions
    if stopped.any():
        # place backfilling only work above the stopped jobs' weight, to see which stops free GPUs
        # for something; withdraw the others and place again, until no stop is withdrawn (a kept
        # job moves where inference packs, so a gang the last placement started may no longer fit:
        # its stops are then withdrawn too); then place with full backfill
        above = float(inputs.job_weight[stopped].min())
        while True:
            budget = max(max_preemptions - int((running & ~plan.keep).sum()), 0)
            first = _place(inputs, plan, free0, svc_gpus0, budget, rules, backfill_above=above)
            keep = withdraw_idle_preemptions(inputs, plan.keep, plan.run_share, first)
            if np.array_equal(keep, plan.keep):
                break
            plan = replace(plan, keep=keep)
    return place_promoting(
        inputs, lambda promote: _place(inputs, plan, free0, svc_gpus0, budget, rules, promote=promote)
    ).result()


def _place(
    inputs: PlanInputs,
    plan: Plan0,
    free0: np.ndarray,
    svc_gpus0: np.ndarray,
    clear_budget: int,
    rules: StopRules,
    *,
    backfill_above: float = -math.inf,
    promote: tuple[int, ...] = (),
) -> _Step0:
    """Step 0 placement: the kept running jobs, then the plan's starts (clearing or holding nodes
    for a gang that fits none), then backfill of jobs weighing more than ``backfill_above``. Up to
    ``clear_budget`` more running jobs may be stopped to empty nodes for the plan's gangs (each
    costing ``stop_cost_gpu_s``); the jobs in ``promote`` start before the plan's."""
    step0 = _Step0.empty(inputs, free0, clear_budget, rules)
    step0.place_kept(plan)
    step0.outcome.kept_by_bound = {j for j in plan.by_bound if step0.pool0[j] >= 0}
    step0.outcome.awaiting_checkpoint = {j for j in plan.awaiting_checkpoint if step0.pool0[j] >= 0}
    step0.outcome.preemption_bound = clear_budget + int(((inputs.job_running_pool >= 0) & ~plan.keep).sum())
    step0.release_stopped(svc_gpus0)
    step0.start_promoted(promote)
    step0.start_planned(plan)
    if max(step0.cap, default=0.0) >= 1.0:
        step0.backfill(plan, backfill_above)
    return step0


@dataclass
class _Step0:
    """Step 0 as it is being placed: each job's pool, the GPUs left per pool and team, the nodes."""

    inputs: PlanInputs
    pool0: np.ndarray  # [J] pool in step 0, -1 when not running
    remaining: np.ndarray  # [J] GPU-seconds left after step 0
    cap: list[float]  # per pool: GPUs left
    used: list[float]  # per team: GPUs used
    nodes: NodeBook
    node_detail: bool  # some pool reports its nodes
    clear_budget: int  # running jobs that may still be stopped to clear nodes
    dip_step: list[int]  # per pool: the first step its capacity dips (steps in the horizon: never)
    quota: list[float]  # per team: its nominal quota (inf: none)
    rules: StopRules  # how a stop is valued (its cost, clearing, reclaims)
    reclaimable: np.ndarray | None = None  # [J] running jobs a reclaim may stop (not pinned, not fresh)
    released: dict[int, list[int]] = field(default_factory=dict)  # stopped job -> nodes its GPUs were on
    top_weight: dict[tuple[int, int], float] = field(
        default_factory=dict
    )  # (pool, node) -> top weight started
    holds: NodeHolds = field(default_factory=dict)  # nodes held for the plan's starts that fit no node
    outcome: Step0Outcome = field(default_factory=Step0Outcome)  # what the reasons quote

    @classmethod
    def empty(cls, inputs: PlanInputs, free0: np.ndarray, clear_budget: int, rules: StopRules) -> _Step0:
        # A pool whose capacity dips (a maintenance window, a drain) before a job would finish is
        # the last choice for starting it: the window would stop it and its work since checkpoint.
        # (argmax is 0 only for a pool that never dips: step 0 cannot dip below itself)
        dips = inputs.avail_steps < inputs.avail_steps[:, :1] - EPS
        return cls(
            inputs=inputs,
            pool0=np.full(inputs.n_jobs, -1, dtype=np.int64),
            remaining=inputs.job_remaining_s.copy(),
            cap=free0.tolist(),
            used=[0.0] * inputs.team_quota.size,
            quota=inputs.team_quota.tolist(),
            nodes=NodeBook(
                list(inputs.pool_free_nodes),
                list(inputs.pool_gpus_per_node),
                list(inputs.pool_node_out_s) or None,
            ),
            node_detail=inputs.pool_free_nodes.count(None) < len(inputs.pool_free_nodes),
            clear_budget=clear_budget,
            rules=rules,
            dip_step=[step or dips.shape[1] for step in dips.argmax(axis=1).tolist()],
        )

    def result(self) -> tuple[np.ndarray, np.ndarray, NodeHolds, Step0Outcome]:
        self.outcome.node_free = [None if free is None else list(free) for free in self.nodes.free]
        self.outcome.held_for = [dict(held) for held in self.nodes.held_job]
        self.outcome.held_drain_s = [dict(drain) for drain in self.nodes.shadow_s]
        return self.pool0, self.remaining, self.holds, self.outcome

    def gang(self, j: int) -> float:
        return float(self.inputs.job_gang[j])

    def _within_quota(self, j: int) -> bool:
        """Within its team's quota or what idle quota still lends (optimizer/quota.py)."""
        inputs = self.inputs
        return fits_quota(self.used, self.quota, inputs.quota_idle, int(inputs.job_team[j]), self.gang(j))

    def count(self, j: int, p: int, sign: float = 1.0) -> None:
        """Count job j in pool p in step 0 (``sign`` -1: take it out again)."""
        g = self.gang(j)
        self.cap[p] -= sign * g
        self.used[int(self.inputs.job_team[j])] += sign * g
        self.pool0[j] = p if sign > 0 else -1
        self.remaining[j] -= sign * g * float(self.inputs.blocks.dur_s[0])

    def place_kept(self, plan: Plan0) -> None:
        """Running jobs stay in their pools while the pool's GPUs and the team's quota allow:
        pinned first, then those dearest to stop (the stop's cost, ``stop_cost_gpu_s``, plus a
        step of the job's weighted work, plus for a job within its minimum run the rest of that
        run's weighted work: the churn the minimum run is there to avoid), then by the plan's
        share; so where inference (or a shrinking pool) leaves too little room for them all, the
        jobs cheapest to stop give way. (By share alone, the job whose share the relaxed plan
        shaved by one GPU gave way: a 64-GPU gang that had just checkpointed was stopped for one
        more inference replica while a 2-GPU job ran on.) Jobs within their minimum run were
        placed first, whatever the others' stops cost: on a held-out workload a 16-GPU weight-3
        job 40 hours into a run without checkpoints gave way, 644 GPU-hours lost, so that two
        gangs started a step before ran on. With no place of their own (cost alone), 45 bench runs
        lost 0.058 of summed PWT / best baseline to the churn and preempted 47 times more;
        with the rest of the minimum run counted, 0.004 and 32. The book notes which nodes they
        keep busy and until when (by their estimates), where the state says."""
        inputs = self.inputs
        kept = plan.keep.nonzero()[0]
        self.reclaimable = ~plan.pinned & ~plan.fresh
        step_s = float(inputs.blocks.dur_s[0])
        held_s = step_s + np.maximum(self.rules.min_run_s - inputs.job_ran_s, 0.0)  # a step, the min run
        cost = stop_cost_gpu_s(inputs, self.rules) + inputs.job_weight * inputs.job_gang * held_s
        # lexsort is stable (jobs equal on every key stay in index order); its last key sorts first
        kept = kept[np.lexsort((-plan.run_share[kept], -cost[kept], ~plan.pinned[kept]))]
        wall_s = inputs.job_remaining_s / np.maximum(inputs.job_gang, 1.0)
        for j in kept.tolist():
            p = int(inputs.job_running_pool[j])
            team = int(inputs.job_team[j])
            fits = fits_cohort(self.used, self.quota, team, self.gang(j))
            if plan.pinned[j] or (self.cap[p] + EPS >= self.gang(j) and fits):
                self.count(j, p)
                if self.node_detail:
                    self.nodes.note_running(p, inputs.job_nodes.get(inputs.job_ids[j]), float(wall_s[j]))
            elif self.cap[p] + EPS < self.gang(j):
                self.outcome.no_room.add(j)  # inference (or a shrinking pool) took its room

    def release_stopped(self, svc_gpus0: np.ndarray) -> None:
        """A stopped gang's GPUs go back on its nodes (where unknown, they count as nodes of their
        own), so whether a start used them is known; then inference is packed on the fullest
        nodes, as the cluster does (pool totals still bound inference plus jobs)."""
        inputs = self.inputs
        stopped = ((inputs.job_running_pool >= 0) & (self.pool0 < 0)).nonzero()[0]
        for j in stopped.tolist():
            on_nodes = inputs.job_nodes.get(inputs.job_ids[j])
            self.released[j] = self.nodes.release(int(inputs.job_running_pool[j]), self.gang(j), on_nodes)
        if self.node_detail:  # (a pool without node detail reserves nothing)
            for p, gpus in enumerate(svc_gpus0.tolist()):
                self.nodes.reserve_inference(p, math.ceil(gpus - EPS))

    def _by_dips(self, j: int, pools: list[int]) -> list[int]:
        """``pools`` with those whose capacity dips before job j would end moved last."""
        inputs = self.inputs
        wall_s = float(inputs.job_remaining_s[j]) / max(self.gang(j), 1.0)
        run_steps = math.ceil(wall_s / inputs.step_s)
        if min(self.dip_step, default=0) < run_steps <= max(self.dip_step, default=0):
            return sorted(pools, key=lambda p: self.dip_step[p] < run_steps)  # stable: keeps the order
        return pools  # no pool dips before j ends, or all do

    def try_start(self, j: int, pools: list[int], rank: float) -> bool:
        """Start j in the first pool that takes it; ``rank``: the weight it counts with on its
        nodes (held nodes take it only if it ends before they drain)."""
        if not self._within_quota(j):
            self.outcome.blocked[j] = Blocked(DecisionCause.TEAM_QUOTA, -1)
            return False
        g = self.gang(j)
        start_s = self.inputs.holds_nodes_s(j)
        if not self._reclaim_for(j, pools, rank, start_s):
            return False
        out_s = self.inputs.exposed_s(j)
        for p in self._by_dips(j, pools):
            if not self._takes(j, p, rank, start_s):
                continue
            placed = self.nodes.take(p, g, rank, start_s, out_s)  # (none without node detail)
            for node in placed:
                self.top_weight[(p, node)] = max(self.top_weight.get((p, node), -math.inf), rank)
            self._keep_off_held(j, p, placed)
            self.count(j, p)
            self.outcome.blocked.pop(j, None)
            return True
        self.outcome.blocked[j] = self._blocked_in(j, pools, rank, out_s)
        return False

    def _keep_off_held(self, j: int, p: int, placed: dict[int, int]) -> None:
        """The nodes of pool p held for heavier gangs than job j that j, started on ``placed``,
        keeps off (``JobDecision.avoid_nodes``): the cluster places it itself, best fit, and a held
        node has GPUs free as it drains, so j would land there and keep it from draining."""
        weight = float(self.inputs.job_weight[j])
        held = self.nodes.held[p]
        if off := {i for i, w in held.items() if w > weight and i not in placed}:
            self.outcome.kept_off[j] = off

    def _reclaim_for(self, j: int, pools: list[int], rank: float, start_s: float) -> bool:
        """A start within its team's own quota that quota lent to other teams blocks takes it back:
        the cheapest borrowers that make it fit are stopped, if that pays (optimizer/quota.py), in
        the first pool that takes it now, else in the first pool where it lacks only GPUs (one that
        has the GPUs on no node set is left to clearing and holds); False: it waits (a step, or until
        the borrowers end or checkpoint)."""
        inputs, team, g = self.inputs, int(self.inputs.job_team[j]), self.gang(j)
        own = math.isfinite(self.quota[team]) and self.used[team] + g <= self.quota[team] + EPS
        if not own or not pools or cohort_excess(self.used, self.quota) + g <= EPS:
            return True  # no quota of its own to take back, or the cohort has room for it
        p = next((q for q in pools if self._takes(j, q, rank, start_s)), pools[0])
        cap_short = max(g - self.cap[p], 0.0)
        if cap_short <= EPS and not self._takes(j, p, rank, start_s):
            return True  # its nodes do not take it: reclaiming GPUs would not start it
        weight, startup_s = float(inputs.job_weight[j]), float(inputs.job_restart_s[j])
        short = max(cohort_excess(self.used, self.quota) + g, cap_short)
        need = Reclaim(team, g, p, cap_short, short, weight, startup_s)
        borrowers = self._borrowers()
        chosen = cheapest_reclaim(self.used, self.quota, need, borrowers)
        horizon_s = inputs.blocks.horizon_s
        if (
            chosen is None
            or len(chosen) > self.clear_budget
            or not reclaim_pays(need, chosen, borrowers, horizon_s, self.rules.earliness)
        ):
            self.outcome.blocked[j] = Blocked(DecisionCause.QUOTA_LENT, p)
            return False
        for b in chosen:
            self.count(b.job, b.pool, sign=-1.0)
            self.outcome.reclaimed_for[b.job] = j
        self.clear_budget -= len(chosen)
        return True

    def _borrowers(self) -> list[Borrower]:
        """Running jobs of teams over their quota that a reclaim may stop, with what each costs."""
        inputs = self.inputs
        over = [u > q + EPS for u, q in zip(self.used, self.quota, strict=True)]
        running = (inputs.job_running_pool >= 0) & (self.pool0 >= 0) & inputs.job_preemptible
        if self.reclaimable is not None:
            running &= self.reclaimable
        gang = inputs.job_gang
        cost = stop_cost_gpu_s(inputs, self.rules)
        ends_s = inputs.job_remaining_s / np.maximum(gang, 1.0)
        return [
            Borrower(
                v,
                int(inputs.job_team[v]),
                int(self.pool0[v]),
                float(gang[v]),
                float(cost[v]),
                float(ends_s[v]),
            )
            for v in np.flatnonzero(running).tolist()
            if over[int(inputs.job_team[v])]
        ]

    def _takes(self, j: int, p: int, rank: float, start_s: float) -> bool:
        """Pool p takes job j now: GPUs left, and its nodes (those open to ``rank``) where known."""
        if self.cap[p] + EPS < self.gang(j):
            return False
        out_s = self.inputs.exposed_s(j)
        return self.nodes.free[p] is None or self.nodes.fits(p, self.gang(j), rank, start_s, out_s)

    def _blocked_in(self, j: int, pools: list[int], rank: float, out_s: float) -> Blocked:
        """Why no pool of ``pools`` takes job j, needing its nodes ``out_s`` seconds (exposed_s): its
        nodes with room go out for maintenance before then, or are held for another gang, where the pool's
        nodes would otherwise take it; else fragmentation where it has the GPUs; else the fullest
        pool."""
        g, nodes = self.gang(j), self.nodes
        fragmented: list[int] = []
        for p in pools:
            free = nodes.free[p]
            if self.cap[p] + EPS < g or free is None:
                continue
            if place_gang(free, int(g), nodes.per_node[p]) is None:
                fragmented.append(p)
                continue
            if nodes.fits_but_for_maintenance(p, g, out_s):
                return Blocked(DecisionCause.NODES_GO_OUT, p)
            holders = [job for node, job in nodes.held_job[p].items() if nodes.held[p][node] > rank]
            return Blocked(DecisionCause.NODES_HELD_FOR_GANG, p, holders[0] if holders else -1)
        if fragmented:
            return Blocked(DecisionCause.FRAGMENTATION, fragmented[0])
        most = max(pools, key=lambda p: (self.cap[p], -p)) if pools else -1
        return Blocked(DecisionCause.POOL_FULL, most)

    def _hold_nodes(self, j: int, p: int) -> None:
        """Hold nodes of pool p for gang j against lower-weight backfill (the same as last time
        where still free), so they drain for it."""
        inputs = self.inputs
        job_id = inputs.job_ids[j]
        before = (inputs.held_nodes or {}).get(job_id)
        prefer = before[1] if before is not None and before[0] == p else ()
        real = len(inputs.pool_free_nodes[p] or ())
        weight = float(inputs.job_weight[j])
        held = self.nodes.hold(p, self.gang(j), weight, prefer, real, job=j, run_s=inputs.exposed_s(j))
        self.holds[job_id] = (p, held)

    def start_promoted(self, promote: tuple[int, ...]) -> None:
        """Larger gangs placed before the plan's starts (optimizer/step0_promote.py), by their
        weight on held nodes, counted as backfill of GPUs the plan leaves idle."""
        for j in promote:
            allowed = np.flatnonzero(self.inputs.job_allowed[j]).tolist()
            pools = sorted(allowed, key=lambda p: (self.cap[p], p))  # best fit, as backfill
            if self.try_start(j, pools, float(self.inputs.job_weight[j])):
                self.outcome.backfilled.add(j)

    def start_planned(self, plan: Plan0) -> None:
        """Waiting jobs the plan starts now, by relaxed share, then weight, then those kept off nodes
        going out first; each in the plan's pools first, then any other allowed pool. The plan's
        own starts outrank any stop; one that fits no node clears nodes, else holds nodes of its
        pool (a reservation per blocked gang)."""
        inputs, share0 = self.inputs, plan.share0
        waiting = ((inputs.job_running_pool < 0) & (self.pool0 < 0) & (self.remaining > 0)).nonzero()[0]
        best = share0[waiting].max(axis=1) if waiting.size and share0.size else np.zeros(waiting.size)
        wanted = best > EPS
        chosen = waiting[wanted]
        # among equal shares and weights, jobs kept off nodes going out first: placed after a job
        # that may use any node, they may find the nodes left to them taken (lexsort is stable:
        # jobs equal on every key stay in index order)
        free_to_roam = np.array([not self._kept_off_nodes(j) for j in chosen.tolist()], dtype=bool)
        chosen = chosen[np.lexsort((free_to_roam, -inputs.job_weight[chosen], -best[wanted]))]
        for j in chosen.tolist():
            row, allowed = share0[j], inputs.job_allowed[j]
            order = np.argsort(-row, kind="stable").tolist()  # highest share first, ties in pool order
            pools = [p for p in order if row[p] > EPS or allowed[p]]
            if self.try_start(j, pools, math.inf) or not pools:
                continue
            if not self._within_quota(j):  # its quota keeps it out: nodes cleared or held would idle
                continue
            if clear_for(self, j, pools[0], plan) and self.try_start(j, [pools[0]], math.inf):
                continue
            self._hold_nodes(j, pools[0])

    def _kept_off_nodes(self, j: int) -> bool:
        """Maintenance takes some node of a pool job j may use while it would lose its work there
        (PlanInputs.nodes_out_before_end: before it ends, or its first checkpoint)."""
        inputs = self.inputs
        return any(inputs.nodes_out_before_end(j, p) for p in np.flatnonzero(inputs.job_allowed[j]).tolist())

    def backfill(self, plan: Plan0, backfill_above: float) -> None:
        """What rounding left idle: highest weight first, then the jobs the plan starts soonest
        (the first block it gives them), then the fewest hours of work left; best fit (the
        fullest pool that still takes the gang)."""
        inputs = self.inputs
        idle_now = (inputs.job_running_pool < 0) & (self.pool0 < 0) & (self.remaining > 0)
        idle = (idle_now & (inputs.job_weight > backfill_above)).nonzero()[0]
        planned = plan.share[idle] > EPS
        first_block = np.where(planned.any(axis=1), planned.argmax(axis=1), planned.shape[1])
        steps_left = steps_of_work(inputs)[idle]
        # lexsort is stable: jobs equal on every key stay in index order
        for j in idle[np.lexsort((steps_left, first_block, -inputs.job_weight[idle]))].tolist():
            allowed = np.flatnonzero(inputs.job_allowed[j]).tolist()
            pools = sorted(allowed, key=lambda p: (self.cap[p], p))
            if self.try_start(j, pools, float(inputs.job_weight[j])):
                self.outcome.backfilled.add(j)
