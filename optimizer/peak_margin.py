"""Within-step margin (used when building the inputs, optimizer/service_inputs.py, and when lending
headroom, optimizer/headroom.py): capacity for the demand until the next decision, not for a step's
mean.

Forecasts and the demand history are per step (mean busy GPUs), but the SLO is met or missed at
every moment: demand moves from one step's level to the next's within the step and peaks above the
step's mean, and capacity asked for at a step serves only after the replica's start-up. What is
ready at a decision must carry the service until the next one: the last observed step mean is
centred half a step back, the step ends one step on, and a replica asked for at the decision serves
only after its start-up, so the move that matters spans one and a half steps plus the start-up
(``move_steps``: two steps for a start-up of up to half a step, three for a 10-minute one on
15-minute steps). It is read from the service's own recent past: from each step mean, the largest
change to any of the step means that span ahead.

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

import math
from collections.abc import Sequence

import numpy as np

MARGIN_WINDOW_STEPS = 96
"""Steps of history the margin is read from (one day of 15-minute steps)."""

MOVE_STEPS = 2
"""Step means ahead of an observed one that the move spans where the start-up is short (see
``move_steps``)."""

ROBUST_SIGMA = 1.4826
"""Standard deviation of a normal distribution per unit of its median absolute deviation."""


def move_steps(startup_s: float, step_s: int) -> int:
    """Steps ahead the move spans: from the last observed step mean (centred half a step back) to the
    next decision (one step on) plus a replica's start-up, rounded up."""
    return max(MOVE_STEPS, math.ceil(1.5 + startup_s / step_s - 1e-9))


def moves(history: Sequence[float], span: int, window: int = MARGIN_WINDOW_STEPS) -> np.ndarray:
    """For each of the last ``window`` step means of ``history`` that has ``span`` after it: the
    largest absolute change from it to any of them (GPUs, oldest first)."""
    recent = np.asarray(history[-(window + span) :], dtype=float)
    n = recent.size - span
    if n <= 0:
        return np.zeros(0)
    largest: np.ndarray = np.abs(recent[1 : 1 + n] - recent[:n])
    for k in range(2, span + 1):
        largest = np.maximum(largest, np.abs(recent[k : k + n] - recent[:n]))
    return largest


def move_scale(history: Sequence[float], span: int, window: int = MARGIN_WINDOW_STEPS) -> float:
    """Robust standard deviation (GPUs) of the moves of ``history`` (see ``moves``): ROBUST_SIGMA
    x their median, the upper one of an even count (0 with too short a history)."""
    ordered = np.sort(moves(history, span, window))
    if not ordered.size:
        return 0.0
    return ROBUST_SIGMA * float(ordered[ordered.size // 2])


def peak_margin_gpus(history: Sequence[float], z: float, startup_s: float, step_s: int) -> float:
    """GPUs above a service's demand now (or its forecast) that its demand reaches before the next
    decision and a replica's start-up (``startup_s``; the span: ``move_steps``), at ``z`` robust
    standard deviations of its moves."""
    return z * move_scale(history, move_steps(startup_s, step_s))
