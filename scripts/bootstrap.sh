#!/usr/bin/env bash
# Set up a fresh machine for ebbtide: a virtual environment with the package and its dev tools.
# Idempotent and cached: pip's cache lives in ~/.cache/pip, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.ebbtide-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  touch "$stamp"
fi
echo "bootstrap: .venv ready ($(.venv/bin/python --version))"
