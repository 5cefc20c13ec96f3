"""The Kubernetes source at scale against a real kube-apiserver (``ebbtide bench-kube-source``).

A private API server (bench/kube_apiserver.py) gets ``nodes`` GPU nodes in four pools and ``jobs``
suspended, opted-in Jobs (gangs of 1 to 8 GPUs, two PriorityClasses, every annotation set). Then:

- initial list: wall time of ``KubernetesSource.start`` (every reflector listed) and of the first
  ``snapshot()``;
- event lag: ``changes`` Job patches (a new ``ebbtide.io/team`` annotation each) sent back to back,
  then half as many node cordons (at most one per node); a poller (every 5 ms) notes when the
  source's view first shows each change; lag = seen - the patch's response; p50, p99, max;
- memory: the benchmark process's resident set (VmRSS, and its peak VmHWM) after the list and at the
  end: an upper bound on the source's, since the same process also creates the objects.

Targets (issue 17): initial list <= 10 s, event lag p99 <= 2 s, memory <= 300 MiB.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from bench.kube_apiserver import ApiServer

TARGETS = {"initial_list_s": 10.0, "event_lag_p99_s": 2.0, "rss_mib": 300.0}
POOLS = ("pool-a", "pool-b", "pool-c", "pool-d")


@dataclass(frozen=True)
class KubeSourceFigures:
    jobs: int
    nodes: int
    create_s: float
    initial_list_s: float
    first_snapshot_s: float
    snapshot_jobs: int
    snapshot_nodes: int
    changes: int
    event_lag_p50_s: float
    event_lag_p99_s: float
    event_lag_max_s: float
    rss_mib_after_list: float
    rss_mib_end: float
    rss_mib_peak: float

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "targets": TARGETS, "met": self.met()}

    def met(self) -> dict[str, bool]:
        return {
            "initial_list_s": self.initial_list_s <= TARGETS["initial_list_s"],
            "event_lag_p99_s": self.event_lag_p99_s <= TARGETS["event_lag_p99_s"],
            "rss_mib": self.rss_mib_peak <= TARGETS["rss_mib"],
        }


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _node(i: int) -> dict[str, Any]:
    pool = POOLS[i % len(POOLS)]
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}
    return {
        "metadata": {
            "name": f"gpu-{i:04d}",
            "labels": {"ebbtide.io/pool": pool, "nvidia.com/gpu.product": "H100"},
        },
        "status": {"allocatable": res, "capacity": res, "conditions": [ready]},
    }


def _job(i: int) -> dict[str, Any]:
    gpus = (1, 2, 4, 8)[i % 4]
    container = {"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    annotations = {
        "ebbtide.io/estimated-gpu-hours": str(gpus * 2),
        "ebbtide.io/checkpoint-interval-s": "600",
        "ebbtide.io/restart-cost-s": "60",
        "ebbtide.io/team": "t0",
    }
    pod = {
        "restartPolicy": "Never",
        "priorityClassName": ("bench-low", "bench-high")[i % 2],
        "nodeSelector": {"ebbtide.io/pool": POOLS[i % len(POOLS)]},
        "containers": [container],
    }
    return {
        "metadata": {
            "name": f"job-{i:05d}",
            "labels": {"ebbtide.io/job-id": f"bench-{i}"},
            "annotations": annotations,
        },
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": pod}},
    }


class Rest:
    """The benchmark's own writes, as any user of the API server makes them (plain HTTPS + JSON):
    ebbtide's code under test is only the source."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(server.ca_file))

    def __call__(self, method: str, path: str, body: dict[str, Any]) -> None:
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(
            self.server.url + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.server.token}", "Content-Type": content},
        )
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
            resp.read()


def _populate(rest: Rest, ns: str, jobs: int, nodes: int) -> float:
    t0 = time.monotonic()
    rest("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for name, value in (("bench-low", 100), ("bench-high", 5000)):
        rest(
            "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": name}, "value": value}
        )
    for i in range(nodes):
        rest("POST", "/api/v1/nodes", _node(i))
    for i in range(jobs):
        rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", _job(i))
    return time.monotonic() - t0


