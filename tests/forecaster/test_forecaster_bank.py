"""ForecastBank reuses its fit every step, refits on cadence and on drift; the loop adapter works."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from forecaster_synthetic import T0, synthetic_hourly

from forecaster import BankConfig, BankForecastSource, ForecastBank
from schemas import ClusterState, PoolState, ServiceSpec, ServiceState

STEP_S = 3600


def test_step_time_forecasts_reuse_the_fit_until_the_cadence() -> None:
    bank = ForecastBank(BankConfig(refit_every_s=6 * 3600))
    values = synthetic_hourly(18).tolist()
    first = bank.forecast("chat", values[:-3], cluster="c", step_s=STEP_S, horizon_steps=24, issued_at=T0)
    fitted = bank.model("chat")
    assert fitted is not None and first.model == fitted.calibrated.model
    for step in range(1, 4):
        bank.forecast(
            "chat",
            values[: len(values) - 3 + step],
            cluster="c",
            step_s=STEP_S,
            horizon_steps=24,
            issued_at=T0 + timedelta(hours=step),
        )
        assert bank.model("chat") is fitted  # no refit on the step path
    assert not bank.refit_due("chat", T0 + timedelta(hours=5))
    assert bank.refit_due("chat", T0 + timedelta(hours=6))


def test_demand_outside_the_band_for_several_steps_marks_drift() -> None:
    bank = ForecastBank(BankConfig(refit_every_s=24 * 3600, drift_steps=3))
    values = list(synthetic_hourly(18))
    bank.forecast("chat", values, cluster="c", step_s=STEP_S, horizon_steps=24, issued_at=T0)
    for step in range(1, 4):
        values.append(1000.0)  # far above any band
        result = bank.forecast(
            "chat", values, cluster="c", step_s=STEP_S, horizon_steps=24, issued_at=T0 + timedelta(hours=step)
        )
    assert bank.refit_due("chat", T0 + timedelta(hours=3))
    assert result.degraded_reason is not None and "drift" in result.degraded_reason
    bank.refit("chat", values, step_s=STEP_S, horizon_steps=24, fitted_at=T0 + timedelta(hours=3))
    assert not bank.refit_due("chat", T0 + timedelta(hours=3))


def test_bad_history_gives_a_degraded_forecast_instead_of_raising() -> None:
    bank = ForecastBank()
    result = bank.forecast(
        "chat", [float("nan")] * 5, cluster="c", step_s=STEP_S, horizon_steps=4, issued_at=T0
    )
    assert result.degraded_reason is not None and "demand_history" in result.degraded_reason
    assert all(v >= 0 for v in result.quantiles["p99"])


def test_bank_forecast_source_forecasts_every_service_in_the_state() -> None:
    step_s = 900
    history = np.repeat(synthetic_hourly(9), 4).tolist()
    state = ClusterState(
        cluster="c1",
        as_of=T0,
        step_s=step_s,
        pools=[PoolState(name="a100", gpu_type="A100", gpus_total=16, gpus_available=16)],
        services=[
            ServiceState(spec=ServiceSpec(service="chat"), demand_history=history),
            ServiceState(spec=ServiceSpec(service="new"), demand_history=[]),
        ],
    )
    source = BankForecastSource(ForecastBank())
    forecasts = source.forecasts(state, T0)
    assert set(forecasts) == {"chat", "new"}
    assert forecasts["chat"].horizon_steps == 96 and forecasts["chat"].step_s == step_s
    assert forecasts["new"].degraded_reason is not None
    assert source.due(state) == ["new"]


def test_each_cluster_has_its_own_models_for_services_of_one_name() -> None:
    """A state of another cluster with a ``chat`` of its own neither refits nor forecasts this one's."""
    step_s = 900
    busy = np.repeat(synthetic_hourly(9), 4).tolist()
    idle = [0.5 * v for v in busy]

    def state(cluster: str, history: list[float]) -> ClusterState:
        return ClusterState(
            cluster=cluster,
            as_of=T0,
            step_s=step_s,
            pools=[PoolState(name="a100", gpu_type="A100", gpus_total=16, gpus_available=16)],
            services=[ServiceState(spec=ServiceSpec(service="chat"), demand_history=history)],
        )

    alone = BankForecastSource(ForecastBank()).forecasts(state("c1", busy), T0)["chat"]
    source = BankForecastSource(ForecastBank())
    other = source.forecasts(state("c2", idle), T0)["chat"]  # fitted first, to c2's history
    mine = source.forecasts(state("c1", busy), T0)["chat"]
    assert set(source.banks) == {"c1", "c2"}
    assert source.bank_for("c1").model("chat") is not source.bank_for("c2").model("chat")
    assert mine.quantiles == alone.quantiles  # as if c2 had never been seen
    assert max(other.quantiles["p50"]) < max(mine.quantiles["p50"])
