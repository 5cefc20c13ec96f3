"""Inference demand from Prometheus: the pure part (queries per service, answers into DemandSamples,
refusals with reasons), bad settings named at start, and the whole source against a real Prometheus
scraping a small exporter of known values, its DemandSamples read back from the real broker."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter import serve_exposition
from prometheus_client import CollectorRegistry

from ebbtide.services import run_service
from ebbtide.settings import SettingsError, load_settings
from ebbtide.wiring import build_demand_source
from schemas.telemetry import DemandSample
from schemas.topics import DEMAND_SAMPLES
from streams.inspect import read_records
from streams.metrics import METRICS, EbbtideMetrics
from streams.prometheus_demand import QueryRefused, build_queries, value_of

ROOT = Path(__file__).resolve().parents[2]
GPUS_TEMPLATE = 'sum(demo_gpus_busy{service="{service}"})'
RPS_TEMPLATE = 'sum(demo_requests_per_s{service="{service}"})'


def _vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {}, "value": [1.0, v]} for v in values]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_answers_into_values_or_refusals() -> None:
    assert value_of(_vector("3.75")) == 3.75
    assert value_of({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "2"]}}) == 2.0
    refused = {
        "empty": _vector(),
        "many_series": _vector("1", "2"),
        "not_a_number": _vector("NaN"),
        "query_error": {"status": "error", "errorType": "bad_data", "error": "parse error"},
        "bad_response": {"status": "success", "data": {"resultType": "matrix", "result": []}},
    }
    for reason, answer in refused.items():
        with pytest.raises(QueryRefused) as caught:
            value_of(answer)
        assert caught.value.reason == reason, answer


def test_queries_per_service_from_templates_and_own() -> None:
    queries = build_queries(
        {"chat": {}, "embed": {"gpus_busy": "sum(dcgm_busy)", "requests_per_s": None}},
        {"gpus_busy": GPUS_TEMPLATE, "requests_per_s": RPS_TEMPLATE},
    )
    assert [(q.service, q.gpus_busy, q.requests_per_s) for q in queries] == [
        ("chat", 'sum(demo_gpus_busy{service="chat"})', 'sum(demo_requests_per_s{service="chat"})'),
        ("embed", "sum(dcgm_busy)", 'sum(demo_requests_per_s{service="embed"})'),
    ]
    with pytest.raises(ValueError, match=r"services.chat.requests_per_s: no query"):
        build_queries({"chat": {"gpus_busy": "x"}}, {})


def test_bad_demand_settings_fail_at_start_naming_the_setting() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    with pytest.raises(SettingsError, match=r"demand.prometheus_url \[EBBTIDE_DEMAND__PROMETHEUS_URL\]"):
        build_demand_source(load_settings(), metrics)
    settings = load_settings(demand={"prometheus_url": "http://127.0.0.1:9090", "services": {"chat": {}}})
    with pytest.raises(SettingsError, match=r"demand.services.chat.gpus_busy \[EBBTIDE_DEMAND__SERVICES__"):
        build_demand_source(settings, metrics)
    env = {**os.environ, "EBBTIDE_DEMAND__PROMETHEUS_URL": "not-a-url"}
    command = [sys.executable, "-m", "ebbtide.cli", "run", "demand-source"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "setting demand.prometheus_url" in result.stderr


EXPORTED = """# TYPE demo_gpus_busy gauge
demo_gpus_busy{service="chat",pod="chat-0"} 2.5
demo_gpus_busy{service="chat",pod="chat-1"} 1.25
# TYPE demo_requests_per_s gauge
demo_requests_per_s{service="chat"} 420
"""


@pytest.fixture
def exporter() -> Iterator[int]:
    """An exporter on 127.0.0.1 serving known gauges; yields its port."""

    with serve_exposition(lambda: EXPORTED) as port:
        yield port


def _failures(metrics: EbbtideMetrics, service: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "ebbtide_demand_query_failures_total", {"service": service, "reason": reason}
    )
    return value or 0.0


@pytest.mark.e2e
@pytest.mark.prometheus
@pytest.mark.kafka
@pytest.mark.slow
def test_demand_from_real_prometheus_is_published(
    exporter: int, start_prometheus: Callable[[str], Any], kafka_broker, kafka_topics, topic_prefix
) -> None:
    server = start_prometheus(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: inference\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n"
    )
    server.wait_for("exporter scraped", lambda: server.api("query", query="demo_requests_per_s")["result"])
    kafka_topics(DEMAND_SAMPLES)
    settings = load_settings(
        cluster="c1", metrics_enabled=False,
        kafka={"bootstrap_servers": kafka_broker.bootstrap, "topic_prefix": topic_prefix,
               "create_topics": False},
        demand={
            "prometheus_url": server.url, "interval_s": 0.5, "gpus_busy_query": GPUS_TEMPLATE,
            "requests_per_s_query": RPS_TEMPLATE,
            "services": {"chat": {}, "idle": {}, "broken": {"gpus_busy": "sum(demo_gpus_busy{"}},
        },
    )  # fmt: skip
    stop = threading.Event()  # the service as ``ebbtide run demand-source`` runs it, on the process metrics
    runner = threading.Thread(target=run_service, args=("demand-source", settings, stop))
    unreachable_before = _failures(METRICS, "chat", "unreachable")
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not METRICS.registry.get_sample_value(
            "ebbtide_demand_samples_total", {"cluster": "c1", "service": "chat"}
        ):
            time.sleep(0.2)
        # Prometheus goes away mid-run: counted as unreachable, and no sample (no zero) published.
        server.process.terminate()
        server.process.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _failures(METRICS, "chat", "unreachable") <= unreachable_before:
            time.sleep(0.2)
        time.sleep(1.0)  # two more rounds without Prometheus
    finally:
        stop.set()
        runner.join(timeout=30)
    metrics = METRICS
    assert _failures(metrics, "chat", "unreachable") > unreachable_before
    published = read_records(kafka_broker.bootstrap, DEMAND_SAMPLES, topic_prefix)
    assert published and all(isinstance(s, DemandSample) for s in published)
    assert {s.service for s in published} == {"chat"}  # the empty and the failed never publish a zero
    for sample in published:
        assert sample.cluster == "c1" and math.isclose(sample.gpus_busy, 3.75)
        assert math.isclose(sample.requests_per_s, 420.0)
    assert _failures(metrics, "idle", "empty") >= 1
    assert _failures(metrics, "broken", "query_error") >= 1
    assert _failures(metrics, "chat", "empty") == 0
