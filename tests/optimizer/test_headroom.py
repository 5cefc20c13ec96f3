"""Lending burst headroom (optimizer/headroom.py): step 0's reserved-but-idle inference capacity
runs preemptible jobs, the service gets a burst ceiling its autoscaler takes back from them, and
every capacity invariant still holds, including the one after a full take-back."""

from __future__ import annotations

from optimizer_cases import forecast, job, pool, service, state
from plan_checks import check_plan, check_take_back

from optimizer.config import PlannerConfig
from optimizer.headroom import lend_headroom
from optimizer.plan_build import rewrite_step0
from optimizer.planner import PlannerPolicy
from schemas import ClusterState, DecisionCause, DemandForecast, JobAction

NOW_DEMAND = 10.0


def _cluster(jobs, *, quota: int | None = None) -> ClusterState:
    chat = service("chat", slo_quantile="p99", replicas={"a": 30}).model_copy(
        update={"demand_history": [NOW_DEMAND] * 8}
    )
    quotas = {"ml": quota} if quota is not None else {}
    return state([pool("a", 32)], jobs, [chat], quotas_gpus=quotas)


def _wide_forecast() -> dict[str, DemandForecast]:
    # median 10 GPUs, p99 30 GPUs all day: the plan reserves 30 and 20 of them sit idle
    return {"chat": forecast("chat", [NOW_DEMAND] * 96, spread=10.0)}


def _decide(cluster: ClusterState, config: PlannerConfig | None = None):
    decision = PlannerPolicy(config=config or PlannerConfig()).decide(
        cluster, _wide_forecast(), cluster.as_of
    )
    check_plan(cluster, decision, 96, 900)
    return decision


def test_idle_headroom_runs_waiting_preemptible_jobs() -> None:
    cluster = _cluster([job(f"w{i}", 4, weight=1.0 + i, hours=8.0) for i in range(4)])
    decision = _decide(cluster)
    alloc = decision.allocation
    borrowers = [j for j in alloc.jobs if j.borrows_from == "chat"]
    assert borrowers and all(j.action == JobAction.RUN for j in borrowers)
    # the heaviest jobs borrow first
    assert {j.job_id for j in borrowers} >= {"w3", "w2"}
    chat = next(s for s in alloc.services if s.service == "chat")
    assert chat.gpus >= NOW_DEMAND and chat.burst_gpus >= sum(j.gpus for j in borrowers)
    assert "autoscaler takes the lent GPUs back" in chat.reason and f"need {NOW_DEMAND:g}" in chat.reason
    assert "burst headroom" in borrowers[0].reason
    check_take_back(cluster, decision)
    # the plan's step 0 says the same as the allocation
    step0 = decision.plan.step(0)
    assert {p.job_id for p in step0.jobs if p.borrows_from} == {j.job_id for j in borrowers}
    assert next(c for c in step0.services if c.service == "chat").burst_gpus == chat.burst_gpus


def test_non_preemptible_jobs_never_borrow() -> None:
    cluster = _cluster([job("pinned", 4, weight=5.0, preemptible=False)])
    decision = _decide(cluster, PlannerConfig(burst_into_idle=False))  # a ceiling only from lending
    assert all(j.borrows_from is None for j in decision.allocation.jobs)
    assert all(s.burst_gpus == 0 for s in decision.allocation.services)


def test_nothing_to_lend_to_changes_nothing() -> None:
    cluster = _cluster([])
    lent = _decide(cluster).allocation
    kept = _decide(cluster, PlannerConfig(lend_headroom=False)).allocation
    assert lent.services == kept.services


def test_lending_off_keeps_the_reservation_idle() -> None:
    cluster = _cluster([job("w", 4, hours=8.0)])
    decision = _decide(cluster, PlannerConfig(lend_headroom=False, burst_into_idle=False))
    assert all(s.burst_gpus == 0 for s in decision.allocation.services)
    assert all(j.borrows_from is None for j in decision.allocation.jobs)


def test_borrowers_stay_within_their_team_quota() -> None:
    jobs = [job(f"q{i}", 4, hours=8.0, team="ml") for i in range(4)]
    decision = _decide(_cluster(jobs, quota=8))
    running = [j for j in decision.allocation.jobs if j.action == JobAction.RUN]
    assert sum(j.gpus for j in running) <= 8
    check_take_back(_cluster(jobs, quota=8), decision)


def test_a_failure_while_lending_is_logged_and_the_plan_stands(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import optimizer.planner as planner

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("lending bug")

    monkeypatch.setattr(planner, "lend_headroom", broken)
    cluster = _cluster([job(f"w{i}", 4, weight=1.0 + i, hours=8.0) for i in range(4)])
    decision = _decide(cluster)
    assert not any(j.borrows_from for j in decision.allocation.jobs) and not decision.allocation.fallback
    assert "lending headroom failed" in caplog.text and "lending bug" in caplog.text


def test_only_a_job_stopped_for_inference_is_kept_on_the_headroom() -> None:
    # chat's reservation (30 of 32 GPUs) stops the running job; lending keeps it on the idle
    # headroom. Stopped to empty a node for a gang instead, it keeps its stop: the gang needs the node
    cluster = _cluster([job("r", 4, hours=8.0, running_in="a", restart_cost_s=60.0)])
    chat = cluster.services[0].model_copy(update={"replicas": {"a": 26}})  # grows to 30 over r's GPUs
    cluster = cluster.model_copy(update={"services": [chat]})
    unlent = _decide(cluster, PlannerConfig(lend_headroom=False, burst_into_idle=False))
    stop = next(d for d in unlent.allocation.jobs if d.job_id == "r")
    assert stop.action == JobAction.PREEMPT and stop.cause == DecisionCause.FREED_FOR_INFERENCE

    def lent(cause: DecisionCause) -> JobAction:
        jobs = [d.revised(cause=cause) if d.job_id == "r" else d for d in unlent.allocation.jobs]
        decision = rewrite_step0(
            unlent,
            step0_services=list(unlent.plan.blocks[0].services),
            step0_jobs=list(unlent.plan.blocks[0].jobs),
            services=list(unlent.allocation.services),
            jobs=jobs,
        )
        return next(
            d for d in lend_headroom(decision, cluster, _wide_forecast()).allocation.jobs if d.job_id == "r"
        ).action

    assert lent(DecisionCause.FREED_FOR_INFERENCE) == JobAction.RUN
    assert lent(DecisionCause.CLEARED_FOR_JOB) == JobAction.PREEMPT


def test_a_borrower_keeps_off_the_nodes_held_for_a_heavier_gang() -> None:
    # step 0 holds node n0 for a gang of weight 3 as it drains and n1 for one of weight 1: a
    # borrower lighter than 3 is told to keep off n0 (the cluster places it itself, and a held
    # node is where GPUs free first); none is kept off n1
    cluster = _cluster([job(f"w{i}", 4, weight=1.0 + i, hours=8.0) for i in range(4)])
    unlent = _decide(cluster, PlannerConfig(lend_headroom=False, burst_into_idle=False))
    held = {"a": {"n0": 3.0, "n1": 1.0}}
    decision = lend_headroom(unlent, cluster, _wide_forecast(), held_nodes=held)
    weights = {j.spec.job_id: j.spec.priority_weight for j in cluster.jobs}
    borrowers = [d for d in decision.allocation.jobs if d.borrows_from == "chat"]
    assert {weights[d.job_id] for d in borrowers} >= {1.0, 4.0}
    for d in borrowers:
        assert d.avoid_nodes == (["n0"] if weights[d.job_id] < 3.0 else []), d
