"""The control loop's one step, as the simulator runs it.

Each step: read the clock, take a state snapshot, get forecasts, let the policy decide, hand the
decision to the sink and the Allocation to the actuator. Only the clock, the sources and the
actuator are injected; there is no ``if simulate:`` anywhere.

In production the same parts run split across processes: the stream services (streams/services/)
each hold one stage of this step (state, forecaster, optimizer, actuator) with Kafka topics
between them, and call the same ports (``ForecastSource``, ``Policy``, ``Actuator``) with the same
records. What is shared is the ports and the records, not this function.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from loop.decision import Decision
from loop.ports import Actuator, Clock, DecisionSink, ForecastSource, Policy, StateSource
from schemas import ActuationResult, DemandForecast


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
