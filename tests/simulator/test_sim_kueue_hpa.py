"""The ``kueue-hpa`` baseline's decisions as a scenario table (rows of tests/scenario_table.py):
the HPA's replica counts, then Kueue's admission (quota, cohort borrowing, BestEffortFIFO) and
preemption (lower priority within a queue, reclaiming borrowed quota); then the burst headroom
it shares with reactive."""

from __future__ import annotations

import pytest
from scenario_table import Job, Pool, Scenario, Serve, Service, hold, preempt, run, run_scenario

from schemas import JobAction
from simulator.policies.kueue_hpa import KueueHpaPolicy
from simulator.policies.reactive import ReactivePolicy

P8 = Pool("p", 8, gpu_type="A100", gpus_per_node=4)
IDLE = Service("svc", history=(0.0,))


def row(id_: str, **kw: object) -> Scenario:
    kw.setdefault("pools", (P8,))
    kw.setdefault("services", (IDLE,))
    return Scenario(id_, policy=KueueHpaPolicy, **kw)  # type: ignore[arg-type]


SCENARIOS = [
    # 2.8 GPUs of demand at 70 % target: ceil(2.8 / 0.7) = 4 replicas at once
    row(
        "hpa-scales-up-immediately",
        services=(Service("svc", replicas={"p": 1}, history=(1.0, 2.8)),),
        want_services={"svc": Serve(replicas=4)},
    ),
    # 2.9 on 4 replicas is 1.04 x the target: inside the 0.1 tolerance, no change
    row(
        "hpa-keeps-replicas-within-tolerance",
        services=(Service("svc", replicas={"p": 4}, history=(2.9,)),),
        want_services={"svc": Serve(replicas=4)},
    ),
    # the 5-minute stabilization window is shorter than a 15-minute step: it holds only this step
    row(
        "hpa-scales-down-after-its-stabilization-window",
        services=(Service("svc", replicas={"p": 6}, history=(4.0, 1.4)),),
        want_services={"svc": Serve(replicas=2)},
    ),
    row(
        "hpa-keeps-the-minimum",
        services=(Service("svc", history=(0.1,), min_replicas=3),),
        want_services={"svc": Serve(replicas=3)},
    ),
    # team a's quota is 2, b's 6 and b is idle: a borrows 6 of b's within the cohort
    row(
        "kueue-borrows-idle-quota-in-the-cohort",
        quotas={"a": 2, "b": 6},
        jobs=(Job("a1", 8, team="a"),),
        want_jobs={"a1": run("p", "queue a")},
    ),
    # quotas 2 + 2 on 8 GPUs: 6 for a would pass its quota and the cohort's, though GPUs are free
    row(
        "kueue-holds-beyond-quota-and-cohort-with-free-gpus",
        quotas={"a": 2, "b": 2},
        jobs=(Job("a1", 6, team="a"),),
        want_jobs={"a1": hold("quota")},
    ),
    # BestEffortFIFO: the older 6-GPU job does not fit next to a running 4; the newer 2 goes ahead
    row(
        "kueue-best-effort-fifo-lets-a-smaller-job-past",
        jobs=(Job("r", 4, running_in="p"), Job("big", 6, submitted_min_ago=60), Job("small", 2)),
        want_jobs={"r": run("p"), "big": hold(), "small": run("p")},
    ),
    row(
        "kueue-preempts-lower-priority-in-its-queue",
        jobs=(Job("low", 6, weight=1, running_in="p"), Job("high", 6, weight=5)),
        want_jobs={"low": preempt("high"), "high": run("p")},
    ),
    row(
        "kueue-never-preempts-equal-priority",
        jobs=(Job("first", 6, running_in="p"), Job("second", 6, submitted_min_ago=60)),
        want_jobs={"first": run("p"), "second": hold()},
    ),
    row(
        "kueue-never-preempts-a-non-preemptible-job",
        jobs=(Job("pinned", 6, weight=1, running_in="p", preemptible=False), Job("high", 6, weight=5)),
        want_jobs={"pinned": run("p"), "high": hold()},
    ),
    # b uses 8 of its 4: a, within its own quota, reclaims from b's newest workload
    row(
        "kueue-reclaims-borrowed-quota-newest-first",
        quotas={"a": 4, "b": 4},
        jobs=(
            Job("b-old", 4, team="b", running_in="p", started_min_ago=60),
            Job("b-new", 4, team="b", running_in="p", started_min_ago=5),
            Job("a1", 4, team="a", weight=0.5),
        ),
        want_jobs={"b-old": run("p"), "b-new": preempt("a1"), "a1": run("p")},
    ),
    # b is within its quota: a (at its own quota) cannot reclaim, nor preempt its equal-priority job
    row(
        "kueue-does-not-reclaim-quota-that-is-not-borrowed",
        quotas={"a": 4, "b": 4},
        jobs=(
            Job("a0", 4, team="a", running_in="p"),
            Job("b1", 4, team="b", running_in="p"),
            Job("a1", 2, team="a"),
        ),
        want_jobs={"a0": run("p"), "b1": run("p"), "a1": hold()},
    ),
    # inference outranks batch: demand 3.5 needs 5 replicas; the lowest-weight job makes room
    row(
        "hpa-replicas-preempt-the-lowest-weight-batch",
        services=(Service("svc", replicas={"p": 2}, history=(3.5,)),),
        jobs=(Job("cheap", 4, weight=1, running_in="p"), Job("dear", 2, weight=5, running_in="p")),
        want_jobs={"cheap": preempt(), "dear": run("p")},
        want_services={"svc": Serve(replicas=5)},
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda r: r.id)
def test_kueue_hpa_decides(row: Scenario) -> None:
    run_scenario(row, horizon_steps=1)


@pytest.mark.parametrize("policy", [KueueHpaPolicy, ReactivePolicy])
def test_baselines_lend_burst_headroom_by_one_rule(policy: type) -> None:
    """Each service may add, within the step, the GPUs it was given; the preemptible jobs run in its
    pool borrow them (the in-step autoscaler takes those back first), a non-preemptible one does not."""
    case = Scenario(
        "burst",
        pools=(P8,),
        services=(Service("svc", replicas={"p": 2}, history=(1.4,)),),
        jobs=(Job("lend", 2, running_in="p"), Job("pinned", 2, running_in="p", preemptible=False)),
        policy=policy,
    )
    allocation = run_scenario(case, horizon_steps=1).allocation
    (svc,) = allocation.services
    assert svc.gpus == 2 and svc.burst_gpus == 2
    by_id = {d.job_id: d for d in allocation.jobs}
    assert by_id["lend"].action == JobAction.RUN and by_id["lend"].borrows_from == "svc"
    assert by_id["pinned"].borrows_from is None
