"""The chart's values schema is strict (a misspelt key fails the render, naming it) and covers every
value the templates read; NOTES.txt tells a user what to do after the install. Real helm, no mocks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "ebbtide"
SCHEMA = CHART / "values.schema.json"
KUBE_VERSION = "1.33.0"
NAMESPACE = "gpu-loop"
MONITORING_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")

# Objects of the schema that are open on purpose: Helm's own `global`, the ClusterState the services
# validate themselves, and the parts of a Kubernetes affinity, passed on as they are.
OPEN_OBJECTS = {
    "/global",
    "/clusterSpec",
    "/definitions/affinity/nodeAffinity",
    "/definitions/affinity/podAffinity",
    "/definitions/affinity/podAntiAffinity",
}


def template(
    helm: str, *overrides: str, api_versions: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    args = [helm, "template", "ebbtide", str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for api in api_versions:
        args += ["--api-versions", api]
    for override in overrides:
        args += ["--set", override]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def object_schemas(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (path, subschema) of the schema that describes an object."""
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for key, value in node.items():
            if key in ("properties", "definitions"):
                for name, child in value.items():
                    child_path = f"{path}/{name}" if key == "properties" else f"/definitions/{name}"
                    yield from object_schemas(child, child_path)
            elif key in ("items", "additionalProperties"):
                yield from object_schemas(value, path)
            # `if`/`then` are conditions on the object they sit in, not objects of their own.


def test_defaults_render(helm: str) -> None:
    for api_versions in ((), MONITORING_APIS):
        result = template(helm, api_versions=api_versions)
        assert result.returncode == 0, result.stderr
        assert [d for d in yaml.safe_load_all(result.stdout) if d]


def test_misspelt_keys_fail_naming_the_key(helm: str) -> None:
    cases = {
        "kafka.bootstrapServer=x": ("/kafka", "bootstrapServer"),
        "clustr=demo": ("at ''", "clustr"),
        "components.optimizer.replica=2": ("/components/optimizer", "replica"),
        "components.optimiser.enabled=false": ("/components", "optimiser"),
        "serviceMonitor.intervall=1m": ("/serviceMonitor", "intervall"),
        "probes.liveness.periodSecond=5": ("/probes/liveness", "periodSecond"),
        "monitoring.runbookBaseURL=https://wiki.example.com/x": ("/monitoring", "runbookBaseURL"),
        "securityContext.readOnlyRootFileSystem=true": ("/securityContext", "readOnlyRootFileSystem"),
        "components.state.resources.request.cpu=1": ("/components/state/resources", "request"),
    }
    for override, (where, key) in cases.items():
        result = template(helm, override)
        assert result.returncode != 0, f"{override} rendered"
        message = result.stderr
        assert "additional properties" in message and f"'{key}'" in message, (override, message)
        assert where in message, (override, message)


def test_the_right_spelling_still_renders(helm: str) -> None:
    result = template(
        helm,
        "kafka.bootstrapServers=broker-0:9092\\,broker-1:9092",
        "components.optimizer.replicas=1",
        "serviceMonitor.interval=1m",
        "probes.liveness.periodSeconds=5",
        "monitoring.runbookBaseUrl=https://wiki.example.com/x",
        "securityContext.readOnlyRootFilesystem=true",
        "components.state.resources.requests.cpu=1",
        "components.collector.resources.limits.nvidia\\.com/gpu=0",
        "nodeSelector.pool=a100",
        "global.imageRegistry=registry.example.com",
    )
    assert result.returncode == 0, result.stderr
    runbook = template(helm, "monitoring.runbookBaseUrl=not a url")
    assert runbook.returncode != 0 and "/monitoring/runbookBaseUrl" in runbook.stderr


def test_every_object_of_the_schema_is_closed() -> None:
    """additionalProperties: false wherever an object lists its keys; typed maps (a schema for the
    values) where the keys are free (env, labels, resources); open only where listed above."""
    problems = []
    seen = set()
    for path, node in object_schemas(schema()):
        seen.add(path)
        extra = node.get("additionalProperties")
        if "properties" in node:
            if extra is not False:
                problems.append(f"{path}: lists properties but does not set additionalProperties: false")
        elif path in OPEN_OBJECTS:
            assert extra in (None, True), path
        elif not isinstance(extra, dict):
            problems.append(f"{path}: a map without a schema for its values")
    assert not problems, "\n".join(problems)
    assert seen >= OPEN_OBJECTS


