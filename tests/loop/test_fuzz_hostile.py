"""Fuzz: 10,000 schema-valid but hostile records per input topic of the state service, plus
malformed bytes, through the in-memory bus (no broker); the loop keeps deciding, and every record
it rejects is on the dead-letter topic with its reason.

A seeded generator draws values at the bounds of schemas/bounds.py, times far past the clock
and at the edges of the contracts' range, unknown pools, jobs and services, duplicates, and
records beyond the bounds or not JSON at all (which must all be dead letters).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

import pytest
from loop_factories import at, cluster
from tests_clock import ManualClock

from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import (
    Allocation,
    DeadLetter,
    DemandSample,
    GpuSample,
    InventoryNode,
    InventoryPool,
    JobEvent,
    JobEventKind,
    PoolInventory,
)
from schemas import bounds as b
from schemas.base import Event
from schemas.codec import encode
from schemas.topics import (
    ALLOCATIONS,
    DEAD_LETTERS,
    DEMAND_SAMPLES,
    GPU_SAMPLES,
    INVENTORY,
    JOB_EVENTS,
    Topic,
)
from streams.fold import ClusterFold
from streams.memory_bus import MemoryBus
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor
from streams.state_diff import seed_of

pytestmark = pytest.mark.slow
PER_TOPIC = 10_000
POOLS = ["a100", "t4", "atlantis"]


def _time(rng: random.Random, step: int) -> datetime:
    far = at(step + 200)  # two days ahead: beyond the default skew
    return rng.choice([at(step), at(step) - timedelta(days=3), b.LATEST_TIME, b.EARLIEST_TIME, far])


def _job_event(rng: random.Random, step: int) -> JobEvent:
    job_id = f"j{rng.randrange(40)}"
    kind = rng.choice(list(JobEventKind))
    spec = {
        "job_id": job_id,
        "gpus": rng.choice([1, 8, b.MAX_GANG_GPUS]),
        "priority_weight": rng.choice([1.0, b.MAX_PRIORITY_WEIGHT, 1e-6]),
        "estimated_gpu_s": rng.choice([3600.0, b.MAX_GPU_SECONDS]),
        "restart_cost_s": rng.choice([0.0, b.MAX_DURATION_S]),
    }
    return JobEvent.model_validate(
        {
            "cluster": rng.choice(["c1", "c1", "other"]),
            "job_id": job_id,
            "kind": kind,
            "time": _time(rng, step),
            "spec": spec if kind == JobEventKind.SUBMITTED or rng.random() < 0.2 else None,
            "pool": rng.choice([*POOLS, None]),
            "done_gpu_s": rng.choice([None, 0.0, b.MAX_GPU_SECONDS]),
            "nodes": rng.choice([None, {"a100-n0": b.MAX_NODE_GPUS}]),
        }
    )


def _demand(rng: random.Random, step: int) -> DemandSample:
    return DemandSample(
        cluster="c1",
        service=rng.choice(["chat", "ghost"]),
        time=_time(rng, step),
        requests_per_s=rng.choice([0.0, b.MAX_REQUESTS_PER_S]),
        gpus_busy=rng.choice([0.0, 3.0, b.MAX_DEMAND_GPUS]),
    )


def _gpu(rng: random.Random, step: int) -> GpuSample:
    return GpuSample(
        cluster="c1",
        pool=rng.choice(POOLS),
        node=f"n{rng.randrange(4)}",
        gpu_index=rng.randrange(b.MAX_NODE_GPUS),
        gpu_uuid=f"G{rng.randrange(64)}",
        time=_time(rng, step),
        utilization_pct=100.0,
        memory_used_mib=b.MAX_GPU_MEMORY_MIB,
        memory_total_mib=b.MAX_GPU_MEMORY_MIB,
        power_w=b.MAX_POWER_W,
        timeslice_replicas=b.MAX_SHARE,
    )


def _inventory(rng: random.Random, step: int) -> PoolInventory:
    def node(i: int) -> InventoryNode:
        gpus = rng.choice([0, 8, b.MAX_NODE_GPUS])
        down = rng.random() < 0.3
        return InventoryNode(name=f"n{i}", gpus=gpus, gpus_free=rng.randint(0, gpus), schedulable=not down,
                             reason="down" if down else None)  # fmt: skip

    pools = rng.sample(POOLS, rng.randint(1, 2))
    nodes = [[node(i) for i in range(rng.randrange(5))] for _ in pools]
    return PoolInventory(
        cluster=rng.choice(["c1", "c1", "other"]),
        time=_time(rng, step),
        source="fuzz",
        pools=[InventoryPool(name=p, gpu_type="X", nodes=n) for p, n in zip(pools, nodes, strict=True)],
    )


def _malformed(rng: random.Random, valid: bytes) -> bytes:
    document = json.loads(valid)
    choice = rng.randrange(4)
    if choice == 0:
        return rng.randbytes(rng.randrange(1, 40))
    if choice == 1:
        document["time"] = "9999-01-01T00:00:00Z"
    elif choice == 2:
        document["cluster"] = 10**12
    else:
        document["surprise"] = 1e20
    return json.dumps(document).encode()


MAKERS = {JOB_EVENTS: _job_event, DEMAND_SAMPLES: _demand, GPU_SAMPLES: _gpu, INVENTORY: _inventory}


def test_hostile_records_are_dead_lettered_with_reasons_and_the_loop_keeps_deciding() -> None:
    rng = random.Random(20261201)
    clock = ManualClock(at(0))
    state = StateProcessor(fold=ClusterFold(seed=seed_of(cluster(0))), clock=clock, replan_on_events=False)
    policy = PlannerPolicy(name="ebbtide", config=PlannerConfig(time_limit_s=1.0))
    optimizer = OptimizerProcessor(policy=policy, forecast_wait_s=0.0, cluster="c1", clock=clock)
    bus = MemoryBus([state, optimizer])
    malformed: dict[str, set[int]] = {t.name: set() for t in MAKERS}
    steps = 4
    for step in range(steps):
        clock.when = at(step)
        for topic, make in MAKERS.items():
            _publish(bus, topic, rng, step, PER_TOPIC // steps, lambda s=step, m=make: m(rng, s), malformed)
        bus.run()
    allocations = [a for a in bus.read(ALLOCATIONS) if isinstance(a, Allocation)]
    assert [a.issued_at for a in allocations] == [at(s) for s in range(steps)]  # every step decided
    assert not any(a.fallback for a in allocations), [a.fallback_reason for a in allocations]
    letters = [d for d in bus.read(DEAD_LETTERS) if isinstance(d, DeadLetter)]
    assert all(d.error and d.consumer == "state" for d in letters)
    by_topic: dict[str, set[int]] = {}
    for d in letters:
        by_topic.setdefault(d.source_topic, set()).add(d.offset)
    for topic, offsets in malformed.items():
        assert offsets and offsets <= by_topic.get(topic, set())  # every malformed record is a letter
    hostile_valid = sum(len(v) for v in by_topic.values()) - sum(len(v) for v in malformed.values())
    assert hostile_valid > 0  # valid records rejected too (far times, unknown pools and jobs)
    reasons = " ".join(d.error for d in letters)
    for expected in ("past the state service's clock", "not a pool of cluster", "never submitted",
                     "not pools of cluster c1"):  # fmt: skip
        assert expected in reasons


def _publish(bus, topic: Topic, rng, step, count, make, malformed) -> None:  # type: ignore[no-untyped-def]
    previous: Event | None = None
    for _ in range(count):
        event = previous if previous is not None and rng.random() < 0.05 else make()  # duplicates
        if rng.random() < 0.05:
            record = bus.publish_raw(topic, _malformed(rng, encode(event)), b"k")
            malformed[topic.name].add(record.offset())
        else:
            bus.publish(topic, [event])
        previous = event
