#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue, cmd/kueue) from the Go module proxy, for the fidelity
# check of the simulated kueue-hpa baseline against the real Kueue (bench/fidelity_kueue.py). The
# module's CRDs are copied next to the binary (config/components/crd/bases in the Go module cache).
# Idempotent and cached in $EBBTIDE_CACHE_DIR/kube (default ~/.cache/ebbtide): a second run with the
# binary present returns at once. Reuses the machine's Go module and build caches.
set -euo pipefail

KUEUE_VERSION="${EBBTIDE_KUEUE_VERSION:-v0.17.0}"
CACHE_DIR="${EBBTIDE_CACHE_DIR:-$HOME/.cache/ebbtide}/kube"
BIN_DIR="$CACHE_DIR/bin"
BIN="$BIN_DIR/kueue-$KUEUE_VERSION"
CRD_DIR="$CACHE_DIR/kueue-crds-$KUEUE_VERSION"

if [ -x "$BIN" ] && [ -d "$CRD_DIR" ]; then
  ln -sf "$BIN" "$BIN_DIR/kueue"
  ln -sfn "$CRD_DIR" "$CACHE_DIR/kueue-crds"
  echo "build_kueue: cached $BIN"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build_kueue: go not found" >&2; exit 1; }
mkdir -p "$BIN_DIR"
start=$(date +%s)
tmp_bin="$(mktemp -d)"
# go install pkg@version builds with the module's own go.mod (its exact dependency versions).
CGO_ENABLED=0 GOBIN="$tmp_bin" nice -n 10 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
  "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
mod_dir="$(go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION"
rm -rf "$CRD_DIR.tmp" && mkdir -p "$CRD_DIR.tmp"
cp "$mod_dir"/config/components/crd/bases/*.yaml "$CRD_DIR.tmp/"
chmod -R u+w "$CRD_DIR.tmp"
rm -rf "$CRD_DIR" && mv "$CRD_DIR.tmp" "$CRD_DIR"
mv "$tmp_bin/kueue" "$BIN" && rmdir "$tmp_bin"
ln -sf "$BIN" "$BIN_DIR/kueue"
ln -sfn "$CRD_DIR" "$CACHE_DIR/kueue-crds"
echo "build_kueue: built $BIN in $(( $(date +%s) - start )) s"
