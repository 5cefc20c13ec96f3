"""The seven-scenario benchmark (plus the trace replay): every policy on every scenario, and the bound.

Same scenario, same seed, a fresh simulator per policy; per scenario and seed the offline LP
relaxation (simulator/bound.py) gives the ceiling, and every policy's ``pwt_to_bound`` is its PWT
over the bound's PWT at that policy's own SLO shortfall. Simulation figures are deterministic;
decision latencies are medians over ``repeat`` runs, and a repeat that changes any simulated
figure is an error (it would mean hidden state or nondeterminism). With several seeds the table
and the JSON figures are medians over seeds, and the JSON adds each figure's minimum. Prints a
rich table with each policy's change against fifo, writes JSON and a PNG (bench/plot_bench.py),
checks the planner's targets on each run (bench/targets.py), reports peak memory.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.provenance import git_commit, package_versions
from bench.targets import RunTargets, check_run
from simulator.bound import Bound, NoBound, WindowBound
from simulator.cluster import Simulator
from simulator.metrics import RunMetrics
from simulator.registry import PolicyFactory
from simulator.runner import run_scenario
from simulator.scenario import Scenario

REFERENCE = "fifo"
BOUND = "bound"
_DETERMINISTIC = ("utilization", "pwt", "slo_shortfall", "preemptions", "lost_gpu_hours", "deadline_misses")


@dataclass
class BenchResult:
    quick: bool
    seed: int | None
    results: dict[str, dict[str, RunMetrics]] = field(default_factory=dict)
    """scenario -> policy -> figures (medians over seeds when there are several)."""
    bounds: dict[str, Bound] = field(default_factory=dict)
    """scenario -> the LP bound (medians over seeds)."""
    runs: dict[str, list[dict[str, RunMetrics]]] = field(default_factory=dict)
    """scenario -> one entry per seed: policy -> figures."""
    bound_runs: dict[str, list[Bound]] = field(default_factory=dict)
    seeds: dict[str, list[int]] = field(default_factory=dict)
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """scenario -> policy -> error, for runs that raised (they have no figures)."""
    no_bound: dict[str, str] = field(default_factory=dict)
    """scenario -> why it has no bound (simulator/bound.py's NoBound: a closed-loop workload)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "versions": package_versions(),
            "git_commit": git_commit(),
            "seeds": self.seeds,
            "failures": self.failures,
            "no_bound": self.no_bound,
            "scenarios": {s: self._scenario_json(s) for s in self.results},
            "details": {s: {p: m.details() for p, m in by.items()} for s, by in self.results.items()},
            "runs": {s: self._runs_json(s) for s in self.results},
            "targets": [t.to_json() for t in self.targets()],
            "quick": self.quick,
            "seed": self.seed,
            "wall_s": self.wall_s,
            "peak_rss_mib": self.peak_rss_mib,
        }

    def per_run_figures(self) -> list[tuple[str, int, dict[str, dict[str, Any]]]]:
        """(scenario, seed, policy -> headline figures) for every run, seed by seed."""
        return [(s, run["seed"], run["policies"]) for s in self.runs for run in self._runs_json(s)]

    def targets(self) -> list[RunTargets]:
        """The planner's targets checked on each run (bench/targets.py)."""
        checked = [check_run(scenario, seed, figures) for scenario, seed, figures in self.per_run_figures()]
        return [t for t in checked if t is not None]

    def _runs_json(self, scenario: str) -> list[dict[str, Any]]:
        runs = zip(self.seeds[scenario], self.runs[scenario], strict=True)
        return [{"seed": seed, "policies": {p: m.headline() for p, m in run.items()}} for seed, run in runs]

    def _scenario_json(self, scenario: str) -> dict[str, dict[str, Any]]:
        cells: dict[str, dict[str, Any]] = {}
        many = len(self.runs.get(scenario, [])) > 1
        for policy, m in self.results[scenario].items():
            cells[policy] = dict(m.headline())
            if many:
                per_seed = [run[policy].headline() for run in self.runs[scenario]]
                cells[policy]["min"] = {k: _min(v[k] for v in per_seed) for k in per_seed[0]}
        if scenario in self.bounds:
            cells[BOUND] = self.bounds[scenario].figures()
            if many:
                figs = [b.figures() for b in self.bound_runs[scenario]]
                cells[BOUND]["min"] = {k: min(f[k] for f in figs) for k in figs[0]}
        return cells


