"""Latency-critical services are never time-sliced beyond their ``max_cotenants``, in any block of
the plan: in a pool that time-slices, such a service's GPUs are whole (no other service's replica
shares them) and hold at most ``max_cotenants`` of its own replicas each, while a tolerant service
beside it may share. Checked over every step of the horizon, on a hand-made row and on random
demand curves."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_table import Job, Pool, Scenario, Service, build_forecasts, build_state, run_scenario

from loop import Decision
from optimizer.planner import PlannerPolicy
from schemas import ClusterState

SLICED = Pool("t4", 16, gpu_type="t4", max_share=4, gpus_per_node=4)


def critical_and_tolerant(critical: tuple[float, ...], tolerant: tuple[float, ...]) -> Scenario:
    return Scenario(
        "critical-beside-tolerant-in-a-time-sliced-pool",
        pools=(SLICED,),
        services=(
            Service("chat", replicas={"t4": 3}, forecast=critical, latency_critical=True, max_cotenants=2),
            Service("embed", replicas={"t4": 2}, forecast=tolerant, max_cotenants=4, bandwidth_class="low"),
        ),
        jobs=(Job("batch", 2, hours=8.0), Job("batch-2", 4, hours=3.0)),
    )


def check_cotenants(state: ClusterState, decision: Decision) -> int:
    """Every step: a latency-critical service's capacity in a pool is whole GPUs holding at most
    max_cotenants of its replicas each. Returns the steps that hold some of its capacity."""
    specs = {s.spec.service: s.spec for s in state.services}
    steps_with_critical = 0
    for step in decision.plan.steps_expanded():
        parts = [c for c in step.services if specs[c.service].latency_critical and c.replicas]
        steps_with_critical += bool(parts)
        for c in parts:
            spec = specs[c.service]
            assert abs(c.gpus - round(c.gpus)) < 1e-9, (step.index, c)
            assert c.gpus * spec.max_cotenants >= c.replicas * spec.gpus_per_replica - 1e-9, (step.index, c)
    for d in decision.allocation.services:
        if specs[d.service].latency_critical and d.replicas:
            assert abs(d.gpus - round(d.gpus)) < 1e-9, d
    return steps_with_critical


def test_critical_service_has_whole_gpus_in_every_step_tolerant_one_shares() -> None:
    critical = (2.5, 3.5, 1.5, 4.5) * 24  # GPUs at p50 per step: halves that would share a GPU
    row = critical_and_tolerant(critical, (1.5, 2.5) * 48)
    decision = run_scenario(row)
    assert check_cotenants(build_state(row), decision) == len(decision.plan.steps_expanded())
    sliced = [
        c for s in decision.plan.steps_expanded() for c in s.services if c.service == "embed" and c.gpus % 1
    ]
    assert sliced, "the tolerant service never time-slices: the row does not test the difference"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.floats(0.0, 9.0), min_size=8, max_size=8),
    st.lists(st.floats(0.0, 9.0), min_size=8, max_size=8),
)
def test_no_plan_time_slices_a_critical_service_beyond_its_limit(
    critical: list[float], tolerant: list[float]
) -> None:
    row = critical_and_tolerant(tuple(critical) * 12, tuple(tolerant) * 12)
    state = build_state(row)
    decision = PlannerPolicy().decide(state, build_forecasts(row), state.as_of)
    check_cotenants(state, decision)
    assert all(math.isfinite(c.gpus) for s in decision.plan.steps_expanded() for c in s.services)
