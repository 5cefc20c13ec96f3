"""A started broker remembered across processes, so ``ebbtide broker up|status|down`` work apart.

One small JSON file per broker name under ``<cache>/brokers/`` holds the kind, bootstrap
address, pid, port and log directory. ``down`` checks that the pid still belongs to that broker
(its command line) before signalling it, so a reused pid is never killed.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from streams.broker import BrokerHandle, answers_metadata, cache_root, pid_alive, stop_process_group

_COMMAND_MARKERS = {"kafka": "kafka.Kafka", "tansu": "tansu"}


@dataclass(frozen=True)
class BrokerState:
    name: str
    kind: str
    bootstrap: str
    transactions: bool
    pid: int | None
    port: int
    data_dir: str | None
    log_file: str | None
    started_at: str


def state_dir() -> Path:
    return cache_root() / "brokers"


def state_file(name: str) -> Path:
    return state_dir() / f"{name}.json"


def save_state(handle: BrokerHandle) -> BrokerState:
    state = BrokerState(
        name=handle.name,
        kind=handle.kind,
        bootstrap=handle.bootstrap,
        transactions=handle.transactions,
        pid=handle.pid,
        port=int(handle.bootstrap.rsplit(":", 1)[1]),
        data_dir=str(handle.data_dir) if handle.data_dir else None,
        log_file=str(handle.log_file) if handle.log_file else None,
        started_at=datetime.now(UTC).isoformat(),
    )
    path = state_file(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)
    return state


def load_state(name: str) -> BrokerState | None:
    path = state_file(name)
    if not path.exists():
        return None
    try:
        return BrokerState(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        path.unlink(missing_ok=True)
        return None


def clear_state(name: str) -> None:
    state_file(name).unlink(missing_ok=True)


def process_is_broker(state: BrokerState) -> bool:
    """The recorded pid is alive and its command line is the broker we started."""
    if state.pid is None or not pid_alive(state.pid):
        return False
    marker = _COMMAND_MARKERS.get(state.kind)
    if marker is None:
        return True
    try:
        cmdline = (
            Path(f"/proc/{state.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return False
    return marker in cmdline


def describe(name: str, timeout_s: float = 3.0) -> dict[str, object]:
    """What ``ebbtide broker status`` prints: the recorded state, whether the process lives and answers."""
    state = load_state(name)
    if state is None:
        return {"name": name, "recorded": False, "running": False, "answers": False}
    running = process_is_broker(state) if state.pid is not None else True
    answers = running and answers_metadata(state.bootstrap, timeout_s=timeout_s)
    return {**asdict(state), "recorded": True, "running": running, "answers": answers}


def stop_recorded(name: str) -> BrokerState | None:
    """Stop the broker recorded under ``name`` (if its process is still ours) and forget it."""
    state = load_state(name)
    if state is None:
        return None
    if state.pid is not None and process_is_broker(state):
        with contextlib.suppress(ProcessLookupError):
            stop_process_group(state.pid)
    clear_state(name)
    return state
