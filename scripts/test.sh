#!/usr/bin/env bash
# The README's test command: all set-up on a fresh machine, then the whole suite.
# Installs the Python environment, the real services the tests start (Apache Kafka jars from
# Maven Central, Slurm and Prometheus from Debian, the Kubernetes API server where it builds),
# then runs pytest. Extra arguments go to pytest (e.g. -m kafka to run one tier).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
for installer in scripts/install_*.sh scripts/fetch_*.sh scripts/build_*.sh; do
  [ -f "$installer" ] || continue
  echo "== $installer"
  bash "$installer"
done
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
