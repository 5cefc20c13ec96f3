"""The shared time-slicing curve: grounded default, below-fair shares, monotone penalties."""

from __future__ import annotations

import pytest

from optimizer.interference import DEFAULT_CURVE, InterferenceCurve


def test_default_hits_the_published_four_tenant_figures() -> None:
    curve = DEFAULT_CURVE
    assert curve.p99_inflation(4) == pytest.approx(1.66, abs=0.01)
    assert curve.jitter(1) == pytest.approx(1.02)
    assert curve.jitter(4) == pytest.approx(1.70, abs=0.01)
    for classes in (["low"] * 4, ["medium"] * 4, ["high"] * 4):
        loss = 1.0 - curve.efficiency(4, classes)
        assert 0.014 <= loss <= 0.073, (classes, loss)


def test_each_tenant_gets_less_than_a_fair_share() -> None:
    assert DEFAULT_CURVE.tenant_share(1) == 1.0
    for k in (2, 3, 4, 8):
        assert DEFAULT_CURVE.tenant_share(k) < 1.0 / k


def test_bandwidth_heavy_pairs_lose_more() -> None:
    curve = InterferenceCurve()
    assert curve.efficiency(2, ["high", "high"]) < curve.efficiency(2, ["medium", "medium"])
    assert curve.efficiency(2, ["medium", "medium"]) < curve.efficiency(2, ["low", "low"])


def test_latency_critical_capacity_only_shrinks_beyond_tolerance() -> None:
    assert DEFAULT_CURVE.latency_critical_capacity_factor(2, max_cotenants=2) == 1.0
    assert DEFAULT_CURVE.latency_critical_capacity_factor(4, max_cotenants=1) == pytest.approx(
        1 / 1.66, abs=0.01
    )
