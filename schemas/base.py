"""Shared building blocks of the event contracts: the strict base model and checked field types.

Every event inherits :class:`Event`: unknown fields, wrong types, NaN and infinity are rejected,
and times must carry a UTC offset of zero. Units live in field names (``_s``, ``_gpus``, ``_mib``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _require_utc(value: datetime) -> datetime:
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("time must be timezone-aware UTC (got a naive datetime)")
    if offset != timedelta(0):
        raise ValueError(f"time must be UTC (got offset {offset})")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_require_utc)]
"""A timezone-aware datetime whose offset is zero."""

NonNegFloat = Annotated[float, Field(ge=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0.0)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]

SCHEMA_VERSION: Literal[1] = 1


class Event(BaseModel):
    """Base of every wire event: strict, closed, immutable, finite, versioned."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
    )

    schema_version: Literal[1] = SCHEMA_VERSION


class Part(BaseModel):
    """Base of nested parts of events: same strictness, no version of its own."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)
