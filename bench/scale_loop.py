"""Scale benchmark (``ebbtide bench-scale``): the whole loop at 2,000 and 10,000 jobs through a real broker.

For each size a simulated cluster (``jobs`` jobs in the system on five GPUs per job: 10,000 jobs
on 50,000 GPUs in 8 pools, 4 inference services) is driven a few steps (15 min each) through the
state, forecaster, optimizer (the planner) and actuator services, each on its own thread, over a
local Apache Kafka broker started here (``--broker tansu`` for the embedded one) and stopped at the
end: job events, demand and GPU samples -> ClusterState -> DemandForecasts -> HorizonPlan and
Allocation -> the actuator applies the Allocation to the simulated cluster (its dry run). Then
every topic of the run is read back whole and each topic's largest record is reported: its JSON
bytes (what the producer's ``message.max.bytes`` checks) and zstd level 3 bytes (about what the
topic stores and its ``max.message.bytes`` checks), against both limits; with each step's wall
time, the optimizer's decision times and this process's peak RSS.

bench/ does not import ebbtide/: the composition root passes a :data:`ServicesBuilder` that builds
the services as ``ebbtide run`` would (``ebbtide.soak_wiring.soak_services``).
"""

from __future__ import annotations

import json
import resource
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import zstandard
from confluent_kafka import Consumer, TopicPartition
from rich.console import Console
from rich.table import Table

from bench.soak import ServicesBuilder
from schemas import ServiceSpec
from schemas.topics import CATALOGUE, MAX_RECORD_BYTES, Topic
from simulator.cluster import Simulator
from simulator.scenario import (
    DemandSpec,
    JobGeneratorSpec,
    PoolSpec,
    PriorityClassSpec,
    Scenario,
    ServiceScenario,
    WorkloadSpec,
)
from streams.broker import BrokerHandle
from streams.broker_kafka import start_local_kafka
from streams.broker_tansu import start_tansu
from streams.services.demo_driver import StepView, run_demo_loop

GPUS_PER_JOB = 5
POOLS = 8
SERVICES = 4


@dataclass
class TopicSizes:
    topic: str
    records: int = 0
    largest_json_bytes: int = 0
    largest_zstd_bytes: int = 0
    max_message_bytes: int = 0

    @property
    def fits(self) -> bool:
        json_ok = self.largest_json_bytes <= MAX_RECORD_BYTES
        return json_ok and self.largest_zstd_bytes <= self.max_message_bytes


@dataclass
class ScaleResult:
    jobs: int
    gpus: int
    broker: str
    steps: int
    jobs_in_state: list[int] = field(default_factory=list)
    step_wall_s: list[float] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    topics: list[TopicSizes] = field(default_factory=list)
    dead_letters: int = 0
    outputs_too_large: int = 0


