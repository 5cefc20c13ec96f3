"""Kubernetes Events on batch workloads: where ``kubectl describe job`` shows what ebbtide decided.

Place in the loop: the backend (actuators/kube/backend.py) records one per decision it applies to a
Job or JobSet (reasons ``EbbtideStarted``, ``EbbtideHeld``, ``EbbtidePreempted``, with the
Allocation's reason text as the message); the source (actuators/kube/source.py) records
``EbbtideInvalidSpec`` naming the annotation at fault. Events are core/v1 Events in the
workload's namespace, reported by the component ``ebbtide``.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from actuators.kube.client import call

REASON_STARTED = "EbbtideStarted"
REASON_HELD = "EbbtideHeld"
REASON_PREEMPTED = "EbbtidePreempted"
REASON_INVALID = "EbbtideInvalidSpec"
REASON_OF_ACTION = {"run": REASON_STARTED, "hold": REASON_HELD, "preempt": REASON_PREEMPTED}
API_VERSION_OF_KIND = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2"}
_FIGURE = re.compile(r"\d+(?:\.\d+)?")


def in_words(reason: str) -> str:
    """A reason with its figures masked: what stays the same when a decision is repeated and only its
    numbers moved (a running job's GPU-hours left, a forecast, a time). The planner's reasons quote
    such figures at every step, so an Event per changed reason was an Event per running job per
    step; an Event per change in words is one per decision a person would call new."""
    return _FIGURE.sub("#", reason)


def record_event(
    core: client.CoreV1Api,
    *,
    namespace: str,
    kind: str,
    name: str,
    uid: str | None,
    reason: str,
    message: str,
    warning: bool = False,
    timeout_s: float = 10.0,
) -> None:
    """Create one Event about ``kind/name`` (raises TemporaryError / PermanentError as ``call`` does)."""
    now = datetime.now(UTC)
    involved: dict[str, Any] = {
        "apiVersion": API_VERSION_OF_KIND.get(kind, "batch/v1"),
        "kind": kind,
        "name": name,
        "namespace": namespace,
    }
    if uid:
        involved["uid"] = uid
    body: Any = {
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "ebbtide"},
        "reportingComponent": "ebbtide",
        "reportingInstance": "ebbtide",
        "firstTimestamp": now.isoformat(),
        "lastTimestamp": now.isoformat(),
        "count": 1,
    }
    call("create event", lambda: core.create_namespaced_event(namespace, body, _request_timeout=timeout_s))


__all__ = ["REASON_INVALID", "REASON_OF_ACTION", "record_event"]
