"""The actuator service's memory stays bounded over many steps, and still answers replays.

5,000 allocations (15-minute steps: 52 simulated days), each naming fresh jobs, go through the
actuator service over the engine-backed dry run (as ``build_actuator`` makes it): what it
remembers is the plans still valid (plus ``retain_s``), the dry run keeps its latest records
and the jobs still named; a replay of a still-valid allocation is answered ``already-applied``
without the backend, one long expired and forgotten is ``skipped``, never applied again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from actuators.dryrun import DRY_RUN_KEEP, DryRunBackend
from actuators.factory import ActuatorConfig, build_actuator
from schemas import ActuationResult, Allocation, JobAction, JobDecision, ServiceDecision
from schemas.topics import ALLOCATIONS
from streams.services.actuator import ActuatorProcessor

T0 = datetime(2026, 1, 5, tzinfo=UTC)
STEP_S = 900
STEPS = 5_000


def _allocation(step: int) -> Allocation:
    issued = T0 + timedelta(seconds=step * STEP_S)
    jobs = [
        JobDecision(job_id=f"job-{step - k}", action=JobAction.RUN, pool="a100", gpus=2, reason="fits")
        for k in range(3)
        if step - k >= 0
    ]
    return Allocation(
        cluster="c1",
        plan_id=f"plan-{step}",
        policy="test",
        issued_at=issued,
        step_s=STEP_S,
        valid_until=issued + timedelta(seconds=STEP_S),
        services=[
            ServiceDecision(service="chat", pool="a100", replicas=1 + step % 3, gpus=2.0, reason="demand")
        ],
        jobs=jobs,
    )


def _outcomes(out: object) -> list[str]:
    return [event.outcome for _, event in out if isinstance(event, ActuationResult)]  # type: ignore[attr-defined]


def test_memory_stays_bounded_over_5000_allocations_and_replays_are_still_answered() -> None:
    engine = build_actuator(ActuatorConfig(), "c1", clock=lambda: T0)
    dry = engine.backend
    assert isinstance(dry, DryRunBackend)
    actuator = ActuatorProcessor(backend=engine)
    kept = int(actuator.retain_s // STEP_S) + 2  # plans still valid, or within retain_s of it
    for step in range(STEPS):
        outcomes = _outcomes(actuator.on_event(ALLOCATIONS, _allocation(step)))
        assert outcomes and "failed" not in outcomes
        assert len(actuator.plans_done) <= kept and len(actuator.expires) <= kept
        assert len(actuator.done) <= 5 * kept  # a service and up to three jobs per plan
        assert len(dry.applied) <= 2 * DRY_RUN_KEEP and len(dry.log_lines) <= 2 * DRY_RUN_KEEP
        assert len(dry.jobs) <= 3
    assert actuator.backend_calls == STEPS
    # A replay of a still-valid allocation: already applied, the backend not called again.
    latest = _allocation(STEPS - 1)
    assert set(_outcomes(actuator.on_event(ALLOCATIONS, latest))) == {"already-applied"}
    recent = _allocation(STEPS - 3)
    assert set(_outcomes(actuator.on_event(ALLOCATIONS, recent))) == {"already-applied"}
    assert actuator.backend_calls == STEPS and actuator.replays == 2
    # One long expired and forgotten: superseded, skipped, never handed to the backend again.
    assert _outcomes(actuator.on_event(ALLOCATIONS, _allocation(10))) == ["skipped"]
    assert actuator.backend_calls == STEPS and actuator.expired == 1
