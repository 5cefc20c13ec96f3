"""/healthz follows the loop's progress: 200 while its heartbeat is fresh, 503 with a reason once stale.

A real HTTP server on port 0 (the metrics server every service runs), a clock the test moves.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from ebbtide.services import heartbeat_for
from ebbtide.settings import load_settings
from streams.health import HEALTH_PATH, STREAM_STALE_AFTER_S, Heartbeat
from streams.metrics import EbbtideMetrics
from streams.metrics_http import MetricsEndpoint, serve_metrics
from streams.services.collector import run_collector


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def get(endpoint: MetricsEndpoint, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def served(clock: Clock) -> Iterator[tuple[MetricsEndpoint, Heartbeat, EbbtideMetrics]]:
    metrics = EbbtideMetrics(CollectorRegistry())
    heartbeat = Heartbeat("optimizer", stale_after_s=120.0, clock=clock)
    endpoint = serve_metrics(0, addr="127.0.0.1", registry=metrics.registry, health=heartbeat)
    yield endpoint, heartbeat, metrics
    endpoint.close()


def test_healthz_is_200_while_the_loop_steps_and_503_once_it_stops(served, clock: Clock) -> None:
    endpoint, heartbeat, metrics = served
    clock.now_s += 60.0  # start-up grace: fresh at creation
    assert get(endpoint, HEALTH_PATH)[0] == 200
    clock.now_s += 61.0
    status, body = get(endpoint, HEALTH_PATH)
    assert status == 503
    assert body == "stale: optimizer no loop step since start, 121 s ago (stale after 120 s)\n"
    heartbeat.beat()
    status, body = get(endpoint, HEALTH_PATH)
    assert (status, body) == (200, "ok: optimizer loop stepped 0.0 s ago\n")
    clock.now_s += 300.0  # wedged: the loop stopped beating
    status, body = get(endpoint, HEALTH_PATH)
    assert status == 503
    assert body.splitlines() == ["stale: optimizer last loop step 300 s ago (stale after 120 s)"]
    # /metrics keeps answering on the same server, wedged loop or not
    metrics.record_step("optimizer", ok=True, now_s=5.0)
    status, body = get(endpoint, "/metrics")
    assert status == 200 and 'ebbtide_steps_total{component="optimizer",outcome="ok"} 1.0' in body


def test_without_a_heartbeat_every_path_serves_metrics() -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    endpoint = serve_metrics(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        status, body = get(endpoint, HEALTH_PATH)
        assert status == 200 and "ebbtide_steps_total" in body
    finally:
        endpoint.close()


def test_a_heartbeat_must_have_a_positive_threshold() -> None:
    with pytest.raises(ValueError, match="stale_after_s"):
        Heartbeat("state", stale_after_s=0.0)


def test_stale_thresholds_by_service_and_setting() -> None:
    assert heartbeat_for("optimizer", load_settings()).stale_after_s == STREAM_STALE_AFTER_S == 120.0
    assert heartbeat_for("collector", load_settings()).stale_after_s == 120.0  # 3 x 10 s is less
    slow = load_settings(collector={"interval_s": 60.0})
    assert heartbeat_for("collector", slow).stale_after_s == 180.0
    assert heartbeat_for("state", load_settings(health_stale_after_s=30.0)).stale_after_s == 30.0


def test_the_collector_beats_once_per_round(clock: Clock) -> None:
    heartbeat = Heartbeat("collector", clock=clock)
    stop = threading.Event()
    rounds = []

    def sample(now: datetime) -> list:
        rounds.append(now)
        if len(rounds) == 3:
            stop.set()
        return []

    class Now:
        def now(self) -> datetime:
            return datetime(2026, 1, 1, tzinfo=UTC)

    code = run_collector(
        sample,
        Now(),
        bootstrap="127.0.0.1:1",
        topic_prefix="t.",
        interval_s=0.01,
        stop=stop,
        metrics=EbbtideMetrics(CollectorRegistry()),
        heartbeat=heartbeat,
    )
    assert code == 0 and heartbeat.beats == 3
