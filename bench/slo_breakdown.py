"""Where a policy's inference SLO shortfall comes from: every sub-tick's uncovered demand split by cause.

A diagnostic beside the benchmark (bench/scenarios_bench.py), not a score: the shortfall it splits
is the simulator's own (demand not covered by ready, effective capacity, simulator/cluster.py), and
the parts sum to it. Each sub-tick's shortfall d - r of a service (d its demand, r its ready capacity
after interference) is taken apart in this order:

1. ``interference``: ready GPUs lost to time-slicing (ready x (1 - efficiency));
2. ``pool-move``: GPUs the step's Allocation asked for that are still loading (``startup_s``) in
   place of GPUs it took from the same service in another pool (replicas moved between pools: the
   old ones go at once, the new ones serve after their start-up);
3. ``startup-plan``: the other GPUs the step's Allocation asked for that are still loading;
4. ``startup-burst``: GPUs the in-step autoscaler added (lent headroom taken back) still loading;
5. ``held-by-jobs``: GPUs the Allocation asked for that the pool could not give (jobs hold them);
6. ``reclaim-blocked``: a burst allowance is left but the autoscaler found no room for it;
7. what is left was never asked for: ``under-mean`` the part below the step's mean true demand
   (the plan, with what it lent back as its ceiling, sized under the demand of the step), and
   ``sub-tick-peak`` the part above it (the step's mean was covered, a peak inside it was not).

Each is reported as a share of the demanded GPU-time, as the SLO shortfall is.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from schemas import Allocation
from simulator.cluster import Simulator
from simulator.registry import PolicyFactory
from simulator.runner import run_scenario
from simulator.scenario import Scenario
from simulator.services import PoolCapacity

CAUSES = (
    "interference",
    "pool-move",
    "startup-plan",
    "startup-burst",
    "held-by-jobs",
    "reclaim-blocked",
    "under-mean",
    "sub-tick-peak",
)


@dataclass
class Breakdown:
    demand_gpu_s: float = 0.0
    short_gpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    bursts: int = 0  # sub-ticks in which the autoscaler added capacity
    by_service: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    """service -> cause -> uncovered GPU-seconds (the same parts, per service)."""

    def shares(self) -> dict[str, float]:
        total = max(self.demand_gpu_s, 1e-9)
        return {c: self.short_gpu_s.get(c, 0.0) / total for c in CAUSES}

    @property
    def shortfall(self) -> float:
        return sum(self.short_gpu_s.values()) / max(self.demand_gpu_s, 1e-9)


class _Traced(Simulator):
    """The simulator, unchanged, with a record of what each step asked for and each tick's causes."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.breakdown = Breakdown()
        self._asked: dict[str, float] = {}
        self._step_start = 0.0
        self._plan_loading: dict[str, float] = {}
        self._moved: dict[str, float] = {}

    def apply(self, allocation: Allocation):  # type: ignore[no-untyped-def]
        self._step_start = self.now_s
        self._asked = defaultdict(float)
        for d in allocation.services:
            if d.service in self.specs:
                self._asked[d.service] += (
                    d.gpus
                    if d.gpus > 0 or d.replicas == 0
                    else float(d.replicas * self.specs[d.service].gpus_per_replica)
                )
        before = {s: {p: c.footprint for p, c in by_pool.items()} for s, by_pool in self.capacity.items()}
        results = super().apply(allocation)
        self._moved = {s: _moved_gpus(before[s], self.capacity[s]) for s in before}
        self._plan_loading = {  # what the Allocation itself started loading (the autoscaler adds later)
            service: sum(g for c in by_pool.values() for _, g in c.pending)
            for service, by_pool in self.capacity.items()
        }
        return results

    def _integrate(self, t_s: float, dt_s: float) -> None:
        before = {s: sum(c.footprint for c in by_pool.values()) for s, by_pool in self.capacity.items()}
        super()._integrate(t_s, dt_s)
        for service, by_pool in self.capacity.items():
            after = sum(c.footprint for c in by_pool.values())
            if after > before[service] + 1e-9:
                self.breakdown.bursts += 1
            self._attribute(service, t_s, dt_s)

    def _attribute(self, service: str, t_s: float, dt_s: float) -> None:
        by_pool = self.capacity[service]
        demand = self.demand_at(service, t_s)
        self.breakdown.demand_gpu_s += demand * dt_s
        ready = sum(c.ready_gpus for c in by_pool.values())
        effective = sum(c.effective_ready() for c in by_pool.values())
        short = demand - effective
        if short <= 1e-9:
            return
        startup = self.specs[service].startup_s
        plan_loading = min(
            sum(
                g
                for c in by_pool.values()
                for at, g in c.pending
                if abs(at - startup - self._step_start) < 1e-6
            ),
            self._plan_loading.get(service, 0.0),
        )
        footprint = sum(c.footprint for c in by_pool.values())
        burst_loading = footprint - ready - plan_loading
        asked = self._asked.get(service, 0.0)
        allowance = sum(self.autoscaler.allowance.get(service, {}).values())
        step = int((t_s + self.history_s) // self.step_s)
        mean = float(self.step_curves[service][step])
        moved = min(plan_loading, self._moved.get(service, 0.0))
        parts = [
            ("interference", ready - effective),
            ("pool-move", moved),
            ("startup-plan", plan_loading - moved),
            ("startup-burst", burst_loading),
            ("held-by-jobs", asked - (footprint - burst_loading)),
            ("reclaim-blocked", allowance),
            ("under-mean", mean - max(footprint, asked)),
            ("sub-tick-peak", math.inf),
        ]
        for cause, size in parts:
            take = min(short, max(size, 0.0))
            if take > 0:
                self.breakdown.short_gpu_s[cause] += take * dt_s
                self.breakdown.by_service[service][cause] += take * dt_s
                short -= take
            if short <= 1e-9:
                break


def _moved_gpus(before: dict[str, float], after: dict[str, PoolCapacity]) -> float:
    """GPUs a service gained in some pools while it lost as many in others (moved, not grown)."""
    pools = set(before) | set(after)
    change = [(after[p].footprint if p in after else 0.0) - before.get(p, 0.0) for p in pools]
    return min(sum(c for c in change if c > 0), -sum(c for c in change if c < 0))


def slo_breakdown(
    scenario: Scenario, factory: PolicyFactory, *, seed: int | None = None, quick: bool = False
) -> Breakdown:
    """Run one policy through one scenario (simulator/runner.py) and split its shortfall."""
    _, sim = run_scenario(scenario, "traced", factory, quick=quick, seed=seed, simulator=_Traced)
    assert isinstance(sim, _Traced)
    return sim.breakdown


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.slo_breakdown``: the split per scenario and policy, as a table and JSON."""
    import argparse
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from simulator.registry import available_policies
    from simulator.scenario import ScenarioError, builtin_scenarios, load_scenario, scenario_paths

    parser = argparse.ArgumentParser(
        prog="python -m bench.slo_breakdown", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--scenario", action="append", help="built-in or extra scenario (repeatable); default the built-ins"
    )
    parser.add_argument(
        "--scenario-file", action="append", type=Path, default=[], help="scenario YAML (repeatable)"
    )
    parser.add_argument("--policy", action="append", help="policy (repeatable); default ebbtide, kueue-hpa")
    parser.add_argument("--seed", type=int, default=None, help="override every scenario's seed")
    parser.add_argument("--json", type=Path, default=None, help="write the shares here")
    args = parser.parse_args(argv)
    policies = available_policies()
    chosen = args.policy or ["ebbtide", "kueue-hpa"]
    if missing := [name for name in chosen if name not in policies]:
        parser.error(f"unknown policy {', '.join(missing)}; available: {', '.join(policies)}")
    try:
        paths = scenario_paths(args.scenario or []) + args.scenario_file
        scenarios = [load_scenario(path) for path in paths or sorted(builtin_scenarios().values())]
    except ScenarioError as exc:
        parser.error(str(exc))
    table = Table(title="SLO shortfall by cause, % of demanded GPU-time")
    for column in ("scenario", "policy", "shortfall", *CAUSES):
        table.add_column(column, justify="left" if column in ("scenario", "policy") else "right")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for scenario in scenarios:
        name = scenario.name
        for policy in chosen:
            split = slo_breakdown(scenario, policies[policy], seed=args.seed)
            shares = split.shares()
            out.setdefault(name, {})[policy] = {"slo_shortfall": split.shortfall, **shares}
            table.add_row(
                name, policy, f"{100 * split.shortfall:.3f}", *(f"{100 * shares[c]:.3f}" for c in CAUSES)
            )
    Console(width=max(Console().width, 160)).print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
