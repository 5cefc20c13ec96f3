"""The optimizer service: re-plans on each ClusterState and publishes the HorizonPlan and Allocation.

A thin adapter over a :class:`loop.Policy`. A snapshot at a step boundary waits (up
to ``forecast_wait_s``) for the forecasts issued from it, so a replay pairs the same inputs and
the policy's deterministic plan id comes out the same; a snapshot between steps (a significant
event: high-priority job, lost capacity, a forecast miss) is planned at once with the latest
forecasts, and again when the forecaster answers it with a forecast redone on drift. On Apache
Kafka the runtime makes consume-plan-publish one transaction; elsewhere it is at-least-once and
the actuator ignores a plan id it has already applied.

With a ``clock``, a ClusterState or DemandForecast dated more than ``max_state_skew_s`` past it is
dead-lettered (``on_event`` raises ValueError) rather than taken as the latest: otherwise every
later state, dated before it, would be dropped as a replay of a state already planned past, and a
forecast from the future would stand for its service until the next step's. The forecasts kept are
those of the services the latest state has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from loop import Clock, Decision, Policy
from schemas import ClusterState, DemandForecast
from schemas.base import Event
from schemas.topics import ALLOCATIONS, CLUSTER_STATE, FORECASTS, PLANS, Topic
from streams.fold import floor_to_step
from streams.services.runtime import Outgoing

DecisionHook = Callable[[Decision, ClusterState, float], None]


@dataclass
class _Pending:
    state: ClusterState
    since_s: float


@dataclass
class OptimizerProcessor:
    policy: Policy
    forecast_wait_s: float = 2.0
    monotonic: Callable[[], float] = time.monotonic
    on_decision: DecisionHook | None = None
    cluster: str | None = None
    clock: Clock | None = None
    max_state_skew_s: float = 86_400.0
    name: str = "optimizer"
    inputs: tuple[Topic, ...] = (CLUSTER_STATE, FORECASTS)
    forecasts: dict[str, dict[str, DemandForecast]] = field(default_factory=dict)
    waiting: dict[str, _Pending] = field(default_factory=dict)
    decided_as_of: dict[str, datetime] = field(default_factory=dict)
    last_state: dict[str, ClusterState] = field(default_factory=dict)
    decisions: int = 0
    decide_ms: list[float] = field(default_factory=list)

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        if self.cluster is not None and getattr(event, "cluster", None) != self.cluster:
            return ()  # another cluster's: its own optimizer plans it
        if isinstance(event, DemandForecast):
            self._check_time(event.issued_at, "issued_at")
            self.forecasts.setdefault(event.cluster, {})[event.service] = event
            last = self.last_state.get(event.cluster)
            between_steps = floor_to_step(event.issued_at, event.step_s) != event.issued_at
            if (
                between_steps
                and last is not None
                and last.as_of == event.issued_at
                and event.cluster not in self.waiting
            ):
                # A forecast redone on drift for the state just planned: plan that state again with it.
                self.waiting[event.cluster] = _Pending(last, self.monotonic())
        elif isinstance(event, ClusterState):
            self._check_time(event.as_of, "as_of")
            self._forget_services_gone(event)
            self.last_state[event.cluster] = event
            decided = self.decided_as_of.get(event.cluster)
            if decided is not None and event.as_of < decided:
                return ()  # a replay of a state already planned past
            self.waiting[event.cluster] = _Pending(event, self.monotonic())
        return self._ready()

    def on_idle(self) -> Iterable[Outgoing]:
        return self._ready()

    def _check_time(self, when: datetime, field_name: str) -> None:
        """ValueError (a dead letter) when a record is dated too far past the clock."""
        if self.clock is None:
            return
        now = self.clock.now()
        if when > now + timedelta(seconds=self.max_state_skew_s):
            raise ValueError(
                f"{field_name}: {when.isoformat()} is more than {self.max_state_skew_s:g} s past the "
                f"optimizer's clock ({now.isoformat()}; setting optimizer.max_state_skew_s)"
            )

    def _forget_services_gone(self, state: ClusterState) -> None:
        known = self.forecasts.get(state.cluster)
        if known:
            present = {svc.spec.service for svc in state.services}
            for service in [s for s in known if s not in present]:
                del known[service]

    def pending(self) -> bool:
        return bool(self.waiting)

    def _has_forecasts(self, state: ClusterState) -> bool:
        known = self.forecasts.get(state.cluster, {})
        at_boundary = floor_to_step(state.as_of, state.step_s) == state.as_of
        for svc in state.services:
            forecast = known.get(svc.spec.service)
            if forecast is None:
                return False
            if at_boundary and forecast.issued_at != state.as_of:
                return False
        return True

    def _ready(self) -> list[Outgoing]:
        out: list[Outgoing] = []
        for cluster, pending in list(self.waiting.items()):
            waited = self.monotonic() - pending.since_s
            if not self._has_forecasts(pending.state) and waited < self.forecast_wait_s:
                continue
            del self.waiting[cluster]
            out.extend(self._decide(pending.state))
        return out

    def _decide(self, state: ClusterState) -> list[Outgoing]:
        known = self.forecasts.get(state.cluster, {})
        forecasts = {
            svc.spec.service: known[svc.spec.service] for svc in state.services if svc.spec.service in known
        }
        t0 = time.perf_counter()
        decision = self.policy.decide(state, forecasts, state.as_of)
        elapsed_ms = (time.perf_counter() - t0) * 1000.0
        self.decide_ms.append(elapsed_ms)
        del self.decide_ms[:-1000]
        self.decisions += 1
        self.decided_as_of[state.cluster] = state.as_of
        if self.on_decision is not None:
            self.on_decision(decision, state, elapsed_ms / 1000.0)
        return [(PLANS, decision.plan), (ALLOCATIONS, decision.allocation)]
