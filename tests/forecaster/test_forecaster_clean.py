"""Bad history is repaired where safe and rejected, naming the field, where not."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.clean import HistoryError, clean_series, clean_values


def test_short_nan_and_negative_runs_are_interpolated() -> None:
    cleaned = clean_values([1.0, float("nan"), 3.0, -5.0, 5.0, -1e-12])
    assert cleaned.values.tolist() == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0, 0.0])
    assert any("missing" in note for note in cleaned.notes)


def test_history_before_a_long_gap_is_dropped() -> None:
    cleaned = clean_values([9.0] * 10 + [float("nan")] * 8 + [1.0, 2.0], max_gap_steps=4)
    assert cleaned.values.tolist() == [1.0, 2.0]
    assert any("gap of 8 steps" in note for note in cleaned.notes)


@pytest.mark.parametrize("history", [[], [float("nan")] * 3, [-1.0, -2.0], [float("inf")]])
def test_unusable_history_is_rejected(history: list[float]) -> None:
    with pytest.raises(HistoryError, match="demand_history"):
        clean_values(history)


def test_unsorted_duplicate_and_missing_timestamps_are_put_on_a_grid() -> None:
    times = [7200.0, 0.0, 3600.0, 3600.0, 14400.0]
    values = [3.0, 1.0, 2.0, 2.0, 5.0]
    series = clean_series(times, values)
    assert series.step_s == 3600
    assert series.start_s == 0.0
    assert series.values.tolist() == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])
    joined = " ".join(series.notes)
    assert "sorted" in joined and "duplicate" in joined and "missing timestamps" in joined


def test_the_start_time_follows_the_rows_dropped_at_the_front() -> None:
    t0 = 1_733_011_200.0  # 2024-12-01 00:00 UTC
    nan = float("nan")
    values = [9.0] * 3 + [nan] * 7 + [1.0, 2.0, 3.0]  # history before a 7-step gap is dropped
    series = clean_series([t0 + 3600.0 * i for i in range(len(values))], values, max_gap_steps=4)
    assert series.values.tolist() == [1.0, 2.0, 3.0]
    assert series.start_s == t0 + 10 * 3600.0  # the grid's first kept step, not the CSV's first row


def test_conflicting_duplicates_are_rejected() -> None:
    with pytest.raises(HistoryError, match="duplicate timestamp 3600"):
        clean_series([0.0, 3600.0, 3600.0], [1.0, 2.0, 9.0])


def test_irregular_timestamps_are_rejected() -> None:
    with pytest.raises(HistoryError, match="regular grid"):
        clean_series(np.array([0.0, 3600.0, 5000.0, 7200.0, 10800.0]), [1.0, 2.0, 3.0, 4.0, 5.0])
