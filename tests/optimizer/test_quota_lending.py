"""Team quotas lend what they leave idle (optimizer/quota.py), as Kueue lends unused
quota in a cohort: a team over its quota runs on another team's idle quota, and gives it back when
that team's work comes, whatever the weights; the reasons say so."""

from __future__ import annotations

import numpy as np
from optimizer_cases import job, pool, state
from plan_checks import check_plan

from optimizer.planner import PlannerPolicy
from optimizer.quota import fits_quota, idle_quota
from schemas import ClusterState, JobAction

QUOTAS = {"nlp": 8, "robotics": 16}


def _decide(cluster: ClusterState):
    decision = PlannerPolicy().decide(cluster, {}, cluster.as_of)
    check_plan(cluster, decision, 96, 900)
    return {j.job_id: j for j in decision.allocation.jobs}


def _gpus(jobs, team_prefix: str) -> int:
    run = [j for j in jobs.values() if j.action == JobAction.RUN]
    return sum(j.gpus for j in run if j.job_id.startswith(team_prefix))


def test_idle_quota_is_what_the_owners_own_work_leaves_and_is_lent_once() -> None:
    nominal = np.asarray([8.0, 16.0, 10.0, np.inf])
    wanted = np.asarray([20.0, 3.0, 16.0, 50.0])  # nlp and vision over, robotics wants 3 of 16
    assert idle_quota(nominal, wanted) == 13.0
    quota = nominal.tolist()
    assert fits_quota([8.0, 3.0, 10.0, 50.0], quota, 13.0, 0, 12.0), "nlp may borrow all 13"
    assert not fits_quota([20.0, 3.0, 10.0, 50.0], quota, 13.0, 2, 4.0), "12 lent to nlp, 1 left for vision"
    assert fits_quota([20.0, 3.0, 10.0, 50.0], quota, 13.0, 1, 12.0), "robotics within its own 16"
    assert fits_quota([20.0, 3.0, 10.0, 50.0], quota, 13.0, 3, 100.0), "no quota, no limit"


def test_two_borrowers_share_the_idle_quota_once_and_the_owner_keeps_what_it_wants() -> None:
    quotas = {"nlp": 8, "vision": 8, "robotics": 16}
    jobs = [job(f"nlp{i}", 4, hours=8.0, team="nlp", weight=4.0) for i in range(6)]
    jobs += [job(f"vis{i}", 4, hours=8.0, team="vision", weight=4.0) for i in range(6)]
    jobs += [job("rob0", 4, hours=8.0, team="robotics", weight=1.0)]  # wants 4 of its 16
    decided = _decide(state([pool("a", 32)], jobs, quotas_gpus=quotas))
    assert _gpus(decided, "rob") == 4, "robotics' own work runs, at a quarter of the borrowers' weight"
    assert _gpus(decided, "nlp") + _gpus(decided, "vis") == 8 + 8 + 12, "their quotas + the 12 idle, once"
    held = [j for j in decided.values() if j.action != JobAction.RUN]
    assert held and all("and 12 of the 12 GPUs idle quotas lend are borrowed" in j.reason for j in held), [
        j.reason for j in held
    ]


def test_a_team_runs_on_idle_quota_and_gives_it_back_when_the_owner_needs_it() -> None:
    nlp = [job(f"nlp{i}", 4, hours=8.0, team="nlp", weight=4.0) for i in range(6)]
    idle_owner = _decide(state([pool("a", 24)], nlp, quotas_gpus=QUOTAS))
    assert _gpus(idle_owner, "nlp") == 24, "8 of its own + the 16 robotics leaves idle"
    running = [
        job(j.spec.job_id, 4, hours=8.0, team="nlp", weight=4.0, running_in="a")
        for j in nlp
        if idle_owner[j.spec.job_id].action == JobAction.RUN
    ]
    queued = [j for j in nlp if idle_owner[j.spec.job_id].action != JobAction.RUN]
    robotics = [job(f"rob{i}", 4, hours=8.0, team="robotics", weight=1.0) for i in range(2)]
    back = _decide(state([pool("a", 24)], running + queued + robotics, quotas_gpus=QUOTAS))
    assert _gpus(back, "rob") == 8, "robotics has the quota its work wants back, at a quarter of nlp's weight"
    assert _gpus(back, "nlp") == 16, "nlp keeps its 8 and borrows only the 8 still idle"
    held = [j for j in back.values() if j.job_id.startswith("nlp") and j.action != JobAction.RUN]
    assert len(held) == 2 and all(j.action == JobAction.PREEMPT for j in held)
    assert all(j.cause == "quota-reclaimed" for j in held), [j.reason for j in held]
    assert all(
        j.reason.startswith("preempted: quota reclaimed: team nlp runs beyond its quota of 8 GPUs")
        and "of team robotics takes its GPUs in pool a back" in j.reason
        for j in held
    ), [j.reason for j in held]
    # each stop names the robotics job it makes room for: one each
    assert sorted(next(r for r in ("rob0", "rob1") if f"job {r} " in j.reason) for j in held) == [
        "rob0",
        "rob1",
    ]
    more = _decide(
        state([pool("a", 24)], running + queued + [job("nlp9", 4, team="nlp")], quotas_gpus=QUOTAS)
    )
    assert (
        "team nlp is at its quota of 8 GPUs (24 in use, its gang needs 4), and 16 of the 16 GPUs idle"
        in more["nlp9"].reason
    )


