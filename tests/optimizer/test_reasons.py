"""Reasons that are always true: every step-0 decision carries a cause code and a text made from
it, and the numbers the text quotes are the allocation's. Scenario rows pin the cases that once
read falsely (a gang held by fragmentation; node clearing for lower-value work, which now does not
happen, and a clearing that names the gang it is for); a property test reads every number out of
every reason on random clusters with node detail and checks it against the allocation."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_table import (
    Job,
    Pool,
    Scenario,
    Service,
    build_forecasts,
    build_state,
    hold,
    preempt,
    run,
    run_scenario,
)

from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import Allocation, ClusterState, DecisionCause, DemandForecast, JobAction, JobStatus

TWO_NODES_4_FREE_EACH = Pool("a", 16, gpus_per_node=8, free_by_node=(4, 4), node_names=("n0", "n1"))


def heavy_and_pinned(gang_weight: float) -> tuple[Job, ...]:
    """n0: a weight-2 job that just checkpointed; n1: a non-preemptible job; an 8-GPU gang waits."""
    return (
        Job("heavy", 4, weight=2.0, hours=6.0, running_in="a", nodes={"n0": 4}, checkpoint_interval_s=1800.0),
        Job("pinned", 4, hours=6.0, running_in="a", nodes={"n1": 4}, preemptible=False),
        Job("gang", 8, weight=gang_weight, hours=2.0),
    )


SCENARIOS = [
    Scenario(
        # two non-preemptible 4-GPU jobs, one on each 8-GPU node: 8 GPUs free, no node takes 8
        "gang-held-by-fragmentation-says-fragmentation",
        pools=(TWO_NODES_4_FREE_EACH,),
        jobs=(
            Job("pinned-0", 4, hours=6.0, running_in="a", nodes={"n0": 4}, preemptible=False),
            Job("pinned-1", 4, hours=6.0, running_in="a", nodes={"n1": 4}, preemptible=False),
            Job("gang", 8, hours=2.0),
        ),
        want_jobs={
            "gang": hold(
                "fragmentation: 8 GPUs free in pool a", "gang of 8", "most free on one node: 4 of 8"
            ),
            "pinned-0": run("a", "not preemptible"),
            "pinned-1": run("a", "not preemptible"),
        },
    ),
    Scenario(
        # clearing n0 would start a weight-1 gang by stopping weight-2 work: it does not happen
        "no-node-clearing-for-a-lower-weight-gang",
        pools=(TWO_NODES_4_FREE_EACH,),
        jobs=heavy_and_pinned(gang_weight=1.0),
        want_jobs={"heavy": run("a", "keeps running"), "gang": hold("fragmentation", "gang of 8")},
    ),
    Scenario(
        # a weight-3 gang: clearing n0 is worth it, and the stop names the gang and its weight
        "node-clearing-names-the-gang-and-its-weight",
        pools=(TWO_NODES_4_FREE_EACH,),
        jobs=heavy_and_pinned(gang_weight=3.0),
        want_jobs={
            "heavy": preempt("cleared for job gang (8 GPUs, weight 3), above its own weight 2"),
            "gang": run("a"),
        },
    ),
    Scenario(
        # inference holds the pool all day: the reservation ends with the horizon, 24 h from now,
        # which is the same clock time as now (it once read "reserved for inference 12:00-12:00")
        "a-reservation-to-the-horizons-end-says-so",
        pools=(Pool("a", 8),),
        services=(Service("chat", replicas={"a": 6}, forecast=(6.0,) * 96),),
        jobs=(Job("gang", 4, hours=2.0),),
        want_jobs={"gang": hold("reserved for inference from 12:00 until the horizon's end (24 h from now)")},
    ),
    Scenario(
        # inference holds half the pool for two hours, a running job the other half for half an
        # hour: the gang starts when that job ends, so what it waits for is a full pool, not the
        # reservation (it once read "reserved for inference from 12:00 until 14:00 ...; planned to
        # start at 12:30")
        "a-start-before-inference-gives-back-is-not-held-by-inference",
        pools=(Pool("a", 8),),
        services=(Service("chat", replicas={"a": 4}, forecast=(4.0,) * 8 + (0.0,) * 88),),
        jobs=(Job("ending", 4, hours=0.5, running_in="a"), Job("gang", 4, hours=2.0)),
        want_jobs={"gang": hold("4 held by running jobs", starts="held: planned to start at 12:30")},
    ),
    Scenario(
        # a job of 24 GPU-seconds: the planner rounds its work up to a whole step, the reason
        # quotes the job's own estimate (it once said "2.0 GPU-h left")
        "work-left-is-the-jobs-own-estimate",
        pools=(Pool("a", 8),),
        jobs=(Job("short", 1, hours=24.0 / 3600.0),),
        want_jobs={"short": run("a", "0.0067 GPU-h left")},
    ),
]


@pytest.mark.parametrize("row", SCENARIOS, ids=lambda row: row.id)
def test_reasons_say_what_happened(row: Scenario) -> None:
    decision = run_scenario(row)
    assert all(d.cause is not None for d in decision.allocation.jobs + decision.allocation.services)


SMALL = PlannerConfig(
    horizon_steps=16,
    fine_steps=2,
    mid_block_steps=2,
    mid_until_step=8,
    coarse_block_steps=4,
)
PER_NODE = 8


@st.composite
def node_clusters(draw: st.DrawFn) -> Scenario:
    """1-2 pools of 1-3 nodes of 8 GPUs; running jobs placed on nodes (the free GPUs per node
    follow), waiting gangs of 1-16 GPUs, weights 1-3, two teams (one with a quota), maybe a service."""
    pools: list[Pool] = []
    jobs: list[Job] = []
    for p in range(draw(st.integers(1, 2))):
        free = [PER_NODE] * draw(st.integers(1, 3))
        for _ in range(draw(st.integers(0, 4))):
            gang = draw(st.sampled_from([1, 2, 4, 8]))
            room = [i for i, f in enumerate(free) if f >= gang]
            if not room:
                continue
            node = room[0]
            free[node] -= gang
            jobs.append(
                Job(
                    f"r{len(jobs)}",
                    gang,
                    weight=float(draw(st.integers(1, 3))),
                    hours=draw(st.sampled_from([1, 6])),
                    running_in=f"p{p}",
                    nodes={f"p{p}n{node}": gang},
                    preemptible=draw(st.booleans()),
                    team=draw(st.sampled_from(["red", "blue"])),
                    since_checkpoint_gpu_s=float(draw(st.sampled_from([0, 3600]))),
                )
            )
        names = tuple(f"p{p}n{i}" for i in range(len(free)))
        pools.append(Pool(f"p{p}", PER_NODE * len(free), free_by_node=tuple(free), node_names=names))
    for _ in range(draw(st.integers(1, 5))):
        jobs.append(
            Job(
                f"w{len(jobs)}",
                draw(st.sampled_from([1, 2, 4, 8, 16])),
                weight=float(draw(st.integers(1, 3))),
                hours=draw(st.sampled_from([1, 3])),
                team=draw(st.sampled_from(["red", "blue"])),
            )
        )
    services = ()
    if draw(st.booleans()):
        curve = tuple(float(draw(st.integers(0, 6))) for _ in range(4)) * 4
        services = (Service("chat", replicas={"p0": draw(st.integers(0, 3))}, forecast=curve),)
    quota = {"red": draw(st.sampled_from([4, 8, 16]))} if draw(st.booleans()) else {}
    return Scenario("random", pools=tuple(pools), jobs=tuple(jobs), services=services, quotas=quota)


NUMBER_CHECKS = (
    re.compile(
        r"pool ([\w-]+): (\d+) GPUs in service(?:, (\d+) reserved for inference, most for .*?\))?"
        r"(?:, (\d+) held by running jobs)?, (\d+) free"
    ),
)


class Step0:
    """The allocation's step 0 by pool and team, to check reasons against. Reasons are written
    before headroom is lent (optimizer/headroom.py): inference's reservation there counts the GPUs
    lent (the part of ``burst_gpus`` its headroom's borrowers run on, in whole replicas; the rest of
    a ceiling is GPUs left free, optimizer/idle_burst.py, or batch its autoscaler may preempt,
    optimizer/surge_burst.py, whose jobs run on as they were), and the running jobs leave out the
    headroom's borrowers, which say so themselves."""

    def __init__(self, state: ClusterState, alloc: Allocation) -> None:
        self.specs = {j.spec.job_id: j.spec for j in state.jobs}
        self.avail = {p.name: p.gpus_available for p in state.pools}
        self.jobs: dict[str, int] = defaultdict(int)
        self.team: dict[str, int] = defaultdict(int)
        for d in alloc.jobs:
            if d.action == JobAction.RUN and d.cause != DecisionCause.BORROWS_HEADROOM:
                self.jobs[d.pool or ""] += d.gpus
                self.team[self.specs[d.job_id].team] += d.gpus
        lent: dict[tuple[str, str], int] = defaultdict(int)
        for d in alloc.jobs:
            if d.action == JobAction.RUN and d.cause == DecisionCause.BORROWS_HEADROOM:
                lent[(d.borrows_from or "", d.pool or "")] += d.gpus
        per = {s.spec.service: s.spec.gpus_per_replica for s in state.services}
        inference: dict[str, float] = defaultdict(float)
        for s in alloc.services:
            lent_replicas = math.ceil(lent[(s.service, s.pool)] / per[s.service] - 1e-9)
            inference[s.pool] += s.gpus + min(s.burst_gpus, lent_replicas * per[s.service])
        self.inference = {p: math.ceil(g - 1e-6) for p, g in inference.items()}

    def free(self, pool: str) -> int:
        return self.avail[pool] - self.inference.get(pool, 0) - self.jobs[pool]