def runs_in_json(data: Mapping[str, Any]) -> list[tuple[str, int | None, dict[str, Any]]]:
    """(scenario, seed, policy -> headline figures) for each run of a ``BenchResult.to_json``: its
    ``runs``, or where a file of an earlier commit has none (one seed per scenario), its
    ``scenarios``. KeyError, TypeError or ValueError where the data is not of that shape."""
    if "runs" in data:
        return [(s, run["seed"], run["policies"]) for s, runs in data["runs"].items() for run in runs]
    out = []
    for scenario, cells in data["scenarios"].items():
        (seed,) = data["seeds"][scenario]  # medians over several seeds are not one run
        out.append((scenario, seed, {p: figures for p, figures in cells.items() if p != BOUND}))
    return out


def _min(values: Any) -> Any:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _median(values: Sequence[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _median_run(
    scenario: Scenario, name: str, factory: PolicyFactory, quick: bool, seed: int | None, repeat: int
) -> RunMetrics:
    runs = [run_scenario(scenario, name, factory, quick=quick, seed=seed)[0] for _ in range(repeat)]
    first = runs[0]
    for other in runs[1:]:
        for key in _DETERMINISTIC:
            if getattr(other, key) != getattr(first, key):
                raise RuntimeError(f"{scenario.name}/{name}: {key} differs between repeats")
    return replace(
        first,
        decision_ms_p50=statistics.median(r.decision_ms_p50 for r in runs),
        decision_ms_p99=statistics.median(r.decision_ms_p99 for r in runs),
        wall_s=statistics.median(r.wall_s for r in runs),
    )


def scenario_seeds(scenario: Scenario, seed: int | None, n_seeds: int) -> list[int]:
    """The seeds a scenario runs with: ``seed`` (else the scenario's own) and the next ones."""
    base = scenario.seed if seed is None else seed
    return [base + i for i in range(n_seeds)]


def aggregate(runs: Sequence[Mapping[str, RunMetrics]]) -> dict[str, RunMetrics]:
    """Per policy present in every seed: the first seed's record with headline figures as medians."""
    if len(runs) == 1:
        return dict(runs[0])
    common = [p for p in runs[0] if all(p in r for r in runs)]
    out = {}
    for policy in common:
        first = runs[0][policy]
        medians = {k: _median([r[policy].headline()[k] for r in runs]) for k in first.headline()}
        out[policy] = replace(first, **medians)
    return out


def aggregate_bounds(bounds: Sequence[Bound]) -> Bound:
    figs = [b.figures() for b in bounds]
    med = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
    return Bound(
        pwt=med["pwt"],
        pwt_any=med["pwt_any"],
        utilization=med["utilization"],
        demand_gpu_h=med["demand_gpu_hours"],
        capacity_gpu_h=med["capacity_gpu_hours"],
    )


@dataclass
class _Cell:
    """One scenario x seed: what each policy did and the bound."""

    by_policy: dict[str, RunMetrics]
    bound: Bound | None
    no_bound: str | None = None


def _run_cell(
    scenario: Scenario,
    policies: Mapping[str, PolicyFactory],
    quick: bool,
    seed: int,
    repeat: int,
    failures: dict[str, str],
    advance: Any,
) -> _Cell:
    by_policy: dict[str, RunMetrics] = {}
    for name, factory in policies.items():
        advance(f"{scenario.name} / {name} / seed {seed}")
        try:
            by_policy[name] = _median_run(scenario, name, factory, quick, seed, repeat)
        except Exception as exc:  # a broken policy must not hide the others' figures
            failures[name] = f"{type(exc).__name__}: {exc}"
    advance(f"{scenario.name} / {BOUND} / seed {seed}")
    try:
        window = WindowBound(Simulator(scenario, quick=quick, seed=seed))
        for name, m in by_policy.items():
            ceiling = window.pwt_at(m.slo_shortfall)
            by_policy[name] = replace(m, pwt_to_bound=m.pwt / ceiling if ceiling > 0 else None)
        return _Cell(by_policy, window.summary())
    except NoBound as exc:  # not a failure: the scenario has no bound to give
        return _Cell(by_policy, None, no_bound=str(exc))
    except Exception as exc:  # the bound failing must not hide the policies' figures
        failures[BOUND] = f"{type(exc).__name__}: {exc}"
        return _Cell(by_policy, None)


def run_bench(
    scenarios: Sequence[Scenario],
    policies: Mapping[str, PolicyFactory],
    *,
    quick: bool,
    seed: int | None = None,
    repeat: int = 1,
    n_seeds: int = 1,
    console: Console | None = None,
) -> BenchResult:
    result = BenchResult(quick=quick, seed=seed)
    t0 = time.perf_counter()
    total = len(scenarios) * (len(policies) + 1) * n_seeds
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("bench", total=total)
        started = [False]

        def advance(description: str) -> None:
            if started[0]:
                progress.advance(task)
            started[0] = True
            progress.update(task, description=description)

        for scenario in scenarios:
            seeds = scenario_seeds(scenario, seed, n_seeds)
            failures: dict[str, str] = {}
            cells = [_run_cell(scenario, policies, quick, s, repeat, failures, advance) for s in seeds]
            if failures:
                result.failures[scenario.name] = failures
            for reason in {c.no_bound for c in cells if c.no_bound}:
                result.no_bound[scenario.name] = reason
            result.seeds[scenario.name] = seeds
            result.runs[scenario.name] = [c.by_policy for c in cells]
            result.results[scenario.name] = aggregate(result.runs[scenario.name])
            bounds = [c.bound for c in cells if c.bound is not None]
            if len(bounds) == len(cells):
                result.bound_runs[scenario.name] = bounds
                result.bounds[scenario.name] = aggregate_bounds(bounds)
        progress.advance(task)
    result.wall_s = time.perf_counter() - t0
    result.peak_rss_mib = peak_rss_mib()
    return result


def _delta(value: float, ref: float | None, *, relative: bool, points: bool = False) -> str:
    if ref is None:
        return ""
    if points:
        return f" ({(value - ref) * 100:+.1f}pp)"
    if relative:
        if ref == 0:
            return " (=)" if value == 0 else " (new)"
        return f" ({(value / ref - 1) * 100:+.0f}%)"
    return f" ({value - ref:+g})"


COLUMNS = (
    "scenario",
    "policy",
    "util",
    "PWT",
    "PWT/bound",
    "in flight",
    "wtd done",
    "SLO short",
    "preempt",
    "lost GPU-h",
    "DL miss",
    "JCT p95 h",
    "dec ms p50/p99",
)


def _row(m: RunMetrics, ref: RunMetrics | None) -> list[str]:
    util_d = _delta(m.utilization, ref.utilization if ref else None, relative=False, points=True)
    pwt_d = _delta(m.pwt, ref.pwt if ref else None, relative=True)
    slo_d = _delta(m.slo_shortfall, ref.slo_shortfall if ref else None, relative=False, points=True)
    dl_d = _delta(m.deadline_misses, ref.deadline_misses if ref else None, relative=False)
    return [
        f"{m.utilization:.3f}{util_d}",
        f"{m.pwt:.0f}{pwt_d}",
        "-" if m.pwt_to_bound is None else f"{m.pwt_to_bound:.3f}",
        f"{m.pwt_in_flight:.0f}",
        f"{m.weighted_completions:.0f}",
        f"{m.slo_shortfall * 100:.2f}%{slo_d}",
        f"{m.preemptions:g}",
        f"{m.lost_gpu_hours:.1f}",
        f"{m.deadline_misses:g}{dl_d}",
        f"{m.jct_p95_hours:.1f}",
        f"{m.decision_ms_p50:.1f}/{m.decision_ms_p99:.1f}",
    ]


def _bound_row(bound: Bound) -> list[str]:
    pwt = f"{bound.pwt:.0f} (any {bound.pwt_any:.0f})"
    return [f"{bound.utilization:.3f}", pwt, "1.000", "", "", "0.00%", "", "", "", "", ""]


def render_table(result: BenchResult) -> Table:
    seeds = {len(v) for v in result.seeds.values()}
    of_seeds = f", medians of {max(seeds)} seeds" if seeds and max(seeds) > 1 else ""
    quick = " --quick" if result.quick else ""
    title = f"ebbtide bench{quick}: change against fifo in brackets{of_seeds}"
    caption = (
        "PWT: weight x GPU-hours kept at the window end (finished or checkpointed); PWT/bound: over the "
        "LP bound's PWT at the policy's own SLO shortfall (bound row: inference served in full; any: "
        "none served); in flight: weight x GPU-hours unfinished jobs had done since their last checkpoint at "
        "the window end (not in PWT); wtd done: weighted completions; JCT p95 over finished jobs"
    )
    table = Table(title=title, caption=caption, show_lines=False)
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("scenario", "policy") else "right")
    for scenario, by_policy in result.results.items():
        ref = by_policy.get(REFERENCE)
        for i, (policy, m) in enumerate(by_policy.items()):
            cells = _row(m, ref if policy != REFERENCE else None)
            table.add_row(scenario if i == 0 else "", policy, *cells)
        if scenario in result.bounds:
            table.add_row("", BOUND, *_bound_row(result.bounds[scenario]))
        elif scenario in result.no_bound:
            table.add_row("", BOUND, "none:", result.no_bound[scenario], *[""] * (len(COLUMNS) - 4))
        for policy in result.failures.get(scenario, {}):
            table.add_row("", policy, "FAILED", "(error below)", *[""] * (len(COLUMNS) - 4))
        table.add_section()
    return table
