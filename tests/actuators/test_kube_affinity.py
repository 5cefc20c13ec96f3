"""Node affinity that keeps a started job off nodes going out (actuators/kube/affinity.py), and the
run patch of a JobSet that carries it (table tests; tests/actuators/test_kube_maintenance.py runs the
scheduler against it)."""

from __future__ import annotations

from typing import Any

from actuators.kube.affinity import REQUIRED, required_affinity, with_required
from actuators.kube.workloads import BatchWorkload

H100 = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
ZONE = {"key": "zone", "operator": "In", "values": ["b"]}


def off(*nodes: str) -> list[dict[str, Any]]:
    return [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in nodes]


def with_terms(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}}


def test_the_nodes_are_anded_into_every_term_the_submitter_wrote() -> None:
    got = required_affinity(
        with_terms({"matchExpressions": [H100]}, {"matchExpressions": [ZONE]}), ["n2", "n1"], []
    )
    assert got == {
        "nodeSelectorTerms": [
            {"matchExpressions": [H100], "matchFields": off("n1", "n2")},
            {"matchExpressions": [ZONE], "matchFields": off("n1", "n2")},
        ]
    }
    assert required_affinity({}, ["n1"], []) == {"nodeSelectorTerms": [{"matchFields": off("n1")}]}


def test_what_ebbtide_added_before_goes_and_only_that() -> None:
    own_field = {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}
    before = with_terms({"matchExpressions": [H100], "matchFields": [own_field, *off("n1")]})
    assert required_affinity(before, ["n3"], ["n1"]) == {
        "nodeSelectorTerms": [{"matchExpressions": [H100], "matchFields": [own_field, *off("n3")]}]
    }
    assert required_affinity(with_terms({"matchFields": off("n1")}), [], ["n1"]) is None


def test_a_jobset_is_kept_off_the_nodes_in_every_replicated_job() -> None:
    replicated = [
        {"name": name, "template": {"spec": {"template": {"spec": {"containers": []}}}}}
        for name in ("a", "b")
    ]
    jobset = BatchWorkload(
        kind="JobSet", job_id="js", name="js", phase="held", pool=None, gpus=8, plan_id=None,
        pod_specs=[], patch=lambda body: None, raw_spec={"replicatedJobs": replicated},
    )  # fmt: skip
    body = jobset.run_body("ebbtide.io/pool", "a100", {"metadata": {}}, ["n1"])
    for rj in body["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"ebbtide.io/pool": "a100"}
        assert pod["affinity"]["nodeAffinity"][REQUIRED] == {
            "nodeSelectorTerms": [{"matchFields": off("n1")}]
        }
    assert body["metadata"]["annotations"]["ebbtide.io/avoided-nodes"] == "n1"


def test_a_replaced_pod_spec_drops_the_requirement_it_no_longer_has() -> None:
    preferred = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}
    affinity = {"podAffinity": {}, "nodeAffinity": {**preferred, REQUIRED: {"nodeSelectorTerms": []}}}
    assert with_required(affinity, None) == {"podAffinity": {}, "nodeAffinity": preferred}
    assert with_required({"nodeAffinity": {REQUIRED: {}}}, None) == {}
