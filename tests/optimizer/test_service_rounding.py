"""Rounding the relaxed plan's replicas to whole ones (optimizer/rounding.py, ``round_services``)
beside the running jobs the plan keeps: only the rounding up gives way to those jobs, never the
relaxed plan's whole replicas nor a service's minimum; where those do not fit beside the kept jobs,
the jobs give way in step 0's placement (a kept job is placed only where its pool has room left).

Found on a holdout workload (a business-hours API ramping up in the morning, a pool full of
batch): the relaxed plan gave two services 30.66 and 1.53 replicas, the jobs it kept held 132 of
160 GPUs, and the rounding cut the services to 28 and 0 replicas, under the second one's minimum,
so the guard refused the plan and the fallback published instead stopped a weight-3 64-GPU gang.
"""

from __future__ import annotations

import numpy as np
from optimizer_cases import NOW, forecast, job, pool, service, state

from optimizer.config import PlannerConfig
from optimizer.extract import round_relaxed
from optimizer.inputs import PlanInputs, build_inputs
from optimizer.rounding import round_services

CONFIG = PlannerConfig()


def _inputs() -> PlanInputs:
    """A 16-GPU pool: api (4 replicas) and search (1, its minimum), an 8- and a 4-GPU job running."""
    cluster = state(
        [pool("a", 16)],
        jobs=[job("wide", 8, running_in="a"), job("narrow", 4, running_in="a")],
        services=[
            service("api", replicas={"a": 4}, min_replicas=1),
            service("search", replicas={"a": 1}, min_replicas=1),
        ],
    )
    curves = {"api": forecast("api", [4.6] * 96), "search": forecast("search", [1.5] * 96)}
    return build_inputs(cluster, curves, NOW, CONFIG)


def _relaxed(inputs: PlanInputs, api: float, search: float) -> tuple[np.ndarray, np.ndarray]:
    replicas = np.zeros((inputs.n_services, inputs.n_pools, inputs.blocks.count))
    replicas[inputs.service_names.index("api")] = api
    replicas[inputs.service_names.index("search")] = search
    return replicas, replicas.copy()


def test_services_keep_the_relaxed_plans_whole_replicas_beside_kept_jobs() -> None:
    inputs = _inputs()
    replicas, gpus = _relaxed(inputs, 4.66, 1.53)
    kept = np.zeros((inputs.n_pools, inputs.blocks.count))
    kept[:, 0] = 12.0  # both jobs kept: 4 GPUs left beside them
    whole, phys = round_services(inputs, replicas, gpus, kept)
    api, search = inputs.service_names.index("api"), inputs.service_names.index("search")
    # the rounding up (5 and 2) gives way; the whole replicas (4 and 1) do not
    assert whole[api, 0, 0] == 4 and whole[search, 0, 0] == 1
    assert phys[:, 0, 0].sum() == 5.0
    # where there is room, every replica is rounded up
    assert whole[:, 0, 1:].tolist() == [[5] * (inputs.blocks.count - 1), [2] * (inputs.blocks.count - 1)]


def test_beyond_the_pools_gpus_the_replicas_give_way_too() -> None:
    inputs = _inputs()
    replicas, gpus = _relaxed(inputs, 15.5, 1.5)  # 15 + 1 whole replicas, 18 rounded up, in 16 GPUs
    whole, phys = round_services(inputs, replicas, gpus, np.zeros((inputs.n_pools, inputs.blocks.count)))
    assert (phys.sum(axis=0) <= inputs.avail_blocks() + 1e-9).all()
    assert whole[:, 0, 0].sum() == 16


def test_a_kept_job_gives_way_to_the_services_whole_replicas_in_step_0() -> None:
    inputs = _inputs()
    replicas, gpus = _relaxed(inputs, 4.66, 1.53)
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    share0[:, 0] = 1.0  # the relaxed plan keeps both jobs
    share = np.ones((inputs.n_jobs, inputs.blocks.count))
    rounded = round_relaxed(inputs, CONFIG, replicas, gpus, share0, share)
    assert rounded.svc_replicas[:, 0, 0].tolist() == [4, 1]
    jobs_gpus = float(inputs.job_gang[rounded.job_pool[:, 0] >= 0].sum())
    assert jobs_gpus + rounded.svc_gpus[:, 0, 0].sum() <= 16.0
    assert rounded.preempted.sum() == 1  # one of the two kept jobs gives way to the services
