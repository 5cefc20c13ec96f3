"""Who reads and writes which topic: the one map the Kafka ACLs of each service's principal come from.

Each entry names a client of the loop (the services, ``ebbtide job submit`` and the
read-only ``explain``/``plan``/``status`` commands), the catalogue topics it reads and writes,
and whether it consumes as a group or holds a transactional id. A stream service's reads are its
processor's own ``inputs`` (plus the topic it restores from at start), so the map cannot drift
from what the services consume. :func:`acl_grants` turns it into Kafka ACLs (:class:`Grant`: a
librdkafka ``AclBinding``, or a ``kafka-acls.sh`` line that ``ebbtide kafka acls`` prints), and
:func:`apply_acls` creates them with an admin connection. Everything not granted here is
refused: a principal may write only its own outputs, so one that may not write allocations cannot
feed the actuator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

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
    CATALOGUE,
    CLUSTER_STATE,
    DEAD_LETTERS,
    DEMAND_SAMPLES,
    FORECASTS,
    GPU_SAMPLES,
    INVENTORY,
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
    describes: tuple[Topic, ...] = ()  # offsets only: the lag ``ebbtide status`` shows
    describes_groups: bool = False  # reads other groups' committed offsets (``ebbtide status``)


ACCESS: tuple[ServiceAccess, ...] = (
    ServiceAccess("collector", writes=(GPU_SAMPLES,)),
    ServiceAccess("demand-source", writes=(DEMAND_SAMPLES,)),
    # The cluster source restores what it published (job events, inventory) at start.
    ServiceAccess("source", reads=(JOB_EVENTS, INVENTORY), writes=(JOB_EVENTS, INVENTORY)),
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
    ServiceAccess(
        "inspect",
        reads=(ALLOCATIONS, PLANS, CLUSTER_STATE, DEAD_LETTERS),
        describes=CATALOGUE,
        describes_groups=True,
    ),
)
"""Every client of the loop and its rights; nothing else is granted."""

BY_SERVICE: dict[str, ServiceAccess] = {a.service: a for a in ACCESS}


def default_principals(prefix: str = "ebbtide-") -> dict[str, str]:
    """``User:ebbtide-<service>`` for each client: the SCRAM user names the docs and tests use."""
    return {a.service: f"User:{prefix}{a.service}" for a in ACCESS}


@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: ``principal`` may ``operation`` on the resource (from any host)."""

    resource: Literal["topic", "group", "transactional-id"]
    name: str
    pattern: Literal["literal", "prefixed"]
    principal: str
    operation: Literal["Read", "Write", "Describe"]

    def binding(self) -> AclBinding:
        """As librdkafka's admin API takes it."""
        return AclBinding(
            _RESOURCE[self.resource],
            self.name,
            ResourcePatternType.PREFIXED if self.pattern == "prefixed" else ResourcePatternType.LITERAL,
            self.principal,
            "*",
            _OPERATION[self.operation],
            AclPermissionType.ALLOW,
        )

    def command(self, bootstrap: str, command_config: str) -> str:
        """As ``kafka-acls.sh --add`` takes it."""
        return (
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config {command_config} --add "
            f"--allow-principal '{self.principal}' --operation {self.operation} "
            f"--{self.resource} '{self.name}' --resource-pattern-type {self.pattern}"
        )


_RESOURCE = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
             "transactional-id": ResourceType.TRANSACTIONAL_ID}  # fmt: skip
_OPERATION = {"Read": AclOperation.READ, "Write": AclOperation.WRITE, "Describe": AclOperation.DESCRIBE}


def _service_grants(access: ServiceAccess, who: str, topic_prefix: str, group_prefix: str) -> list[Grant]:
    out = [
        Grant("topic", n, "literal", who, "Read")
        for n in sorted({topic_prefix + t.name for t in access.reads})
    ]
    out += [
        Grant("topic", n, "literal", who, "Write")
        for n in sorted({topic_prefix + t.name for t in access.writes})
    ]
    described = sorted({topic_prefix + t.name for t in access.describes})
    out += [Grant("topic", n, "literal", who, "Describe") for n in described]
    # Per-cluster groups and transactional ids extend the service's name (wiring.group_id_for).
    own = f"{group_prefix}.{access.service}"
    if access.consumer_group:
        out.append(Grant("group", own, "prefixed", who, "Read"))
    if access.transactional:
        out += [Grant("transactional-id", own, "prefixed", who, op) for op in ("Write", "Describe")]
    if access.describes_groups:
        out.append(Grant("group", f"{group_prefix}.", "prefixed", who, "Describe"))
    return out


def acl_grants(
    principals: Mapping[str, str], *, topic_prefix: str = "", group_prefix: str = "ebbtide"
) -> list[Grant]:
    """The ALLOW ACLs of every client named in ``principals`` (service -> ``User:name``)."""
    unknown = sorted(set(principals) - set(BY_SERVICE))
    if unknown:
        raise ValueError(f"no such service {', '.join(unknown)}; known: {', '.join(BY_SERVICE)}")
    out: list[Grant] = []
    for service, who in principals.items():
        out += _service_grants(BY_SERVICE[service], who, topic_prefix, group_prefix)
    return out


def apply_acls(admin_connection: Brokers, grants: list[Grant], timeout_s: float = 30.0) -> int:
    """Create ``grants`` on the cluster (an existing ACL is left as it is); returns how many."""
    if not grants:
        return 0
    admin = admin_client(admin_connection)  # held until the answers come
    futures = admin.create_acls([g.binding() for g in grants], request_timeout=timeout_s)
    for future in futures.values():
        future.result(timeout=timeout_s)
    return len(grants)


__all__ = [
    "ACCESS",
    "BY_SERVICE",
    "Grant",
    "ServiceAccess",
    "acl_grants",
    "apply_acls",
    "default_principals",
]
