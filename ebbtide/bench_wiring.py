"""The stream benchmark's services: ``ebbtide run``'s runtimes on the bench's broker and prefix.

bench/stream_bench.py measures whatever runtimes it is given; this builds them from the same
settings and wiring as production, with the bench's clock, seed cluster and policy.
"""

from __future__ import annotations

from ebbtide.settings import Settings, load_settings
from ebbtide.wiring import Parts, build_runtime
from loop import Clock, Policy
from schemas import ClusterState
from streams.services.runtime import ServiceRuntime


def bench_settings(bootstrap: str, prefix: str) -> Settings:
    return load_settings(
        cluster="bench",
        step_s=900,
        horizon_steps=8,
        metrics_enabled=False,
        kafka={
            "bootstrap_servers": bootstrap,
            "topic_prefix": prefix,
            "group_prefix": prefix,
            "batch_size": 20_000,
            "poll_timeout_s": 0.05,
        },
        optimizer={"transactions": "off", "forecast_wait_s": 0.5},
    )


def bench_runtime(
    service: str,
    bootstrap: str,
    prefix: str,
    *,
    clock: Clock,
    seed: ClusterState,
    replan_on_events: bool,
    policy: Policy | None = None,
) -> ServiceRuntime:
    parts = Parts(clock=clock, seed=seed, policy=policy, replan_on_events=replan_on_events)
    return build_runtime(service, bench_settings(bootstrap, prefix), parts)
