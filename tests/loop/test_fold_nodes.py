"""The state fold fills the node detail the planner places gangs with (pure, no broker).

Node names per pool and free GPUs per node come from GPU telemetry (its ``node`` field) less what
running jobs hold; a job's nodes come from the ``nodes`` of its started (or progress) JobEvent.
"""

from __future__ import annotations

from datetime import timedelta

from loop_factories import at, cluster, job, spec

from optimizer.inputs import running_job_nodes
from schemas import (
    Allocation,
    ClusterState,
    GpuSample,
    JobEvent,
    JobEventKind,
    JobStatus,
)
from simulator.cluster import Simulator
from simulator.policies.fifo import FifoPolicy
from simulator.scenario import Scenario
from streams.fold import ClusterFold
from streams.state_diff import events_between, gpu_samples_of, seed_of


def _bare_fold(state: ClusterState) -> ClusterFold:
    """A fold seeded without any node detail: all of it has to come from the events."""
    seed = seed_of(state)
    pools = [p.model_copy(update={"node_names": [], "free_gpus_by_node": []}) for p in seed.pools]
    return ClusterFold(seed=seed.model_copy(update={"pools": pools}))


def _telemetry(fold: ClusterFold, state: ClusterState) -> None:
    fold.apply_gpu_samples(list(gpu_samples_of(state)))


def _submit_and_start(fold: ClusterFold, job_id: str, gpus: int, nodes: dict[str, int] | None) -> None:
    assert fold.apply(
        JobEvent(
            cluster="c1",
            job_id=job_id,
            kind=JobEventKind.SUBMITTED,
            time=at(0),
            spec=spec(job_id, gpus=gpus),
        )
    )
    assert fold.apply(
        JobEvent(cluster="c1", job_id=job_id, kind=JobEventKind.STARTED, time=at(0), pool="a100", nodes=nodes)
    )


def test_started_job_holds_gpus_on_its_nodes_until_preempted() -> None:
    state = cluster(0)
    fold = _bare_fold(state)
    _telemetry(fold, state)
    _submit_and_start(fold, "j1", 10, {"a100-n0": 8, "a100-n1": 2})
    snap = fold.snapshot(at(0))
    a100 = snap.pools[0]
    assert a100.node_names == ["a100-n0", "a100-n1"]
    assert a100.free_gpus_by_node == [0, 6]
    assert snap.pools[1].free_gpus_by_node == [4, 4]  # t4: nothing runs there
    assert snap.jobs[0].nodes == {"a100-n0": 8, "a100-n1": 2}
    # The planner's view: job j1 sits on node indexes 0 and 1 of its pool.
    assert running_job_nodes(snap.pools, snap.jobs) == {"j1": {0: 8, 1: 2}}

    later = at(0) + timedelta(minutes=1)
    preempted = JobEvent(cluster="c1", job_id="j1", kind=JobEventKind.PREEMPTED, time=later)
    assert fold.apply(preempted)
    after = fold.snapshot(at(0))
    assert after.jobs[0].nodes == {} and after.jobs[0].status == JobStatus.QUEUED
    assert after.pools[0].free_gpus_by_node == [8, 8]


def test_a_job_started_without_placement_has_no_nodes_and_frees_nothing() -> None:
    state = cluster(0)
    fold = _bare_fold(state)
    _telemetry(fold, state)
    _submit_and_start(fold, "j1", 2, None)
    snap = fold.snapshot(at(0))
    assert snap.jobs[0].nodes == {}
    assert snap.pools[0].free_gpus_by_node == [8, 8]


def test_progress_moves_a_job_and_a_silent_node_drops_out() -> None:
    state = cluster(0)
    fold = _bare_fold(state)
    _telemetry(fold, state)
    _submit_and_start(fold, "j1", 2, {"a100-n0": 2})
    moved = JobEvent(
        cluster="c1",
        job_id="j1",
        kind=JobEventKind.PROGRESS,
        time=at(1),
        pool="a100",
        nodes={"a100-n1": 2},
    )
    assert fold.apply(moved)
    # Only node a100-n1 and the t4 nodes keep reporting into step 1; a100-n0 goes silent.
    later = cluster(1)
    fold.apply_gpu_samples([s for s in gpu_samples_of(later) if s.node != "a100-n0"])
    snap = fold.snapshot(at(1) + timedelta(seconds=1))
    a100 = snap.pools[0]
    assert a100.node_names == ["a100-n1"]
    assert a100.free_gpus_by_node == [6]
    assert a100.gpus_available == 8
    assert snap.jobs[0].nodes == {"a100-n1": 2}


