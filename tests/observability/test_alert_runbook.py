"""Every alert waits (`for:`), links its section of deploy/RUNBOOK.md (`runbook_url`), and the
decision-latency and fallback alerts follow what the optimizer does: the decision budget, the
fallback counters."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.metrics_http import ebbtide_metric_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "ebbtide-rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"
RUNBOOK = ROOT / "deploy" / "RUNBOOK.md"
VALUES = ROOT / "deploy" / "helm" / "ebbtide" / "values.yaml"
RUNBOOK_URL = "https://github.com/ebbtide/ebbtide/blob/main/deploy/RUNBOOK.md"
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d))+$")


def alerts() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def runbook_sections() -> dict[str, str]:
    """Anchor -> the text of its section (from its `<a id>` to the next one)."""
    text = RUNBOOK.read_text()
    parts = re.split(r'^<a id="([a-z0-9-]+)"></a>\n', text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_alert_waits_and_links_its_runbook_section() -> None:
    sections = runbook_sections()
    found = alerts()
    assert len(found) >= 12
    for name, rule in found.items():
        assert DURATION.match(str(rule.get("for", ""))), f"{name}: no for:"
        anchor = name.lower()
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_URL}#{anchor}", name
        assert anchor in sections, f'{name}: no section <a id="{anchor}"> in deploy/RUNBOOK.md'
        section = sections[anchor]
        assert section.startswith(f"## {name}\n"), f"{anchor}: heading is not ## {name}"
        for part in ("**What it means.**", "**Check.**", "**Do.**"):
            assert part in section, f"{name}: runbook section has no {part}"
    assert set(sections) == {name.lower() for name in found}, "runbook sections without an alert"


def test_the_chart_default_runbook_base_is_the_plain_rules_url() -> None:
    values = yaml.safe_load(VALUES.read_text())
    assert values["monitoring"]["runbookBaseUrl"] == RUNBOOK_URL


def test_the_runbook_names_only_exported_metrics() -> None:
    named = set(re.findall(r"\bebbtide_[a-z0-9_]+", RUNBOOK.read_text()))
    assert named, "the runbook quotes no metric"
    assert named <= ebbtide_metric_names(), sorted(named - ebbtide_metric_names())


def test_the_runbook_names_only_existing_ebbtide_commands() -> None:
    """Every `ebbtide <command> [<subcommand>]` the runbook quotes answers `--help` (the real CLI)."""
    pytest.importorskip("ebbtide.cli")
    quoted = set(re.findall(r"`ebbtide ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", RUNBOOK.read_text()))
    assert len(quoted) >= 4
    for command, sub in sorted(quoted):
        words = [command, sub] if sub else [command]
        result = subprocess.run(
            [sys.executable, "-c", "from ebbtide.cli import main; main()", *words, "--help"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0 and "Usage:" in result.stdout, (words, result.stdout + result.stderr)


def test_decision_latency_fires_past_the_decision_budget() -> None:
    """The threshold is the optimizer's default decision budget: a decision past it is published as
    a flagged fallback, so p99 above it means decisions routinely degrade."""
    settings = pytest.importorskip("ebbtide.settings")
    budget = settings.OptimizerSettings().decision_budget_s
    rule = alerts()["EbbtideDecisionLatencyHigh"]
    quantile = r"histogram_quantile\(0\.99,.*ebbtide_decision_duration_seconds_bucket.*\)"
    match = re.search(quantile + r"\s*>\s*([0-9.]+)$", rule["expr"], re.DOTALL)
    assert match, rule["expr"]
    assert float(match.group(1)) == budget
    assert f"{budget} s" in rule["annotations"]["summary"]
    assert "budget" in RULES.read_text().split("- alert: EbbtideDecisionLatencyHigh")[0].rsplit("\n\n", 1)[-1]


def test_fallback_alerts_page_on_a_run_and_ticket_on_a_share() -> None:
    found = alerts()
    in_a_row, share = found["EbbtideFallbacksInARow"], found["EbbtideFallbackShareHigh"]
    assert in_a_row["labels"]["severity"] == "page" and share["labels"]["severity"] == "ticket"
    assert "ebbtide_consecutive_fallbacks" in in_a_row["expr"]
    assert "ebbtide_fallbacks_total" in share["expr"] and "ebbtide_decisions_total" in share["expr"]


def test_promtool_tests_cover_every_alert_firing_and_silent() -> None:
    """rules_test.yml has, for every alert, a case where it fires and one where it stays silent."""
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fires == set(alerts()), f"never seen firing: {set(alerts()) - fires}"
    assert silent == set(alerts()), f"never checked silent: {set(alerts()) - silent}"
