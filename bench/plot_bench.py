"""PNG comparison of a benchmark run: utilization, PWT against fifo, SLO shortfall per scenario."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.scenarios_bench import REFERENCE, BenchResult
from simulator.metrics import RunMetrics


def write_png(result: BenchResult, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scenarios = list(result.results)
    policies = list(dict.fromkeys(p for by in result.results.values() for p in by))
    fig_w = max(8.0, 1.4 * len(scenarios) * max(len(policies), 3) / 3)
    fig, axes = plt.subplots(3, 1, figsize=(fig_w, 10))
    width = 0.8 / max(len(policies), 1)
    x = np.arange(len(scenarios))

    def values(fn: Callable[[RunMetrics | None, RunMetrics | None], float]) -> list[list[float]]:
        by = result.results
        return [[fn(by[s].get(p), by[s].get(REFERENCE)) for s in scenarios] for p in policies]

    panels = [
        ("GPU utilization (useful / available)", values(lambda m, r: m.utilization if m else np.nan)),
        ("PWT relative to fifo", values(lambda m, r: m.pwt / r.pwt if m and r and r.pwt else np.nan)),
        ("inference SLO shortfall", values(lambda m, r: m.slo_shortfall if m else np.nan)),
    ]
    for ax, (title, series) in zip(axes, panels, strict=True):
        for i, (policy, ys) in enumerate(zip(policies, series, strict=True)):
            ax.bar(x + i * width - 0.4 + width / 2, ys, width, label=policy)
        ax.set_title(title)
        ax.set_xticks(x, scenarios, rotation=20, ha="right")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(policies), fontsize="small")
    fig.suptitle("ebbtide bench" + (" (quick)" if result.quick else ""))
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("bench_quick.png" if result.quick else "bench.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
