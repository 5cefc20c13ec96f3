"""Kafka security against a real Apache Kafka with SASL_SSL (SCRAM-SHA-512), mTLS and ACLs.

The broker (tests/kafka/secure_kafka.py) is started once for this module with certificates and
an admin SCRAM user made here; the tests create one SCRAM user per client of the loop with
``alter_user_scram_credentials``, the catalogue's topics under a per-test prefix, and the ACLs
of streams.access (the one map of who reads and writes what). They check that an unauthenticated
or wrongly authenticated client is refused, that each principal reads and writes exactly its
own topics, that a principal that may not write allocations cannot feed the real actuator (and
``ebbtide status`` as the inspect principal sees the step), that only the optimizer may hold its
transactional id, and that a client certificate authenticates its principal over mTLS.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secure_kafka import SecureKafka, start_secure_kafka

from actuators.dryrun import DryRunBackend
from actuators.engine import ActuationEngine
from ebbtide.settings import load_settings
from ebbtide.wiring import Parts, build_runtime
from schemas import Allocation
from schemas.topics import ALLOCATIONS, CATALOGUE, GPU_SAMPLES
from streams.access import ACCESS, acl_grants, apply_acls, default_principals
from streams.broker import answers_metadata
from streams.kafka_client import KafkaConnection, client_config
from streams.producer import DeliveryError, EventProducer
from streams.topics_admin import admin_client, prefixed

pytestmark = [pytest.mark.kafka, pytest.mark.security]


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    broker = start_secure_kafka(tmp_path_factory.mktemp("secure-kafka"))
    try:
        yield broker
    finally:
        broker.handle.stop()


@pytest.fixture(scope="module")
def users(secure_kafka: SecureKafka) -> dict[str, KafkaConnection]:
    """A SCRAM-SHA-512 user per client (``ebbtide-<service>``) and one with no ACL at all."""
    names = {a.service: f"ebbtide-{a.service}" for a in ACCESS} | {"nobody": "ebbtide-nobody"}
    files = {service: secure_kafka.password_file(user) for service, user in names.items()}
    upserts = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
            files[s].read_text().strip().encode(),
        )
        for s, user in names.items()
    ]
    admin = admin_client(secure_kafka.admin)  # held until the answers come
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
    connections = {s: secure_kafka.scram(user, files[s]) for s, user in names.items()}
    deadline = time.monotonic() + 30  # credentials reach the broker through the metadata log
    while not answers_metadata(connections["nobody"], timeout_s=2.0):
        assert time.monotonic() < deadline, "the new SCRAM users never authenticated"
    return connections


@pytest.fixture
def secured_topics(secure_kafka: SecureKafka, users: dict[str, KafkaConnection], topic_prefix: str) -> str:
    """The catalogue under this test's prefix and every client's ACLs, made as an operator would:
    ``ebbtide kafka topics`` and ``ebbtide kafka acls --apply`` with the admin's settings."""
    from typer.testing import CliRunner

    from ebbtide.cli import _register, app

    _register()
    admin = secure_kafka.admin
    env = {
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": admin.bootstrap_servers,
        "EBBTIDE_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "EBBTIDE_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "EBBTIDE_KAFKA__SASL_USERNAME": str(admin.sasl_username),
        "EBBTIDE_KAFKA__SASL_PASSWORD_FILE": str(admin.sasl_password_file),
        "EBBTIDE_KAFKA__SSL_CA_LOCATION": str(secure_kafka.ca),
        "EBBTIDE_KAFKA__TOPIC_PREFIX": topic_prefix,
        "EBBTIDE_KAFKA__GROUP_PREFIX": topic_prefix,
        "EBBTIDE_KAFKA__REPLICATION_FACTOR": "1",
    }
    runner = CliRunner()
    made = runner.invoke(app, ["kafka", "topics"], env=env)
    assert made.exit_code == 0, made.output
    assert made.output.count(": created (replicas 1, min.insync.replicas 1)") == len(CATALOGUE)
    granted = runner.invoke(app, ["kafka", "acls", "--apply"], env=env)
    assert granted.exit_code == 0, granted.output
    grants = acl_grants(default_principals(), topic_prefix=topic_prefix, group_prefix=topic_prefix)
    assert f"{len(grants)} ACLs created at {admin.bootstrap_servers}" in granted.output
    last = ACCESS[-1]  # ACLs reach the broker through the metadata log: wait for the last one's
    expected = {t.name for t in (*last.reads, *last.writes, *last.describes)}
    deadline = time.monotonic() + 30
    while _visible(users[last.service], topic_prefix) != expected:
        assert time.monotonic() < deadline, "the ACLs never took effect"
        time.sleep(0.2)
    return topic_prefix


