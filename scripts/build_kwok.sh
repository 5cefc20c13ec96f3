#!/usr/bin/env bash
# Build KWOK (sigs.k8s.io/kwok, the `kwok` controller binary) from the Go module proxy: it simulates
# GPU nodes (allocatable nvidia.com/gpu) and completes pods after a per-pod duration for the
# Kubernetes e2e tests. Idempotent and cached in $EBBTIDE_CACHE_DIR/kube/bin (default ~/.cache/ebbtide);
# a second run with the binary present returns at once. Reuses the machine's Go module and build caches.
set -euo pipefail

KWOK_VERSION="${EBBTIDE_KWOK_VERSION:-v0.7.0}"
CACHE_DIR="${EBBTIDE_CACHE_DIR:-$HOME/.cache/ebbtide}/kube"
BIN_DIR="$CACHE_DIR/bin"
WORK_DIR="$CACHE_DIR/build-kwok-$KWOK_VERSION"
BIN="$BIN_DIR/kwok-$KWOK_VERSION"

if [ -x "$BIN" ]; then
  ln -sf "$BIN" "$BIN_DIR/kwok"
  echo "build_kwok: cached $BIN"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build_kwok: go not found" >&2; exit 1; }
mkdir -p "$BIN_DIR" "$WORK_DIR"
GOFLAGS="$(go env GOFLAGS) -mod=mod"
export GOFLAGS
cd "$WORK_DIR"
cat > go.mod <<GOMOD
module ebbtide.local/kwok

go 1.24
GOMOD
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
GO
go get "sigs.k8s.io/kwok@$KWOK_VERSION"
go mod tidy -e >/dev/null 2>&1 || true
start=$(date +%s)
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" sigs.k8s.io/kwok/cmd/kwok
mv "$BIN.tmp" "$BIN"
ln -sf "$BIN" "$BIN_DIR/kwok"
echo "build_kwok: built $BIN in $(( $(date +%s) - start )) s"
