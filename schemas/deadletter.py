"""DeadLetter: a record a consumer could not read, kept whole with the reason (keyed by source topic)."""

from __future__ import annotations

import base64
import binascii

from pydantic import Field, field_validator

from schemas.base import Event, Name, Offset, Partition, UtcDatetime


class DeadLetter(Event):
    source_topic: Name
    partition: Partition
    offset: Offset
    key_b64: str | None = Field(default=None, description="the record key, base64")
    raw_b64: str = Field(description="the record value exactly as received, base64")
    error: str = Field(min_length=1)
    consumer: Name
    time: UtcDatetime

    @field_validator("key_b64", "raw_b64")
    @classmethod
    def _is_base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"not valid base64 ({exc})") from None
        return value

    @property
    def key(self) -> str:
        return self.source_topic
