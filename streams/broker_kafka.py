"""The local Apache Kafka 4.x broker: KRaft, one node, started from the cached jars.

(:func:`start_local_kafka_cluster`: three such nodes on loopback, one quorum, for the tests.)
Used by the tests and by ``ebbtide broker up`` when no external cluster or Docker engine is
there. The log directory persists (default ``<cache>/kafka-data/<name>``), so a broker stopped
and started again on the same directory keeps every acknowledged record; the ports it used are
remembered there and reused when free, so clients keep their bootstrap address.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from streams.broker import (
    READY_TIMEOUT_S,
    BrokerError,
    BrokerHandle,
    cache_root,
    free_port,
    handle_when_ready,
    log_tail,
    port_is_free,
    stop_process_group,
    stop_with_parent,
)
from streams.kafka_jars import ensure_jars

DEFAULT_HEAP = "-Xmx512m"
_PORTS_FILE = "ebbtide-ports.json"
_CLASS_ARCHIVE = "kafka-classes.jsa"
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = warn
"""


def default_data_dir(name: str) -> Path:
    return cache_root() / "kafka-data" / name


def _new_cluster_id() -> str:
    """Kafka's cluster id format: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's own ``Uuid.randomUuid``, never one that starts with '-': the storage tool's
    argument parser would read it as an option (1 start in 64 failed that way)."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not candidate.startswith("-"):
            return candidate


def _choose_ports(data_dir: Path, port: int | None) -> tuple[int, int]:
    """(client port, controller port): the requested or previously used ones when free, else new."""
    remembered: dict[str, int] = {}
    ports_file = data_dir / _PORTS_FILE
    if ports_file.exists():
        remembered = json.loads(ports_file.read_text())
    client = port or remembered.get("client")
    if client is None or not port_is_free(client):
        if port is not None:
            raise BrokerError(f"--port: port {port} is already in use")
        client = free_port()
    controller = remembered.get("controller")
    if controller is None or controller == client or not port_is_free(controller):
        controller = free_port()
        while controller == client:
            controller = free_port()
    ports_file.write_text(json.dumps({"client": client, "controller": controller}))
    return client, controller


def server_properties(
    *,
    log_dir: Path,
    client_port: int,
    controller_port: int,
    node_id: int = 1,
    voters: str | None = None,
    replication: int = 1,
) -> str:
    """One node's configuration: alone by default; in a cluster its ``node_id``, the quorum's
    ``voters`` (``id@host:port,...``) and ``replication`` for every topic (min ISR one fewer, at most 2)."""
    rf, min_isr = str(replication), str(max(1, min(2, replication - 1)))
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "log.retention.check.interval.ms": "60000",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerError("java not found: install a Java 17+ runtime (openjdk-17-jre-headless)")
    return found


def _class_archive_options(jars: Path, *, dump: bool) -> list[str]:
    """Class-data sharing: the first broker run dumps the classes it loaded into an archive next
    to the jars (at exit, under a name of its own); later runs map it and start in about half the
    time. A missing or mismatched archive is ignored by the JVM (``-Xshare:auto``).
    ``EBBTIDE_KAFKA_CDS=0`` turns it off."""
    if os.environ.get("EBBTIDE_KAFKA_CDS", "1") == "0":
        return []
    archive = jars / _CLASS_ARCHIVE
    for dumped in sorted(jars.glob(f"{_CLASS_ARCHIVE}.*.tmp")):
        if archive.exists():
            dumped.unlink(missing_ok=True)
        elif _dump_finished(dumped):
            dumped.replace(archive)
    if archive.exists():
        return ["-Xshare:auto", f"-XX:SharedArchiveFile={archive}"]
    if dump:
        return [
            f"-XX:ArchiveClassesAtExit={jars / f'{_CLASS_ARCHIVE}.{os.getpid()}-{uuid.uuid4().hex[:6]}.tmp'}"
        ]
    return []


def _dump_finished(path: Path) -> bool:
    """A dump is whole once no live JVM writes it: its writer's pid is gone (or it is an hour old)."""
    try:
        age_s = time.time() - path.stat().st_mtime
    except OSError:
        return False
    return age_s > 3600 or not any(path.name in cmdline for cmdline in _java_cmdlines())


def _java_cmdlines() -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = proc.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ArchiveClassesAtExit" in text:
            found.append(text)
    return found


