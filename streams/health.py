"""Liveness tied to the loop's progress: a heartbeat the loop moves and the /healthz answer it gives.

Every service's loop (the stream services' :class:`streams.services.runtime.ServiceRuntime`, one
beat per completed poll; the collector, one beat per sample round) calls :meth:`Heartbeat.beat`.
The metrics server (:func:`streams.metrics_http.serve_metrics`) answers ``/healthz`` from it on its own
thread: 200 while the last beat is at most ``stale_after_s`` old, 503 with a one-line reason once
it is older, so a loop wedged in a call that never returns reads as dead to Kubernetes while
``/metrics`` keeps being served. A broker that is away does not stop the beats (the poll returns
empty after its timeout), so an outage is not answered with restarts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

HEALTH_PATH = "/healthz"
STREAM_STALE_AFTER_S = 120.0
"""Default for stream services: a poll takes its timeout (0.2 s) plus a commit that waits at most
30 s on the broker, and a decision its budget; 120 s without one completing is a wedged loop."""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def collector_stale_after_s(interval_s: float) -> float:
    """Default for the collector, which beats once per ``interval_s``: three rounds missed, at least 120 s."""
    return max(STREAM_STALE_AFTER_S, 3.0 * interval_s)


@dataclass
class Heartbeat:
    """When the loop last made progress, by a monotonic clock; fresh at creation (start-up grace)."""

    name: str
    stale_after_s: float = STREAM_STALE_AFTER_S
    clock: Callable[[], float] = time.monotonic
    beats: int = 0
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        if self.stale_after_s <= 0:
            raise ValueError(f"stale_after_s: must be positive, got {self.stale_after_s}")
        self._last = self.clock()

    def beat(self) -> None:
        """The loop completed one step (called from the loop's thread; a float store is atomic)."""
        self._last = self.clock()
        self.beats += 1

    def check(self) -> tuple[bool, str]:
        """(alive, one-line reason) as of now."""
        age_s = max(self.clock() - self._last, 0.0)
        if age_s <= self.stale_after_s:
            return True, f"ok: {self.name} loop stepped {age_s:.1f} s ago"
        since = "last loop step" if self.beats else "no loop step since start,"
        return False, (f"stale: {self.name} {since} {age_s:.0f} s ago (stale after {self.stale_after_s:g} s)")


def with_health(app: WsgiApp, heartbeat: Heartbeat, path: str = HEALTH_PATH) -> WsgiApp:
    """``app`` (the /metrics app) with ``path`` answered from ``heartbeat``: 200 fresh, 503 stale."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != path:
            return app(environ, start_response)
        alive, reason = heartbeat.check()
        body = (reason + "\n").encode()
        status = "200 OK" if alive else "503 Service Unavailable"
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        start_response(status, headers)
        return [body] if environ.get("REQUEST_METHOD") != "HEAD" else []

    return serve
