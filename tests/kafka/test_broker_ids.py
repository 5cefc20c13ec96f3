"""Cluster ids for the local Apache Kafka's storage format step (no broker needed)."""

from __future__ import annotations

import base64
import uuid
from unittest import mock

from streams import broker_kafka


def test_cluster_ids_never_start_with_a_dash() -> None:
    """The storage tool reads an id starting with '-' as an option; Kafka's own ids avoid it too."""
    dash_first = uuid.UUID(bytes=b"\xfb" + bytes(15))  # URL-safe base64 of 0xfb... begins with '-'
    plain = uuid.UUID(bytes=bytes(16))
    with mock.patch.object(broker_kafka.uuid, "uuid4", side_effect=[dash_first, plain]):
        cluster_id = broker_kafka._new_cluster_id()
    assert not cluster_id.startswith("-")
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).rstrip(b"=").decode("ascii")
