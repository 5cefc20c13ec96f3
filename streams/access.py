"""Who reads and writes which topic: the one map the Kafka ACLs of each service's principal come from.

Each entry names a client of the loop (the five services, ``ebbtide job submit`` and the
read-only ``explain``/``plan``/``status`` commands), the catalogue topics it reads and writes,
and whether it consumes as a group or holds a transactional id. A stream service's reads are its
processor's own ``inputs`` (plus the topic it restores from at start), so the map cannot drift
from what the services consume. :func:`acl_bindings` turns it into Kafka ACLs (librdkafka
``AclBinding``), :func:`kafka_acls_commands` into ``kafka-acls.sh`` lines (``ebbtide kafka acls``
prints them; the Helm chart's docs point there), and :func:`apply_acls` creates them with an
admin connection. Everything not granted here is refused: a principal may write only its own
outputs, so one that may not write allocations cannot feed the actuator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported, not re-declared in stubs
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from schemas.topics import (
    ACTUATIONS,
    ALLOCATIONS,
    CLUSTER_STATE,
    DEAD_LETTERS,
    DEMAND_SAMPLES,
    FORECASTS,
    GPU_SAMPLES,
    JOB_EVENTS,
    PLANS,
    Topic,
)
from streams.kafka_client import Brokers
from streams.services.actuator import ActuatorProcessor
from streams.services.forecaster import ForecasterProcessor
from streams.services.optimizer import OptimizerProcessor
from streams.services.state import StateProcessor
from streams.topics_admin import admin_client


@dataclass(frozen=True)
class ServiceAccess:
    """One client's rights: topics it reads, topics it writes, its consumer group and transactions."""

    service: str
    reads: tuple[Topic, ...] = ()
    writes: tuple[Topic, ...] = ()
    consumer_group: bool = False
    transactional: bool = False
    describes_groups: bool = False  # reads other groups' committed offsets (``ebbtide status``)


ACCESS: tuple[ServiceAccess, ...] = (
    ServiceAccess("collector", writes=(GPU_SAMPLES,)),
    ServiceAccess("demand-source", writes=(DEMAND_SAMPLES,)),
    ServiceAccess(
        "state",
        reads=(*StateProcessor.inputs, CLUSTER_STATE),  # restores its fold from cluster-state
        writes=(CLUSTER_STATE, DEAD_LETTERS),
        consumer_group=True,
    ),
    ServiceAccess(
        "forecaster", reads=ForecasterProcessor.inputs, writes=(FORECASTS, DEAD_LETTERS), consumer_group=True
    ),
    ServiceAccess(
        "optimizer",
        reads=OptimizerProcessor.inputs,
        writes=(PLANS, ALLOCATIONS, DEAD_LETTERS),
        consumer_group=True,
        transactional=True,
    ),
    ServiceAccess(
        "actuator",
        reads=(*ActuatorProcessor.inputs, ACTUATIONS),  # remembers what it applied from actuations
        writes=(ACTUATIONS, DEAD_LETTERS),
        consumer_group=True,
    ),
    ServiceAccess("job-submit", writes=(JOB_EVENTS,)),
    ServiceAccess("inspect", reads=(ALLOCATIONS, PLANS, CLUSTER_STATE, DEAD_LETTERS), describes_groups=True),
)
"""Every client of the loop and its rights; nothing else is granted."""

BY_SERVICE: dict[str, ServiceAccess] = {a.service: a for a in ACCESS}


def default_principals(prefix: str = "ebbtide-") -> dict[str, str]:
    """``User:ebbtide-<service>`` for each client: the SCRAM user names the docs and tests use."""
    return {a.service: f"User:{prefix}{a.service}" for a in ACCESS}


def _allow(
    kind: ResourceType, name: str, pattern: ResourcePatternType, who: str, op: AclOperation
) -> AclBinding:
    return AclBinding(kind, name, pattern, who, "*", op, AclPermissionType.ALLOW)


def _service_bindings(
    access: ServiceAccess, who: str, topic_prefix: str, group_prefix: str
) -> list[AclBinding]:
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    read = sorted({topic_prefix + t.name for t in access.reads})
    write = sorted({topic_prefix + t.name for t in access.writes})
    out = [_allow(ResourceType.TOPIC, n, literal, who, AclOperation.READ) for n in read]
    out += [_allow(ResourceType.TOPIC, n, literal, who, AclOperation.WRITE) for n in write]
    # Per-cluster groups and transactional ids extend the service's name (wiring.group_id_for).
    own = f"{group_prefix}.{access.service}"
    if access.consumer_group:
        out.append(_allow(ResourceType.GROUP, own, prefixed, who, AclOperation.READ))
    if access.transactional:
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
            out.append(_allow(ResourceType.TRANSACTIONAL_ID, own, prefixed, who, op))
    if access.describes_groups:
        out.append(_allow(ResourceType.GROUP, f"{group_prefix}.", prefixed, who, AclOperation.DESCRIBE))
    return out


def acl_bindings(
    principals: Mapping[str, str], *, topic_prefix: str = "", group_prefix: str = "ebbtide"
) -> list[AclBinding]:
    """The ALLOW ACLs of every client named in ``principals`` (service -> ``User:name``)."""
    unknown = sorted(set(principals) - set(BY_SERVICE))
    if unknown:
        raise ValueError(f"no such service {', '.join(unknown)}; known: {', '.join(BY_SERVICE)}")
    out: list[AclBinding] = []
    for service, who in principals.items():
        out += _service_bindings(BY_SERVICE[service], who, topic_prefix, group_prefix)
    return out


_KIND = {
    ResourceType.TOPIC: "--topic",
    ResourceType.GROUP: "--group",
    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
}


def kafka_acls_commands(bindings: Iterable[AclBinding], bootstrap: str, command_config: str) -> list[str]:
    """One ``kafka-acls.sh --add`` line per binding, for operators who apply ACLs by hand."""
    lines = []
    for b in bindings:
        pattern = "prefixed" if b.resource_pattern_type == ResourcePatternType.PREFIXED else "literal"
        lines.append(
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config {command_config} --add "
            f"--allow-principal '{b.principal}' --operation {b.operation.name.title()} "
            f"{_KIND[b.restype]} '{b.name}' --resource-pattern-type {pattern}"
        )
    return lines


def apply_acls(admin_connection: Brokers, bindings: list[AclBinding], timeout_s: float = 30.0) -> int:
    """Create ``bindings`` on the cluster (an existing ACL is left as it is); returns how many."""
    if not bindings:
        return 0
    admin = admin_client(admin_connection)  # held until the answers come
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    for future in futures.values():
        future.result(timeout=timeout_s)
    return len(bindings)


__all__ = [
    "ACCESS",
    "BY_SERVICE",
    "ServiceAccess",
    "acl_bindings",
    "apply_acls",
    "default_principals",
    "kafka_acls_commands",
]
