"""Reading a solved horizon model back: relaxed shares per job, pool and block, then rounding.

Step 0 is what gets committed; the other blocks are the plan the next decisions start from. Pure.
"""

from __future__ import annotations

import numpy as np

from optimizer.config import PlannerConfig
from optimizer.formulation import ModelStructure
from optimizer.inputs import PlanInputs
from optimizer.rounding import RoundedPlan, round_jobs, round_services, services_free


def relaxed_shares(
    structure: ModelStructure, inputs: PlanInputs, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(replicas [S,P,B], gpus [S,P,B], share0 [J,P], share [J,B]) from a column vector."""
    n_svc, n_pools, n_jobs, n_blocks = inputs.n_services, inputs.n_pools, inputs.n_jobs, inputs.blocks.count
    gang = np.maximum(inputs.job_gang, 1.0)
    share0 = np.zeros((n_jobs, n_pools))
    pairs = structure.y0_pairs
    share0[pairs[:, 0], pairs[:, 1]] = x[structure.cols["y0"]] / gang[pairs[:, 0]]
    share = np.zeros((n_jobs, n_blocks))
    share[:, 0] = share0.sum(axis=1)
    if n_blocks > 1 and n_jobs:
        share[:, 1:] = x[structure.cols["yb"]] / gang[:, None]
    replicas = np.zeros((n_svc, n_pools, n_blocks))
    gpus = np.zeros((n_svc, n_pools, n_blocks))
    sp = structure.sp_pairs
    r_values = x[structure.cols["R"]]
    replicas[sp[:, 0], sp[:, 1]] = r_values
    # dedicated pairs have no G column: their GPUs are gpr x replicas
    shared = structure.sp_shared
    gpus[sp[:, 0], sp[:, 1]] = r_values * inputs.svc_gpr[sp[:, 0], None]
    gpus[sp[shared, 0], sp[shared, 1]] = x[structure.cols["G"]]
    return replicas, gpus, np.clip(share0, 0.0, 1.0), np.clip(share, 0.0, 1.0)


def round_relaxed(
    inputs: PlanInputs,
    config: PlannerConfig,
    replicas: np.ndarray,
    gpus: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
) -> RoundedPlan:
    reserved = np.zeros((inputs.n_pools, inputs.blocks.count))
    run_pool = inputs.job_running_pool
    if inputs.n_jobs:
        running = np.flatnonzero(run_pool >= 0)
        kept_share = share0[running, run_pool[running]]
        kept = (kept_share >= config.run_threshold) | ~inputs.job_preemptible[running]
        reserved[:, 0] = np.bincount(
            run_pool[running][kept], weights=inputs.job_gang[running][kept], minlength=inputs.n_pools
        )
    whole, phys = round_services(inputs, replicas, gpus, reserved)
    free = services_free(inputs, phys)
    job_pool, preempted, holds = round_jobs(
        inputs,
        free,
        share0,
        share,
        config.run_threshold,
        config.max_preemptions_per_step,
        svc_gpus0=phys[:, :, 0].sum(axis=0) if inputs.n_services else None,
        preemption_penalty_gpu_s=config.preemption_penalty_gpu_h * 3600.0,
    )
    return RoundedPlan(whole, phys, job_pool, share0, share, preempted, holds)


def extract_plan(
    structure: ModelStructure, inputs: PlanInputs, config: PlannerConfig, x: np.ndarray
) -> RoundedPlan:
    return round_relaxed(inputs, config, *relaxed_shares(structure, inputs, x))
