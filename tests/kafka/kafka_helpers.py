"""Small helpers of the Kafka tests: draining a consumer until enough events arrived."""

from __future__ import annotations

import time

from streams.consumer import Received, ValidatingConsumer


def drain(
    consumer: ValidatingConsumer, want: int, timeout_s: float = 60.0, quiet_s: float = 0.0
) -> list[Received]:
    """Poll until ``want`` events arrived or ``timeout_s`` passed; then keep polling ``quiet_s`` more."""
    got: list[Received] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_s=1.0))
    quiet_until = time.monotonic() + quiet_s
    while time.monotonic() < quiet_until:
        got.extend(consumer.poll(timeout_s=0.5))
    return got