class LagProbe:
    """Polls the source's view every 5 ms; notes when each expected change first shows."""

    def __init__(self, check: Any) -> None:
        self.check = check
        self.pending: dict[Any, tuple[Any, float]] = {}
        self.lags: list[float] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def expect(self, key: Any, value: Any, sent_at: float) -> None:
        with self.lock:
            self.pending[key] = (value, sent_at)

    def run(self) -> None:
        while not self.stop.wait(0.005):
            with self.lock:
                items = list(self.pending.items())
            now = time.monotonic()
            for key, (value, sent_at) in items:
                if self.check(key, value):
                    with self.lock:
                        del self.pending[key]
                    self.lags.append(now - sent_at)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def _measure_lag(rest: Rest, source: Any, ns: str, jobs: int, nodes: int, changes: int) -> list[float]:
    view = source.view

    def seen(key: tuple[str, str], value: str) -> bool:
        kind, name = key
        if kind == "job":
            rec = view.workloads.get(("Job", ns, name))
            return rec is not None and rec.spec is not None and rec.spec.team == value
        with view.lock:
            node = view.nodes.rows.get(name)
        return node is not None and node.reason == value

    probe = LagProbe(seen)
    poller = threading.Thread(target=probe.run, daemon=True)
    poller.start()
    for i in range(changes):
        name, team = f"job-{i % jobs:05d}", f"t{i + 1}"
        rest(
            "PATCH",
            f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
            {"metadata": {"annotations": {"ebbtide.io/team": team}}},
        )
        probe.expect(("job", name), team, time.monotonic())
    for i in range(min(nodes, changes // 2)):
        name = f"gpu-{i:04d}"
        rest("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
        probe.expect(("node", name), "cordoned", time.monotonic())
    deadline = time.monotonic() + 60
    while probe.pending and time.monotonic() < deadline:
        time.sleep(0.05)
    probe.stop.set()
    poller.join()
    if probe.pending:
        raise RuntimeError(f"{len(probe.pending)} changes never reached the source's view within 60 s")
    return probe.lags


def run_kube_source_bench(jobs: int = 1000, nodes: int = 200, changes: int = 1000) -> KubeSourceFigures:
    from actuators.kube.client import token_client
    from actuators.kube.source import KubernetesSource
    from bench.kube_apiserver import local_apiserver

    with local_apiserver() as server:
        rest, ns = Rest(server), "bench"
        create_s = _populate(rest, ns, jobs, nodes)
        api = token_client(server.url, server.token, str(server.ca_file))
        source = KubernetesSource(api, cluster="bench", namespaces=[ns], jobsets=False)
        t0 = time.monotonic()
        source.start(sync_timeout_s=120)
        initial_list_s = time.monotonic() - t0
        t1 = time.monotonic()
        snap = source.snapshot()
        first_snapshot_s = time.monotonic() - t1
        rss_after_list = _status_mib("VmRSS")
        try:
            lags = _measure_lag(rest, source, ns, jobs, nodes, changes)
        finally:
            source.stop()
        return KubeSourceFigures(
            jobs=jobs,
            nodes=nodes,
            create_s=round(create_s, 2),
            initial_list_s=round(initial_list_s, 3),
            first_snapshot_s=round(first_snapshot_s, 3),
            snapshot_jobs=len(snap.jobs),
            snapshot_nodes=sum(len(p.nodes) for p in snap.inventory.pools) if snap.inventory else 0,
            changes=len(lags),
            event_lag_p50_s=round(_percentile(lags, 0.50), 4),
            event_lag_p99_s=round(_percentile(lags, 0.99), 4),
            event_lag_max_s=round(max(lags), 4),
            rss_mib_after_list=round(rss_after_list, 1),
            rss_mib_end=round(_status_mib("VmRSS"), 1),
            rss_mib_peak=round(_status_mib("VmHWM"), 1),
        )
