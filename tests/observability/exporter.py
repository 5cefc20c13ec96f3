"""A Prometheus exporter for the demand-source tests: serves the exposition text a callable returns
on 127.0.0.1 (an ephemeral port), for a real Prometheus server to scrape or the source to read."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve_exposition(body: Callable[[], str]) -> Iterator[int]:
    """Serve ``body()`` (read at each scrape) as text/plain exposition; yields the port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = body().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
