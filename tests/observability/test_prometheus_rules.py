"""The alert rules pass promtool's own checks and unit tests (deploy/prometheus/rules_test.yml)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", "ebbtide-rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules(promtool: str) -> None:
    result = run(promtool, "test", "rules", "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_fails_a_wrong_expectation(promtool: str, tmp_path: Path) -> None:
    """The unit tests can fail: the same rules with an alert expected too early are rejected."""
    wrong = (
        (PROMETHEUS_DIR / "rules_test.yml")
        .read_text()
        .replace("      - eval_time: 82m\n", "      - eval_time: 79m\n", 1)
    )
    assert "eval_time: 79m" in wrong
    test_file = tmp_path / "rules_test.yml"
    rules = PROMETHEUS_DIR / "ebbtide-rules.yml"
    test_file.write_text(wrong.replace("  - ebbtide-rules.yml", f"  - {rules}"))
    result = run(promtool, "test", "rules", str(test_file))
    assert result.returncode != 0
    assert "EbbtideNoCommittedStep" in result.stdout + result.stderr


def test_local_scrape_config_is_valid(promtool: str) -> None:
    """deploy/prometheus/prometheus.yml (the compose stack's Prometheus) and the rules it loads."""
    result = run(promtool, "check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
