"""Stream benchmarks (``ebbtide bench-stream``): telemetry ingest rate and event-to-Allocation latency.

All run against a local embedded broker (Tansu) started here and stopped at the end.

- ingest: N GpuSamples are produced to the telemetry topic, then the state service's runtime
  (batch consume, strict validation of each record, bulk fold of the telemetry) reads them all;
  events/s = N / wall time.
- event to allocation: with the loop's services running as threads, a high-priority job is
  submitted; the state service re-plans at once; the time from producing the JobEvent to the
  Allocation that decides that job appearing on the allocations topic, minus the policy's own
  decide time (the solve), is one sample.
- memory per service (bench/service_memory.py, once): state, forecaster, optimizer and actuator
  each as its own ``ebbtide run`` process under a steady load; the peak RSS (VmHWM) of each.

Targets (ARCHITECTURE: bench, not tests): ingest >= 100k events/s per process; p99 <= 500 ms;
<= 300 MiB per service. Reports medians over ``runs``, each service's peak RSS, and this
process's own peak RSS (resource.getrusage).
"""

from __future__ import annotations

import json
import resource
import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from bench.service_memory import ServiceMemory, service_memory_run
from loop import Clock, Policy
from schemas import (
    Allocation,
    ClusterState,
    JobEvent,
    JobEventKind,
    JobSpec,
    PoolState,
    ServiceSpec,
    ServiceState,
)
from schemas.codec import decode, encode
from schemas.topics import ALLOCATIONS, GPU_SAMPLES, JOB_EVENTS
from simulator.policies.fifo import FifoPolicy
from streams.broker_tansu import start_tansu
from streams.services.optimizer import OptimizerProcessor
from streams.services.runtime import ServiceRuntime
from streams.state_diff import gpu_samples_of
from streams.topics_admin import ensure_catalogue

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def bench_seed(gpus: int) -> ClusterState:
    pools = [PoolState(name="h100", gpu_type="H100", gpus_total=gpus, gpus_available=gpus, gpus_per_node=8)]
    return ClusterState(
        cluster="bench",
        as_of=T0,
        step_s=900,
        pools=pools,
        services=[ServiceState(spec=ServiceSpec(service="chat"), demand_history=[1.0, 2.0])],
    )


class FixedClock:
    def __init__(self, when: datetime) -> None:
        self.when = when

    def now(self) -> datetime:
        return self.when


class RuntimeBuilder(Protocol):
    """Builds one stream service as ``ebbtide run`` would, on the bench's broker and topic prefix
    (the composition root passes ``ebbtide.bench_wiring.bench_runtime``)."""

    def __call__(
        self,
        service: str,
        bootstrap: str,
        prefix: str,
        *,
        clock: Clock,
        seed: ClusterState,
        replan_on_events: bool,
        policy: Policy | None = None,
    ) -> ServiceRuntime: ...


def ingest_run(build: RuntimeBuilder, bootstrap: str, events: int) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:6]}."
    ensure_catalogue(bootstrap, prefix)
    seed = bench_seed(gpus=1024)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    produced = 0
    minute = 0
    while produced < events:
        state = seed.model_copy(update={"as_of": T0 + timedelta(seconds=minute * 10)})
        for sample in gpu_samples_of(state):
            producer.produce(prefix + GPU_SAMPLES.name, encode(sample), key=sample.key.encode())
            produced += 1
            if produced % 50_000 == 0:
                producer.flush(30)
            if produced >= events:
                break
        minute += 1
    producer.flush(60)
    runtime = build(
        "state",
        bootstrap,
        prefix,
        clock=FixedClock(T0),  # the samples' own times, within the state service's skew of its clock
        seed=seed,
        replan_on_events=False,
    )
    try:
        # Join the group first (not part of the measured ingest).
        while runtime.stats.consumed == 0:
            runtime.poll_once()
        start = time.perf_counter()
        first = runtime.stats.consumed
        while runtime.stats.consumed < events:
            runtime.poll_once()
        elapsed = time.perf_counter() - start
        if runtime.stats.dead_lettered:
            raise RuntimeError(
                f"ingest: {runtime.stats.dead_lettered} samples dead-lettered; the bench measures folding"
            )
        return (runtime.stats.consumed - first) / elapsed
    finally:
        runtime.close()


@dataclass
class LatencyResult:
    p50_ms: float
    p99_ms: float
    samples: int


