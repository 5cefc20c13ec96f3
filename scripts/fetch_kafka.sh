#!/usr/bin/env bash
# Fetch the local Apache Kafka broker's jars from Maven Central (once; cached under
# ${EBBTIDE_CACHE_DIR:-~/.cache/ebbtide}/kafka-jars/<version>). Idempotent: a second run
# returns at once. Needs Java 17+ and Maven 3.8+ (apt-get install -y openjdk-17-jre-headless maven).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo_root/.venv/bin/python}"
[ -x "$python" ] || python="python3"
command -v java >/dev/null || { echo "error: java not found (install openjdk-17-jre-headless)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "error: mvn not found (install maven)" >&2; exit 1; }
# The security tests make their CA and certificates with the openssl command (Debian: openssl).
if ! command -v openssl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y --no-install-recommends openssl >/dev/null
  else
    echo "warning: openssl not found: the Kafka security tests will fail (install openssl)" >&2
  fi
fi
cd "$repo_root"
exec "$python" -m streams.kafka_jars
