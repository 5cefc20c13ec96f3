"""Round (pipeline stage 5): the solved horizon model read back as relaxed shares per job, pool
and block, then rounded to whole replicas and gangs (optimizer/rounding.py, optimizer/step0.py).

Step 0 is what gets committed; the other blocks are the plan the next decisions start from. Pure.
"""

from __future__ import annotations

import numpy as np

from optimizer.config import PlannerConfig
from optimizer.formulation import ModelStructure
from optimizer.inputs import PlanInputs
from optimizer.rounding import RoundedPlan, round_jobs, round_services, services_free
from optimizer.stop_pays import StopRules


def relaxed_shares(
    structure: ModelStructure, inputs: PlanInputs, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(replicas [S,P,B], gpus [S,P,B], share0 [J,P], share [J,B]) from a column vector."""
    n_svc, n_pools, n_jobs, n_blocks = inputs.n_services, inputs.n_pools, inputs.n_jobs, inputs.blocks.count
    gang = np.maximum(inputs.job_gang, 1.0)
    share0 = np.zeros((n_jobs, n_pools))
    pair_job, pair_pool = structure.y0_pairs.T
    share0[pair_job, pair_pool] = x[structure.cols["y0"]] / gang[pair_job]
    share = np.zeros((n_jobs, n_blocks))
    share[:, 0] = share0.sum(axis=1)
    if n_blocks > 1 and n_jobs:
        np.divide(x[structure.cols["yb"]], gang[:, None], out=share[:, 1:])
    replicas = np.zeros((n_svc, n_pools, n_blocks))
    sp_svc, sp_pool = structure.sp_pairs.T
    replicas[sp_svc, sp_pool] = x[structure.cols["R"]]
    # dedicated pairs have no G column: their GPUs are gpr x replicas (GPUs per replica are
    # whole and positive, so pairs without columns stay 0)
    gpus = replicas * inputs.svc_gpr[:, None, None]
    shared = structure.sp_shared
    gpus[sp_svc[shared], sp_pool[shared]] = x[structure.cols["G"]]
    # (clipped in place: both are new arrays)
    return replicas, gpus, share0.clip(0.0, 1.0, out=share0), share.clip(0.0, 1.0, out=share)


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
        running = (run_pool >= 0).nonzero()[0]
        running_pool = run_pool[running]
        kept_share = share0[running, running_pool]
        kept = (kept_share >= config.run_threshold) | ~inputs.job_preemptible[running]
        reserved[:, 0] = np.bincount(
            running_pool[kept], weights=inputs.job_gang[running][kept], minlength=inputs.n_pools
        )
    whole, phys = round_services(inputs, replicas, gpus, reserved)
    free = services_free(inputs, phys)
    job_pool, preempted, holds, outcome = round_jobs(
        inputs,
        free,
        share0,
        share,
        config.run_threshold,
        config.max_preemptions_per_step,
        svc_gpus0=phys[:, :, 0].sum(axis=0) if inputs.n_services else None,
        preemption_penalty_gpu_s=config.preemption_penalty_gpu_h * 3600.0,
        rules=StopRules(
            config.min_run_s,
            config.preemption_penalty_gpu_h * 3600.0,
            config.earliness,
            config.deadline_penalty,
        ),
    )
    return RoundedPlan(whole, phys, job_pool, share0, share, preempted, holds, outcome)
