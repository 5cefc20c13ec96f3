"""The local Apache Kafka's classpath: jars fetched once from Maven Central and cached.

``deploy/kafka/pom.xml`` names kafka_2.13 (4.x) and a logging binding; ``mvn
dependency:copy-dependencies`` copies them into ``<cache>/kafka-jars/<version>/``. A marker file
says the copy finished, so a second start does not touch Maven. ``scripts/fetch_kafka.sh`` and
the broker provider both call :func:`ensure_jars`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from streams.broker import BrokerError, cache_root

DEFAULT_KAFKA_VERSION = "4.1.1"
_COMPLETE_MARKER = ".complete"
_REPO_ROOT = Path(__file__).resolve().parents[1]


def kafka_version() -> str:
    return os.environ.get("EBBTIDE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def pom_path() -> Path:
    configured = os.environ.get("EBBTIDE_KAFKA_POM")
    path = Path(configured) if configured else _REPO_ROOT / "deploy" / "kafka" / "pom.xml"
    if not path.exists():
        raise BrokerError(f"EBBTIDE_KAFKA_POM: no pom.xml at {path}")
    return path


def jars_dir(version: str | None = None) -> Path:
    return cache_root() / "kafka-jars" / (version or kafka_version())


def jars_present(version: str | None = None) -> bool:
    return (jars_dir(version) / _COMPLETE_MARKER).exists()


def ensure_jars(version: str | None = None, *, quiet: bool = True) -> Path:
    """Return the folder holding Kafka's classpath, fetching it with Maven the first time."""
    version = version or kafka_version()
    target = jars_dir(version)
    if (target / _COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("mvn not found: install Maven 3.8+ (apt-get install maven) to fetch Kafka's jars")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    command = [
        mvn,
        "-B",
        "-f",
        str(pom_path()),
        "dependency:copy-dependencies",
        f"-Dkafka.version={version}",
        f"-DoutputDirectory={partial}",
        "-DincludeScope=runtime",
    ]
    if quiet:
        command.insert(1, "-q")
    started = time.monotonic()
    result = subprocess.run(command, capture_output=quiet, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stdout or "")[-3000:] + (result.stderr or "")[-2000:] if quiet else ""
        raise BrokerError(
            f"fetching Kafka {version} jars with Maven failed (status {result.returncode}).\n{detail}"
        )
    if not any(partial.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Maven finished but {partial} holds no kafka_2.13 jar")
    (partial / _COMPLETE_MARKER).write_text(f"fetched in {time.monotonic() - started:.1f} s\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def main() -> int:
    """``python -m streams.kafka_jars``: fetch (if needed) and print the folder."""
    started = time.monotonic()
    was_cached = jars_present()
    try:
        folder = ensure_jars(quiet=False)
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state = "cached" if was_cached else "fetched"
    print(f"{folder} ({state}, {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
