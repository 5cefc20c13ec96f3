#!/usr/bin/env bash
# Tools for the deployment and dashboard checks (tests/observability/), idempotent and cached:
#  - helm, built from its Go module through the module proxy (no prebuilt binary can be fetched
#    here), into ~/.cache/ebbtide/bin/helm-<version>, linked as ~/.cache/ebbtide/bin/helm;
#  - kubernetes-validate from PyPI into .venv: the Kubernetes OpenAPI schemas, bundled, so the
#    rendered manifests are validated offline;
#  - promql-parser from PyPI into .venv: a real PromQL parser for the dashboard and rule checks.
# A fresh build takes about 4 minutes on 2 cores (module download plus compile); later runs
# find the binary and return at once. Override the version with EBBTIDE_HELM_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=${EBBTIDE_HELM_VERSION:-v3.22.0}
CACHE=${EBBTIDE_CACHE_DIR:-$HOME/.cache/ebbtide}
BIN="$CACHE/bin"
TARGET="$BIN/helm-$HELM_VERSION"

if [ -x "$TARGET" ]; then
    echo "helm $HELM_VERSION already built: $TARGET"
else
    command -v go >/dev/null || { echo "install_deploy_tools: Go is needed to build helm (go install)" >&2; exit 1; }
    mkdir -p "$BIN"
    start=$(date +%s)
    tmp=$(mktemp -d)
    # The version string helm reports is set the way helm's own Makefile sets it.
    GOBIN="$tmp" go install \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv "$tmp/helm" "$TARGET"
    rmdir "$tmp"
    echo "helm $HELM_VERSION built in $(( $(date +%s) - start )) s: $TARGET"
fi
ln -sfn "$TARGET" "$BIN/helm"
"$BIN/helm" version --short

PY=.venv/bin/python
if [ -x "$PY" ]; then
    if ! "$PY" -c "import kubernetes_validate" 2>/dev/null; then
        .venv/bin/pip install -q 'kubernetes-validate>=1.33,<2'
    fi
    if ! "$PY" -c "import promql_parser" 2>/dev/null; then
        .venv/bin/pip install -q 'promql-parser>=0.11,<1'
    fi
    echo "kubernetes-validate $("$PY" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))'), promql-parser $("$PY" -c 'import importlib.metadata as m; print(m.version("promql-parser"))') in .venv"
else
    echo "install_deploy_tools: no .venv yet (run scripts/bootstrap.sh); skipped the Python validators" >&2
fi
