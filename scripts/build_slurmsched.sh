#!/usr/bin/env bash
# The scheduler fidelity bench's one extra package: libfaketime (Debian's faketime), which runs
# slurmctld and slurmd on a shared clock faster than the wall (tests/actuators/slurm_cluster.py,
# clock_speedup). Slurm itself comes from scripts/install_slurm.sh. Idempotent.
set -euo pipefail
if command -v faketime >/dev/null 2>&1; then
  echo "build_slurmsched: faketime already installed ($(dpkg-query -W -f='${Version}' faketime 2>/dev/null || echo '?'))"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "build_slurmsched: need root or sudo for apt-get" >&2; exit 1; }
  SUDO="sudo"
fi
$SUDO apt-get install -y -q --no-install-recommends faketime || { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends faketime; }
echo "build_slurmsched: installed faketime $(dpkg-query -W -f='${Version}' faketime)"
