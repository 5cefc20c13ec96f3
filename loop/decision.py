"""A Decision (the whole HorizonPlan and the Allocation of step 0) and its identity.

Every policy, the planner and the baselines alike, names its plans here: the same inputs give the
same digest, so the same plan id, which is what makes actuation idempotent on (plan_id, target).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel

from schemas import Allocation, ClusterState, DemandForecast, HorizonPlan


@dataclass(frozen=True)
class Decision:
    plan: HorizonPlan
    allocation: Allocation


def inputs_digest(
    state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime, config: str = ""
) -> str:
    """A stable digest of everything a decision depends on: same inputs, same plan id."""
    h = hashlib.sha256(_json_bytes(state))
    for service in sorted(forecasts):
        h.update(_json_bytes(forecasts[service]))
    h.update(now.isoformat().encode())
    h.update(config.encode())
    return h.hexdigest()[:32]


def _json_bytes(event: BaseModel) -> bytes:
    """The event's JSON exactly as ``model_dump_json()`` writes it, as UTF-8 bytes."""
    return event.__pydantic_serializer__.to_json(event)


def plan_id_for(cluster: str, policy_name: str, digest: str) -> str:
    return f"{cluster}-{policy_name}-{digest[:16]}"


def config_fingerprint(settings: object) -> str:
    """A stable string of a policy's settings (dataclass or pydantic), for the digest."""
    dump = getattr(settings, "model_dump", None)
    data = dump() if callable(dump) else getattr(settings, "__dict__", repr(settings))
    return json.dumps(data, sort_keys=True, default=str)
