"""The Kafka security and durability settings, without a broker (marker ``security``).

Each inconsistent setting stops start-up naming itself and its environment variable; secrets
never appear in repr, str, dumps or the start-up messages; the librdkafka config carries what
librdkafka needs (OIDC included); the ACL map covers every service's inputs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ebbtide.settings import SettingsError, load_settings
from ebbtide.wiring import service_inputs
from streams.access import BY_SERVICE, acl_grants, default_principals
from streams.kafka_client import KafkaConnection, client_config
from streams.topics_admin import TopicDurability

pytestmark = pytest.mark.security

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-never-shown"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text(SECRET + "\n")
    return path


def _kafka(**kafka: object) -> KafkaConnection:
    return load_settings(kafka=kafka).kafka


@pytest.mark.parametrize(
    ("kafka", "named", "why"),
    [
        (
            {"security_protocol": "SASL_SSL"},
            "kafka.sasl_mechanism [EBBTIDE_KAFKA__SASL_MECHANISM]",
            "required",
        ),
        (
            {"security_protocol": "TLS"},
            "kafka.security_protocol [EBBTIDE_KAFKA__SECURITY_PROTOCOL]",
            "SASL_SSL",
        ),
        ({"sasl_mechanism": "PLAIN"}, "kafka.sasl_mechanism", "only used with SASL"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"},
            "kafka.sasl_username [EBBTIDE_KAFKA__SASL_USERNAME]",
            "required",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u"},
            "kafka.sasl_password_file [EBBTIDE_KAFKA__SASL_PASSWORD_FILE]",
            "required",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "u",
                "sasl_password_file": "/nonexistent/password",
            },
            "kafka.sasl_password_file",
            "does not exist",
        ),
        (
            {"security_protocol": "SSL", "ssl_ca_location": "/nonexistent/ca.pem"},
            "kafka.ssl_ca_location",
            "exist",
        ),
        ({"ssl_ca_location": "/etc/hostname"}, "kafka.ssl_ca_location", "only used with SSL or SASL_SSL"),
        ({"security_protocol": "SSL", "ssl_key_location": "/etc/hostname"}, "kafka.ssl_key_location", "both"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "kafka.oauthbearer_token_endpoint_url [EBBTIDE_KAFKA__OAUTHBEARER_TOKEN_ENDPOINT_URL]",
            "required",
        ),
        ({"replication_factor": 2, "min_insync_replicas": 3}, "kafka.min_insync_replicas", "more than"),
    ],
)
def test_an_inconsistent_setting_fails_naming_it(kafka: dict[str, object], named: str, why: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(kafka=kafka)
    assert f"setting {named}" in str(err.value) and why in str(err.value)


def test_a_password_given_twice_is_refused(secret_file: Path) -> None:
    with pytest.raises(SettingsError, match=r"kafka.sasl_password_file .*not both"):
        load_settings(
            kafka={
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "u",
                "sasl_password": "x",
                "sasl_password_file": str(secret_file),
            }
        )


def test_scram_over_tls_from_the_environment_reads_the_password_file(
    monkeypatch: pytest.MonkeyPatch, secret_file: Path
) -> None:
    for name, value in {
        "SECURITY_PROTOCOL": "SASL_SSL",
        "SASL_MECHANISM": "SCRAM-SHA-512",
        "SASL_USERNAME": "ebbtide-optimizer",
        "SASL_PASSWORD_FILE": str(secret_file),
        "SSL_CA_LOCATION": str(secret_file),  # any readable file passes the start-up check
    }.items():
        monkeypatch.setenv(f"EBBTIDE_KAFKA__{name}", value)
    kafka = load_settings().kafka
    conf = client_config(kafka, {"group.id": "g"})
    assert conf == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "ebbtide-optimizer",
        "sasl.password": SECRET,  # the file's text without its newline, read when the client is built
        "ssl.ca.location": str(secret_file),
        "group.id": "g",
    }
    secret_file.write_text("rotated\n")  # a rotated Kubernetes Secret reaches the next client
    assert client_config(kafka)["sasl.password"] == "rotated"


def test_oauthbearer_passes_the_oidc_client_credentials_through(secret_file: Path) -> None:
    kafka = _kafka(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        oauthbearer_token_endpoint_url="https://idp.example/oauth2/token",
        oauthbearer_client_id="ebbtide-state",
        oauthbearer_client_secret_file=str(secret_file),
        oauthbearer_scope="kafka",
    )
    conf = client_config(kafka)
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.client.id"] == "ebbtide-state"
    assert conf["sasl.oauthbearer.client.secret"] == SECRET
    assert conf["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/oauth2/token"
    assert conf["sasl.oauthbearer.scope"] == "kafka"
    assert "sasl.username" not in conf and "sasl.password" not in conf


def test_mtls_with_an_encrypted_key(tmp_path: Path, secret_file: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("cert")
    key.write_text("key")
    kafka = _kafka(
        security_protocol="SSL",
        ssl_certificate_location=str(cert),
        ssl_key_location=str(key),
        ssl_key_password_file=str(secret_file),
    )
    conf = client_config(kafka)
    assert conf["ssl.certificate.location"] == str(cert) and conf["ssl.key.location"] == str(key)
    assert conf["ssl.key.password"] == SECRET


def test_secrets_never_appear_in_repr_str_or_dumps() -> None:
    settings = load_settings(
        kafka={
            "bootstrap_servers": "kafka:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "u",
            "sasl_password": SECRET,
        }
    )
    shown = [
        repr(settings),
        str(settings),
        repr(settings.kafka),
        settings.model_dump_json(),
        f"{settings.kafka}",
    ]
    assert all(SECRET not in text for text in shown)
    assert f"{settings.kafka}" == "kafka:9093"  # what a message about the connection says
    assert client_config(settings.kafka)["sasl.password"] == SECRET  # only librdkafka gets it


def test_a_bad_or_misspelt_secret_setting_is_named_but_not_echoed() -> None:
    for kafka in ({"sasl_pasword": SECRET}, {"oauthbearer_client_secret": {"nested": SECRET}}):
        with pytest.raises(SettingsError) as err:
            load_settings(kafka=kafka)
        assert "setting kafka." in str(err.value) and SECRET not in str(err.value)


def test_a_service_refused_by_the_broker_names_the_settings_not_the_secret(secret_file: Path) -> None:
    """``ebbtide run`` against nothing with SCRAM settings: exit 4, no credential in the output."""
    env = {
        "PATH": "/usr/bin:/bin",
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "EBBTIDE_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "EBBTIDE_KAFKA__SASL_MECHANISM": "SCRAM-SHA-256",
        "EBBTIDE_KAFKA__SASL_USERNAME": "ebbtide-state",
        "EBBTIDE_KAFKA__SASL_PASSWORD_FILE": str(secret_file),
        "EBBTIDE_METRICS_ENABLED": "false",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ebbtide.cli", "run", "state"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "refuses security_protocol SASL_PLAINTEXT with sasl_mechanism SCRAM-SHA-256" in done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_durability_defaults_are_production_ones() -> None:
    assert load_settings().kafka.durability() == TopicDurability(3, 2)
    assert _kafka(replication_factor=1).durability() == TopicDurability(1, 1)
    assert _kafka(replication_factor=5, min_insync_replicas=3).durability() == TopicDurability(5, 3)
    with pytest.raises(ValueError, match=r"min\.insync\.replicas"):
        TopicDurability(1, 2)


def test_the_acl_map_covers_what_every_stream_service_consumes() -> None:
    for service, inputs in service_inputs().items():
        assert set(inputs) <= set(BY_SERVICE[service].reads), service
        assert BY_SERVICE[service].consumer_group, service


def test_kafka_acls_commands_name_prefixed_topics_groups_and_transactional_ids() -> None:
    grants = acl_grants(default_principals(), topic_prefix="p.", group_prefix="loop")
    lines = [g.command("kafka:9093", "admin.properties") for g in grants]
    assert len(lines) == len(grants)
    assert (
        "kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add "
        "--allow-principal 'User:ebbtide-optimizer' --operation Write --topic 'p.ebbtide.allocations' "
        "--resource-pattern-type literal"
    ) in lines
    assert any(
        "--transactional-id 'loop.optimizer' --resource-pattern-type prefixed" in line for line in lines
    )
    assert not any(
        "ebbtide-forecaster' --operation Write --topic 'p.ebbtide.allocations'" in line for line in lines
    )
    with pytest.raises(ValueError, match="no such service"):
        acl_grants({"scheduler": "User:x"})


def test_librdkafka_asks_the_token_endpoint_with_the_oidc_client_credentials(secret_file: Path) -> None:
    """The OIDC settings reach the real librdkafka: it POSTs a client-credentials grant with our
    client id, secret and scope. The token endpoint is a STAND-IN (an identity provider cannot run
    here): a stdlib HTTP server that records the request and answers an unsigned token."""
    import base64
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from confluent_kafka import Producer

    seen: list[tuple[str, str]] = []

    class StandInTokenEndpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            seen.append((self.headers.get("Authorization", ""), body))
            claims = base64.urlsafe_b64encode(
                json.dumps({"sub": "ebbtide-state", "exp": 4102444800}).encode()
            )
            token = f"e30.{claims.decode().rstrip('=')}.c2ln"
            answer = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 3600}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), StandInTokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kafka = _kafka(
            bootstrap_servers="127.0.0.1:1",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            oauthbearer_token_endpoint_url=f"http://127.0.0.1:{server.server_port}/token",
            oauthbearer_client_id="ebbtide-state",
            oauthbearer_client_secret_file=str(secret_file),
            oauthbearer_scope="kafka",
        )
        producer = Producer(client_config(kafka))
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        server.shutdown()
    assert seen, "librdkafka never asked the token endpoint"
    authorization, body = seen[0]
    assert authorization == "Basic " + base64.b64encode(f"ebbtide-state:{SECRET}".encode()).decode()
    assert "grant_type=client_credentials" in body and "scope=kafka" in body