def _borrowing_nlp(lost_h: dict[str, float]) -> list:
    """nlp (quota 8) runs 24 GPUs in pool a, 16 of them on robotics' idle quota (16): two 8-GPU
    gangs and two 4-GPU gangs, each with ``lost_h`` GPU-hours of work since its checkpoint."""
    gangs = {"n8a": 8, "n8b": 8, "n4a": 4, "n4b": 4}
    return [
        job(j, g, hours=8.0, team="nlp", running_in="a", since_checkpoint_gpu_s=lost_h[j] * 3600.0)
        for j, g in gangs.items()
    ]


def test_a_reclaim_stops_the_borrower_that_loses_least_and_no_more_than_the_owner_needs() -> None:
    """robotics' 2-GPU job takes 2 of its lent GPUs back: one borrower is stopped, the 4-GPU gang
    that has just checkpointed, not a gang of 8 with hours since its checkpoint, nor two jobs."""
    lost_h = {"n8a": 6.0, "n8b": 6.0, "n4a": 0.1, "n4b": 2.0}
    jobs = [*_borrowing_nlp(lost_h), job("rob0", 2, hours=8.0, team="robotics")]
    decided = _decide(state([pool("a", 24)], jobs, quotas_gpus=QUOTAS))
    assert decided["rob0"].action == JobAction.RUN, decided["rob0"].reason
    stopped = sorted(j.job_id for j in decided.values() if j.action == JobAction.PREEMPT)
    assert stopped == ["n4a"], [(j.job_id, j.reason) for j in decided.values()]
    assert decided["n4a"].cause == "quota-reclaimed"
    assert (
        "job rob0 (2 GPUs, weight 1) of team robotics takes its GPUs in pool a back" in decided["n4a"].reason
    )
    assert _gpus(decided, "n") == 20, "nlp keeps 8 of its own and 12 of the 14 GPUs robotics still lends"


def test_a_one_gpu_owner_waits_rather_than_stop_a_gang_that_would_lose_hours() -> None:
    """Every borrower would lose hours of work, and one ends within the step: robotics' 1-GPU job
    waits for it (the GPUs it lacks free by themselves) and the reason says why."""
    lost_h = {"n8a": 6.0, "n8b": 6.0, "n4a": 2.0, "n4b": 2.0}
    jobs = _borrowing_nlp(lost_h)
    jobs[3] = job("n4b", 4, hours=0.1, team="nlp", running_in="a", since_checkpoint_gpu_s=2.0 * 3600.0)
    jobs.append(job("rob0", 1, hours=8.0, team="robotics"))
    decided = _decide(state([pool("a", 24)], jobs, quotas_gpus=QUOTAS))
    assert not [j.job_id for j in decided.values() if j.action == JobAction.PREEMPT]
    assert decided["rob0"].action != JobAction.RUN
    assert decided["rob0"].cause == "quota-lent", decided["rob0"].reason
    assert decided["rob0"].reason.startswith(
        "held: team robotics is within its quota of 16 GPUs (0 in use, its gang needs 1), "
        "but other teams borrow 16 GPUs of the quotas"
    ), decided["rob0"].reason


def test_the_gpus_outside_every_quota_are_lent_too() -> None:
    """The quotas cover 24 of the pool's 32 GPUs: nlp (quota 8) borrows robotics' idle 16 and the 8
    no quota covers; robotics' start takes free GPUs outside the quotas rather than reclaim its own
    from a borrower (with the pool at 24, the same start stops the 4-GPU gang: the test above)."""
    nlp = [job(f"nlp{i}", 4, hours=8.0, team="nlp", weight=4.0) for i in range(10)]
    decided = _decide(state([pool("a", 32)], nlp, quotas_gpus=QUOTAS))
    assert _gpus(decided, "nlp") == 32, "its 8, the 16 robotics leaves idle and the 8 outside the quotas"
    lost_h = {"n8a": 6.0, "n8b": 6.0, "n4a": 0.1, "n4b": 2.0}
    jobs = [*_borrowing_nlp(lost_h), job("rob0", 2, hours=8.0, team="robotics")]
    decided = _decide(state([pool("a", 32)], jobs, quotas_gpus=QUOTAS))
    assert decided["rob0"].action == JobAction.RUN, decided["rob0"].reason
    assert not [j.job_id for j in decided.values() if j.action == JobAction.PREEMPT]
