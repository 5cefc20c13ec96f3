"""``ebbtide demo``: the whole loop on one machine, against the fifo baseline on the same cluster.

Starts the embedded broker (Tansu), a simulated cluster fed by the real GenTD26 demand curve and
openb best-effort jobs in accelerated time (the ``replay`` scenario), and the state, forecaster,
optimizer and actuator services as threads. Shows each committed step (who runs, who waits and
why, from the Allocation's reasons), then compares utilization, PWT, SLO shortfall, preemptions
and lost GPU-hours with what ``fifo`` and the strongest other baseline (the one with the most PWT
there) did on the same simulated cluster, and writes PNGs of demand, forecast band and allocated
capacity. By default it runs a full simulated day (96 steps of 15 minutes). Everything it
started is stopped at the end, also on Ctrl-C.

The Kafka side lives in streams/ (only streams/ imports Kafka clients); this module only wires it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ebbtide.settings import Settings, SettingsError, load_settings
from schemas import JobAction

DEMO_SCENARIO = "replay"


@dataclass(frozen=True)
class DemoResult:
    ebbtide: Any
    fifo: Any
    plots: list[Path]
    policy_name: str
    dead_letters: int
    service_stats: dict[str, dict[str, int]]
    baseline: Any = None
    baseline_name: str = ""


def _policy() -> tuple[Any, str]:
    try:
        from optimizer.planner import PlannerPolicy
    except ImportError:
        from simulator.policies.fifo import FifoPolicy

        return FifoPolicy(name="fifo-over-kafka"), "fifo-over-kafka (optimizer.planner not installed)"
    return PlannerPolicy(name="ebbtide"), "ebbtide"


def demo_scenario(steps: int) -> Any:
    from simulator.scenario import builtin_scenarios, load_scenario

    scenario = load_scenario(builtin_scenarios()[DEMO_SCENARIO])
    hours = steps * scenario.step_s / 3600.0
    return scenario.model_copy(update={"window_hours": hours, "quick_window_hours": hours})


def describe_step(view: Any) -> str:
    alloc = view.allocation
    runs = [j for j in alloc.jobs if j.action == JobAction.RUN]
    holds = [j for j in alloc.jobs if j.action == JobAction.HOLD]
    preempts = [j for j in alloc.jobs if j.action == JobAction.PREEMPT]
    capacity: dict[str, float] = {}
    for svc in alloc.services:
        capacity[svc.service] = capacity.get(svc.service, 0.0) + svc.gpus
    services = ", ".join(
        f"{name} {gpus:g} GPUs (demand {view.demand_gpus.get(name, 0.0):.1f})"
        for name, gpus in sorted(capacity.items())
    )
    line = (
        f"[bold]step {view.index}/{view.total}[/] {view.as_of:%a %H:%M}  plan {alloc.plan_id[-10:]}  "
        f"run {len(runs)} ({sum(j.gpus for j in runs)} GPUs), hold {len(holds)}, preempt {len(preempts)}"
        f"{'  [red]fallback: ' + (alloc.fallback_reason or '') + '[/]' if alloc.fallback else ''}\n"
        f"    inference: {services or 'none'}"
    )
    reasons = Counter(j.reason for j in holds)
    for reason, count in reasons.most_common(2):
        line += f"\n    waits ({count}): {reason}"
    for job in preempts[:2]:
        line += f"\n    preempted {job.job_id}: {job.reason}"
    starting = [j for j in runs if "starts" in j.reason] or runs
    if starting:
        job = starting[0]
        more = f" (+{len(starting) - 1} more starting)" if len(starting) > 1 and starting is not runs else ""
        line += f"\n    runs {job.job_id} on {job.pool}{more}: {job.reason}"
    return line


def _baselines(scenario: Any) -> tuple[Any, str, Any]:
    """fifo's figures, and the name and figures of the other baseline with the most PWT."""
    from simulator.registry import baseline_factories
    from simulator.runner import run_scenario

    runs = {name: run_scenario(scenario, name, factory)[0] for name, factory in baseline_factories().items()}
    fifo = runs.pop("fifo")
    strongest = max(runs, key=lambda name: runs[name].pwt)
    return fifo, strongest, runs[strongest]


def run_demo(
    steps: int, settings: Settings, out_dir: Path, console: Console, bootstrap: str | None = None
) -> DemoResult:
    from ebbtide.demo_wiring import demo_services, simulated_settings
    from simulator.cluster import Simulator
    from simulator.metrics import compute_metrics
    from streams.services.demo_driver import run_demo_loop

    logging.getLogger("streams").setLevel(logging.ERROR)

    scenario = demo_scenario(steps)
    policy, policy_name = _policy()
    console.print(
        f"[bold]ebbtide demo[/]: scenario [cyan]{scenario.name}[/] ({scenario.description}), "
        f"{steps} steps of {scenario.step_s // 60} min, policy [cyan]{policy_name}[/]"
    )
    with console.status("the baselines on the same simulated cluster (reference)..."):
        fifo_metrics, strongest, strongest_metrics = _baselines(scenario)
    with _broker(bootstrap, settings, out_dir, console) as servers:
        prefix = settings.kafka.topic_prefix or (f"demo-{uuid.uuid4().hex[:6]}." if bootstrap else "")
        sim = Simulator(scenario)
        run_settings = simulated_settings(
            settings, sim, bootstrap=servers, prefix=prefix, group_prefix=prefix or "ebbtide",
            local_broker=not bootstrap,
        )  # fmt: skip
        run = run_demo_loop(
            sim,
            demo_services(sim, run_settings, policy),
            bootstrap=run_settings.kafka,
            prefix=prefix,
            steps=sim.steps,
            on_step=lambda view: console.print(describe_step(view)),
        )
    if bootstrap:
        console.print(
            f"the records stay on {servers} under the topic prefix {prefix!r}: inspect them with "
            f"EBBTIDE_KAFKA__TOPIC_PREFIX={prefix} EBBTIDE_KAFKA__GROUP_PREFIX={prefix} "
            f"ebbtide status --bootstrap {servers} --cluster {scenario.cluster}",
            markup=False,
            highlight=False,
        )
    ours = compute_metrics(sim, policy.name, run.decision_ms)
    plots = write_plots(run, out_dir)
    return DemoResult(
        ours,
        fifo_metrics,
        plots,
        policy.name,
        run.dead_letters,
        run.service_stats,
        strongest_metrics,
        f"{strongest} (strongest baseline)",
    )


