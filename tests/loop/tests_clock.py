"""A clock the tests move by hand (the services read time only through an injected clock)."""

from __future__ import annotations

from datetime import datetime


class ManualClock:
    def __init__(self, when: datetime) -> None:
        self.when = when

    def now(self) -> datetime:
        return self.when
