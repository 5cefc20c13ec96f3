"""Within-step margins (used when building the inputs, optimizer/service_inputs.py, and when
lending headroom, optimizer/headroom.py): capacity for a step's peak, not its mean.

Forecasts and the demand history are per step (mean busy GPUs), but the SLO is met or missed at
every moment inside a step: demand moves from one step's level to the next's within the step and
peaks above the step's mean. How far it moves is read from the service's own recent past: the
change between consecutive step means. (In the benchmark's scenarios its quantiles track those of
the peak above the step's mean within 0.1-1 GPU, at p50, p90 and p99; see the README.)

Two margins come from it:

- ``plan_margin_gpus``: at the service's SLO quantile, added to the demand the plan covers in every
  step. Reserving it costs little: the part of a reservation a service does not need now is lent
  to preemptible jobs, and its autoscaler takes it back when demand rises.
- ``kept_margin_gpus``: what a service keeps ready above its demand now instead of lending it. A
  lent GPU taken back serves only after the replica's start-up, so each time demand rises past
  what is kept, the rise goes unserved until the autoscaler has seen it (``reaction_s``) and the
  replica has loaded (``startup_s``). Keeping one more GPU ready costs a step of batch work on it
  (``step_s`` GPU-seconds at most at the largest weight); losing it to a late take-back costs
  ``reaction_s + startup_s`` GPU-seconds of shortfall at ``shortfall_penalty`` times that weight.
  So a GPU is kept while the chance that demand moves past it within the step is above
  step_s / (shortfall_penalty x (reaction_s + startup_s)): the margin at that level's complement
  (a newsvendor rule), never above the SLO quantile, 0 where a take-back is too quick to matter.

Pure: functions of the demand history and the settings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from schemas import ServiceSpec
from schemas.forecast import quantile_level

MARGIN_WINDOW_STEPS = 96
"""Steps of history the margins are read from (one day of 15-minute steps)."""


def step_change_quantile(history: Sequence[float], level: float, window: int = MARGIN_WINDOW_STEPS) -> float:
    """The ``level`` quantile of the change between consecutive step means over the last ``window``
    steps of ``history`` (GPUs; 0 with fewer than two steps or a level of 0)."""
    recent = history[-(window + 1) :]
    if len(recent) < 2 or level <= 0.0:
        return 0.0
    changes = sorted(abs(b - a) for a, b in pairwise(recent))
    return float(changes[math.ceil(min(level, 1.0) * (len(changes) - 1))])  # numpy's "higher" quantile


def plan_margin_gpus(spec: ServiceSpec, history: Sequence[float]) -> float:
    """GPUs above a step's mean demand its peak reaches, at the service's SLO quantile."""
    return step_change_quantile(history, quantile_level(spec.slo_quantile))


@dataclass(frozen=True)
class TakeBack:
    """What a late take-back of lent GPUs costs, from the planner's settings (PlannerConfig)."""

    shortfall_penalty: float
    """Cost of an uncovered GPU-second, in GPU-seconds of batch work at the largest weight."""
    reaction_s: float
    """Seconds the autoscaler needs to see a rise and ask for replicas, before their start-up."""


def keep_level(spec: ServiceSpec, step_s: int, take_back: TakeBack) -> float:
    """The quantile of within-step movement a service keeps ready (see the module docstring)."""
    late_s = spec.startup_s + take_back.reaction_s
    if late_s <= 0 or take_back.shortfall_penalty <= 0:
        return 0.0
    level = 1.0 - step_s / (take_back.shortfall_penalty * late_s)
    return min(max(level, 0.0), quantile_level(spec.slo_quantile))


def kept_margin_gpus(spec: ServiceSpec, history: Sequence[float], step_s: int, take_back: TakeBack) -> float:
    """GPUs a service keeps ready above its demand now rather than lend them."""
    return step_change_quantile(history, keep_level(spec, step_s, take_back))
