"""Peak memory of each stream service at steady state (part of ``ebbtide bench-stream``).

Each service (state, forecaster, optimizer, actuator) runs as its own process, the way it is
deployed: ``ebbtide run <service> --config <bench settings>`` against the bench's broker, with the
production defaults (planner, forecaster bank, 96-step horizon) except for the dry-run actuator
and no transactions (the embedded broker has none). A driver then feeds the loop for a while: GPU
telemetry of the whole cluster every half second, demand samples, and high-priority jobs that
make the state service re-plan at once, so every service keeps working; the jobs finish a few
seconds later, so the state stays the size of a busy cluster. Halfway through, a backlog of
telemetry (``burst_events`` GpuSamples at once, as after a collector outage) makes the state
service read full-size batches. The figure per service is its peak resident set (``VmHWM`` in
``/proc/<pid>/status``), read before it is stopped; the allocations seen on the topic show that
the loop really ran.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from confluent_kafka import Consumer, Producer

from schemas import (
    ClusterState,
    DemandSample,
    JobEvent,
    JobEventKind,
    JobSpec,
    PoolState,
    ServiceSpec,
    ServiceState,
)
from schemas.codec import encode
from schemas.topics import ALLOCATIONS, DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from streams.fold import DEFAULT_HISTORY_STEPS
from streams.state_diff import gpu_samples_of
from streams.topics_admin import ensure_catalogue

SERVICES = ("state", "forecaster", "optimizer", "actuator")
CLUSTER = "bench-mem"
STEP_S = 900


@dataclass
class ServiceMemory:
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    allocations: int = 0
    telemetry_events: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


def memory_cluster(now: datetime) -> ClusterState:
    """A mid-sized cluster: 320 GPUs in two pools, three inference services with the state service's
    default history (three weeks: the forecaster fits its weekly models, MSTL among them, on it)."""
    history = [2.0 + (i % 96) / 16.0 for i in range(DEFAULT_HISTORY_STEPS)]
    return ClusterState(
        cluster=CLUSTER,
        as_of=now,
        step_s=STEP_S,
        pools=[
            PoolState(name="h100", gpu_type="H100", gpus_total=256, gpus_available=256, gpus_per_node=8),
            PoolState(name="a100", gpu_type="A100", gpus_total=64, gpus_available=64, gpus_per_node=8),
        ],
        services=[
            ServiceState(spec=ServiceSpec(service=name), demand_history=history)
            for name in ("chat", "embed", "rerank")
        ],
    )


def _write_config(folder: Path, bootstrap: str, prefix: str, seed: ClusterState) -> Path:
    spec = folder / "cluster.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "pools": [p.model_dump(mode="json") for p in seed.pools],
                "services": [{"spec": s.spec.model_dump(mode="json")} for s in seed.services],
            }
        )
    )
    config = folder / "settings.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": CLUSTER,
                "step_s": STEP_S,
                "metrics_enabled": False,
                "cluster_spec": str(spec),
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topic_prefix": prefix,
                    "group_prefix": prefix + "mem",
                    "create_topics": False,
                    "batch_size": 20_000,
                },
                "optimizer": {"transactions": "off"},
                "actuator": {"backend": "dry-run"},
            }
        )
    )
    return config


def vm_hwm_mib(pid: int) -> float | None:
    """Peak resident set of a live process (VmHWM), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        return None
    return None


def _ebbtide_command() -> list[str]:
    script = Path(sys.executable).with_name("ebbtide")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from ebbtide.cli import main; main()"]


