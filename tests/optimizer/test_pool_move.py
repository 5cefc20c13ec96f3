"""A service moved between pools keeps the demand of now covered while its new replicas start up
(make before break, optimizer/formulation.py rows ``kept``): found on a held-out three-pool
workload, where chat's replicas moved from A100 to H100 nodes for an A100-only job and the old ones
went at once: the whole of its SLO shortfall (0.053%, kueue-hpa's 0) was that minute of start-up."""

from __future__ import annotations

from optimizer_cases import NOW, forecast, job, pool, state

from optimizer.planner import PlannerPolicy
from schemas import ClusterState, DecisionCause, JobAction, ServiceSpec, ServiceState


def _cluster(startup_s: float, replicas: dict[str, int]) -> ClusterState:
    """Two 8-GPU pools; chat (8 GPUs of demand, flat) may run in either; a queued 8-GPU job may
    run only in pool a, where chat runs now."""
    spec = ServiceSpec(service="chat", startup_s=startup_s, allowed_pools=["a", "b"], min_replicas=1)
    chat = ServiceState(spec=spec, replicas=replicas, demand_history=[8.0] * 96)
    return state([pool("a", 8), pool("b", 8)], [job("pinned", 8, allowed_pools=["a"])], [chat])


def _decide(cluster: ClusterState) -> tuple[dict[str, int], JobAction, dict[str, str]]:
    """Chat's replicas per pool, the job's action, and each decision's cause and reason."""
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", [8.0] * 96)}, NOW)
    replicas = {s.pool: s.replicas for s in decision.allocation.services}
    reasons = {s.pool: f"{s.cause}: {s.reason}" for s in decision.allocation.services}
    (pinned,) = decision.allocation.jobs
    return replicas, pinned.action, reasons | {"job": f"{pinned.cause}: {pinned.reason}"}


def test_a_service_moves_at_once_when_its_replicas_start_at_once() -> None:
    replicas, action, _ = _decide(_cluster(startup_s=0.0, replicas={"a": 8}))
    assert replicas.get("a", 0) == 0 and replicas["b"] == 8
    assert action == JobAction.RUN


def test_a_service_with_a_start_up_grows_in_the_new_pool_before_it_leaves_the_old() -> None:
    """Five minutes of start-up: the first decision starts chat's replicas in pool b and keeps
    those in a (the job waits a step); the next, with b's replicas running, leaves a to the job."""
    replicas, action, reasons = _decide(_cluster(startup_s=300.0, replicas={"a": 8}))
    assert replicas == {"a": 8, "b": 8}
    assert action == JobAction.HOLD
    assert reasons["a"].startswith(f"{DecisionCause.KEPT_WHILE_MOVING}: 8 replicas on 8 GPUs in pool a")
    assert "chat's 8 new replicas in pool b start up" in reasons["a"]
    assert reasons["b"].startswith(f"{DecisionCause.COVERS_FORECAST}: 8 replicas on 8 GPUs in pool b")
    assert reasons["job"].startswith(f"{DecisionCause.RESERVED_FOR_SERVICE}: held: pool a is reserved")
    replicas, action, _ = _decide(_cluster(startup_s=300.0, replicas={"a": 8, "b": 8}))
    assert replicas.get("a", 0) == 0 and replicas["b"] == 8
    assert action == JobAction.RUN
