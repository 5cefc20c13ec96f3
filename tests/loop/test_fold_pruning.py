"""The state fold stays bounded under churn (pure, no broker): vanished GPUs' telemetry and
abandoned jobs are pruned by :meth:`streams.fold.ClusterFold.prune`, running jobs never are."""

from __future__ import annotations

from loop_factories import at, cluster, spec

from schemas import GpuSample, JobEvent, JobEventKind
from streams.fold import ClusterFold, Pruning
from streams.state_diff import seed_of


def _gpu(uuid: str, step: int) -> GpuSample:
    return GpuSample(
        cluster="c1",
        pool="a100",
        node=f"node-{uuid}",
        gpu_index=0,
        gpu_uuid=uuid,
        time=at(step),
        utilization_pct=50.0,
        memory_used_mib=1000.0,
        memory_total_mib=80_000.0,
        power_w=300.0,
    )


def _event(job_id: str, kind: JobEventKind, step: int) -> JobEvent:
    extra = {"spec": spec(job_id)} if kind == JobEventKind.SUBMITTED else {}
    pool = {"pool": "a100"} if kind == JobEventKind.STARTED else {}
    return JobEvent(cluster="c1", job_id=job_id, kind=kind, time=at(step), **extra, **pool)


def _fold() -> ClusterFold:
    pruning = Pruning(gpu_vanished_steps=4, job_abandoned_s=8 * 900)
    return ClusterFold(seed=seed_of(cluster(0)), pruning=pruning)


def test_fold_stays_bounded_over_churning_gpus_and_abandoned_jobs() -> None:
    fold = _fold()
    sizes = []
    for step in range(1, 301):
        # Every step 8 GPUs report, 2 of them new (the oldest go silent for good); 3 jobs are
        # submitted and never heard of again.
        fold.apply_gpu_samples([_gpu(f"g{step // 3 * 2 + i}", step) for i in range(8)])
        for i in range(3):
            assert fold.apply(_event(f"j{step}-{i}", JobEventKind.SUBMITTED, step))
        fold.prune(at(step))
        sizes.append((len(fold.gpu_seen["a100"]), len(fold.gpu_node["a100"]), len(fold.jobs)))
    assert max(sizes[50:]) == max(sizes[250:])  # flat, not growing
    gpus, nodes, jobs = sizes[-1]
    assert gpus == nodes <= 8 + 2 * 4
    assert jobs <= 3 * 9
    assert fold.counters.jobs_abandoned == 3 * 300 - jobs
    assert fold.counters.gpus_vanished > 0


def test_running_job_is_never_abandoned_and_a_pruned_job_is_remembered_as_gone() -> None:
    fold = _fold()
    for job_id in ("quiet-runner", "stuck-queued"):
        assert fold.apply(_event(job_id, JobEventKind.SUBMITTED, 1))
    assert fold.apply(_event("quiet-runner", JobEventKind.STARTED, 1))
    assert fold.prune(at(9)) == (0, 0)  # 8 steps: not yet
    assert fold.prune(at(10)) == (0, 1)
    assert set(fold.jobs) == {"quiet-runner"}
    late = _event("stuck-queued", JobEventKind.CANCELLED, 11)
    assert fold.unknown_reference(late) is None  # its late end is a known job's, not dead-lettered
    assert not fold.apply(late)


def test_a_pool_whose_gpus_all_vanished_shows_none_available() -> None:
    fold = _fold()
    fold.apply_gpu_samples([_gpu("g1", 1), _gpu("g2", 1)])
    assert fold.prune(at(10)) == (2, 0)
    pool = next(p for p in fold.snapshot(at(10)).pools if p.name == "a100")
    assert pool.gpus_available == 0
