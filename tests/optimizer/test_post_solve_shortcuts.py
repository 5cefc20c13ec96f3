"""The post-solve shortcuts give exactly what the slow paths they skip give.

Later blocks of the rounding are filled at once where no job needs a choice (``_steady_blocks``);
the result must be the one-by-one rounding's, for whole and fractional GPU counts, quotas and
jobs that run out of work. Plan parts built by ``PartMaker`` and ``_plan_step`` must equal what
``fast_part`` and validation build, field order and fields set included.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from optimizer_cases import NOW, job, pool, state

from optimizer import rounding
from optimizer.config import PlannerConfig
from optimizer.inputs import PlanInputs, build_inputs
from optimizer.plan_build import PartMaker, _plan_step, fast_part
from schemas import JobAction, JobDecision, JobPlacement, PlanStep, ServiceDecision

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _inputs() -> PlanInputs:
    pools = [pool(name, 32) for name in ("a", "b", "c", "d")]
    teams = ("t0", "t1", "t2")
    jobs = [
        job(
            f"j{i}",
            (1, 2, 4, 8)[i % 4],
            weight=1.0 + i % 3,
            team=teams[i % 3],
            allowed_pools=[["a", "b"], ["c", "d"], []][i % 3],
        )
        for i in range(40)
    ]
    return build_inputs(state(pools, jobs, quotas_gpus={"t0": 40}), {}, NOW, CONFIG)


def _random_case(
    rng: np.random.Generator, base: PlanInputs, whole: bool
) -> tuple[PlanInputs, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mostly steady plans (running jobs keep running until their share ends) with, at random,
    a job that starts later, a block whose pools are tight, a binding quota, work running out."""
    n_jobs, n_pools, n_blocks = base.n_jobs, base.n_pools, base.blocks.count
    job_pool = np.full((n_jobs, n_blocks), -1, dtype=np.int64)
    running = rng.random(n_jobs) < 0.7
    job_pool[running, 0] = rng.integers(0, n_pools, int(running.sum()))
    ends = rng.integers(1, n_blocks + 1, n_jobs)
    share = np.where(
        np.arange(n_blocks)[None, :] < ends[:, None], rng.uniform(0.2, 1.0, (n_jobs, n_blocks)), 0.0
    )
    share[~running] = 0.0
    for j in rng.choice(n_jobs, size=rng.integers(0, 3), replace=False):  # starts later
        share[j, rng.integers(1, n_blocks) :] = rng.uniform(0.2, 1.0)
    free = rng.integers(60, 200, size=(n_pools, n_blocks)).astype(float)
    if rng.random() < 0.4:  # one block where the pools are tight
        free[:, rng.integers(1, n_blocks)] = rng.integers(0, 30, n_pools)
    if not whole:
        free += rng.choice([0.0, 0.5, 1e-7], size=free.shape, p=[0.9, 0.05, 0.05])
    remaining = base.job_gang * base.step_s * rng.integers(-1, 3 * n_blocks, n_jobs)
    quota = rng.choice([np.inf, np.inf, 30.0, 80.0], size=base.team_quota.size)
    return replace(base, team_quota=quota), free, share, job_pool, remaining


@pytest.mark.parametrize("whole", [True, False])
def test_steady_later_blocks_match_one_by_one_rounding(whole: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    steady_counts: list[int] = []
    steady_blocks = rounding._steady_blocks

    def counted(*args: Any) -> tuple[int, np.ndarray]:
        found = steady_blocks(*args)
        steady_counts.append(found[0])
        return found

    monkeypatch.setattr(rounding, "_steady_blocks", counted)
    rng = np.random.default_rng(7)
    base = _inputs()
    for _ in range(300):
        inputs, free, share, job_pool, remaining = _random_case(rng, base, whole)
        fast, slow = job_pool.copy(), job_pool.copy()
        rounding._round_later_blocks(inputs, free, share, fast, remaining.copy(), shortcut=True)
        rounding._round_later_blocks(inputs, free, share, slow, remaining.copy(), shortcut=False)
        np.testing.assert_array_equal(fast, slow)
    later = base.blocks.count - 1
    if whole:  # every block filled at once, none, and a part then one by one: all compared
        assert {0, later} <= set(steady_counts) and any(0 < k < later for k in steady_counts)
    else:  # fractional GPUs: the one-by-one rounding decides
        assert steady_counts.count(0) > 250


def test_part_makers_build_what_fast_part_and_validation_build() -> None:
    make = PartMaker(JobDecision, "job_id", "action", "pool", "gpus", "reason")
    made = make("j1", JobAction.RUN, "a", 4, "run: because")
    slow = fast_part(JobDecision, job_id="j1", action=JobAction.RUN, pool="a", gpus=4, reason="run: because")
    checked = JobDecision(job_id="j1", action=JobAction.RUN, pool="a", gpus=4, reason="run: because")
    assert made == slow == checked
    assert list(made.__dict__) == list(slow.__dict__)
    assert made.__pydantic_fields_set__ == slow.__pydantic_fields_set__ == checked.model_fields_set
    assert repr(made) == repr(slow)

    service = PartMaker(ServiceDecision, "service", "pool", "replicas", "gpus", "reason")
    built = service("chat", "a", 2, 2.0, "covers")
    assert built == ServiceDecision(service="chat", pool="a", replicas=2, gpus=2.0, reason="covers")

    placement = fast_part(JobPlacement, job_id="j1", pool="a", gpus=4)
    step = _plan_step(3, NOW, [], [placement])
    assert step == PlanStep(index=3, start=NOW, services=[], jobs=[placement])
    assert list(step.__dict__) == list(PlanStep.model_fields)
    assert step.__pydantic_fields_set__ == set(PlanStep.model_fields)
    assert repr(step) == repr(fast_part(PlanStep, index=3, start=NOW, services=[], jobs=[placement]))


def test_part_maker_refuses_fields_it_cannot_lay_out() -> None:
    with pytest.raises(ValueError, match="PlanStep"):
        PartMaker(PlanStep, "index", "start")  # its lists come from default factories
    with pytest.raises(ValueError, match="JobDecision"):
        PartMaker(JobDecision, "job_id", "colour")
