"""Which policies the benchmark runs: name -> factory of (Policy, ForecastSource) for one run.

The baselines (fifo, priority-backfill, reactive, kueue-hpa: HPA for inference and Kueue's
queues, quotas and preemption for batch), then the planner three ways: ``ebbtide`` (forecasts
from the forecaster's ForecastBank, refit on its cadence), ``ebbtide-naive`` (the same planner
on seasonal-naive forecasts, to show what the forecaster adds) and ``ebbtide-true-demand`` (the same heuristic
planner fed the true future demand). That last one is NOT an upper bound: it is still a rolling
one-day planner with rounding, estimates in place of true job durations and no knowledge of
future arrivals, and other policies can beat it. The ceiling is ``bound`` (simulator/bound.py), an
offline LP relaxation that is not a policy and so is not in this registry. Another policy:
``register_policy(name, factory)``. The registry maps names to constructors; nothing dispatches
on a name.
"""

from __future__ import annotations

from collections.abc import Callable

from forecaster.source import BankForecastSource, SeasonalNaiveSource
from loop import ForecastSource, Policy
from optimizer.planner import PlannerPolicy
from simulator.cluster import Simulator
from simulator.forecast_sources import NoForecastSource, OracleSource
from simulator.policies.fifo import FifoPolicy
from simulator.policies.kueue_hpa import KueueHpaPolicy
from simulator.policies.priority_backfill import PriorityBackfillPolicy
from simulator.policies.reactive import ReactivePolicy

PolicyFactory = Callable[[Simulator], tuple[Policy, ForecastSource]]

_EXTRA: dict[str, PolicyFactory] = {}


def horizon_steps(sim: Simulator) -> int:
    """Forecast horizon for planners: one day of steps."""
    return max(86400 // sim.step_s, 1)


def baseline_factories() -> dict[str, PolicyFactory]:
    return {
        "fifo": lambda sim: (FifoPolicy(), NoForecastSource()),
        "priority-backfill": lambda sim: (PriorityBackfillPolicy(), NoForecastSource()),
        "reactive": lambda sim: (ReactivePolicy(), NoForecastSource()),
        "kueue-hpa": lambda sim: (KueueHpaPolicy(), NoForecastSource()),
    }


def planner_factories() -> dict[str, PolicyFactory]:
    return {
        "ebbtide": lambda sim: (PlannerPolicy(name="ebbtide"), BankForecastSource(horizon_s=86400)),
        "ebbtide-naive": lambda sim: (
            PlannerPolicy(name="ebbtide-naive"),
            SeasonalNaiveSource(horizon_steps(sim)),
        ),
        "ebbtide-true-demand": lambda sim: (
            PlannerPolicy(name="ebbtide-true-demand"),
            OracleSource(sim, horizon_steps(sim)),
        ),
    }


def register_policy(name: str, factory: PolicyFactory) -> None:
    _EXTRA[name] = factory


def available_policies() -> dict[str, PolicyFactory]:
    """Every runnable policy, baselines first (fifo first: the reference of the table)."""
    return {**baseline_factories(), **planner_factories(), **_EXTRA}
