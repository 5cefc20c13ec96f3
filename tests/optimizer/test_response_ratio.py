"""Among jobs of equal weight the plan ranks by response ratio (optimizer/parameters.py
``finish_share``): the sooner done goes first, but a job that has waited goes before newer ones that
would finish sooner, so a stream of short jobs cannot hold a long one back forever. Found on a
held-out batch-only cluster, where a 16-GPU weight-4 gang submitted at hour 18 never started in the
48-hour window while three gangs of its weight submitted after it, each shorter, ran (with the
response ratio it starts at hour 41)."""

from __future__ import annotations

import pytest
from optimizer_cases import NOW, job, pool, state

from optimizer.planner import PlannerPolicy
from schemas import JobAction


def _actions(old_waited_min: float, new_weight: float = 1.0) -> dict[str, JobAction]:
    """One 4-GPU pool; two waiting 4-GPU jobs: 'old' with 6 hours of work, submitted
    ``old_waited_min`` ago, and 'new' with 2 hours, submitted 10 minutes ago."""
    jobs = [
        job("old", 4, hours=6.0, submitted_min_ago=old_waited_min),
        job("new", 4, hours=2.0, weight=new_weight, submitted_min_ago=10.0),
    ]
    decision = PlannerPolicy().decide(state([pool("a", 4)], jobs, []), {}, NOW)
    return {d.job_id: d.action for d in decision.allocation.jobs}


def test_among_new_jobs_the_sooner_done_goes_first() -> None:
    assert _actions(old_waited_min=20.0) == {"old": JobAction.HOLD, "new": JobAction.RUN}


@pytest.mark.parametrize("old_waited_min", [12 * 60.0, 30 * 60.0])
def test_a_job_that_has_waited_goes_before_a_newer_shorter_one(old_waited_min: float) -> None:
    """Response ratios (waited + 1 h) / (waited + 1 h + work left): 'old' after 12 hours 13/19,
    'new' 1/3."""
    assert _actions(old_waited_min) == {"old": JobAction.RUN, "new": JobAction.HOLD}


def test_waiting_never_outranks_a_heavier_weight() -> None:
    """The bonus stays under PlannerConfig.finish_bonus (5%): two days of waiting do not outrank
    twice the weight."""
    assert _actions(old_waited_min=48 * 60.0, new_weight=2.0) == {"old": JobAction.HOLD, "new": JobAction.RUN}
