#!/usr/bin/env bash
# Install Prometheus and promtool from Debian (idempotent): used by the alert-rule tests
# (promtool check/test rules) and the real scrape test (marker `prometheus`).
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    echo "prometheus already installed: $(prometheus --version 2>&1 | head -n1)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# apt's lock may be held by another install running at the same time: wait for it.
APT_OPTS=(-o DPkg::Lock::Timeout=600)
start=$(date +%s)
$SUDO apt-get "${APT_OPTS[@]}" update -qq
$SUDO apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends prometheus
# The Debian package starts a system service where systemd runs; the tests start their own
# Prometheus on a free port, so a running system one is only noise (nothing to stop in a container).
echo "prometheus installed in $(( $(date +%s) - start )) s: $(prometheus --version 2>&1 | head -n1)"
