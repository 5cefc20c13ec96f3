"""DemandForecast: a service's demand over the planning horizon as quantile curves.

Produced by the forecaster, consumed by the optimizer. Curves are keyed ``p50``, ``p90``,
``p99`` (at least those), each ``horizon_steps`` long, non-negative and monotone in the level.
"""

from __future__ import annotations

import itertools
import re

from pydantic import Field, field_validator, model_validator

from schemas.base import DemandGpus, Event, Fraction, HorizonSteps, Name, Relative, StepS, UtcDatetime

REQUIRED_QUANTILES = ("p50", "p90", "p99")
_QUANTILE_KEY = re.compile(r"^p(\d{1,2}(\.\d+)?)$")


def quantile_level(key: str) -> float:
    """``'p90'`` -> 0.90. Raises ValueError on a malformed key."""
    match = _QUANTILE_KEY.match(key)
    if match is None:
        raise ValueError(f"quantile key {key!r} is not of the form pNN")
    return float(match.group(1)) / 100.0


class DemandForecast(Event):
    cluster: Name
    service: Name
    issued_at: UtcDatetime
    step_s: StepS
    horizon_steps: HorizonSteps
    quantiles: dict[str, list[DemandGpus]] = Field(
        description="busy GPUs per step, by quantile key (p50, p90, p99, ...)"
    )
    model: Name
    backtest_rel_mae: Relative | None = None
    backtest_coverage_90: Fraction | None = None
    degraded_reason: str | None = Field(
        default=None, description="why a simpler model or wider band was used (short or gappy history)"
    )

    @field_validator("quantiles")
    @classmethod
    def _keys(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for key in value:
            quantile_level(key)
        missing = [q for q in REQUIRED_QUANTILES if q not in value]
        if missing:
            raise ValueError(f"quantiles: missing {', '.join(missing)}")
        return value

    @model_validator(mode="after")
    def _shape_and_order(self) -> DemandForecast:
        for key, curve in self.quantiles.items():
            if len(curve) != self.horizon_steps:
                raise ValueError(
                    f"quantiles.{key}: length {len(curve)} differs from horizon_steps {self.horizon_steps}"
                )
        ordered = sorted(self.quantiles, key=quantile_level)
        for lower, upper in itertools.pairwise(ordered):
            for step, (lo, hi) in enumerate(zip(self.quantiles[lower], self.quantiles[upper], strict=True)):
                if lo > hi + 1e-9:
                    raise ValueError(
                        f"quantiles.{upper}[{step}]: {hi} is below quantiles.{lower}[{step}] = {lo}"
                    )
        return self

    def curve(self, key: str) -> list[float]:
        return self.quantiles[key]

    @property
    def key(self) -> str:
        return self.service
