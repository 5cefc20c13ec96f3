"""The seven-scenario benchmark (plus the trace replay): every policy on every scenario, one run.

Same scenario, same seed, a fresh simulator per policy. Simulation figures are deterministic;
decision latencies are medians over ``repeat`` runs, and a repeat that changes any simulated
figure is an error (it would mean hidden state or nondeterminism). Prints a rich table with each
policy's change against fifo, writes JSON and a PNG (bench/plot_bench.py), reports peak memory.
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

from simulator.metrics import RunMetrics
from simulator.registry import PolicyFactory
from simulator.runner import run_scenario
from simulator.scenario import Scenario

REFERENCE = "fifo"
_DETERMINISTIC = ("utilization", "pwt", "slo_shortfall", "preemptions", "lost_gpu_hours", "deadline_misses")


@dataclass
class BenchResult:
    quick: bool
    seed: int | None
    results: dict[str, dict[str, RunMetrics]] = field(default_factory=dict)
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """scenario -> policy -> error, for runs that raised (they have no figures)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "failures": self.failures,
            "scenarios": {s: {p: m.headline() for p, m in by.items()} for s, by in self.results.items()},
            "details": {s: {p: m.details() for p, m in by.items()} for s, by in self.results.items()},
            "quick": self.quick,
            "seed": self.seed,
            "wall_s": self.wall_s,
            "peak_rss_mib": self.peak_rss_mib,
        }


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


def run_bench(
    scenarios: Sequence[Scenario],
    policies: Mapping[str, PolicyFactory],
    *,
    quick: bool,
    seed: int | None = None,
    repeat: int = 1,
    console: Console | None = None,
) -> BenchResult:
    result = BenchResult(quick=quick, seed=seed)
    t0 = time.perf_counter()
    total = len(scenarios) * len(policies)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("bench", total=total)
        for scenario in scenarios:
            by_policy: dict[str, RunMetrics] = {}
            for name, factory in policies.items():
                progress.update(task, description=f"{scenario.name} / {name}")
                try:
                    by_policy[name] = _median_run(scenario, name, factory, quick, seed, repeat)
                except Exception as exc:  # a broken policy must not hide the others' figures
                    result.failures.setdefault(scenario.name, {})[name] = f"{type(exc).__name__}: {exc}"
                progress.advance(task)
            result.results[scenario.name] = by_policy
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


def render_table(result: BenchResult) -> Table:
    title = "ebbtide bench" + (" --quick" if result.quick else "") + ": change against fifo in brackets"
    table = Table(title=title, show_lines=False)
    columns = (
        "scenario",
        "policy",
        "util",
        "PWT",
        "SLO short",
        "preempt",
        "lost GPU-h",
        "DL miss",
        "dec ms p50/p99",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("scenario", "policy") else "right")
    for scenario, by_policy in result.results.items():
        ref = by_policy.get(REFERENCE)
        for i, (policy, m) in enumerate(by_policy.items()):
            if ref is not None and policy != REFERENCE:
                util_d = _delta(m.utilization, ref.utilization, relative=False, points=True)
                pwt_d = _delta(m.pwt, ref.pwt, relative=True)
                slo_d = _delta(m.slo_shortfall, ref.slo_shortfall, relative=False, points=True)
                dl_d = _delta(m.deadline_misses, ref.deadline_misses, relative=False)
            else:
                util_d = pwt_d = slo_d = dl_d = ""
            table.add_row(
                scenario if i == 0 else "",
                policy,
                f"{m.utilization:.3f}{util_d}",
                f"{m.pwt:.0f}{pwt_d}",
                f"{m.slo_shortfall * 100:.2f}%{slo_d}",
                f"{m.preemptions}",
                f"{m.lost_gpu_hours:.1f}",
                f"{m.deadline_misses}{dl_d}",
                f"{m.decision_ms_p50:.1f}/{m.decision_ms_p99:.1f}",
            )
        for policy in result.failures.get(scenario, {}):
            table.add_row("", policy, "FAILED", "(error below)", "", "", "", "", "")
        table.add_section()
    return table
