"""The state service: folds job events, demand samples, telemetry and allocations into ClusterState.

A thin adapter over :class:`streams.fold.ClusterFold`. It publishes a snapshot on the compacted
cluster-state topic at every step boundary of its clock, and at once on a significant event (a
job submitted at or above the high-priority weight, GPUs lost from a pool, a demand sample outside
the band of the latest forecast) when asked to. A cluster source's PoolInventory sets the
capacity and nodes of the pools it reports (streams/fold_inventory.py). Its
input offsets are committed only right after a snapshot is produced, so after a restart it
resumes from the last published snapshot (read back from the compacted topic) and replays just
the events that came after it; the fold ignores replays.

Jobs' first starts (for the queue-wait histogram) are handed to ``on_first_starts`` when the
snapshot that holds them is published, not when their event is folded. A restart resumes from
that snapshot, which shows those jobs running (or preempted, or gone), so their replayed starts do
not count again. The limit: a crash after a snapshot was produced but before its input offsets
were committed replays the events since the previous commit onto the fold restored from the new
snapshot; jobs that started and already finished within that one step (absent from the snapshot,
so submitted afresh by the replay) are observed a second time, at most once per such crash.

Hostile but valid input is dead-lettered with its reason (``on_event`` raises ValueError, which
streams/services/dispatch.py turns into a dead letter), never folded: an event of this cluster
dated more than ``max_event_skew_s`` past the service's clock (a job event, sample, allocation
or forecast from year 2199 would otherwise freeze what it refers to), a job reported in a pool
the cluster does not have, a progress, finish or preemption of a job never submitted, telemetry
of an unknown pool, an inventory naming a pool the cluster does not have (see
:meth:`streams.fold.ClusterFold.unknown_reference`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from loop import Clock
from schemas import (
    Allocation,
    ClusterState,
    DemandForecast,
    DemandSample,
    GpuSample,
    JobEvent,
    JobEventKind,
    JobState,
    PoolInventory,
)
from schemas.base import Event
from schemas.topics import (
    ALLOCATIONS,
    CLUSTER_STATE,
    DEMAND_SAMPLES,
    FORECASTS,
    GPU_SAMPLES,
    INVENTORY,
    JOB_EVENTS,
    Topic,
)
from streams.fold import ClusterFold, FoldedEvent, Pruning, floor_to_step
from streams.services.forecaster import drifted
from streams.services.runtime import Outgoing


def significant(event: Event, fold: ClusterFold, high_priority_weight: float) -> str | None:
    """Why this event should trigger a re-plan before the next step, or None."""
    if (
        isinstance(event, JobEvent)
        and event.kind == JobEventKind.SUBMITTED
        and event.spec is not None
        and event.spec.priority_weight >= high_priority_weight
    ):
        return f"high-priority job {event.job_id} submitted (weight {event.spec.priority_weight:g})"
    return None


def event_time(event: FoldedEvent) -> datetime:
    """When an input event says it happened (an allocation: when it was issued)."""
    return event.issued_at if isinstance(event, Allocation) else event.time


def lost_capacity(previous: ClusterState | None, current: ClusterState) -> str | None:
    if previous is None:
        return None
    before = {p.name: p.gpus_available for p in previous.pools}
    lost = [
        f"{p.name} -{before[p.name] - p.gpus_available}"
        for p in current.pools
        if p.name in before and p.gpus_available < before[p.name]
    ]
    return f"capacity lost: {', '.join(lost)}" if lost else None


@dataclass
class StateProcessor:
    fold: ClusterFold
    clock: Clock
    replan_on_events: bool = True
    high_priority_weight: float = 5.0
    name: str = "state"
    drift_band: str = "p99"
    inputs: tuple[Topic, ...] = (JOB_EVENTS, DEMAND_SAMPLES, GPU_SAMPLES, ALLOCATIONS, FORECASTS, INVENTORY)
    forecasts: dict[str, DemandForecast] = field(default_factory=dict)
    last_published: ClusterState | None = None
    published: int = 0
    triggers: list[str] = field(default_factory=list)
    on_first_starts: Callable[[str, Sequence[JobState]], None] | None = None
    max_event_skew_s: float = 86_400.0
    _urgent: str | None = None
    _dirty: bool = False
    _republish: bool = False

    @property
    def next_boundary(self) -> datetime | None:
        if self.last_published is None:
            return None
        return floor_to_step(self.last_published.as_of, self.fold.step_s) + timedelta(
            seconds=self.fold.step_s
        )

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        if isinstance(event, DemandForecast):
            if event.cluster == self.fold.cluster:
                self._check_time(event.issued_at, "issued_at")
                self.forecasts[event.service] = event
            return ()
        assert isinstance(event, JobEvent | DemandSample | GpuSample | Allocation | PoolInventory)
        if event.cluster == self.fold.cluster:
            self._check_time(event_time(event), "issued_at" if isinstance(event, Allocation) else "time")
            reason = self.fold.unknown_reference(event)
            if reason is not None:
                raise ValueError(reason)
        if not self.fold.apply(event):
            return ()
        self._dirty = True
        if self.replan_on_events and self._urgent is None:
            self._urgent = significant(event, self.fold, self.high_priority_weight) or self._missed(event)
        return ()

    def on_events(self, source: Topic, events: Sequence[Event]) -> Iterable[Outgoing] | None:
        """Telemetry in bulk (the hot topic: only the latest sample per GPU matters); the rest one by one."""
        if source != GPU_SAMPLES:
            return None
        self._check_gpu_samples(events)  # type: ignore[arg-type]
        if self.fold.apply_gpu_samples(events):  # type: ignore[arg-type]
            self._dirty = True
        return ()

    def _check_time(self, time: datetime, name: str) -> None:
        """ValueError (a dead letter) when ``time`` is more than ``max_event_skew_s`` past the clock."""
        now = self.clock.now()
        if time > now + timedelta(seconds=self.max_event_skew_s):
            raise ValueError(
                f"{name}: {time.isoformat()} is more than {self.max_event_skew_s:g} s past the "
                f"state service's clock ({now.isoformat()}; setting state.max_event_skew_s)"
            )

    def _check_gpu_samples(self, samples: Sequence[GpuSample]) -> None:
        """ValueError when any sample of this cluster is too far ahead or of an unknown pool, so the
        run is handed again one by one and each such sample is dead-lettered with its reason."""
        mine = [s for s in samples if s.cluster == self.fold.cluster]
        if not mine:
            return
        self._check_time(max(s.time for s in mine), "time")
        known = {p.name for p in self.fold.seed.pools}
        unknown = {s.pool for s in mine} - known
        if unknown:
            raise ValueError(f"pools {sorted(unknown)}: not pools of cluster {self.fold.cluster}")

    def _missed(self, event: Event) -> str | None:
        """A demand sample outside the band of the service's latest forecast (a forecast miss)."""
        if not isinstance(event, DemandSample):
            return None
        forecast = self.forecasts.get(event.service)
        if forecast is None or not drifted(forecast, event.gpus_busy, event.time, self.drift_band):
            return None
        return (
            f"forecast miss: {event.service} demand {event.gpus_busy:.1f} GPUs is outside the "
            f"{self.drift_band} band of the forecast issued {forecast.issued_at:%H:%M}"
        )

    def on_idle(self) -> Iterable[Outgoing]:
        now = self.clock.now()
        boundary = floor_to_step(now, self.fold.step_s)
        due = self.next_boundary
        if due is None or boundary >= due:
            return self._publish(boundary, "step")
        if self._republish and self.last_published is not None:
            as_of = max(boundary, self.last_published.as_of)
            return self._publish(as_of, "republish after a failed delivery")
        if self.replan_on_events:
            snapshot = self.fold.snapshot(now)
            reason = self._urgent or lost_capacity(self.last_published, snapshot)
            if reason is not None:
                self._urgent = None
                return self._publish(now, reason, snapshot)
        return ()

    def _publish(self, as_of: datetime, reason: str, snapshot: ClusterState | None = None) -> list[Outgoing]:
        state = snapshot if snapshot is not None else self.fold.snapshot(as_of)
        self.last_published = state
        started = self.fold.take_first_starts()
        if started and self.on_first_starts is not None:
            self.on_first_starts(self.fold.cluster, started)
        self.published += 1
        self.triggers.append(reason)
        del self.triggers[:-100]
        self.fold.forget_gone_jobs()
        self.fold.prune(state.as_of)
        self._dirty = False
        self._republish = False
        return [(CLUSTER_STATE, state)]

    def on_rewind(self) -> None:
        """A snapshot since the last commit was not delivered: publish the fold again (the replayed
        inputs change nothing in it), and commit nothing until then."""
        self._republish = True
        self._dirty = True

    def pending(self) -> bool:
        """Events folded but in no published snapshot yet: their offsets must not be committed."""
        return self._dirty


