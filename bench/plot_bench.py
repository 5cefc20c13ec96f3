"""PNG comparison of a benchmark run: utilization, PWT against fifo, SLO shortfall, preemptions and
lost GPU-hours per scenario, one bar per policy in each scenario's group.

The panels share one x axis (the scenarios); the legend sits outside the axes, right of them.
Counts and GPU-hours carry their value on the bar (a zero reads "0", not an empty slot), and a run
that failed is marked with a cross instead of a missing bar. Lost GPU-hours stack, as
simulator/metrics.py adds them, the work since the last checkpoint dropped by preemptions (solid)
and by failures (cross-hatched), and the restart overhead (hatched). On PWT stands, dotted, the
work in flight at the window's end that PWT leaves out (``RunMetrics.pwt_in_flight``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scenarios_bench import REFERENCE, BenchResult
from simulator.metrics import RunMetrics

Value = Callable[[RunMetrics, RunMetrics | None], float]


@dataclass(frozen=True)
class _Panel:
    title: str
    ylabel: str
    value: Value
    percent: bool = False
    reference: float | None = None
    """Draw a dashed line here (fifo's own level for a ratio to fifo)."""
    bar_labels: str | None = None
    """printf format of the value written on each bar; None: no labels."""
    parts: tuple[tuple[str, Value], ...] = ()
    """(hatch, part of the value) stacked, hatched, on top of the rest of each bar."""
    symlog: bool = False
    """Linear up to 1, logarithmic above: one scenario's large loss must not flatten the rest."""


def _to_reference_pwt(gpu_h: float, ref: RunMetrics | None) -> float:
    return gpu_h / ref.pwt if ref is not None and ref.pwt else math.nan


PANELS = (
    _Panel(
        "GPU utilization: useful / available GPU-time (higher is better)",
        "utilization",
        lambda m, _: m.utilization,
        percent=True,
    ),
    _Panel(
        f"priority-weighted throughput relative to {REFERENCE} (higher is better; dotted on top: the "
        "work in flight at the window's end, not in PWT)",
        f"PWT / {REFERENCE} PWT",
        lambda m, ref: _to_reference_pwt(m.pwt + m.pwt_in_flight, ref),
        reference=1.0,
        parts=(("...", lambda m, ref: _to_reference_pwt(m.pwt_in_flight, ref)),),
    ),
    _Panel(
        "inference SLO shortfall: demanded GPU-minutes not served (lower is better)",
        "shortfall",
        lambda m, _: m.slo_shortfall,
        percent=True,
    ),
    _Panel(
        "preemptions: jobs stopped by the policy, maintenance or a burst (lower is better)",
        "stops",
        lambda m, _: float(m.preemptions),
        bar_labels="%d",
    ),
    _Panel(
        "lost GPU-hours: work since the last checkpoint dropped by a stop, and restart overhead "
        "(lower is better)",
        "GPU-hours (log above 1)",
        lambda m, _: m.lost_gpu_hours,
        bar_labels="%.1f",
        parts=(("xxx", lambda m, _: m.failure_lost_gpu_hours), ("///", lambda m, _: m.restart_gpu_hours)),
        symlog=True,
    ),
)
HATCHES = {"...": "in flight at the window's end", "xxx": "lost to failures", "///": "restart overhead"}


def _draw_panel(ax: Any, panel: _Panel, result: BenchResult, policies: list[str], colors: list[Any]) -> None:
    import numpy as np

    scenarios = list(result.results)
    x = np.arange(len(scenarios))
    width = 0.8 / max(len(policies), 1)
    highest = 0.0
    for i, policy in enumerate(policies):
        cells = [result.results[s].get(policy) for s in scenarios]
        refs = [result.results[s].get(REFERENCE) for s in scenarios]
        pairs = list(zip(cells, refs, strict=True))
        total = np.array([panel.value(m, r) if m else np.nan for m, r in pairs])
        parts = [np.array([part(m, r) if m else 0.0 for m, r in pairs]) for _, part in panel.parts]
        xs = x + i * width - 0.4 + width / 2
        kw = {"color": colors[i], "edgecolor": "white", "linewidth": 0.4}
        highest = max(highest, float(np.nanmax(total, initial=0.0)))
        bottom = total - sum(parts, np.zeros(len(xs)))
        bars = ax.bar(xs, bottom, width, label=policy, **kw)
        for (hatch, _), part in zip(panel.parts, parts, strict=True):
            bars = ax.bar(xs, part, width, bottom=bottom, hatch=hatch, alpha=0.55, **kw)
            bottom = bottom + part
        if panel.bar_labels:
            text = [panel.bar_labels % v if np.isfinite(v) else "" for v in total]
            ax.bar_label(bars, labels=text, fontsize=6.5, padding=1)
        for xi, m in zip(xs, cells, strict=True):
            if m is None:
                ax.plot(xi, 0, marker="x", ms=7, mew=2, color=colors[i], clip_on=False)
    if panel.reference is not None:
        ax.axhline(panel.reference, color="grey", lw=0.8, ls="--")
    _axes_style(ax, panel, scenarios, highest)


def _axes_style(ax: Any, panel: _Panel, scenarios: list[str], highest: float) -> None:
    from matplotlib.ticker import PercentFormatter, ScalarFormatter

    if panel.symlog:
        ax.set_yscale("symlog", linthresh=1.0)
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.set_ylim(0, max(highest, 1.0) * 2.2)  # room for the labels on a log scale
    else:
        ax.set_ylim(0, max(highest, 1e-9) * 1.15)
    if panel.percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))
    ax.set_title(panel.title, fontsize=10, loc="left")
    ax.set_ylabel(panel.ylabel)
    ax.set_xticks(range(len(scenarios)), scenarios)
    ax.tick_params(axis="x", labelsize=9)
    ax.set_xlim(-0.5, len(scenarios) - 0.5)
    for edge in range(len(scenarios) - 1):
        ax.axvline(edge + 0.5, color="lightgrey", lw=0.6)
    ax.grid(axis="y", alpha=0.3)


def _title(result: BenchResult) -> str:
    n_policies = len({p for by in result.results.values() for p in by})
    seed = f", seed {result.seed}" if result.seed is not None else ", each scenario's own seed"
    quick = " --quick" if result.quick else ""
    return f"ebbtide bench{quick}: {len(result.results)} scenarios x {n_policies} policies{seed}"


def write_png(result: BenchResult, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    policies = list(dict.fromkeys(p for by in result.results.values() for p in by))
    policies += [p for by in result.failures.values() for p in by if p not in policies]
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(policies))]
    fig_w = max(10.0, 0.36 * len(result.results) * max(len(policies), 3) + 2.5)
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(fig_w, 2.7 * len(PANELS) + 1.2), layout="constrained")
    for ax, panel in zip(axes, PANELS, strict=True):
        _draw_panel(ax, panel, result, policies, colors)
    handles, labels = axes[0].get_legend_handles_labels()
    for hatch, meaning in HATCHES.items():
        handles.append(Patch(facecolor="dimgrey", edgecolor="white", alpha=0.55, hatch=hatch))
        labels.append(meaning)
    if result.failures:
        handles.append(Line2D([], [], marker="x", ls="", color="black"))
        labels.append("failed run")
    fig.legend(handles, labels, loc="outside right upper", frameon=False)
    fig.suptitle(_title(result), fontsize=13)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("bench_quick.png" if result.quick else "bench.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
