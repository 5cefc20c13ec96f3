"""The Slurm actuator against real Slurm daemons (slurmctld + 4 slurmd, 2 partitions, fake GPUs)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from slurm_cluster import SlurmCluster

from actuators.engine import ActuationEngine, RetryPolicy, results_by_target
from actuators.slurm import SlurmBackend, SlurmCli, reservation_name
from actuators.slurm.backend import slurm_time
from actuators.slurm.rest import SlurmRest
from schemas import Allocation, JobEventKind

pytestmark = pytest.mark.slurm

FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.2, max_delay_s=1.0)


def make_actuator(
    cluster: SlurmCluster, grace_s: float = 1.0, **kwargs: Any
) -> tuple[ActuationEngine, SlurmBackend]:
    backend = SlurmBackend(
        SlurmCli(env={"SLURM_CONF": str(cluster.conf)}), cluster="test", checkpoint_grace_s=grace_s
    )
    return ActuationEngine(backend, "test", retry=FAST_RETRY, **kwargs), backend


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def phase_of(backend: SlurmBackend, job_id: str) -> str:
    return backend.observe().jobs[job_id].phase


def test_pending_job_released_only_when_allocation_says_run(slurm_cluster, make_allocation) -> None:
    kept = slurm_cluster.submit("same-name", "pool-a", gpus=2)
    moved = slurm_cluster.submit("same-name", "pool-a", gpus=4)  # matched by id: names may repeat
    job_kept, job_moved = f"test-{kept}", f"test-{moved}"
    actuator, backend = make_actuator(slurm_cluster)
    assert phase_of(backend, job_kept) == "held"

    allocation = make_allocation(
        "plan-1", jobs=[(job_kept, "hold", None, 0), (job_moved, "run", "pool-b", 4)]
    )
    results = results_by_target(actuator.apply(allocation))

    assert results[f"job/{job_kept}"].outcome == "applied", "held already: only the decision noted"
    assert results[f"job/{job_moved}"].outcome == "applied"
    wait_for(lambda: phase_of(backend, job_moved) == "running", what="job-moved to start")
    observed = backend.observe()
    assert observed.jobs[job_moved].pool == "pool-b", "moved to the allocation's partition before release"
    assert observed.jobs[job_moved].backend_id == str(moved)
    assert observed.jobs[job_moved].plan_id == "plan-1"
    assert observed.jobs[job_moved].gpus == 4
    assert observed.gpus_free["pool-b"] == 12
    time.sleep(2.5)  # a scheduler cycle: the held job must stay pending
    assert phase_of(backend, job_kept) == "held"
    assert backend.observe().jobs[job_kept].backend_id == str(kept)
    comment = slurm_cluster.run("squeue", "-h", "-j", str(kept), "-o", "%k").stdout.strip()
    assert comment == "ebbtide-decision: hold: test (plan=plan-1)"
    again = make_allocation("plan-2", jobs=[(job_kept, "hold", None, 0)])
    assert actuator.apply(again)[0].outcome == "already-applied", "same reason: the note is not rewritten"


def test_running_preemptible_job_requeued_after_checkpoint_signal(slurm_cluster, make_allocation) -> None:
    train = f"test-{slurm_cluster.submit('job-train', 'pool-a', gpus=8, hold=False)}"
    actuator, backend = make_actuator(slurm_cluster, grace_s=1.0)
    wait_for(lambda: phase_of(backend, train) == "running", what="job-train to start")
    _, events = actuator.observe_events()
    assert [(e.job_id, e.kind) for e in events] == [(train, JobEventKind.STARTED)]
    # where it runs: one of pool-a's nodes, all 8 GPUs of it (the state service's node detail)
    (node_gpus,) = events[0].nodes.items()
    assert node_gpus[0] in {"a1", "a2"} and node_gpus[1] == 8

    results = actuator.apply(make_allocation("plan-p", jobs=[(train, "preempt", None, 0)]))

    assert [(r.target, r.action, r.outcome) for r in results] == [(f"job/{train}", "preempt", "applied")]
    assert slurm_cluster.checkpoint_marker("job-train").exists(), "checkpoint signal reached the job"
    wait_for(lambda: phase_of(backend, train) == "held", what="job-train requeued and held")
    _, events = actuator.observe_events()
    assert [(e.job_id, e.kind) for e in events] == [(train, JobEventKind.PREEMPTED)]
    assert backend.observe().gpus_free["pool-a"] == 16
    # Replaying the preempt changes nothing; a later 'run' starts it again.
    again = actuator.apply(make_allocation("plan-p", jobs=[(train, "preempt", None, 0)]))
    assert again[0].outcome == "already-applied"
    actuator.apply(make_allocation("plan-r", jobs=[(train, "run", "pool-a", 8)]))
    wait_for(lambda: phase_of(backend, train) == "running", what="job-train to restart")


def kept_off(allocation: Allocation, nodes: list[str]) -> Allocation:
    """The allocation with every job decision keeping off ``nodes``."""
    jobs = [j.model_copy(update={"avoid_nodes": nodes}) for j in allocation.jobs]
    return allocation.model_copy(update={"jobs": jobs})


def test_a_start_keeps_off_the_nodes_it_avoids_and_the_users_own_exclusions_stay(
    slurm_cluster, make_allocation
) -> None:
    sid = slurm_cluster.submit("kept-off", "pool-a", gpus=8, comment="ebbtide: est_gpu_h=4")
    slurm_cluster.run("scontrol", "update", f"JobId={sid}", "ExcNodeList=a1")  # the user's own
    job = f"test-{sid}"
    actuator, backend = make_actuator(slurm_cluster, grace_s=0.0)

    def squeue(field: str) -> str:
        return slurm_cluster.run("squeue", "-h", "-j", str(sid), "-o", field).stdout.strip()

    actuator.apply(kept_off(make_allocation("plan-1", jobs=[(job, "run", "pool-b", 8)]), ["b1"]))
    wait_for(lambda: phase_of(backend, job) == "running", what="kept-off to start")
    assert set(backend.observe().jobs[job].nodes) == {"b2"}, "placed off the node held for another gang"
    assert (
        squeue("%k")
        == "ebbtide: est_gpu_h=4 | ebbtide-excluded: b1 | ebbtide-decision: run: test (plan=plan-1)"
    )
    assert {
        r.outcome for r in actuator.apply(make_allocation("plan-1", jobs=[(job, "run", "pool-b", 8)]))
    } == {"already-applied"}, "a running job is not touched"

    actuator.apply(make_allocation("plan-2", jobs=[(job, "preempt", None, 0)]))
    wait_for(lambda: phase_of(backend, job) == "held", what="kept-off requeued and held")
    assert "ebbtide-excluded: b1" in squeue("%k"), "the record stays while the exclusion does"
    actuator.apply(kept_off(make_allocation("plan-3", jobs=[(job, "run", "pool-b", 8)]), ["b2"]))
    wait_for(lambda: phase_of(backend, job) == "running", what="kept-off to restart")
    assert set(backend.observe().jobs[job].nodes) == {"b1"}
    assert (
        squeue("%k")
        == "ebbtide: est_gpu_h=4 | ebbtide-excluded: b2 | ebbtide-decision: run: test (plan=plan-3)"
    )

    actuator.apply(make_allocation("plan-4", jobs=[(job, "preempt", None, 0)]))
    wait_for(lambda: phase_of(backend, job) == "held", what="kept-off held again")
    actuator.apply(make_allocation("plan-5", jobs=[(job, "run", "pool-b", 8)]))
    wait_for(lambda: phase_of(backend, job) == "running", what="kept-off to run anywhere in pool-b")
    jobs = json.loads(slurm_cluster.run("squeue", "--json").stdout)["jobs"]
    assert [j["excluded_nodes"] for j in jobs if j["job_id"] == sid] == ["a1"], "only the user's own left"
    assert squeue("%k") == "ebbtide: est_gpu_h=4 | ebbtide-decision: run: test (plan=plan-5)"


def test_a_released_job_still_waiting_follows_the_nodes_each_step_avoids(
    slurm_cluster, make_allocation
) -> None:
    for node in ("b1", "b2"):  # pool-b full: the released job waits
        slurm_cluster.submit(f"busy-{node}", "pool-b", gpus=8, hold=False)
    sid = slurm_cluster.submit("waiting", "pool-b", gpus=8, comment="ebbtide: est_gpu_h=1")
    job = f"test-{sid}"
    actuator, backend = make_actuator(slurm_cluster, grace_s=0.0)
    wait_for(lambda: backend.observe().gpus_free["pool-b"] == 0, what="pool-b to fill")

    def excluded() -> tuple[str, str]:
        (record,) = [
            j for j in json.loads(slurm_cluster.run("squeue", "--json").stdout)["jobs"] if j["job_id"] == sid
        ]
        return record["excluded_nodes"], record["comment"]

    for step, avoid in enumerate((["b1"], ["b2"], [])):
        allocation = kept_off(make_allocation(f"plan-{step}", jobs=[(job, "run", "pool-b", 8)]), avoid)
        (result,) = actuator.apply(allocation)
        assert result.outcome == "applied", result
        assert phase_of(backend, job) == "pending", "released, and waiting for room"
        note = f"ebbtide-excluded: {avoid[0]} | " if avoid else ""
        # the decision note stays plan-0's: it is rewritten only when the action or its reason changes
        assert excluded() == (
            ",".join(avoid),
            f"ebbtide: est_gpu_h=1 | {note}ebbtide-decision: run: test (plan=plan-0)",
        )


def test_reservation_holds_inference_capacity_and_follows_the_next_step(
    slurm_cluster, make_allocation
) -> None:
    actuator, backend = make_actuator(slurm_cluster)
    name = reservation_name("chat", "pool-b")
    cli = SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)})

    first = make_allocation("plan-1", services=[("chat", "pool-b", 2, 8.0)], valid_s=900)
    assert actuator.apply(first)[0].outcome == "applied"
    (resv,) = [r for r in cli.reservations() if r["ReservationName"] == name]
    assert (resv["NodeCnt"], resv["PartitionName"]) == ("1", "pool-b")
    assert backend.observe().service("chat", "pool-b").gpus == 8.0

    second = make_allocation("plan-2", services=[("chat", "pool-b", 3, 12.0)], valid_s=1800)
    assert actuator.apply(second)[0].outcome == "applied"
    (resv,) = [r for r in cli.reservations() if r["ReservationName"] == name]
    assert resv["NodeCnt"] == "2"
    assert resv["EndTime"] == slurm_time(second.valid_until) != slurm_time(first.valid_until)

    third = make_allocation("plan-3", services=[("chat", "pool-b", 0, 0.0)])
    assert actuator.apply(third)[0].outcome == "applied"
    assert [r for r in cli.reservations() if r["ReservationName"] == name] == []


def test_same_allocation_twice_submits_nothing_new(slurm_cluster, make_allocation) -> None:
    job_1 = f"test-{slurm_cluster.submit('job-1', 'pool-a', gpus=2)}"
    job_2 = f"test-{slurm_cluster.submit('job-2', 'pool-a', gpus=2)}"
    actuator, backend = make_actuator(slurm_cluster)
    allocation = make_allocation(
        "plan-x",
        jobs=[(job_1, "run", "pool-a", 2), (job_2, "hold", None, 0)],
        services=[("chat", "pool-b", 1, 8.0)],
    )
    first = actuator.apply(allocation)
    assert {r.target: r.outcome for r in first} == {
        "service/chat/pool-b": "applied",
        f"job/{job_1}": "applied",
        f"job/{job_2}": "applied",  # the decision noted in its comment
    }
    wait_for(lambda: phase_of(backend, job_1) == "running", what="job-1 to start")
    before = SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)}).jobs()

    second = actuator.apply(allocation)

    assert {r.outcome for r in second} == {"already-applied"}
    after = SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)}).jobs()
    assert sorted((j["job_id"], j["job_state"], j["partition"]) for j in after) == sorted(
        (j["job_id"], j["job_state"], j["partition"]) for j in before
    )


class StopControllerOnce:
    """A transport that stops slurmctld just before the first change of the step reaches it."""

    def __init__(self, inner: SlurmCli, cluster: SlurmCluster) -> None:
        self.inner = inner
        self.cluster = cluster
        self.stopped = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in {"jobs", "nodes", "reservations"} or self.stopped:
            return attr

        def stop_then_call(*args: Any) -> Any:
            if not self.stopped:
                self.stopped = True
                self.cluster.stop_ctld()
            return attr(*args)

        return stop_then_call


@pytest.mark.slow
def test_slurmctld_restart_mid_apply_leaves_no_half_applied_step(slurm_cluster, make_allocation) -> None:
    job_1, job_2, job_3 = (f"test-{slurm_cluster.submit(n, 'pool-a', gpus=2)}" for n in ("j1", "j2", "j3"))
    transport = StopControllerOnce(
        SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)}, timeout_s=2), slurm_cluster
    )
    backend = SlurmBackend(transport, cluster="test", checkpoint_grace_s=0)  # type: ignore[arg-type]
    retry = RetryPolicy(attempts=2, base_delay_s=0.1, max_delay_s=0.2)
    actuator = ActuationEngine(backend, "test", retry=retry)
    allocation = make_allocation(
        "plan-r",
        jobs=[(job_1, "run", "pool-b", 2), (job_2, "run", "pool-a", 2), (job_3, "hold", None, 0)],
        services=[("chat", "pool-b", 1, 8.0)],
    )

    during = actuator.apply(allocation)
    assert transport.stopped
    assert {r.outcome for r in during} == {"retrying"}
    assert all(not r.permanent for r in during)

    slurm_cluster.start_ctld()
    wait_for(slurm_cluster.all_nodes_idle, what="slurmd nodes to re-register")
    after = results_by_target(actuator.apply(allocation))

    assert {t: r.outcome for t, r in after.items()} == {
        "service/chat/pool-b": "applied",
        f"job/{job_1}": "applied",
        f"job/{job_2}": "applied",
        f"job/{job_3}": "applied",
    }
    wait_for(
        lambda: {backend.observe().jobs[j].phase for j in (job_1, job_2)} == {"running"},
        what="both released jobs to run",
        timeout_s=30,
    )
    observed = backend.observe()
    assert observed.jobs[job_1].pool == "pool-b"
    assert observed.jobs[job_3].phase == "held"
    assert observed.service("chat", "pool-b") is not None
    assert {r.outcome for r in actuator.apply(allocation)} == {"already-applied"}


def test_slurmrestd_transport_sees_what_the_cli_sees_and_applies_a_step(
    slurm_cluster, make_allocation
) -> None:
    url, token = slurm_cluster.start_rest(user="daemon")
    rest_1 = f"test-{slurm_cluster.submit('rest-1', 'pool-a', gpus=2, user='daemon')}"
    rest_2 = f"test-{slurm_cluster.submit('rest-2', 'pool-a', gpus=2, user='daemon')}"
    cli = SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)})
    rest_backend = SlurmBackend(
        SlurmRest(url, "daemon", token, cli=cli), cluster="test", checkpoint_grace_s=1
    )
    cli_backend = SlurmBackend(cli, cluster="test", checkpoint_grace_s=0)
    via_rest, via_cli = rest_backend.observe(), cli_backend.observe()
    assert via_rest.jobs == via_cli.jobs
    assert (
        (via_rest.gpus_total, via_rest.gpus_free)
        == (via_cli.gpus_total, via_cli.gpus_free)
        == ({"pool-a": 16, "pool-b": 16}, {"pool-a": 16, "pool-b": 16})
    )

    actuator = ActuationEngine(rest_backend, "test", retry=FAST_RETRY)
    allocation = kept_off(
        make_allocation(
            "plan-rest",
            jobs=[(rest_1, "run", "pool-b", 2), (rest_2, "hold", None, 0)],
            services=[("chat", "pool-a", 1, 8.0)],
        ),
        ["b1"],
    )
    first = {r.target: r.outcome for r in actuator.apply(allocation)}
    assert first == {
        "service/chat/pool-a": "applied",
        f"job/{rest_1}": "applied",
        f"job/{rest_2}": "applied",
    }
    wait_for(lambda: phase_of(rest_backend, rest_1) == "running", what="rest-1 to start")
    observed = rest_backend.observe()
    assert (observed.jobs[rest_1].pool, observed.jobs[rest_1].plan_id) == ("pool-b", "plan-rest")
    assert set(observed.jobs[rest_1].nodes) == {"b2"}, "kept off b1 through slurmrestd"
    assert observed.service("chat", "pool-a").gpus == 8.0
    assert {r.outcome for r in actuator.apply(allocation)} == {"already-applied"}

    preempt = make_allocation(
        "plan-rest-2",
        jobs=[(rest_1, "preempt", None, 0)],
        services=[("chat", "pool-a", 1, 8.0)],
        valid_s=1800,
    )
    assert {r.target: r.outcome for r in actuator.apply(preempt)} == {
        f"job/{rest_1}": "applied",
        "service/chat/pool-a": "applied",  # the reservation's window moves to this step's
    }
    assert slurm_cluster.checkpoint_marker("rest-1").exists(), "checkpoint signal through slurmrestd"
    wait_for(lambda: phase_of(rest_backend, rest_1) == "held", what="rest-1 requeued and held")


def test_configured_from_settings_with_a_slurm_conf(slurm_cluster, make_allocation) -> None:
    from actuators.factory import ActuatorConfig, SlurmConfig, build_actuator

    job_c = f"test-{slurm_cluster.submit('job-c', 'pool-a', gpus=1, hold=False)}"
    config = ActuatorConfig(
        backend="slurm", checkpoint_grace_s=0, slurm=SlurmConfig(slurm_conf=slurm_cluster.conf)
    )
    actuator = build_actuator(config, "test")
    wait_for(lambda: actuator.backend.observe().jobs[job_c].phase == "running", what="job-c to start")
    (result,) = actuator.apply(make_allocation("plan-c", jobs=[(job_c, "preempt", None, 0)]))
    assert (result.backend, result.outcome) == ("slurm", "applied")
    wait_for(lambda: actuator.backend.observe().jobs[job_c].phase == "held", what="job-c requeued and held")
