"""Soak benchmark (``ebbtide bench-soak``): days of a simulated cluster through the real services.

A simulated cluster (``--jobs`` jobs kept in the system by a closed loop, a new job each time one
finishes; GPUs of nodes that fail and come back) is driven step by step (15 min) through the
state, forecaster, optimizer and actuator services, each on its own thread, over a local embedded
broker (Tansu) started here and stopped at the end. At the end of each simulated day the process's
resident set (/proc/self/statm) is recorded with the fold's size and the number of Python objects the garbage
collector tracks (flat objects with a growing RSS point at native memory: librdkafka, HiGHS, the
allocator). The verdict: is the RSS flat, within 10%, between day 2 (after warm-up) and the last
day?

bench/ does not import ebbtide/: the composition root passes a :data:`ServicesBuilder` that builds
the services as ``ebbtide run`` would, on this broker and topic prefix.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from schemas import ServiceSpec
from simulator.cluster import Simulator
from simulator.scenario import (
    DemandSpec,
    FailureSpec,
    JobGeneratorSpec,
    PoolSpec,
    PriorityClassSpec,
    Scenario,
    ServiceScenario,
    WorkloadSpec,
)
from streams.broker_tansu import start_tansu
from streams.services.demo_driver import DemoServices, StepView, run_demo_loop

ServicesBuilder = Callable[[Simulator, str, str], DemoServices]
"""(simulator, bootstrap, topic prefix) -> the services, topics created (``ebbtide.soak_wiring``)."""
FLAT_WITHIN = 0.10
STEPS_PER_DAY = 96


@dataclass
class DayRecord:
    day: int
    rss_mib: float
    peak_rss_mib: float
    jobs_in_state: int
    fold_jobs: int
    fold_gpus: int
    jobs_abandoned: int
    wall_s: float
    py_objects: int = 0
    """Objects the garbage collector tracks (a leak of Python records grows it; native memory does not)."""
    broker_rss_mib: float = 0.0
    """The embedded broker's own process (memory-only Tansu holds every record): not in ``rss_mib``."""


