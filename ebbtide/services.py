"""Running one service as a process: ``ebbtide run <service>`` lands here.

Creates the topics if asked, serves /metrics and /healthz (a heartbeat the service's loop beats,
streams.health), builds the service from settings (ebbtide.wiring)
and runs it until the stop event is set. The collector is a producer only
(streams.services.collector): it reads NVML, or the seed cluster's GPUs when asked, every
``interval_s``. The demand source is one too (streams.services.demand_source): it queries
Prometheus every ``demand.interval_s``; its settings are checked before the broker is.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from datetime import datetime

from ebbtide.settings import Settings
from ebbtide.wiring import (
    PlannerUnavailable,
    WallClock,
    build_cluster_source,
    build_demand_source,
    build_runtime,
    build_source_publisher,
    load_seed,
)
from loop import ClusterSource
from schemas import GpuSample
from streams.broker import answers_metadata
from streams.health import STREAM_STALE_AFTER_S, Heartbeat, collector_stale_after_s
from streams.metrics import METRICS
from streams.metrics_http import serve_metrics
from streams.producer import EventProducer
from streams.services.collector import Sampler
from streams.services.collector import run_collector as produce_samples
from streams.services.demand_source import DemandSource, run_demand_source
from streams.services.nvml_reader import NvmlReader, NvmlUnavailable, open_nvml
from streams.services.source import run_source
from streams.state_diff import gpu_samples_of
from streams.topics_admin import ReplicationError, ensure_catalogue

log = logging.getLogger(__name__)

EXIT_NO_NVML = 3
EXIT_NO_BROKER = 4
EXIT_NO_PLANNER = 5
EXIT_BAD_REPLICATION = 6


def _sampler(settings: Settings) -> tuple[Sampler, NvmlReader | None]:
    """What the collector reads: NVML on this node, or the seed cluster's GPUs (``simulated``)."""
    collector = settings.collector
    if collector.source == "nvml":
        reader = NvmlReader(
            open_nvml(), settings.cluster, collector.pool, collector.node or socket.gethostname()
        )
        return reader.read, reader
    seed = load_seed(settings)

    def simulated(now: datetime) -> list[GpuSample]:
        return list(gpu_samples_of(seed.model_copy(update={"as_of": now})))

    return simulated, None


def heartbeat_for(service: str, settings: Settings) -> Heartbeat:
    """The heartbeat /healthz answers from: stale after health_stale_after_s, or the service's default."""
    stale_s = settings.health_stale_after_s
    if stale_s is None and service == "collector":
        stale_s = collector_stale_after_s(settings.collector.interval_s)
    elif stale_s is None and service == "demand-source":
        stale_s = collector_stale_after_s(settings.demand.interval_s)
    elif stale_s is None and service == "source":
        stale_s = collector_stale_after_s(settings.source.interval_s)
    elif stale_s is None:
        stale_s = STREAM_STALE_AFTER_S
    return Heartbeat(service, stale_s)


def run_collector(settings: Settings, stop: threading.Event, heartbeat: Heartbeat | None = None) -> int:
    try:
        sample, reader = _sampler(settings)
    except NvmlUnavailable as exc:
        print(f"collector: {exc}", flush=True)
        return EXIT_NO_NVML
    try:
        return produce_samples(
            sample,
            WallClock(),
            bootstrap=settings.kafka,
            topic_prefix=settings.kafka.topic_prefix,
            interval_s=settings.collector.interval_s,
            stop=stop,
            metrics=METRICS,
            heartbeat=heartbeat,
        )
    finally:
        if reader is not None:
            reader.close()


def run_demand(
    source: DemandSource, settings: Settings, stop: threading.Event, heartbeat: Heartbeat | None = None
) -> int:
    log.info("demand-source: %d service(s) from %s every %.0f s", len(source.queries),
             settings.demand.prometheus_url, settings.demand.interval_s)  # fmt: skip
    return run_demand_source(
        source,
        WallClock(),
        bootstrap=settings.kafka,
        topic_prefix=settings.kafka.topic_prefix,
        interval_s=settings.demand.interval_s,
        stop=stop,
        metrics=METRICS,
        heartbeat=heartbeat,
    )


