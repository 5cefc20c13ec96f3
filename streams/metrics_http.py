"""Serving the metrics: the /metrics (and /healthz) endpoint of every service process.

Every stage of the loop serves :data:`streams.metrics.REGISTRY` here on its metrics port; with a
heartbeat, ``/healthz`` answers whether its loop is making progress (streams.health). Also what a
scrape of a registry can show, for the tests that check the alert rules and the dashboard name
only exported series.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from streams.health import Heartbeat, with_health
from streams.metric_series import DEFAULT_METRICS_PORT
from streams.metrics import REGISTRY, EbbtideMetrics


def exported_sample_names(registry: CollectorRegistry) -> set[str]:
    """Every series name a scrape of ``registry`` can show (counters' _total, histograms' _bucket...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def ebbtide_metric_names() -> set[str]:
    """The series names the ebbtide metrics define (on a throwaway registry)."""
    return exported_sample_names(EbbtideMetrics(CollectorRegistry()).registry)


@dataclass(frozen=True)
class MetricsEndpoint:
    """A running /metrics (and /healthz) server: the port it bound, and how to stop it."""

    port: int
    server: WSGIServer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_metrics(
    port: int = DEFAULT_METRICS_PORT,
    addr: str = "0.0.0.0",
    registry: CollectorRegistry = REGISTRY,
    health: Heartbeat | None = None,
) -> MetricsEndpoint:
    """Serve ``registry`` on http://addr:port/metrics in a daemon thread (any other path answers too).

    With ``health``, ``/healthz`` answers from that heartbeat instead (streams.health: 200 while the
    loop has stepped recently, 503 with the reason once it has not). Port 0 picks a free port
    (tests). Raises OSError naming the address when the port is taken.
    """
    app = make_wsgi_app(registry)
    if health is not None:
        app = with_health(app, health)

    class Server(ThreadingWSGIServer):
        pass

    try:
        Server.address_family, host = _address_family(addr, port)
        server = make_server(host, port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise OSError(exc.errno, f"metrics port {addr}:{port}: {exc.strerror}") from exc
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return MetricsEndpoint(port=int(server.server_address[1]), server=server)


def _address_family(addr: str, port: int) -> tuple[socket.AddressFamily, str]:
    """IPv4 or IPv6 as ``addr`` asks (prometheus-client's start_http_server does the same)."""
    infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape or probe."""

    def log_message(self, format: str, *args: object) -> None:
        pass
