"""Decisions where Kubernetes users look; Kueue's Jobs left to Kueue (real API server, deploy/rbac RBAC).

Each held, started or preempted Job gets an Event (reason code, the Allocation's reason as message)
and the ``ebbtide.io/decision`` annotation; a decision repeated with the same reason makes no new
Event, nor one whose reason changed only in its figures (the annotation follows those). A Job
carrying Kueue's queue-name label is neither suspended nor resumed unless configured.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_kube_real import batch_job, make_actuator

from actuators.engine import results_by_target
from actuators.kube.events import REASON_HELD, REASON_PREEMPTED, REASON_STARTED
from actuators.kube.workloads import ANN_DECISION, LABEL_KUEUE_QUEUE
from schemas import Allocation

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def with_reasons(allocation: Allocation, reasons: dict[str, str]) -> Allocation:
    jobs = [j.model_copy(update={"reason": reasons[j.job_id]}) for j in allocation.jobs]
    return allocation.model_copy(update={"jobs": jobs})


def events_of(admin: Any, namespace: str, name: str) -> list[tuple[str, str]]:
    from kubernetes import client

    items = client.CoreV1Api(admin).list_namespaced_event(namespace).items
    return sorted(
        (e.reason, e.message)
        for e in items
        if e.involved_object.name == name and e.source.component == "ebbtide"
    )


def test_events_and_decision_annotation_once_per_reason(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(admin)
    batch.create_namespaced_job(namespace, batch_job("wait", "job-w", 2))
    batch.create_namespaced_job(namespace, batch_job("go", "job-g", 2))
    actuator, _ = make_actuator(kube_cluster, namespace)
    held = "held: pool-a is reserved for chat 14:00-18:00, forecast p90 = 42 GPUs"
    started = "run: highest priority that fits pool-b; 8 GPU-h left"

    def step(plan_id: str, jobs: list[tuple[str, str, str | None, int]], reasons: dict[str, str]) -> Any:
        return results_by_target(actuator.apply(with_reasons(make_allocation(plan_id, jobs=jobs), reasons)))

    first = step(
        "p1", [("job-w", "hold", None, 0), ("job-g", "run", "pool-b", 2)], {"job-w": held, "job-g": started}
    )
    assert (first["job/job-w"].outcome, first["job/job-g"].outcome) == ("applied", "applied")
    assert events_of(admin, namespace, "wait") == [(REASON_HELD, held)]
    assert events_of(admin, namespace, "go") == [(REASON_STARTED, started)]
    note = json.loads(batch.read_namespaced_job("wait", namespace).metadata.annotations[ANN_DECISION])
    assert note == {"plan_id": "p1", "action": "hold", "reason": held}

    # the same decisions and reasons in the next plan: nothing new to show, nothing changed
    second = step(
        "p2", [("job-w", "hold", None, 0), ("job-g", "run", "pool-b", 2)], {"job-w": held, "job-g": started}
    )
    assert {r.outcome for r in second.values()} == {"already-applied"}
    assert len(events_of(admin, namespace, "wait")) == 1 and len(events_of(admin, namespace, "go")) == 1

    # the same decisions with their figures moved (the planner's reasons quote forecasts, times and
    # GPU-hours left at every step): the annotation follows, no new Event
    moved = "held: pool-a is reserved for chat 14:15-18:00, forecast p90 = 43.5 GPUs"
    running = "run: highest priority that fits pool-b; 7.5 GPU-h left"
    again = step(
        "p3", [("job-w", "hold", None, 0), ("job-g", "run", "pool-b", 2)], {"job-w": moved, "job-g": running}
    )
    assert {r.outcome for r in again.values()} == {"applied"}
    assert events_of(admin, namespace, "wait") == [(REASON_HELD, held)]
    assert events_of(admin, namespace, "go") == [(REASON_STARTED, started)]
    note = json.loads(batch.read_namespaced_job("wait", namespace).metadata.annotations[ANN_DECISION])
    assert (note["plan_id"], note["reason"]) == ("p3", moved)

    # a new reason for the held job: one new Event, the annotation names the new plan
    later = "held: behind job-g on pool-b until 15:30"
    third = step(
        "p4", [("job-w", "hold", None, 0), ("job-g", "preempt", None, 0)], {"job-w": later, "job-g": "x"}
    )
    assert third["job/job-w"].outcome == "applied"
    assert events_of(admin, namespace, "wait") == sorted([(REASON_HELD, held), (REASON_HELD, later)])
    assert (REASON_PREEMPTED, "x") in events_of(admin, namespace, "go")
    note = json.loads(batch.read_namespaced_job("wait", namespace).metadata.annotations[ANN_DECISION])
    assert (note["plan_id"], note["reason"]) == ("p4", later)


def kueue_job(name: str, job_id: str) -> dict[str, Any]:
    job = batch_job(name, job_id, 1)
    job["metadata"]["labels"][LABEL_KUEUE_QUEUE] = "team-queue"
    return job


def test_a_kueue_job_is_left_to_kueue(kube_cluster, namespace, admin, make_allocation) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(admin)
    batch.create_namespaced_job(namespace, kueue_job("queued", "job-k"))
    actuator, backend = make_actuator(kube_cluster, namespace)
    assert "job-k" not in backend.observe().jobs

    (result,) = actuator.apply(make_allocation("p1", jobs=[("job-k", "run", "pool-a", 1)]))
    assert result.outcome == "skipped"
    job = batch.read_namespaced_job("queued", namespace)
    assert job.spec.suspend is True and ANN_DECISION not in (job.metadata.annotations or {})

    # configured to drive Kueue's Jobs too: then it does
    driving, _ = make_actuator(kube_cluster, namespace, include_kueue=True)
    (result,) = driving.apply(make_allocation("p2", jobs=[("job-k", "run", "pool-a", 1)]))
    assert result.outcome == "applied"
    assert batch.read_namespaced_job("queued", namespace).spec.suspend is False
