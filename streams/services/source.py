"""The source service (``ebbtide run source``): a cluster's jobs and inventory, published as they change.

Place in the loop: a producer at its start, beside the collector and the demand source. Every
``interval_s`` it takes a snapshot of the cluster through a :class:`loop.ClusterSource` (Slurm or
Kubernetes, chosen by ``source.backend``), turns the difference from what it published before into
JobEvents with :func:`loop.lifecycle_events` (each transition once) onto the job-events topic,
keyed by job id, and the snapshot's PoolInventory onto the inventory topic when it differs from the
last one published. The state service folds both.

Order of a round (its commit order): snapshot; produce the round's records; flush, which waits for
the broker's acknowledgement of every record; only then is the round's outcome taken into ``last``
(the latest event kind per job) and the last inventory. The heartbeat beats after every round,
completed or not (as the stream services beat at every poll: restarting the source would not bring
a cluster or a broker back; ``ebbtide_steps_total{component="source",outcome="error"}`` shows the
failed rounds). A round the
broker did not acknowledge is sent again, the same records with their own times, before any new
snapshot, so a delivery failure neither loses a transition nor publishes one twice with two times.

At start, ``last`` is rebuilt from the compacted job-events topic (the latest event per job of this
cluster, read to the high watermark) and the last inventory from the inventory topic, so a restarted
source publishes nothing for what did not change. A snapshot that raises is logged, counted
(``ebbtide_source_snapshot_failures_total``) and retried next interval; the service goes on.

The source owns its cluster's jobs: a job the job-events topic knows for this cluster that the
cluster no longer reports (and that has not ended) is published as cancelled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from loop import ClusterSource, latest_kinds, lifecycle_events
from schemas import JobEvent, JobEventKind, PoolInventory
from schemas.base import Event
from schemas.topics import INVENTORY, JOB_EVENTS, Topic
from streams.health import Heartbeat
from streams.metrics import EbbtideMetrics
from streams.producer import DeliveryError
from streams.services.runtime import Outgoing
from streams.topics_admin import prefixed

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where a round's records go: ``streams.producer.EventProducer`` (or the in-memory bus)."""

    def send(self, topic: Topic, event: Event) -> None: ...
    def flush(self, timeout_s: float = 30.0) -> None: ...


def restored_inventory(events: Iterable[Event], cluster: str) -> PoolInventory | None:
    """The last PoolInventory of ``cluster`` among events read back in offset order."""
    latest = None
    for event in events:
        if isinstance(event, PoolInventory) and event.cluster == cluster:
            latest = event
    return latest


class SourcePublisher:
    """One source's rounds: what to publish from a snapshot, and what was published (``last``)."""

    def __init__(
        self,
        source: ClusterSource,
        cluster: str,
        restored_jobs: Sequence[Event] = (),
        restored_inventories: Sequence[Event] = (),
        pools: Iterable[str] | None = None,
    ) -> None:
        self.source = source
        self.cluster = cluster
        jobs = [e for e in restored_jobs if isinstance(e, JobEvent)]
        self.last: dict[str, JobEventKind] = latest_kinds(jobs, cluster)
        self.last_inventory = restored_inventory(restored_inventories, cluster)
        self.pools = frozenset(pools) if pools is not None else None
        self.unconfirmed: list[Outgoing] = []
        self.failures = 0

    def round(self) -> list[Outgoing] | None:
        """The records of this round; None when the snapshot failed (logged and counted)."""
        if self.unconfirmed:
            return list(self.unconfirmed)
        try:
            snapshot = self.source.snapshot()
        except Exception as exc:
            self.failures += 1
            log.warning("source %s: snapshot of %s failed (%s: %s); retrying next interval",
                        self.source.name, self.cluster, type(exc).__name__, exc)  # fmt: skip
            return None
        out: list[Outgoing] = [(JOB_EVENTS, e) for e in lifecycle_events(self.last, snapshot)]
        inventory = self._within_pools(snapshot.inventory)
        if inventory is not None and not inventory.same_as(self.last_inventory):
            out.append((INVENTORY, inventory))
        self.unconfirmed = out
        return out

    def _within_pools(self, inventory: PoolInventory | None) -> PoolInventory | None:
        """The inventory's pools that are pools of the cluster (the others are not planned)."""
        if inventory is None or self.pools is None:
            return inventory
        kept = [p for p in inventory.pools if p.name in self.pools]
        if len(kept) < len(inventory.pools):
            dropped = sorted({p.name for p in inventory.pools} - self.pools)
            log.debug("source %s: partitions %s are no pools of %s", self.source.name, dropped, self.cluster)
        return inventory.model_copy(update={"pools": kept})

    def confirm(self) -> list[Event]:
        """The broker acknowledged the round: take it into ``last``; returns what it published."""
        published = [event for _, event in self.unconfirmed]
        for event in published:
            if isinstance(event, JobEvent):
                self.last[event.job_id] = event.kind
            elif isinstance(event, PoolInventory):
                self.last_inventory = event
        self.unconfirmed = []
        return published


def run_source(
    publisher: SourcePublisher,
    sink: Sink,
    *,
    topic_prefix: str,
    interval_s: float,
    stop: threading.Event,
    metrics: EbbtideMetrics,
    heartbeat: Heartbeat | None = None,
) -> int:
    """Run rounds every ``interval_s`` until ``stop`` is set (see the module doc); returns 0."""
    topics = {t.name: prefixed(t, topic_prefix) for t in (JOB_EVENTS, INVENTORY)}
    while not stop.is_set():
        step_once(publisher, sink, topics, metrics)
        if heartbeat is not None:  # the loop is alive; a cluster or broker outage is no failed probe
            heartbeat.beat()
        stop.wait(interval_s)
    return 0


def step_once(
    publisher: SourcePublisher, sink: Sink, topics: dict[str, Topic], metrics: EbbtideMetrics
) -> bool:
    """One round: snapshot, produce, flush, confirm. Whether it completed."""
    name, cluster = publisher.source.name, publisher.cluster
    out = publisher.round()
    if out is None:
        metrics.record_source_failure(cluster, name)
        metrics.record_step("source", ok=False)
        return False
    for topic, event in out:
        sink.send(topics[topic.name], event)
    try:
        sink.flush(30.0)
    except DeliveryError as exc:
        log.error("source %s: %s; the round is sent again next interval", name, exc)
        metrics.record_step("source", ok=False)
        return False
    published = publisher.confirm()
    for event in published:
        log.info("source %s: published %s", name, _describe(event))
    metrics.record_source_round(cluster, name, published)
    metrics.record_step("source", ok=True)
    return True


def _describe(event: Event) -> str:
    if isinstance(event, JobEvent):
        return f"{event.kind.value} {event.job_id} ({event.message})"
    assert isinstance(event, PoolInventory)
    gpus = {p.name: sum(n.gpus for n in p.nodes if n.schedulable) for p in event.pools}
    return f"inventory: schedulable GPUs {gpus}"
