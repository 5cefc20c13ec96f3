"""One broker of a three-node cluster SIGKILLed mid-run (markers ``kafka``, ``slow``; its own cluster).

Three combined broker-controller Apache Kafka nodes on loopback (one KRaft quorum), every topic
(the loop's, the group offsets and the transaction log) replicated on all three with
``min.insync.replicas`` 2, so ``acks=all`` writes need two of them. Mid-step, the node leading
the Allocations topic is SIGKILLed and stays down: leadership moves, the quorum keeps its
majority, and the loop goes on: every step has exactly one committed Allocation and the actuator
applies each once.
"""

from __future__ import annotations

import pytest
from loop_harness import (
    allocations,
    assert_each_step_once,
    new_loop,
    sigkill_broker,
    step_to,
    steps,
    wait_applied,
)

from schemas.topics import ALLOCATIONS, CATALOGUE
from streams.topics_admin import (
    ReplicationError,
    TopicDurability,
    admin_client,
    ensure_topics,
    prefixed,
    topic_configs,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
def kafka_cluster(tmp_path):
    from streams.broker_kafka import start_local_kafka_cluster

    nodes = start_local_kafka_cluster("cluster-test", data_dir=tmp_path / "cluster", die_with_parent=True)
    try:
        yield nodes
    finally:
        for node in nodes:  # killed too: a clean stop of the last node would wait for a quorum
            if node.pid is not None:
                sigkill_broker(node)


def _leader_of(bootstrap: str, topic: str) -> int:
    metadata = admin_client(bootstrap).list_topics(topic, timeout=10)
    partitions = metadata.topics[topic].partitions
    assert all(len(p.replicas) == 3 for p in partitions.values())  # replicated on every node
    return partitions[0].leader


def test_a_broker_sigkilled_in_a_three_node_cluster_loses_nothing(kafka_cluster, topic_prefix):
    bootstrap = ",".join(node.bootstrap for node in kafka_cluster)
    ensure_topics(
        bootstrap,
        [prefixed(t, topic_prefix) for t in CATALOGUE],
        durability=TopicDurability(3, 2),
        tolerate_config_errors=True,
    )
    assert topic_configs(bootstrap, topic_prefix + ALLOCATIONS.name)["min.insync.replicas"] == "2"
    with pytest.raises(
        ReplicationError, match="replication factor 4 needs at least 4 brokers; the cluster has 3"
    ):
        ensure_topics(bootstrap, [prefixed(ALLOCATIONS, topic_prefix)], durability=TopicDurability(4, 2))
    states = steps(4)
    loop = new_loop(bootstrap, topic_prefix, states[0], transactions=True, replicas=3)
    try:
        loop.start_all()
        for i in (0, 1):
            step_to(loop, states[i - 1] if i else None, states[i])
            wait_applied(loop, states[i])
        leader = _leader_of(bootstrap, topic_prefix + ALLOCATIONS.name)
        step_to(loop, states[1], states[2])  # the boundary passes: the optimizer plans step 2...
        sigkill_broker(kafka_cluster[leader - 1])  # ...and the node leading its output dies
        wait_applied(loop, states[2])
        step_to(loop, states[2], states[3])  # and the loop goes on with two nodes
        wait_applied(loop, states[3])
        committed = allocations(loop)
    finally:
        loop.stop_all()
    assert_each_step_once(loop, states, committed)
