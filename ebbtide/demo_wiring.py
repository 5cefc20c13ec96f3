"""The demo's services: the four stream services of ``ebbtide run``, around a simulated cluster.

The same ``build_runtime`` as production, with the simulator's clock (moved by the driver to each
step boundary) and the simulator as the actuator backend.
"""

from __future__ import annotations

from datetime import timedelta

from ebbtide.settings import Settings, SettingsError
from ebbtide.wiring import Parts, build_runtime
from loop import Policy
from simulator.cluster import Simulator
from streams.kafka_client import KafkaConnection
from streams.services.demo_driver import DemoServices, FeedClock, SimulatorBackend
from streams.state_diff import seed_of
from streams.topics_admin import ReplicationError, ensure_catalogue

SERVICE_ORDER = ("state", "forecaster", "optimizer", "actuator")


def simulated_settings(
    settings: Settings, sim: Simulator, *, bootstrap: str, prefix: str, group_prefix: str, local_broker: bool
) -> Settings:
    """``settings`` pointed at the broker and topic prefix, with the simulator's cluster, step and
    history and a day's horizon: what the services of a simulated run are built from. On a
    ``local_broker`` (embedded, one node) topics get one replica; elsewhere the settings' own."""
    update: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "topic_prefix": prefix,
        "group_prefix": group_prefix,
    }
    if local_broker:  # one plaintext node: one replica, none of the production security settings
        plain = KafkaConnection()
        update.update({name: getattr(plain, name) for name in KafkaConnection.model_fields})
        update.update(bootstrap_servers=bootstrap, replication_factor=1, min_insync_replicas=1)
    kafka = settings.kafka.model_copy(update=update)
    scenario = sim.scenario
    return settings.model_copy(
        update={
            "cluster": scenario.cluster,
            "step_s": scenario.step_s,
            "kafka": kafka,
            "state": settings.state.model_copy(update={"max_history_steps": sim.history_steps}),
            "horizon_steps": max(86400 // scenario.step_s, 1),
        }
    )


def demo_services(sim: Simulator, settings: Settings, policy: Policy) -> DemoServices:
    """Create the topics and build the services the driver runs, in their threads' order."""
    try:
        ensure_catalogue(settings.kafka, settings.kafka.topic_prefix, settings.kafka.durability())
    except ReplicationError as exc:  # the demo on your Kafka: its replication is the settings'
        raise SettingsError(
            f"setting kafka.replication_factor [EBBTIDE_KAFKA__REPLICATION_FACTOR]: {exc}"
        ) from None
    first = sim.snapshot(sim.clock.now())
    feed_clock = FeedClock(first.as_of - timedelta(seconds=first.step_s))
    backend = SimulatorBackend(sim, first.cluster)
    decision_ms: list[float] = []
    parts = Parts(
        clock=feed_clock,
        seed=seed_of(first),
        policy=policy,
        backend=backend,
        backend_name="simulator",
        replan_on_events=False,
        on_decision=lambda decision, state, seconds: decision_ms.append(seconds * 1000.0),
    )
    runtimes = {name: build_runtime(name, settings, parts) for name in SERVICE_ORDER}
    return DemoServices(runtimes=runtimes, backend=backend, feed_clock=feed_clock, decision_ms=decision_ms)
