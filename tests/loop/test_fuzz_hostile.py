"""Fuzz: 10,000 hostile records per input topic of every stream service, drawn from the JSON Schemas,
plus malformed bytes, through the in-memory bus (no broker); the loop keeps deciding, and every
record a service rejects is on the dead-letter topic with its reason.

The topics: job events, demand samples, GPU samples and pool inventories (the state service, which
reads forecasts and allocations too), cluster states (the forecaster and the optimizer), forecasts
(the optimizer), allocations (the actuator); each topic's consumers are the services' own
``inputs``, so a topic a service starts reading is fuzzed or the test fails. Each record
is a document drawn by :class:`schema_fuzz.SchemaFuzzer` from the event's file in schemas/json:
values at the bounds, the contract's earliest and latest times and times near or far from the
services' clock, known and unknown clusters, pools, jobs and services, 5% duplicates of the record
before, 5% malformed bytes. Each step the bus also carries the cluster's own events, so the
genuine loop runs among them: the state service publishes its ClusterState, the forecaster and
the optimizer answer it, the actuator applies the Allocation (dry run). After the fuzzed steps
one clean step must be decided from the cluster's own state and applied.

The counts per topic are printed (``pytest -s``): records, malformed, refused by the contract's
own rules, refused by a service's checks (with the reasons), and the dead letters of each consumer.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from loop_factories import STEP_S, at, cluster
from schema_fuzz import SchemaFuzzer, iso, malformed
from tests_clock import ManualClock

from actuators.factory import ActuatorConfig, build_actuator
from forecaster.source import SeasonalNaiveSource
from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import ActuationResult, Allocation, ClusterState, DeadLetter
from schemas.bounds import EARLIEST_TIME, LATEST_TIME
from schemas.codec import DecodeError, decode
from schemas.topics import (
    ACTUATIONS,
    ALLOCATIONS,
    CLUSTER_STATE,
    DEAD_LETTERS,
    DEMAND_SAMPLES,
    FORECASTS,
    GPU_SAMPLES,
    INVENTORY,
    JOB_EVENTS,
    Topic,
)
from streams.fold import ClusterFold
from streams.memory_bus import MemoryBus
from streams.services.actuator import ActuatorProcessor
from streams.services.forecaster import ForecasterProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor
from streams.state_diff import events_between, seed_of

pytestmark = pytest.mark.slow
PER_TOPIC = 10_000
STEPS = 4
CLUSTER = "c1"
INPUT_TOPICS = (JOB_EVENTS, DEMAND_SAMPLES, GPU_SAMPLES, INVENTORY, CLUSTER_STATE, FORECASTS, ALLOCATIONS)
Consumers = dict[Topic, tuple[str, ...]]


def consumers_of(bus: MemoryBus) -> Consumers:
    """Each fuzzed topic's consumers, from the services' own ``inputs``: every input is fuzzed."""
    inputs = {topic for p in bus.processors for topic in p.inputs}
    assert inputs == set(INPUT_TOPICS), inputs ^ set(INPUT_TOPICS)
    return {t: tuple(p.name for p in bus.processors if t in p.inputs) for t in INPUT_TOPICS}


def _times(step: int) -> Callable[[random.Random], str]:
    """Now, a quarter step ahead, three days back, two days ahead (past every skew), the contract's ends."""
    now = at(step)
    near = [now, now, now + timedelta(seconds=STEP_S // 4)]
    far = [now - timedelta(days=3), now + timedelta(days=2), LATEST_TIME, EARLIEST_TIME]
    return lambda rng: iso(rng.choice(near + far))


def _hints(step: int) -> dict[str, Callable[[random.Random], Any]]:
    when = _times(step)
    return {
        "cluster": lambda rng: rng.choice([CLUSTER, CLUSTER, CLUSTER, "other"]),
        "job_id": lambda rng: f"j{rng.randrange(40)}",
        "pool": lambda rng: rng.choice(["a100", "t4", "atlantis"]),
        "service": lambda rng: rng.choice(["chat", "chat", "ghost"]),
        "node": lambda rng: rng.choice(["a100-n0", "a100-n1", "t4-n0", "nowhere"]),
        "plan_id": lambda rng: rng.choice(["p-dup", "p-other", f"p-{rng.randrange(10**6)}"]),
        **{name: when for name in ("time", "as_of", "issued_at", "submitted_at", "started_at")},
    }


def _fix_job_event(rng: random.Random, doc: dict[str, Any]) -> None:
    if isinstance(doc.get("spec"), dict) and rng.random() < 0.9:
        doc["spec"]["job_id"] = doc["job_id"]  # mostly a consistent spec: its values reach the fold


def _fix_forecast(rng: random.Random, doc: dict[str, Any]) -> None:
    if rng.random() < 0.8:  # mostly well-formed curves with hostile values
        steps = doc["horizon_steps"] = rng.choice([1, 96, 96, 96, 96, 96, 96, 96, 96, 96, 96, 96, 96, 10_000])
        doc["step_s"] = rng.choice([STEP_S, STEP_S, 1, 86_400])
        base = rng.choice([0.0, 3.0, 1e7])
        doc["quantiles"] = {q: [base] * steps for q in ("p50", "p90", "p99")}


def _fix_inventory(rng: random.Random, doc: dict[str, Any]) -> None:
    if rng.random() < 0.8:  # mostly the cluster's pool names, now and then one it does not have
        names = rng.sample(["a100", "t4", "atlantis"], k=3)
        for pool, name in zip(doc.get("pools", ()), names, strict=False):
            pool["name"] = name


def _fix_cluster_state(rng: random.Random, doc: dict[str, Any]) -> None:
    """Mostly a state the contract takes (its cross-field rules are not in the JSON Schema), so
    hostile values at the bounds reach the forecaster and the planner."""
    if rng.random() < 0.2:
        return
    for pool in doc["pools"]:
        pool["gpus_available"] = min(pool["gpus_available"], pool["gpus_total"])
        when = datetime.fromisoformat
        pool["windows"] = [w for w in pool.get("windows", ()) if when(w["end"]) > when(w["start"])]
        pool.pop("node_names", None)
        pool.pop("free_gpus_by_node", None)
    for service in doc.get("services", ()):
        spec = service["spec"]
        if "min_replicas" in spec and "max_replicas" in spec:
            spec["min_replicas"] = min(spec["min_replicas"], spec["max_replicas"])
    doc["jobs"] = [j for j in doc.get("jobs", ()) if j.get("pool") or j.get("status") != "running"]


def _fix_allocation(rng: random.Random, doc: dict[str, Any]) -> None:
    if rng.random() < 0.8:  # mostly valid for a step, so it reaches the backend
        issued = datetime.fromisoformat(doc["issued_at"])
        doc["valid_until"] = iso(issued + timedelta(seconds=doc.get("step_s", STEP_S)))


FIXUPS: dict[Topic, Callable[[random.Random, dict[str, Any]], None]] = {
    JOB_EVENTS: _fix_job_event,
    INVENTORY: _fix_inventory,
    CLUSTER_STATE: _fix_cluster_state,
    FORECASTS: _fix_forecast,
    ALLOCATIONS: _fix_allocation,
}


class Ledger:
    """What was published per topic, and which records the contract itself refuses."""

    def __init__(self) -> None:
        self.published: Counter[str] = Counter()
        self.malformed: dict[str, set[int]] = {t.name: set() for t in INPUT_TOPICS}
        self.refused: dict[str, set[int]] = {t.name: set() for t in INPUT_TOPICS}  # by the codec
        self.offsets: dict[str, set[int]] = {t.name: set() for t in INPUT_TOPICS}  # the fuzzed ones

    def publish(self, bus: MemoryBus, topic: Topic, value: bytes, broken: bool) -> None:
        record = bus.publish_raw(topic, value, b"fuzz")
        self.published[topic.name] += 1
        self.offsets[topic.name].add(record.offset())
        if broken:
            self.malformed[topic.name].add(record.offset())
        try:
            decode(topic.event, value)
        except DecodeError:
            self.refused[topic.name].add(record.offset())


def _fuzz_step(bus: MemoryBus, ledger: Ledger, rng: random.Random, step: int) -> None:
    hints = _hints(step)
    for topic in INPUT_TOPICS:
        fuzzer = SchemaFuzzer(topic.event.__name__, rng, hints, fixup=FIXUPS.get(topic))
        previous: bytes | None = None
        for _ in range(PER_TOPIC // STEPS):
            if previous is not None and rng.random() < 0.05:
                ledger.publish(bus, topic, previous, broken=False)  # a duplicate
                continue
            doc = fuzzer.document()
            broken = rng.random() < 0.05
            value = malformed(rng, doc) if broken else json.dumps(doc).encode()
            ledger.publish(bus, topic, value, broken)
            previous = value


def _loop(clock: ManualClock) -> tuple[MemoryBus, dict[str, Any]]:
    seed = cluster(0, history=[3.0] * 8)
    state = StateProcessor(fold=ClusterFold(seed=seed_of(seed)), clock=clock, replan_on_events=False)
    forecaster = ForecasterProcessor(source=SeasonalNaiveSource(horizon_steps=8))
    policy = PlannerPolicy(name="ebbtide", config=PlannerConfig(time_limit_s=1.0))
    optimizer = OptimizerProcessor(
        policy=policy, forecast_wait_s=0.0, cluster=CLUSTER, clock=clock, max_state_skew_s=STEP_S
    )
    engine = build_actuator(ActuatorConfig(), CLUSTER, clock=clock.now)
    actuator = ActuatorProcessor(backend=engine, clock=clock, max_allocation_skew_s=STEP_S)
    parts = {"state": state, "optimizer": optimizer, "actuator": actuator, "seed": seed}
    return MemoryBus([state, forecaster, optimizer, actuator]), parts


def test_hostile_records_on_every_input_topic_are_dead_lettered_and_the_loop_keeps_deciding() -> None:
    rng = random.Random(20261201)
    clock = ManualClock(at(0))
    bus, parts = _loop(clock)
    ledger = Ledger()
    previous: ClusterState = parts["seed"]
    for step in range(1, STEPS + 2):  # the fuzzed steps, then one clean step
        clock.when = at(step)
        own = cluster(step, history=[3.0] * 8)
        bus.publish(JOB_EVENTS, events_between(previous, own)[0])
        if step <= STEPS:
            _fuzz_step(bus, ledger, rng, step)
        bus.run()
        previous = own
    letters = [d for d in bus.read(DEAD_LETTERS, strict=False) if isinstance(d, DeadLetter)]
    consumers = consumers_of(bus)
    _print_summary(ledger, letters, consumers)
    _assert_every_refused_record_is_a_letter(ledger, letters, consumers)
    _assert_the_loop_kept_deciding(bus)


def _assert_every_refused_record_is_a_letter(
    ledger: Ledger, letters: list[DeadLetter], consumers: Consumers
) -> None:
    assert all(d.error for d in letters)
    lettered: dict[tuple[str, str], set[int]] = {}
    for d in letters:
        lettered.setdefault((d.source_topic, d.consumer), set()).add(d.offset)
    for topic, names in consumers.items():
        assert ledger.malformed[topic.name] and ledger.malformed[topic.name] <= ledger.refused[topic.name]
        for consumer in names:
            got = lettered.get((topic.name, consumer), set())
            missing = ledger.refused[topic.name] - got
            assert not missing, f"{topic.name}: {len(missing)} refused records no {consumer} dead letter"
    reasons = " ".join(d.error for d in letters)
    for expected in (
        "past the state service's clock",
        "not a pool of cluster",
        "not pools of cluster c1",
        "never submitted",
        "past the optimizer's clock",
        "past the actuator's clock",
    ):
        assert expected in reasons


def _assert_the_loop_kept_deciding(bus: MemoryBus) -> None:
    mine = [
        a for a in bus.read(ALLOCATIONS, strict=False) if isinstance(a, Allocation) and a.cluster == CLUSTER
    ]
    decided = {a.issued_at for a in mine}
    assert {at(s) for s in range(1, STEPS + 2)} <= decided  # the loop's own step, every step
    assert all(a.fallback_reason for a in mine if a.fallback)
    applied = {
        r.plan_id
        for r in bus.read(ACTUATIONS, strict=False)
        if isinstance(r, ActuationResult) and r.outcome in ("applied", "already-applied")
    }
    last = [a for a in mine if a.issued_at == at(STEPS + 1) and a.policy == "ebbtide"]
    assert last and all(a.plan_id in applied for a in last)  # the clean step is applied


def _print_summary(ledger: Ledger, letters: list[DeadLetter], consumers: Consumers) -> None:
    """Per topic: the fuzzed records, and each consumer's dead letters of them by reason; then the
    dead letters of records the services wrote themselves (answers to hostile inputs)."""
    by_consumer = Counter(
        (d.source_topic, d.consumer) for d in letters if d.offset in ledger.offsets[d.source_topic]
    )
    checks = Counter(
        (d.source_topic, d.consumer, _reason_kind(d.error))
        for d in letters
        if d.offset in ledger.offsets[d.source_topic] and d.offset not in ledger.refused[d.source_topic]
    )
    own = Counter(
        (d.source_topic, d.consumer, _reason_kind(d.error))
        for d in letters
        if d.source_topic in ledger.offsets and d.offset not in ledger.offsets[d.source_topic]
    )
    print("\nfuzz tier: records per input topic and what became of them")
    for topic, names in consumers.items():
        name = topic.name
        lettered = ", ".join(f"{c} {by_consumer[(name, c)]}" for c in names)
        kinds = "; ".join(f"{c}: {k} {n}" for (t, c, k), n in sorted(checks.items()) if t == name) or "none"
        print(
            f"  {name}: {ledger.published[name]} records, {len(ledger.malformed[name])} malformed, "
            f"{len(ledger.refused[name])} refused by the contract; dead letters: {lettered}; "
            f"refused by a service's checks: {kinds}"
        )
    for (topic_name, consumer, kind), n in sorted(own.items()):
        print(f"  of the services' own records on {topic_name}: {consumer} dead-lettered {n} ({kind})")


def _reason_kind(error: str) -> str:
    for marker, kind in (
        ("past the", "time past the clock"),
        ("not a pool", "unknown pool"),
        ("not pools of", "unknown pools"),
        ("never submitted", "unknown job"),
        ("in no pool", "started in no pool"),
        ("not a service", "unknown service"),
    ):
        if marker in error:
            return kind
    return error.split(":", 2)[1].strip() if error.count(":") >= 2 else error[:60]
