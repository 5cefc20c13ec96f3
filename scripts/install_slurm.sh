#!/usr/bin/env bash
# Install real Slurm daemons (slurmctld, slurmd, slurmrestd, slurmdbd with MariaDB for accounting)
# and munge from Debian, idempotently.
# Used by tests/actuators fixtures (which start the daemons themselves) and by .ci/run.
set -euo pipefail

slurm_version() { dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null || echo "?"; }

need=()
for bin in slurmctld slurmd slurmrestd slurmdbd mariadbd munged squeue scontrol sbatch sacct; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || need+=("$bin")
done
# auth/jwt (for slurmrestd tokens) comes in its own package.
ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || need+=("auth_jwt.so")
if [ ${#need[@]} -eq 0 ]; then
  echo "install_slurm: already installed (slurm-wlm $(slurm_version))"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install_slurm: need root or sudo for apt-get" >&2; exit 1; }
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# apt-get update once per machine (its lists are reused afterwards).
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial || true)" ]; then
  $SUDO apt-get update -q
fi
if ! $SUDO apt-get install -y -q --no-install-recommends slurm-wlm slurm-wlm-jwt-plugin munge slurmrestd slurmdbd mariadb-server; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends slurm-wlm slurm-wlm-jwt-plugin munge slurmrestd \
    slurmdbd mariadb-server
fi
echo "install_slurm: installed slurm-wlm $(slurm_version)"