def scale_scenario(jobs: int, steps: int) -> Scenario:
    """``jobs`` jobs waiting at the start on ``GPUS_PER_JOB * jobs`` GPUs; arrivals near completions."""
    nodes_per_pool = max(jobs * GPUS_PER_JOB // (8 * POOLS), 1)
    generator = JobGeneratorSpec(
        arrivals_per_hour=jobs / 8.0,
        initial_backlog=jobs,
        gangs={1: 0.3, 2: 0.2, 4: 0.2, 8: 0.2, 16: 0.1},
        hours_median=6.0,
        classes=[
            PriorityClassSpec(name="standard", weight=1, share=0.8),
            PriorityClassSpec(name="high", weight=4, share=0.2, deadline_frac=0.3),
        ],
    )
    return Scenario(
        name="scale",
        description=f"{jobs} jobs on {nodes_per_pool * 8 * POOLS} GPUs",
        seed=19,
        window_hours=steps / 4.0 + 1.0,
        quick_window_hours=steps / 4.0 + 1.0,
        subtick_s=300,
        pools=[
            PoolSpec(name=f"pool{p}", gpu_type="H100" if p % 2 else "A100", nodes=nodes_per_pool)
            for p in range(POOLS)
        ],
        services=[
            ServiceScenario(
                spec=ServiceSpec(service=f"svc{s}", startup_s=60, min_replicas=2),
                demand=DemandSpec(kind="diurnal", peak_gpus=jobs * GPUS_PER_JOB * 0.02),
            )
            for s in range(SERVICES)
        ],
        workload=WorkloadSpec(generators=[generator]),
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def topic_sizes(bootstrap: str, prefix: str, topic: Topic, idle_s: float = 2.0) -> TopicSizes:
    """Every record of ``prefix + topic.name`` read back from the start: the count and the largest."""
    name = prefix + topic.name
    sizes = TopicSizes(topic.name, max_message_bytes=topic.max_message_bytes)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-scale-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    compress = zstandard.ZstdCompressor(level=3).compress
    try:
        consumer.assign([TopicPartition(name, p) for p in range(topic.partitions)])
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < idle_s:
            messages = consumer.consume(num_messages=10_000, timeout=0.2)
            for msg in messages:
                value = msg.value()
                if msg.error() is not None or value is None:
                    continue
                sizes.records += 1
                if len(value) > sizes.largest_json_bytes:
                    sizes.largest_json_bytes = len(value)
                    sizes.largest_zstd_bytes = len(compress(value))
            if messages:
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return sizes


def run_size(
    build: ServicesBuilder, jobs: int, steps: int, broker: BrokerHandle, console: Console
) -> ScaleResult:
    sim = Simulator(scale_scenario(jobs, steps))
    gpus = sum(p.gpus_total for p in sim.snapshot(sim.clock.now()).pools)
    result = ScaleResult(jobs=jobs, gpus=gpus, broker=broker.kind, steps=steps)
    prefix = f"scale-{jobs}-{uuid.uuid4().hex[:6]}."
    services = build(sim, broker.bootstrap, prefix)

    def on_step(view: StepView) -> None:
        result.jobs_in_state.append(len(view.state.jobs))
        result.step_wall_s.append(view.step_wall_s)
        console.print(f"{jobs} jobs: step {view.index}/{view.total} in {view.step_wall_s:.1f} s")

    run = run_demo_loop(
        sim, services, bootstrap=broker.bootstrap, prefix=prefix, steps=steps, on_step=on_step,
        step_timeout_s=600.0, keep_steps=False,
    )  # fmt: skip
    result.decision_ms = list(run.decision_ms)
    result.dead_letters = run.dead_letters
    result.outputs_too_large = sum(rt.stats.oversized for rt in services.runtimes.values())
    result.peak_rss_mib = peak_rss_mib()
    result.topics = [topic_sizes(broker.bootstrap, prefix, t) for t in CATALOGUE]
    return result


def start(kind: Literal["kafka", "tansu"]) -> BrokerHandle:
    return start_local_kafka("bench-scale") if kind == "kafka" else start_tansu("bench-scale")


def sizes_table(results: list[ScaleResult]) -> Table:
    table = Table(title="ebbtide bench-scale: each topic's largest record (JSON / zstd level 3), its limit")
    for column in ("topic", *(f"{r.jobs} jobs" for r in results), "max.message.bytes", "fits"):
        table.add_column(column, justify="right")
    for i, topic in enumerate(CATALOGUE):
        rows = [r.topics[i] for r in results]
        cells = [
            f"{s.records} rec, {s.largest_json_bytes / 1e3:,.1f} / {s.largest_zstd_bytes / 1e3:,.1f} kB"
            for s in rows
        ]
        verdict = "ok" if all(s.fits for s in rows) else "NO"
        table.add_row(topic.name, *cells, f"{topic.max_message_bytes / 2**20:.0f} MiB", verdict)
    return table


def loop_table(results: list[ScaleResult]) -> Table:
    table = Table(title="ebbtide bench-scale: the loop per size")
    columns = ("jobs", "GPUs", "broker", "steps", "jobs in state", "step wall s", "decision ms")
    for column in (*columns, "dead letters", "too large", "peak RSS MiB"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            str(r.jobs), str(r.gpus), r.broker, str(r.steps), " ".join(map(str, r.jobs_in_state)),
            " ".join(f"{s:.1f}" for s in r.step_wall_s), " ".join(f"{ms:.0f}" for ms in r.decision_ms),
            str(r.dead_letters), str(r.outputs_too_large), f"{r.peak_rss_mib:.0f}",
        )  # fmt: skip
    return table


def main(
    build: ServicesBuilder, *, jobs: list[int], steps: int, broker_kind: Literal["kafka", "tansu"],
    json_path: Path | None,
) -> int:  # fmt: skip
    console = Console(width=200)
    broker = start(broker_kind)
    try:
        results = [run_size(build, n, steps, broker, console) for n in jobs]
    finally:
        broker.stop()
    console.print(loop_table(results))
    console.print(sizes_table(results))
    if json_path is not None:
        out = [{**asdict(r), "topics": [{**asdict(t), "fits": t.fits} for t in r.topics]} for r in results]
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"max_record_bytes": MAX_RECORD_BYTES, "sizes": out}, indent=2))
        console.print(f"JSON: {json_path}")
    fits = all(t.fits for r in results for t in r.topics) and not any(r.outputs_too_large for r in results)
    return 0 if fits else 1
