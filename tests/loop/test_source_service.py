"""The source service over the in-memory bus: a cluster's changes reach the state fold once each,
a restarted source repeats nothing, a failed snapshot or delivery loses nothing.

The cluster here is ``ScriptedCluster``, a test double of a ClusterSource that replays a script of
snapshots (the real sources, Slurm and Kubernetes, are tested against their real daemons).
"""

from __future__ import annotations

import threading

from loop_factories import at, cluster, spec
from prometheus_client import CollectorRegistry
from tests_clock import ManualClock

from loop import SourcedJob, SourceSnapshot
from schemas import InventoryNode, InventoryPool, JobEventKind, JobStatus, PoolInventory
from schemas.base import Event
from schemas.topics import INVENTORY, JOB_EVENTS, Topic
from streams.fold import ClusterFold
from streams.health import Heartbeat
from streams.memory_bus import MemoryBus
from streams.metrics import EbbtideMetrics
from streams.producer import DeliveryError
from streams.services.source import SourcePublisher, run_source, step_once
from streams.services.state import StateProcessor

K = JobEventKind
TOPICS = {JOB_EVENTS.name: JOB_EVENTS, INVENTORY.name: INVENTORY}


class ScriptedCluster:
    """TEST DOUBLE of a ClusterSource: answers its snapshots in order (an Exception entry raises)."""

    name = "scripted"

    def __init__(self, script: list[SourceSnapshot | Exception]) -> None:
        self.script = list(script)

    def snapshot(self) -> SourceSnapshot:
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class BusSink:
    """The in-memory bus as a source's sink; ``fail_flushes`` flushes answer DeliveryError first
    (the records stay off the bus, as a broker that acknowledged nothing)."""

    def __init__(self, bus: MemoryBus, fail_flushes: int = 0) -> None:
        self.bus = bus
        self.fail_flushes = fail_flushes
        self.queued: list[tuple[Topic, Event]] = []

    def send(self, topic: Topic, event: Event) -> None:
        self.queued.append((topic, event))

    def flush(self, timeout_s: float = 30.0) -> None:
        queued, self.queued = self.queued, []
        if self.fail_flushes:
            self.fail_flushes -= 1
            raise DeliveryError(f"not acknowledged: {len(queued)} record(s)")
        for topic, event in queued:
            self.bus.publish(topic, [event])


def sourced(phase: str, step: int, **kw: object) -> SourceSnapshot:
    jobs = {"c1-7": SourcedJob(job_id="c1-7", phase=phase, spec=spec("c1-7", gpus=4), **kw)}  # type: ignore[arg-type]
    nodes = [InventoryNode(name="x1", gpus=8, gpus_free=8), InventoryNode(name="x2", gpus=8, gpus_free=8)]
    if step >= 3:
        nodes[1] = InventoryNode(name="x2", gpus=8, gpus_free=0, schedulable=False, reason="drained")
    inventory = PoolInventory(cluster="c1", time=at(step), source="scripted",
                              pools=[InventoryPool(name="a100", gpu_type="A100", nodes=nodes)])  # fmt: skip
    return SourceSnapshot(cluster="c1", time=at(step), jobs=jobs, inventory=inventory)


def _bus() -> tuple[MemoryBus, StateProcessor]:
    state = StateProcessor(fold=ClusterFold(seed=cluster(0, jobs=[])), clock=ManualClock(at(10)))
    return MemoryBus([state]), state


def _metrics() -> EbbtideMetrics:
    return EbbtideMetrics(CollectorRegistry())


def _run(publisher: SourcePublisher, sink: BusSink, rounds: int, metrics: EbbtideMetrics) -> list[bool]:
    return [step_once(publisher, sink, TOPICS, metrics) for _ in range(rounds)]


