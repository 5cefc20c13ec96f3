"""ActuationResult: what an actuator did with one target of one Allocation (keyed cluster/backend).

``target`` is a target name from schemas/targets.py (``service/<service>/<pool>``,
``job/<job_id>``, ``plan/<plan_id>``, ``reservation/<name>``), checked on every edge.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from schemas.base import Attempts, Event, Name, UtcDatetime
from schemas.targets import TARGET_PATTERN, parse_target


def _checked(target: str) -> str:
    parse_target(target)
    return target


TargetName = Annotated[
    str, Field(min_length=1, max_length=2048, pattern=TARGET_PATTERN), AfterValidator(_checked)
]
"""A target name of schemas/targets.py (the pattern for other languages; parsed here as well)."""

Outcome = Literal["applied", "already-applied", "retrying", "failed", "skipped"]


class ActuationResult(Event):
    cluster: Name
    backend: Name
    plan_id: Name
    action: Name
    target: TargetName
    outcome: Outcome
    time: UtcDatetime
    attempt: Attempts = 1
    error: str | None = None
    permanent: bool = False

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.backend}"
