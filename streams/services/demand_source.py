"""The demand source: inference demand from Prometheus, published as DemandSamples every interval.

Place in the loop: a producer at the start of it, beside the collector. Every ``interval_s`` it runs
each service's two PromQL queries (streams/prometheus_demand.py builds them) through Prometheus's
HTTP API at one evaluation time, and produces one DemandSample per service whose queries both gave a
number, keyed by service, to the demand-samples topic; the state service folds them. A failed or
empty query is logged with the query and counted (ebbtide_demand_query_failures_total{service,
reason}); that service gets no sample that step, never a zero. Each acknowledged round beats the
heartbeat.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from loop import Clock
from schemas.telemetry import DemandSample
from schemas.topics import DEMAND_SAMPLES
from streams.health import Heartbeat
from streams.kafka_client import Brokers
from streams.metrics import EbbtideMetrics
from streams.producer import DeliveryError, EventProducer
from streams.prometheus_demand import REASONS, QueryRefused, ServiceQueries, demand_sample, value_of
from streams.topics_admin import prefixed

log = logging.getLogger(__name__)

Fetch = Callable[[str, datetime], Any]
"""(PromQL, evaluation time) -> the API's JSON answer; raises QueryRefused when none came."""


def prometheus_fetch(base_url: str, timeout_s: float = 10.0) -> Fetch:
    """An instant-query client of ``base_url``'s HTTP API (``/api/v1/query``), on urllib."""
    endpoint = base_url.rstrip("/") + "/api/v1/query"

    def fetch(query: str, at: datetime) -> Any:
        body = urllib.parse.urlencode({"query": query, "time": f"{at.timestamp():.3f}"}).encode()
        request = urllib.request.Request(endpoint, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:  # Prometheus answers a bad query 400 with a JSON body
            raw = exc.read()
            if not raw:
                raise QueryRefused("unreachable", f"{endpoint}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise QueryRefused("unreachable", f"{endpoint}: {getattr(exc, 'reason', exc)}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise QueryRefused("bad_response", f"{endpoint}: not JSON: {raw[:200]!r}") from None

    return fetch


class DemandSource:
    """One round of queries into DemandSamples; refusals are logged and counted, never published."""

    def __init__(self, cluster: str, queries: Sequence[ServiceQueries], fetch: Fetch,
                 metrics: EbbtideMetrics) -> None:  # fmt: skip
        self.cluster = cluster
        self.queries = tuple(queries)
        self._fetch = fetch
        self._metrics = metrics
        metrics.declare_demand_services([q.service for q in self.queries], REASONS)

    def step(self, now: datetime) -> list[DemandSample]:
        """The DemandSample of every service whose two queries answered a number at ``now``."""
        samples = []
        for service in self.queries:
            try:
                gpus = self._value(service.service, "gpus_busy", service.gpus_busy, now)
                rate = self._value(service.service, "requests_per_s", service.requests_per_s, now)
                samples.append(demand_sample(self.cluster, service.service, now, gpus, rate))
            except QueryRefused as exc:
                self._metrics.record_demand_query_failure(service.service, exc.reason)
        return samples

    def _value(self, service: str, field: str, query: str, now: datetime) -> float:
        try:
            value = value_of(self._fetch(query, now))
            if value < 0:
                raise QueryRefused("out_of_range", f"{value} is negative")
            return value
        except QueryRefused as exc:
            log.warning("demand of %s: %s query %r refused (%s): %s; no sample this step",
                        service, field, query, exc.reason, exc.detail)  # fmt: skip
            raise


def run_demand_source(
    source: DemandSource,
    clock: Clock,
    *,
    bootstrap: Brokers,
    topic_prefix: str,
    interval_s: float,
    stop: threading.Event,
    metrics: EbbtideMetrics,
    heartbeat: Heartbeat | None = None,
) -> int:
    """Publish ``source.step(now)`` every ``interval_s`` until ``stop`` is set; returns the exit code.

    Each round's samples are flushed (acknowledged) before the next round; a round the broker did
    not acknowledge counts as a failed step and is not retried (the next round has newer demand).
    """
    producer = EventProducer(bootstrap, client_id=f"ebbtide-demand-source-{source.cluster}")
    topic = prefixed(DEMAND_SAMPLES, topic_prefix)
    try:
        while not stop.is_set():
            samples = source.step(clock.now())
            for sample in samples:
                producer.send(topic, sample)
            try:
                producer.flush(max(interval_s, 10.0))
            except DeliveryError as exc:
                log.error("demand source: %s", exc)
                metrics.record_step("demand-source", ok=False)
            else:
                metrics.record_demand_samples(samples)
                metrics.record_step("demand-source", ok=True)
                if heartbeat is not None:
                    heartbeat.beat()
            stop.wait(interval_s)
    finally:
        producer.close()
    return 0
