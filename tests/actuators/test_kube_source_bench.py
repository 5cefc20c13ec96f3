"""``ebbtide bench-kube-source`` runs end to end at a small scale (its figures are checked, not its speed)."""

from __future__ import annotations

import pytest
from kube_cluster import build_kube_apiserver

from bench.kube_source import run_kube_source_bench

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def test_the_source_bench_sees_every_object_and_every_change() -> None:
    binary, reason = build_kube_apiserver()
    if binary is None:
        pytest.skip(f"kube-apiserver is not available: {reason}")
    figures = run_kube_source_bench(jobs=20, nodes=4, changes=10)
    assert (figures.snapshot_jobs, figures.snapshot_nodes) == (20, 4)
    assert figures.changes == 10 + 4  # every job patch and node cordon reached the view
    assert 0 < figures.event_lag_p50_s <= figures.event_lag_p99_s <= figures.event_lag_max_s
    assert figures.rss_mib_after_list > 0 and set(figures.as_dict()["met"]) == {
        "initial_list_s",
        "event_lag_p99_s",
        "rss_mib",
    }