def latency_run(build: RuntimeBuilder, bootstrap: str, samples: int) -> LatencyResult:
    prefix = f"bench-{uuid.uuid4().hex[:6]}."
    ensure_catalogue(bootstrap, prefix)
    seed = bench_seed(gpus=64)
    runtimes = {
        name: build(
            name,
            bootstrap,
            prefix,
            clock=FixedClock(T0),
            seed=seed,
            policy=FifoPolicy(),
            replan_on_events=True,
        )
        for name in ("state", "forecaster", "optimizer", "actuator")
    }
    stop = threading.Event()
    threads = []
    for runtime in runtimes.values():

        def loop(rt=runtime) -> None:  # type: ignore[no-untyped-def]
            while not stop.is_set():
                rt.poll_once()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        threads.append(thread)
    optimizer = runtimes["optimizer"].processor
    assert isinstance(optimizer, OptimizerProcessor)
    watcher = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{prefix}watch",
            "fetch.wait.max.ms": 50,
            "auto.offset.reset": "earliest",
        }
    )
    watcher.subscribe([prefix + ALLOCATIONS.name])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while optimizer.decisions == 0 and time.monotonic() < deadline:  # the first boundary plan
            time.sleep(0.05)
        for i in range(samples + 3):
            job_id = f"bench-{i}"
            spec = JobSpec(job_id=job_id, gpus=1, estimated_gpu_s=3600.0, priority_weight=10.0)
            event = JobEvent(
                cluster="bench",
                job_id=job_id,
                kind=JobEventKind.SUBMITTED,
                time=T0 + timedelta(seconds=i + 1),
                spec=spec,
            )
            decided_before = len(optimizer.decide_ms)
            t0 = time.perf_counter()
            producer.produce(prefix + JOB_EVENTS.name, encode(event), key=job_id.encode())
            producer.flush(10)
            found = False
            give_up = time.monotonic() + 20
            while not found and time.monotonic() < give_up:
                for msg in watcher.consume(num_messages=100, timeout=0.01):
                    if msg.error() is not None:
                        continue
                    allocation = decode(Allocation, msg.value())
                    if any(j.job_id == job_id for j in allocation.jobs):
                        found = True
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            solve_ms = sum(optimizer.decide_ms[decided_before:])
            if found and i >= 3:  # the first few warm up connections
                latencies.append(max(elapsed_ms - solve_ms, 0.0))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for runtime in runtimes.values():
            runtime.close()
        watcher.close()
    ordered = sorted(latencies) or [float("nan")]
    p99_index = min(len(ordered) - 1, max(0, round(0.99 * (len(ordered) - 1))))
    return LatencyResult(statistics.median(ordered), ordered[p99_index], len(latencies))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


SERVICE_RSS_TARGET_MIB = 300.0


def main(
    build: RuntimeBuilder,
    events: int = 200_000,
    runs: int = 3,
    json_path: Path | None = None,
    latency_samples: int = 100,
    memory_s: float = 15.0,
) -> int:
    console = Console()
    broker = start_tansu("bench-stream")
    try:
        with console.status(f"memory: each service as its own process, {memory_s:.0f} s of steady load..."):
            memory = service_memory_run(broker.bootstrap, seconds=memory_s)
        for failure in memory.failures:
            console.print(failure, style="red", markup=False, highlight=False)
        console.print(
            f"memory: {memory.seconds:.0f} s steady, {memory.telemetry_events:,} GpuSamples, "
            f"{memory.allocations} allocations; peak RSS "
            + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in memory.peak_rss_mib.items())
        )
        rates, p50s, p99s = [], [], []
        for run in range(runs):
            with console.status(f"run {run + 1}/{runs}: ingest of {events:,} GpuSamples..."):
                rates.append(ingest_run(build, broker.bootstrap, events))
            with console.status(
                f"run {run + 1}/{runs}: event-to-Allocation latency ({latency_samples} jobs)..."
            ):
                lat = latency_run(build, broker.bootstrap, latency_samples)
            p50s.append(lat.p50_ms)
            p99s.append(lat.p99_ms)
            console.print(
                f"run {run + 1}: ingest {rates[-1]:,.0f} events/s; event->allocation p50 "
                f"{lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms ({lat.samples} samples)"
            )
    finally:
        broker.stop()
    result = {
        "ingest_events_per_s": statistics.median(rates),
        "event_to_allocation_ms_p50": statistics.median(p50s),
        "event_to_allocation_ms_p99": statistics.median(p99s),
        "service_peak_rss_mib": {name: round(mib, 1) for name, mib in memory.peak_rss_mib.items()},
        "service_memory_steady_s": round(memory.seconds, 1),
        "service_memory_allocations": memory.allocations,
        "bench_process_peak_rss_mib": peak_rss_mib(),
        "runs": runs,
        "events": events,
        "broker": "tansu",
    }
    table = Table(title=f"ebbtide bench-stream (median of {runs} runs, local Tansu broker)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row(
        "telemetry ingest into state", f"{result['ingest_events_per_s']:,.0f} events/s", ">= 100,000"
    )
    table.add_row(
        "job event -> Allocation p50 (excl. solve)", f"{result['event_to_allocation_ms_p50']:.1f} ms", ""
    )
    table.add_row(
        "job event -> Allocation p99 (excl. solve)",
        f"{result['event_to_allocation_ms_p99']:.1f} ms",
        "<= 500 ms",
    )
    _memory_rows(table, memory)
    table.add_row(
        "peak RSS, bench process (4 services in threads + bench)",
        f"{result['bench_process_peak_rss_mib']:.0f} MiB",
        "",
    )
    console.print(table)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2))
        console.print(f"wrote {json_path}")
    return 1 if memory.failures else 0


def _memory_rows(table: Table, memory: ServiceMemory) -> None:
    for name in ("state", "forecaster", "optimizer", "actuator"):
        mib = memory.peak_rss_mib.get(name)
        table.add_row(
            f"peak RSS, {name} service (own process)",
            f"{mib:.0f} MiB" if mib is not None else "not measured",
            f"<= {SERVICE_RSS_TARGET_MIB:.0f} MiB",
        )
