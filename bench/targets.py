"""The planner's targets, checked on each run (scenario x seed) of ``ebbtide bench``.

``ebbtide bench`` prints these after its table and writes them in its JSON; ``ebbtide bench-targets``
tallies them over bench JSON files (several seeds, held-out scenario files run apart). The targets
(the planner issue's; README "Benchmarks"), each of ebbtide against the figures of the same run:

- ``PWT``: its PWT at least the best baseline's (the baseline with the highest PWT: "best");
- ``wtd done``: its weighted completions at least every baseline's;
- ``lost``: its lost GPU-hours at most 1.5x the best baseline's plus 2;
- ``SLO``: its SLO shortfall at most kueue-hpa's;
- ``PWT vs naive`` and ``SLO vs naive``: at least ebbtide-naive's PWT, at most its SLO shortfall;
- ``bound``: its PWT at least 0.9 of the bound's (at its own SLO shortfall).

A target whose policies did not run (``--policy`` left them out, or the run failed) is not checked.
Pure: figures in (policy -> the headline figures ``RunMetrics.headline`` gives), verdicts out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.table import Table

PLANNER = "ebbtide"
NAIVE = "ebbtide-naive"
KUEUE = "kueue-hpa"
BASELINES = ("fifo", "priority-backfill", "reactive", KUEUE)
"""simulator/registry.py's baselines: what teams run today."""
LOST_FACTOR, LOST_SLACK_GPU_H = 1.5, 2.0
BOUND_SHARE = 0.9
TIE = 1e-9
"""Relative slack on "at least" and "at most": a tie to the last digit counts as met."""

TARGETS = ("PWT", "wtd done", "lost", "SLO", "PWT vs naive", "SLO vs naive", "bound")

Figures = Mapping[str, Any]


@dataclass(frozen=True)
class RunTargets:
    """One run's verdicts: target -> met (only the targets whose policies ran), and what they read."""

    scenario: str
    seed: int | None
    best: str
    met: dict[str, bool]
    pwt_to_best: float
    allowance_gpu_h: float
    planner: Figures
    baselines: dict[str, Figures]
    naive: Figures | None

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "best_baseline": self.best,
            "pwt_to_best": self.pwt_to_best,
            "lost_allowance_gpu_h": self.allowance_gpu_h,
            "met": self.met,
        }


def _at_least(value: float, other: float) -> bool:
    return value >= other - TIE * max(abs(other), 1.0)


def check_run(scenario: str, seed: int | None, by_policy: Mapping[str, Figures]) -> RunTargets | None:
    """The targets of one run; None where ebbtide or every baseline is missing from it."""
    planner = by_policy.get(PLANNER)
    baselines = {name: by_policy[name] for name in BASELINES if name in by_policy}
    if planner is None or not baselines:
        return None
    best = max(baselines, key=lambda name: baselines[name]["pwt"])
    strongest = baselines[best]
    allowance = LOST_FACTOR * strongest["lost_gpu_hours"] + LOST_SLACK_GPU_H
    met = {
        "PWT": _at_least(planner["pwt"], strongest["pwt"]),
        "wtd done": all(
            _at_least(planner["weighted_completions"], b["weighted_completions"]) for b in baselines.values()
        ),
        "lost": _at_least(allowance, planner["lost_gpu_hours"]),
    }
    if KUEUE in baselines:
        met["SLO"] = _at_least(baselines[KUEUE]["slo_shortfall"], planner["slo_shortfall"])
    naive = by_policy.get(NAIVE)
    if naive is not None:
        met["PWT vs naive"] = _at_least(planner["pwt"], naive["pwt"])
        met["SLO vs naive"] = _at_least(naive["slo_shortfall"], planner["slo_shortfall"])
    if planner.get("pwt_to_bound") is not None:
        met["bound"] = _at_least(planner["pwt_to_bound"], BOUND_SHARE)
    ratio = planner["pwt"] / strongest["pwt"] if strongest["pwt"] > 0 else float("inf")
    return RunTargets(scenario, seed, best, met, ratio, allowance, planner, baselines, naive)


def tally(runs: Iterable[RunTargets]) -> dict[str, tuple[int, int]]:
    """Target -> (runs that met it, runs that checked it)."""
    counts = {name: [0, 0] for name in TARGETS}
    for run in runs:
        for name, met in run.met.items():
            counts[name][0] += int(met)
            counts[name][1] += 1
    return {name: (met, of) for name, (met, of) in counts.items() if of}


def _mark(run: RunTargets, target: str, text: str) -> str:
    if target not in run.met:
        return "-"
    return text if run.met[target] else f"[bold red]{text} x[/]"


def _row(run: RunTargets) -> list[str]:
    p, kueue, naive = run.planner, run.baselines.get(KUEUE), run.naive
    most_done = max(b["weighted_completions"] for b in run.baselines.values())
    return [
        run.scenario,
        "" if run.seed is None else str(run.seed),
        run.best,
        _mark(run, "PWT", f"{run.pwt_to_best:.4f}"),
        _mark(run, "wtd done", f"{p['weighted_completions']:.0f} ({most_done:.0f})"),
        _mark(run, "lost", f"{p['lost_gpu_hours']:.1f} ({run.allowance_gpu_h:.1f})"),
        _mark(run, "SLO", _percents(p, kueue)),
        _mark(run, "PWT vs naive", f"{p['pwt'] / naive['pwt']:.4f}" if naive and naive["pwt"] > 0 else "-"),
        _mark(run, "SLO vs naive", _percents(p, naive)),
        _mark(run, "bound", "-" if p.get("pwt_to_bound") is None else f"{p['pwt_to_bound']:.3f}"),
        f"{p['preemptions']:g} ({run.baselines[run.best]['preemptions']:g})",
    ]


def _percents(planner: Figures, other: Figures | None) -> str:
    if other is None:
        return "-"
    return f"{_percent(planner['slo_shortfall'])} ({_percent(other['slo_shortfall'])})"


def _percent(share: float) -> str:
    """Two significant digits: a shortfall of a few millionths shows, as a miss by it does."""
    return f"{share * 100:.2g}%"


def render_targets(runs: list[RunTargets]) -> Table:
    """One row per run, a missed target in red with an x, and the counts in the caption."""
    counts = ", ".join(f"{name} {met}/{of}" for name, (met, of) in tally(runs).items())
    summed = sum(r.pwt_to_best for r in runs)
    table = Table(
        title="ebbtide against the targets, per run",
        caption=(
            f"met: {counts}; summed PWT / best baseline's {summed:.3f} over {len(runs)} runs. "
            "PWT/best: ebbtide's PWT over the best baseline's; wtd done: ebbtide's "
            "(the most of any baseline); "
            "lost: ebbtide's GPU-hours (allowance: 1.5x the best baseline's + 2); SLO: ebbtide's shortfall "
            "(kueue-hpa's); PWT vs naive: ebbtide's PWT over ebbtide-naive's; SLO vs naive: ebbtide's "
            "shortfall (ebbtide-naive's); bound: PWT over the bound's, at least 0.9; preempt: ebbtide's "
            "(the best baseline's); a missed target is marked x"
        ),
    )
    columns = ("scenario", "seed", "best baseline", "PWT/best", "wtd done", "lost GPU-h", "SLO short")
    for col in (*columns, "PWT vs naive", "SLO vs naive", "bound", "preempt"):
        table.add_column(col, justify="left" if col in ("scenario", "best baseline") else "right")
    for run in runs:
        table.add_row(*_row(run))
    return table
