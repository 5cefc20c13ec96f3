#!/usr/bin/env bash
# The README's main command: set up the environment, then run the whole loop on the embedded
# broker with a simulated cluster (`ebbtide demo`). Arguments go to `ebbtide demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
exec .venv/bin/ebbtide demo "$@"
