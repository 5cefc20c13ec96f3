"""The SLO shortfall split by cause (bench/slo_breakdown.py): the parts are the simulator's own
shortfall, nothing added or lost, for a baseline and for the planner."""

from __future__ import annotations

import pytest

from bench.slo_breakdown import CAUSES, slo_breakdown
from simulator.registry import available_policies
from simulator.runner import run_scenario
from simulator.scenario import builtin_scenarios, load_scenario


@pytest.mark.parametrize("policy", ["kueue-hpa", "ebbtide-naive"])
def test_the_parts_sum_to_the_simulated_shortfall(policy: str) -> None:
    scenario = load_scenario(builtin_scenarios()["bursty"])
    factory = available_policies()[policy]
    split = slo_breakdown(scenario, factory, quick=True)
    metrics, _ = run_scenario(scenario, policy, factory, quick=True)
    assert metrics.slo_shortfall > 0  # bursts no forecast sees: something to split
    assert split.shortfall == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)
    shares = split.shares()
    assert set(shares) == set(CAUSES) and all(v >= 0 for v in shares.values())
    assert sum(shares.values()) == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)
    by_service = sum(v for parts in split.by_service.values() for v in parts.values())
    assert by_service / split.demand_gpu_s == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)
