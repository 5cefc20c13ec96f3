#!/usr/bin/env bash
# Build a real kube-apiserver from the Go module proxy (k8s.io/kubernetes, staging modules pinned)
# and install etcd-server from Debian, for the Kubernetes actuator's integration tests.
# Idempotent and cached: the binary lands in $EBBTIDE_CACHE_DIR/kube/bin (default ~/.cache/ebbtide);
# a second run with the binary present returns at once. The Go module and build caches are reused.
set -euo pipefail

K8S_VERSION="${EBBTIDE_K8S_VERSION:-v1.34.4}"
CACHE_DIR="${EBBTIDE_CACHE_DIR:-$HOME/.cache/ebbtide}/kube"
BIN_DIR="$CACHE_DIR/bin"
WORK_DIR="$CACHE_DIR/build-$K8S_VERSION"
BIN="$BIN_DIR/kube-apiserver-$K8S_VERSION"

if ! command -v etcd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends etcd-server || { apt-get update -q && apt-get install -y -q --no-install-recommends etcd-server; }
fi

if [ -x "$BIN" ]; then
  ln -sf "$BIN" "$BIN_DIR/kube-apiserver"
  echo "build_kube_apiserver: cached $BIN"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build_kube_apiserver: go not found" >&2; exit 1; }

mkdir -p "$BIN_DIR" "$WORK_DIR"
# Keep the machine's GOFLAGS (e.g. -buildvcs=false) and add -mod=mod for the generated module.
GOFLAGS="$(go env GOFLAGS) -mod=mod"
export GOFLAGS
cd "$WORK_DIR"
# Staging modules: k8s.io/kubernetes's go.mod points them at ./staging/...; a module outside the
# kubernetes tree must pin them to their published versions (v0.<minor>.<patch>).
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
GOMOD_FILE="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
cat > go.mod <<GOMOD
module ebbtide.local/kubeapiserver

go 1.24

require k8s.io/kubernetes $K8S_VERSION
GOMOD
grep -oE '^\s*k8s.io/[a-z0-9-]+ => \./staging' "$GOMOD_FILE" | awk '{print $1}' | sort -u | while read -r mod; do
  echo "replace $mod => $mod $STAGING_VERSION" >> go.mod
done
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
go mod tidy -e >/dev/null 2>&1 || true
go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION"
start=$(date +%s)
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$BIN.tmp" "$BIN"
ln -sf "$BIN" "$BIN_DIR/kube-apiserver"
echo "build_kube_apiserver: built $BIN in $(( $(date +%s) - start )) s"
