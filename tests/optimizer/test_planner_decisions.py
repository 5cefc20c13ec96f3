"""Scenario table of the planner's decisions on small hand-made clusters (tests/scenario_table.py):
each row is pools, services with their forecasts, jobs, and the decisions and reason fragments
that ``PlannerPolicy`` with its default ``PlannerConfig`` must publish. Below the table, the few
behaviour tests that are not one decision on one state."""

from __future__ import annotations

import pytest
from optimizer_cases import NOW, job, pool, service, state
from plan_checks import check_plan
from scenario_table import Job, Pool, Scenario, Serve, Service, hold, preempt, run, run_scenario

from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import JobAction

DAY_BUSY_THEN_NIGHT = (14.0,) * 32 + (2.0,) * 64  # 14 of 16 GPUs until 20:00, then 2
RISING_THROUGH_THE_DAY = tuple(4.0 + 8.0 * min(t, 48) / 48 for t in range(96))
FLAT_LOW = (0.3,) * 96

SCENARIOS = [
    Scenario(
        "high-priority-job-is-admitted-first",
        pools=(Pool("a", 8),),
        jobs=(
            Job("old-low", 8, weight=1.0, submitted_min_ago=120),
            Job("new-high", 8, weight=5.0, submitted_min_ago=1),
        ),
        want_jobs={
            "new-high": run("a"),
            "old-low": hold("needs a gang of 8 GPUs", starts="held: planned to start at"),
        },
    ),
    Scenario(
        # equal weights: the same GPU-hours either way, but finishing the short one first
        # completes a job 10 hours sooner (PlannerConfig.finish_bonus); listed second, so the
        # order of the jobs does not pick it
        "among-equal-weights-the-job-closer-to-done-starts-first",
        pools=(Pool("a", 8),),
        jobs=(
            Job("long-old", 8, hours=10.0, submitted_min_ago=120),
            Job("short-new", 8, hours=1.0, submitted_min_ago=1),
        ),
        want_jobs={"short-new": run("a"), "long-old": hold("needs a gang of 8 GPUs")},
    ),
    Scenario(
        # nearness to done never outranks a weight 10% heavier
        "a-heavier-long-job-outranks-a-lighter-short-one",
        pools=(Pool("a", 8),),
        jobs=(
            Job("short-light", 8, weight=1.0, hours=0.25, submitted_min_ago=120),
            Job("long-heavy", 8, weight=1.1, hours=10.0, submitted_min_ago=1),
        ),
        want_jobs={"long-heavy": run("a"), "short-light": hold("needs a gang of 8 GPUs")},
    ),
    Scenario(
        "batch-moves-into-the-night-trough",
        pools=(Pool("a", 16),),
        services=(Service("chat", replicas={"a": 14}, forecast=DAY_BUSY_THEN_NIGHT),),
        jobs=(Job("train", 8, hours=3.0),),
        # in the trough (20:00 = step 32), at the latest one coarse block (3 h) into it
        want_jobs={"train": hold("planned to start at", "chat", first_step_in=(32, 32 + 12))},
        want_services={"chat": Serve(covers_forecast=True)},
    ),
    Scenario(
        "receding-horizon-starts-the-batch-when-the-trough-is-step-0",
        pools=(Pool("a", 16),),
        services=(Service("chat", replicas={"a": 14}, forecast=DAY_BUSY_THEN_NIGHT[32:] + (14.0,) * 32),),
        jobs=(Job("train", 8, hours=3.0),),
        at_min=8 * 60,
        want_jobs={"train": run()},
    ),
    Scenario(
        "job-runs-now-when-the-trough-is-now",
        pools=(Pool("a", 16),),
        services=(Service("chat", replicas={"a": 2}, forecast=(2.0,) * 16 + (14.0,) * 80),),
        jobs=(Job("train", 8, hours=2.0),),
        want_jobs={"train": run()},
    ),
    Scenario(
        # 10 replicas on 8 GPUs, and a job waiting for GPUs: only sharing makes room
        "latency-critical-service-is-never-time-sliced-beyond-its-limit",
        pools=(Pool("shared", 8, max_share=4),),
        services=(
            Service("critical", min_replicas=3, latency_critical=True, max_cotenants=1, forecast=FLAT_LOW),
            Service("tolerant", min_replicas=3, max_cotenants=4, bandwidth_class="low", forecast=FLAT_LOW),
            Service("pair", min_replicas=4, latency_critical=True, max_cotenants=2, forecast=FLAT_LOW),
        ),
        jobs=(Job("train", 2),),
        want_jobs={"train": run()},
        want_services={
            "critical": Serve(replicas=3, gpus=3.0),
            "tolerant": Serve(replicas=3, gpus_below=3.0, says=("time-sliced",)),
            "pair": Serve(replicas=4, gpus_at_least=2.0, gpus_below=4.0),
        },
    ),
    Scenario(
        # chat needs 6 GPUs: 16 - 8 - 2 = 6 leaves no room for 'low'
        "rising-demand-preempts-the-lowest-value-job-with-a-reason",
        pools=(Pool("a", 16),),
        services=(Service("chat", replicas={"a": 2}, forecast=(6.0,) * 96),),
        jobs=(
            Job("low", 4, weight=1.0, running_in="a"),
            Job("high", 8, weight=5.0, running_in="a"),
            Job("pinned", 2, weight=1.0, running_in="a", preemptible=False),
        ),
        want_jobs={"low": preempt("chat"), "high": run(), "pinned": run()},
        want_services={"chat": Serve(gpus_at_least=6.0, says=("forecast p90 = 6.0",))},
    ),
    Scenario(
        # a job that cannot be preempted holds 6 of the 8 GPUs: chat, forecast at 4, gets 2, and
        # its reason says what holds the pool rather than only that it is full
        "a-service-short-of-its-forecast-says-what-holds-its-pool",
        pools=(Pool("a", 8),),
        services=(Service("chat", replicas={"a": 2}, forecast=(4.0,) * 96),),
        jobs=(Job("pinned", 6, hours=10.0, running_in="a", preemptible=False),),
        want_jobs={"pinned": run("a")},
        want_services={
            "chat": Serve(
                gpus=2.0,
                says=("short by 2.0 GPUs: pool a: 8 GPUs in service", "6 held by running jobs", "0 free"),
            )
        },
    ),
    Scenario(
        # quotas as a cap: the GPUs no quota covers are not lent (PlannerConfig.lend_outside_quotas)
        "quota-holds-a-job-and-says-so",
        pools=(Pool("a", 32),),
        jobs=(Job("a1", 8, team="ml", running_in="a"), Job("a2", 8, team="ml")),
        quotas={"ml": 8},
        policy=lambda: PlannerPolicy(config=PlannerConfig(lend_outside_quotas=False)),
        want_jobs={"a2": hold("quota of 8 GPUs")},
    ),
    Scenario(
        # by default the 24 GPUs outside the quota are lent: a2 runs beyond ml's quota
        "a-team-over-its-quota-borrows-the-gpus-outside-every-quota",
        pools=(Pool("a", 32),),
        jobs=(Job("a1", 8, team="ml", running_in="a"), Job("a2", 8, team="ml")),
        quotas={"ml": 8},
        want_jobs={"a1": run("a"), "a2": run("a")},
    ),
    Scenario(
        # two non-preemptible jobs hold 12 GPUs but a failure left 8 in service: infeasible
        "infeasible-state-publishes-a-flagged-greedy-fallback",
        pools=(Pool("a", 16, available=8),),
        jobs=(
            Job("n1", 6, running_in="a", preemptible=False),
            Job("n2", 6, running_in="a", preemptible=False),
        ),
        want_jobs={"n1": run(), "n2": run()},
        want_fallback=True,
        fallback_says=("Infeasible", "a greedy plan"),
        plan_invariants=False,
    ),
    Scenario(
        # the jobs started on a good plan; a node failure then leaves 6 GPUs for 8 GPUs of
        # non-preemptible jobs: the last plan, shifted by one step, is published, flagged
        "fallback-after-a-good-plan-shifts-that-plan",
        previous=Scenario(
            "a-good-plan-starts-every-job",
            pools=(Pool("a", 16),),
            services=(Service("chat", replicas={"a": 4}, forecast=(4.0,) * 96),),
            jobs=(Job("j1", 4, preemptible=False), Job("j2", 4, preemptible=False), Job("j3", 2)),
            want_jobs={"j1": run(), "j2": run(), "j3": run()},
        ),
        pools=(Pool("a", 16, available=6),),
        services=(Service("chat", replicas={"a": 4}, forecast=(4.0,) * 96),),
        jobs=(
            Job("j1", 4, preemptible=False, running_in="a", started_min_ago=0),
            Job("j2", 4, preemptible=False, running_in="a", started_min_ago=0),
            Job("j3", 2),
        ),
        at_min=15,
        want_jobs={"j1": run(), "j2": run()},
        want_fallback=True,
        fallback_says=("Infeasible", "shifted by one step"),
        plan_invariants=False,
    ),
    Scenario(
        # the forecast has another step, a shorter horizon and no p95 curve
        "bad-forecast-shape-never-escapes-the-loop",
        pools=(Pool("a", 8),),
        services=(
            Service("chat", replicas={"a": 1}, slo_quantile="p95", forecast=(3.0,) * 5, forecast_step_s=300),
        ),
        jobs=(Job("j", 2),),
        want_jobs={"j": run()},
    ),
    Scenario(
        # later blocks count what a service adds, not where: without the stay preference its
        # capacity could wander between equal pools from block to block
        "service-grows-where-it-runs-when-pools-are-otherwise-equal",
        pools=(Pool("a", 16), Pool("b", 16), Pool("c", 16)),
        services=(Service("chat", replicas={"b": 4}, forecast=RISING_THROUGH_THE_DAY),),
        want_services={"chat": Serve(covers_forecast=True, only_in=("b",))},
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda row: row.id)
def test_planner_decides(row: Scenario) -> None:
    run_scenario(row)


def test_same_inputs_give_the_same_plan_id() -> None:
    cluster = state([pool("a", 8)], [job("j", 2)])
    one = PlannerPolicy().decide(cluster, {}, NOW)
    two = PlannerPolicy().decide(cluster, {}, NOW)
    assert one.plan.plan_id == two.plan.plan_id == one.allocation.plan_id
    assert one.plan.step(0).jobs == two.plan.step(0).jobs
    third = PlannerPolicy(name="oracle").decide(cluster, {}, NOW)
    assert third.plan.plan_id != one.plan.plan_id and third.plan.policy == "oracle"


def test_last_line_of_defence_keeps_the_current_state() -> None:
    from optimizer.config import PlannerConfig
    from optimizer.fallback import keep_current_state

    cluster = state(
        [pool("a", 16)], [job("r", 4, running_in="a"), job("q", 4)], [service("chat", replicas={"a": 3})]
    )
    decision = keep_current_state(
        cluster, NOW, PlannerConfig(), plan_id="p", policy="ebbtide", digest="d", reason="greedy failed"
    )
    check_plan(cluster, decision, 96, 900)
    jobs = {d.job_id: d for d in decision.allocation.jobs}
    assert jobs["r"].action == JobAction.RUN and jobs["q"].action == JobAction.HOLD
    assert decision.allocation.fallback and decision.allocation.fallback_reason == "greedy failed"
    assert [(d.service, d.replicas) for d in decision.allocation.services] == [("chat", 3)]
