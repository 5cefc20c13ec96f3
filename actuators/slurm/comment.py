"""The grammar of an ebbtide Slurm job's comment: the job's spec, and ebbtide's notes after it.

Place in the loop: the Slurm source (actuators/slurm/source.py) reads a job's spec from its
comment; the Slurm backend (actuators/slurm/backend.py) writes its decision after it, and the
source writes why a spec could not be read. One comment, sections split by `` | ``::

    ebbtide: est_gpu_h=4 deadline=2026-12-02T06:00Z ckpt_s=1800 weight=3 team=nlp preemptible=yes
    ebbtide: est_gpu_h=4 weight=3 | ebbtide-decision: hold: pool pool-a is full (plan=p-1a2b)
    ebbtide: est_gpu_h=x | ebbtide-error: est_gpu_h: 'x' is not a number
    ebbtide: est_gpu_h=4 | ebbtide-excluded: a3,a4 | ebbtide-decision: run: ... (plan=p-1a2b)

The ``ebbtide:`` section is the user's, ``key=value`` words (units in the key):

=============  ==========================================  ==================================
key            value                                       JobSpec field
=============  ==========================================  ==================================
est_gpu_h      GPU-hours of work, > 0 (or ``est_gpu_s``)    estimated_gpu_s (required)
deadline       ISO 8601 time with ``Z`` or an offset        deadline
ckpt_s         seconds between checkpoints, > 0             checkpoint_interval_s
restart_s      seconds a restart costs, >= 0                restart_cost_s
weight         priority weight, > 0                         priority_weight
class          priority class name                          priority_class
team           team (quota) name                            team
preemptible    yes/no (true/false)                          preemptible
bandwidth      low, medium or high                          bandwidth_class
gpu_type       GPU types allowed, comma-separated           allowed_gpu_types
=============  ==========================================  ==================================

The job's GPUs (its gang) come from its GRES request times its nodes and its allowed pools from
its partitions (``sbatch -p a,b``), not from the comment. A comment without an ``ebbtide:``
section is not an ebbtide job. Sections that start ``ebbtide-`` are ebbtide's own notes: each
write replaces them and keeps the user's section as it was, except ``ebbtide-excluded:``, the nodes
ebbtide added to the job's ``ExcNodeList`` (the rest of that list is the user's own), which stays
until the backend rewrites it (``with_excluded``), as the exclusions themselves stay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from schemas import JobSpec
from schemas.codec import describe

SPEC_MARK = "ebbtide:"
DECISION_MARK = "ebbtide-decision:"
ERROR_MARK = "ebbtide-error:"
EXCLUDED_MARK = "ebbtide-excluded:"
SEPARATOR = " | "


class CommentError(ValueError):
    """A spec section ebbtide cannot read; the message is ``<field>: <why>``."""


def sections(comment: str | None) -> list[str]:
    return [part.strip() for part in (comment or "").split("|") if part.strip()]


def spec_section(comment: str | None) -> str | None:
    """The user's ``ebbtide:`` section, or None when the job is not an ebbtide job."""
    for part in sections(comment):
        if part.startswith(SPEC_MARK):
            return part
    return None


def note_of(comment: str | None, mark: str) -> str | None:
    """The text of ebbtide's note ``mark`` in a comment, or None."""
    for part in sections(comment):
        if part.startswith(mark):
            return part[len(mark) :].strip()
    return None


def with_note(comment: str | None, mark: str, text: str) -> str:
    """The comment with the user's section and ebbtide's record of excluded nodes kept, and
    ebbtide's other notes replaced by ``mark text``."""
    kept = [p for p in sections(comment) if not p.startswith("ebbtide-") or p.startswith(EXCLUDED_MARK)]
    return SEPARATOR.join([*kept, f"{mark} {text}"])