def restore_fold(
    seed: ClusterState,
    restored: list[Event],
    max_history_steps: int,
    not_after: datetime | None = None,
    pruning: Pruning | None = None,
    inventories: Sequence[Event] = (),
) -> tuple[ClusterFold, ClusterState | None]:
    """Rebuild the fold from the latest snapshot of this cluster read back from the state topic.

    Latest by offset (``restored`` is in offset order; a cluster's snapshots share its key and so
    one partition), not by ``as_of``: a snapshot published last wins even where a clock stepped back.
    A snapshot dated after ``not_after`` (the clock plus the allowed skew) is no snapshot of ours.
    The pools' inventory comes from configuration, then from ``inventories`` (the compacted
    inventory topic read back), so the pools a cluster source reported keep its nodes.
    """
    fold, latest = _restore_snapshot(seed, restored, max_history_steps, not_after, pruning)
    for event in inventories:
        if isinstance(event, PoolInventory) and (not_after is None or event.time <= not_after):
            fold.apply(event)
    return fold, latest


def _restore_snapshot(
    seed: ClusterState,
    restored: list[Event],
    max_history_steps: int,
    not_after: datetime | None,
    pruning: Pruning | None,
) -> tuple[ClusterFold, ClusterState | None]:
    latest: ClusterState | None = None
    for event in restored:
        if not isinstance(event, ClusterState) or event.cluster != seed.cluster:
            continue
        if not_after is None or event.as_of <= not_after:
            latest = event
    if latest is None:
        return ClusterFold(seed=seed, max_history_steps=max_history_steps, pruning=pruning or Pruning()), None
    # The static part (pools, service specs, quotas) comes from configuration; the rest from the snapshot.
    kept = {svc.spec.service: svc for svc in latest.services}
    services = [
        svc.model_copy(
            update={
                "replicas": kept[svc.spec.service].replicas,
                "demand_history": kept[svc.spec.service].demand_history,
            }
        )
        if svc.spec.service in kept
        else svc
        for svc in seed.services
    ]
    merged = latest.model_copy(
        update={
            "pools": seed.pools,
            "quotas_gpus": seed.quotas_gpus,
            "step_s": seed.step_s,
            "services": services,
        }
    )
    return ClusterFold(seed=merged, max_history_steps=max_history_steps, pruning=pruning or Pruning()), latest
