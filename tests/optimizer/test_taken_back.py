"""A service whose autoscaler took GPUs back within a step (optimizer/headroom.py
``taken_back_gpus``) keeps them in the next plan; one that did not is not read as such. In a pool
that time-slices, a replica holds a share of a GPU: comparing its replicas x GPUs per replica
with the GPUs it was given read a scale-up at every step and raised the service's floor by a few
GPUs a decision (mixed-site: lora-api planned 89 GPUs for a demand of 12)."""

from __future__ import annotations

from datetime import timedelta

from optimizer_cases import NOW, forecast, job, pool, service, state
from plan_checks import check_plan

from optimizer.headroom import Kept, kept_by_service, taken_back_gpus
from optimizer.planner import PlannerPolicy
from schemas import ClusterState

DEMAND_GPUS = 5.3


def _shared_cluster(replicas: dict[str, int], step: int) -> ClusterState:
    embed = service("embed", replicas=replicas, min_replicas=1, max_cotenants=4, bandwidth_class="low")
    embed = embed.model_copy(update={"demand_history": [DEMAND_GPUS] * (8 + step)})
    jobs = [job(f"j{i}", 2, weight=1.0, hours=12.0) for i in range(4)]
    cluster = state([pool("t4", 16, gpu_type="t4", max_share=4)], jobs, [embed])
    return cluster.model_copy(update={"as_of": NOW + timedelta(seconds=900 * step)})


def test_a_time_sliced_service_keeps_its_gpus_from_decision_to_decision() -> None:
    policy = PlannerPolicy()
    replicas: dict[str, int] = {}
    given: list[float] = []
    for step in range(8):
        cluster = _shared_cluster(replicas, step)
        now = cluster.as_of
        curve = forecast("embed", [DEMAND_GPUS] * 96, spread=0.5).model_copy(update={"issued_at": now})
        decision = policy.decide(cluster, {"embed": curve}, now)
        check_plan(cluster, decision, 96, 900)
        mine = [s for s in decision.allocation.services if s.service == "embed"]
        given.append(sum(s.gpus for s in mine))
        replicas = {s.pool: s.replicas for s in mine if s.replicas}  # what the Deployment runs
    # the same demand every step: from the second decision (the first starts from no replicas) the
    # same GPUs, no floor that moves with the replica count (the old reading: 7.0, 5.8, 6.0, 5.8, ...)
    assert max(given[1:]) - min(given[1:]) < 0.01, given
    # a replica here holds a share of a GPU: the replicas outnumber the GPUs
    assert sum(replicas.values()) > given[-1]


def test_added_replicas_are_what_was_taken_back() -> None:
    embed = service("embed", replicas={"t4": 24, "a": 3}, gpus_per_replica=1)
    kept = kept_by_service([])
    assert taken_back_gpus(embed, kept.get("embed")) is None  # nothing kept last time: no scale-up
    # kept 24 replicas on 6 shared GPUs and 1 whole one: 2 replicas added since, on whole GPUs
    assert taken_back_gpus(embed, Kept(gpus=7.0, replicas=25)) == 9.0
    # as many replicas as it kept (some on shared GPUs): nothing taken back
    assert taken_back_gpus(embed, Kept(gpus=7.0, replicas=27)) is None
