"""A closed-loop generator (``population``): a new job for each one that finishes, so a soak holds
its number of jobs steadily; and the open-loop workload it shares its drawing with is unchanged."""

from __future__ import annotations

import pytest
from sim_helpers import tiny_scenario

from simulator.cluster import Simulator
from simulator.registry import baseline_factories
from simulator.runner import run_scenario
from simulator.scenario import JobGeneratorSpec
from simulator.workload import SimJob


def _generator(**kw: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "gangs": {1: 1.0, 2: 1.0},
        "hours_median": 0.3,
        "hours_sigma": 0.3,
        "classes": [{"name": "standard", "weight": 1, "share": 1}],
    }
    entry.update(kw)
    return entry


def _to_admit(sim: Simulator) -> list[SimJob]:
    """Jobs that arrived during the last step: the next snapshot admits them."""
    return [j for j in sim.arrivals if j.spec.job_id not in sim.jobs and j.spec.job_id not in sim.finished]


def test_a_closed_loop_keeps_its_population_in_the_system() -> None:
    scenario = tiny_scenario(window_hours=6, workload={"generators": [_generator(population=5)]})
    metrics, sim = run_scenario(scenario, "fifo", baseline_factories()["fifo"])
    to_admit = [
        j for j in sim.arrivals if j.spec.job_id not in sim.jobs and j.spec.job_id not in sim.finished
    ]
    in_system = len(sim.jobs) + len(to_admit)
    assert len(sim.finished) >= 10, "short jobs on 8 GPUs for 6 hours: many finish"
    assert in_system == 5, "every finished job was replaced by one new job"
    assert len(sim.arrivals) == len(sim.finished) + in_system
    assert all(j.arrival_s > sim.now_s - sim.step_s for j in to_admit), "admitted at the next step"
    assert metrics.jobs_arrived == len(sim.arrivals)
    late = [j for j in sim.arrivals if j.arrival_s > 0]
    assert late and all(
        any(abs(f.finished_at_s - j.arrival_s) < 1e-6 for f in sim.finished.values() if f.finished_at_s)
        for j in late
    ), "each later job arrives when another one finishes"


def test_forget_finished_drops_the_past_and_keeps_the_loop_going() -> None:
    sim = Simulator(tiny_scenario(window_hours=6, workload={"generators": [_generator(population=3)]}))
    policy = baseline_factories()["fifo"](sim)[0]
    finished_after = 0
    for step in range(sim.steps):
        now = sim.clock.now()
        sim.apply(policy.decide(sim.snapshot(now), {}, now).allocation)
        sim.advance()
        finished_after += len(sim.finished)
        if step == sim.steps // 2:
            sim.forget_finished()
            finished_after = 0
            assert not sim.finished
            assert sim.arrivals == _to_admit(sim), "only the arrivals still to admit are kept"
    assert finished_after > 0, "jobs go on finishing after the past is dropped"
    assert len(sim.jobs) + len(_to_admit(sim)) == 3


def test_the_open_loop_workload_is_drawn_as_before() -> None:
    scenario = tiny_scenario(workload={"generators": [_generator(arrivals_per_hour=4, initial_backlog=2)]})
    first = [(j.spec.job_id, j.arrival_s, j.true_gpu_s) for j in Simulator(scenario).arrivals]
    again = [(j.spec.job_id, j.arrival_s, j.true_gpu_s) for j in Simulator(scenario).arrivals]
    assert first == again
    assert [a for _, a, _ in first[:2]] == [0.0, 0.0]
    assert all(j.startswith("job0-") for j, _, _ in first)


def test_a_closed_loop_takes_no_open_arrivals() -> None:
    with pytest.raises(ValueError, match="population: a closed loop takes no arrivals_per_hour"):
        JobGeneratorSpec.model_validate(_generator(population=5, arrivals_per_hour=1))


def test_the_soak_scenario_holds_its_jobs_steadily() -> None:
    from bench.soak import soak_scenario

    scenario = soak_scenario(64, 1)
    _, sim = run_scenario(scenario, "fifo", baseline_factories()["fifo"])
    assert len(sim.finished) > 20
    assert len(sim.jobs) + len(_to_admit(sim)) == 64
