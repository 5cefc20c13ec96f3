"""The control loop's one step, shared by production and the simulator.

Each step: read the clock, take a state snapshot, get forecasts, let the policy decide, hand
the decision to the sink (a Kafka publisher in production, nothing in the simulator) and the
Allocation to the actuator. Only the clock, the sources and the actuator are injected; there is
no ``if simulate:`` anywhere. The planner never waits on an actuator beyond handing it the step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from optimizer.policy import Decision, Policy
from schemas import ActuationResult, Allocation, ClusterState, DemandForecast


class Clock(Protocol):
    def now(self) -> datetime: ...


class StateSource(Protocol):
    def snapshot(self, now: datetime) -> ClusterState: ...


class ForecastSource(Protocol):
    def forecasts(self, state: ClusterState, now: datetime) -> Mapping[str, DemandForecast]: ...


class Actuator(Protocol):
    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]: ...


class DecisionSink(Protocol):
    def publish(self, decision: Decision, forecasts: Mapping[str, DemandForecast]) -> None: ...


class NullSink:
    """A sink that keeps nothing (the simulator records steps itself)."""

    def publish(self, decision: Decision, forecasts: Mapping[str, DemandForecast]) -> None:
        return None


@dataclass(frozen=True)
class StepRecord:
    now: datetime
    decision: Decision
    forecasts: Mapping[str, DemandForecast]
    results: Sequence[ActuationResult]
    decision_ms: float
    forecast_ms: float


@dataclass
class ControlLoop:
    clock: Clock
    state_source: StateSource
    forecast_source: ForecastSource
    policy: Policy
    actuator: Actuator
    sink: DecisionSink = field(default_factory=NullSink)

    def step(self) -> StepRecord:
        now = self.clock.now()
        state = self.state_source.snapshot(now)
        t0 = time.perf_counter()
        forecasts = self.forecast_source.forecasts(state, now)
        t1 = time.perf_counter()
        decision = self.policy.decide(state, forecasts, now)
        t2 = time.perf_counter()
        self.sink.publish(decision, forecasts)
        results = self.actuator.apply(decision.allocation)
        return StepRecord(
            now=now,
            decision=decision,
            forecasts=forecasts,
            results=results,
            decision_ms=(t2 - t1) * 1000.0,
            forecast_ms=(t1 - t0) * 1000.0,
        )
