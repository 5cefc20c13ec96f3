"""The whole loop on the in-memory bus: a simulated cluster, the real planner, no broker, seconds."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from bus_parts import BusLoop, build_loop, feed

from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from schemas import (
    ActuationResult,
    Allocation,
    ClusterState,
    DeadLetter,
    DemandForecast,
    HorizonPlan,
    JobAction,
    JobEvent,
    JobEventKind,
)
from schemas.codec import encode
from schemas.topics import (
    ACTUATIONS,
    ALLOCATIONS,
    CLUSTER_STATE,
    DEAD_LETTERS,
    FORECASTS,
    GPU_SAMPLES,
    JOB_EVENTS,
    PLANS,
)
from simulator.cluster import Simulator
from simulator.scenario import Scenario
from streams.memory_bus import MemoryBus, NotQuiescent

STEPS = 8
BROKEN_JSON = b'{"cluster": "bus", "job_id": "x", "kind": '


def _job(job_id: str, at_hour: float, gpus: int, hours: float) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "at_hour": at_hour,
        "gpus": gpus,
        "true_gpu_hours": hours * gpus,
        "estimated_gpu_hours": hours * gpus,
    }


def _scenario() -> Scenario:
    """8 GPUs (2 nodes x 4), one flat 2-GPU service, three jobs that all fit and finish in 2 hours."""
    return Scenario.model_validate(
        {
            "name": "bus",
            "cluster": "bus",
            "seed": 3,
            "window_hours": 2,
            "quick_window_hours": 2,
            "pools": [{"name": "p", "gpu_type": "A100", "nodes": 2, "gpus_per_node": 4}],
            "services": [
                {
                    "spec": {"service": "svc", "startup_s": 60},
                    "demand": {"kind": "flat", "peak_gpus": 2, "noise_frac": 0},
                }
            ],
            "workload": {
                "explicit": [
                    _job("short", 0.0, 1, 0.5),
                    _job("gang", 0.0, 4, 0.5),
                    _job("late", 0.5, 2, 0.5),
                ]
            },
        }
    )


def _run(loop: BusLoop, sim: Simulator, steps: int, inject_at: int | None = None) -> list[ClusterState]:
    """Lockstep: the cluster's events of a step go on the bus, the clock moves to the step's
    boundary, the bus runs until quiet (state -> forecaster -> optimizer -> actuator -> simulator),
    then the simulator integrates the step."""
    previous: ClusterState | None = None
    truth: list[ClusterState] = []
    for index in range(steps):
        current = sim.snapshot(sim.clock.now())
        feed(loop.bus, previous, current)
        if index == inject_at:
            loop.bus.publish_raw(JOB_EVENTS, BROKEN_JSON, b"x")
            valid_json_wrong_event = encode(
                JobEvent(cluster=current.cluster, job_id="y", kind=JobEventKind.FINISHED, time=current.as_of)
            ).replace(b'"finished"', b'"exploded"')
            loop.bus.publish_raw(JOB_EVENTS, valid_json_wrong_event, b"y")
            loop.bus.publish_raw(GPU_SAMPLES, b"not json at all", b"n/g")  # the bulk-folded hot topic
        loop.clock.when = current.as_of
        loop.bus.run()
        truth.append(current)
        sim.advance()
        previous = current
    return truth


@dataclass
class Ran:
    loop: BusLoop
    sim: Simulator
    truth: list[ClusterState]  # the simulator's snapshot of each step
    allocations: list[Allocation]  # on the bus after the steps
    actuations: list[ActuationResult]  # likewise
    replayed: Allocation  # then delivered again
    replay_answers: list[ActuationResult]  # what the actuator said to the replay


@pytest.fixture(scope="module")
def ran() -> Ran:
    sim = Simulator(_scenario(), quick=True)
    policy = PlannerPolicy(name="ebbtide", config=PlannerConfig(time_limit_s=0.5))
    loop = build_loop(sim, policy, horizon_steps=policy.config.horizon_steps)
    truth = _run(loop, sim, STEPS, inject_at=3)
    allocations = [a for a in loop.bus.read(ALLOCATIONS) if isinstance(a, Allocation)]
    actuations = [r for r in loop.bus.read(ACTUATIONS) if isinstance(r, ActuationResult)]
    # The same Allocation delivered again (an at-least-once replay): answered, not applied.
    replayed = allocations[2]
    loop.bus.publish(ALLOCATIONS, [replayed])
    loop.bus.run()
    answers = [r for r in loop.bus.read(ACTUATIONS)[len(actuations) :] if isinstance(r, ActuationResult)]
    return Ran(loop, sim, truth, allocations, actuations, replayed, answers)


def test_one_allocation_per_step_each_the_step_zero_of_its_plan(ran: Ran) -> None:
    loop, truth, allocations = ran.loop, ran.truth, ran.allocations
    plans = [p for p in loop.bus.read(PLANS) if isinstance(p, HorizonPlan)]
    assert [a.issued_at for a in allocations] == [s.as_of for s in truth]
    assert [p.plan_id for p in plans] == [a.plan_id for a in allocations]
    assert len({a.plan_id for a in allocations}) == STEPS
    assert all(a.policy == "ebbtide" and not a.fallback for a in allocations)
    states = loop.bus.read(CLUSTER_STATE)
    assert [s.as_of for s in states if isinstance(s, ClusterState)] == [s.as_of for s in truth]
    forecasts = [f for f in loop.bus.read(FORECASTS) if isinstance(f, DemandForecast)]
    assert [f.issued_at for f in forecasts] == [s.as_of for s in truth]  # one service, one per step
    assert not loop.optimizer.pending()  # every state it was handed is planned


def test_jobs_start_and_finish_through_the_loop(ran: Ran) -> None:
    loop, sim = ran.loop, ran.sim
    assert set(sim.finished) == {"short", "gang", "late"}
    kinds: dict[str, set[JobEventKind]] = {}
    for event in loop.bus.read(JOB_EVENTS, strict=False):
        assert isinstance(event, JobEvent)
        kinds.setdefault(event.job_id, set()).add(event.kind)
    for job_id in ("short", "gang", "late"):
        assert {JobEventKind.SUBMITTED, JobEventKind.STARTED, JobEventKind.FINISHED} <= kinds[job_id]
    run_decisions = {j.job_id for a in ran.allocations for j in a.jobs if j.action == JobAction.RUN}
    assert run_decisions == {"short", "gang", "late"}  # the planner's decisions started them
    assert sim.ledger.served_gpu_s > 0


def test_each_allocation_is_applied_once_and_a_replayed_one_is_not_applied_again(ran: Ran) -> None:
    loop, allocations = ran.loop, ran.allocations
    assert [c.plan_id for c in loop.backend.calls] == [a.plan_id for a in allocations]  # the replay: none
    assert loop.actuator.replays == 1
    handed = Counter((plan_id, target) for plan_id, target, _ in loop.backend.handed)
    assert handed and max(handed.values()) == 1  # no target of any plan reached the backend twice
    published = Counter((r.plan_id, r.target) for r in ran.actuations)
    assert published == handed  # every result the backend gave is on the actuations topic, once
    assert {r.plan_id for r in ran.actuations} == {a.plan_id for a in allocations}
    assert ran.replay_answers and {r.outcome for r in ran.replay_answers} == {"already-applied"}
    assert {r.plan_id for r in ran.replay_answers} == {ran.replayed.plan_id}
    replayed_targets = {r.target for r in ran.actuations if r.plan_id == ran.replayed.plan_id}
    assert {r.target for r in ran.replay_answers} == replayed_targets


def test_malformed_records_land_on_the_dead_letter_topic_and_the_loop_goes_on(ran: Ran) -> None:
    loop = ran.loop
    letters = [d for d in loop.bus.read(DEAD_LETTERS) if isinstance(d, DeadLetter)]
    assert [(d.source_topic, d.consumer) for d in letters] == [
        (JOB_EVENTS.name, "state"),
        (JOB_EVENTS.name, "state"),
        (GPU_SAMPLES.name, "state"),
    ]
    broken, wrong_kind, hot = letters
    assert base64.b64decode(broken.raw_b64) == BROKEN_JSON and base64.b64decode(broken.key_b64 or "") == b"x"
    assert broken.error.startswith("JobEvent: <record>")
    assert wrong_kind.error.startswith("JobEvent: kind:")
    assert b'"exploded"' in base64.b64decode(wrong_kind.raw_b64)
    assert hot.error.startswith("GpuSample:")
    assert loop.bus.stats["state"].dead_lettered == 3
    assert all(s.dead_lettered == 0 for name, s in loop.bus.stats.items() if name != "state")
    # Injected at step 3: the steps after it were still planned and applied.
    after = [s.as_of for s in ran.truth[4:]]
    assert after and [a.issued_at for a in ran.allocations[4:]] == after
    assert {c.issued_at for c in loop.backend.calls} >= set(after)


def test_a_service_rejecting_a_valid_event_dead_letters_it_with_the_reason() -> None:
    class Picky:
        name = "picky"
        inputs = (JOB_EVENTS,)
        seen: list[str] = []

        def on_event(self, source, event):  # type: ignore[no-untyped-def]
            if event.job_id == "bad":
                raise ValueError("job id 'bad' is not allowed here")
            self.seen.append(event.job_id)
            return ()

        def on_idle(self):  # type: ignore[no-untyped-def]
            return ()

        def pending(self) -> bool:
            return False

    picky = Picky()
    bus = MemoryBus([picky])
    when = _scenario().start
    bus.publish(
        JOB_EVENTS,
        [JobEvent(cluster="c", job_id=j, kind=JobEventKind.FINISHED, time=when) for j in ("a", "bad", "b")],
    )
    assert bus.run() == 1
    assert picky.seen == ["a", "b"]
    [letter] = bus.read(DEAD_LETTERS)
    assert isinstance(letter, DeadLetter) and letter.offset == 1
    assert letter.error == "JobEvent: job id 'bad' is not allowed here"


def test_a_loop_that_never_quiets_is_reported() -> None:
    class Chatty:
        name = "chatty"
        inputs = ()

        def on_event(self, source, event):  # type: ignore[no-untyped-def]
            return ()

        def on_idle(self):  # type: ignore[no-untyped-def]
            return [
                (
                    JOB_EVENTS,
                    JobEvent(cluster="c", job_id="j", kind=JobEventKind.FINISHED, time=_scenario().start),
                )
            ]

        def pending(self) -> bool:
            return False

    with pytest.raises(NotQuiescent):
        MemoryBus([Chatty()]).run(max_rounds=5)
