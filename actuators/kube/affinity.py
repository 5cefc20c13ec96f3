"""Keeping a batch workload's pods off nodes that go out for maintenance or are held for a heavier
gang as they drain (pure).

Place in the loop: the Kubernetes backend (actuators/kube/backend.py) starts a Job by placing its
pod templates on the pool and resuming it in one patch; the pods are then placed by the
Kubernetes scheduler, not by ebbtide. Where step 0 found that maintenance takes some of the pool's
nodes out before the job would end, or holds them for a heavier gang (``JobDecision.avoid_nodes``),
the same patch adds to the pod template's required node affinity a ``matchFields`` requirement
``metadata.name NotIn [node]`` per node (the API server takes one value per field requirement),
ANDed into each of the submitter's own terms (terms are ORed, so they have to be in every one). The
nodes it added are noted on the workload (annotation ``ebbtide.io/avoided-nodes``) so the next
start takes exactly those requirements out again before adding the new ones; the submitter's own
terms are never changed otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ANN_AVOIDED = "ebbtide.io/avoided-nodes"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def avoided_of(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes ebbtide last kept the workload's pods off (its annotation), in order."""
    raw = str((meta.get("annotations") or {}).get(ANN_AVOIDED) or "")
    return tuple(n for n in raw.split(",") if n)


def _not_on(nodes: Sequence[str]) -> list[dict[str, Any]]:
    return [{"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in sorted(nodes)]


def required_affinity(
    pod_spec: Mapping[str, Any], avoid: Sequence[str], added_before: Sequence[str]
) -> dict[str, Any] | None:
    """The pod spec's required node affinity with the requirements ebbtide added before taken out and
    those keeping it off ``avoid`` ANDed into every term (None: no required node affinity is left)."""
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    ours_before = _not_on(added_before)
    terms = []
    for term in (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or []:
        fields = [f for f in term.get("matchFields") or [] if f not in ours_before]
        kept = {k: v for k, v in term.items() if k != "matchFields"}
        terms.append({**kept, "matchFields": fields} if fields else kept)
    terms = [t for t in terms if t.get("matchExpressions") or t.get("matchFields")]
    if avoid:
        ours = _not_on(avoid)
        terms = [{**t, "matchFields": [*(t.get("matchFields") or []), *ours]} for t in terms] or [
            {"matchFields": ours}
        ]
    return {"nodeSelectorTerms": terms} if terms else None


def with_required(affinity: Mapping[str, Any], required: dict[str, Any] | None) -> dict[str, Any]:
    """``affinity`` with its required node affinity replaced by ``required`` (left out where None),
    for a patch that replaces the whole pod spec (a JobSet's replicated jobs) rather than merging."""
    node = {k: v for k, v in (affinity.get("nodeAffinity") or {}).items() if k != REQUIRED}
    if required is not None:
        node[REQUIRED] = required
    rest = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
    return {**rest, "nodeAffinity": node} if node else rest
