"""A real Prometheus scrapes a running ebbtide metrics endpoint; the values recorded through the
helpers come back through Prometheus's HTTP API, and the real alert rules evaluate on them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from loop import Decision
from schemas import Allocation, HorizonPlan, PlanBlock, ServiceDecision, SolverInfo
from streams.metrics import EbbtideMetrics
from streams.metrics_http import serve_metrics

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "ebbtide-rules.yml"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def fallback_decision() -> Decision:
    reason = "HiGHS hit the 10 s time limit"
    plan = HorizonPlan(
        cluster="c1", plan_id="p1", policy="ebbtide", issued_at=T0, step_s=900, horizon_steps=1,
        blocks=[PlanBlock(first_step=0, steps=1)], objective={"work_gpu_s": 3600.0},
        solver=SolverInfo(solver="highs", status="time_limit", time_ms=10_000.0, fallback=True,
                          fallback_reason=reason),
        inputs_digest="d1",
    )  # fmt: skip
    alloc = Allocation(
        cluster="c1", plan_id="p1", policy="ebbtide", issued_at=T0, step_s=900,
        valid_until=T0 + timedelta(seconds=900),
        services=[ServiceDecision(service="chat", pool="a100", replicas=6, gpus=6.0, reason="p90 = 5.2")],
        fallback=True, fallback_reason=reason,
    )  # fmt: skip
    return Decision(plan=plan, allocation=alloc)


def test_prometheus_scrapes_ebbtide_metrics_and_evaluates_the_rules(
    start_prometheus: Callable[[str], Any],
) -> None:
    metrics = EbbtideMetrics(CollectorRegistry())
    for _ in range(3):
        metrics.record_decision(fallback_decision(), decision_s=10.4)
    metrics.record_consumer_lag("ebbtide-optimizer", "ebbtide.forecasts", {0: (40, 57), 1: (10, 10)})
    endpoint = serve_metrics(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        server = start_prometheus(
            f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: ebbtide-optimizer
    static_configs:
      - targets: ["127.0.0.1:{endpoint.port}"]
"""
        )
        result = server.wait_for(
            "ebbtide_consecutive_fallbacks in Prometheus",
            lambda: server.api("query", query='ebbtide_consecutive_fallbacks{cluster="c1"}')["result"],
        )
        assert result[0]["metric"]["job"] == "ebbtide-optimizer"
        assert float(result[0]["value"][1]) == 3.0

        lag = server.api("query", query="sum by (topic) (ebbtide_consumer_lag_messages)")["result"]
        assert [(r["metric"]["topic"], float(r["value"][1])) for r in lag] == [("ebbtide.forecasts", 17.0)]
        fallbacks = server.api("query", query="sum(ebbtide_fallbacks_total)")["result"]
        assert float(fallbacks[0]["value"][1]) == 3.0
        slow = server.api("query", query='ebbtide_decision_duration_seconds_bucket{le="10.0"}')["result"]
        assert float(slow[0]["value"][1]) == 0.0  # 10.4 s is above the 10 s bucket

        def active() -> list[dict[str, object]]:
            """EbbtideFallbacksInARow pending (its `for: 2m` has not elapsed yet) or firing."""
            alerts = server.api("alerts")["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "EbbtideFallbacksInARow"
                and a["state"] in {"pending", "firing"}
            ]

        alert = server.wait_for("EbbtideFallbacksInARow active", active)[0]
        assert alert["labels"]["cluster"] == "c1" and alert["labels"]["severity"] == "page"
        assert alert["annotations"]["runbook_url"].endswith("/RUNBOOK.md#ebbtidefallbacksinarow")
    finally:
        endpoint.close()
