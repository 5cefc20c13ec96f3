"""The ports of the control loop: what each part of it must offer, and nothing more.

``Policy`` is implemented by the planner (optimizer/) and the baselines (simulator/policies/);
``StateSource`` and ``Actuator`` by the simulated cluster and by the backends in actuators/;
``ForecastSource`` by forecaster/ and the simulator's oracle; ``Clock`` by a wall clock or the
simulator's; ``DecisionSink`` by whatever keeps decisions (nothing, in the simulator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from loop.decision import Decision
from schemas import ActuationResult, Allocation, ClusterState, DemandForecast


class Clock(Protocol):
    def now(self) -> datetime: ...


class StateSource(Protocol):
    def snapshot(self, now: datetime) -> ClusterState: ...


class ForecastSource(Protocol):
    def forecasts(self, state: ClusterState, now: datetime) -> Mapping[str, DemandForecast]: ...


@runtime_checkable
class Policy(Protocol):
    """Decides one step. ``name`` labels its output; it is never used to choose behaviour.

    Settings go in the constructor. Pure: no I/O and no clock reads (``now`` is an argument).
    """

    name: str

    def decide(
        self,
        state: ClusterState,
        forecasts: Mapping[str, DemandForecast],
        now: datetime,
    ) -> Decision: ...


class Actuator(Protocol):
    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]: ...


class DecisionSink(Protocol):
    def publish(self, decision: Decision, forecasts: Mapping[str, DemandForecast]) -> None: ...