def _jvm_options(data_dir: Path, extra: list[str] | None = None) -> list[str]:
    heap = os.environ.get("EBBTIDE_KAFKA_HEAP", DEFAULT_HEAP).split()
    return [
        *heap,
        "-Xss512k",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={data_dir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={data_dir}",
        *(extra or []),
    ]


def start_local_kafka(
    name: str = "default",
    *,
    data_dir: Path | None = None,
    port: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    log_level: str = "INFO",
    die_with_parent: bool = False,
) -> BrokerHandle:
    """Start (formatting the log directory the first time) and wait until the broker answers."""
    data_dir = (data_dir or default_data_dir(name)).expanduser().resolve()
    log_dir = data_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    jars = ensure_jars()
    client_port, controller_port = _choose_ports(data_dir, port)
    config = data_dir / "server.properties"
    config.write_text(
        server_properties(log_dir=log_dir, client_port=client_port, controller_port=controller_port)
    )
    (data_dir / "log4j2.properties").write_text(_LOG4J2.format(level=log_level))
    java = _java()
    broker_log = data_dir / "broker.log"
    if not (log_dir / "meta.properties").exists():
        _format_log_dir(java, jars, data_dir, config)
    process = _launch(java, jars, data_dir, config, broker_log, die_with_parent)
    return handle_when_ready(
        process,
        bootstrap=f"127.0.0.1:{client_port}",
        kind="kafka",
        transactions=True,
        name=name,
        data_dir=data_dir,
        log_file=broker_log,
        timeout_s=ready_timeout_s,
        what=f"Apache Kafka {name!r}",
    )


def start_local_kafka_cluster(
    name: str,
    *,
    data_dir: Path,
    nodes: int = 3,
    ready_timeout_s: float = READY_TIMEOUT_S,
    log_level: str = "WARN",
    die_with_parent: bool = False,
) -> list[BrokerHandle]:
    """``nodes`` combined broker-controller nodes on loopback, one KRaft quorum, every topic
    replicated on all of them (``min.insync.replicas`` 2): one handle per node (its own client
    port; clients bootstrap from all of them). Formatted afresh: for tests."""
    jars, java = ensure_jars(), _java()
    ports = [(free_port(), free_port()) for _ in range(nodes)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{ctl}" for i, (_, ctl) in enumerate(ports))
    cluster_id = _new_cluster_id()
    launched: list[tuple[subprocess.Popen[bytes], Path, int]] = []
    try:
        for i, (client, ctl) in enumerate(ports):
            node_dir = (data_dir / f"node{i + 1}").resolve()
            (node_dir / "log").mkdir(parents=True, exist_ok=True)
            config = node_dir / "server.properties"
            config.write_text(
                server_properties(
                    log_dir=node_dir / "log",
                    client_port=client,
                    controller_port=ctl,
                    node_id=i + 1,
                    voters=voters,
                    replication=nodes,
                )
            )
            (node_dir / "log4j2.properties").write_text(_LOG4J2.format(level=log_level))
            _format_log_dir(java, jars, node_dir, config, cluster_id)
            process = _launch(java, jars, node_dir, config, node_dir / "broker.log", die_with_parent)
            launched.append((process, node_dir, client))
        return [
            handle_when_ready(
                process,
                bootstrap=f"127.0.0.1:{client}",
                kind="kafka",
                transactions=True,
                name=f"{name}-{i + 1}",
                data_dir=node_dir,
                log_file=node_dir / "broker.log",
                timeout_s=ready_timeout_s,
                what=f"Apache Kafka {name!r} node {i + 1}",
            )
            for i, (process, node_dir, client) in enumerate(launched)
        ]
    except BaseException:
        for process, _, _ in launched:
            if process.poll() is None:
                stop_process_group(process.pid, timeout_s=5.0, process=process)
        raise


def _format_log_dir(
    java: str,
    jars: Path,
    data_dir: Path,
    config: Path,
    cluster_id: str | None = None,
    extra: tuple[str, ...] = (),
) -> None:
    """KRaft's first start: ``kafka-storage format`` with a new cluster id (or the cluster's);
    ``extra`` arguments too (``--add-scram 'SCRAM-SHA-512=[name=...,password=...]'``)."""
    formatted = subprocess.run(
        [
            java,
            *_jvm_options(data_dir, _class_archive_options(jars, dump=False)),
            "-cp",
            f"{jars}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id or _new_cluster_id(),
            "-c",
            str(config),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if formatted.returncode != 0:
        raise BrokerError(
            f"formatting the Kafka log directory {data_dir / 'log'} failed:\n"
            f"{formatted.stdout}{formatted.stderr}"
        )


def _launch(
    java: str, jars: Path, data_dir: Path, config: Path, broker_log: Path, die_with_parent: bool
) -> subprocess.Popen[bytes]:
    """The broker's JVM in its own session, its output appended to ``broker_log``."""
    with broker_log.open("ab") as out:
        return subprocess.Popen(
            [
                java,
                *_jvm_options(data_dir, _class_archive_options(jars, dump=True)),
                "-cp",
                f"{jars}/*",
                "kafka.Kafka",
                str(config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=stop_with_parent() if die_with_parent else None,
            cwd=data_dir,
        )


__all__ = [
    "default_data_dir",
    "log_tail",
    "server_properties",
    "start_local_kafka",
    "start_local_kafka_cluster",
]