def test_the_schema_has_every_key_the_templates_and_values_use() -> None:
    """Every `.Values.a.b` a template reads, and every key of values.yaml, is a property the schema
    lists (so the strict schema rejects no key the chart needs)."""
    root = schema()
    definitions = root["definitions"]

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = definitions[node["$ref"].rsplit("/", 1)[1]]
        return node

    def lookup(path: list[str]) -> bool:
        node = root
        for key in path:
            node = resolve(node)
            props = node.get("properties", {})
            if key not in props:
                extra = node.get("additionalProperties")
                return isinstance(extra, dict) or extra is True  # a map: any key
            node = props[key]
        return True

    used: set[tuple[str, ...]] = set()
    for template_file in (CHART / "templates").iterdir():
        text = template_file.read_text()
        for match in re.finditer(r"\.Values((?:\.[A-Za-z_]\w*)+)", text):
            used.add(tuple(match.group(1).lstrip(".").split(".")))
        for match in re.finditer(r"\$v((?:\.[A-Za-z_]\w*)+)", text):
            used.add(tuple(match.group(1).lstrip(".").split(".")))
        for match in re.finditer(r"\$c((?:\.[A-Za-z_]\w*)+)", text):
            used.add(("components", "optimizer", *match.group(1).lstrip(".").split(".")))
    assert ("monitoring", "runbookBaseUrl") in used
    missing = sorted(".".join(p) for p in used if not lookup(list(p)))
    assert not missing, f"templates read values the schema does not list: {missing}"

    def keys(values: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        if isinstance(values, dict):
            for key, value in values.items():
                yield (*prefix, key)
                yield from keys(value, (*prefix, key))

    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    unlisted = sorted(".".join(p) for p in keys(defaults) if not lookup(list(p)))
    assert not unlisted, f"values.yaml keys the schema does not list: {unlisted}"


def notes(helm: str, tmp_path: Path, *overrides: str, api_versions: tuple[str, ...] = ()) -> str:
    """NOTES.txt as `helm install` prints it. helm template does not render NOTES.txt, and an install
    dry run cannot take --kube-version, so a copy of the chart renders it into a ConfigMap."""
    chart = tmp_path / "ebbtide"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
        (chart / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
            'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
        )
    args = [*overrides]
    result = subprocess.run(
        [helm, "template", "ebbtide", str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
         "--show-only", "templates/zz-notes.yaml",
         *[a for api in api_versions for a in ("--api-versions", api)],
         *[a for o in args for a in ("--set", o)]],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text: str = yaml.safe_load(result.stdout)["data"]["notes"]
    return text


def test_notes_say_what_to_do_after_the_install(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, "prometheusRule.enabled=true", api_versions=MONITORING_APIS)
    for expected in (
        f"kubectl -n {NAMESPACE} get deploy,daemonset,pods -l app.kubernetes.io/instance=ebbtide",
        f"kubectl -n {NAMESPACE} rollout status deploy/ebbtide-optimizer",
        f"kubectl -n {NAMESPACE} logs deploy/ebbtide-optimizer",
        f"kubectl -n {NAMESPACE} port-forward svc/ebbtide-optimizer 9095",
        "curl -s localhost:9095/metrics",
        'ServiceMonitor "ebbtide"',
        'PrometheusRule "ebbtide"',
        "--topic ebbtide.allocations",
        f"kubectl -n {NAMESPACE} logs deploy/ebbtide-actuator | grep actuation",
        "describe job",
        "dry-run backend",
        "https://github.com/ebbtide/ebbtide/blob/main/deploy/RUNBOOK.md",
    ):
        assert expected in text, f"{expected!r} not in NOTES:\n{text}"
    assert "NOT CREATED" not in text


def test_notes_say_when_the_monitoring_objects_were_skipped(helm: str, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, "prometheusRule.enabled=true",
                 "components.actuator.env.EBBTIDE_ACTUATOR__BACKEND=kubernetes",
                 "monitoring.runbookBaseUrl=https://wiki.example.com/ebbtide")  # fmt: skip
    assert "NOT CREATED: serviceMonitor.enabled is true" in text
    assert "NOT CREATED: prometheusRule.enabled is true" in text
    assert "kubernetes backend" in text
    assert "https://wiki.example.com/ebbtide" in text
    off = notes(helm, tmp_path, "serviceMonitor.enabled=false")
    assert "NOT CREATED" not in off and "prometheusRule.enabled=true" in off
