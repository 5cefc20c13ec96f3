"""The Slurm source against real Slurm daemons: jobs from their comments, inventory from sinfo."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from slurm_cluster import SlurmCluster
from test_slurm_real import wait_for

from actuators.slurm import SlurmCli
from actuators.slurm.source import SlurmSource
from loop import lifecycle_events
from schemas import JobEventKind

pytestmark = pytest.mark.slurm


def make_source(cluster: SlurmCluster) -> SlurmSource:
    cli = SlurmCli(env={"SLURM_CONF": str(cluster.conf)})
    return SlurmSource(cli, cluster="test", accounting=cli.accounted_jobs)


def comment_of(cluster: SlurmCluster, sid: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(sid), "-o", "%k").stdout.strip()


def test_held_jobs_with_an_ebbtide_comment_become_specs_and_the_rest_is_left_alone(
    slurm_cluster: SlurmCluster,
) -> None:
    good = slurm_cluster.submit("train", "pool-a,pool-b", gpus=4,
                                comment="ebbtide: est_gpu_h=2 weight=3 team=nlp preemptible=no")  # fmt: skip
    bad = slurm_cluster.submit("typo", "pool-a", gpus=2, comment="ebbtide: est_gpu_h=two")
    slurm_cluster.submit("theirs", "pool-b", gpus=1, comment="not for ebbtide")
    source = make_source(slurm_cluster)

    snapshot = source.snapshot()

    assert list(snapshot.jobs) == [f"test-{good}"]
    job = snapshot.jobs[f"test-{good}"]
    assert job.phase == "held" and job.spec is not None
    assert (job.spec.gpus, job.spec.allowed_pools) == (4, ["pool-a", "pool-b"])
    assert job.spec.estimated_gpu_s == 7200.0
    assert (job.spec.priority_weight, job.spec.team, job.spec.preemptible) == (3.0, "nlp", False)
    noted = "ebbtide: est_gpu_h=two | ebbtide-error: est_gpu_h: 'two' is not a number"
    assert comment_of(slurm_cluster, bad) == noted
    assert source.rejected == {str(bad): "est_gpu_h: 'two' is not a number"}
    assert comment_of(slurm_cluster, good) == "ebbtide: est_gpu_h=2 weight=3 team=nlp preemptible=no"
    source.snapshot()  # the note is written once
    assert comment_of(slurm_cluster, bad).count("ebbtide-error") == 1


def event_stepper(source: SlurmSource) -> Callable[[], list[JobEventKind]]:
    """Each call: one snapshot of ``source`` and the kinds of the lifecycle events it adds."""
    last: dict[str, JobEventKind] = {}

    def step() -> list[JobEventKind]:
        events = lifecycle_events(last, source.snapshot())
        last.update({e.job_id: e.kind for e in events})
        return [e.kind for e in events]

    return step


def test_a_job_released_runs_and_finishes_and_each_change_is_one_event(slurm_cluster: SlurmCluster) -> None:
    sid = slurm_cluster.submit("short", "pool-b", gpus=3, comment="ebbtide: est_gpu_h=0.1", run_s=2)
    key = f"test-{sid}"
    source = make_source(slurm_cluster)
    step = event_stepper(source)
    assert step() == [JobEventKind.SUBMITTED]
    slurm_cluster.run("scontrol", "release", str(sid))
    wait_for(lambda: source.snapshot().jobs[key].phase == "running", what="the released job to run")
    running = source.snapshot().jobs[key]
    assert running.pool == "pool-b" and sum(running.nodes.values()) == 3
    assert step() == [JobEventKind.STARTED]
    wait_for(lambda: source.snapshot().jobs[key].phase == "finished", what="the job to complete")
    assert step() == [JobEventKind.FINISHED]
    assert step() == []
    state = slurm_cluster.run("scontrol", "show", "job", str(sid)).stdout
    assert "JobState=COMPLETED" in state


def test_inventory_has_a_pool_per_partition_and_drained_or_down_nodes_take_no_work(
    slurm_cluster: SlurmCluster,
) -> None:
    slurm_cluster.run("scontrol", "update", "NodeName=b2", "State=DRAIN", "Reason=maint")
    slurm_cluster.run("scontrol", "update", "NodeName=a1", "State=DOWN", "Reason=psu")
    inventory = make_source(slurm_cluster).snapshot().inventory
    assert inventory is not None
    by_pool = {p.name: {n.name: n for n in p.nodes} for p in inventory.pools}
    assert sorted(by_pool) == ["pool-a", "pool-b"]
    assert {p.gpu_type for p in inventory.pools} == {"fake"}
    a1, a2 = by_pool["pool-a"]["a1"], by_pool["pool-a"]["a2"]
    b1, b2 = by_pool["pool-b"]["b1"], by_pool["pool-b"]["b2"]
    assert (a2.schedulable, a2.gpus, a2.gpus_free) == (True, 8, 8)
    assert (b1.schedulable, b1.gpus) == (True, 8)
    assert (b2.schedulable, b2.reason, b2.gpus_free) == (False, "drained: maint", 0)
    assert (a1.schedulable, a1.reason) == (False, "down: psu")


@pytest.mark.parametrize(("request_args", "gpus"), [(["-N", "2", "--gres=gpu:8"], 16), (["--gpus=4"], 4)])
def test_the_gang_is_the_gres_request_times_the_nodes_or_the_jobs_gpus(
    slurm_cluster: SlurmCluster, request_args: list[str], gpus: int
) -> None:
    argv = ["sbatch", "--parsable", "--hold", "-p", "pool-a", *request_args, "-o", "/dev/null"]
    out = slurm_cluster.run(*argv, "--comment=ebbtide: est_gpu_h=1", "--wrap", "sleep 1")
    sid = out.stdout.strip().split(";")[0]
    job = make_source(slurm_cluster).snapshot().jobs[f"test-{sid}"]
    assert job.spec is not None and job.spec.gpus == gpus


def test_through_slurmrestd_the_source_sees_what_the_cli_sees_and_notes_errors(
    slurm_cluster: SlurmCluster,
) -> None:
    from actuators.slurm.rest import SlurmRest

    url, token = slurm_cluster.start_rest(user="daemon")
    good = slurm_cluster.submit("rest-good", "pool-a,pool-b", gpus=2, user="daemon",
                                comment="ebbtide: est_gpu_h=1 weight=2")  # fmt: skip
    bad = slurm_cluster.submit("rest-bad", "pool-a", gpus=2, user="daemon", comment="ebbtide: weight=2")
    slurm_cluster.run("scontrol", "create", "reservation", "ReservationName=fw", "StartTime=now+1hour",
                      "Duration=60", "Users=root", "Nodes=b2", "Flags=MAINT")  # fmt: skip
    cli = SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)})
    rest = SlurmRest(url, "daemon", token, cli=cli)
    via_rest = SlurmSource(rest, cluster="test").snapshot()
    assert rest.api == "/slurm/v0.0.38", "negotiated from the daemon's /openapi"
    assert comment_of(slurm_cluster, bad) == "ebbtide: weight=2 | ebbtide-error: est_gpu_h: required " + (
        "(GPU-hours of work, e.g. est_gpu_h=4)"
    ), "noted through slurmrestd, as the job's owner"
    via_cli = make_source(slurm_cluster).snapshot()
    assert list(via_rest.jobs) == [f"test-{good}"]
    assert via_rest.jobs == via_cli.jobs
    assert via_rest.inventory is not None and via_cli.inventory is not None
    assert via_rest.inventory.pools == via_cli.inventory.pools
    assert [w.nodes for p in via_rest.inventory.pools for w in p.windows] == [["b2"]]


def test_a_slurmrestd_offering_no_version_ebbtide_reads_is_refused_naming_what_it_offers(
    slurm_cluster: SlurmCluster,
) -> None:
    from actuators.base import PermanentError
    from actuators.slurm.rest import SlurmRest

    url, token = slurm_cluster.start_rest(user="daemon", api="v0.0.37")
    source = SlurmSource(SlurmRest(url, "daemon", token), cluster="test")
    with pytest.raises(PermanentError, match=r"offers OpenAPI v0\.0\.37; ebbtide reads v0\.0\.38"):
        source.snapshot()


def test_a_job_that_left_squeue_is_read_from_sacct(accounted_cluster: SlurmCluster) -> None:
    sid = accounted_cluster.submit("acct", "pool-a", gpus=2, comment="ebbtide: est_gpu_h=1", run_s=1)
    key = f"test-{sid}"
    source = make_source(accounted_cluster)
    step = event_stepper(source)
    assert step() == [JobEventKind.SUBMITTED]
    accounted_cluster.run("scontrol", "release", str(sid))
    wait_for(lambda: source.snapshot().jobs[key].phase == "running", what="the released job to run")
    assert step() == [JobEventKind.STARTED]

    def left_squeue() -> bool:
        return str(sid) not in accounted_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()

    wait_for(left_squeue, timeout_s=60, what="slurmctld to purge the ended job")
    assert step() == [JobEventKind.FINISHED], "from sacct, not vanished (cancelled)"
    assert step() == [] and key not in source.snapshot().jobs, "an ended job is looked up no more"


def test_a_maint_reservation_is_announced_as_a_window_on_its_nodes(slurm_cluster: SlurmCluster) -> None:
    create = ["scontrol", "create", "reservation", "StartTime=now+1hour", "Duration=120", "Users=root"]
    slurm_cluster.run(*create, "ReservationName=fw", "Nodes=a2,b[1-2]", "Flags=MAINT")
    slurm_cluster.run(*create, "ReservationName=course", "Nodes=a1")  # a group's, not maintenance
    before = datetime.now(UTC)
    inventory = make_source(slurm_cluster).snapshot().inventory
    assert inventory is not None
    windows = {p.name: p.windows for p in inventory.pools}
    (a,), (b,) = windows["pool-a"], windows["pool-b"]
    assert (a.nodes, a.gpus_out, b.nodes, b.gpus_out) == (["a2"], 8, ["b1", "b2"], 16)
    assert timedelta(minutes=58) < a.start - before < timedelta(minutes=62)
    assert a.end - a.start == timedelta(hours=2) and a.reason == "maintenance (slurm reservation fw)"
