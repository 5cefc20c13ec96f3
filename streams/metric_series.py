"""The shapes of ebbtide's series: histogram buckets, bounded label sets, and the pure functions
that turn the loop's records into series values (which plan step is in force at each hour ahead,
which forecast step covers a time, a partition's lag). streams/metrics.py declares and records the
metrics with them; no prometheus_client here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import get_args

from schemas import DemandForecast, HorizonPlan, PlanStep, PoolWindow
from schemas.actuation import Outcome

DEFAULT_METRICS_PORT = 9095
"""The port every service serves /metrics on unless EBBTIDE_METRICS_PORT says otherwise."""

LATENCY_BUCKETS_S = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.8),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
"""0.8 s is the default decision budget: EbbtideDecisionLatencyHigh compares p99 with it exactly."""
FORECAST_ERROR_BUCKETS_GPUS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
QUEUE_WAIT_BUCKETS_S = (
    *(60.0, 300.0, 900.0, 1800.0, 3600.0, 2 * 3600.0, 4 * 3600.0, 8 * 3600.0, 12 * 3600.0),
    *(86400.0, 2 * 86400.0, 4 * 86400.0, 7 * 86400.0),
)
"""A minute to a week: a job that waited under a minute lands in the first bucket."""

PLAN_HOURS_AHEAD = tuple(range(24))
"""The hours ahead the planned horizon is exported at: every whole hour of the next 24 h.

Every hour rather than a sparse set (0, 1, 2, 4, 8, ...): the dashboard's "next 24 h" panel
reads as one bar per hour, and a plan's afternoon ramp or a batch window would fall between
sparse points. The cost is fixed: 24 series per (service, pool) the plan uses, and 24 per pool
for batch, whatever the step length or horizon (a 15-minute step plan of 96 steps is sampled at
its step starting on each whole hour; hours past the plan's horizon are not exported).
"""

MAX_PRIORITY_CLASSES = 16
"""Distinct priority classes per cluster the queue-wait histogram labels; later ones read "other".

JobSpec.priority_class is any name the submitter gives, so the label is capped here (a cluster
configures a handful of classes; a misbehaving submitter must not mint a histogram per job).
"""

Series = dict[tuple[str, ...], float]
"""Values of a gauge's series for one cluster, keyed by the label values after ``cluster``."""

COMPONENTS = ("collector", "state", "forecaster", "optimizer", "actuator")
ACTUATION_OUTCOMES: tuple[str, ...] = get_args(Outcome)


def partition_lag_messages(position: int, high_watermark: int, low_watermark: int = 0) -> int | None:
    """Messages a consumer still has to read in one partition, or None when the broker gave no watermark.

    ``position`` is the next offset the consumer will read (confluent-kafka's ``position()``); a
    negative one (``OFFSET_INVALID``, no position yet) means everything from the low watermark
    is still to read. Never negative: a position past a high watermark fetched a moment earlier
    counts as caught up.
    """
    if high_watermark < 0:
        return None
    start = position if position >= 0 else max(low_watermark, 0)
    return max(high_watermark - start, 0)


def plan_steps_by_hour(plan: HorizonPlan) -> dict[int, PlanStep]:
    """The step of ``plan`` in force at each hour of PLAN_HOURS_AHEAD after its issue, within its horizon.

    Step k covers [issued_at + k*step_s, issued_at + (k+1)*step_s); hour h reads the step that covers
    issued_at + h hours.
    """
    steps: dict[int, PlanStep] = {}
    for hour in PLAN_HOURS_AHEAD:
        index = (hour * 3600) // plan.step_s
        if index >= plan.horizon_steps:
            break
        steps[hour] = plan.step(index)
    return steps


def forecast_step_index(forecast: DemandForecast, at: datetime) -> int | None:
    """The horizon step that covers ``at``: step k covers [issued_at + k*step_s, issued_at + (k+1)*step_s)."""
    offset_s = (at - forecast.issued_at).total_seconds()
    if offset_s < 0:
        return None
    index = math.floor(offset_s / forecast.step_s)
    return index if index < forecast.horizon_steps else None


MAINTENANCE_AHEAD = timedelta(hours=24)
"""How far ahead ``ebbtide_pool_gpus{state="maintenance_next_24h"}`` looks for maintenance windows."""


def most_out_at_once(windows: Sequence[PoolWindow], start: datetime, end: datetime) -> int:
    """The most GPUs the ``windows`` take out at one time between ``start`` and ``end`` (they
    overlap or not: the count is taken where each window starts, or at ``start``)."""
    within = [w for w in windows if w.start < end and w.end > start]
    instants = {max(w.start, start) for w in within}
    return max((sum(w.gpus_out for w in within if w.start <= t < w.end) for t in instants), default=0)
