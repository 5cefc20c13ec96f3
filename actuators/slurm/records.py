"""Reading Slurm's job and node records (``squeue/sinfo --json``, slurmrestd, ``sacct --json``).

Place in the loop: shared by the Slurm backend (actuators/slurm/backend.py), which applies step 0,
and the Slurm source (actuators/slurm/source.py), which publishes what the cluster runs: a job's
phase, GPUs and nodes, a node's GPUs and whether it takes work, and the ebbtide id of a Slurm job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from loop.sources import JobPhase
from schemas.bounds import MAX_DURATION_S

_GPU_IN_TRES = re.compile(r"gres/gpu(?::[\w.-]+)?=(\d+)")
_GPU_IN_GRES = re.compile(r"gpu(?::[\w.-]+)?:(\d+)")
_GPU_TYPE_IN_GRES = re.compile(r"gpu:([A-Za-z][\w.-]*):\d+")
_UNSCHEDULABLE_STATES = {"down", "drained", "draining", "fail", "failing", "future", "unknown"}
_UNSCHEDULABLE_FLAGS = {
    "DRAIN": "drained",
    "FAIL": "failing",
    "MAINTENANCE": "maintenance",
    "NOT_RESPONDING": "down",
}


def job_key(cluster: str, slurm_job_id: object) -> str:
    """The ebbtide job id of a Slurm job: ``<cluster>-<Slurm job id>`` (unique across clusters,
    so jobs of two clusters never share a key on the compacted job-events topic)."""
    return f"{cluster}-{slurm_job_id}"


def slurm_id_of(cluster: str, job_id: str) -> str | None:
    """The Slurm job id inside an ebbtide job id of ``cluster``, or None when it is not one."""
    prefix = f"{cluster}-"
    rest = job_id[len(prefix) :] if job_id.startswith(prefix) else ""
    return rest if rest.isdigit() else None


def node_unschedulable(node: Mapping[str, Any]) -> str | None:
    """Why a node takes no work (down, drained, failing...) with Slurm's own reason, or None."""
    state = str(node.get("state", "")).lower()
    flags = [str(f).upper() for f in node.get("state_flags") or []]
    why = state if state in _UNSCHEDULABLE_STATES else None
    for flag, name in _UNSCHEDULABLE_FLAGS.items():
        if why is None and flag in flags:
            why = name
    if why is None:
        return None
    reason = str(node.get("reason") or "").strip()
    return f"{why}: {reason}" if reason else why


def node_gpus(node: Mapping[str, Any]) -> tuple[int, int, str]:
    """(GPUs configured, GPUs in use, GPU type) of a node from its GRES (``gpu:a100:8``)."""
    gres = str(node.get("gres") or "")
    kind = _GPU_TYPE_IN_GRES.search(gres)
    return gres_gpus(gres), gres_gpus(str(node.get("gres_used") or "")), kind.group(1) if kind else "gpu"


def job_phase(job: Mapping[str, Any]) -> JobPhase:
    state = str(job.get("job_state", "")).upper()
    reason = str(job.get("state_reason", ""))
    if state in {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "PREEMPTED"}:
        held = reason.startswith("JobHeld") or state == "REQUEUE_HOLD" or job.get("priority") == 0
        return "held" if held else "pending"
    if state in {"RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}:
        return "running"
    if state in {"SUSPENDED", "STOPPED"}:
        return "suspended"
    if state == "COMPLETED":
        return "finished"
    if state == "CANCELLED":
        return "cancelled"
    return "failed"


def job_gpus(job: Mapping[str, Any]) -> int:
    """A job's whole gang: GPUs per node (``--gres=gpu:N``) times its nodes, or ``--gpus=N``."""
    for field in ("tres_req_str", "tres_alloc_str"):
        m = _GPU_IN_TRES.search(str(job.get(field) or ""))
        if m:
            return int(m.group(1)) * max(int(job.get("node_count") or 1), 1)
    m = _GPU_IN_GRES.search(str(job.get("tres_per_node") or ""))
    if m:
        return int(m.group(1)) * max(int(job.get("node_count") or 1), 1)
    m = _GPU_IN_GRES.search(str(job.get("tres_per_job") or ""))
    return int(m.group(1)) if m else 0


def job_time_limit_s(job: Mapping[str, Any]) -> float | None:
    """A job's time limit in seconds: Slurm's ``time_limit`` in minutes (a number, or newer Slurm's
    ``{"set", "infinite", "number"}``); an unlimited one (null, or infinite) is MAX_DURATION_S (a
    year); None where the record has no such field (unknown)."""
    if "time_limit" not in job:
        return None
    limit = job["time_limit"]
    if isinstance(limit, Mapping):
        limit = None if limit.get("infinite") or not limit.get("set", True) else limit.get("number")
    if limit is None:
        return MAX_DURATION_S
    return min(float(limit) * 60.0, MAX_DURATION_S) if float(limit) > 0 else None


def job_nodes(job: Mapping[str, Any]) -> dict[str, int]:
    """GPUs a running job holds per node: ``job_resources.allocated_nodes`` names the nodes and
    ``gres_detail`` (same order) their GPUs, e.g. ``gpu:fake:3(IDX:0-2)``. Without ``gres_detail``
    the job's GPUs are split evenly over its nodes. Empty when Slurm reports no allocation."""
    allocated = (job.get("job_resources") or {}).get("allocated_nodes") or []
    if isinstance(allocated, Mapping):  # some data parsers key the list by position
        allocated = [allocated[k] for k in sorted(allocated, key=int)]
    names = [str(n["nodename"]) for n in allocated if isinstance(n, Mapping) and n.get("nodename")]
    if not names:
        return {}
    details = [str(d) for d in job.get("gres_detail") or []]
    if len(details) == len(names):
        per_node = {name: gres_gpus(detail) for name, detail in zip(names, details, strict=True)}
    else:
        total = job_gpus(job)
        share, extra = divmod(total, len(names))
        per_node = {name: share + (1 if i < extra else 0) for i, name in enumerate(names)}
    return {name: gpus for name, gpus in per_node.items() if gpus > 0}


def gres_gpus(text: str) -> int:
    return sum(int(m.group(1)) for m in _GPU_IN_GRES.finditer(text.split("(")[0] if "(" in text else text))
