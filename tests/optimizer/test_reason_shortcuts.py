"""Shortcuts in the reason text give what the plain computation gives.

``ReasonContext`` finds every service's peak step with one argmax over all services, and makes
the teams' step-0 GPUs only when a held job asks for them. Each is compared here with the plain,
one-at-a-time form it stands for.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from optimizer_cases import NOW, three_pool_cluster

from optimizer.config import PlannerConfig
from optimizer.fallback import greedy_plan
from optimizer.inputs import build_inputs
from optimizer.reasons import ReasonContext

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def test_service_peaks_and_notes_equal_each_services_own_curve() -> None:
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    rounded = greedy_plan(inputs, CONFIG, None)
    rng = np.random.default_rng(3)
    n_services, steps = 3, inputs.svc_demand_steps.shape[1]
    demand = rng.integers(0, 5, size=(n_services, steps)).astype(float)  # small integers: ties
    demand[1, :] = 2.0  # every step equal: the peak is the first
    many = dataclasses.replace(
        inputs,
        service_names=("s0", "s1", "s2"),
        svc_quantile=("p50", "p90", "p99"),
        svc_forecast_model=("m0", "m1", "m2"),
        svc_demand_steps=demand,
    )
    ctx = ReasonContext.build(many, rounded)
    assert ctx.facts.svc_peak_step == [int(demand[s].argmax()) for s in range(n_services)]
    assert ctx.facts.svc_peak_step[1] == 0
    for s in range(n_services):
        curve, peak = demand[s], int(demand[s].argmax())
        at = many.step_start(peak)
        plain = (
            f"{many.service_names[s]} (forecast {many.svc_quantile[s]} = {curve[0]:.1f} GPUs now, "
            f"peak {curve[peak]:.1f} at {at:%H:%M}; {many.svc_forecast_model[s]})"
        )
        assert ctx.facts.service_notes[s] == plain


def test_team_gpus_made_on_demand_equal_the_placed_jobs_gangs() -> None:
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    rounded = greedy_plan(inputs, CONFIG, None)
    ctx = ReasonContext.build(inputs, rounded)
    expected = np.zeros(len(inputs.team_names))
    for j, p in enumerate(rounded.job_pool[:, 0].tolist()):
        if p >= 0:
            expected[inputs.job_team[j]] += inputs.job_gang[j]
    assert expected.sum() > 0
    np.testing.assert_array_equal(ctx.team_used0, expected)
    assert ctx.team_used0 is ctx.team_used0  # made once per decision
