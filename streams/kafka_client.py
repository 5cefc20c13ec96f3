"""Where ebbtide's Kafka clients connect and how they authenticate: the one start of every client config.

Every producer, consumer, admin client and transactional producer in ``streams/`` builds its
librdkafka configuration with :func:`client_config`, from a :class:`KafkaConnection` (the
bootstrap servers and the security settings: TLS, mTLS, SASL PLAIN / SCRAM / OAUTHBEARER-OIDC)
or from a bare ``host:port`` string, which means PLAINTEXT (the embedded and test brokers).
The composition root's ``kafka`` settings group *is* a KafkaConnection (ebbtide/settings.py), so
the services pass their settings straight in.

Secrets (SASL password, TLS key password, OIDC client secret) are ``SecretStr``: ``repr``, logs
and dumps show ``**********``; they are read from their files when a client is built (so a
rotated Kubernetes Secret reaches the next client) and handed to librdkafka only there. Each
inconsistent setting fails validation naming itself (SASL_SSL without a mechanism, a missing
file, a key without its certificate), so a service stops at start instead of failing to connect.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _readable_file(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"file {path} does not exist")
    if not os.access(path, os.R_OK):
        raise ValueError(f"file {path} is not readable")
    return path


def _secret_file(path: Path | None) -> Path | None:
    if path is not None and _readable_file(path) and not path.read_text().strip():
        raise ValueError(f"file {path} is empty")
    return path


def _one_secret(value: SecretStr | None, path: Path | None, what: str, needed_by: str | None) -> None:
    """``what`` (the value or its ``_file``) is given exactly once where ``needed_by`` names what
    needs it, and never where nothing does."""
    if needed_by and value is not None and path is not None:
        raise ValueError(f"set {what} or {what}_file, not both")
    if needed_by and value is None and path is None:
        raise ValueError(f"required with {needed_by} (or {what} itself)")
    if not needed_by and (value is not None or path is not None):
        raise ValueError(f"not used here: {what} goes with the setting that needs it")


def _read_secret(value: SecretStr | None, path: Path | None) -> str | None:
    """The secret's text: the value, else the file's content without its trailing newline."""
    if value is not None:
        return value.get_secret_value()
    if path is not None:
        return path.read_text().strip()
    return None


class KafkaConnection(BaseModel):
    """Bootstrap servers plus librdkafka's security settings (the ``kafka`` settings group's start)."""

    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str = Field(default="127.0.0.1:9092", min_length=3)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = Field(default=None, validate_default=True)
    sasl_username: str | None = Field(default=None, min_length=1, validate_default=True)
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = Field(
        default=None, validate_default=True, description="file holding the SASL password"
    )
    ssl_ca_location: Path | None = Field(default=None, description="PEM CA bundle that signed the brokers")
    ssl_certificate_location: Path | None = Field(default=None, description="client certificate (mTLS)")
    ssl_key_location: Path | None = Field(
        default=None, validate_default=True, description="client private key (mTLS)"
    )
    ssl_key_password: SecretStr | None = None
    ssl_key_password_file: Path | None = Field(default=None, description="file holding the key's password")
    oauthbearer_token_endpoint_url: str | None = Field(
        default=None, pattern=r"^https?://\S+$", validate_default=True, description="OIDC token endpoint"
    )
    oauthbearer_client_id: str | None = Field(default=None, min_length=1, validate_default=True)
    oauthbearer_client_secret: SecretStr | None = None
    oauthbearer_client_secret_file: Path | None = Field(default=None, validate_default=True)
    oauthbearer_scope: str | None = Field(default=None, min_length=1)

    def __str__(self) -> str:
        """What a message may say about the connection: the servers, never a credential."""
        return self.bootstrap_servers

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: str) -> str:
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{server!r} is not host:port")
        return value

    @field_validator("sasl_mechanism")
    @classmethod
    def _mechanism_with_sasl(cls, value: str | None, info: ValidationInfo) -> str | None:
        protocol = info.data.get("security_protocol", "PLAINTEXT")
        if protocol in _SASL and value is None:
            raise ValueError(f"required with security_protocol {protocol} ({', '.join(_PASSWORD_MECHANISMS)}"
                             ", OAUTHBEARER)")  # fmt: skip
        if protocol not in _SASL and value is not None:
            raise ValueError(f"only used with SASL_PLAINTEXT or SASL_SSL (security_protocol is {protocol})")
        return value

    @field_validator("sasl_username")
    @classmethod
    def _username_with_password_mechanism(cls, value: str | None, info: ValidationInfo) -> str | None:
        mechanism = info.data.get("sasl_mechanism")
        if mechanism in _PASSWORD_MECHANISMS and value is None:
            raise ValueError(f"required with sasl_mechanism {mechanism}")
        if mechanism not in _PASSWORD_MECHANISMS and value is not None:
            raise ValueError(f"only used with sasl_mechanism {', '.join(_PASSWORD_MECHANISMS)}")
        return value

    @field_validator("sasl_password_file")
    @classmethod
    def _one_password(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        mechanism = info.data.get("sasl_mechanism")
        needed_by = f"sasl_mechanism {mechanism}" if mechanism in _PASSWORD_MECHANISMS else None
        _one_secret(info.data.get("sasl_password"), value, "sasl_password", needed_by)
        return _secret_file(value)

    @field_validator("ssl_ca_location", "ssl_certificate_location")
    @classmethod
    def _tls_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        protocol = info.data.get("security_protocol", "PLAINTEXT")
        if value is not None and protocol not in _TLS:
            raise ValueError(f"only used with SSL or SASL_SSL (security_protocol is {protocol})")
        return _readable_file(value)

    @field_validator("ssl_key_location")
    @classmethod
    def _key_with_certificate(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        certificate = info.data.get("ssl_certificate_location")
        if (value is None) != (certificate is None) and "ssl_certificate_location" in info.data:
            raise ValueError("mTLS needs both ssl_certificate_location and ssl_key_location")
        return _readable_file(value)

    @field_validator("ssl_key_password_file")
    @classmethod
    def _key_password(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        given = info.data.get("ssl_key_password")
        if given is not None and value is not None:
            raise ValueError("set ssl_key_password or ssl_key_password_file, not both")
        if (given is not None or value is not None) and info.data.get("ssl_key_location") is None:
            raise ValueError("a key password without ssl_key_location")
        return _secret_file(value)

    @field_validator("oauthbearer_token_endpoint_url", "oauthbearer_client_id")
    @classmethod
    def _oidc_setting(cls, value: str | None, info: ValidationInfo) -> str | None:
        oidc = info.data.get("sasl_mechanism") == "OAUTHBEARER"
        if oidc and value is None:
            raise ValueError("required with sasl_mechanism OAUTHBEARER (OIDC client credentials)")
        if not oidc and value is not None:
            raise ValueError("only used with sasl_mechanism OAUTHBEARER")
        return value

    @field_validator("oauthbearer_client_secret_file")
    @classmethod
    def _one_client_secret(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        needed_by = "sasl_mechanism OAUTHBEARER" if info.data.get("sasl_mechanism") == "OAUTHBEARER" else None
        _one_secret(info.data.get("oauthbearer_client_secret"), value, "oauthbearer_client_secret", needed_by)
        return _secret_file(value)

    def librdkafka(self) -> dict[str, Any]:
        """The librdkafka properties of this connection, secrets read now (from their files)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": _read_secret(self.sasl_password, self.sasl_password_file),
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": _read_secret(self.ssl_key_password, self.ssl_key_password_file),
            "sasl.oauthbearer.client.id": self.oauthbearer_client_id,
            "sasl.oauthbearer.client.secret": _read_secret(
                self.oauthbearer_client_secret, self.oauthbearer_client_secret_file
            ),
            "sasl.oauthbearer.token.endpoint.url": self.oauthbearer_token_endpoint_url,
            "sasl.oauthbearer.scope": self.oauthbearer_scope,
        }
        conf.update({k: str(v) for k, v in optional.items() if v is not None})
        if self.sasl_mechanism == "OAUTHBEARER":
            conf["sasl.oauthbearer.method"] = "oidc"
        return conf


Brokers = str | KafkaConnection
"""What a streams/ function connects to: a KafkaConnection, or ``host:port[,...]`` (PLAINTEXT)."""


def connection_of(brokers: Brokers) -> KafkaConnection:
    return brokers if isinstance(brokers, KafkaConnection) else KafkaConnection(bootstrap_servers=brokers)


def client_config(brokers: Brokers, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The librdkafka config of one client: the connection's servers and security, then ``extra``
    (group id, idempotence, timeouts...). Every Kafka client of streams/ is built from it."""
    return {**connection_of(brokers).librdkafka(), **(extra or {})}


__all__ = [
    "Brokers",
    "KafkaConnection",
    "SaslMechanism",
    "SecurityProtocol",
    "client_config",
    "connection_of",
]
