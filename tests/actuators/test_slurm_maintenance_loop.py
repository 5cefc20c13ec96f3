"""A Slurm maintenance reservation through the code the services run, on real Slurm daemons: the
source reads it, the state fold hands it to the planner, step 0 keeps a job that would outlast it
off the node (by its run or, as Slurm does, by its time limit), and the actuator shows why in the
job's comment (``squeue -o %k``). Kafka is left
out (the e2e tier runs these services over it); each stage is the services' own code."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from slurm_cluster import SlurmCluster
from test_slurm_real import make_actuator, wait_for
from test_slurm_source_real import comment_of

from actuators.slurm import SlurmCli
from actuators.slurm.source import SlurmSource
from loop import lifecycle_events
from optimizer.planner import PlannerPolicy
from schemas import ClusterState, DecisionCause, JobAction, PoolState
from streams.fold import ClusterFold

pytestmark = pytest.mark.slurm


def seed(now: datetime) -> ClusterState:
    pools = [
        PoolState(name=name, gpu_type="fake", gpus_total=16, gpus_available=16, gpus_per_node=8)
        for name in ("pool-a", "pool-b")
    ]
    return ClusterState(cluster="test", as_of=now, step_s=900, pools=pools, services=[], jobs=[])


def test_a_job_that_would_run_into_maintenance_waits_and_squeue_says_why(slurm_cluster: SlurmCluster) -> None:
    slurm_cluster.run("scontrol", "update", "NodeName=a2", "State=DRAIN", "Reason=disk")
    slurm_cluster.run("scontrol", "create", "reservation", "ReservationName=fw", "StartTime=now+1hour",
                      "Duration=120", "Users=root", "Nodes=a1", "Flags=MAINT")  # fmt: skip
    long = slurm_cluster.submit("long", "pool-a", gpus=8, comment="ebbtide: est_gpu_h=32 weight=3")
    # Slurm starts a job on a node with maintenance ahead only if its time limit ends before it
    short = slurm_cluster.submit("short", "pool-a", gpus=8, comment="ebbtide: est_gpu_h=4", time_limit_min=40)
    unlimited = slurm_cluster.submit("unlimited", "pool-a", gpus=8, comment="ebbtide: est_gpu_h=4 weight=2")
    now = datetime.now(UTC)
    snapshot = SlurmSource(SlurmCli(env={"SLURM_CONF": str(slurm_cluster.conf)}), cluster="test").snapshot()
    fold = ClusterFold(seed=seed(now))
    for event in lifecycle_events({}, snapshot):
        assert fold.apply(event)
    assert snapshot.inventory is not None and fold.apply(snapshot.inventory)
    state = fold.snapshot(now)

    allocation = PlannerPolicy().decide(state, {}, now).allocation

    decisions = {d.job_id: d for d in allocation.jobs}
    held, ran = decisions[f"test-{long}"], decisions[f"test-{short}"]
    assert (ran.action, ran.pool) == (JobAction.RUN, "pool-a"), "30 minutes end before the window"
    assert (held.action, held.cause) == (JobAction.HOLD, DecisionCause.NODES_GO_OUT)
    assert "node(s) a1 go from" in held.reason and "it runs 4.0 h" in held.reason
    no_limit = decisions[f"test-{unlimited}"]  # as short as the one that runs, but Slurm would not start it
    assert (no_limit.action, no_limit.cause) == (JobAction.HOLD, DecisionCause.NODES_GO_OUT)
    assert "it runs 0.5 h, no time limit; node(s) a1 go from" in no_limit.reason
    actuator, _ = make_actuator(slurm_cluster)
    actuator.apply(allocation)
    wait_for(lambda: "RUNNING" in slurm_cluster.run("squeue", "-h", "-j", str(short), "-o", "%T").stdout,
             what="the short job to run on a1")  # fmt: skip
    assert comment_of(slurm_cluster, long).startswith(
        "ebbtide: est_gpu_h=32 weight=3 | ebbtide-decision: hold: held: the nodes of pool pool-a"
    )