def comparison_table(result: DemoResult) -> Table:
    table = Table(
        title="Same simulated cluster, same workload, same seed",
        caption="util: useful GPU-time / available; PWT: weight x GPU-hours kept (finished or "
        "checkpointed); SLO short: demanded inference GPU-min not covered; lost GPU-h: work dropped "
        "by stops plus restart overhead; p50 ms: decision time",
    )
    table.add_column("policy")
    for column in ("util", "PWT", "SLO short", "preempt", "lost GPU-h", "jobs done", "p50 ms"):
        table.add_column(column, justify="right")
    rows = [(f"{result.policy_name} (over Kafka)", result.ebbtide), ("fifo", result.fifo)]
    if result.baseline is not None:
        rows.append((result.baseline_name, result.baseline))
    for label, m in rows:
        table.add_row(
            label,
            f"{m.utilization:.1%}",
            f"{m.pwt:.1f}",
            f"{m.slo_shortfall:.2%}",
            str(m.preemptions),
            f"{m.lost_gpu_hours:.1f}",
            f"{m.jobs_completed}/{m.jobs_arrived}",
            f"{m.decision_ms_p50:.0f}",
        )
    return table


def write_plots(run: Any, out_dir: Path) -> list[Path]:
    """One PNG per service: demand, the forecast band made at each step, and the allocated capacity.

    Everything is drawn at the start of the step it is about: the demand of the step that ended at
    a boundary, the forecast's first step and the Allocation from the boundary on.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    services = sorted({name for view in run.steps for name in view.demand_gpus})
    paths = []
    nan = float("nan")
    for service in services:
        starts = [view.as_of for view in run.steps]
        step = timedelta(seconds=run.steps[0].state.step_s) if run.steps else timedelta(0)
        demand_at = [view.as_of - step for view in run.steps]
        demand = [view.demand_gpus.get(service, 0.0) for view in run.steps]
        curves: dict[str, list[float]] = {"p50": [], "p90": [], "p99": []}
        for view in run.steps:
            forecast = view.forecasts.get(service)
            for key, values in curves.items():
                values.append(forecast.quantiles[key][0] if forecast is not None else nan)
        allocated = [
            sum(s.gpus for s in view.allocation.services if s.service == service) for view in run.steps
        ]
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.plot(demand_at, demand, label="demand (busy GPUs, step mean)", color="black", marker=".")
        ax.plot(starts, curves["p50"], label="forecast p50", color="tab:blue")
        ax.fill_between(
            starts, curves["p50"], curves["p99"], alpha=0.15, color="tab:blue", label="forecast band p50-p99"
        )
        ax.fill_between(
            starts, curves["p50"], curves["p90"], alpha=0.3, color="tab:blue", label="forecast band p50-p90"
        )
        ax.step(starts, allocated, where="post", label="allocated capacity (GPUs)", color="tab:green")
        ax.set_title(f"ebbtide demo: {service} (demand, forecast band, allocated capacity)")
        ax.set_ylabel("GPUs")
        ax.legend(loc="upper left", fontsize=8)
        fig.autofmt_xdate()
        path = out_dir / f"demo_{service}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


@contextlib.contextmanager
def _broker(bootstrap: str | None, settings: Settings, out_dir: Path, console: Console) -> Iterator[str]:
    """The user's Kafka when ``--bootstrap`` names one (left running; the settings' security), else
    an embedded Tansu."""
    if bootstrap:
        from streams.broker import answers_metadata

        yours = settings.kafka.model_copy(update={"bootstrap_servers": bootstrap})
        if not answers_metadata(yours, timeout_s=10.0):
            raise SettingsError(f"--bootstrap {bootstrap}: no Kafka broker answers a metadata request there")
        console.print(f"broker: yours at {bootstrap} (left running)")
        yield bootstrap
        return
    from streams.broker_tansu import start_tansu

    with console.status("starting the embedded broker (Tansu)..."):
        broker = start_tansu("demo", data_dir=out_dir / "broker")
    console.print(
        f"broker: Tansu at {broker.bootstrap} (memory only; no transactions: "
        "the optimizer publishes at-least-once with deterministic plan ids)"
    )
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def main(steps: int, config: Path | None, out_dir: Path, bootstrap: str | None = None) -> int:
    console = Console()
    settings = load_settings(config)
    result = run_demo(steps, settings, out_dir, console, bootstrap)
    console.print(comparison_table(result))
    stats = ", ".join(
        f"{name} {s['consumed']} in / {s['produced']} out" for name, s in result.service_stats.items()
    )
    console.print(f"services: {stats}; dead letters: {result.dead_letters}")
    for path in result.plots:
        console.print(f"plot: {path}")
    return 0
