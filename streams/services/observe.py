"""What the stream services tell Prometheus: a thin bridge from loop events to streams.metrics.

The runtime hands every decoded input, every output and every dead letter to :class:`ServiceMetrics`;
it calls the matching ``record_*`` helper of :class:`streams.metrics.EbbtideMetrics` (the one place
metrics are defined). Consumer lag is read from the consumer's positions and cached watermarks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas import (
    ActuationResult,
    ClusterState,
    DeadLetter,
    DemandForecast,
    DemandSample,
    GpuSample,
    JobEvent,
)
from schemas.base import Event
from streams.metric_series import forecast_step_index
from streams.metrics import EbbtideMetrics


@dataclass
class ServiceMetrics:
    metrics: EbbtideMetrics
    component: str
    consumer_group: str
    # latest forecast per (cluster, service), and the (forecast, step) pairs already scored
    _forecasts: dict[tuple[str, str], DemandForecast] = field(default_factory=dict)
    _scored: dict[tuple[str, str], tuple[object, int]] = field(default_factory=dict)

    def declare(self, source_topics: Iterable[str]) -> None:
        self.metrics.declare_consumer(self.component, source_topics)

    def inputs(self, events: Sequence[Event]) -> None:
        samples = [e for e in events if isinstance(e, GpuSample)]
        if samples:
            self.metrics.record_gpu_samples(samples)
        for event in events:
            if isinstance(event, JobEvent):
                self.metrics.record_job_event(event)
            elif isinstance(event, DemandForecast):
                self._forecasts[(event.cluster, event.service)] = event
            elif isinstance(event, DemandSample):
                self._score(event)

    def _score(self, sample: DemandSample) -> None:
        """Forecast error and band coverage: each forecast step is scored once, by its first sample."""
        key = (sample.cluster, sample.service)
        forecast = self._forecasts.get(key)
        if forecast is None:
            return
        if self._scored.get(key) == (forecast.issued_at, forecast_step_index(forecast, sample.time)):
            return
        step = self.metrics.record_forecast_outcome(forecast, sample)
        if step is not None:
            self._scored[key] = (forecast.issued_at, step)

    def output(self, event: Event) -> None:
        if isinstance(event, ClusterState):
            self.metrics.record_cluster_state(event)
        elif isinstance(event, DemandForecast):
            self.metrics.record_forecast(event)
        elif isinstance(event, ActuationResult):
            self.metrics.record_actuation(event)
        elif isinstance(event, DeadLetter):
            self.metrics.record_dead_letter(event)

    def delivery_failed(self) -> None:
        self.metrics.record_delivery_failure(self.component)

    def step(self, ok: bool) -> None:
        self.metrics.record_step(self.component, ok)

    def lag(self, consumer: Any) -> None:
        """Lag of every assigned partition, from positions and the client's cached watermarks."""
        by_topic: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.position(assignment):
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            by_topic[tp.topic][tp.partition] = (tp.offset, high)
        for topic, positions in by_topic.items():
            self.metrics.record_consumer_lag(self.consumer_group, topic, positions)