def _visible(connection: KafkaConnection, prefix: str) -> set[str]:
    metadata = admin_client(connection).list_topics(timeout=15)
    return {name.removeprefix(prefix) for name in metadata.topics if name.startswith(prefix)}


def _produce_each(connection: KafkaConnection, names: list[str]) -> dict[str, int | None]:
    """One record to each topic; topic -> error code of its delivery (None: acknowledged)."""
    outcome: dict[str, int | None] = {}

    def delivered(error: KafkaError | None, msg: object) -> None:
        outcome[msg.topic()] = None if error is None else error.code()  # type: ignore[attr-defined]

    producer = Producer(client_config(connection, {"message.timeout.ms": 15_000, "acks": "all"}))
    for name in names:
        producer.produce(name, b"{}", key=b"k", on_delivery=delivered)
    producer.flush(30)
    return outcome


def _read_outcomes(connection: KafkaConnection, names: set[str]) -> dict[str, object]:
    """topic -> "record" once a record was read from it, or the error code consuming it gave."""
    conf = client_config(connection, {"group.id": "unused-assign-only", "enable.auto.commit": False})
    consumer = Consumer(conf)
    seen: dict[str, object] = {}
    try:
        consumer.assign(
            [TopicPartition(n, p, OFFSET_BEGINNING) for n in names for p in range(_partitions(n))]
        )
        deadline = time.monotonic() + 30
        while not set(seen) >= names and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                error = msg.error()
                if error is None:
                    seen[msg.topic() or ""] = "record"
                elif error.code() != KafkaError._PARTITION_EOF:
                    seen.setdefault(msg.topic() or str(error), error.code())
    finally:
        consumer.close()
    return seen


def _partitions(name: str) -> int:
    return next(t.partitions for t in CATALOGUE if name.endswith(t.name))


def test_unauthenticated_or_wrongly_authenticated_clients_are_refused(
    secure_kafka: SecureKafka, users: dict[str, KafkaConnection], tmp_path: Path
) -> None:
    assert answers_metadata(secure_kafka.admin, timeout_s=10.0)  # the right credentials do answer
    plaintext = KafkaConnection(bootstrap_servers=secure_kafka.sasl_bootstrap)
    assert not answers_metadata(plaintext, timeout_s=5.0)
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password")
    assert not answers_metadata(secure_kafka.scram("ebbtide-actuator", wrong), timeout_s=5.0)
    untrusted = secure_kafka.admin.model_copy(update={"ssl_ca_location": None})  # the system CAs only
    assert not answers_metadata(untrusted, timeout_s=5.0)
    no_certificate = KafkaConnection(
        bootstrap_servers=secure_kafka.mtls_bootstrap,
        security_protocol="SSL",
        ssl_ca_location=secure_kafka.ca,
    )
    assert not answers_metadata(no_certificate, timeout_s=5.0)
    assert answers_metadata(secure_kafka.mtls(), timeout_s=10.0)


def test_each_principal_reads_and_writes_only_its_own_topics(
    secure_kafka: SecureKafka, users: dict[str, KafkaConnection], secured_topics: str
) -> None:
    prefix = secured_topics
    names = [prefix + t.name for t in CATALOGUE]
    assert _visible(users["nobody"], prefix) == set()  # authenticated, no ACL: sees nothing
    for access in ACCESS:
        reads = {t.name for t in access.reads}
        writes = {t.name for t in access.writes}
        described = {t.name for t in access.describes}
        assert _visible(users[access.service], prefix) == reads | writes | described, access.service
        outcome = _produce_each(users[access.service], names)
        allowed = {n.removeprefix(prefix) for n, code in outcome.items() if code is None}
        assert allowed == writes, access.service
        refused = {code for n, code in outcome.items() if n.removeprefix(prefix) not in writes}
        assert refused == {KafkaError.TOPIC_AUTHORIZATION_FAILED}, access.service
    for access in ACCESS:  # every topic now holds a record from its writer
        reads = {prefix + t.name for t in access.reads}
        write_only = {prefix + t.name for t in (*access.writes, *access.describes)} - reads
        seen = _read_outcomes(users[access.service], reads | write_only)
        assert {n for n, v in seen.items() if v == "record"} == reads, access.service
        assert all(seen[n] == KafkaError.TOPIC_AUTHORIZATION_FAILED for n in write_only), (
            access.service,
            seen,
        )


def _allocation(cluster: str, plan_id: str) -> Allocation:
    from event_samples import sample

    now = datetime.now(UTC)
    event = sample(
        Allocation, cluster=cluster, plan_id=plan_id, issued_at=now, valid_until=now + timedelta(hours=1)
    )
    assert isinstance(event, Allocation)
    return event


