"""Every stop's reason is true over a whole simulated day (optimizer/reasons.py): a stop said to
free GPUs for jobs names a start that outweighs the stopped job, as the stop rule requires
(optimizer/stop_pays.py); one said to free them for inference names a service that grows in the
job's pool in the same Allocation. Found on the bursty scenario: a kept job squeezed out when the
api service grew from 28 to 31 replicas read "its 4 GPUs go to job job0-00047 (1 GPUs, weight 1)
... (its own weight 1)", the weight-1 job that backfilled the one GPU the api left."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from loop import StepRecord
from loop.decision import Decision
from loop.ports import ForecastSource, Policy
from schemas import ClusterState, DecisionCause, DemandForecast, JobAction
from simulator.cluster import Simulator
from simulator.registry import planner_factories
from simulator.runner import run_scenario
from simulator.scenario import builtin_scenarios, load_scenario


@dataclass
class Noting:
    """The planner, noting what each decision saw: job weights, each service's replicas per pool."""

    policy: Policy
    name: str = "ebbtide"
    weights: dict[str, float] = field(default_factory=dict)
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        self.weights = {j.spec.job_id: j.spec.priority_weight for j in state.jobs}
        self.replicas = {(s.spec.service, p): n for s in state.services for p, n in s.replicas.items()}
        return self.policy.decide(state, forecasts, now)

    def false_stop_reasons(self, decision: Decision) -> list[str]:
        allocation = decision.allocation
        grows = {
            d.service for d in allocation.services if d.replicas > self.replicas.get((d.service, d.pool), 0)
        }
        wrong = []
        for d in allocation.jobs:
            if d.action == JobAction.PREEMPT and d.cause == DecisionCause.FREED_FOR_JOBS:
                other = re.search(r"go to job (\S+) \(", d.reason)
                if other is None or self.weights[other[1]] <= self.weights[d.job_id]:
                    wrong.append(d.reason)
            if d.action == JobAction.PREEMPT and d.cause == DecisionCause.FREED_FOR_INFERENCE:
                service = re.search(r"go to inference, (\S+) grows", d.reason)
                if service is None or service[1] not in grows:
                    wrong.append(d.reason)
        return wrong


@pytest.mark.parametrize("name", ["bursty", "diurnal"])
def test_every_stop_reason_in_a_simulated_day_is_true(name: str) -> None:
    factory = planner_factories()["ebbtide"]
    noting: Noting | None = None

    def noted(sim: Simulator) -> tuple[Policy, ForecastSource]:
        nonlocal noting
        policy, source = factory(sim)
        noting = Noting(policy)
        return noting, source

    wrong: list[str] = []
    stops = 0

    def check(record: StepRecord) -> None:
        nonlocal stops
        assert noting is not None
        stops += sum(d.action == JobAction.PREEMPT for d in record.decision.allocation.jobs)
        wrong.extend(noting.false_stop_reasons(record.decision))

    run_scenario(load_scenario(builtin_scenarios()[name]), "ebbtide", noted, quick=True, on_record=check)
    assert stops > 0  # the day has stops to explain
    assert not wrong, wrong[:3]
