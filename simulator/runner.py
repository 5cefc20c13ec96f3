"""Run one policy through one scenario with the production ControlLoop.

The simulator is the loop's clock, state source and actuator; the policy and its forecast
source come from the registry. Between loop steps the simulator integrates the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loop import ControlLoop, StepRecord
from simulator.cluster import Simulator
from simulator.metrics import RunMetrics, compute_metrics
from simulator.registry import PolicyFactory
from simulator.scenario import Scenario


def run_scenario(
    scenario: Scenario,
    policy_name: str,
    factory: PolicyFactory,
    *,
    quick: bool = False,
    seed: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
    on_record: Callable[[StepRecord], None] | None = None,
    simulator: type[Simulator] = Simulator,
) -> tuple[RunMetrics, Simulator]:
    """``simulator``: the class to run (a subclass that records more, as bench/slo_breakdown.py's)."""
    t0 = time.perf_counter()
    sim = simulator(scenario, quick=quick, seed=seed)
    policy, forecast_source = factory(sim)
    loop = ControlLoop(
        clock=sim.clock, state_source=sim, forecast_source=forecast_source, policy=policy, actuator=sim
    )
    decision_ms: list[float] = []
    for i in range(sim.steps):
        record = loop.step()
        decision_ms.append(record.decision_ms)
        if on_record is not None:
            on_record(record)
        sim.advance()
        if on_step is not None:
            on_step(i + 1, sim.steps)
    return compute_metrics(sim, policy_name, decision_ms, time.perf_counter() - t0), sim
