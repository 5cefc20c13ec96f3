"""Running one service as a process: ``ebbtide run <service>`` lands here.

Creates the topics if asked, serves /metrics, builds the service from settings
(streams.services.wiring) and runs it until the stop event is set. The collector is a producer
only: it reads NVML (or the simulated cluster when asked) every ``interval_s``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from confluent_kafka import Producer

from ebbtide.settings import Settings
from schemas.codec import encode
from schemas.topics import GPU_SAMPLES
from streams.broker import answers_metadata
from streams.services.nvml_reader import NvmlReader, NvmlUnavailable, open_nvml
from streams.services.wiring import WallClock, build_runtime, ensure_topics, load_seed
from streams.state_diff import gpu_samples_of

log = logging.getLogger(__name__)


def _serve_metrics(settings: Settings) -> object | None:
    if not settings.metrics_enabled:
        return None
    from streams.metrics import serve_metrics

    return serve_metrics(settings.metrics_port)


def run_collector(settings: Settings, stop: threading.Event) -> int:
    collector = settings.collector
    clock = WallClock()
    reader: NvmlReader | None = None
    if collector.source == "nvml":
        try:
            nvml = open_nvml()
        except NvmlUnavailable as exc:
            print(f"collector: {exc}", flush=True)
            return 3
        reader = NvmlReader(nvml, settings.cluster, collector.pool, collector.node or socket.gethostname())
    seed = load_seed(settings)
    producer = Producer(
        {"bootstrap.servers": settings.kafka.bootstrap_servers, "enable.idempotence": True, "linger.ms": 20}
    )
    from streams.metrics import METRICS

    try:
        while not stop.is_set():
            now = clock.now()
            samples = (
                reader.read(now)
                if reader is not None
                else list(gpu_samples_of(seed.model_copy(update={"as_of": now})))
            )
            for sample in samples:
                producer.produce(
                    settings.kafka.topic_prefix + GPU_SAMPLES.name, encode(sample), key=sample.key.encode()
                )
            producer.poll(0)
            METRICS.record_gpu_samples(samples)
            METRICS.record_step("collector", ok=True)
            stop.wait(collector.interval_s)
    finally:
        producer.flush(10)
        if reader is not None:
            reader.close()
    return 0


def run_service(service: str, settings: Settings, stop: threading.Event) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if service == "collector" and settings.collector.source == "nvml":
        try:  # fail on a machine without GPUs before touching the broker
            open_nvml().nvmlShutdown()
        except NvmlUnavailable as exc:
            print(f"collector: {exc}", flush=True)
            return 3
    bootstrap = settings.kafka.bootstrap_servers
    if not answers_metadata(bootstrap, timeout_s=10.0):
        print(
            f"{service}: no Kafka broker answers at {bootstrap} "
            "(setting kafka.bootstrap_servers [EBBTIDE_KAFKA__BOOTSTRAP_SERVERS])",
            flush=True,
        )
        return 4
    if settings.kafka.create_topics:
        ensure_topics(bootstrap, settings.kafka.topic_prefix)
    endpoint = _serve_metrics(settings)
    try:
        if service == "collector":
            return run_collector(settings, stop)
        from streams.metrics import METRICS

        runtime = build_runtime(service, settings, transactions=True, metrics=METRICS)
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
    finally:
        if endpoint is not None:
            endpoint.close()  # type: ignore[attr-defined]