class _Driver:
    """Feeds the running services: telemetry, demand and short high-priority jobs."""

    def __init__(self, bootstrap: str, prefix: str, seed: ClusterState) -> None:
        self.prefix = prefix
        self.seed = seed
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
        self.telemetry = 0
        self.jobs = 0
        self.running: list[tuple[float, str]] = []

    def _send(self, topic: str, event: JobEvent | DemandSample, key: str) -> None:
        self.producer.produce(self.prefix + topic, encode(event), key=key.encode())

    def tick(self, now: datetime) -> None:
        state = self.seed.model_copy(update={"as_of": now})
        for sample in gpu_samples_of(state):
            self.producer.produce(self.prefix + GPU_SAMPLES.name, encode(sample), key=sample.key.encode())
            self.telemetry += 1
        for svc in self.seed.services:
            demand = DemandSample(
                cluster=CLUSTER, service=svc.spec.service, time=now, requests_per_s=50.0, gpus_busy=4.0
            )
            self._send(DEMAND_SAMPLES.name, demand, svc.spec.service)
        self.producer.poll(0)

    def burst(self, now: datetime, events: int) -> None:
        """A backlog of telemetry: ``events`` GpuSamples of the last minutes, sent at once."""
        sent = 0
        back = 0
        while sent < events:
            state = self.seed.model_copy(update={"as_of": now - timedelta(seconds=back)})
            for sample in gpu_samples_of(state):
                self.producer.produce(self.prefix + GPU_SAMPLES.name, encode(sample), key=sample.key.encode())
                sent += 1
                if sent % 20_000 == 0:
                    self.producer.poll(0)
            back += 1
        self.telemetry += sent
        self.producer.flush(30)

    def submit(self, now: datetime) -> None:
        job_id = f"mem-{self.jobs}"
        self.jobs += 1
        spec = JobSpec(job_id=job_id, gpus=1 + self.jobs % 8, estimated_gpu_s=3600.0, priority_weight=10.0)
        event = JobEvent(cluster=CLUSTER, job_id=job_id, kind=JobEventKind.SUBMITTED, time=now, spec=spec)
        self._send(JOB_EVENTS.name, event, job_id)
        self.running.append((time.monotonic() + 5.0, job_id))
        while self.running and self.running[0][0] <= time.monotonic():
            _, done = self.running.pop(0)
            finished = JobEvent(cluster=CLUSTER, job_id=done, kind=JobEventKind.CANCELLED, time=now)
            self._send(JOB_EVENTS.name, finished, done)
        self.producer.poll(0)


def service_memory_run(
    bootstrap: str, seconds: float = 20.0, burst_events: int = 100_000, startup_timeout_s: float = 90.0
) -> ServiceMemory:
    """Run the four services as processes for ``seconds`` of steady load; their peak RSS."""
    prefix = f"mem-{uuid.uuid4().hex[:6]}."
    ensure_catalogue(bootstrap, prefix)
    seed = memory_cluster(datetime.now(UTC))
    result = ServiceMemory()
    with tempfile.TemporaryDirectory(prefix="ebbtide-mem-") as tmp:
        folder = Path(tmp)
        config = _write_config(folder, bootstrap, prefix, seed)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        logs = {name: (folder / f"{name}.log").open("wb") for name in SERVICES}
        watcher = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{prefix}mem-watch",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 50,
            }
        )
        watcher.subscribe([prefix + ALLOCATIONS.name])
        driver = _Driver(bootstrap, prefix, seed)
        try:
            for name in SERVICES:
                procs[name] = subprocess.Popen(
                    [*_ebbtide_command(), "run", name, "--config", str(config)],
                    stdout=logs[name],
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            # Steady state starts once the loop has produced its first allocation.
            deadline = time.monotonic() + startup_timeout_s
            while result.allocations == 0 and time.monotonic() < deadline:
                driver.tick(datetime.now(UTC))
                driver.submit(datetime.now(UTC))
                result.allocations += _count(watcher)
                _check_alive(procs, result)
                if result.failures:
                    break
            if result.allocations == 0 and not result.failures:
                result.failures.append(f"loop: no Allocation within {startup_timeout_s:.0f} s of start")
            start = time.monotonic()
            next_job = start
            burst_due = burst_events > 0
            while time.monotonic() - start < seconds and not result.failures:
                now = datetime.now(UTC)
                if burst_due and time.monotonic() - start >= seconds / 2:
                    driver.burst(now, burst_events)
                    burst_due = False
                driver.tick(now)
                if time.monotonic() >= next_job:
                    driver.submit(now)
                    next_job += 1.0
                result.allocations += _count(watcher, wait_s=0.5)
                _check_alive(procs, result)
            result.seconds = time.monotonic() - start
            driver.producer.flush(10)
            time.sleep(1.0)  # let the last batch be read
            for name, proc in procs.items():
                peak = vm_hwm_mib(proc.pid)
                if peak is not None:
                    result.peak_rss_mib[name] = peak
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in procs.items():
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
                    result.failures.append(f"{name}: did not stop on SIGTERM within 20 s")
            for log in logs.values():
                log.close()
            watcher.close()
            if result.failures:
                for name in SERVICES:
                    tail = (folder / f"{name}.log").read_text(errors="replace")[-1500:]
                    result.failures.append(f"--- {name} log tail ---\n{tail}")
        result.telemetry_events = driver.telemetry
    return result


def _count(watcher: Consumer, wait_s: float = 0.5) -> int:
    return sum(1 for msg in watcher.consume(num_messages=1000, timeout=wait_s) if msg.error() is None)


def _check_alive(procs: dict[str, subprocess.Popen[bytes]], result: ServiceMemory) -> None:
    for name, proc in procs.items():
        code = proc.poll()
        if code is not None and not any(f.startswith(f"{name}:") for f in result.failures):
            result.failures.append(f"{name}: exited with code {code}")
