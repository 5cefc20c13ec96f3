"""The services' part of PlanInputs (optimizer/inputs.py): where each service may run and how
many replicas share a GPU there, and its demand over the horizon at its SLO quantile, from its
forecast (band-scaled by the calibration, floored by what is busy now) or, without one, from a
seasonal-naive forecast of its own history. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import numpy as np

from forecaster.naive import seasonal_naive
from optimizer.config import PlannerConfig
from optimizer.interference import InterferenceCurve
from optimizer.peak_margin import peak_margin_gpus
from schemas import ClusterState, DemandForecast


def demand_curve(
    state: ClusterState,
    forecast: DemandForecast | None,
    service_index: int,
    quantile: str,
    steps: int,
    step_s: int,
    now: datetime,
    band_factor: float = 1.0,
) -> tuple[np.ndarray, str]:
    service = state.services[service_index]
    if forecast is None:
        forecast = seasonal_naive(
            service.demand_history,
            cluster=state.cluster,
            service=service.spec.service,
            step_s=state.step_s,
            horizon_steps=max(steps * step_s // state.step_s, 1),
            issued_at=now,
        )
    key = quantile if quantile in forecast.quantiles else "p90"
    curve = np.asarray(forecast.curve(key), dtype=float)
    label = f"{forecast.model} {key}"
    if band_factor != 1.0:
        # the band scaled by how the source's recent forecasts missed (optimizer/calibration.py)
        median = np.asarray(forecast.curve("p50"), dtype=float)
        curve = median + band_factor * (curve - median)
        label += f" (band x{band_factor:.2f} from recent misses)"
    if forecast.step_s != step_s:
        # Resample to the plan's step: the highest value of the forecast steps each plan step spans.
        times = np.arange(steps) * step_s
        src = np.minimum((times // forecast.step_s).astype(int), curve.size - 1)
        width = max(step_s // forecast.step_s, 1)
        curve = np.asarray([curve[i : i + width].max() for i in src])
    if curve.size < steps:
        pad = curve[-1] if curve.size else 0.0
        curve = np.concatenate([curve, np.full(steps - curve.size, pad)])
    return np.maximum(curve[:steps], 0.0), label


def service_placement(state: ClusterState, curve: InterferenceCurve) -> tuple[np.ndarray, ...]:
    """[S, P] each: pools a service may use, replicas that may share one GPU, capacity lost per
    extra co-tenant, and replicas running now."""
    pools, services = state.pools, state.services
    pool_names = [p.name for p in pools]
    pool_index = {name: i for i, name in enumerate(pool_names)}
    specs = [s.spec for s in services]
    allowed = np.asarray(
        [[not spec.allowed_pools or name in spec.allowed_pools for name in pool_names] for spec in specs],
        dtype=bool,
    ).reshape(len(specs), len(pools))
    max_share = np.asarray([p.max_share for p in pools], dtype=float)
    max_cotenants = np.asarray([spec.max_cotenants for spec in specs], dtype=float)
    tenants = np.minimum(max_share[None, :], max_cotenants[:, None])
    loss_of_class = {c: 1.0 - curve.efficiency(2.0, [c]) for c in {spec.bandwidth_class for spec in specs}}
    class_loss = np.asarray([loss_of_class[spec.bandwidth_class] for spec in specs], dtype=float)
    loss = np.where(tenants > 1, class_loss[:, None], 0.0)
    replicas_now = np.zeros((len(specs), len(pools)))
    for s, service in enumerate(services):
        for pool_name, count in service.replicas.items():
            if pool_name in pool_index:
                replicas_now[s, pool_index[pool_name]] = count
    return allowed, np.maximum(tenants, 1.0), loss, replicas_now


def service_demand(
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    now: datetime,
    config: PlannerConfig,
    band_factors: Mapping[str, float] | None,
    scaled_up_gpus: Mapping[str, float] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """[S, T] demand at each service's SLO quantile (band scaled, nowcast floor, plus the margin
    for a step's peak when ``config.peak_margin``: optimizer/peak_margin.py), and the label of the
    forecast it came from. A service in ``scaled_up_gpus`` (its autoscaler added replicas within
    the last step: demand rose past what it was given) needs at least the GPUs it runs now in the
    nowcast steps, so the plan does not cut replicas demand has just asked for."""
    steps, step_s = config.horizon_steps, config.step_s
    demand = np.zeros((len(state.services), steps))
    models: list[str] = []
    for s, service in enumerate(state.services):
        spec = service.spec
        factor = band_factors.get(spec.service, 1.0) if band_factors else 1.0
        demand[s], model = demand_curve(
            state, forecasts.get(spec.service), s, spec.slo_quantile, steps, step_s, now, factor
        )
        if service.demand_history and config.nowcast_steps:
            # Persistence floor: the next steps need at least what is busy now (forecast misses).
            lead = min(config.nowcast_steps, steps)
            demand[s, :lead] = np.maximum(demand[s, :lead], service.demand_history[-1])
        if scaled_up_gpus and spec.service in scaled_up_gpus:
            lead = min(max(config.nowcast_steps, 1), steps)
            demand[s, :lead] = np.maximum(demand[s, :lead], scaled_up_gpus[spec.service])
        if config.peak_margin:
            z = config.peak_margin_z
            demand[s] += peak_margin_gpus(service.demand_history, z, spec.startup_s, config.step_s)
        models.append(model)
    return demand, models
