"""The soak benchmark's services (``ebbtide bench-soak``): the demo's services on the bench's broker.

Settings as ``ebbtide run`` loads them (environment EBBTIDE_* included), pointed at the given
broker and topic prefix, with the simulator's cluster, step and history; the demo's policy.
"""

from __future__ import annotations

from ebbtide.demo import _policy
from ebbtide.demo_wiring import demo_services, simulated_settings
from ebbtide.settings import load_settings
from simulator.cluster import Simulator
from streams.services.demo_driver import DemoServices


def soak_services(sim: Simulator, bootstrap: str, prefix: str) -> DemoServices:
    settings = simulated_settings(
        load_settings(None), sim, bootstrap=bootstrap, prefix=prefix, group_prefix=prefix, local_broker=True
    )
    policy, _ = _policy()
    return demo_services(sim, settings, policy)
