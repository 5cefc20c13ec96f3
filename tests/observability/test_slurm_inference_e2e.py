"""Inference demand from a real Prometheus reaches a real Slurm cluster's reservations (``e2e``).

A test exporter serves a service's busy GPUs; a real Prometheus scrapes it; ``ebbtide run
demand-source`` (built by the wiring from settings) publishes DemandSamples over a real Apache
Kafka broker; state, forecaster, optimizer (the ebbtide planner) and actuator (backend ``slurm``)
run on a 4 s step. The service's capacity is held as the Slurm reservation
``ebbtide--chat--pool-b`` (8 GPUs a node): when the demand served grows past one node, the
reservation grows to two; when it falls, it shrinks back.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "actuators"))
from exporter import serve_exposition
from slurm_cluster import SlurmCluster, install_slurm

from actuators.slurm import SlurmCli, reservation_name
from ebbtide.settings import Settings, load_settings
from ebbtide.wiring import WallClock, build_demand_source, build_runtime
from loop import Clock
from streams.metrics import EbbtideMetrics
from streams.services.demand_source import run_demand_source
from streams.topics_admin import ensure_catalogue

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus, pytest.mark.slurm, pytest.mark.kafka,
              pytest.mark.timeout(300)]  # fmt: skip

STEP_S = 4
SPEC = """
pools:
  - {name: pool-a, gpu_type: fake, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
  - {name: pool-b, gpu_type: fake, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
services:
  - spec: {service: chat, gpus_per_replica: 1, min_replicas: 1, max_replicas: 16, allowed_pools: [pool-b],
           startup_s: 0}
"""


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    reason = install_slurm()
    if reason is not None:
        pytest.skip(f"Slurm is not installed: {reason}")
    cluster = SlurmCluster(root=Path(tempfile.mkdtemp(prefix="ebbtide-slurm-")),
                           pools={"pool-a": ["a1", "a2"], "pool-b": ["b1", "b2"]})  # fmt: skip
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def demand() -> Iterator[tuple[int, dict[str, float]]]:
    """An exporter of ``demo_gpus_busy{service="chat"}``, the value set by the test; (port, values)."""
    values = {"gpus": 3.0, "rps": 100.0}

    def exposition() -> str:
        return (f'demo_gpus_busy{{service="chat"}} {values["gpus"]}\n'
                f'demo_requests_per_s{{service="chat"}} {values["rps"]}\n')  # fmt: skip

    with serve_exposition(exposition) as port:
        yield port, values


def reserved_nodes(slurm: SlurmCluster) -> int:
    name = reservation_name("chat", "pool-b")
    cli = SlurmCli(env={"SLURM_CONF": str(slurm.conf)})
    found = [r for r in cli.reservations() if r["ReservationName"] == name]
    return int(found[0]["NodeCnt"]) if found else 0


def test_the_reservation_follows_the_demand_prometheus_serves(
    slurm: SlurmCluster, demand: tuple[int, dict[str, float]], start_prometheus: Callable[[str], Any],
    kafka_broker, topic_prefix: str, tmp_path: Path,
) -> None:  # fmt: skip
    port, values = demand
    server = start_prometheus(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: inference\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    server.wait_for("exporter scraped", lambda: server.api("query", query="demo_gpus_busy")["result"])
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    settings = load_settings(
        cluster="inf", step_s=STEP_S, horizon_steps=12, metrics_enabled=False, cluster_spec=spec,
        kafka={"bootstrap_servers": kafka_broker.bootstrap, "topic_prefix": topic_prefix,
               "group_prefix": topic_prefix, "poll_timeout_s": 0.1, "replication_factor": 1},
        optimizer={"forecast_wait_s": 1.0},
        actuator={"backend": "slurm", "checkpoint_grace_s": 0, "slurm": {"slurm_conf": slurm.conf}},
        demand={"prometheus_url": server.url, "interval_s": 1.0,
                "services": {"chat": {"gpus_busy": 'sum(demo_gpus_busy{service="chat"})',
                                      "requests_per_s": 'sum(demo_requests_per_s{service="chat"})'}}},
    )  # fmt: skip
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    metrics = EbbtideMetrics(CollectorRegistry())
    stops, threads, errors = _start(settings, metrics, WallClock())
    seen: list[tuple[float, float, int]] = []
    t0 = time.monotonic()
    try:

        def follows(gpus: float) -> Callable[[], bool]:
            def check() -> bool:
                nodes = reserved_nodes(slurm)
                if not seen or seen[-1][1:] != (values["gpus"], nodes):
                    seen.append((round(time.monotonic() - t0, 1), values["gpus"], nodes))
                return nodes == -(-gpus // 8)

            return check

        _wait(follows(3.0), 90, "a reservation for 3 busy GPUs")
        assert reserved_nodes(slurm) == 1
        values["gpus"] = 12.0
        _wait(follows(12.0), 120, "the reservation to grow to 12 busy GPUs")
        values["gpus"] = 2.0
        _wait(follows(2.0), 120, "the reservation to shrink back to 2 busy GPUs")
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(timeout=30)
    print("\n(seconds, busy GPUs served, nodes reserved):", seen)
    assert not errors, errors
    assert reserved_nodes(slurm) == 1
    assert [nodes for _, gpus, nodes in seen if gpus == 12.0][-1] == 2


def _start(settings: Settings, metrics: EbbtideMetrics, clock: Clock):  # type: ignore[no-untyped-def]
    stops, threads, errors = [], [], []
    source = build_demand_source(settings, metrics)

    def demand_body(stop: threading.Event) -> None:
        run_demand_source(source, clock, bootstrap=settings.kafka.bootstrap_servers, interval_s=1.0,
                          topic_prefix=settings.kafka.topic_prefix, stop=stop, metrics=metrics)  # fmt: skip

    bodies: list[tuple[str, Callable[[threading.Event], None]]] = [("demand-source", demand_body)]
    for name in ("state", "forecaster", "optimizer", "actuator"):
        runtime = build_runtime(name, settings, transactions=True, metrics=metrics)

        def body(stop: threading.Event, runtime=runtime) -> None:  # type: ignore[no-untyped-def]
            try:
                while not stop.is_set():
                    runtime.poll_once()
            finally:
                runtime.close()

        bodies.append((name, body))
    for name, run in bodies:
        stop = threading.Event()

        def guarded(run=run, stop=stop, name=name) -> None:  # type: ignore[no-untyped-def]
            try:
                run(stop)
            except Exception as exc:
                errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        stops.append(stop)
        threads.append(thread)
    return stops, threads, errors


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")
