"""Preemption that pays for itself (optimizer/stop_pays.py, used by optimizer/step0.py): a stop the
relaxed plan asks for happens only when the higher-weight start it makes room for gains more over
its wait for GPUs to free by themselves than the stop loses; never for work of equal or lower
weight; never within the minimum run of the job's (re)start. Unit tests on the rule's inputs, then
the planner's own decisions (scenario table rows)."""

from __future__ import annotations

import numpy as np
import pytest
from scenario_table import Job, Pool, Scenario, build_state, hold, preempt, run, run_scenario

from optimizer.config import PlannerConfig
from optimizer.inputs import PlanInputs, build_inputs
from optimizer.stop_pays import StopRules, clearing_pays, judge_stops, natural_wait_s

RULES = StopRules(min_run_s=1800.0, penalty_gpu_s=360.0, earliness=0.75)


def _inputs(jobs: tuple[Job, ...], gpus: int = 8) -> PlanInputs:
    state = build_state(Scenario("case", pools=(Pool("a", gpus),), jobs=jobs))
    return build_inputs(state, {}, state.as_of, PlannerConfig())


def _victims(inputs: PlanInputs, starts: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(share0 with the given waiting jobs' shares in pool a, the index of job 'victim')."""
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    for job_id, share in starts.items():
        share0[inputs.job_ids.index(job_id), 0] = share
    return share0, np.asarray([inputs.job_ids.index("victim")])


def _kept(jobs: tuple[Job, ...], starts: dict[str, float]) -> bool:
    """Whether the rule keeps 'victim' running (its stop does not pay)."""
    inputs = _inputs(jobs)
    share0, wants_out = _victims(inputs, starts)
    free0 = np.asarray([8.0])
    kept = judge_stops(inputs, share0, wants_out, free0, RULES).kept
    return kept.tolist() == wants_out.tolist()


def _full_pool(victim: Job, others_hours: float) -> tuple[Job, ...]:
    """The victim (1 GPU) and seven 1-GPU jobs of weight 1 filling the 8-GPU pool."""
    others = tuple(Job(f"other-{i}", 1, hours=others_hours, running_in="a") for i in range(7))
    return (victim, *others)


LONG_VICTIM = Job("victim", 1, hours=10.0, running_in="a", started_min_ago=120.0)


def test_a_stop_that_pays_happens() -> None:
    # the weight-10 job would wait 10 h for a GPU: that gains far more than the stop loses
    jobs = (*_full_pool(LONG_VICTIM, 10.0), Job("urgent", 1, weight=10.0))
    assert not _kept(jobs, {"urgent": 1.0})


def test_no_stop_for_work_of_equal_weight() -> None:
    jobs = (*_full_pool(LONG_VICTIM, 10.0), Job("same", 1, weight=1.0))
    assert _kept(jobs, {"same": 1.0})


def test_no_stop_whose_loss_exceeds_the_gain() -> None:
    # a GPU frees by itself in 6 minutes; the victim would lose an hour of work since its checkpoint
    victim = Job("victim", 1, hours=10.0, running_in="a", since_checkpoint_gpu_s=3600.0)
    jobs = (*_full_pool(victim, 0.1), Job("heavier", 1, weight=2.0))
    assert _kept(jobs, {"heavier": 1.0})
    # with no work at risk and the others running for 10 h, the same start pays
    jobs = (*_full_pool(LONG_VICTIM, 10.0), Job("heavier", 1, weight=2.0))
    assert not _kept(jobs, {"heavier": 1.0})


def test_the_gain_grows_with_the_wait_it_saves() -> None:
    # a weight-2 start that would wait 1 h gains 1 x 1 GPU x 1 h x 0.75 x 1/24 = 113 GPU-s:
    # less than the victim's 600 GPU-s since its checkpoint plus the penalty; a 10-h wait pays
    victim = Job("victim", 1, hours=10.0, running_in="a", since_checkpoint_gpu_s=600.0)
    assert _kept((*_full_pool(victim, 1.0), Job("heavier", 1, weight=2.0)), {"heavier": 1.0})
    assert not _kept((*_full_pool(victim, 10.0), Job("heavier", 1, weight=2.0)), {"heavier": 1.0})


def test_no_stop_within_the_minimum_run() -> None:
    fresh = Job("victim", 1, hours=10.0, running_in="a", started_min_ago=10.0)
    jobs = (*_full_pool(fresh, 10.0), Job("urgent", 1, weight=10.0))
    assert _kept(jobs, {"urgent": 1.0})


def test_no_stop_when_nothing_starts_in_its_pool() -> None:
    jobs = (*_full_pool(LONG_VICTIM, 10.0), Job("urgent", 1, weight=10.0))
    assert _kept(jobs, {})


def test_natural_wait_counts_idle_gpus_then_jobs_ending() -> None:
    jobs = (
        Job("victim", 2, hours=10.0, running_in="a"),
        Job("short", 2, hours=1.0, running_in="a"),
        Job("long", 2, hours=5.0, running_in="a"),
    )
    inputs = _inputs(jobs)
    free0 = np.asarray([8.0])  # 6 GPUs busy: 2 idle
    assert natural_wait_s(inputs, free0, 0, 2.0) == 0.0
    assert natural_wait_s(inputs, free0, 0, 4.0) == pytest.approx(3600.0)
    assert natural_wait_s(inputs, free0, 0, 6.0) == pytest.approx(5 * 3600.0)
    # the victim's own end counts too: its GPUs free in 10 h without a stop
    assert natural_wait_s(inputs, free0, 0, 8.0) == pytest.approx(10 * 3600.0)
    # more than the pool has never frees
    assert natural_wait_s(inputs, free0, 0, 10.0) == pytest.approx(float(inputs.blocks.dur_s.sum()))


def test_two_stops_are_not_paid_for_by_the_same_wait() -> None:
    # two 4-GPU jobs fill the pool for 10 h; a weight-10 start of 4 GPUs needs one of them: the
    # cheaper stop (nothing since its checkpoint) pays, and with its GPUs free the start no longer
    # waits, so the other (an hour of work at risk) is kept
    jobs = (
        Job("cheap", 4, hours=10.0, running_in="a"),
        Job("costly", 4, hours=10.0, running_in="a", since_checkpoint_gpu_s=4 * 3600.0),
        Job("urgent", 4, weight=10.0),
    )
    inputs = _inputs(jobs)
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    share0[inputs.job_ids.index("urgent"), 0] = 1.0
    both = np.asarray(sorted(inputs.job_ids.index(j) for j in ("cheap", "costly")))
    kept = judge_stops(inputs, share0, both, np.asarray([8.0]), RULES).kept
    assert [inputs.job_ids[j] for j in kept] == ["costly"]
    # a start of 8 GPUs needs both: the first stop does not make room for it, so both pay
    inputs = _inputs((*jobs[:2], Job("urgent", 8, weight=10.0)))
    share0[inputs.job_ids.index("urgent"), 0] = 1.0
    kept = judge_stops(inputs, share0, both, np.asarray([8.0]), RULES).kept
    assert kept.size == 0


def test_no_stop_of_a_job_that_ends_soon_by_itself() -> None:
    # the pool's other jobs run 10 h, the victim ends in 30 min: the weight-10 start would wait
    # 30 min, which gains 9 x 1 GPU x 0.5 h x 0.75 x 0.5/24 = 253 GPU-s, less than the stop's
    # penalty (360 GPU-s); the same victim running 10 h more is stopped
    ending = Job("victim", 1, hours=0.5, running_in="a", started_min_ago=120.0)
    assert _kept((*_full_pool(ending, 10.0), Job("urgent", 1, weight=10.0)), {"urgent": 1.0})
    assert not _kept((*_full_pool(LONG_VICTIM, 10.0), Job("urgent", 1, weight=10.0)), {"urgent": 1.0})


def _checkpointing_victim(gpus: int, since_gpu_s: float, *, interval_s: float, hours: float = 10.0) -> Job:
    return Job(
        "victim",
        gpus,
        hours=hours,
        running_in="a",
        since_checkpoint_gpu_s=since_gpu_s,
        checkpoint_interval_s=interval_s,
    )


def test_a_stop_waits_for_a_checkpoint_within_the_step() -> None:
    # 1,500 of the victim's 1,800 s between checkpoints are done: stopped at the next decision it
    # loses none of them. A weight-2 start that would wait 10 h gains 1 x 1 GPU x 10 h x 0.75 x
    # 10/24 = 11,250 GPU-s, more than the stop costs now (1,500 + 360), but waiting the one step
    # costs it only 556: the stop waits. A weight-10 start loses 5,006 by that step: stopped now
    victim = _checkpointing_victim(1, 1500.0, interval_s=1800.0)
    assert _kept((*_full_pool(victim, 10.0), Job("heavier", 1, weight=2.0)), {"heavier": 1.0})
    inputs = _inputs((*_full_pool(victim, 10.0), Job("heavier", 1, weight=2.0)))
    share0, wants_out = _victims(inputs, {"heavier": 1.0})
    judged = judge_stops(inputs, share0, wants_out, np.asarray([8.0]), RULES)
    assert judged.awaiting_checkpoint == {inputs.job_ids.index("victim")}
    assert not _kept((*_full_pool(victim, 10.0), Job("urgent", 1, weight=10.0)), {"urgent": 1.0})
    # its next checkpoint 35 min away (an hour between them): the stop does not wait for it
    later = _checkpointing_victim(1, 1500.0, interval_s=3600.0)
    assert not _kept((*_full_pool(later, 10.0), Job("heavier", 1, weight=2.0)), {"heavier": 1.0})


def test_node_clearing_waits_for_a_checkpoint_within_the_step() -> None:
    # an 8-GPU weight-1 victim fills the node a weight-3 gang of 8 needs (no GPU idles while it
    # waits); the gang would wait 6 h: clearing gains 2 x 8 GPUs x 6 h x 0.75 x 6/24 = 64,800
    # GPU-s against 12,000 lost since the checkpoint and 2,880 of penalty, but the victim
    # checkpoints within the step and a step's wait costs the gang 5,288: the clearing waits
    for interval_s, clears in ((1800.0, False), (3600.0, True)):
        victim = _checkpointing_victim(8, 12000.0, interval_s=interval_s, hours=6.0)
        inputs = _inputs((victim, Job("gang", 8, weight=3.0, hours=2.0)))
        gang, hit = inputs.job_ids.index("gang"), inputs.job_ids.index("victim")
        assert clearing_pays(inputs, gang, [hit], 6 * 3600.0, RULES) is clears


ONE_NODE = Pool("a", 8)
URGENT = Job("urgent", 8, weight=10.0, hours=2.0)

SCENARIOS = [
    Scenario(
        "a-long-running-low-weight-job-gives-way-to-urgent-work",
        pools=(ONE_NODE,),
        jobs=(Job("low", 8, hours=10.0, running_in="a", started_min_ago=120.0), URGENT),
        want_jobs={"low": preempt(), "urgent": run("a")},
    ),
    Scenario(
        # it frees the node by itself in 30 min: the urgent gang waits for it rather than restart it
        "a-low-weight-job-about-to-end-is-not-stopped-for-urgent-work",
        pools=(ONE_NODE,),
        jobs=(Job("low", 8, hours=0.5, running_in="a", started_min_ago=120.0), URGENT),
        want_jobs={"low": run("a"), "urgent": hold()},
    ),
    Scenario(
        "a-job-started-ten-minutes-ago-is-not-stopped-again",
        pools=(ONE_NODE,),
        jobs=(Job("low", 8, hours=10.0, running_in="a", started_min_ago=10.0), URGENT),
        want_jobs={"low": run("a"), "urgent": hold()},
    ),
    Scenario(
        "no-swap-for-work-of-the-same-weight",
        pools=(ONE_NODE,),
        jobs=(
            Job("running", 8, hours=10.0, running_in="a", started_min_ago=120.0),
            Job("waiting", 8, weight=1.0, hours=1.0, submitted_min_ago=600.0),
        ),
        want_jobs={"running": run("a"), "waiting": hold()},
    ),
]


# n0: one 1-GPU job, 7 GPUs free (held for the gang as n0 drains); n1: a non-preemptible 4-GPU job
TWO_NODES = Pool("a", 16, gpus_per_node=8, free_by_node=(7, 4), node_names=("n0", "n1"))
PINNED_ON_N1 = Job("pinned", 4, hours=6.0, running_in="a", nodes={"n1": 4}, preemptible=False)
HEAVY_GANG = Job("gang", 8, weight=3.0, hours=2.0)


def _checkpointing_low(interval_s: float) -> Job:
    return Job(
        "low", 8, hours=2.0, running_in="a", since_checkpoint_gpu_s=12000.0, checkpoint_interval_s=interval_s
    )


def _small_on_n0(**kw: object) -> Job:
    return Job("small", 1, hours=6.0, running_in="a", nodes={"n0": 1}, **kw)  # type: ignore[arg-type]


SCENARIOS += [
    Scenario(
        # the 8-GPU weight-1 job frees the node in 2 h: stopping it for the weight-10 job pays
        # (9 x 8 GPUs x 2 h x 0.75 x 2/24 = 32,400 GPU-s against 12,000 lost and 2,880 of penalty),
        # but it checkpoints within the step (1,500 of its 1,800 s done) and the step's wait costs
        # the start 7,594: the stop waits, and its reason says so
        "a-stop-waits-for-a-checkpoint-within-the-step-and-says-so",
        pools=(ONE_NODE,),
        jobs=(_checkpointing_low(1800.0), URGENT),
        want_jobs={
            "low": run("a", "the stop waits for the checkpoint it writes within the step"),
            "urgent": hold(),
        },
    ),
    Scenario(
        # the same job with an hour between checkpoints (the next 35 min away) is stopped now
        "a-stop-does-not-wait-for-a-checkpoint-beyond-the-step",
        pools=(ONE_NODE,),
        jobs=(_checkpointing_low(3600.0), URGENT),
        want_jobs={"low": preempt("go to job urgent"), "urgent": run("a")},
    ),
    Scenario(
        # a weight-3 gang, and 7 of n0's GPUs would idle 6 h for it: clearing n0 pays
        "node-clearing-for-a-heavier-gang-where-the-nodes-would-idle",
        pools=(TWO_NODES,),
        jobs=(_small_on_n0(checkpoint_interval_s=1800.0), PINNED_ON_N1, HEAVY_GANG),
        want_jobs={"small": preempt("cleared for job gang", "above its own weight 1"), "gang": run("a")},
    ),
    Scenario(
        # the same nodes for a gang of the small job's own weight: never cleared
        "no-node-clearing-for-a-gang-of-equal-weight",
        pools=(TWO_NODES,),
        jobs=(_small_on_n0(checkpoint_interval_s=1800.0), PINNED_ON_N1, Job("gang", 8, hours=2.0)),
        want_jobs={"small": run("a"), "gang": hold()},
    ),
    Scenario(
        "no-node-clearing-of-a-job-that-cannot-checkpoint",
        pools=(TWO_NODES,),
        jobs=(_small_on_n0(), PINNED_ON_N1, HEAVY_GANG),
        want_jobs={"small": run("a"), "gang": hold()},
    ),
    Scenario(
        "no-node-clearing-within-the-minimum-run",
        pools=(TWO_NODES,),
        jobs=(_small_on_n0(checkpoint_interval_s=1800.0, started_min_ago=10.0), PINNED_ON_N1, HEAVY_GANG),
        want_jobs={"small": run("a"), "gang": hold()},
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda row: row.id)
def test_the_planner_stops_only_what_pays(row: Scenario) -> None:
    run_scenario(row)
