"""Inference demand curves for the simulator: real traces and generators, in busy GPUs.

Each service's curve is sampled once per sub-tick over [window start - history, window end +
one planning day], so the state's demand history, the simulated demand and the oracle's true
future come from the same array. Shapes: flat, diurnal, the GenTD26 hourly GPU-seconds trace,
the GenTD26 10-minute QPS trace and the GPUs held by openb's latency-sensitive (LS) pods;
then trend, step changes, bursts and noise, all seeded.
"""

from __future__ import annotations

import csv
import os
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.scenario import DemandSpec, StepChangeSpec

HOUR_S = 3600.0
DAY_S = 86400.0


def traces_dir() -> Path:
    """The shared traces folder (override with EBBTIDE_TRACES_DIR)."""
    override = os.environ.get("EBBTIDE_TRACES_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces"


@lru_cache(maxsize=4)
def gentd26_hourly_busy_gpus() -> tuple[float, ...]:
    """GenTD26 hourly demand: gpu_exec_seconds / 3600 = mean busy GPUs in that hour."""
    path = traces_dir() / "alibaba_gentd26_requests_per_hour.csv"
    with path.open() as f:
        return tuple(float(row["gpu_exec_seconds"]) / HOUR_S for row in csv.DictReader(f))


@lru_cache(maxsize=2)
def openb_ls_events() -> tuple[np.ndarray, np.ndarray]:
    """LS (latency-sensitive) pods of the openb trace as GPU steps: (times_s, +/- GPUs), sorted.

    A pod holds num_gpu GPUs, or gpu_milli / 1000 of one when it asks for a fractional GPU.
    """
    path = traces_dir() / "alibaba_openb_pod_list_default.csv"
    times: list[float] = []
    deltas: list[float] = []
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["qos"] != "LS":
                continue
            gpus = int(row["num_gpu"])
            milli = int(row["gpu_milli"] or 0)
            share = float(gpus) if gpus > 1 or milli >= 1000 else (milli / 1000.0 if gpus == 1 else 0.0)
            if share <= 0:
                continue
            times += [float(row["creation_time"]), float(row["deletion_time"])]
            deltas += [share, -share]
    order = np.argsort(np.asarray(times), kind="stable")
    return np.asarray(times)[order], np.asarray(deltas)[order]


@lru_cache(maxsize=4)
def gentd26_qps_10min(request_type: str) -> tuple[float, ...]:
    """GenTD26 10-minute QPS (summed over containers) for one request type, oldest first."""
    path = traces_dir() / "alibaba_gentd26_qps_10min.csv"
    points: dict[int, float] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["request_type"] == request_type:
                points[int(row["minutes_from_start"])] = float(row["mean_qps_summed_over_containers"])
    if not points:
        raise ValueError(f"request_type: {request_type!r} not found in {path.name}")
    return tuple(points[m] for m in sorted(points))


def _base_shape(spec: DemandSpec, times_s: np.ndarray, start: datetime) -> np.ndarray:
    """Unscaled shape (peak near 1) at ``times_s`` seconds from the window start."""
    if spec.kind == "flat":
        return np.ones_like(times_s)
    if spec.kind == "diurnal":
        hours = (start.hour + start.minute / 60.0 + times_s / HOUR_S) % 24.0
        wave = 0.5 + 0.5 * np.cos(2 * np.pi * (hours - spec.peak_hour) / 24.0)
        shape = spec.trough_frac + (1.0 - spec.trough_frac) * wave
        weekday = ((start.weekday() + np.floor((start.hour * HOUR_S + times_s) / DAY_S)) % 7).astype(int)
        return np.where(weekday >= 5, shape * spec.weekend_factor, shape)
    if spec.kind == "gentd26_hourly":
        series = np.asarray(gentd26_hourly_busy_gpus())
        first = times_s[0]
        hours_from_first = (times_s - first) / HOUR_S + spec.trace_start_hour
        lo = np.floor(hours_from_first).astype(int)
        frac = hours_from_first - lo
        a = series[lo % series.size]
        b = series[(lo + 1) % series.size]
        values = a + (b - a) * frac
        scaled: np.ndarray = values / max(float(series.max()), 1e-9)
        return scaled
    if spec.kind == "openb_ls":
        event_t, event_d = openb_ls_events()
        level = np.cumsum(event_d)
        trace_t = spec.trace_start_day * DAY_S + (times_s - times_s[0]) * spec.time_compression
        idx = np.searchsorted(event_t, trace_t, side="right") - 1
        alive = np.where(idx >= 0, level[np.maximum(idx, 0)], 0.0)
        normed: np.ndarray = alive / max(float(alive.max()), 1e-9)
        return normed
    # gentd26_qps_10min: the 22.3 h profile stretched over each day, aligned at midnight.
    profile = np.asarray(gentd26_qps_10min(spec.request_type))
    minute_of_day = ((start.hour * 60 + start.minute) + times_s / 60.0) % 1440.0
    idx = np.minimum((minute_of_day / 1440.0 * profile.size).astype(int), profile.size - 1)
    shaped: np.ndarray = profile[idx] / max(float(profile.max()), 1e-9)
    return shaped


def level_factor(change: StepChangeSpec, times_s: np.ndarray) -> np.ndarray:
    """The multiplier of one level shift at each time: 1 before it, ``factor`` once ramped up."""
    begin_s = change.at_hour * HOUR_S
    if change.ramp_hours <= 0:
        return np.where(times_s >= begin_s, change.factor, 1.0)
    progress = np.clip((times_s - begin_s) / (change.ramp_hours * HOUR_S), 0.0, 1.0)
    ramped: np.ndarray = 1.0 + (change.factor - 1.0) * progress
    return ramped


def demand_curve(
    spec: DemandSpec,
    *,
    start: datetime,
    first_s: float,
    last_s: float,
    tick_s: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Busy GPUs at every tick from ``first_s`` (negative: history) to ``last_s`` from ``start``."""
    times = np.arange(first_s, last_s, tick_s, dtype=float)
    values = _base_shape(spec, times, start) * spec.peak_gpus
    values = values * np.maximum(1.0 + spec.trend_per_day * times / DAY_S, 0.0)
    for change in spec.step_changes:
        values = values * level_factor(change, times)
    if spec.bursts is not None and spec.bursts.per_day > 0:
        span_days = (last_s - first_s) / DAY_S
        count = rng.poisson(spec.bursts.per_day * span_days)
        for burst_start in rng.uniform(first_s, last_s, size=count):
            length = spec.bursts.duration_minutes * 60.0 * rng.uniform(0.5, 1.5)
            inside = (times >= burst_start) & (times < burst_start + length)
            values = np.where(inside, values * spec.bursts.magnitude, values)
    if spec.noise_frac > 0:
        # Smooth multiplicative noise: independent per 15 minutes, interpolated in between.
        knots_s = np.arange(first_s, last_s + 900.0, 900.0)
        knots = rng.normal(1.0, spec.noise_frac, size=knots_s.size)
        values = values * np.maximum(np.interp(times, knots_s, knots), 0.0)
    return np.maximum(values, 0.0)


def step_means(curve: np.ndarray, ticks_per_step: int) -> np.ndarray:
    """Mean of each whole step of ticks (the demand history the state carries)."""
    whole = curve.size // ticks_per_step
    means: np.ndarray = curve[: whole * ticks_per_step].reshape(whole, ticks_per_step).mean(axis=1)
    return means


def window_times(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)
