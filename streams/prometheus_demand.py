"""Inference demand from Prometheus, the pure part: the queries per service, and answers into DemandSamples.

Place in the loop: the demand source (streams/services/demand_source.py) asks Prometheus's HTTP
API, every step, each service's two PromQL queries (busy GPUs, requests/s) and publishes what
comes back as a DemandSample, which the state service folds and the forecaster learns from. This
module does no I/O: it builds the queries from configuration and reads an answer's JSON. An answer
that is not one finite number (a failed query, an empty result, several series, NaN) is refused
with a reason, never read as zero demand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from schemas.codec import describe
from schemas.telemetry import DemandSample

SERVICE_PLACEHOLDER = "{service}"
"""In a query template, replaced by the service's name (str.replace: PromQL's own braces stay)."""

FIELDS = ("gpus_busy", "requests_per_s")
REASONS = (
    "unreachable", "bad_response", "query_error", "empty", "many_series", "not_a_number", "out_of_range",
)  # fmt: skip
"""Why an answer was refused: the ``reason`` label of ebbtide_demand_query_failures_total."""


@dataclass(frozen=True)
class ServiceQueries:
    """The two PromQL queries of one inference service."""

    service: str
    gpus_busy: str
    requests_per_s: str


class QueryRefused(ValueError):
    """An answer that is no demand value: ``reason`` is one of REASONS, ``detail`` says what came."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def build_queries(
    services: Mapping[str, Mapping[str, str | None]], templates: Mapping[str, str | None]
) -> list[ServiceQueries]:
    """Each service's queries: its own, else the template with ``{service}`` replaced.

    Raises ValueError naming the missing setting (``services.<name>.<field>``) when a service has
    neither; the caller adds its settings' prefix.
    """
    if not services:
        raise ValueError("services: no service configured (give each its gpus_busy and requests_per_s)")
    built = []
    for name, own in sorted(services.items()):
        if not name.strip():
            raise ValueError("services: a service name is empty")
        queries: dict[str, str] = {}
        for field in FIELDS:
            query = own.get(field) or templates.get(field)
            if not query or not query.strip():
                raise ValueError(f"services.{name}.{field}: no query (set it, or the {field}_query template)")
            queries[field] = query.replace(SERVICE_PLACEHOLDER, name)
        built.append(ServiceQueries(name, queries["gpus_busy"], queries["requests_per_s"]))
    return built


def value_of(answer: Any) -> float:
    """The one number of an instant query's answer (``/api/v1/query`` JSON), or QueryRefused."""
    if not isinstance(answer, dict) or "status" not in answer:
        raise QueryRefused("bad_response", f"not a Prometheus API answer: {str(answer)[:200]}")
    if answer["status"] != "success":
        error = f"{answer.get('errorType', 'error')}: {answer.get('error', '')}"
        raise QueryRefused("query_error", error)
    data = answer.get("data")
    if not isinstance(data, dict):
        raise QueryRefused("bad_response", "no data in the answer")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _number(result)
    if kind != "vector" or not isinstance(result, list):
        raise QueryRefused("bad_response", f"result type {kind!r}: an instant vector or scalar was expected")
    if not result:
        raise QueryRefused("empty", "no series matched")
    if len(result) > 1:
        raise QueryRefused("many_series", f"{len(result)} series; aggregate them to one (sum(...))")
    return _number(result[0].get("value") if isinstance(result[0], dict) else None)


def _number(pair: Any) -> float:
    """A sample's value from its ``[unix time, "value"]`` pair."""
    if not isinstance(pair, list) or len(pair) != 2:
        raise QueryRefused("bad_response", f"sample {pair!r} is not [time, value]")
    try:
        number = float(pair[1])
    except (TypeError, ValueError):
        raise QueryRefused("bad_response", f"value {pair[1]!r} is not a number") from None
    if not math.isfinite(number):
        raise QueryRefused("not_a_number", f"value {pair[1]}")
    return number


def demand_sample(
    cluster: str, service: str, time: datetime, gpus_busy: float, requests_per_s: float
) -> DemandSample:
    """The DemandSample of the two values, validated against the contract (QueryRefused otherwise)."""
    try:
        return DemandSample(
            cluster=cluster, service=service, time=time, requests_per_s=requests_per_s, gpus_busy=gpus_busy
        )
    except ValidationError as exc:
        raise QueryRefused("out_of_range", describe(exc)) from None
