"""The four consumer services built as the wiring builds them, for the in-memory bus tests.

A simulated cluster is the world: its first snapshot seeds the state service, a recording
backend applies each Allocation to it, and :func:`feed` turns each of its steps into the wire
events a real cluster (and its collector) would send.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from forecaster.source import SeasonalNaiveSource
from loop import Policy
from schemas import ActuationResult, Allocation, ClusterState
from schemas.topics import DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from simulator.cluster import Simulator
from streams.fold import ClusterFold
from streams.memory_bus import MemoryBus
from streams.services.actuator import ActuatorProcessor, job_target, service_target
from streams.services.forecaster import ForecasterProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor
from streams.state_diff import events_between, seed_of


class StepClock:
    """The state service's clock: the test moves it to each step boundary."""

    def __init__(self, when: datetime) -> None:
        self.when = when

    def now(self) -> datetime:
        return self.when


@dataclass
class RecordingBackend:
    """A loop.Actuator that applies each Allocation to the simulator and records what it was handed.

    It answers for every decision under the actuator's target names (``job/<id>``,
    ``service/<name>@<pool>``), as a real backend does: the simulator itself reports only the
    jobs it changed, by bare job id, which the actuator's memory of what is done cannot match.
    """

    sim: Simulator
    calls: list[Allocation] = field(default_factory=list)
    handed: list[tuple[str, str, str]] = field(default_factory=list)  # (plan id, target, outcome)

    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]:
        self.calls.append(allocation)
        by_job = {r.target: r for r in self.sim.apply(allocation)}
        results = [self._result(allocation, service_target(s), None) for s in allocation.services]
        results += [self._result(allocation, job_target(j), by_job.get(j.job_id)) for j in allocation.jobs]
        self.handed += [(r.plan_id, r.target, r.outcome) for r in results]
        return results

    def _result(self, allocation: Allocation, target: str, sim: ActuationResult | None) -> ActuationResult:
        """The simulator's answer for ``target`` renamed, or ``applied`` where it had nothing to say."""
        if sim is not None:
            return sim.model_copy(update={"target": target})
        return ActuationResult(
            cluster=allocation.cluster,
            backend="simulator",
            plan_id=allocation.plan_id,
            action="apply",
            target=target,
            outcome="applied",
            time=self.sim.clock.now(),
        )


@dataclass
class BusLoop:
    bus: MemoryBus
    clock: StepClock
    backend: RecordingBackend
    state: StateProcessor
    forecaster: ForecasterProcessor
    optimizer: OptimizerProcessor
    actuator: ActuatorProcessor


def build_loop(sim: Simulator, policy: Policy, horizon_steps: int) -> BusLoop:
    """State, forecaster, optimizer and actuator on one bus, with the simulator as the world."""
    first = sim.snapshot(sim.clock.now())
    clock = StepClock(first.as_of)
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
