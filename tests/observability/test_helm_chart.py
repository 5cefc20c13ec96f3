"""The Helm chart (deploy/helm/ebbtide) renders manifests that the Kubernetes OpenAPI schema accepts.

helm renders the chart (built by scripts/install_deploy_tools.sh); kubernetes-validate checks each
manifest against the bundled schema of KUBE_VERSION, strictly (unknown fields are errors). The
Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule) have no schema there: they are skipped
in schema validation, explicitly, and checked structurally against the Services they select.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.health import HEALTH_PATH
from streams.metric_series import COMPONENTS, DEFAULT_METRICS_PORT

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate missing: run scripts/install_deploy_tools.sh"
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "ebbtide"
KUBE_VERSION = "1.33.0"
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
NAMESPACE = "gpu-loop"
CHART_COMPONENTS = (*COMPONENTS, "source")
"""The chart also runs the cluster source (`ebbtide run source`, Kubernetes backend)."""
KUBE_COMPONENTS = {"actuator", "source"}


MONITORING_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")
"""The Prometheus Operator's APIs, as `helm template --api-versions` names them: the chart renders a
ServiceMonitor or PrometheusRule only where the cluster has its API."""


def template_args(
    helm: str, *overrides: str, release: str = "ebbtide", api_versions: Sequence[str] = MONITORING_APIS
) -> list[str]:
    args = [helm, "template", release, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for api in api_versions:
        args += ["--api-versions", api]
    for override in overrides:
        args += ["--set", override]
    return args


def render(
    helm: str, *overrides: str, release: str = "ebbtide", api_versions: Sequence[str] = MONITORING_APIS
) -> list[dict[str, Any]]:
    """The chart's manifests, rendered for a cluster that has the Prometheus Operator's CRDs unless
    ``api_versions`` says otherwise."""
    args = template_args(helm, *overrides, release=release, api_versions=api_versions)
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def schema_errors(docs: Sequence[dict[str, Any]]) -> list[str]:
    errors = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']} {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{doc['kind']} ({doc['apiVersion']}): no schema and not a known CRD")
    return errors


def by_kind(docs: Sequence[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def workloads(docs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Component name -> its Deployment or DaemonSet."""
    found = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            found[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = doc
    return found


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(workload: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(workload)["env"] if "value" in e}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def default_docs(helm: str) -> list[dict[str, Any]]:
    return render(helm)


def test_helm_lint(helm: str) -> None:
    result = subprocess.run([helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_manifests_match_the_kubernetes_schema(
    helm: str, default_docs: list[dict[str, Any]]
) -> None:
    variants = {
        "defaults": default_docs,
        "everything on": render(
            helm,
            "prometheusRule.enabled=true",
            "clusterSpec.cluster=demo",
            "workloadNamespaces={inference,batch}",
            "components.collector.kind=Deployment",
            "components.collector.replicas=1",
            "components.collector.runtimeClassName=nvidia",
            "env.EBBTIDE_STATE__MAX_HISTORY_STEPS=96",
            release="prod",
        ),
        "minimal": render(
            helm,
            "serviceMonitor.enabled=false",
            "rbac.create=false",
            "priorityClasses.create=false",
            "components.collector.enabled=false",
        ),
    }
    for name, docs in variants.items():
        errors = schema_errors(docs)
        assert not errors, f"{name}:\n" + "\n".join(errors)
    kinds = {d["kind"] for d in default_docs}
    assert {
        "Deployment",
        "DaemonSet",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ServiceMonitor",
    } <= kinds


def test_the_schema_check_rejects_a_broken_manifest(default_docs: list[dict[str, Any]]) -> None:
    broken = copy.deepcopy(workloads(default_docs)["optimizer"])
    container(broken)["ports"][0]["containerPort"] = "metrics"
    container(broken)["livenessProbe"]["httpGet"]["paht"] = "/metrics"
    errors = schema_errors([broken])
    assert len(errors) == 1 and "Deployment/ebbtide-optimizer" in errors[0]


def test_every_service_runs_with_kafka_metrics_and_probes(default_docs: list[dict[str, Any]]) -> None:
    found = workloads(default_docs)
    assert set(found) == set(CHART_COMPONENTS)
    assert found["collector"]["kind"] == "DaemonSet"
    for name, workload in found.items():
        c = container(workload)
        assert c["args"] == ["run", name]
        env = env_of(workload)
        assert env["EBBTIDE_KAFKA__BOOTSTRAP_SERVERS"] == env["EBBTIDE_KAFKA_BOOTSTRAP"] == "kafka:9092"
        assert env["EBBTIDE_METRICS_PORT"] == str(DEFAULT_METRICS_PORT)
        assert c["ports"] == [{"name": "metrics", "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"}]
        for probe in ("startupProbe", "readinessProbe"):
            assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, (name, probe)
        # liveness follows the loop's progress, not just the metrics thread
        assert c["livenessProbe"]["httpGet"] == {"path": HEALTH_PATH, "port": "metrics"}, name
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"], name
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert workload["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_the_env_the_chart_sets_is_accepted_by_the_settings(
    default_docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every EBBTIDE_* value the chart gives a service loads through ebbtide.settings without error."""
    settings = pytest.importorskip("ebbtide.settings")
    for name, workload in workloads(default_docs).items():
        with monkeypatch.context() as env:
            for key, value in env_of(workload).items():
                env.setenv(key, value)
            loaded = settings.load_settings()
        assert loaded.metrics_port == DEFAULT_METRICS_PORT, name
        assert loaded.kafka.bootstrap_servers == "kafka:9092", name


def test_service_monitor_selects_every_metrics_service(default_docs: list[dict[str, Any]]) -> None:
    (monitor,) = by_kind(default_docs, "ServiceMonitor").values()
    services = by_kind(default_docs, "Service")
    assert len(services) == len(CHART_COMPONENTS)
    selector = monitor["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    pods = {name: w["spec"]["template"]["metadata"]["labels"] for name, w in workloads(default_docs).items()}
    for name, service in services.items():
        assert selects(selector, service["metadata"]["labels"]), f"ServiceMonitor misses Service {name}"
        assert {p["name"] for p in service["spec"]["ports"]} == ports == {"metrics"}
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        assert selects(service["spec"]["selector"], pods[component]), f"Service {name} selects no pod"
        others = [
            c for c, labels in pods.items() if c != component and selects(service["spec"]["selector"], labels)
        ]
        assert not others, f"Service {name} also selects {others}"


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples a list of RBAC rules allows."""
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [""])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def test_only_the_actuator_and_the_source_get_kubernetes_rights(default_docs: list[dict[str, Any]]) -> None:
    roles, cluster_roles = by_kind(default_docs, "Role"), by_kind(default_docs, "ClusterRole")
    assert len(roles) == len(cluster_roles) == 2
    bound: dict[str, set[tuple[str, str, str]]] = {}
    for kind, targets in (("RoleBinding", roles), ("ClusterRoleBinding", cluster_roles)):
        for binding in by_kind(default_docs, kind).values():
            rules = next(r for r in targets.values() if r["metadata"]["name"] == binding["roleRef"]["name"])
            for subject in binding["subjects"]:
                bound.setdefault(subject["name"], set()).update(grants(rules["rules"]))
    for name, workload in workloads(default_docs).items():
        pod = workload["spec"]["template"]["spec"]
        if name in KUBE_COMPONENTS:
            assert pod["serviceAccountName"] in bound and pod["automountServiceAccountToken"] is True
            assert env_of(workload)["EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES"] == f'["{NAMESPACE}"]'
        else:
            assert pod["serviceAccountName"] not in bound and pod["automountServiceAccountToken"] is False
    actuator = next(g for n, g in bound.items() if n.endswith("actuator"))
    source = next(g for n, g in bound.items() if n.endswith("source"))
    assert ("apps", "deployments/scale", "patch") in actuator and ("batch", "jobs", "patch") in actuator
    assert {v for _, _, v in source} == {"list", "watch", "create"}, "the source only reads"
    for granted in (actuator, source):
        # create: only Events (decisions and invalid specs shown on Jobs); never delete anything
        assert {(g, r) for g, r, v in granted if v == "create"} == {("", "events")}
        assert not any(v in {"delete", "deletecollection", "*"} for _, _, v in granted)
        assert "secrets" not in {r for _, r, _ in granted}
    assert "pods" not in {r for _, r, _ in actuator}
    assert {v for _, r, v in source if r == "pods"} == {"list", "watch"}


def test_roles_are_rendered_in_each_workload_namespace(helm: str) -> None:
    docs = render(helm, "workloadNamespaces={inference,batch}")
    roles = [d for d in docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["batch", "batch", "inference", "inference"]
    for workload in workloads(docs).values():
        env = env_of(workload)
        if workload["metadata"]["name"].endswith(("actuator", "source")):
            assert env["EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES"] == '["inference","batch"]'


def test_chart_rbac_equals_deploy_rbac(default_docs: list[dict[str, Any]]) -> None:
    """The chart grants the actuator exactly what deploy/rbac/ (the actuators' own manifests) does."""
    rbac_dir = ROOT / "deploy" / "rbac"
    files = sorted(rbac_dir.glob("*.y*ml")) if rbac_dir.is_dir() else []
    if not files:
        pytest.skip("deploy/rbac/ has no manifests yet")
    reference = [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]
    for kind in ("Role", "ClusterRole"):
        wanted = set().union(*(grants(d["rules"]) for d in reference if d["kind"] == kind))
        chart = set().union(*(grants(d["rules"]) for d in by_kind(default_docs, kind).values()))
        assert chart == wanted, (
            f"{kind}: chart only {sorted(chart - wanted)}, deploy/rbac only {sorted(wanted - chart)}"
        )
    fields = ("value", "preemptionPolicy", "globalDefault", "description")
    reference_classes = [d for d in reference if d["kind"] == "PriorityClass"]
    wanted_classes = {d["metadata"]["name"]: [d.get(f) for f in fields] for d in reference_classes}
    chart_classes = {n: [d.get(f) for f in fields] for n, d in by_kind(default_docs, "PriorityClass").items()}
    assert chart_classes == wanted_classes


def test_prometheus_rule_carries_the_alert_rules(helm: str) -> None:
    source = (ROOT / "deploy" / "prometheus" / "ebbtide-rules.yml").read_text()
    assert (CHART / "files" / "ebbtide-rules.yml").read_text() == source, (
        "copy deploy/prometheus/ebbtide-rules.yml to deploy/helm/ebbtide/files/"
    )
    (rule,) = by_kind(render(helm, "prometheusRule.enabled=true"), "PrometheusRule").values()
    # The default runbookBaseUrl is the plain file's: the rendered rules are the file's, unchanged.
    assert rule["spec"] == yaml.safe_load(source)


def test_runbook_urls_follow_the_runbook_base_url(helm: str) -> None:
    source = yaml.safe_load((ROOT / "deploy" / "prometheus" / "ebbtide-rules.yml").read_text())
    base = "https://wiki.example.com/sre/ebbtide"
    (rule,) = by_kind(
        render(helm, "prometheusRule.enabled=true", f"monitoring.runbookBaseUrl={base}"), "PrometheusRule"
    ).values()
    rendered = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert len(rendered) >= 12
    for r in rendered:
        assert r["annotations"]["runbook_url"] == f"{base}#{r['alert'].lower()}", r["alert"]
    # Only the runbook_url differs from the plain file.
    for group in source["groups"]:
        for r in group["rules"]:
            r["annotations"].pop("runbook_url")
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            r["annotations"].pop("runbook_url")
    assert rule["spec"] == source


def kinds_of(docs: Sequence[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def test_monitoring_objects_need_enabling_and_the_operator_api(helm: str) -> None:
    """ServiceMonitor and PrometheusRule render only when enabled AND the cluster serves their CRD's
    API (`.Capabilities.APIVersions.Has`); the rest of the chart renders the same either way."""
    monitoring = {"ServiceMonitor", "PrometheusRule"}
    service_monitor_api, prometheus_rule_api = MONITORING_APIS
    enabled = ("serviceMonitor.enabled=true", "prometheusRule.enabled=true")
    everything = render(helm, *enabled)
    assert monitoring <= kinds_of(everything)
    # Enabled, but a cluster without the Prometheus Operator: neither, and no error.
    without = render(helm, *enabled, api_versions=())
    assert not monitoring & kinds_of(without)
    assert len(without) == len(everything) - 2
    # Only the ServiceMonitor CRD installed.
    only_monitor = kinds_of(render(helm, *enabled, api_versions=(service_monitor_api,)))
    assert "ServiceMonitor" in only_monitor and "PrometheusRule" not in only_monitor
    only_rule = kinds_of(render(helm, *enabled, api_versions=(prometheus_rule_api,)))
    assert "PrometheusRule" in only_rule and "ServiceMonitor" not in only_rule
    # The API is there but the objects are off.
    off = render(helm, "serviceMonitor.enabled=false", "prometheusRule.enabled=false")
    assert not monitoring & kinds_of(off)
    # Defaults: the ServiceMonitor on (where the API is), the PrometheusRule off.
    assert "ServiceMonitor" in kinds_of(render(helm)) and "PrometheusRule" not in kinds_of(render(helm))
    assert not monitoring & kinds_of(render(helm, api_versions=()))


def test_bad_values_fail_naming_the_setting(helm: str) -> None:
    args = [helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION]
    cases = {
        "kafka.bootstrapServers=kafka": "/kafka/bootstrapServers",
        "components.optimizer.kind=StatefulSet": "/components/optimizer/kind",
        "metrics.port=0": "/metrics/port",
    }
    for override, field in cases.items():
        result = subprocess.run([*args, "--set", override], capture_output=True, text=True, timeout=60)
        assert result.returncode != 0, override
        assert field in result.stderr, result.stderr


def test_cluster_spec_is_mounted_and_named(helm: str) -> None:
    docs = render(helm, "clusterSpec.cluster=demo", "clusterSpec.step_s=900")
    (config,) = by_kind(docs, "ConfigMap").values()
    assert yaml.safe_load(config["data"]["cluster.yaml"]) == {"cluster": "demo", "step_s": 900}
    optimizer = workloads(docs)["optimizer"]
    assert env_of(optimizer)["EBBTIDE_CLUSTER_SPEC"] == "/etc/ebbtide/cluster.yaml"
    mounts = {m["mountPath"] for m in container(optimizer)["volumeMounts"]}
    assert "/etc/ebbtide" in mounts


def test_state_and_optimizer_are_capped_at_one_replica(helm: str) -> None:
    """No standby election exists: a second state or optimizer would split its consumer group."""
    for name in ("state", "optimizer"):
        result = subprocess.run(
            template_args(helm, f"components.{name}.replicas=2"), capture_output=True, text=True, timeout=120
        )
        assert result.returncode != 0, name
        assert f"components.{name}.replicas: at most 1 (got 2)" in result.stderr, result.stderr
    scaled = workloads(render(helm, "components.forecaster.replicas=3", "components.actuator.replicas=2"))
    assert scaled["forecaster"]["spec"]["replicas"] == 3 and scaled["actuator"]["spec"]["replicas"] == 2


SECURE_VALUES = (
    "kafka.createTopics=false",
    "kafka.security.protocol=SASL_SSL",
    "kafka.security.sasl.mechanism=SCRAM-SHA-512",
    "kafka.security.sasl.passwordsSecret=ebbtide-kafka-passwords",
    "kafka.security.tls.caSecret=kafka-ca",
    "kafka.security.tls.clientCertSecretPrefix=ebbtide-kafka-tls-",
)
CREDENTIALS_DIR = "/var/run/ebbtide/kafka"


def test_kafka_credentials_come_from_secrets_as_files(
    helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each component logs in as its own principal with its own key of each Secret, mounted as
    files; the env the chart sets loads through the settings (the files placed under tmp_path)."""
    settings = pytest.importorskip("ebbtide.settings")
    docs = render(helm, *SECURE_VALUES)
    assert not schema_errors(docs)
    for name in ("sasl-password", "ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_text(f"{name} content\n")
    for name, workload in workloads(docs).items():
        pod = workload["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "kafka-credentials"]
        sources = {s["secret"]["name"]: s["secret"]["items"] for s in volume["projected"]["sources"]}
        assert sources == {
            "ebbtide-kafka-passwords": [{"key": name, "path": "sasl-password"}],
            "kafka-ca": [{"key": "ca.crt", "path": "ca.crt"}],
            f"ebbtide-kafka-tls-{name}": [
                {"key": "tls.crt", "path": "client.crt"},
                {"key": "tls.key", "path": "client.key"},
            ],
        }, name
        mounts = {m["name"]: m for m in container(workload)["volumeMounts"]}
        assert mounts["kafka-credentials"] == {
            "name": "kafka-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": True,
        }  # fmt: skip
        with monkeypatch.context() as env:
            for key, value in env_of(workload).items():
                env.setenv(key, value.replace(CREDENTIALS_DIR, str(tmp_path)))
            kafka = settings.load_settings().kafka
        assert (kafka.security_protocol, kafka.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512"), name
        assert kafka.sasl_username == f"ebbtide-{name}", name
        assert (
            kafka.sasl_password_file == tmp_path / "sasl-password"
            and kafka.ssl_ca_location == tmp_path / "ca.crt"
        )
        assert kafka.ssl_key_location == tmp_path / "client.key" and not kafka.create_topics
        assert (kafka.replication_factor, kafka.min_insync_replicas) == (3, 2)


def test_default_chart_mounts_no_credentials_and_speaks_plaintext(default_docs: list[dict[str, Any]]) -> None:
    for name, workload in workloads(default_docs).items():
        assert env_of(workload)["EBBTIDE_KAFKA__SECURITY_PROTOCOL"] == "PLAINTEXT", name
        assert "kafka-credentials" not in {v["name"] for v in workload["spec"]["template"]["spec"]["volumes"]}


def test_inconsistent_kafka_security_values_fail_at_render(helm: str) -> None:
    cases = {
        ("kafka.security.protocol=SASL_SSL",): "mechanism",
        (
            "kafka.security.protocol=SASL_SSL",
            "kafka.security.sasl.mechanism=SCRAM-SHA-256",
        ): "passwordsSecret",
        ("kafka.security.protocol=SASL_SSL", "kafka.security.sasl.mechanism=OAUTHBEARER"): "oauthbearer",
        ("kafka.security.protocol=TLS",): "/kafka/security/protocol",
    }
    for overrides, named in cases.items():
        result = subprocess.run(template_args(helm, *overrides), capture_output=True, text=True, timeout=120)
        assert result.returncode != 0, overrides
        assert named in result.stderr, (overrides, result.stderr)
