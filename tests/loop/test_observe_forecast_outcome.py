"""The state service's metrics bridge scores forecasts against the demand that came true."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from schemas import DemandForecast, DemandSample
from streams.metrics import EbbtideMetrics
from streams.services.observe import ServiceMetrics

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _forecast() -> DemandForecast:
    return DemandForecast(
        cluster="c1",
        service="chat",
        issued_at=T0,
        step_s=900,
        horizon_steps=4,
        quantiles={"p50": [4.0] * 4, "p90": [6.0] * 4, "p99": [8.0] * 4},
        model="test",
    )


def _sample(minutes: float, gpus: float) -> DemandSample:
    return DemandSample(
        cluster="c1", service="chat", time=T0 + timedelta(minutes=minutes), requests_per_s=1.0, gpus_busy=gpus
    )


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_each_forecast_step_is_scored_once_with_its_coverage() -> None:
    registry = CollectorRegistry()
    bridge = ServiceMetrics(EbbtideMetrics(registry), component="state", consumer_group="g")
    bridge.inputs([_sample(1, 3.0)])  # no forecast yet: nothing to score
    assert _value(registry, "ebbtide_forecast_evaluations_total", cluster="c1", service="chat") == 0
    bridge.inputs([_forecast(), _sample(1, 7.0), _sample(5, 7.5), _sample(16, 5.0)])
    # two steps scored (minute 1 and minute 16); the second sample of step 0 is not counted again
    assert _value(registry, "ebbtide_forecast_evaluations_total", cluster="c1", service="chat") == 2
    name = "ebbtide_forecast_quantile_covered_total"
    levels = ("p50", "p90", "p99")
    covered = {q: _value(registry, name, cluster="c1", service="chat", quantile=q) for q in levels}
    assert covered == {"p50": 0.0, "p90": 1.0, "p99": 2.0}
