#!/usr/bin/env bash
# Build a real Kubernetes control plane from the Go module proxy (k8s.io/kubernetes, staging modules
# pinned): kube-apiserver, kube-controller-manager (the Job controller) and kube-scheduler, and install
# etcd-server from Debian, for the Kubernetes actuator's and source's integration and e2e tests.
# Idempotent and cached: each binary lands in $EBBTIDE_CACHE_DIR/kube/bin (default ~/.cache/ebbtide);
# a binary already there is not rebuilt (unless it does not report $K8S_VERSION: builds before the
# version was stamped said v0.0.0-master, which clients that parse the server's /version, Kueue's
# manager among them, refuse). One module and one Go build cache serve all three builds.
set -euo pipefail

K8S_VERSION="${EBBTIDE_K8S_VERSION:-v1.34.4}"
CACHE_DIR="${EBBTIDE_CACHE_DIR:-$HOME/.cache/ebbtide}/kube"
BIN_DIR="$CACHE_DIR/bin"
WORK_DIR="$CACHE_DIR/build-$K8S_VERSION"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)

if ! command -v etcd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends etcd-server || { apt-get update -q && apt-get install -y -q --no-install-recommends etcd-server; }
fi

missing=()
for component in "${COMPONENTS[@]}"; do
  if [ -x "$BIN_DIR/$component-$K8S_VERSION" ] && "$BIN_DIR/$component-$K8S_VERSION" --version 2>/dev/null | grep -qF "$K8S_VERSION"; then
    ln -sf "$BIN_DIR/$component-$K8S_VERSION" "$BIN_DIR/$component"
    echo "build_kube_apiserver: cached $BIN_DIR/$component-$K8S_VERSION"
  else
    missing+=("$component")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0
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
{
  echo '//go:build tools'
  echo
  echo 'package tools'
  echo
  for component in "${COMPONENTS[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$component\""; done
} > tools.go
go mod tidy -e >/dev/null 2>&1 || true
for component in "${missing[@]}"; do
  go get "k8s.io/kubernetes/cmd/$component@$K8S_VERSION"
done
# What /version and --version report (k8s.io/component-base/version), as a release build would.
minor="${K8S_VERSION#v1.}"
VERSION_FLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
VERSION_FLAGS="$VERSION_FLAGS -X k8s.io/component-base/version.gitMinor=${minor%%.*} -X k8s.io/component-base/version.gitTreeState=clean"
for component in "${missing[@]}"; do
  bin="$BIN_DIR/$component-$K8S_VERSION"
  start=$(date +%s)
  CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w $VERSION_FLAGS" -o "$bin.tmp" "k8s.io/kubernetes/cmd/$component"
  mv "$bin.tmp" "$bin"
  ln -sf "$bin" "$BIN_DIR/$component"
  echo "build_kube_apiserver: built $bin in $(( $(date +%s) - start )) s"
done
