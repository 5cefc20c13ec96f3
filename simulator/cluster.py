"""The simulated cluster: the loop's StateSource and Actuator, plus the physics between steps.

The ControlLoop asks it for a ClusterState (``snapshot``) and hands it the Allocation
(``apply``), exactly as production would with the state service and a real actuator. The
runner then calls ``advance`` to integrate one decision step in sub-ticks. The Allocation is
applied as given, but physics is enforced: a gang starts only if all of it fits on the pool's
nodes (else it stays queued, counted), no pool ever holds more than its up GPUs, inference
serves min(demand, ready capacity), and jobs end when their true work, not the estimate, is done.
A node lost to a failure or maintenance takes its replicas too; they come back where batch runs,
as a Deployment's pods outranking batch pods do on Kubernetes (``_fail_over``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import numpy as np

from optimizer.interference import DEFAULT_CURVE, InterferenceCurve
from optimizer.nodes import place_gang, reserve_packed, without
from schemas import (
    ActuationResult,
    Allocation,
    ClusterState,
    JobAction,
    JobStatus,
    ServiceSpec,
)
from schemas.actuation import Outcome
from schemas.targets import job_target, service_target
from simulator.accounting import Ledger
from simulator.autoscaler import BurstAutoscaler
from simulator.demand import demand_curve, step_means
from simulator.jobs import LiveJob
from simulator.pools import build_pools
from simulator.scenario import Scenario
from simulator.services import PoolCapacity, pool_physical_gpus, round_to_pool
from simulator.snapshot import build_snapshot, node_index
from simulator.workload import SimJob, arrival_order, build_workload

PLANNING_DAY_S = 86400.0


class SimClock:
    """The loop's clock in simulated time; only the simulator moves it."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.elapsed_s = 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed_s)


