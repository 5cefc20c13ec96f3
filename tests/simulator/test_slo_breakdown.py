"""The SLO shortfall split by cause (bench/slo_breakdown.py): the parts are the simulator's own
shortfall, nothing added or lost, for a baseline and for the planner; replicas moved between pools
are told from replicas added."""

from __future__ import annotations

import pytest
from sim_helpers import allocation, tiny_scenario

from bench.slo_breakdown import CAUSES, _Traced, slo_breakdown
from schemas import ServiceDecision
from simulator.registry import available_policies
from simulator.runner import run_scenario
from simulator.scenario import builtin_scenarios, load_scenario


@pytest.mark.parametrize("policy", ["kueue-hpa", "ebbtide-naive"])
def test_the_parts_sum_to_the_simulated_shortfall(policy: str) -> None:
    scenario = load_scenario(builtin_scenarios()["bursty"])
    factory = available_policies()[policy]
    split = slo_breakdown(scenario, factory, quick=True)
    metrics, _ = run_scenario(scenario, policy, factory, quick=True)
    assert metrics.slo_shortfall > 0  # bursts no forecast sees: something to split
    assert split.shortfall == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)
    shares = split.shares()
    assert set(shares) == set(CAUSES) and all(v >= 0 for v in shares.values())
    assert sum(shares.values()) == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)
    by_service = sum(v for parts in split.by_service.values() for v in parts.values())
    assert by_service / split.demand_gpu_s == pytest.approx(metrics.slo_shortfall, rel=1e-9, abs=1e-12)


def test_replicas_moved_between_pools_are_told_from_growth() -> None:
    """A service moved from pool a to pool b in one Allocation loses its old replicas at once and
    waits for the new ones' start-up: that shortfall is ``pool-move``; growing in place while
    demand is above what is ready is ``startup-plan``."""
    pools = [
        {"name": "a", "gpu_type": "A100", "nodes": 1, "gpus_per_node": 4},
        {"name": "b", "gpu_type": "A100", "nodes": 1, "gpus_per_node": 4},
    ]
    sim = _Traced(tiny_scenario(pools=pools))
    assert sim.capacity["svc"]["a"].footprint == 2.0  # placed in the first pool at the start
    moved = [
        ServiceDecision(service="svc", pool="a", replicas=0, gpus=0, reason="t"),
        ServiceDecision(service="svc", pool="b", replicas=2, gpus=2, reason="t"),
    ]
    sim.apply(allocation(sim, services=moved))
    sim.advance()
    startup_s = sim.specs["svc"].startup_s
    assert sim.breakdown.short_gpu_s["pool-move"] == pytest.approx(2.0 * startup_s)
    assert sim.breakdown.short_gpu_s["startup-plan"] == 0.0
    stay = ServiceDecision(service="svc", pool="b", replicas=2, gpus=2, reason="t")
    sim.apply(allocation(sim, services=[stay]))
    sim.advance()  # the same replicas in the same pool: nothing moves, nothing loads
    assert sim.breakdown.short_gpu_s["pool-move"] == pytest.approx(2.0 * startup_s)
    assert sim.breakdown.shortfall == pytest.approx(2.0 * startup_s / sim.breakdown.demand_gpu_s)


def test_the_command_reads_a_scenario_file_and_names_bad_input(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``--scenario-file`` runs a workload of one's own (the held-out sets were read this way); an
    unknown name, an unknown policy or a bad file is refused with its reason, before anything runs."""
    import json

    from test_sim_bench_cli import TINY

    from bench.slo_breakdown import main

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    out = tmp_path / "split.json"
    assert main(["--scenario-file", str(path), "--policy", "kueue-hpa", "--json", str(out)]) == 0
    split = json.loads(out.read_text())["tiny-bench"]["kueue-hpa"]
    assert set(split) == {"slo_shortfall", *CAUSES}
    assert sum(split[c] for c in CAUSES) == pytest.approx(split["slo_shortfall"], rel=1e-9, abs=1e-12)
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("nodes: 2", "nodes: -1"))
    for argv, said in (
        (["--scenario", "nope"], "unknown scenario nope"),
        (["--scenario-file", str(path), "--policy", "nope"], "unknown policy nope"),
        (["--scenario-file", str(bad)], "bad.yaml"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and said in capsys.readouterr().err
