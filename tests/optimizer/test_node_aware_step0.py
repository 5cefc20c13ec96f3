"""Node-aware step 0: with the nodes each running job holds, the planner stops the jobs that are
cheapest to lose to empty whole nodes for a gang, and backfills held nodes with work that ends
before they drain (EASY backfill). The planner's decisions are a scenario table (rows of
tests/scenario_table.py); below it, unit tests of the node book and the clearing search."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scenario_table import NOW, Job, Pool, Scenario, build_state, hold, preempt, run, run_scenario

from optimizer.inputs import running_job_nodes
from optimizer.node_clearing import Candidate, cheapest_clearing
from optimizer.nodes import NodeBook, place_gang, without
from optimizer.planner import PlannerPolicy
from schemas import JobAction

TWO_NODES_WITH_2_FREE = Pool("a", 16, gpus_per_node=8, free_by_node=(2, 2), node_names=("n0", "n1"))


def small_jobs(checkpoints_gpu_s: tuple[float, ...]) -> tuple[Job, ...]:
    """Three 2-GPU jobs of weight 1 on each node (small-0..2 on n0, small-3..5 on n1), each with
    the work it would lose if stopped now."""
    return tuple(
        Job(
            f"small-{i}",
            2,
            hours=6.0,
            running_in="a",
            nodes={"n0" if i < 3 else "n1": 2},
            restart_cost_s=60.0,
            since_checkpoint_gpu_s=lost,
            checkpoint_interval_s=3600.0,
        )
        for i, lost in enumerate(checkpoints_gpu_s)
    )


URGENT_GANG = Job("urgent", 8, weight=10.0, hours=2.0)


def six_gpu_jobs(hours_left: float) -> tuple[Job, ...]:
    """A 6-GPU job of weight 1 on each node (2 GPUs free on each), half an hour of work since its
    checkpoint, ending ``hours_left`` from now (it started two hours ago)."""
    return tuple(
        Job(
            f"wide-{i}",
            6,
            hours=2.0 + hours_left,
            running_in="a",
            nodes={node: 6},
            restart_cost_s=60.0,
            since_checkpoint_gpu_s=1800.0 * 6,
            checkpoint_interval_s=3600.0,
        )
        for i, node in enumerate(("n0", "n1"))
    )


SWEEP = Job("sweep", 4, weight=3.0, hours=2.0)

FOUR_FULL_NODES = Pool(
    "a", 32, gpus_per_node=8, free_by_node=(0, 0, 0, 0), node_names=("n0", "n1", "n2", "n3")
)


def node_jobs(hours_left: float) -> tuple[Job, ...]:
    """An 8-GPU job of weight 1 on each of four nodes (none free), checkpointing every half hour,
    a quarter of an hour of work since the checkpoint on n0 and n1, three quarters on n2 and n3."""
    return tuple(
        Job(
            f"node-{i}",
            8,
            hours=hours_left,
            running_in="a",
            nodes={f"n{i}": 8},
            restart_cost_s=600.0,
            since_checkpoint_gpu_s=3600.0 * 8 * lost,
            checkpoint_interval_s=1800.0,
        )
        for i, lost in enumerate((0.25, 0.25, 0.75, 0.75))
    )


TWO_NODE_GANG = Job("two-node", 16, weight=3.0, hours=4.0)

N1_GOES_OUT_IN_2H = Pool(
    "a", 16, gpus_per_node=8, free_by_node=(0, 8), node_names=("n0", "n1"), maintenance=((120, 600, ("n1",)),)
)
BUSY_N0 = Job("busy", 8, hours=10.0, running_in="a", nodes={"n0": 8})

SCENARIOS = [
    Scenario(
        "gang-starts-on-n1-whose-jobs-just-checkpointed",
        pools=(TWO_NODES_WITH_2_FREE,),
        jobs=(*small_jobs((3600.0, 3600.0, 3600.0, 0.0, 0.0, 0.0)), URGENT_GANG),
        want_jobs={
            "urgent": run("a"),
            **{f"small-{i}": run("a") for i in range(3)},
            **{f"small-{i}": preempt() for i in range(3, 6)},
        },
    ),
    Scenario(
        "gang-starts-on-n0-whose-jobs-just-checkpointed",
        pools=(TWO_NODES_WITH_2_FREE,),
        jobs=(*small_jobs((0.0, 0.0, 0.0, 3600.0, 3600.0, 3600.0)), URGENT_GANG),
        want_jobs={
            "urgent": run("a"),
            **{f"small-{i}": preempt() for i in range(3)},
            **{f"small-{i}": run("a") for i in range(3, 6)},
        },
    ),
    # node clearing is judged as any stop is (optimizer/stop_pays.py's clearing_pays): the sweep's
    # work an hour sooner is worth far less than the half hour of work a stop loses, so it holds
    # nodes and waits for them to drain
    Scenario(
        "gang-waits-for-nodes-that-drain-within-the-hour-rather-than-stop-a-job",
        pools=(TWO_NODES_WITH_2_FREE,),
        jobs=(*six_gpu_jobs(hours_left=1.0), SWEEP),
        want_jobs={"sweep": hold(), "wide-0": run("a"), "wide-1": run("a")},
    ),
    # ... but not where the hour's wait would push the sweep's work past its deadline
    Scenario(
        "gang-clears-a-node-where-waiting-for-it-would-miss-its-deadline",
        pools=(TWO_NODES_WITH_2_FREE,),
        jobs=(*six_gpu_jobs(hours_left=1.0), replace(SWEEP, deadline_min=150.0)),
        want_jobs={"sweep": run("a"), "wide-0": preempt(), "wide-1": run("a")},
    ),
    # ... nor where a hold would keep idle the node's 5 free GPUs for the hour it drains: the 3-GPU
    # job's half hour of lost work is worth less than those 5 GPU-hours
    Scenario(
        "gang-clears-a-node-whose-free-gpus-a-hold-would-keep-idle",
        pools=(Pool("a", 16, gpus_per_node=8, free_by_node=(5, 4), node_names=("n0", "n1")),),
        jobs=(
            *(
                Job(
                    f"narrow-{i}",
                    gpus,
                    hours=3.0,
                    running_in="a",
                    nodes={node: gpus},
                    restart_cost_s=60.0,
                    since_checkpoint_gpu_s=1800.0 * gpus,
                    checkpoint_interval_s=3600.0,
                )
                for i, (node, gpus) in enumerate((("n0", 3), ("n1", 4)))
            ),
            Job("wide-sweep", 8, weight=3.0, hours=2.0),
        ),
        want_jobs={"wide-sweep": run("a"), "narrow-0": preempt(), "narrow-1": run("a")},
    ),
    # the same stop pays where the nodes would not drain for ten hours
    Scenario(
        "gang-clears-a-node-whose-job-runs-for-ten-hours-more",
        pools=(TWO_NODES_WITH_2_FREE,),
        jobs=(*six_gpu_jobs(hours_left=10.0), SWEEP),
        want_jobs={"sweep": run("a"), "wide-0": preempt(), "wide-1": run("a")},
    ),
    # a gang of two nodes in a pool with no GPU free: the relaxed plan starts it on a part of the
    # GPUs, no rounding can run that, and its nodes would not drain for ten hours; clearing the two
    # nodes that lose least pays (it held before: 'planned to start' two hours on, every decision)
    Scenario(
        "two-node-gang-clears-the-nodes-that-lose-least-where-the-pool-has-no-gpu-free",
        pools=(FOUR_FULL_NODES,),
        jobs=(*node_jobs(hours_left=10.0), TWO_NODE_GANG),
        want_jobs={
            "two-node": run("a"),
            "node-0": preempt("cleared", "two-node"),
            "node-1": preempt("cleared", "two-node"),
            "node-2": run("a"),
            "node-3": run("a"),
        },
    ),
    # ... but waits where those nodes drain within half an hour
    Scenario(
        "two-node-gang-waits-for-nodes-that-drain-within-half-an-hour",
        pools=(FOUR_FULL_NODES,),
        jobs=(*node_jobs(hours_left=0.5), TWO_NODE_GANG),
        want_jobs={"two-node": hold(), **{f"node-{i}": run("a") for i in range(4)}},
    ),
    # a maintenance window that names n1 takes it out in two hours: work that would still run
    # then would be stopped with it, and loses its work since its checkpoint (all of it, where it
    # never checkpoints); work that ends before may use it
    Scenario(
        "a-job-that-would-run-into-maintenance-waits-for-a-node-that-stays",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("long", 8, hours=4.0)),
        want_jobs={
            "busy": run("a"),
            "long": hold(
                "nodes of pool a with room for its gang of 8 go out for maintenance",
                "runs 4.0 h",
                "node(s) n1 go from 14:00",
            ),
        },
    ),
    Scenario(
        "a-job-that-ends-before-maintenance-uses-the-node-meanwhile",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("short", 8, hours=1.5)),
        want_jobs={"busy": run("a"), "short": run("a")},
    ),
    # ... and while a heavier gang waits for a node that stays: the nodes held for it are those it
    # could run on (n0, as it drains), never the one going out, which the short job may use (it
    # was held for the gang with nothing to drain, so lighter work stayed off it)
    Scenario(
        "a-gang-that-waits-for-a-node-that-stays-holds-that-one-not-the-one-going-out",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("long", 8, weight=3.0, hours=4.0), Job("short", 8, hours=1.5)),
        want_jobs={
            "busy": run("a"),
            "long": hold("node(s) n1 go from 14:00", "node(s) n0 of pool a held for it as they drain"),
            "short": run("a"),
        },
    ),
    # a job that checkpoints loses at most an interval to the window, and keeps the work before it:
    # it runs on the node going out (rather than leave it idle until then) where its first
    # checkpoint comes before the window, and waits where it does not
    Scenario(
        "a-job-that-checkpoints-uses-a-node-going-out-until-the-window",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("long", 8, hours=4.0, checkpoint_interval_s=1800.0)),
        want_jobs={"busy": run("a"), "long": run("a")},
    ),
    Scenario(
        "a-job-whose-first-checkpoint-comes-after-the-window-waits",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("long", 8, hours=4.0, checkpoint_interval_s=3 * 3600.0)),
        want_jobs={
            "busy": run("a"),
            "long": hold(
                "go out for maintenance before its first checkpoint",
                "it runs 4.0 h, first checkpoint after 3.0 h; node(s) n1 go from 14:00",
            ),
        },
    ),
    # ... unless the cluster's time limit runs past the window: Slurm starts a job on a node with
    # maintenance ahead only if its limit ends before it, so the plan counts the limit there
    Scenario(
        "a-short-job-whose-time-limit-runs-into-maintenance-waits",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("short", 8, hours=1.5, time_limit_h=3.0)),
        want_jobs={
            "busy": run("a"),
            "short": hold("it runs 1.5 h, time limit 3.0 h; node(s) n1 go from 14:00"),
        },
    ),
    Scenario(
        "a-job-that-checkpoints-but-whose-time-limit-runs-into-maintenance-waits",
        pools=(N1_GOES_OUT_IN_2H,),
        jobs=(BUSY_N0, Job("long", 8, hours=4.0, checkpoint_interval_s=1800.0, time_limit_h=5.0)),
        want_jobs={
            "busy": run("a"),
            "long": hold("it runs 4.0 h, time limit 5.0 h; node(s) n1 go from 14:00"),
        },
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda row: row.id)
def test_node_aware_step0_decides(row: Scenario) -> None:
    run_scenario(row)


def test_running_job_nodes_map_names_to_free_list_indices() -> None:
    cluster = build_state(SCENARIOS[0])
    placed = running_job_nodes(cluster.pools, cluster.jobs)
    assert placed["small-0"] == {0: 2}
    assert placed["small-5"] == {1: 2}
    assert "urgent" not in placed


def test_cheapest_clearing_repacks_inference_and_respects_limits() -> None:
    # node 0: one job (cost 5); node 1: two jobs (cost 1 + 1); node 2: 4 GPUs of a pinned job
    candidates = [Candidate(0, {0: 8}, 5.0), Candidate(1, {1: 4}, 1.0), Candidate(2, {1: 4}, 1.0)]
    job_free = [0, 0, 4]
    chosen = cheapest_clearing(job_free, 0, 8, 8, candidates, budget_jobs=4)
    assert chosen is not None and sorted(c.job for c in chosen) == [1, 2]
    # four GPUs of inference take node 2's free GPUs, so one emptied node is still enough
    assert cheapest_clearing(job_free, 4, 8, 8, candidates, budget_jobs=4) is not None
    # one emptied node plus the room inference leaves is not enough for 16 GPUs with 8 of inference
    assert cheapest_clearing(job_free, 8, 8, 16, candidates, budget_jobs=4) is None
    assert cheapest_clearing(job_free, 0, 8, 8, candidates, budget_jobs=1) is None


def test_held_nodes_take_backfill_that_ends_before_they_drain() -> None:
    book = NodeBook([[4, 8, 2]], [8])
    book.note_running(0, {0: 4}, run_s=3600.0)  # node 0 drains in an hour
    book.note_running(0, {2: 6}, run_s=7200.0)
    assert book.hold(0, 16, weight=10.0) == (1, 0)  # the empty node, then the one that drains first
    assert not book.fits(0, 4, weight=1.0, run_s=7200.0)  # would delay the gang
    assert book.take(0, 4, weight=1.0, run_s=1800.0) == {0: 4}  # ends before the shadow time


def test_nodes_going_out_take_only_work_that_ends_before() -> None:
    book = NodeBook([[8, 8, 2]], [8], [{1: 3600.0}])  # node 1 goes out for maintenance in an hour
    assert book.take(0, 8, run_s=7200.0) == {0: 8}  # not node 1
    assert not book.fits(0, 8, run_s=7200.0)
    assert book.fits_but_for_maintenance(0, 8, run_s=7200.0)
    assert book.take(0, 8, run_s=1800.0) == {1: 8}
    assert not book.fits_but_for_maintenance(0, 2, run_s=7200.0)  # node 2 takes it


def test_work_that_may_lose_nodes_going_out_takes_nodes_that_stay_first() -> None:
    book = NodeBook([[8, 8]], [8], [{1: 3600.0}])  # node 1 goes out in an hour
    # a job of two hours that checkpoints within half an hour may lose node 1 at the window ...
    assert book.fits(0, 16, run_s=7200.0, out_s=1800.0) and not book.fits(0, 16, run_s=7200.0)
    # ... but goes where it keeps its nodes for its whole run while it fits there
    assert book.take(0, 8, run_s=7200.0, out_s=1800.0) == {0: 8}
    assert book.take(0, 8, run_s=7200.0, out_s=1800.0) == {1: 8}


def test_released_gangs_go_back_on_their_own_nodes() -> None:
    book = NodeBook([[0, 2]], [8])
    assert book.release(0, 8, {0: 6, 1: 2}) == [0, 1]
    assert book.free[0] == [6, 4]
    assert book.release(0, 8, None) == [2]  # unknown nodes: counted as a node of its own
    assert book.free[0] == [6, 4, 8]


BOTH_FREE_N1_GOES_OUT = Pool(
    "a", 16, gpus_per_node=8, free_by_node=(8, 8), node_names=("n0", "n1"), maintenance=((120, 600, ("n1",)),)
)


def test_a_job_started_where_a_node_goes_out_before_it_ends_is_told_to_avoid_it() -> None:
    row = Scenario(
        "x", pools=(BOTH_FREE_N1_GOES_OUT,), jobs=(Job("long", 8, hours=4.0), Job("short", 8, hours=1.0))
    )
    decisions = {d.job_id: d for d in PlannerPolicy().decide(build_state(row), {}, NOW).allocation.jobs}
    assert (decisions["long"].action, decisions["long"].avoid_nodes) == (JobAction.RUN, ["n1"])
    assert (decisions["short"].action, decisions["short"].avoid_nodes) == (JobAction.RUN, []), "ends before"


def test_a_job_that_checkpoints_before_a_window_is_not_kept_off_its_nodes() -> None:
    jobs = (Job("ckpt", 8, hours=4.0, checkpoint_interval_s=1800.0),)
    decisions = PlannerPolicy().decide(
        build_state(Scenario("x", pools=(BOTH_FREE_N1_GOES_OUT,), jobs=jobs)), {}, NOW
    )
    (ckpt,) = decisions.allocation.jobs
    assert (ckpt.action, ckpt.avoid_nodes) == (JobAction.RUN, []), "a window loses it at most an interval"


def test_a_start_kept_off_nodes_is_listed_before_the_starts_that_may_take_its_room() -> None:
    # step 0 places the heavier "long" first, on n0 (n1 goes out before it would end), and "short" on
    # n1; the cluster places what it is released in the Allocation's order, best fit: "short" first
    # would take n0
    row = Scenario(
        "x",
        pools=(BOTH_FREE_N1_GOES_OUT,),
        jobs=(Job("short", 8, hours=1.0), Job("long", 8, weight=2.0, hours=4.0)),
    )
    starts = [
        d
        for d in PlannerPolicy().decide(build_state(row), {}, NOW).allocation.jobs
        if d.action == JobAction.RUN
    ]
    assert [d.job_id for d in starts] == ["long", "short"]
    free = [8, 8]
    for d in starts:
        placed = place_gang(without(free, {("n0", "n1").index(n) for n in d.avoid_nodes}), d.gpus, 8)
        assert placed is not None, d
        for node, gpus in placed.items():
            free[node] -= gpus


def test_a_start_kept_off_nodes_is_placed_before_an_equal_one_that_may_use_any() -> None:
    # equal weights, "short" first in the state: placed first, it would take n0, the one node
    # "long" may use, and "long" would wait; placed second, it takes n1
    row = Scenario(
        "x", pools=(BOTH_FREE_N1_GOES_OUT,), jobs=(Job("short", 8, hours=1.0), Job("long", 8, hours=4.0))
    )
    decisions = {d.job_id: d for d in PlannerPolicy().decide(build_state(row), {}, NOW).allocation.jobs}
    assert (decisions["long"].action, decisions["long"].avoid_nodes) == (JobAction.RUN, ["n1"])
    assert decisions["short"].action == JobAction.RUN


def test_no_nodes_are_held_for_a_gang_its_team_quota_keeps_out() -> None:
    # team c's 8-GPU gang is over its quota of 4 and no idle quota lends it the rest: nodes drained
    # for it would only idle (no-services, a held-out workload with a gang twice its team's quota:
    # PWT 0.501 -> 0.507 and 0.354 -> 0.370 of priority-backfill's with this)
    team_d = {"team": "d", "checkpoint_interval_s": 1800.0}
    row = Scenario(
        "x",
        pools=(Pool("a", 16, free_by_node=(4, 4), node_names=("n0", "n1")),),
        quotas={"c": 4, "d": 12},
        jobs=(
            Job("d-0", 4, hours=3.0, running_in="a", nodes={"n0": 4}, **team_d),
            Job("d-1", 4, hours=6.0, running_in="a", nodes={"n1": 4}, **team_d),
            Job("wide", 8, weight=4.0, hours=3.0, team="c"),
            Job("small", 4, hours=4.0, team="d"),
        ),
    )
    policy = PlannerPolicy()
    decisions = {d.job_id: d for d in policy.decide(build_state(row), {}, NOW).allocation.jobs}
    assert decisions["wide"].action == JobAction.HOLD and "team c is at its quota" in decisions["wide"].reason
    assert policy._holds == {}
    assert decisions["small"].action == JobAction.RUN


def test_starts_keep_off_the_nodes_held_for_a_heavier_gang() -> None:
    # non-preemptible jobs leave 2, 2 and 4 GPUs free on n0, n1, n2; n0's ends first. A weight-3
    # gang of 8 fits no node and holds n0 as it drains. An eight-hour backfill goes on another node
    # and the cluster is told to keep it off n0 (placed there, best fit, it would keep n0 from
    # draining); a quarter-hour backfill ends before n0 drains, runs on it and is kept off nothing
    pool = Pool("a", 24, gpus_per_node=8, free_by_node=(2, 2, 4), node_names=("n0", "n1", "n2"))
    pinned = tuple(
        Job(f"pinned-{i}", gpus, hours=hours, running_in="a", nodes={f"n{i}": gpus}, preemptible=False)
        for i, (gpus, hours) in enumerate(((6, 1.0), (6, 6.0), (4, 6.0)))
    )
    jobs = (
        *pinned,
        Job("gang", 8, weight=3.0, hours=4.0),
        Job("long", 2, hours=8.0),
        Job("short", 2, hours=0.25),
    )
    decide = PlannerPolicy().decide(build_state(Scenario("x", pools=(pool,), jobs=jobs)), {}, NOW)
    decisions = {d.job_id: d for d in decide.allocation.jobs}
    assert decisions["gang"].action == JobAction.HOLD
    # n0 drains when pinned-0 ends by its estimate, an hour from now; the plan counts the pool's
    # GPUs (not its nodes) and would start the gang sooner, so the reason says it waits for the nodes
    assert decisions["gang"].reason.startswith("held: to start once the nodes held for it have drained;")
    assert "node(s) n0 of pool a held for it as they drain (by 13:00 by their jobs' estimates)" in (
        decisions["gang"].reason
    )
    assert (decisions["long"].action, decisions["long"].avoid_nodes) == (JobAction.RUN, ["n0"])
    assert (decisions["short"].action, decisions["short"].avoid_nodes) == (JobAction.RUN, []), "ends before"