def quota_idle(state: ClusterState) -> int:
    """GPUs the quotas leave idle (nominal less what each team's queued and running jobs want),
    plus the pools' GPUs up that no quota covers."""
    wanted = {t: 0.0 for t in state.quotas_gpus}
    for job in state.jobs:
        if job.spec.team in wanted and job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
            wanted[job.spec.team] += job.spec.gpus
    outside = max(sum(p.gpus_available for p in state.pools) - sum(state.quotas_gpus.values()), 0)
    return int(sum(max(q - wanted[t], 0.0) for t, q in state.quotas_gpus.items()) + outside)


def check_numbers(state: ClusterState, alloc: Allocation) -> None:
    """Every number a job's reason quotes, read back out of its text, against the allocation."""
    step0 = Step0(state, alloc)
    for d in alloc.jobs:
        text, own = d.reason, step0.specs[d.job_id]
        assert d.cause is not None, d
        for m in NUMBER_CHECKS[0].finditer(text):
            pool, avail, inference, running, free = m.groups()
            assert int(avail) == step0.avail[pool], (text, pool)
            assert int(inference or 0) == step0.inference.get(pool, 0), (text, pool)
            assert int(running or 0) == step0.jobs[pool], (text, pool)
            assert int(free) == max(step0.free(pool), 0), (text, pool)
        for m in re.finditer(r"share (?:now )?(-?[\d.]+)", text):  # a share of the job's gang
            assert 0.0 <= float(m[1]) <= 1.0 and m[1] != "-0.00", text
        for m in re.finditer(r"(\d+) GPUs free in pool ([\w-]+)", text):
            assert int(m[1]) == step0.free(m[2]), text
        if m := re.search(r"fragmentation: (\d+) GPUs free in pool [\w-]+ but .* gang of (\d+)", text):
            assert int(m[1]) >= int(m[2]), text  # fewer free than the gang needs: the pool is full
        for m in re.finditer(r"job ([\w-]+) \((\d+) GPUs, weight ([\d.]+)\)", text):
            other = step0.specs[m[1]]
            assert (int(m[2]), float(m[3])) == (other.gpus, other.priority_weight), text
        for m in re.finditer(r"its own weight ([\d.]+)|\(\d+ GPUs, weight ([\d.]+), class", text):
            assert float(m[1] or m[2]) == own.priority_weight, text
        for m in re.finditer(
            r"gang of (\d+)|its gang needs (\d+)|its (\d+) GPUs|\((\d+) GPUs, weight [\d.]+, class", text
        ):
            assert int(next(g for g in m.groups() if g)) == own.gpus, text
        quota = r"team ([\w-]+) is at its quota of (\d+) GPUs \((\d+) in use[^)]*\)"
        quota += r"(?:, and (\d+) of the (\d+) GPUs)?"
        for m in re.finditer(quota, text):
            assert int(m[2]) == state.quotas_gpus[m[1]] and int(m[3]) == step0.team[m[1]], text
            borrowed = sum(max(step0.team.get(t, 0) - q, 0) for t, q in state.quotas_gpus.items())
            assert m[4] is None or (int(m[4]), int(m[5])) == (borrowed, quota_idle(state)), text
            more = int(m[3]) + own.gpus - max(int(m[3]), int(m[2]))  # beyond its quota
            assert int(m[3]) + own.gpus > int(m[2]) and borrowed + more > quota_idle(state), text
        if "cleared for job" in text:
            other = step0.specs[re.search(r"cleared for job ([\w-]+)", text)[1]]  # type: ignore[index]
            assert other.priority_weight > own.priority_weight, text
        if d.cause == DecisionCause.FREED_FOR_JOBS:  # the stop rule stops only for heavier work
            other = step0.specs[re.search(r"go to job ([\w-]+)", text)[1]]  # type: ignore[index]
            assert other.priority_weight > own.priority_weight, text
        if (m := re.search(r"most free on one node: (\d+) of (\d+)", text)) is not None:
            assert int(m[2]) == PER_NODE and (own.gpus > PER_NODE or int(m[1]) < own.gpus), text
        if m := re.search(r"reserved for inference from [\d:]+ until ([\d:]+|the horizon's end)", text):
            # the plan does not start a job held by inference's reservation before it ends
            start = re.search(r"planned to start at ([\d:]+)", text)
            ends = math.inf if m[1] == "the horizon's end" else minutes_ahead(alloc.issued_at, m[1])
            assert start is None or minutes_ahead(alloc.issued_at, start[1]) >= ends, text
        if m := re.search(r"held for it as they drain \(by ([\d:]+) by their jobs' estimates\)", text):
            # a gang waiting for nodes to drain is not said to start before they do
            start = re.search(r"planned to start at ([\d:]+)", text)
            drained = minutes_ahead(alloc.issued_at, m[1])
            assert start is None or minutes_ahead(alloc.issued_at, start[1]) >= drained, text


def minutes_ahead(now: datetime, hhmm: str) -> int:
    """Minutes from ``now`` to the next time the clock reads ``hhmm`` (within a day)."""
    hours, minutes = map(int, hhmm.split(":"))
    return (hours * 60 + minutes - now.hour * 60 - now.minute) % (24 * 60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_clusters())
def test_every_number_in_a_reason_matches_the_allocation(row: Scenario) -> None:
    state = build_state(row)
    decision = PlannerPolicy(config=SMALL).decide(state, banded(build_forecasts(row)), state.as_of)
    check_numbers(state, decision.allocation)


def banded(forecasts: dict[str, DemandForecast]) -> dict[str, DemandForecast]:
    """The rows' forecasts with p90 and p99 above p50, so the planner has headroom to lend."""
    return {
        name: f.model_copy(
            update={
                "quantiles": {
                    "p50": f.quantiles["p50"],
                    **{k: [x * m for x in f.quantiles["p50"]] for k, m in (("p90", 2.0), ("p99", 3.0))},
                }
            }
        )
        for name, f in forecasts.items()
    }
