"""Running several service runtimes in one process, a daemon thread each (the demo, tests, benches).

``ebbtide run <service>`` runs one runtime on the main thread; the demo and the stream benchmarks
run the four stream services side by side in one process, each in its own thread, until a stop
event is set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from streams.services.runtime import ServiceRuntime

log = logging.getLogger(__name__)


def run_threads(
    runtimes: dict[str, ServiceRuntime],
    stop: threading.Event,
    on_error: Callable[[str, BaseException], None] | None = None,
) -> list[threading.Thread]:
    """Run each runtime in its own daemon thread until ``stop`` is set."""
    threads = []
    for name, runtime in runtimes.items():

        def target(rt: ServiceRuntime = runtime, label: str = name) -> None:
            try:
                rt.run(stop)
            except BaseException as exc:  # report and let the caller stop the rest
                log.exception("service %s failed", label)
                if on_error is not None:
                    on_error(label, exc)

        thread = threading.Thread(target=target, name=f"ebbtide-{name}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads
