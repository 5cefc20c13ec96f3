"""The one Policy interface every allocator implements (ebbtide, oracle and the baselines).

A policy turns a cluster snapshot and the services' demand forecasts into a Decision: the whole
HorizonPlan and the Allocation of step 0. Policy settings go in the constructor; nothing
dispatches on a policy's name. Pure: no I/O and no clock reads (``now`` is an argument).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from schemas import Allocation, ClusterState, DemandForecast, HorizonPlan


@dataclass(frozen=True)
class Decision:
    plan: HorizonPlan
    allocation: Allocation


@runtime_checkable
class Policy(Protocol):
    """Decides one step. ``name`` labels its output; it is never used to choose behaviour."""

    name: str

    def decide(
        self,
        state: ClusterState,
        forecasts: Mapping[str, DemandForecast],
        now: datetime,
    ) -> Decision: ...


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
    """The event's JSON exactly as ``model_dump_json()`` writes it, as the UTF-8 bytes pydantic
    produces (model_dump_json decodes them to a str, which would only be encoded again)."""
    return event.__pydantic_serializer__.to_json(event)


def plan_id_for(cluster: str, policy_name: str, digest: str) -> str:
    return f"{cluster}-{policy_name}-{digest[:16]}"


def config_fingerprint(settings: object) -> str:
    """A stable string of a policy's settings (dataclass or pydantic), for the digest."""
    dump = getattr(settings, "model_dump", None)
    data = dump() if callable(dump) else getattr(settings, "__dict__", repr(settings))
    return json.dumps(data, sort_keys=True, default=str)
