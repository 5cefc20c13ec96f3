"""The collector: the loop's telemetry source, producing GpuSamples every interval.

It reads each GPU through a sampler (NVML on a GPU node, or the seed cluster's idle GPUs when asked
for the simulated source) and produces one GpuSample per GPU to the telemetry topic, which the
state service folds. A producer only: it consumes nothing. Each round beats its heartbeat, which
the process's /healthz answers from (streams.health).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from confluent_kafka import Producer

from loop import Clock
from schemas import GpuSample
from schemas.codec import encode
from schemas.topics import GPU_SAMPLES, PRODUCER_LIMITS
from streams.health import Heartbeat
from streams.kafka_client import Brokers, client_config
from streams.metrics import EbbtideMetrics

Sampler = Callable[[datetime], Sequence[GpuSample]]


def run_collector(
    sample: Sampler,
    clock: Clock,
    *,
    bootstrap: Brokers,
    topic_prefix: str,
    interval_s: float,
    stop: threading.Event,
    metrics: EbbtideMetrics,
    heartbeat: Heartbeat | None = None,
) -> int:
    """Produce ``sample(now)`` every ``interval_s`` until ``stop`` is set; returns the exit code."""
    producer = Producer(
        client_config(bootstrap, {"enable.idempotence": True, "linger.ms": 20, **PRODUCER_LIMITS})
    )
    topic = topic_prefix + GPU_SAMPLES.name
    try:
        while not stop.is_set():
            samples = sample(clock.now())
            for gpu in samples:
                producer.produce(topic, encode(gpu), key=gpu.key.encode())
            producer.poll(0)
            metrics.record_gpu_samples(samples)
            metrics.record_step("collector", ok=True)
            if heartbeat is not None:
                heartbeat.beat()
            stop.wait(interval_s)
    finally:
        producer.flush(10)
    return 0
