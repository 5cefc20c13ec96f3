"""The dashboard (deploy/grafana/) and the alert rules (deploy/prometheus/) use only exported metrics.

Every PromQL expression is parsed by a real PromQL parser; the metric names it selects must be
series a scrape of ebbtide's metrics shows (counters' _total, histograms' _bucket/_sum/_count
included), or series Prometheus makes itself (``up``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.metrics_http import ebbtide_metric_names

promql_names = pytest.importorskip(
    "promql_names", reason="promql-parser missing: run scripts/install_deploy_tools.sh"
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "ebbtide-loop.json"
RULES = ROOT / "deploy" / "prometheus" / "ebbtide-rules.yml"


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def unknown_names(expr: str, known: set[str]) -> set[str]:
    return promql_names.metric_names(expr) - known - promql_names.PROMETHEUS_SERIES


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return ebbtide_metric_names()


def test_the_check_catches_a_misspelt_metric(exported: set[str]) -> None:
    expr = 'sum(rate(ebbtide_decisions_totl{cluster="$cluster"}[$__rate_interval])) / ebbtide_pool_gpus'
    assert unknown_names(expr, exported) == {"ebbtide_decisions_totl"}
    assert promql_names.metric_names('{__name__="ebbtide_pool_gpus"}') == {"ebbtide_pool_gpus"}
    with pytest.raises(ValueError):
        promql_names.metric_names("sum(rate(ebbtide_decisions_total[5m])")


def test_every_panel_query_names_an_exported_metric(exported: set[str]) -> None:
    checked = 0
    problems = []
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            try:
                unknown = unknown_names(target["expr"], exported)
            except ValueError as exc:
                problems.append(f"panel {panel['title']!r} {target['refId']}: does not parse: {exc}")
                continue
            if unknown:
                problems.append(
                    f"panel {panel['title']!r} {target['refId']}: not exported: {sorted(unknown)}"
                )
            checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 20


def test_template_variables_query_exported_metrics(exported: set[str]) -> None:
    queries = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    assert {v["name"] for v in queries} == {"cluster", "service"}
    for variable in queries:
        names = promql_names.template_query_names(variable["query"]["query"])
        assert names and names <= exported, f"${variable['name']}: {names - exported}"


def test_every_alert_rule_uses_exported_metrics(exported: set[str]) -> None:
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert len(rules) >= 10
    for rule in rules:
        unknown = unknown_names(rule["expr"], exported)
        assert not unknown, f"{rule['alert']}: not exported: {sorted(unknown)}"
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_dashboard_shows_the_loop_at_a_glance() -> None:
    """The panels the loop's operators look at first are there and query what their titles say."""
    panels = list(all_panels(dashboard()["panels"]))
    by_title = {p["title"]: p for p in panels}

    def names(title: str) -> set[str]:
        return set().union(*(promql_names.metric_names(t["expr"]) for t in by_title[title]["targets"]))

    assert {
        "ebbtide_service_demand_gpus",
        "ebbtide_forecast_demand_gpus",
        "ebbtide_service_capacity_gpus",
    } <= names("Demand vs forecast band vs capacity")
    batch = by_title["Batch GPUs admitted vs waiting, by priority"]["targets"][0]["expr"]
    assert "priority_class" in batch and "running|queued" in batch
    assert names("GPU utilization by pool") == {"ebbtide_gpu_utilization_ratio"}
    assert "ebbtide_decision_duration_seconds_bucket" in names("Decision and solver latency")
    assert any(p["type"] == "alertlist" for p in panels)


def test_the_next_24_hours_sit_beside_what_was_allocated() -> None:
    """The plan's hours ahead, per pool, next to the allocated-capacity panels; queue wait by priority."""
    panels = list(all_panels(dashboard()["panels"]))
    titles = [p["title"] for p in panels]
    plan = [p for p in panels if p["title"].startswith("Next 24 h")]
    assert {promql_names.metric_names(t["expr"]).pop() for p in plan for t in p["targets"]} == {
        "ebbtide_plan_service_gpus",
        "ebbtide_plan_batch_gpus",
    }
    for panel in plan:
        (target,) = panel["targets"]
        assert "by (hours_ahead, pool)" in target["expr"] and target["instant"], panel["title"]
        grouping = [t for t in panel["transformations"] if t["id"] == "groupingToMatrix"]
        assert grouping[0]["options"]["rowField"] == "hours_ahead", panel["title"]
    allocated = titles.index("Allocated GPUs by pool, and inference headroom lent to batch")
    assert titles.index(plan[0]["title"]) - allocated == 2  # the row below it, the shortfall in between
    waits = [p for p in panels if "queue wait" in p["title"]]
    assert "ebbtide_job_queue_wait_seconds_bucket" in waits[0]["targets"][1]["expr"]


def test_dashboard_structure_imports_cleanly() -> None:
    dash = dashboard()
    panels = list(all_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] and dash["schemaVersion"] >= 36
    variables = {v["name"] for v in dash["templating"]["list"]}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            for used in re.findall(r"\$(\w+)", target["expr"]):
                assert used.startswith("__") or used in variables, f"{panel['title']}: ${used} undefined"
    rows = [p for p in panels if p["type"] == "row"]
    assert len(rows) >= 4