def run_cluster_source(
    source: ClusterSource, settings: Settings, stop: threading.Event, heartbeat: Heartbeat | None = None
) -> int:
    """``ebbtide run source``: restore what was published, then publish the cluster's changes."""
    publisher = build_source_publisher(settings, source)
    log.info("source: %s for cluster %s every %.0f s (%d jobs known)", source.name, settings.cluster,
             settings.source.interval_s, len(publisher.last))  # fmt: skip
    producer = EventProducer(settings.kafka, client_id=f"ebbtide-source-{settings.cluster}")
    try:
        return run_source(publisher, producer, topic_prefix=settings.kafka.topic_prefix,
                          interval_s=settings.source.interval_s, stop=stop, metrics=METRICS,
                          heartbeat=heartbeat)  # fmt: skip
    finally:
        producer.close()


def run_service(service: str, settings: Settings, stop: threading.Event) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    demand = build_demand_source(settings, METRICS) if service == "demand-source" else None
    cluster_source = build_cluster_source(settings) if service == "source" else None
    if service == "collector" and settings.collector.source == "nvml":
        try:  # fail on a machine without GPUs before touching the broker
            open_nvml().nvmlShutdown()
        except NvmlUnavailable as exc:
            print(f"collector: {exc}", flush=True)
            return EXIT_NO_NVML
    if not answers_metadata(settings.kafka, timeout_s=10.0):
        print(f"{service}: {_no_broker(settings)}", flush=True)
        return EXIT_NO_BROKER
    if settings.kafka.create_topics:
        try:
            ensure_catalogue(settings.kafka, settings.kafka.topic_prefix, settings.kafka.durability())
        except ReplicationError as exc:
            print(f"{service}: setting kafka.replication_factor [EBBTIDE_KAFKA__REPLICATION_FACTOR]: {exc}",
                  flush=True)  # fmt: skip
            return EXIT_BAD_REPLICATION
    heartbeat = heartbeat_for(service, settings)
    endpoint = serve_metrics(settings.metrics_port, health=heartbeat) if settings.metrics_enabled else None
    try:
        if service == "collector":
            return run_collector(settings, stop, heartbeat)
        if demand is not None:
            return run_demand(demand, settings, stop, heartbeat)
        if cluster_source is not None:
            return run_cluster_source(cluster_source, settings, stop, heartbeat)
        return _run_stream_service(service, settings, stop, heartbeat)
    except PlannerUnavailable as exc:
        print(f"{service}: {exc}", flush=True)
        return EXIT_NO_PLANNER
    finally:
        if endpoint is not None:
            endpoint.close()


def _no_broker(settings: Settings) -> str:
    """Why start-up stopped when no broker answered: the servers, and the security settings when
    they may be what the broker refused (never a credential)."""
    kafka = settings.kafka
    why = f"no Kafka broker answers at {kafka.bootstrap_servers} (setting kafka.bootstrap_servers " \
          "[EBBTIDE_KAFKA__BOOTSTRAP_SERVERS])"  # fmt: skip
    if kafka.security_protocol != "PLAINTEXT":
        why += (
            f", or it refuses security_protocol {kafka.security_protocol}"
            + (f" with sasl_mechanism {kafka.sasl_mechanism}" if kafka.sasl_mechanism else "")
            + " (settings kafka.security_protocol, kafka.sasl_*, kafka.ssl_*)"
        )
    return why


def _run_stream_service(service: str, settings: Settings, stop: threading.Event, heartbeat: Heartbeat) -> int:
    runtime = build_runtime(service, settings, transactions=True, metrics=METRICS, heartbeat=heartbeat)
    log.info(
        "%s: consuming %s as group %s",
        service,
        ", ".join(t.name for t in runtime.processor.inputs),
        runtime.group_id,
    )
    started = time.monotonic()
    runtime.run(stop)
    log.info("%s: stopped after %.0f s (%s)", service, time.monotonic() - started, runtime.stats)
    return 0