def test_changes_reach_the_state_once_and_a_restart_repeats_nothing() -> None:
    bus, state = _bus()
    metrics = _metrics()
    script = [sourced("held", 1), sourced("held", 2), sourced("running", 3, pool="a100", nodes={"x1": 4})]
    first = SourcePublisher(ScriptedCluster(script), "c1", pools=["a100", "t4"])
    assert _run(first, BusSink(bus), 3, metrics) == [True, True, True]
    bus.run()
    assert [e.kind for e in bus.read(JOB_EVENTS)] == [K.SUBMITTED, K.STARTED]
    assert len(bus.read(INVENTORY)) == 2, "the inventory again only when it changed (x2 drained)"
    (running,) = state.fold.snapshot(at(3)).jobs
    assert (running.status, running.pool, running.nodes) == (JobStatus.RUNNING, "a100", {"x1": 4})
    assert state.fold.snapshot(at(3)).pools[0].gpus_available == 8

    # restarted: what it published is read back; the same cluster publishes nothing new
    again = [sourced("running", 4, pool="a100", nodes={"x1": 4}), sourced("finished", 5, pool="a100")]
    second = SourcePublisher(ScriptedCluster(again), "c1", restored_jobs=bus.read(JOB_EVENTS),
                             restored_inventories=bus.read(INVENTORY), pools=["a100", "t4"])  # fmt: skip
    _run(second, BusSink(bus), 2, metrics)
    assert [e.kind for e in bus.read(JOB_EVENTS)] == [K.SUBMITTED, K.STARTED, K.FINISHED]
    assert len(bus.read(INVENTORY)) == 2
    bus.run()
    assert state.fold.snapshot(at(5)).jobs == []
    assert metrics.job_events.labels("c1", "finished")._value.get() == 1


def test_a_failed_snapshot_is_counted_and_the_next_round_goes_on() -> None:
    bus, _ = _bus()
    metrics = _metrics()
    script = [RuntimeError("squeue: timed out"), sourced("held", 1)]
    publisher = SourcePublisher(ScriptedCluster(script), "c1")
    assert _run(publisher, BusSink(bus), 2, metrics) == [False, True]
    assert metrics.source_snapshot_failures.labels("c1", "scripted")._value.get() == 1
    assert [e.kind for e in bus.read(JOB_EVENTS)] == [K.SUBMITTED]


def test_an_unacknowledged_round_is_sent_again_unchanged_before_any_new_snapshot() -> None:
    bus, _ = _bus()
    script = [sourced("held", 1), sourced("running", 2, pool="a100")]
    publisher = SourcePublisher(ScriptedCluster(script), "c1")
    sink = BusSink(bus, fail_flushes=1)
    assert _run(publisher, sink, 1, _metrics()) == [False]
    assert publisher.last == {} and bus.read(JOB_EVENTS) == []
    assert _run(publisher, sink, 2, _metrics()) == [True, True]
    events = bus.read(JOB_EVENTS)
    assert [(e.kind, e.time) for e in events] == [(K.SUBMITTED, at(1)), (K.STARTED, at(2))]


def test_inventory_outside_the_clusters_pools_is_left_out() -> None:
    bus, _ = _bus()
    snapshot = sourced("held", 1)
    assert snapshot.inventory is not None
    debug = InventoryPool(name="debug", gpu_type="none", nodes=[])
    wider = snapshot.inventory.model_copy(update={"pools": [*snapshot.inventory.pools, debug]})
    publisher = SourcePublisher(ScriptedCluster([SourceSnapshot("c1", at(1), snapshot.jobs, wider)]), "c1",
                                pools=["a100", "t4"])  # fmt: skip
    _run(publisher, BusSink(bus), 1, _metrics())
    bus.run()
    (inventory,) = bus.read(INVENTORY)
    assert [p.name for p in inventory.pools] == ["a100"]  # type: ignore[attr-defined]
    assert bus.stats["state"].dead_lettered == 0


def test_run_source_beats_and_stops() -> None:
    bus, _ = _bus()
    stop = threading.Event()
    script: list[SourceSnapshot | Exception] = [RuntimeError("squeue: timed out")]
    script += [sourced("held", i) for i in range(1, 50)]
    publisher = SourcePublisher(ScriptedCluster(script), "c1")
    heartbeat = Heartbeat("source")

    class StopAfter(BusSink):
        def flush(self, timeout_s: float = 30.0) -> None:
            super().flush(timeout_s)
            if len(publisher.source.script) < 47:  # type: ignore[attr-defined]
                stop.set()

    assert run_source(publisher, StopAfter(bus), topic_prefix="", interval_s=0.01, stop=stop,
                      metrics=_metrics(), heartbeat=heartbeat) == 0  # fmt: skip
    assert [e.kind for e in bus.read(JOB_EVENTS)] == [K.SUBMITTED]
    assert heartbeat.beats >= 3, "every round beats, the failed snapshot's too"
    assert bus.read(JOB_EVENTS)[0].time == at(1)  # type: ignore[attr-defined]
