"""What step 0's placement saw (optimizer/step0.py), kept for the reasons (optimizer/reasons.py):
how each job came to run, why each job that did not start stayed out, and which running jobs were
stopped to empty nodes for which gang. The reasons state these facts; they never guess them. The
nodes held for gangs also go to the decisions (optimizer/plan_build.py): the held nodes each start
keeps off, and those lending's borrowers keep off. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from schemas import DecisionCause


class Blocked(NamedTuple):
    """Why a waiting job's last try to start failed: the cause, the pool it names and, for nodes
    held for another gang, that gang's job index (-1 otherwise)."""

    cause: DecisionCause
    pool: int
    gang: int = -1


@dataclass
class Step0Outcome:
    blocked: dict[int, Blocked] = field(default_factory=dict)  # waiting job -> why it did not start
    cleared_for: dict[int, int] = field(default_factory=dict)  # stopped job -> gang it made room for
    reclaimed_for: dict[int, int] = field(default_factory=dict)  # stopped borrower -> owner's job started
    backfilled: set[int] = field(default_factory=set)  # started by backfill, not by the plan
    went_first: dict[int, tuple[int, float]] = field(
        default_factory=dict
    )  # waiting job -> (larger gang started in its place, GPUs it would have left idle)
    kept_by_bound: set[int] = field(default_factory=set)  # kept running only by the preemption bound
    awaiting_checkpoint: set[int] = field(default_factory=set)  # kept: its stop waits for a checkpoint
    no_room: set[int] = field(default_factory=set)  # kept, but its pool had no room left for it
    node_free: list[list[int] | None] = field(default_factory=list)  # per pool: free GPUs per node
    held_for: list[dict[int, int]] = field(default_factory=list)  # per pool: held node -> gang job
    held_drain_s: list[dict[int, float]] = field(default_factory=list)  # per pool: held node -> drain, s
    kept_off: dict[int, set[int]] = field(default_factory=dict)  # started job -> held nodes it keeps off
    preemption_bound: int = 0  # preemptions allowed per step
