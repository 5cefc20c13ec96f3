"""Any HiGHS answer but Optimal is a failure: a demand or forecast of 1e20 (HiGHS's infinity) gives a
flagged fallback with the cause in its reason, never a plan that drops a service to 0 replicas; and
the guard (optimizer/guard.py) replaces a plan under a service's min_replicas or over a pool.

The contracts reject such a value at the edge (schemas/bounds.py); the planner's own defence is
kept, and tested here on copies that skip validation (``model_copy``)."""

from __future__ import annotations

import highspy
import pytest
from optimizer_cases import NOW, pool, state, three_pool_cluster
from plan_checks import check_plan

from optimizer.config import PlannerConfig
from optimizer.guard import violations
from optimizer.planner import PlannerPolicy
from schemas import Allocation, ServiceDecision

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _replicas(decision, service: str) -> int:
    return sum(s.replicas for s in decision.allocation.services if s.service == service)


@pytest.mark.parametrize("where", ["forecast", "demand"])
def test_a_demand_of_1e20_gives_a_flagged_fallback_that_keeps_the_service(where: str) -> None:
    cluster, forecasts = three_pool_cluster(3)
    if where == "forecast":
        chat = forecasts["chat"]
        curves = {key: [1e20, *curve[1:]] for key, curve in chat.quantiles.items()}
        forecasts = {"chat": chat.model_copy(update={"quantiles": curves})}
    else:
        services = [s.model_copy(update={"demand_history": [3.0, 1e20]}) for s in cluster.services]
        cluster, forecasts = cluster.model_copy(update={"services": services}), {}
    decision = PlannerPolicy(config=CONFIG).decide(cluster, forecasts, NOW)
    check_plan(cluster, decision, CONFIG.horizon_steps, CONFIG.step_s)
    assert violations(cluster, decision.allocation, NOW) == []
    assert _replicas(decision, "chat") >= 1  # its min_replicas
    if decision.plan.solver.status != "Optimal":
        assert decision.allocation.fallback and decision.plan.solver.fallback
        assert decision.plan.solver.status in (decision.allocation.fallback_reason or "")


def test_highs_answering_empty_is_a_failure_with_the_status(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, forecasts = three_pool_cluster(3)
    monkeypatch.setattr(highspy._Highs, "getModelStatus", lambda self: highspy.HighsModelStatus.kModelEmpty)
    decision = PlannerPolicy(config=CONFIG).decide(cluster, forecasts, NOW)
    assert decision.allocation.fallback
    assert "Empty" in (decision.allocation.fallback_reason or "")
    assert _replicas(decision, "chat") >= 1


def test_a_cluster_with_nothing_to_decide_is_optimal_not_a_fallback() -> None:
    """No service and no job: every column is fixed at zero, the optimum needs no HiGHS run."""
    empty = state([pool("a", 8)])
    decision = PlannerPolicy(config=CONFIG).decide(empty, {}, NOW)
    assert decision.plan.solver.status == "Optimal" and not decision.allocation.fallback


def test_the_guard_names_a_service_under_its_minimum_and_an_over_committed_pool() -> None:
    cluster, forecasts = three_pool_cluster(0)
    decision = PlannerPolicy(config=CONFIG).decide(cluster, forecasts, NOW)
    assert violations(cluster, decision.allocation, NOW) == []
    broken = decision.allocation.model_copy(
        update={
            "services": [
                ServiceDecision(service="chat", pool="b", replicas=0, gpus=0.0, reason="x"),
                ServiceDecision(service="other", pool="c", replicas=30, gpus=30.0, reason="x"),
            ]
        }
    )
    found = violations(cluster, Allocation.model_validate(broken.model_dump()), NOW)
    assert any("chat" in f and "min_replicas 1" in f for f in found)
    assert any("pool c over-committed: 30" in f for f in found)
