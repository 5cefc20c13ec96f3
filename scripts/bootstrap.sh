#!/usr/bin/env bash
# Set up a fresh machine for ebbtide: a virtual environment with the exact versions of
# requirements.lock (hash-checked), then the package itself, editable, without resolving anything.
# Idempotent and cached: pip's cache lives in ~/.cache/pip, so a second run takes seconds.
# The lock comes from pyproject.toml's ranges through ./scripts/lock.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.ebbtide-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q --require-hashes -r requirements.lock
  .venv/bin/pip install -q --no-deps -e .
  touch "$stamp"
fi
echo "bootstrap: .venv ready ($(.venv/bin/python --version))"
