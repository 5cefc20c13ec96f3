"""DeadLetter: a record a consumer could not read, kept whole with the reason (keyed by source topic)."""

from __future__ import annotations

from pydantic import Field

from schemas.base import Event, Name, NonNegInt, UtcDatetime


class DeadLetter(Event):
    source_topic: Name
    partition: NonNegInt
    offset: NonNegInt
    key_b64: str | None = Field(default=None, description="the record key, base64")
    raw_b64: str = Field(description="the record value exactly as received, base64")
    error: str = Field(min_length=1)
    consumer: Name
    time: UtcDatetime

    @property
    def key(self) -> str:
        return self.source_topic
