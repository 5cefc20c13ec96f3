"""The Kubernetes source: what a cluster runs and offers, observed by list + watch, as the loop's input.

Place in the loop: ``ebbtide run source`` with ``source.backend: kubernetes`` builds one
:class:`KubernetesSource`, calls :meth:`start` (every kind listed once before it returns), then
:meth:`snapshot` each tick; the service turns successive snapshots into JobEvents (each lifecycle
change once) and a pool inventory. Between ticks nothing is polled: one reflector per kind
(actuators/kube/reflector.py) on its own thread keeps the view (actuators/kube/view.py) current,
resuming its watch by resourceVersion, relisting after 410 Gone, backing off on errors.

What it follows, in the configured namespaces (none configured: all, by label selector):

- batch Jobs and JobSets labelled ``ebbtide.io/job-id`` (created suspended; the spec comes from
  the object, actuators/kube/jobspec.py), but not those Kueue queues (label
  ``kueue.x-k8s.io/queue-name``) unless ``include_kueue``; a workload whose annotations are
  invalid gets a Warning Event ``EbbtideInvalidSpec`` naming the annotation and is not planned;
- Deployments labelled ``ebbtide.io/service`` (and ``ebbtide.io/pool``) and the HPAs targeting
  them, for replicas per pool and HPA bounds;
- cluster-wide: Nodes (pool label, allocatable GPUs, schedulable or why not), the Pods bound to
  nodes and not finished (GPUs in use per node, and which nodes a Job's pods hold), and
  PriorityClasses (a Job's priority weight and default preemptibility).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes import client

from actuators.base import ActuationError
from actuators.factory import KubernetesConfig
from actuators.kube.client import connect
from actuators.kube.events import REASON_INVALID, record_event
from actuators.kube.jobspec import GPU_RESOURCE, LABEL_JOB, LABEL_POOL, PriorityWeights
from actuators.kube.records import LABEL_SERVICE, NodeRecord, WorkloadRecord
from actuators.kube.reflector import Backoff, Reflector
from actuators.kube.snapshot import build_snapshot
from actuators.kube.view import KubeView, Table
from actuators.kube.workloads import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from loop.sources import SourceSnapshot

log = logging.getLogger(__name__)
RUNNING_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def _with_kind(kind: str, fn: Callable[..., None]) -> Callable[..., None]:
    """List items carry no ``kind``; the view tells Jobs from JobSets by it."""

    def wrapped(*args: Any) -> None:
        objs = args[-1] if isinstance(args[-1], list) else [args[-1]]
        for obj in objs:
            obj.setdefault("kind", kind)
        fn(*args)

    return wrapped


def _reflector(
    name: str,
    lister: Callable[..., Any],
    table: Table[Any],
    opts: dict[str, Any],
    kind: str | None,
    label: str | None,
) -> Reflector:
    """A reflector feeding ``table`` (list items get ``kind`` set: lists leave it out)."""
    replace, apply = (table.replace, table.apply) if kind is None else (
        _with_kind(kind, table.replace), _with_kind(kind, table.apply)
    )  # fmt: skip
    return Reflector(name, lister, replace, apply, label_selector=label, **opts)


class KubernetesSource:
    name = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        *,
        cluster: str,
        namespaces: Sequence[str] = (),
        pool_label: str = LABEL_POOL,
        gpu_resource: str = GPU_RESOURCE,
        weights: PriorityWeights | None = None,
        include_kueue: bool = False,
        jobsets: bool = True,
        watch_timeout_s: int = 240,
        request_timeout_s: float = 30.0,
        backoff: Backoff | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api, self.cluster, self.namespaces = api, cluster, list(namespaces)
        self.pool_label, self.gpu_resource = pool_label, gpu_resource
        self.request_timeout_s = request_timeout_s
        self.clock = clock
        self.core = client.CoreV1Api(api)
        self.view = KubeView(
            pool_label=pool_label,
            gpu_resource=gpu_resource,
            weights=weights or PriorityWeights(),
            include_kueue=include_kueue,
            on_invalid=self._report_invalid,
        )
        opts = {
            "watch_timeout_s": watch_timeout_s,
            "request_timeout_s": request_timeout_s,
            "backoff": backoff or Backoff(),
        }
        self.reflectors = self._cluster_reflectors(opts) + self._namespaced_reflectors(opts, jobsets)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._window_errors: dict[str, str] = {}

    def _cluster_reflectors(self, opts: dict[str, Any]) -> list[Reflector]:
        v = self.view
        scheduling = client.SchedulingV1Api(self.api)
        return [
            Reflector(
                "priorityclasses",
                scheduling.list_priority_class,
                v.priority_classes.replace,
                v.priority_classes.apply,
                **opts,
            ),
            Reflector("nodes", self.core.list_node, v.nodes.replace, v.nodes.apply, **opts),
            Reflector(
                "pods",
                self.core.list_pod_for_all_namespaces,
                v.pods.replace,
                v.pods.apply,
                field_selector=RUNNING_POD_SELECTOR,
                **opts,
            ),
        ]

    def _namespaced_reflectors(self, opts: dict[str, Any], jobsets: bool) -> list[Reflector]:
        """Per namespace (or once for all): Jobs, JobSets, Deployments, HPAs, each into its own table."""
        v = self.view
        batch, apps = client.BatchV1Api(self.api), client.AppsV1Api(self.api)
        hpa, custom = client.AutoscalingV2Api(self.api), client.CustomObjectsApi(self.api)
        out = []
        scopes: list[str | None] = [*self.namespaces] or [None]
        for ns in scopes:
            where = ns or "all"
            jobs = partial(batch.list_namespaced_job, ns) if ns else batch.list_job_for_all_namespaces
            out.append(_reflector(f"jobs/{where}", jobs, v.workloads.new(), opts, "Job", LABEL_JOB))
            if jobsets:
                group = (JOBSET_GROUP, JOBSET_VERSION)
                lister = (
                    partial(custom.list_namespaced_custom_object, *group, ns, JOBSET_PLURAL)
                    if ns
                    else partial(custom.list_cluster_custom_object, *group, JOBSET_PLURAL)
                )
                out.append(
                    _reflector(f"jobsets/{where}", lister, v.workloads.new(), opts, "JobSet", LABEL_JOB)
                )
            deployments = (
                partial(apps.list_namespaced_deployment, ns)
                if ns
                else apps.list_deployment_for_all_namespaces
            )
            out.append(
                _reflector(
                    f"deployments/{where}", deployments, v.deployments.new(), opts, None, LABEL_SERVICE
                )
            )
            hpas = (
                partial(hpa.list_namespaced_horizontal_pod_autoscaler, ns)
                if ns
                else hpa.list_horizontal_pod_autoscaler_for_all_namespaces
            )
            out.append(_reflector(f"hpas/{where}", hpas, v.hpas.new(), opts, None, None))
        return out

    def start(self, sync_timeout_s: float = 60.0) -> None:
        """Start every reflector; return once each has listed (PriorityClasses first), or raise.

        After :meth:`stop`, a new start resumes each watch from its last resourceVersion (a 410
        Gone there relists)."""
        self._stop = threading.Event()
        first, rest = self.reflectors[0], self.reflectors[1:]
        self._spawn(first)
        first.synced.wait(sync_timeout_s)  # Jobs' weights need the PriorityClasses
        for reflector in rest:
            self._spawn(reflector)
        for reflector in self.reflectors:
            if not reflector.synced.wait(sync_timeout_s):
                self.stop()
                raise TimeoutError(
                    f"kubernetes source: {reflector.name} not listed in {sync_timeout_s} s"
                    f" ({reflector.stats.last_error or 'no answer'})"
                )

    def snapshot(self) -> SourceSnapshot:
        """What the watches have reported so far (the first call starts them and waits for the lists)."""
        if not self._threads:
            self.start()
        v = self.view
        pods = v.pods.values()
        nodes = v.nodes.values()
        self._log_unreadable_windows(nodes)
        return build_snapshot(
            self.cluster,
            self.clock(),
            workloads=v.workloads.values() + v.cancelled_workloads(),
            pods=pods,
            nodes=nodes,
            deployments=v.deployments.values(),
            hpas=v.hpas.values(),
        )

    def _log_unreadable_windows(self, nodes: Sequence[NodeRecord]) -> None:
        """Log each node's unreadable maintenance announcement once (again only when it changes)."""
        errors = {n.name: n.maintenance_error for n in nodes if n.maintenance_error}
        for name, error in sorted(errors.items()):
            if self._window_errors.get(name) != error:
                log.warning("kubernetes source: node %s announces no maintenance window: %s", name, error)
        self._window_errors = errors

    def _spawn(self, reflector: Reflector) -> None:
        thread = threading.Thread(
            target=reflector.run, args=(self._stop,), name=f"kube-{reflector.name}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        for reflector in self.reflectors:
            reflector.interrupt()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()

    def _report_invalid(self, rec: WorkloadRecord) -> None:
        assert rec.error is not None
        log.warning(
            "kubernetes source: %s %s/%s not planned: %s", rec.kind, rec.namespace, rec.name, rec.error
        )
        try:
            record_event(
                self.core,
                namespace=rec.namespace,
                kind=rec.kind,
                name=rec.name,
                uid=rec.uid,
                reason=REASON_INVALID,
                message=f"not planned by ebbtide: {rec.error}",
                warning=True,
                timeout_s=self.request_timeout_s,
            )
        except ActuationError as exc:
            log.warning("kubernetes source: event for %s/%s: %s", rec.namespace, rec.name, exc)


def kubernetes_source(config: KubernetesConfig, cluster: str) -> KubernetesSource:
    """The source ``actuator.kubernetes``'s settings describe (connection, namespaces, labels)."""
    api = connect(str(config.kubeconfig) if config.kubeconfig else None, config.context)
    return KubernetesSource(
        api,
        cluster=cluster,
        namespaces=config.namespaces,
        pool_label=config.pool_label,
        gpu_resource=config.gpu_resource,
        weights=PriorityWeights(
            thresholds=tuple(config.priority_weights), default_weight=config.default_priority_weight
        ),
        include_kueue=config.include_kueue,
        jobsets=config.jobsets,
        request_timeout_s=config.request_timeout_s,
    )


__all__ = ["KubernetesSource", "kubernetes_source"]
