"""The demo's actuator backend (streams/services/demo_driver.py) holds a bounded memory of what it
applied: a soak of days through it holds no more Allocations than a run of a few steps.

Before the bound, every step's Allocation stayed in ``applied`` (and its results in another
dict): at 500 jobs some 130 MiB a simulated day in ``ebbtide bench-soak``, the growth it measured.
"""

from __future__ import annotations

from datetime import timedelta

from test_memory_bus import _scenario

from simulator.cluster import Simulator
from simulator.policies.fifo import FifoPolicy
from streams.services.demo_driver import KEEP_APPLIED_STEPS, SimulatorBackend


def test_the_demo_backend_remembers_only_the_latest_steps_allocations() -> None:
    sim = Simulator(_scenario(), quick=True)
    backend = SimulatorBackend(sim, sim.scenario.cluster)
    policy = FifoPolicy()
    steps = 3 * KEEP_APPLIED_STEPS
    for _ in range(steps):
        now = sim.clock.now()
        decision = policy.decide(sim.snapshot(now), {}, now)
        results = backend.apply(decision.allocation)
        assert results and all(r.outcome != "skipped" for r in results)
        assert backend.allocation_for(now) == decision.allocation  # the driver's wait finds it
        sim.advance()
    assert len(backend.applied) == KEEP_APPLIED_STEPS  # not one per step
    oldest_kept = sim.clock.now() - timedelta(seconds=KEEP_APPLIED_STEPS * sim.scenario.step_s)
    assert min(backend.applied) == oldest_kept  # the latest steps, the oldest forgotten
