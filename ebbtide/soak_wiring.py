"""The soak benchmark's services (``ebbtide bench-soak``): the demo's services on the bench's broker.

Settings as ``ebbtide run`` loads them (environment EBBTIDE_* included), pointed at the given
broker and topic prefix, with the simulator's cluster, step and history; the demo's policy.
"""

from __future__ import annotations

from ebbtide.demo import _policy
from ebbtide.demo_wiring import demo_services
from ebbtide.settings import load_settings
from simulator.cluster import Simulator
from streams.services.demo_driver import DemoServices


def soak_services(sim: Simulator, bootstrap: str, prefix: str) -> DemoServices:
    settings = load_settings(None)
    kafka = settings.kafka.model_copy(
        update={"bootstrap_servers": bootstrap, "topic_prefix": prefix, "group_prefix": prefix}
    )
    scenario = sim.scenario
    run_settings = settings.model_copy(
        update={
            "cluster": scenario.cluster,
            "step_s": scenario.step_s,
            "kafka": kafka,
            "state": settings.state.model_copy(update={"max_history_steps": sim.history_steps}),
            "horizon_steps": max(86400 // scenario.step_s, 1),
        }
    )
    policy, _ = _policy()
    return demo_services(sim, run_settings, policy)
