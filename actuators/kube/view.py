"""The Kubernetes source's in-memory view: small records of what its watches report, kept current.

Place in the loop: each of the source's reflectors (actuators/kube/reflector.py) feeds its own
:class:`Table` here (``replace`` after a list, ``apply`` per watch event; namespaced kinds have
one table per namespace, read together as a :class:`TableGroup`); ``KubernetesSource.snapshot``
reads them under the view's lock. Workloads are special in two ways:

- a deleted Job (a DELETED event, or gone from a relist after a broken watch) is remembered as
  cancelled for ``forget_after_s`` so the loop hears of it once, unless it had finished or failed;
- a workload whose spec is invalid is reported once per (uid, problem) through ``on_invalid``
  (the source turns that into a Kubernetes Event naming the annotation).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from actuators.kube.jobspec import LABEL_KUEUE_QUEUE, PriorityClassInfo, PriorityWeights
from actuators.kube.records import (
    DeploymentRecord,
    NodeRecord,
    PodRecord,
    WorkloadRecord,
    deployment_record,
    hpa_bounds,
    node_record,
    pod_record,
    priority_class_info,
    workload_record,
)

R = TypeVar("R")
Raw = Mapping[str, Any]


@dataclass
class Table(Generic[R]):
    """Records by key, rebuilt from a list and updated per watch event (a None record: not kept)."""

    lock: threading.Lock
    key: Callable[[Raw], Hashable]
    record: Callable[[Raw], R | None]
    rows: dict[Hashable, R] = field(default_factory=dict)
    on_removed: Callable[[Hashable, R], None] | None = None

    def replace(self, items: list[dict[str, Any]]) -> None:
        fresh = {}
        for obj in items:
            rec = self.record(obj)
            if rec is not None:
                fresh[self.key(obj)] = rec
        with self.lock:
            removed = [(k, r) for k, r in self.rows.items() if k not in fresh]
            self.rows = fresh
        for key, rec in removed:
            self._removed(key, rec)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = self.key(obj)
        rec = None if kind == "DELETED" else self.record(obj)
        with self.lock:
            old = self.rows.pop(key, None)
            if rec is not None:
                self.rows[key] = rec
        if rec is None and old is not None:
            self._removed(key, old)

    def _removed(self, key: Hashable, rec: R) -> None:
        if self.on_removed is not None:
            self.on_removed(key, rec)

    def values(self) -> list[R]:
        with self.lock:
            return list(self.rows.values())


@dataclass
class TableGroup(Generic[R]):
    """One :class:`Table` per reflector of a kind (Jobs per namespace, JobSets, ...), read as one.

    Each reflector's relist replaces only its own table: a JobSet relist must not drop the Jobs,
    nor one namespace's relist another namespace's objects."""

    lock: threading.Lock
    key: Callable[[Raw], Hashable]
    record: Callable[[Raw], R | None]
    on_removed: Callable[[Hashable, R], None] | None = None
    tables: list[Table[R]] = field(default_factory=list)

    def new(self) -> Table[R]:
        table: Table[R] = Table(self.lock, self.key, self.record, on_removed=self.on_removed)
        self.tables.append(table)
        return table

    def values(self) -> list[R]:
        with self.lock:
            return [rec for table in self.tables for rec in table.rows.values()]

    def get(self, key: Hashable) -> R | None:
        with self.lock:
            for table in self.tables:
                if key in table.rows:
                    return table.rows[key]
        return None


def _ns_name(obj: Raw) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _name(obj: Raw) -> str:
    return str((obj.get("metadata") or {}).get("name"))


class KubeView:
    """Everything the source knows, as records; safe to read while the reflectors write."""

    def __init__(
        self,
        *,
        pool_label: str,
        gpu_resource: str,
        weights: PriorityWeights,
        include_kueue: bool,
        on_invalid: Callable[[WorkloadRecord], None],
        forget_after_s: float = 3600.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = threading.Lock()
        self.pool_label, self.gpu_resource = pool_label, gpu_resource
        self.weights, self.include_kueue = weights, include_kueue
        self._on_invalid = on_invalid
        self._reported: set[tuple[str, str]] = set()
        self.forget_after_s, self._monotonic = forget_after_s, monotonic
        self.cancelled: dict[Hashable, tuple[WorkloadRecord, float]] = {}
        lk = self.lock
        self.priority_classes: Table[PriorityClassInfo] = Table(lk, _name, priority_class_info)
        self.nodes: Table[NodeRecord] = Table(lk, _name, lambda o: node_record(o, pool_label, gpu_resource))
        self.pods: Table[PodRecord] = Table(lk, _ns_name, lambda o: pod_record(o, gpu_resource))
        self.deployments: TableGroup[DeploymentRecord] = TableGroup(
            lk, _ns_name, lambda o: deployment_record(o, pool_label, gpu_resource)
        )
        self.hpas: TableGroup[tuple[str, str, int, int]] = TableGroup(lk, _ns_name, hpa_bounds)
        self.workloads: TableGroup[WorkloadRecord] = TableGroup(
            lk, self._workload_key, self._workload, on_removed=self._workload_removed
        )

    @staticmethod
    def _workload_key(obj: Raw) -> Hashable:
        return (str(obj.get("kind") or "Job"), *_ns_name(obj))

    def _workload(self, obj: Raw) -> WorkloadRecord | None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not self.include_kueue and LABEL_KUEUE_QUEUE in labels:
            return None  # Kueue's: left to Kueue
        with self.lock:
            classes = {str(k): v for k, v in self.priority_classes.rows.items()}
        rec = workload_record(
            obj, classes, self.weights, pool_label=self.pool_label, gpu_resource=self.gpu_resource
        )
        with self.lock:
            self.cancelled.pop(self._workload_key(obj), None)  # re-created under the same name
        if rec.error is not None and (rec.uid, str(rec.error)) not in self._reported:
            self._reported.add((rec.uid, str(rec.error)))
            self._on_invalid(rec)
        return rec

    def _workload_removed(self, key: Hashable, rec: WorkloadRecord) -> None:
        if rec.phase in {"finished", "failed"}:
            return
        gone = replace(rec, phase="cancelled", message="deleted")
        with self.lock:
            self.cancelled[key] = (gone, self._monotonic())

    def cancelled_workloads(self) -> list[WorkloadRecord]:
        """Deleted workloads still remembered (those older than ``forget_after_s`` are dropped)."""
        now = self._monotonic()
        with self.lock:
            for key in [k for k, (_, t) in self.cancelled.items() if now - t > self.forget_after_s]:
                del self.cancelled[key]
            return [rec for rec, _ in self.cancelled.values()]
