"""Target names: the one way every part of the loop names what an actuation acted on.

Place in the loop: ``ActuationResult.target`` (schemas/actuation.py) carries one of these; the
actuator engine and its backends (actuators/), the actuator service's replay memory
(streams/services/actuator.py) and the simulated cluster (simulator/) all build them here, so a
result read back after a restart names its target exactly as the next apply does, and the
actuator stays idempotent on (plan_id, target).

The scheme is ``<kind>/<part>[/<part>]``, slash-separated, one fixed shape per kind:

==================  ========================================  ===========================
kind                name                                      what it is
==================  ========================================  ===========================
``service``         ``service/<service>/<pool>``              a service's capacity in a pool
``job``             ``job/<job_id>``                          a batch job (run / hold / preempt)
``plan``            ``plan/<plan_id>``                        an allocation with no target, done
``reservation``     ``reservation/<name>``                    a backend-owned object removed
                                                              because no service asks for it
==================  ========================================  ===========================

Each part is the name as the events spell it, with ``%`` written ``%25`` and ``/`` written
``%2F`` so a part may hold any character and every target parses back to exactly its parts.
Parts are never empty. :func:`parse_target` is the inverse of the builders and rejects anything
else (an unknown kind, a wrong number of parts, an empty part, a bad escape).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast

TargetKind = Literal["service", "job", "plan", "reservation"]

_ARITY: dict[str, int] = {"service": 2, "job": 1, "plan": 1, "reservation": 1}

TARGET_PATTERN = r"^(service/[^/]+/[^/]+|(job|plan|reservation)/[^/]+)$"
"""What ``ActuationResult.target`` must look like (the escapes keep ``/`` out of the parts)."""

_BAD_ESCAPE = re.compile(r"%(?!25|2F)")
_ESCAPE = re.compile(r"%(25|2F)")


def _escape(part: str) -> str:
    if not part:
        raise ValueError("target part: must not be empty")
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str, target: str) -> str:
    if not part:
        raise ValueError(f"target {target!r}: empty part")
    if _BAD_ESCAPE.search(part):
        raise ValueError(f"target {target!r}: '%' must be written %25")
    return _ESCAPE.sub(lambda m: "/" if m.group(1) == "2F" else "%", part)


def service_target(service: str, pool: str) -> str:
    """``service/<service>/<pool>``: a service's capacity in one pool."""
    return f"service/{_escape(service)}/{_escape(pool)}"


def job_target(job_id: str) -> str:
    """``job/<job_id>``: one batch job."""
    return f"job/{_escape(job_id)}"


def plan_target(plan_id: str) -> str:
    """``plan/<plan_id>``: an allocation that named no target, recorded as done."""
    return f"plan/{_escape(plan_id)}"


def reservation_target(name: str) -> str:
    """``reservation/<name>``: a backend-owned object the backend removes (a Slurm reservation)."""
    return f"reservation/{_escape(name)}"


@dataclass(frozen=True)
class Target:
    """A parsed target: its kind and its parts (``(service, pool)`` or ``(id,)``)."""

    kind: TargetKind
    parts: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind}/" + "/".join(_escape(p) for p in self.parts)


def parse_target(target: str) -> Target:
    """The kind and parts of ``target``; ``ValueError`` unless it is one of the shapes above."""
    kind, _, rest = target.partition("/")
    arity = _ARITY.get(kind)
    if arity is None:
        raise ValueError(f"target {target!r}: kind must be one of {sorted(_ARITY)}")
    raw = rest.split("/")
    if len(raw) != arity:
        raise ValueError(f"target {target!r}: a {kind} target has {arity} part(s) after {kind}/")
    parts = tuple(_unescape(p, target) for p in raw)
    return Target(cast(TargetKind, kind), parts)


def is_target(target: str) -> bool:
    try:
        parse_target(target)
    except ValueError:
        return False
    return True
