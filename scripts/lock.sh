#!/usr/bin/env bash
# Regenerate requirements.lock: the exact versions and hashes ./scripts/bootstrap.sh installs, resolved
# from pyproject.toml's compatible ranges (runtime and dev dependencies, Python 3.11 on Linux).
# Run after changing a dependency in pyproject.toml; commit both. Uses uv (fetched into a cache).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_HOME=${UV_HOME:-$HOME/.cache/ebbtide/uv}
if [ ! -x "$UV_HOME/bin/uv" ]; then
  python3 -m pip install -q --target "$UV_HOME" 'uv>=0.5,<1'
fi
"$UV_HOME/bin/uv" pip compile pyproject.toml --extra dev --generate-hashes --quiet \
  --python-version 3.11 --python-platform linux --no-header --output-file requirements.lock
echo "lock: $(grep -c '^[a-z]' requirements.lock) packages pinned in requirements.lock"