def test_a_principal_that_may_not_write_allocations_cannot_feed_the_actuator(
    secure_kafka: SecureKafka, users: dict[str, KafkaConnection], secured_topics: str
) -> None:
    prefix = secured_topics
    actuator = users["actuator"]
    settings = load_settings(
        cluster="east",
        metrics_enabled=False,
        kafka={
            **actuator.model_dump(),
            "topic_prefix": prefix,
            "group_prefix": prefix,
            "replication_factor": 1,
        },
    )
    dry = DryRunBackend(cluster="east", adopt_unknown_jobs=True)
    runtime = build_runtime("actuator", settings, Parts(backend=ActuationEngine(dry, "east")))
    allocations = prefixed(ALLOCATIONS, prefix)
    try:
        refusals: list[int] = []
        forged = EventProducer(users["forecaster"], config={"message.timeout.ms": 15_000})
        forged.send(
            allocations,
            _allocation("east", "plan-forged"),
            on_delivery=lambda done, error: refusals.append(error.code()) if error else None,
        )
        with pytest.raises(DeliveryError):
            forged.flush(30)
        assert refusals == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        forged.close()
        genuine = EventProducer(users["optimizer"], config={"message.timeout.ms": 15_000})
        genuine.send(allocations, _allocation("east", "plan-genuine"))
        genuine.flush(30)
        genuine.close()
        deadline = time.monotonic() + 60
        while not dry.applied and time.monotonic() < deadline:
            runtime.poll_once()
        for _ in range(10):  # anything else queued would arrive now
            runtime.poll_once()
    finally:
        runtime.close()
    assert dry.applied, "the actuator applied nothing from the optimizer's allocation"
    assert {plan for plan, _ in dry.applied} == {"plan-genuine"}
    status = _as_inspect(secure_kafka, users["inspect"], prefix, ["status", "--json", "--cluster", "east"])
    assert status["last_step"]["plan_id"] == "plan-genuine"
    actuator_lag = [row for row in status["lag"] if row["service"] == "actuator"]
    assert actuator_lag == [
        {"service": "actuator", "group": f"{prefix}.actuator", "topic": allocations.name, "lag": 0}
    ]


def _as_inspect(secure_kafka: SecureKafka, inspect: KafkaConnection, prefix: str, args: list[str]) -> dict:
    """``ebbtide <args>`` with the inspect principal's settings; its JSON output."""
    import json

    from typer.testing import CliRunner

    from ebbtide.cli import _register, app

    _register()
    env = {
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": inspect.bootstrap_servers,
        "EBBTIDE_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "EBBTIDE_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "EBBTIDE_KAFKA__SASL_USERNAME": str(inspect.sasl_username),
        "EBBTIDE_KAFKA__SASL_PASSWORD_FILE": str(inspect.sasl_password_file),
        "EBBTIDE_KAFKA__SSL_CA_LOCATION": str(secure_kafka.ca),
        "EBBTIDE_KAFKA__TOPIC_PREFIX": prefix,
        "EBBTIDE_KAFKA__GROUP_PREFIX": prefix,
    }
    done = CliRunner().invoke(app, args, env=env)
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def test_a_client_certificate_authenticates_its_principal_over_mtls(
    secure_kafka: SecureKafka, secured_topics: str
) -> None:
    prefix = secured_topics
    who = f"User:CN={secure_kafka.client_cn}"
    apply_acls(secure_kafka.admin, acl_grants({"collector": who}, topic_prefix=prefix, group_prefix=prefix))
    outcome = _produce_each(secure_kafka.mtls(), [prefix + GPU_SAMPLES.name, prefix + ALLOCATIONS.name])
    assert outcome == {
        prefix + GPU_SAMPLES.name: None,
        prefix + ALLOCATIONS.name: KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }


def test_only_the_optimizer_may_hold_its_transactional_id(
    secure_kafka: SecureKafka, users: dict[str, KafkaConnection], secured_topics: str
) -> None:
    """The optimizer's read-process-write transaction works under its ACLs (transactional id
    ``<group_prefix>.optimizer.<cluster>``); another principal cannot take that id to fence it."""
    from confluent_kafka import KafkaException

    prefix = secured_topics
    transactional_id = f"{prefix}.optimizer.east"
    optimizer = EventProducer(users["optimizer"], transactional_id=transactional_id)
    optimizer.begin()
    optimizer.send(prefixed(ALLOCATIONS, prefix), _allocation("east", "plan-in-a-transaction"))
    optimizer.commit()
    optimizer.close()
    with pytest.raises(KafkaException) as refused:
        EventProducer(users["forecaster"], transactional_id=transactional_id, init_timeout_s=15.0)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
