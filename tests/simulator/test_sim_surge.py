"""A flash crowd on a pool full of batch that checkpoints, closed loop (planner, forecaster and
simulated autoscaler): with a burst ceiling over batch in a surge (optimizer/surge_burst.py) the
service follows a demand that doubles in half an hour within the step, instead of a step behind,
at the cost of stopping only the batch jobs that lose least."""

from __future__ import annotations

from sim_helpers import tiny_scenario

from forecaster.source import BankForecastSource
from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from simulator.metrics import RunMetrics
from simulator.runner import run_scenario


def _run(config: PlannerConfig) -> RunMetrics:
    scenario = tiny_scenario(
        window_hours=6,
        pools=[{"name": "p", "gpu_type": "A100", "nodes": 6, "gpus_per_node": 8}],
        services=[
            {
                "spec": {"service": "chat", "startup_s": 60, "min_replicas": 2},
                "demand": {
                    "kind": "flat",
                    "peak_gpus": 12,
                    "noise_frac": 0.03,
                    "step_changes": [{"at_hour": 2.0, "factor": 2.0, "ramp_hours": 0.5}],
                },
            }
        ],
        workload={
            "generators": [
                {
                    "arrivals_per_hour": 6,
                    "initial_backlog": 12,
                    "gangs": {1: 0.5, 2: 0.5},
                    "hours_median": 3.0,
                    "checkpoint_frac": 1.0,
                    "classes": [{"name": "standard", "weight": 1, "share": 1}],
                }
            ]
        },
    )

    def factory(sim):  # type: ignore[no-untyped-def]
        return PlannerPolicy(name="ebbtide", config=config), BankForecastSource(horizon_s=86400)

    metrics, _ = run_scenario(scenario, "ebbtide", factory)
    return metrics


def test_a_flash_crowd_is_followed_within_the_step() -> None:
    surge = _run(PlannerConfig())
    behind = _run(PlannerConfig(burst_over_batch=False))
    assert behind.slo_shortfall > 0.004, "a step behind a doubling leaves the service short"
    assert surge.slo_shortfall < 0.5 * behind.slo_shortfall
    assert surge.lost_gpu_hours <= behind.lost_gpu_hours + 3.0, "the jobs stopped are the cheapest"