def with_excluded(comment: str | None, nodes: Sequence[str]) -> str:
    """The comment with ebbtide's record of the nodes it excluded set to ``nodes`` (taken out where
    there are none), before ebbtide's other notes; everything else kept as it was."""
    parts = [p for p in sections(comment) if not p.startswith(EXCLUDED_MARK)]
    user = [p for p in parts if not p.startswith("ebbtide-")]
    notes = [p for p in parts if p.startswith("ebbtide-")]
    record = [f"{EXCLUDED_MARK} {','.join(nodes)}"] if nodes else []
    return SEPARATOR.join([*user, *record, *notes])


def _number(low: float, strict: bool) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{raw!r} is not a finite number")
        if value < low or (strict and value == low):
            raise ValueError(f"{raw} must be {'>' if strict else '>='} {low:g}")
        return value

    return parse


def _time(raw: str) -> datetime:
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{raw!r} is not an ISO 8601 time (2026-12-02T06:00Z)") from None
    if when.utcoffset() is None:
        raise ValueError(f"{raw!r} has no time zone (end it with Z or +HH:MM)")
    return when.astimezone(UTC)


def _yes_no(raw: str) -> bool:
    low = raw.lower()
    if low in {"yes", "true", "1"}:
        return True
    if low in {"no", "false", "0"}:
        return False
    raise ValueError(f"{raw!r} is not yes or no")


_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "est_gpu_h": ("estimated_gpu_s", lambda raw: _number(0.0, True)(raw) * 3600.0),
    "est_gpu_s": ("estimated_gpu_s", _number(0.0, True)),
    "deadline": ("deadline", _time),
    "ckpt_s": ("checkpoint_interval_s", _number(0.0, True)),
    "restart_s": ("restart_cost_s", _number(0.0, False)),
    "weight": ("priority_weight", _number(0.0, True)),
    "class": ("priority_class", str),
    "team": ("team", str),
    "preemptible": ("preemptible", _yes_no),
    "bandwidth": ("bandwidth_class", str),
    "gpu_type": ("allowed_gpu_types", lambda raw: [t for t in raw.split(",") if t]),
}
KEYS = tuple(_FIELDS)


def spec_fields(section: str) -> dict[str, Any]:
    """The JobSpec fields of an ``ebbtide:`` section; CommentError names the key and why."""
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for word in section[len(SPEC_MARK) :].split():
        key, eq, raw = word.partition("=")
        if not eq or not raw:
            raise CommentError(f"{word}: expected key=value")
        if key not in _FIELDS:
            raise CommentError(f"{key}: unknown key (known: {', '.join(KEYS)})")
        if key in seen or (_FIELDS[key][0] == "estimated_gpu_s" and "estimated_gpu_s" in fields):
            raise CommentError(f"{key}: given twice")
        seen.add(key)
        name, parse = _FIELDS[key]
        try:
            fields[name] = parse(raw)
        except ValueError as exc:
            raise CommentError(f"{key}: {exc}") from None
    if "estimated_gpu_s" not in fields:
        raise CommentError("est_gpu_h: required (GPU-hours of work, e.g. est_gpu_h=4)")
    return fields


def parse_spec(
    section: str, job_id: str, gpus: int, pools: list[str], time_limit_s: float | None = None
) -> JobSpec:
    """The JobSpec of a job from its ``ebbtide:`` section, its GPUs, its partitions and its time
    limit."""
    fields = spec_fields(section)
    try:
        return JobSpec(job_id=job_id, gpus=gpus, allowed_pools=pools, time_limit_s=time_limit_s, **fields)
    except ValidationError as exc:
        message = describe(exc)
        raise CommentError(_comment_terms(message)) from None


def _comment_terms(message: str) -> str:
    """A JobSpec validation message with the comment's key names instead of the spec's fields."""
    for key, (name, _) in _FIELDS.items():
        if message.startswith(f"{name}:") and key != "est_gpu_s":
            return key + message[len(name) :]
    if message.startswith("gpus:"):
        return "gpus (from --gres=gpu:N x nodes)" + message[len("gpus") :]
    return message
