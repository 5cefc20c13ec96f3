"""Recovery settings: the state restore takes the snapshot at the latest offset (not the largest
``as_of``), and the services' consumers allow a poll interval above the decision budget."""

from __future__ import annotations

from datetime import timedelta

from loop_factories import cluster

from ebbtide.settings import load_settings
from streams.services.state import restore_fold


def test_the_state_restore_takes_the_snapshot_published_last() -> None:
    seed = cluster(0)
    later, earlier = cluster(2, history=[5.0]), cluster(1, history=[7.0])  # published in this order
    _fold, latest = restore_fold(seed, [later, earlier], max_history_steps=10)
    assert latest is not None and latest.as_of == earlier.as_of


def test_max_poll_interval_is_above_the_decision_budget(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import ebbtide.wiring as wiring

    captured = {}
    monkeypatch.setattr(wiring, "build_processor", lambda *a: type("P", (), {"inputs": ()})())
    monkeypatch.setattr(wiring, "ServiceRuntime", lambda **kw: captured.update(kw))
    settings = load_settings(optimizer={"decision_budget_s": 600.0}, metrics_enabled=False)
    wiring.build_runtime("optimizer", settings)
    assert captured["max_poll_interval_ms"] > 600_000 + timedelta(seconds=60).total_seconds() * 1000