class Simulator:
    """One run of one scenario. Build a fresh one per policy: same seed, same world."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        quick: bool = False,
        seed: int | None = None,
        curve: InterferenceCurve = DEFAULT_CURVE,
        jobs: Sequence[SimJob] | None = None,
    ) -> None:
        self.scenario = scenario
        self.curve = curve
        self.step_s = scenario.step_s
        self.tick_s = scenario.subtick_s
        self.window_s = scenario.window_s(quick)
        self.steps = math.ceil(self.window_s / self.step_s)
        self.window_s = float(self.steps * self.step_s)
        self.clock = SimClock(scenario.start)
        base = np.random.default_rng(scenario.seed if seed is None else seed)
        demand_rng, workload_rng, failure_rng = base.spawn(3)
        self.history_steps = round(scenario.history_days * 86400.0 / self.step_s)
        self.history_s = float(self.history_steps * self.step_s)
        full_window_s = math.ceil(scenario.window_s(False) / self.step_s) * self.step_s
        last_s = full_window_s + PLANNING_DAY_S + 2 * self.step_s
        self.specs: dict[str, ServiceSpec] = {s.spec.service: s.spec for s in scenario.services}
        self.curves: dict[str, np.ndarray] = {}
        self.step_curves: dict[str, np.ndarray] = {}
        for svc_rng, svc in zip(demand_rng.spawn(len(scenario.services)), scenario.services, strict=True):
            curve_ticks = demand_curve(
                svc.demand,
                start=scenario.start,
                first_s=-self.history_s,
                last_s=last_s,
                tick_s=self.tick_s,
                rng=svc_rng,
            )
            self.curves[svc.spec.service] = curve_ticks
            self.step_curves[svc.spec.service] = step_means(curve_ticks, self.step_s // self.tick_s)
        self.pools = build_pools(scenario, failure_rng, full_window_s + self.step_s)
        if jobs is None:
            workload, self._closed_loops = build_workload(scenario, workload_rng)
        else:
            workload, self._closed_loops = list(jobs), {}
        self.arrivals = [j for j in workload if j.arrival_s < self.window_s]
        self._next_arrival = 0
        self.jobs: dict[str, LiveJob] = {}
        self.finished: dict[str, LiveJob] = {}
        self._boundaries = {
            name: sorted({o.start_s for o in pool.outages} | {o.end_s for o in pool.outages})
            for name, pool in self.pools.items()
        }
        self.capacity: dict[str, dict[str, PoolCapacity]] = {s: {} for s in self.specs}
        self.service_phys: dict[str, int] = {p: 0 for p in self.pools}
        self.ledger = Ledger(self.pools)
        self.autoscaler = BurstAutoscaler()
        self.now_s = 0.0
        self._place_initial_services()

    # ---- demand lookups -------------------------------------------------------------------
    def demand_at(self, service: str, t_s: float) -> float:
        return float(self.curves[service][int((t_s + self.history_s) // self.tick_s)])

    def true_step_demand(self, service: str, from_s: float, steps: int) -> list[float]:
        """Mean true demand of each of ``steps`` steps from ``from_s`` (the oracle's view)."""
        first = round((from_s + self.history_s) / self.step_s)
        values = self.step_curves[service][first : first + steps]
        return [float(v) for v in values]

    def demand_history(self, service: str) -> list[float]:
        end = round((self.now_s + self.history_s) / self.step_s)
        return [float(v) for v in self.step_curves[service][end - self.history_steps : end]]

    # ---- StateSource ----------------------------------------------------------------------
    def snapshot(self, now: datetime) -> ClusterState:
        """What a policy may see: the ClusterState at ``now`` (arrivals admitted first)."""
        self._admit_arrivals()
        return build_snapshot(self, now)

    def _admit_arrivals(self) -> None:
        while self._next_arrival < len(self.arrivals):
            sim_job = self.arrivals[self._next_arrival]
            if sim_job.arrival_s > self.now_s:
                break
            self.jobs[sim_job.spec.job_id] = LiveJob(sim_job)
            self._next_arrival += 1

    @property
    def closed_loop(self) -> bool:
        """Whether some arrivals depend on the policy (a closed-loop generator draws a job each
        time one of its own finishes): then no offline bound knows the window's arrivals."""
        return bool(self._closed_loops)

    def _replace_in_closed_loop(self, job: LiveJob) -> None:
        """A job of a closed-loop generator that finishes is followed by a new one of the same loop."""
        drawer = self._closed_loops.get(job.job_id.rsplit("-", 1)[0] + "-")
        if drawer is None or job.finished_at_s is None or job.finished_at_s >= self.window_s:
            return
        bisect.insort(self.arrivals, drawer.draw(job.finished_at_s), lo=self._next_arrival, key=arrival_order)

    def forget_finished(self) -> None:
        """Drop finished jobs and admitted arrivals, so that a days-long soak keeps the simulator's
        memory flat (27,000 finished jobs in 7 days at 2,000 jobs); the run's metrics then cover
        only what is left, so a benchmark never calls it."""
        self.finished.clear()
        del self.arrivals[: self._next_arrival]
        self._next_arrival = 0

    # ---- Actuator -------------------------------------------------------------------------
    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]:
        t = self.now_s
        results: list[ActuationResult] = []

        def result(action: str, target: str, outcome: Outcome, error: str | None = None) -> None:
            results.append(
                ActuationResult(
                    cluster=self.scenario.cluster,
                    backend="simulator",
                    plan_id=allocation.plan_id,
                    action=action,
                    target=target,
                    outcome=outcome,
                    time=self.clock.now(),
                    error=error,
                    permanent=outcome == "failed",
                )
            )

        starts = []
        for d in allocation.jobs:
            job = self.jobs.get(d.job_id)
            if job is None or job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
                self.ledger.refused += 1
                result(d.action.value, job_target(d.job_id), "failed", "unknown or finished job")
                continue
            if job.status == JobStatus.RUNNING:
                if d.action == JobAction.RUN and d.pool == job.pool:
                    continue
                if not job.spec.preemptible:
                    self.ledger.refused += 1
                    result(d.action.value, job_target(d.job_id), "failed", "job is not preemptible")
                    continue
                self.stop_job(job, "policy")
                result("preempt", job_target(d.job_id), "applied")
            if d.action == JobAction.RUN:
                starts.append((d, job))
        free = self._apply_services(allocation, t, result)
        self.autoscaler.apply(allocation)
        for d, job in starts:
            pool = self.pools.get(d.pool or "")
            spec, target = job.spec, job_target(d.job_id)
            if (
                pool is None
                or d.gpus != spec.gpus
                or (spec.allowed_pools and pool.name not in spec.allowed_pools)
                or (spec.allowed_gpu_types and pool.gpu_type not in spec.allowed_gpu_types)
            ):
                self.ledger.refused += 1
                result("run", target, "failed", "pool not allowed or gpus differ from the gang size")
                continue
            # the decision's avoid_nodes are kept off, as a Kubernetes scheduler keeps off them
            avoid = {node_index(pool.name, name) for name in d.avoid_nodes}
            placement = place_gang(without(free[pool.name], avoid), spec.gpus, pool.gpus_per_node)
            if placement is None:
                self.ledger.gang_blocked += 1
                why = f"gang of {spec.gpus} does not fit on {pool.name}'s nodes"
                result("run", target, "retrying", why)
                continue
            for node, gpus in placement.items():
                free[pool.name][node] -= gpus
            job.start(pool.name, placement, t)
            result("run", target, "applied")
        return results

    def job_free_by_node(self, t_s: float) -> dict[str, list[int]]:
        free = {}
        for pool in self.pools.values():
            free[pool.name] = [pool.gpus_per_node if up else 0 for up in pool.up_nodes(t_s)]
        for job in self.jobs.values():
            if job.status == JobStatus.RUNNING and job.pool is not None:
                for node, gpus in job.placement.items():
                    free[job.pool][node] -= gpus
        return free

    def current_targets(self, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, dict[str, float]]:
        """Pool -> service -> GPUs each service holds now (ready and loading), ``skip`` left out."""
        targets: dict[str, dict[str, float]] = {p: {} for p in self.pools}
        for service, by_pool in self.capacity.items():
            if service not in skip:
                for pool, cap in by_pool.items():
                    targets[pool][service] = cap.footprint
        return targets

    def _apply_services(
        self, allocation: Allocation, t_s: float, result: Callable[[str, str, Outcome, str | None], None]
    ) -> dict[str, list[int]]:
        mentioned = {d.service for d in allocation.services if d.service in self.specs}
        targets = self.current_targets(skip=mentioned)
        for d in allocation.services:
            spec = self.specs.get(d.service)
            allowed = spec is not None and (not spec.allowed_pools or d.pool in spec.allowed_pools)
            if spec is None or d.pool not in self.pools or not allowed:
                self.ledger.refused += 1
                result("scale", service_target(d.service, d.pool), "failed", "unknown service or pool")
                continue
            result("scale", service_target(d.service, d.pool), "applied", None)
            gpus = d.gpus if d.gpus > 0 or d.replicas == 0 else float(d.replicas * spec.gpus_per_replica)
            targets[d.pool][d.service] = targets[d.pool].get(d.service, 0.0) + gpus
        for service in mentioned:
            for pool in self.capacity[service]:
                targets[pool].setdefault(service, 0.0)
        return self.fit_services(targets, t_s)

    def fit_services(self, targets: dict[str, dict[str, float]], t_s: float) -> dict[str, list[int]]:
        """Clip services to the GPUs jobs leave free, set their capacity, return free GPUs per node."""
        free = self.job_free_by_node(t_s)
        for name, pool in self.pools.items():
            wanted = {s: round_to_pool(self.specs[s], g, pool.max_share) for s, g in targets[name].items()}
            room = sum(free[name])
            phys, efficiency = pool_physical_gpus(wanted, self.specs, pool.max_share, self.curve)
            scale = 1.0
            while phys > room and scale > 0:
                scale = max(scale * room / max(phys, 1) - 0.02, 0.0)
                wanted = {s: self._scaled(s, g, scale, pool.max_share) for s, g in targets[name].items()}
                phys, efficiency = pool_physical_gpus(wanted, self.specs, pool.max_share, self.curve)
            for service, gpus in wanted.items():
                cap = self.capacity[service].setdefault(name, PoolCapacity())
                cap.set_target(gpus, t_s, self.specs[service].startup_s)
                cap.efficiency = efficiency.get(service, 1.0)
            self.service_phys[name] = phys
            free[name] = reserve_packed(free[name], phys)
        return free

    def _scaled(self, service: str, gpus: float, scale: float, max_share: int) -> float:
        """A service's request cut by ``scale``, rounded down to what the pool can hold."""
        if max_share > 1:
            return math.floor(gpus * scale * 100) / 100
        per = self.specs[service].gpus_per_replica
        return float(math.floor(gpus * scale / per) * per)

    def _place_initial_services(self) -> None:
        targets: dict[str, dict[str, float]] = {p: {} for p in self.pools}
        for name, spec in self.specs.items():
            need = float(max(math.ceil(self.demand_at(name, 0.0)), spec.min_replicas * spec.gpus_per_replica))
            for pool_name in spec.allowed_pools or list(self.pools):
                take = min(need, self.pools[pool_name].gpus_up(0.0) - sum(targets[pool_name].values()))
                if take > 0:
                    targets[pool_name][name] = float(take)
                    need -= take
        self.fit_services(targets, 0.0)
        for by_pool in self.capacity.values():
            for cap in by_pool.values():
                cap.promote(float("inf"))

    def stop_job(self, job: LiveJob, cause: str) -> None:
        self.ledger.record_stop(cause, job.stop())

    # ---- physics between steps ------------------------------------------------------------
    def advance(self) -> None:
        """Integrate one decision step in sub-ticks and move the clock to the next step."""
        step_start = self.now_s
        for tick in range(self.step_s // self.tick_s):
            t = step_start + tick * self.tick_s
            if tick > 0:
                self._apply_outages(t)
            self._integrate(t, float(self.tick_s))
        self.now_s = step_start + self.step_s
        self.clock.elapsed_s = self.now_s
        # Outages that begin on the step boundary take effect before the next snapshot.
        self._apply_outages(self.now_s)
        self.ledger.close_step()

    def _apply_outages(self, t_s: float) -> None:
        changed = False
        for pool in self.pools.values():
            if not any(t_s - self.tick_s < b <= t_s for b in self._boundaries[pool.name]):
                continue
            changed = True
            up = pool.up_nodes(t_s)
            for job in self.jobs.values():
                if (
                    job.status == JobStatus.RUNNING
                    and job.pool == pool.name
                    and any(not up[n] for n in job.placement)
                ):
                    planned = any(
                        o.planned and o.start_s <= t_s < o.end_s and o.node in job.placement
                        for o in pool.outages
                    )
                    self.stop_job(job, "maintenance" if planned else "failure")
        if changed:
            targets = self.current_targets()
            self.fit_services(targets, t_s)
            self._fail_over(targets, t_s)

    def _fail_over(self, targets: dict[str, dict[str, float]], t_s: float) -> None:
        """Replicas an outage took are placed again where batch jobs run, as a Deployment's lost pods
        are recreated and, outranking batch pods, preempt them on Kubernetes: the lowest weight first,
        then the least work since the last checkpoint. They serve after the service's start-up."""
        lost_room = False
        free = self.job_free_by_node(t_s)
        for name, pool in self.pools.items():
            wanted = {s: round_to_pool(self.specs[s], g, pool.max_share) for s, g in targets[name].items()}
            phys, _ = pool_physical_gpus(wanted, self.specs, pool.max_share, self.curve)
            room = sum(free[name])
            if room >= phys:
                continue
            victims = sorted(
                (
                    j
                    for j in self.jobs.values()
                    if j.status == JobStatus.RUNNING and j.pool == name and j.spec.preemptible
                ),
                key=LiveJob.cheapest_stop_first,
            )
            for job in victims:
                room += job.spec.gpus
                self.stop_job(job, "failover")
                lost_room = True
                if room >= phys:
                    break
        if lost_room:
            self.fit_services(targets, t_s)

    def _integrate(self, t_s: float, dt_s: float) -> None:
        self.autoscaler.react(self, t_s)
        busy = {p: 0.0 for p in self.pools}
        useful = {p: 0.0 for p in self.pools}
        finished: list[LiveJob] = []
        for job in self.jobs.values():
            if job.status != JobStatus.RUNNING or job.pool is None:
                continue
            busy[job.pool] += job.spec.gpus * dt_s
            work, overhead = job.run_for(t_s, dt_s)
            useful[job.pool] += work
            self.ledger.batch_progress_gpu_s += work
            self.ledger.restart_overhead_gpu_s += overhead
            if job.finished_at_s is not None:
                job.placement = {}
                finished.append(job)
        for job in finished:
            self.finished[job.job_id] = self.jobs.pop(job.job_id)
            self._replace_in_closed_loop(job)
        for service, by_pool in self.capacity.items():
            for cap in by_pool.values():
                cap.promote(t_s)
            demand = self.demand_at(service, t_s)
            ready = {p: c.effective_ready() for p, c in by_pool.items()}
            total = sum(ready.values())
            served = min(demand, total)
            self.ledger.demand_gpu_s += demand * dt_s
            self.ledger.served_gpu_s += served * dt_s
            if total > 0:
                for pool_name, r in ready.items():
                    useful[pool_name] += served * dt_s * r / total
        for name, sim_pool in self.pools.items():
            busy[name] += self.service_phys[name] * dt_s
            self.ledger.record_tick(name, sim_pool.gpus_up(t_s) * dt_s, busy[name], useful[name])
