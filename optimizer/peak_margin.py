"""Within-step margin (used when building the inputs, optimizer/service_inputs.py, and when lending
headroom, optimizer/headroom.py): capacity for the demand until the next decision, not for a step's
mean.

Forecasts and the demand history are per step (mean busy GPUs), but the SLO is met or missed at
every moment: demand moves from one step's level to the next's within the step and peaks above the
step's mean, and capacity asked for at a step serves only after the replica's start-up. What is
ready at a decision must carry the service until the next one: the last observed step mean is
centred half a step back, and the step ends one step on, so the move that matters spans about one
and a half steps. It is read from the service's own recent past: from each step mean, the largest
change to either of the next ``MOVE_STEPS`` (two) step means.

The margin is ``z`` robust standard deviations of that move: 1.4826 x its median absolute size
over the last day (the median, so bursts in the history do not inflate it; a quantile near the top
read the bursts of a bursty service as its everyday move and reserved for them at every step).
At the default z = 2.2 (PlannerConfig.peak_margin_z) a normally distributed move passes it about
once in 70 steps. The same margin is

- added to the demand the plan covers in every step (reserving it costs little: the part of a
  reservation a service does not need now is lent to preemptible jobs, and its autoscaler takes it
  back when demand rises), and
- kept ready above the service's demand now instead of being lent: a lent GPU taken back serves
  only after the autoscaler has seen the rise and the replica has loaded, so each rise past what
  is kept goes unserved for that long, and stops a borrower besides.

Pure: functions of the demand history and the settings.
"""

from __future__ import annotations

from collections.abc import Sequence

MARGIN_WINDOW_STEPS = 96
"""Steps of history the margin is read from (one day of 15-minute steps)."""

MOVE_STEPS = 2
"""Step means ahead of an observed one that the move spans (see the module docstring)."""

ROBUST_SIGMA = 1.4826
"""Standard deviation of a normal distribution per unit of its median absolute deviation."""


def moves(history: Sequence[float], window: int = MARGIN_WINDOW_STEPS) -> list[float]:
    """For each of the last ``window`` step means of ``history`` that has ``MOVE_STEPS`` after it:
    the largest absolute change from it to any of them (GPUs, oldest first)."""
    recent = history[-(window + MOVE_STEPS) :]
    return [
        max(abs(recent[i + k] - recent[i]) for k in range(1, MOVE_STEPS + 1))
        for i in range(len(recent) - MOVE_STEPS)
    ]


def move_scale(history: Sequence[float], window: int = MARGIN_WINDOW_STEPS) -> float:
    """Robust standard deviation (GPUs) of the moves of ``history`` (see ``moves``): ROBUST_SIGMA
    x their median, the upper one of an even count (0 with too short a history)."""
    ordered = sorted(moves(history, window))
    if not ordered:
        return 0.0
    return ROBUST_SIGMA * ordered[len(ordered) // 2]


def peak_margin_gpus(history: Sequence[float], z: float) -> float:
    """GPUs above a service's demand now (or its forecast) that its demand reaches before the next
    decision, at ``z`` robust standard deviations of its moves."""
    return z * move_scale(history)
