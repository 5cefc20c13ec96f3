"""Team quotas lend what they leave idle (optimizer/inputs.py ``lent_quota``), as Kueue lends unused
quota in a cohort: a team over its quota runs on another team's idle quota, and gives it back when
that team's work comes, whatever the weights; the reasons say so."""

from __future__ import annotations

import numpy as np
from optimizer_cases import job, pool, state
from plan_checks import check_plan

from optimizer.inputs import lent_quota
from optimizer.planner import PlannerPolicy
from schemas import ClusterState, JobAction

QUOTAS = {"nlp": 8, "robotics": 16}


def _decide(cluster: ClusterState):
    decision = PlannerPolicy().decide(cluster, {}, cluster.as_of)
    check_plan(cluster, decision, 96, 900)
    return {j.job_id: j for j in decision.allocation.jobs}


def _gpus(jobs, team_prefix: str) -> int:
    run = [j for j in jobs.values() if j.action == JobAction.RUN]
    return sum(j.gpus for j in run if j.job_id.startswith(team_prefix))


def test_idle_quota_is_lent_to_the_teams_over_theirs_in_proportion() -> None:
    nominal = np.asarray([8.0, 16.0, 10.0, np.inf])
    wanted = np.asarray([20.0, 0.0, 16.0, 50.0])  # nlp 12 over, robotics 16 idle, vision 6 over, no quota
    assert lent_quota(nominal, wanted).tolist() == [10.0, 0.0, 5.0, 0.0]  # 16 idle: 12:6 split, floored
    assert lent_quota(nominal, np.asarray([8.0, 3.0, 10.0, 1.0])).tolist() == [0.0] * 4  # nobody over


def test_a_team_runs_on_idle_quota_and_gives_it_back_when_the_owner_needs_it() -> None:
    nlp = [job(f"nlp{i}", 4, hours=8.0, team="nlp", weight=4.0) for i in range(6)]
    idle_owner = _decide(state([pool("a", 32)], nlp, quotas_gpus=QUOTAS))
    assert _gpus(idle_owner, "nlp") == 24, "8 of its own + the 16 robotics leaves idle"
    running = [
        job(j.spec.job_id, 4, hours=8.0, team="nlp", weight=4.0, running_in="a")
        for j in nlp
        if idle_owner[j.spec.job_id].action == JobAction.RUN
    ]
    queued = [j for j in nlp if idle_owner[j.spec.job_id].action != JobAction.RUN]
    robotics = [job(f"rob{i}", 4, hours=8.0, team="robotics", weight=1.0) for i in range(2)]
    back = _decide(state([pool("a", 32)], running + queued + robotics, quotas_gpus=QUOTAS))
    assert _gpus(back, "rob") == 8, "robotics has the quota its work wants back, at a quarter of nlp's weight"
    assert _gpus(back, "nlp") == 16, "nlp keeps its 8 and borrows only the 8 still idle"
    held = [j for j in back.values() if j.job_id.startswith("nlp") and j.action != JobAction.RUN]
    assert len(held) == 2 and all(j.action == JobAction.PREEMPT for j in held)
    assert all(j.cause == "quota-reclaimed" for j in held), [j.reason for j in held]
    assert all(
        j.reason.startswith("preempted: quota reclaimed: team nlp runs beyond its quota of 8 GPUs")
        and "of team robotics and 1 more takes its GPUs in pool a back" in j.reason
        for j in held
    ), [j.reason for j in held]
    more = _decide(
        state([pool("a", 32)], running + queued + [job("nlp9", 4, team="nlp")], quotas_gpus=QUOTAS)
    )
    assert (
        "team nlp is at its quota of 8 GPUs (24 in use, its gang needs 4), with 16 more lent"
        in more["nlp9"].reason
    )
