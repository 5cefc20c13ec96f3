"""Synthetic demand series for the forecaster tests (deterministic seeds, real code paths)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)


def daily_curve(hours: np.ndarray) -> np.ndarray:
    """A known busy-GPU day shape: quiet around noon, a peak in the evening, never negative."""
    phase = 2 * np.pi * (hours % 24) / 24
    return 6.0 + 4.0 * np.sin(phase - 2.0) + 1.5 * np.cos(2 * phase)


def synthetic_hourly(days: int, noise: float = 0.2, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    hours = np.arange(days * 24)
    weekly = np.where((hours // 24) % 7 == 5, 0.7, 1.0)
    return np.maximum(daily_curve(hours) * weekly + rng.normal(0, noise, hours.size), 0.0)
