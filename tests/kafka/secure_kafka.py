"""A real Apache Kafka with authentication, TLS and ACLs, made afresh for the security tests.

One KRaft node from the suite's cached jars (streams.kafka_jars), with:

- a ``SASL_SSL`` listener (SCRAM-SHA-512; the broker's own inter-broker login is the ``admin``
  SCRAM user, added at storage-format time with ``--add-scram``),
- an ``SSL`` listener that requires a client certificate (mTLS; the principal is the
  certificate's subject, ``User:CN=<name>``),
- the controller listener on PLAINTEXT loopback (KRaft's broker-to-controller traffic arrives as
  ``User:ANONYMOUS``, which is therefore a super user; no client listener yields ANONYMOUS),
- ``StandardAuthorizer`` with ``admin`` as super user and no access without an ACL.

Certificates come from ``openssl`` (a CA, the broker's certificate for 127.0.0.1/localhost, a
client certificate whose key is encrypted with a password). Test code only: production brokers
are the operator's.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from streams.broker import BrokerHandle, free_port, stop_process_group, wait_ready
from streams.broker_kafka import _format_log_dir, _java, _launch, server_properties
from streams.kafka_client import KafkaConnection
from streams.kafka_jars import ensure_jars

ADMIN = "admin"


@dataclass
class SecureKafka:
    handle: BrokerHandle
    sasl_bootstrap: str
    mtls_bootstrap: str
    ca: Path
    client_cert: Path
    client_key: Path
    client_key_password_file: Path
    client_cn: str
    admin_password_file: Path
    workdir: Path

    def scram(self, user: str, password_file: Path) -> KafkaConnection:
        """A SASL_SSL SCRAM-SHA-512 connection as ``user``."""
        return KafkaConnection(
            bootstrap_servers=self.sasl_bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password_file=password_file,
            ssl_ca_location=self.ca,
        )

    @property
    def admin(self) -> KafkaConnection:
        return self.scram(ADMIN, self.admin_password_file)

    def mtls(self) -> KafkaConnection:
        """An SSL connection authenticated by the client certificate (``User:CN=<client_cn>``)."""
        return KafkaConnection(
            bootstrap_servers=self.mtls_bootstrap,
            security_protocol="SSL",
            ssl_ca_location=self.ca,
            ssl_certificate_location=self.client_cert,
            ssl_key_location=self.client_key,
            ssl_key_password_file=self.client_key_password_file,
        )

    def password_file(self, user: str) -> Path:
        """A fresh random password for ``user``, in a file (as a mounted Kubernetes Secret)."""
        path = self.workdir / f"{user}.password"
        path.write_text(secrets.token_urlsafe(18) + "\n")
        return path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr}")


def make_certificates(tls: Path, client_cn: str, key_password: str) -> None:
    """ca.pem, broker-keystore.pem (key + certificate for 127.0.0.1), client.pem, client.key (encrypted)."""
    tls.mkdir(parents=True, exist_ok=True)
    days = "2"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", days, "-subj", "/CN=ebbtide-test-ca", cwd=tls)  # fmt: skip
    (tls / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=tls)  # fmt: skip
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.pem", "-days", days, "-extfile", "broker.ext", cwd=tls)  # fmt: skip
    (tls / "broker-keystore.pem").write_text(
        (tls / "broker.key").read_text() + (tls / "broker.pem").read_text()
    )
    _openssl("req", "-newkey", "rsa:2048", "-keyout", "client.key", "-passout", f"pass:{key_password}",
             "-out", "client.csr", "-subj", f"/CN={client_cn}", cwd=tls)  # fmt: skip
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "client.pem", "-days", days, cwd=tls)  # fmt: skip


def _security_properties(
    tls: Path, sasl_port: int, mtls_port: int, controller_port: int, admin_pw: str
) -> str:
    scram_login = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
        f'password="{admin_pw}";'
    )
    props = {
        "listeners": f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{mtls_port},"
        f"CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{mtls_port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_login,
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "broker-keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls / "ca.pem"),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def start_secure_kafka(workdir: Path, client_cn: str = "ebbtide-collector") -> SecureKafka:
    """Certificates, the SCRAM admin, the node formatted and started; ready once the admin's
    SASL_SSL metadata request is answered. Stop it with ``.handle.stop()``."""
    tls, node = workdir / "tls", workdir / "node"
    (node / "log").mkdir(parents=True, exist_ok=True)
    key_password_file = workdir / "client-key.password"
    key_password_file.write_text(secrets.token_urlsafe(12))
    make_certificates(tls, client_cn, key_password_file.read_text())
    admin_pw = secrets.token_urlsafe(18)
    admin_password_file = workdir / f"{ADMIN}.password"
    admin_password_file.write_text(admin_pw)
    sasl_port, mtls_port, controller_port = free_port(), free_port(), free_port()
    config = node / "server.properties"
    base = server_properties(log_dir=node / "log", client_port=sasl_port, controller_port=controller_port)
    config.write_text(base + _security_properties(tls, sasl_port, mtls_port, controller_port, admin_pw))
    (node / "log4j2.properties").write_text("rootLogger.level = WARN\n")
    jars, java = ensure_jars(), _java()
    scram = f"SCRAM-SHA-512=[name={ADMIN},password={admin_pw}]"
    _format_log_dir(java, jars, node, config, extra=("--add-scram", scram))
    log_file = node / "broker.log"
    process = _launch(java, jars, node, config, log_file, die_with_parent=True)
    secure = SecureKafka(
        handle=BrokerHandle(
            bootstrap=f"127.0.0.1:{sasl_port}",
            kind="kafka",
            transactions=True,
            name="secure",
            pid=process.pid,
            data_dir=node,
            log_file=log_file,
            _stopper=lambda: stop_process_group(process.pid, timeout_s=10.0, process=process),
        ),
        sasl_bootstrap=f"127.0.0.1:{sasl_port}",
        mtls_bootstrap=f"127.0.0.1:{mtls_port}",
        ca=tls / "ca.pem",
        client_cert=tls / "client.pem",
        client_key=tls / "client.key",
        client_key_password_file=key_password_file,
        client_cn=client_cn,
        admin_password_file=admin_password_file,
        workdir=workdir,
    )
    try:
        wait_ready(secure.admin, process=process, log_file=log_file, timeout_s=120.0, what="secure Kafka")
    except BaseException:
        secure.handle.stop()
        raise
    return secure
