"""The offline LP bound (simulator/bound.py): exact on hand-made windows, and never passed by any
policy on any built-in scenario (quick windows), with PWT counting only the work kept."""

from __future__ import annotations

import pytest
from sim_helpers import job, tiny_scenario

from bench.scenarios_bench import run_bench
from simulator.bound import NoBound, WindowBound
from simulator.cluster import Simulator
from simulator.registry import available_policies
from simulator.runner import run_scenario
from simulator.scenario import builtin_scenarios, load_scenario


def test_bound_of_one_pool_is_capacity_or_work() -> None:
    # 8 GPUs for 2 h, no service: a 4-GPU job of 1 h (weight 3) and a 1-GPU job of 20 h (weight 1)
    sim = Simulator(
        tiny_scenario(
            services=[], workload={"explicit": [job("a", 1, gpus=4, priority_weight=3), job("b", 20)]}
        )
    )
    bound = WindowBound(sim).summary()
    assert bound.pwt == pytest.approx(3 * 4 + 1 * 2)  # a in full; b at most 1 GPU x 2 h
    assert bound.utilization == pytest.approx(6 / 16)


def test_a_closed_loop_has_no_bound_and_the_bench_says_so() -> None:
    """A closed loop draws a job each time one of its own ends, so the arrivals depend on the policy:
    the window's jobs are not known beforehand. The bench reports no bound (it reported 3.7x the
    "bound" for fifo on 300 one-GPU jobs of minutes, counting only the first 300), not a failure."""
    loop = {"generators": [{"population": 4, "gangs": {1: 1}, "hours_median": 0.2, "classes": [_ONE]}]}
    scenario = tiny_scenario(name="loop", workload=loop)
    with pytest.raises(NoBound, match="closed-loop"):
        WindowBound(Simulator(scenario))
    policies = available_policies()
    result = run_bench([scenario], {"fifo": policies["fifo"]}, quick=True)
    assert result.failures == {} and "closed-loop" in result.no_bound["loop"]
    assert "loop" not in result.bounds and result.results["loop"]["fifo"].pwt_to_bound is None
    assert result.results["loop"]["fifo"].pwt > 0


_ONE = {"name": "s", "weight": 1, "share": 1}


def test_serving_inference_lowers_the_pwt_ceiling_not_the_any_one() -> None:
    # the flat service wants 2 of 8 GPUs; a 1-h job of 8 GPUs and one 8-GPU job of 10 h
    jobs = [job("a", 1, gpus=8), job("b", 10, gpus=8)]
    window = WindowBound(Simulator(tiny_scenario(workload={"explicit": jobs})))
    assert window.pwt_at(1.0) == pytest.approx(16.0)
    assert window.pwt_at(0.0) == pytest.approx(16.0 - 2 * 2, rel=1e-3)
    assert window.pwt_at(0.5) == pytest.approx(16.0 - 2, rel=1e-3)
    assert window.utilization() == pytest.approx(1.0)


def test_demand_beyond_the_gpus_caps_the_service_floor_at_what_can_be_served() -> None:
    # the service wants 12 GPUs of an 8-GPU pool: full service is impossible for any policy, and
    # the bound at shortfall 0 is the one serving all 8 (it was an Infeasible LP: bursty, seed 304)
    services = [
        {
            "spec": {"service": "svc", "startup_s": 60},
            "demand": {"kind": "flat", "peak_gpus": 12, "noise_frac": 0},
        }
    ]
    window = WindowBound(
        Simulator(tiny_scenario(services=services, workload={"explicit": [job("a", 2, gpus=4)]}))
    )
    assert window.servable_gpu_h == pytest.approx(8 * 2, rel=1e-3)
    assert window.pwt_at(0.0) == pytest.approx(0.0, abs=1e-6)
    assert window.pwt_at(1.0) == pytest.approx(8.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_no_policy_passes_the_bound(name: str) -> None:
    scenario = load_scenario(builtin_scenarios()[name])
    window = WindowBound(Simulator(scenario, quick=True))
    ceiling_util = window.utilization()
    for policy, factory in available_policies().items():
        m, _ = run_scenario(scenario, policy, factory, quick=True)
        assert m.pwt <= window.pwt_at(m.slo_shortfall) * (1 + 1e-7) + 1e-6, (policy, m.pwt)
        assert m.pwt <= window.pwt_at(1.0) * (1 + 1e-7) + 1e-6, policy
        assert m.utilization <= ceiling_util + 1e-7, (policy, m.utilization, ceiling_util)