def test_round_trip_keeps_nodes_through_start_move_and_preemption() -> None:
    states = [
        cluster(0, [job("j1", JobStatus.QUEUED, 0)]),
        cluster(1, [job("j1", JobStatus.RUNNING, 0, pool="a100", started_step=1, nodes={"a100-n0": 2})]),
        cluster(2, [job("j1", JobStatus.RUNNING, 0, pool="a100", started_step=1, nodes={"a100-n1": 2})]),
        cluster(3, [job("j1", JobStatus.QUEUED, 0, preemptions=1)], available=12),
        cluster(
            4, [job("j1", JobStatus.RUNNING, 0, pool="t4", started_step=4, preemptions=1, nodes={"t4-n1": 2})]
        ),
    ]
    fold = _bare_fold(states[0])
    previous = None
    for state in states:
        jobs, demand, gpus = events_between(previous, state)
        for event in [*jobs, *demand]:
            fold.apply(event)
        fold.apply_gpu_samples(gpus)
        snap = fold.snapshot(state.as_of)
        assert snap.pools == state.pools
        assert [(j.spec.job_id, j.nodes) for j in snap.jobs] == [(j.spec.job_id, j.nodes) for j in state.jobs]
        previous = state


def test_batch_fold_equals_one_by_one_and_skips_other_clusters() -> None:
    state = cluster(0)
    samples = list(gpu_samples_of(state)) + list(gpu_samples_of(cluster(1, available=8)))
    foreign = samples[0].model_copy(update={"cluster": "other", "gpu_uuid": "GPU-x"})
    one_by_one = ClusterFold(seed=seed_of(state))
    for sample in [*samples, foreign]:
        one_by_one.apply(sample)
    batched = ClusterFold(seed=seed_of(state))
    assert batched.apply_gpu_samples([*samples, foreign]) == len(samples)
    assert batched.counters.ignored == 1 and batched.counters.gpu_samples == len(samples)
    assert batched.gpu_seen == one_by_one.gpu_seen and batched.gpu_node == one_by_one.gpu_node
    assert batched.snapshot(at(1)) == one_by_one.snapshot(at(1))
    assert isinstance(foreign, GpuSample)


def test_simulated_cluster_node_detail_survives_the_wire() -> None:
    """The simulator's own snapshot (nodes up, free GPUs by node, jobs' nodes), sent as wire events
    and folded by the state service, gives the same node detail back, step after step."""
    scenario = Scenario.model_validate(
        {
            "name": "nodes",
            "seed": 3,
            "window_hours": 3,
            "quick_window_hours": 3,
            "pools": [{"name": "p", "gpu_type": "A100", "nodes": 3, "gpus_per_node": 4}],
            "services": [],
            "workload": {
                "explicit": [
                    {
                        "job_id": f"j{i}",
                        "at_hour": 0.25 * i,
                        "gpus": g,
                        "true_gpu_hours": 0.5 * g,
                        "estimated_gpu_hours": 0.5 * g,
                    }
                    for i, g in enumerate([3, 2, 4, 1, 6, 2])
                ]
            },
        }
    )
    sim = Simulator(scenario)
    policy = FifoPolicy()
    fold: ClusterFold | None = None
    previous = None
    compared = 0
    for _ in range(8):
        now = sim.clock.now()
        state = sim.snapshot(now)
        fold = fold or _bare_fold(state)
        jobs, demand, gpus = events_between(previous, state)
        for event in [*jobs, *demand]:
            fold.apply(event)
        fold.apply_gpu_samples(gpus)
        snap = fold.snapshot(now)
        assert [(p.node_names, p.free_gpus_by_node) for p in snap.pools] == [
            (p.node_names, p.free_gpus_by_node) for p in state.pools
        ]
        assert {j.spec.job_id: j.nodes for j in snap.jobs} == {j.spec.job_id: j.nodes for j in state.jobs}
        compared += sum(1 for j in state.jobs if j.nodes)
        decision = policy.decide(state, {}, now)
        allocation: Allocation = decision.allocation
        sim.apply(allocation)
        sim.advance()
        previous = state
    assert compared > 0  # some steps had running jobs placed on nodes
