"""The four consumer services built as the wiring builds them, for the in-memory bus tests.

A simulated cluster is the world: its first snapshot seeds the state service, a recording
backend applies each Allocation to it, and :func:`feed` turns each of its steps into the wire
events a real cluster (and its collector) would send.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loop_harness import ManualClock

from forecaster.source import SeasonalNaiveSource
from loop import Policy
from schemas import ActuationResult, Allocation, ClusterState
from schemas.topics import DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from simulator.cluster import Simulator
from streams.fold import ClusterFold
from streams.memory_bus import MemoryBus
from streams.services.actuator import ActuatorProcessor
from streams.services.forecaster import ForecasterProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor
from streams.state_diff import events_between, seed_of


@dataclass
class RecordingBackend:
    """A loop.Actuator that applies each Allocation to the simulator and records what it was handed.

    The simulator answers for every decision under the targets of schemas/targets.py, as the real
    backends do, so the actuator's memory of what is done matches it.
    """

    sim: Simulator
    calls: list[Allocation] = field(default_factory=list)
    handed: list[tuple[str, str, str]] = field(default_factory=list)  # (plan id, target, outcome)

    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]:
        self.calls.append(allocation)
        results = self.sim.apply(allocation)
        self.handed += [(r.plan_id, r.target, r.outcome) for r in results]
        return results


@dataclass
class BusLoop:
    bus: MemoryBus
    clock: ManualClock
    backend: RecordingBackend
    state: StateProcessor
    forecaster: ForecasterProcessor
    optimizer: OptimizerProcessor
    actuator: ActuatorProcessor


def build_loop(sim: Simulator, policy: Policy, horizon_steps: int) -> BusLoop:
    """State, forecaster, optimizer and actuator on one bus, with the simulator as the world."""
    first = sim.snapshot(sim.clock.now())
    clock = ManualClock(first.as_of)
    backend = RecordingBackend(sim)
    state = StateProcessor(
        fold=ClusterFold(seed=seed_of(first), max_history_steps=sim.history_steps),
        clock=clock,
        replan_on_events=False,
    )
    forecaster = ForecasterProcessor(source=SeasonalNaiveSource(horizon_steps=horizon_steps))
    optimizer = OptimizerProcessor(policy=policy, forecast_wait_s=2.0, cluster=first.cluster)
    actuator = ActuatorProcessor(backend=backend, backend_name="simulator")
    bus = MemoryBus([state, forecaster, optimizer, actuator])
    return BusLoop(bus, clock, backend, state, forecaster, optimizer, actuator)


def feed(bus: MemoryBus, previous: ClusterState | None, current: ClusterState) -> int:
    """What the cluster says about the step ending at ``current.as_of``, written to the bus."""
    jobs, demand, gpus = events_between(previous, current)
    written = bus.publish(JOB_EVENTS, jobs) + bus.publish(DEMAND_SAMPLES, demand)
    return written + bus.publish(GPU_SAMPLES, gpus)  # the collector's part
