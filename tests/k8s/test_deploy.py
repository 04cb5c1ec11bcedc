"""deploy/: the manifests pass the test apiserver's server-side dry run (schema, defaulting, validation),
the ConfigMaps the kustomization generates hold valid configurations, and the td3-scheduler's RBAC
gives it what a scheduler needs and nothing more (SubjectAccessReviews against the applied roles)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
import yaml

from td3sched.engine.config import EngineConfig
from tests.k8s.control_plane import REPO, ApiError

BASE = REPO / "deploy" / "base"
NAMESPACE = "td3sched"
# kind -> (API path prefix, resource, namespaced)
RESOURCES = {
    "Namespace": ("/api/v1", "namespaces", False), "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True), "ConfigMap": ("/api/v1", "configmaps", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
}


def kustomized() -> list[dict]:
    """What `kustomize build deploy/base` gives, for the features the kustomization uses: its
    resources with the namespace set, plus the generated ConfigMaps."""
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects = []
    for name in k["resources"]:
        objects += [o for o in yaml.safe_load_all((BASE / name).read_text()) if o]
    for gen in k["configMapGenerator"]:
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]},
                        "data": {Path(f).name: (BASE / f).read_text() for f in gen["files"]}})
    for o in objects:
        if RESOURCES[o["kind"]][2] and "namespace" not in o["metadata"]:
            o["metadata"]["namespace"] = k["namespace"]
    return objects


def apply(cluster, obj: dict, dry_run: bool) -> dict:
    prefix, resource, namespaced = RESOURCES[obj["kind"]]
    meta = obj["metadata"]
    path = f"{prefix}/namespaces/{meta['namespace']}/{resource}/{meta['name']}" if namespaced else \
        f"{prefix}/{resource}/{meta['name']}"
    query = urllib.parse.urlencode({"fieldManager": "td3sched-tests", "force": "true", **({"dryRun": "All"} if dry_run else {})})
    return cluster.request("PATCH", f"{path}?{query}", obj, content_type="application/apply-patch+yaml")


@pytest.fixture(scope="module")
def deployed(cluster):
    """The namespace and the RBAC applied for real (dry runs of namespaced objects need the namespace)."""
    objects = kustomized()
    for o in objects:
        if o["kind"] == "Namespace" or o["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                     "ClusterRoleBinding"):
            apply(cluster, o, dry_run=False)
    return objects


def test_every_manifest_passes_server_side_dry_run(cluster, deployed):
    kinds = set()
    for o in deployed:
        try:
            answer = apply(cluster, o, dry_run=True)
        except ApiError as exc:
            pytest.fail(f"{o['kind']} {o['metadata']['name']}: {exc}")
        assert answer["metadata"]["name"] == o["metadata"]["name"]
        kinds.add(o["kind"])
    assert {"Deployment", "Service", "ConfigMap", "ClusterRoleBinding"} <= kinds


def test_generated_configs_are_valid(deployed):
    maps = {o["metadata"]["name"]: o["data"] for o in deployed if o["kind"] == "ConfigMap"}
    EngineConfig.model_validate(yaml.safe_load(maps["td3sched-engine-config"]["engine-config.yaml"]))
    scheduler = yaml.safe_load(maps["td3-scheduler-config"]["scheduler-config.yaml"])
    shipped = yaml.safe_load((REPO / "scheduler" / "config" / "td3-scheduler.yaml").read_text())
    assert scheduler["profiles"][0]["plugins"] == shipped["profiles"][0]["plugins"], \
        "deploy/ and scheduler/config/ enable different plugins"
    mounts = {o["metadata"]["name"]: o for o in deployed if o["kind"] == "Deployment"}
    args = mounts["td3-scheduler"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--config=/etc/td3-scheduler/scheduler-config.yaml" in args


def test_monitors_select_the_services(deployed):
    services = {o["metadata"]["name"]: o for o in deployed if o["kind"] == "Service"}
    for monitor in yaml.safe_load_all((REPO / "deploy" / "monitoring" / "servicemonitor.yaml").read_text()):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        port = monitor["spec"]["endpoints"][0]["port"]
        matches = [s for s in services.values() if wanted.items() <= s["metadata"].get("labels", {}).items()]
        assert matches and any(p["name"] == port for s in matches for p in s["spec"]["ports"]), monitor["metadata"]


@pytest.mark.parametrize("verb, group, resource, subresource, namespace, allowed", [
    ("create", "", "pods", "binding", "default", True),      # bind pods
    ("list", "", "nodes", "", "", True),
    ("watch", "", "pods", "", "", True),
    ("create", "", "events", "", "default", True),
    ("update", "coordination.k8s.io", "leases", "", NAMESPACE, True),   # its own lease (resourceName below)
    ("get", "", "secrets", "", "default", False),            # nothing beyond a scheduler's needs
    ("delete", "", "nodes", "", "", False),
    ("create", "", "pods", "", "default", False),
    ("update", "apps", "deployments", "", NAMESPACE, False),
])
def test_scheduler_rbac_is_what_a_scheduler_needs(cluster, deployed, verb, group, resource, subresource, namespace,
                                                  allowed):
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
                  "namespace": namespace}
    if resource == "leases":
        attributes["name"] = "td3-scheduler"
    review = cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NAMESPACE}:td3-scheduler",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
                 "resourceAttributes": attributes}})
    assert review["status"].get("allowed", False) is allowed, f"{verb} {resource}: {review['status']}"


@pytest.mark.parametrize("verb, resource, namespace, allowed", [
    ("list", "pods", "", True), ("watch", "pods", "", True), ("get", "pods", "default", True),
    ("list", "nodes", "", True), ("watch", "nodes", "", True),
    ("create", "pods", "default", False), ("delete", "pods", "default", False),   # reads, nothing more
    ("update", "nodes", "", False), ("get", "secrets", "default", False), ("list", "configmaps", "", False),
])
def test_engine_rbac_reads_pods_and_nodes_and_nothing_else(cluster, deployed, verb, resource, namespace, allowed):
    review = cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NAMESPACE}:td3sched-engine",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}})
    assert review["status"].get("allowed", False) is allowed, f"{verb} {resource}: {review['status']}"


def test_dashboard_queries_name_metrics_that_exist():
    """Every td3sched_* metric of the Grafana dashboard is one the engine exports, every td3score_* one
    the plugin registers (scheduler/pkg/td3score/metrics.go), every scheduler_* one kube-scheduler has."""
    import json
    import re

    from td3sched.engine.metrics import EngineMetrics

    dashboard = json.loads((REPO / "deploy" / "grafana" / "td3sched-dashboard.json").read_text())
    used = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"\b(td3\w+|scheduler_\w+)", t["expr"])}
    engine = set(re.findall(r"^# TYPE (\w+)", EngineMetrics().exposition().decode(), re.M))
    go = (REPO / "scheduler" / "pkg" / "td3score" / "metrics.go").read_text()
    plugin = {f"td3score_{n}" for n in re.findall(r'Name: "(\w+)"', go)}
    known = engine | plugin | {"scheduler_scheduling_attempt_duration_seconds", "scheduler_schedule_attempts_total"}
    base = {re.sub(r"_(bucket|count|sum)$", "", m) for m in used}
    assert base <= known, f"metrics the dashboard reads that nobody exports: {sorted(base - known)}"
    assert any(m.startswith("td3score_") for m in base) and any(m.startswith("td3sched_") for m in base)
