"""ActuationResult: what an actuator did with one target of one Allocation (keyed cluster/backend)."""

from __future__ import annotations

from typing import Literal

from schemas.base import Event, Name, NonNegInt, UtcDatetime

Outcome = Literal["applied", "already-applied", "retrying", "failed", "skipped"]


class ActuationResult(Event):
    cluster: Name
    backend: Name
    plan_id: Name
    action: Name
    target: Name
    outcome: Outcome
    time: UtcDatetime
    attempt: NonNegInt = 1
    error: str | None = None
    permanent: bool = False

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.backend}"