def soak_scenario(jobs: int, days: int) -> Scenario:
    """``jobs`` jobs in the system at any time (a closed loop) on ``jobs`` GPUs.

    Open-loop arrivals cannot hold a queue steady: at 100% of the GPUs the 2,000-job queue grew 53%
    in 7 days, at 80% it drained to about 600 jobs by day 3.
    """
    nodes = max(jobs // 8, 2)
    generator = JobGeneratorSpec(
        population=jobs,
        gangs={1: 0.4, 2: 0.25, 4: 0.2, 8: 0.15},
        hours_median=2.5,
        classes=[
            PriorityClassSpec(name="standard", weight=1, share=0.8),
            PriorityClassSpec(name="high", weight=4, share=0.2),
        ],
    )
    return Scenario(
        name="soak",
        description=f"{jobs} jobs, {days} days",
        seed=7,
        window_hours=days * 24.0,
        quick_window_hours=days * 24.0,
        subtick_s=300,
        pools=[PoolSpec(name="a100", gpu_type="A100", nodes=nodes, gpus_per_node=8)],
        failures=FailureSpec(node_mtbf_hours=2000, repair_hours=4),
        services=[
            ServiceScenario(
                spec=ServiceSpec(service="chat", startup_s=60, min_replicas=2),
                demand=DemandSpec(kind="diurnal", peak_gpus=max(nodes * 8 / 10, 4)),
            )
        ],
        workload=WorkloadSpec(generators=[generator]),
    )


def rss_mib(pid: int | str = "self") -> float:
    """Resident set of a process (this one by default), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            pages = int(f.read().split()[1])
    except FileNotFoundError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _recorder(
    sim: Simulator, services: DemoServices, broker_pid: int | None, days: list[DayRecord], console: Console
) -> Callable[[StepView], None]:
    """An on_step hook that records a DayRecord at the end of each simulated day."""
    fold = services.runtimes["state"].processor.fold  # type: ignore[attr-defined]
    started = time.perf_counter()

    def on_step(view: StepView) -> None:
        if view.index % STEPS_PER_DAY:
            return
        sim.forget_finished()  # the soak reads no run metrics: keep the harness's memory flat
        record = DayRecord(
            day=view.index // STEPS_PER_DAY,
            rss_mib=rss_mib(),
            peak_rss_mib=peak_rss_mib(),
            jobs_in_state=len(view.state.jobs),
            fold_jobs=len(fold.jobs),
            fold_gpus=sum(len(seen) for seen in fold.gpu_seen.values()),
            jobs_abandoned=fold.counters.jobs_abandoned,
            wall_s=time.perf_counter() - started,
            py_objects=len(gc.get_objects()),
            broker_rss_mib=rss_mib(broker_pid) if broker_pid else 0.0,
        )
        days.append(record)
        console.print(f"day {record.day}: RSS {record.rss_mib:.0f} MiB, {record.fold_jobs} jobs in the fold")

    return on_step


def flat_verdict(days: list[DayRecord]) -> tuple[bool | None, float | None]:
    """(flat within FLAT_WITHIN, relative change) from day 2 to the last day; None with under 3 days."""
    base = next((d for d in days if d.day == 2), None)
    if base is None or days[-1].day <= 2:
        return None, None
    change = (days[-1].rss_mib - base.rss_mib) / base.rss_mib
    return abs(change) <= FLAT_WITHIN, change


def soak_table(days: list[DayRecord], jobs: int) -> Table:
    table = Table(title=f"Soak: {jobs} jobs through the services over Tansu, RSS at each simulated day")
    for column in (
        "day",
        "RSS MiB",
        "peak MiB",
        "jobs in state",
        "fold jobs",
        "fold GPUs",
        "abandoned",
        "py objects k",
        "broker MiB",
        "wall s",
    ):
        table.add_column(column, justify="right")
    for d in days:
        table.add_row(
            str(d.day),
            f"{d.rss_mib:.0f}",
            f"{d.peak_rss_mib:.0f}",
            str(d.jobs_in_state),
            str(d.fold_jobs),
            str(d.fold_gpus),
            str(d.jobs_abandoned),
            f"{d.py_objects / 1000:.0f}",
            f"{d.broker_rss_mib:.0f}",
            f"{d.wall_s:.0f}",
        )
    return table


def run_soak(build: ServicesBuilder, days: int, jobs: int, console: Console) -> list[DayRecord]:
    sim = Simulator(soak_scenario(jobs, days))
    broker = start_tansu("bench-soak", die_with_parent=True)
    records: list[DayRecord] = [DayRecord(0, rss_mib(), peak_rss_mib(), 0, 0, 0, 0, 0.0)]
    try:
        prefix = f"soak-{uuid.uuid4().hex[:6]}."
        services = build(sim, broker.bootstrap, prefix)
        run_demo_loop(
            sim,
            services,
            bootstrap=broker.bootstrap,
            prefix=prefix,
            steps=days * STEPS_PER_DAY,
            on_step=_recorder(sim, services, broker.pid, records, console),
            keep_steps=False,
        )
    finally:
        broker.stop()
    return records


def main(build: ServicesBuilder, *, days: int, jobs: int, json_path: Path | None) -> int:
    console = Console()
    records = run_soak(build, days, jobs, console)
    console.print(soak_table(records, jobs))
    flat, change = flat_verdict(records)
    if flat is None:
        console.print("RSS flatness: needs at least 3 days (day 2 to the last day)")
    else:
        verdict = "flat" if flat else "NOT flat"
        console.print(
            f"RSS day 2 -> day {records[-1].day}: {change:+.1%} ({verdict} within {FLAT_WITHIN:.0%})"
        )
    if json_path is not None:
        out = {
            "days": days,
            "jobs": jobs,
            "flat": flat,
            "change": change,
            "records": [asdict(r) for r in records],
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(out, indent=2))
    return 0 if flat is not False else 1
