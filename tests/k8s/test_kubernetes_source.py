"""The engine's pod and node watches (``engine/kubernetes_source.py``) against a real kube-apiserver:
nodes created, changed and deleted through the API become the shadow state's node set and
allocatable; pods bound with a Binding (as a scheduler binds) feed the assign cache once, whether the
watch or ReportBinding saw them first; the watches come back after the API server is restarted and
after a 410 Gone (etcd compacted under a watch); a bad kubeconfig is refused naming the file and the
fault; ``td3sched serve`` with a kubeconfig watches, logs the bindings and exports the watches' health,
behind the stock kube-scheduler with the extender and behind the td3-scheduler.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
import yaml

pytest.importorskip("kubernetes")

from td3sched.engine.config import load_config  # noqa: E402
from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec  # noqa: E402
from td3sched.engine.kubernetes_objects import pod_from_k8s  # noqa: E402
from td3sched.engine.kubernetes_source import KubernetesSource, api_client, in_cluster_client  # noqa: E402
from td3sched.engine.service import EngineService  # noqa: E402
from td3sched.engine.state import ShadowState  # noqa: E402
from tests.engine.prometheus_harness import wait_for  # noqa: E402
from tests.k8s.control_plane import REPO, ApiError, ControlPlane, engine_env  # noqa: E402

NOBODY = "no-scheduler"
"""Pods no running scheduler takes: the tests bind them themselves."""
DEADLINE_S = 30.0


def make_source(plane: ControlPlane, start: bool = True, **timing) -> KubernetesSource:
    state = ShadowState()
    service = EngineService(DecisionEngine(state, ModelSlot(None)))
    source = KubernetesSource(plane.kubeconfig, service, **{"watch_timeout_s": 300.0, "backoff_initial_s": 0.2,
                                                            "backoff_max_s": 1.0, **timing})
    if start:
        source.start()
    return source


@pytest.fixture
def source(cluster):
    s = make_source(cluster)
    assert wait_for(lambda: all(w.synced for w in s.watches), deadline_s=DEADLINE_S), "the watches never listed"
    yield s
    s.stop()


def counter(source: KubernetesSource, metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


def pod_request(pod: dict) -> np.ndarray:
    """What ReportBinding adds for this pod: its CPU and memory requests with kube-scheduler's non-zero defaults."""
    return pod_from_k8s(pod).request(0.0).nonzero_cpu_mem


def assigned(source: KubernetesSource, node: str) -> np.ndarray:
    return source.state.assigned().get(node, np.zeros(2))


def node_prefix(namespace: str) -> str:
    return f"w{namespace.split('-')[0][1:]}"


# --- nodes -----------------------------------------------------------------------------------------------

def test_nodes_and_their_allocatable_become_the_states(cluster, namespace, source):
    a, b = f"{node_prefix(namespace)}-a", f"{node_prefix(namespace)}-b"
    cluster.create_node(a, 3500, 7680, extra={"nvidia.com/gpu": "8", "koordinator.sh/rdma": "200"})
    cluster.create_node(b, 2000, 4096)
    state = source.state

    def known():
        inv = state.inventory
        return inv is not None and {a, b} <= set(inv.names) and {a, b} <= set(state.snapshot.names)
    assert wait_for(known, deadline_s=DEADLINE_S), f"nodes {a}, {b} never reached the state"
    snap, inv = state.snapshot, state.inventory
    i, j = snap.index[a], snap.index[b]
    np.testing.assert_array_equal(snap.allocatable[i], [3500, 7680, 100, 200])  # 100Gi ephemeral storage
    np.testing.assert_array_equal(snap.allocatable[j], [2000, 4096, 100, 100])  # no RDMA: the assumed 100%
    np.testing.assert_array_equal(snap.capacity_usage[i, :2], [3500, 7680])
    assert inv.gpus[inv.names.index(a)] == 8 and inv.gpus[inv.names.index(b)] == 0
    # every node the API lists with its allocatable, and no other
    listed = {n["metadata"]["name"] for n in cluster.request("GET", "/api/v1/nodes")["items"]
              if (n.get("status") or {}).get("allocatable")}
    assert set(snap.names) == listed
    # without metrics every node is stale: decisions fall back, never wait
    assert not state.fresh(snap, state.clock()).any()

    cluster.write_node_status(b, {"cpu": "6", "memory": "12Gi", "ephemeral-storage": "50Gi", "pods": "110"})
    assert wait_for(lambda: state.snapshot.allocatable[state.snapshot.index[b], 0] == 6000, deadline_s=DEADLINE_S), \
        "a node's new allocatable never reached the state"
    np.testing.assert_array_equal(state.snapshot.allocatable[state.snapshot.index[b]], [6000, 12288, 50, 100])

    cluster.delete_node(a)
    assert wait_for(lambda: a not in state.snapshot.index, deadline_s=DEADLINE_S), "a deleted node stayed in the state"
    assert b in state.snapshot.index
    cluster.delete_node(b)


def test_a_node_without_allocatable_is_not_known_until_its_status_comes(cluster, namespace, source):
    name = f"{node_prefix(namespace)}-bare"
    cluster.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    probe = f"{node_prefix(namespace)}-probe"
    cluster.create_node(probe, 1000, 1024)  # an event after the bare node's: the watch has seen both
    assert wait_for(lambda: probe in source.state.snapshot.index, deadline_s=DEADLINE_S)
    assert name not in source.state.snapshot.index
    cluster.write_node_status(name, {"cpu": "1", "memory": "1Gi"})
    assert wait_for(lambda: name in source.state.snapshot.index, deadline_s=DEADLINE_S)
    for n in (name, probe):
        cluster.delete_node(n)


# --- pods ------------------------------------------------------------------------------------------------

def test_each_binding_reaches_the_assign_cache_once(cluster, namespace, source):
    service = source.service
    node, other = "node-1", "node-2"
    before, before_other = assigned(source, node), assigned(source, other)
    pods = []
    for k, (cpu, mem) in enumerate([("250m", "300Mi"), ("1500m", "2Gi"), ("0", "0")]):  # the last: non-zero defaults
        cluster.create_pod(namespace, f"p{k}", NOBODY, cpu, mem)
        pods.append(cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/p{k}"))
    # a pending pod is not a binding
    assert np.array_equal(assigned(source, node), before)
    # p0 and p1 bound by the API, seen by the watch; then ReportBinding tells of p1 too (the plugin's PostBind)
    cluster.bind_pod(namespace, "p0", node)
    cluster.bind_pod(namespace, "p1", node)
    expected = before + pod_request(pods[0]) + pod_request(pods[1])
    assert wait_for(lambda: np.allclose(assigned(source, node), expected), deadline_s=DEADLINE_S), \
        f"bindings not in the assign cache: {assigned(source, node)} != {expected}"
    assert service.report_binding(pod_from_k8s(pods[1]), node, "d-1") is False
    np.testing.assert_allclose(assigned(source, node), expected)
    # p2: ReportBinding first, then the watch sees the bind: counted once
    assert service.report_binding(pod_from_k8s(pods[2]), other, "d-2") is True
    cluster.bind_pod(namespace, "p2", other)
    assert wait_for(lambda: counter(source, service.metrics.bindings, "pod_watch", "duplicate") == 1,
                    deadline_s=DEADLINE_S), "the watch never saw p2's binding"
    np.testing.assert_allclose(assigned(source, other), before_other + pod_request(pods[2]))
    np.testing.assert_allclose(pod_request(pods[2]), [100, 200])  # kube-scheduler's non-zero defaults
    bindings = service.metrics.bindings
    assert [counter(source, bindings, *labels) for labels in [("pod_watch", "counted"), ("report_binding", "counted"),
                                                              ("report_binding", "duplicate")]] == [2, 1, 1]


def test_a_pod_deleted_and_bound_again_is_a_new_binding(cluster, namespace, source):
    node = "node-5"
    cluster.create_pod(namespace, "again", NOBODY, "700m", "700Mi")
    pod = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/again")
    before = assigned(source, node)
    cluster.bind_pod(namespace, "again", node)
    once = before + pod_request(pod)
    assert wait_for(lambda: np.allclose(assigned(source, node), once), deadline_s=DEADLINE_S)
    cluster.delete_pod(namespace, "again")
    assert wait_for(lambda: f"{namespace}/again" not in source.bound, deadline_s=DEADLINE_S), \
        "the watch kept a deleted pod"
    # the estimate stays until a scrape of the node sees the pod gone (the assign cache's rule)
    np.testing.assert_allclose(assigned(source, node), once)
    cluster.create_pod(namespace, "again", NOBODY, "700m", "700Mi")
    cluster.bind_pod(namespace, "again", node)
    assert wait_for(lambda: np.allclose(assigned(source, node), once + pod_request(pod)), deadline_s=DEADLINE_S), \
        "a pod bound anew under the same name was not counted"


def test_a_finished_pod_leaves_the_watch(cluster, namespace, source):
    cluster.create_pod(namespace, "done", NOBODY, "100m", "100Mi")
    cluster.bind_pod(namespace, "done", "node-6")
    assert wait_for(lambda: f"{namespace}/done" in source.bound, deadline_s=DEADLINE_S)
    cluster.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/done/status", {"status": {"phase": "Succeeded"}},
                    content_type="application/merge-patch+json")
    assert wait_for(lambda: f"{namespace}/done" not in source.bound, deadline_s=DEADLINE_S), \
        "a finished pod stayed among the bound ones"


def test_bindings_made_before_the_engine_started_are_not_counted(cluster, namespace):
    cluster.create_pod(namespace, "old", NOBODY, "900m", "900Mi")
    cluster.bind_pod(namespace, "old", "node-7")
    s = make_source(cluster, start=False)
    try:
        s.node_watch.start()  # the nodes first: the binding's node is known when the pods are listed
        assert wait_for(lambda: s.node_watch.synced, deadline_s=DEADLINE_S)
        s.pod_watch.start()
        assert wait_for(lambda: s.pod_watch.synced, deadline_s=DEADLINE_S)
        assert counter(s, s.metrics.bindings, "pod_watch", "unknown_node") == 0
        assert f"{namespace}/old" in s.bound  # known as bound ...
        assert "node-7" not in s.state.assigned()  # ... but its usage is in the metrics already
    finally:
        s.stop()


def test_a_list_after_the_watch_was_away_catches_up(cluster, namespace, source):
    """What a re-list (after a 410 or a reconnection) does: bindings made meanwhile are counted, pods
    gone meanwhile are forgotten, bindings already counted are not counted again."""
    for name in ("kept", "went", "gap"):
        cluster.create_pod(namespace, name, NOBODY, "400m", "400Mi")
    cluster.bind_pod(namespace, "kept", "node-0")
    cluster.bind_pod(namespace, "went", "node-0")
    assert wait_for(lambda: {f"{namespace}/kept", f"{namespace}/went"} <= source.bound.keys(), deadline_s=DEADLINE_S)
    source.pod_watch.stop()  # the watch is away ...
    cluster.bind_pod(namespace, "gap", "node-2")
    cluster.delete_pod(namespace, "went")
    before = {n: assigned(source, n) for n in ("node-0", "node-2")}
    assert f"{namespace}/gap" not in source.bound
    source.pod_watch.list_once()  # ... and lists again, as after a 410
    assert f"{namespace}/gap" in source.bound and f"{namespace}/went" not in source.bound
    np.testing.assert_allclose(assigned(source, "node-2"), before["node-2"] + [400, 400])
    np.testing.assert_allclose(assigned(source, "node-0"), before["node-0"])


def requested(source: KubernetesSource, node: str) -> np.ndarray:
    """The non-zero requests the served snapshot holds for ``node``."""
    snap = source.state.snapshot
    return snap.nonzero_requested[snap.index[node]].copy()


def test_each_nodes_requests_follow_its_bound_pods(cluster, namespace):
    """The requests a model with a requests share scores by: every bound pod's, those bound before the
    engine started included (the first list), changed by each binding and departure."""
    cluster.create_pod(namespace, "early", NOBODY, "600m", "1Gi")
    cluster.bind_pod(namespace, "early", "node-3")
    early = pod_request(cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/early"))
    s = make_source(cluster)
    try:
        assert wait_for(lambda: all(w.synced for w in s.watches), deadline_s=DEADLINE_S)
        listed = requested(s, "node-3")
        assert np.all(listed >= early)  # the first list counts the pods already bound
        listed_all = {}
        for pod in cluster.request("GET", "/api/v1/pods")["items"]:
            node = pod["spec"].get("nodeName")
            if node and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                listed_all[node] = listed_all.get(node, np.zeros(2)) + pod_request(pod)
        np.testing.assert_allclose(listed, listed_all["node-3"])
        cluster.create_pod(namespace, "late", NOBODY, "0", "0")  # kube-scheduler's non-zero defaults
        cluster.bind_pod(namespace, "late", "node-3")
        assert wait_for(lambda: np.allclose(requested(s, "node-3"), listed + [100, 200]), deadline_s=DEADLINE_S), \
            f"a binding did not reach the node's requests: {requested(s, 'node-3')}"
        cluster.delete_pod(namespace, "early")
        assert wait_for(lambda: np.allclose(requested(s, "node-3"), listed + [100, 200] - early),
                        deadline_s=DEADLINE_S), f"a departure did not leave the node's requests: {requested(s, 'node-3')}"
    finally:
        s.stop()


def test_each_nodes_allocation_follows_its_bound_pods_gpus_and_pool_label(cluster, namespace, source):
    """The allocation a model with a fragmentation share scores by: allocatable minus the bound pods'
    requests, whole GPUs included, and the node's pool from its pool label, changed by each binding,
    departure and relabelling."""
    node = f"{node_prefix(namespace)}-gpu"
    cluster.create_node(node, 16000, 65536, extra={"nvidia.com/gpu": "4"})
    cluster.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"td3sched.io/pool": "gpu"}}},
                    content_type="application/merge-patch+json")
    state = source.state

    def row(name: str):
        snap = state.snapshot
        i = snap.index.get(name)
        a = snap.allocation
        return None if i is None or a is None else (a.free[i].copy(), a.gpu_free[i].copy(), a.pool[i])

    try:
        assert wait_for(lambda: (r := row(node)) is not None and r[2] == "gpu", deadline_s=DEADLINE_S), \
            f"the node's pool never reached the state: {row(node)}"
        free, gpu_free, _ = row(node)
        np.testing.assert_array_equal(free, [16000, 65536, 100, 100])
        assert sorted(gpu_free.tolist(), reverse=True)[:4] == [1000] * 4 and gpu_free.sum() == 4000
        cluster.create_pod(namespace, "trainer", NOBODY, "3", "8Gi", extra={"nvidia.com/gpu": "3"})
        cluster.bind_pod(namespace, "trainer", node)
        assert wait_for(lambda: row(node)[1].sum() == 1000, deadline_s=DEADLINE_S), \
            f"a GPU binding did not reach the node's allocation: {row(node)}"
        np.testing.assert_array_equal(row(node)[0], [13000, 57344, 100, 100])
        cluster.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"td3sched.io/pool": "cpu"}}},
                        content_type="application/merge-patch+json")
        assert wait_for(lambda: row(node)[2] == "cpu", deadline_s=DEADLINE_S), "a relabelled pool never reached the state"
        cluster.delete_pod(namespace, "trainer")
        assert wait_for(lambda: row(node)[1].sum() == 4000, deadline_s=DEADLINE_S), \
            f"a departure did not give the GPUs back: {row(node)}"
        np.testing.assert_array_equal(row(node)[0], [16000, 65536, 100, 100])
    finally:
        cluster.delete_node(node)


def test_each_controllers_pods_per_node_follow_the_bindings(cluster, namespace, source):
    """The siblings a model with a sibling spread scores by: each bound pod's controller (the owner
    reference marked controller), counted per node from the list and each binding and departure; a pod
    owned by no controller is nobody's sibling. No controller-manager runs, so the owners need not exist."""
    owner = f"{namespace}/ReplicaSet/web"

    def replica(name: str, controller: bool = True) -> None:
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "0b9c6c1e-0000-4000-8000-000000000001",
                "controller": controller}]},
            "spec": {"schedulerName": NOBODY, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}})

    def counts():
        return source.state.sibling_counts(owner, ["node-1", "node-2"]).tolist()

    assert counts() == [0, 0]
    for name, node in (("web-a", "node-1"), ("web-b", "node-1"), ("web-c", "node-2")):
        replica(name)
        cluster.bind_pod(namespace, name, node)
    replica("owned", controller=False)
    cluster.bind_pod(namespace, "owned", "node-2")
    assert wait_for(lambda: counts() == [2, 1], deadline_s=DEADLINE_S), f"bindings did not reach the counts: {counts()}"
    cluster.delete_pod(namespace, "web-a")
    assert wait_for(lambda: counts() == [1, 1], deadline_s=DEADLINE_S), f"a departure did not leave them: {counts()}"
    again = make_source(cluster)  # a new engine lists the pods already bound
    try:
        assert wait_for(lambda: all(w.synced for w in again.watches), deadline_s=DEADLINE_S)
        assert again.state.sibling_counts(owner, ["node-1", "node-2"]).tolist() == [1, 1]
    finally:
        again.stop()


def _restarted(cluster, namespace: str, name: str, restarts: int, reason: str) -> None:
    """Set the pod's container status as a kubelet would after ``restarts`` restarts, the last for ``reason``."""
    cluster.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {"containerStatuses": [{
        "name": "main", "ready": True, "restartCount": restarts, "image": "registry.k8s.io/pause:3.10", "imageID": "",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": reason}}}]}},
        content_type="application/merge-patch+json")


def test_the_watch_reports_a_bound_pods_oom_kills(cluster, namespace, tmp_path):
    """A container restarted once since the watch last looked, its last termination OOMKilled, is one
    kill in the decision log; restarted three times at once, unknown; restarted for another reason, none."""
    from td3sched.engine.decision_log import DecisionLog, read_log

    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    state = ShadowState()
    service = EngineService(DecisionEngine(state, ModelSlot(None)), log=log)
    s = KubernetesSource(cluster.kubeconfig, service, backoff_initial_s=0.2, backoff_max_s=1.0)
    s.start()
    try:
        assert wait_for(lambda: all(w.synced for w in s.watches), deadline_s=DEADLINE_S)
        cluster.create_pod(namespace, "oom", NOBODY, "100m", "64Mi")
        cluster.bind_pod(namespace, "oom", "node-4")
        key = f"{namespace}/oom"
        assert wait_for(lambda: key in s.bound, deadline_s=DEADLINE_S)
        _restarted(cluster, namespace, "oom", 1, "OOMKilled")
        assert wait_for(lambda: s.restarts.get(key) == {"main": 1}, deadline_s=DEADLINE_S)
        _restarted(cluster, namespace, "oom", 4, "OOMKilled")  # three restarts between two looks
        assert wait_for(lambda: s.restarts.get(key) == {"main": 4}, deadline_s=DEADLINE_S)
        _restarted(cluster, namespace, "oom", 5, "Error")  # not a kill
        assert wait_for(lambda: s.restarts.get(key) == {"main": 5}, deadline_s=DEADLINE_S)
    finally:
        s.stop()
        log.close()
    records, _ = read_log(tmp_path / "decisions.jsonl")
    kills = [(r["pod"]["name"], r["node"], r["kills"]) for r in records if r["kind"] == "kills"]
    assert kills == [("oom", "node-4", 1), ("oom", "node-4", None)]
    # the watch's binding carries the pod's creationTimestamp (whole seconds): the history's wait
    watched = [r for r in records if r["kind"] == "binding" and r["source"] == "pod_watch"]
    assert [r["pod"]["name"] for r in watched] == ["oom"]
    assert 0.0 <= watched[0]["time_s"] - watched[0]["created_s"] < DEADLINE_S + 1.0


# --- failures --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def own_plane(k8s_bins, processes, tmp_path_factory):
    """A control plane of this module's own, to restart: watches read etcd (no watch cache), so that
    compacting etcd answers a resumed watch 410 Gone."""
    plane = ControlPlane(tmp_path_factory.mktemp("own-plane"), k8s_bins, processes, ("--watch-cache=false",))
    plane.start()
    plane.create_namespace("w")
    yield plane
    processes.stop(plane.apiserver)
    processes.stop(plane.etcd)


def test_the_watches_recover_after_the_api_server_restarts(own_plane):
    plane = own_plane
    plane.create_node("r-0", 4000, 8192)
    s = make_source(plane)
    try:
        assert wait_for(lambda: s.state.inventory is not None and "r-0" in s.state.inventory.names,
                        deadline_s=DEADLINE_S)
        restarts = {w.resource: counter(s, s.metrics.watch_restarts, w.resource, "error") for w in s.watches}
        plane.stop_apiserver()
        assert wait_for(lambda: all(counter(s, s.metrics.watch_restarts, w.resource, "error") > restarts[w.resource]
                                    for w in s.watches), deadline_s=DEADLINE_S), "no watch noticed the API server gone"
        # meanwhile decisions read the state as it was, and are answered
        assert "r-0" in s.state.snapshot.index
        d = s.service.engine.decide(PodSpec("p", cpu_milli=100, mem_mib=100), ["r-0"])
        assert d.fallback_reason == "no_fresh_metrics" and d.candidates == ["r-0"]
        plane.start_apiserver()
        plane.create_node("r-1", 2000, 2048)
        plane.create_pod("w", "after", NOBODY, "300m", "300Mi")
        plane.bind_pod("w", "after", "r-0")
        assert wait_for(lambda: "r-1" in s.state.snapshot.index and "r-0" in s.state.assigned(),
                        deadline_s=60), f"the watches did not come back: {[w.last_error for w in s.watches]}"
        np.testing.assert_allclose(s.state.assigned()["r-0"], [300, 300])
        assert all(w.last_event_age_s() < 60 for w in s.watches)
    finally:
        s.stop()


def test_a_watch_answered_410_gone_lists_again(own_plane):
    plane = own_plane
    plane.create_node("g-0", 1000, 1024)
    s = make_source(plane, watch_timeout_s=2.0)  # the server ends each watch after 2 s: resumed from its last version
    try:
        assert wait_for(lambda: s.state.inventory is not None and "g-0" in s.state.inventory.names,
                        deadline_s=DEADLINE_S)
        lists = s.node_watch.lists
        # the revision moves on without a node event, then the history the node watch would resume from goes
        for k in range(3):
            plane.request("POST", "/api/v1/namespaces/w/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                                      "metadata": {"name": f"c{k}"}})
        plane.compact_etcd()
        assert wait_for(lambda: counter(s, s.metrics.watch_restarts, "nodes", "gone") >= 1, deadline_s=DEADLINE_S), \
            f"no 410 seen: {s.node_watch.last_error}"
        assert wait_for(lambda: s.node_watch.lists > lists, deadline_s=DEADLINE_S), "no list after the 410"
        plane.create_node("g-1", 1000, 1024)
        assert wait_for(lambda: "g-1" in s.state.snapshot.index, deadline_s=DEADLINE_S), "the node watch did not resume"
    finally:
        s.stop()


def test_a_bad_kubeconfig_is_refused_naming_the_file_and_the_fault(tmp_path):
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("this: [is not: a kubeconfig\n")
    with pytest.raises(ValueError, match=rf"kubernetes.kubeconfig: {garbage}: cannot be read"):
        api_client(garbage)
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(ValueError, match=rf"kubernetes.kubeconfig: {empty}: not a usable kubeconfig.*context"):
        api_client(empty)
    good = tmp_path / "kubeconfig"
    good.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "a", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "a", "user": {"token": "x"}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "a"}}]}))
    api_client(good)  # readable: whether the server answers is the watches' business
    with pytest.raises(ValueError, match=rf"{good}: not a usable kubeconfig.*named 'nope'"):
        api_client(good, "nope")
    config = tmp_path / "engine.yaml"
    config.write_text("kubernetes: {kubeconfig: missing.yaml}\n")
    with pytest.raises(ValueError, match=rf"kubernetes.kubeconfig: {tmp_path / 'missing.yaml'}: no such file"):
        load_config(config)
    config.write_text("kubernetes: {kubeconfig: kubeconfig, backoff_initial_s: 5, backoff_max_s: 1}\n")
    with pytest.raises(ValueError, match=r"kubernetes: .*backoff_max_s=1: expected at least backoff_initial_s=5"):
        load_config(config)
    # td3sched serve stops at start, saying so
    config.write_text(f"kubernetes: {{kubeconfig: {garbage.name}}}\ngrpc: {{port: 0}}\nhttp: {{port: 0}}\n")
    result = subprocess.run([sys.executable, "-m", "td3sched.cli", "serve", "--config", str(config)],
                            capture_output=True, text=True, timeout=120, env=engine_env(), cwd=REPO)
    assert result.returncode != 0
    assert f"kubernetes.kubeconfig: {garbage}: cannot be read" in result.stderr + result.stdout


def test_in_cluster_without_a_pods_environment_is_refused_naming_what_is_missing(tmp_path):
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    with pytest.raises(ValueError, match="kubernetes.in_cluster: the environment variable KUBERNETES_SERVICE_HOST "
                                         "is not set"):
        in_cluster_client(tmp_path, {})
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_PORT is empty"):
        in_cluster_client(tmp_path, {**env, "KUBERNETES_SERVICE_PORT": ""})
    with pytest.raises(ValueError, match=rf"kubernetes.in_cluster: {tmp_path / 'token'}: no such file"):
        in_cluster_client(tmp_path, env)
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'ca.crt'}: empty"):
        in_cluster_client(tmp_path, env)


def service_account(cluster: ControlPlane, namespace: str, name: str, folder) -> dict:
    """What a pod of service account ``name`` has: the API server's address in its environment and
    a token (a TokenRequest, as the kubelet asks for one) and the cluster's CA in ``folder``. Creates
    the account. Returns the environment."""
    try:
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    except ApiError as exc:
        if exc.status != 409:
            raise
    token = cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    folder.mkdir(parents=True)
    (folder / "token").write_text(token["status"]["token"])
    (folder / "ca.crt").write_bytes((cluster.cert_dir / "apiserver.crt").read_bytes())
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(cluster.port)}


def in_cluster_source(folder, env) -> KubernetesSource:
    service = EngineService(DecisionEngine(ShadowState(), ModelSlot(None)))
    source = KubernetesSource(None, service, backoff_initial_s=0.2, backoff_max_s=1.0, service_account_dir=folder,
                              environ=env)
    source.start()
    return source


def test_in_cluster_the_watches_run_as_the_service_account_the_shipped_rbac_allows(cluster, namespace, tmp_path):
    """As the engine's pod: the watches authenticate with the mounted service account token. An account
    without a role is refused by the API server's RBAC (the watches never list); the shipped engine
    account, with deploy/base/engine-rbac.yaml applied, lists and watches the nodes and pods."""
    from tests.k8s.test_deploy import NAMESPACE, apply, kustomized

    env = service_account(cluster, namespace, "no-role", tmp_path / "no-role")
    refused = in_cluster_source(tmp_path / "no-role", env)
    try:
        assert not wait_for(lambda: any(w.synced for w in refused.watches), deadline_s=3.0), \
            "an account without a role listed"
    finally:
        refused.stop()
    try:
        cluster.create_namespace(NAMESPACE)
    except ApiError as exc:
        if exc.status != 409:
            raise
    for o in kustomized():
        if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding") and "engine" in o["metadata"]["name"]:
            apply(cluster, o, dry_run=False)
    env = service_account(cluster, NAMESPACE, "td3sched-engine", tmp_path / "engine")
    source = in_cluster_source(tmp_path / "engine", env)
    try:
        assert wait_for(lambda: all(w.synced for w in source.watches), deadline_s=DEADLINE_S), "the watches never listed"
        want = {o["metadata"]["name"] for o in cluster.request("GET", "/api/v1/nodes")["items"]}
        assert wait_for(lambda: set(source.nodes) == want, deadline_s=DEADLINE_S), (sorted(source.nodes), sorted(want))
    finally:
        source.stop()


# --- the engine as a process --------------------------------------------------------------------------------

def metric_value(text: str, name: str, **labels) -> float | None:
    """The first sample of ``name`` whose labels include ``labels`` (None when none)."""
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
    return None


def test_serve_with_a_kubeconfig_watches_and_logs_each_binding(cluster, namespace, tmp_path, processes):
    folder = tmp_path / "engine"
    folder.mkdir()
    log_path = folder / "decisions.jsonl"
    config = {"grpc": {"port": 0}, "http": {"port": 0}, "kubernetes": {"kubeconfig": str(cluster.kubeconfig)},
              "decision_log": {"path": str(log_path), "fsync_interval_s": 0.1}}
    (folder / "engine.yaml").write_text(yaml.safe_dump(config))
    ready = folder / "ports.json"
    engine = processes.start("engine-watch", [sys.executable, "-m", "td3sched.cli", "serve", "--config",
                                              str(folder / "engine.yaml"), "--ready-file", str(ready)],
                             folder / "engine.log", env=engine_env())
    try:
        assert wait_for(lambda: not engine.running or ready.exists(), deadline_s=90) and engine.running, engine.tail()
        http = json.loads(ready.read_text())["http"]

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=5) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, ""
        # no Prometheus: ready once the first node list has filled the state
        assert wait_for(lambda: get("/readyz")[0] == 200, deadline_s=DEADLINE_S), engine.tail()
        cluster.create_pod(namespace, "served", NOBODY, "1200m", "1500Mi")
        cluster.bind_pod(namespace, "served", "node-4")

        def logged():
            from td3sched.engine.decision_log import read_log
            return log_path.exists() and [r for r in read_log(log_path)[0]
                                          if r["kind"] == "binding" and r["pod"]["namespace"] == namespace]
        records = wait_for(logged, deadline_s=DEADLINE_S)
        assert records, f"no binding record:\n{engine.tail()}"
        (r,) = records
        assert (r["node"], r["source"], r["counted"], r["pod"]["name"]) == ("node-4", "pod_watch", True, "served")
        assert (r["pod"]["cpu_milli"], r["pod"]["mem_mib"]) == (1200, 1500)
        _, text = get("/metrics")
        for resource in ("pods", "nodes"):
            assert metric_value(text, "td3sched_kubernetes_watch_synced", resource=resource) == 1.0
            age = metric_value(text, "td3sched_kubernetes_watch_last_event_age_seconds", resource=resource)
            assert age is not None and 0 <= age < 120
        assert metric_value(text, "td3sched_bindings_total", source="pod_watch", result="counted") >= 1
        listed = [n for n in cluster.request("GET", "/api/v1/nodes")["items"]
                  if (n.get("status") or {}).get("allocatable")]
        assert metric_value(text, "td3sched_state_nodes") == len(listed)
    finally:
        processes.stop(engine)


def test_the_engine_decides_on_the_api_servers_nodes(cluster, namespace, source):
    """A decision never waits on the watches: with nodes but no metrics, it falls back at once."""
    d = source.service.engine.decide(PodSpec("p", cpu_milli=100, mem_mib=100), ["node-0", "node-1"])
    assert d.fallback_reason == "no_fresh_metrics" and list(d.stale) == [True, True]


# --- with a scheduler -----------------------------------------------------------------------------------

@pytest.fixture
def watching_engine(cluster, prometheus, processes, tmp_path):
    """``td3sched serve`` on the tests' Prometheus, with the control plane's kubeconfig."""
    from tests.k8s.conftest import NODES
    from tests.k8s.control_plane import Engine

    e = Engine(tmp_path / "engine", prometheus, processes, kubernetes={"kubeconfig": str(cluster.kubeconfig)})
    e.wait_fresh([n[0] for n in NODES])
    yield e
    e.stop()


def bindings_by_pod(engine, namespace: str, names: list[str]) -> dict[str, list[dict]]:
    """pod -> its binding records, once the watch has logged one for each of ``names`` (else {})."""
    by_pod: dict[str, list[dict]] = {}
    for r in engine.records():
        if r["kind"] == "binding" and r["pod"]["namespace"] == namespace:
            by_pod.setdefault(r["pod"]["name"], []).append(r)
    watched = {p for p, rs in by_pod.items() if any(r["source"] == "pod_watch" for r in rs)}
    return by_pod if watched >= set(names) else {}


def test_the_extender_path_learns_its_bindings_from_the_watch(cluster, watching_engine, namespace, start_scheduler):
    """The stock kube-scheduler tells the extender nothing after the bind: the watch does."""
    from tests.k8s.control_plane import extender_config
    from tests.k8s.test_scheduling_e2e import EXTENDER_SCHEDULER, create_pods, wait_bound

    config = extender_config(f"http://127.0.0.1:{watching_engine.http_port}")
    config["extenders"][0]["httpTimeout"] = "30s"
    start_scheduler("extender", config)
    names = create_pods(cluster, namespace, EXTENDER_SCHEDULER, 12)
    bound = wait_bound(cluster, namespace, names)
    by_pod = wait_for(lambda: bindings_by_pod(watching_engine, namespace, names), deadline_s=DEADLINE_S)
    assert by_pod, f"the watch logged no binding for some pods:\n{watching_engine.process.tail()}"
    for pod, records in by_pod.items():
        assert [(r["source"], r["node"], r["counted"]) for r in records] == [("pod_watch", bound[pod], True)], pod


def test_the_plugin_and_the_watch_report_each_binding_and_it_counts_once(cluster, watching_engine, prometheus,
                                                                         namespace, start_scheduler):
    from tests.k8s.control_plane import plugin_config
    from tests.k8s.test_scheduling_e2e import GENEROUS_MS, PLUGIN_SCHEDULER, create_pods, wait_bound

    start_scheduler("plugin", plugin_config(f"127.0.0.1:{watching_engine.grpc_port}", prometheus,
                                            engineTimeoutMillis=GENEROUS_MS))
    names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 12)
    bound = wait_bound(cluster, namespace, names)

    def both():
        by_pod = bindings_by_pod(watching_engine, namespace, names)
        return by_pod if by_pod and all(len(rs) == 2 for rs in by_pod.values()) else {}
    by_pod = wait_for(both, deadline_s=DEADLINE_S)
    assert by_pod, f"not every pod reported by both PostBind and the watch:\n{watching_engine.process.tail()}"
    for pod, records in by_pod.items():
        assert sorted(r["source"] for r in records) == ["pod_watch", "report_binding"], pod
        assert {r["node"] for r in records} == {bound[pod]}, pod
        assert sum(r["counted"] for r in records) == 1, f"{pod}: counted {sum(r['counted'] for r in records)} times"


def test_a_stock_kube_scheduler_schedules_by_a_fragmentation_model_over_the_watched_allocation(
        cluster, prometheus, processes, namespace, start_scheduler, tmp_path):
    """A model with a fragmentation share behind the extender: the node watch gives each node's pool (its
    pool label) and GPUs, the pod watch the requests, so every pod is scored with the share, none falls
    back for want of the allocation; the pods bound so far weigh in each later decision."""
    from tests.engine.conftest import pinned_model
    from tests.k8s.conftest import NODES
    from tests.k8s.control_plane import Engine, extender_config
    from tests.k8s.test_scheduling_e2e import EXTENDER_SCHEDULER, create_pods, wait_bound

    pytest.importorskip("torch")
    model = pinned_model(tmp_path / "frag-model", "fragmentation", 0.0, seed=5)  # the tiny scenario's pools
    names = [n[0] for n in NODES]
    pools = {name: ("gpu" if k % 2 else "cpu") for k, name in enumerate(names)}

    def label(value_of) -> None:
        for name in names:
            cluster.request("PATCH", f"/api/v1/nodes/{name}",
                            {"metadata": {"labels": {"td3sched.io/pool": value_of(name)}}},
                            content_type="application/merge-patch+json")

    label(pools.get)
    engine = Engine(tmp_path / "engine", prometheus, processes, model=str(model),
                    kubernetes={"kubeconfig": str(cluster.kubeconfig)})
    try:
        engine.wait_fresh(names)
        config = extender_config(f"http://127.0.0.1:{engine.http_port}")
        config["extenders"][0]["httpTimeout"] = "30s"
        start_scheduler("extender", config)
        pods = create_pods(cluster, namespace, EXTENDER_SCHEDULER, 12)
        wait_bound(cluster, namespace, pods)

        def decided():
            mine = [r for r in engine.records() if r["kind"] == "decision"
                    and r["pod"]["namespace"] == namespace and r["pod"]["name"] in pods]
            return mine if {r["pod"]["name"] for r in mine} == set(pods) else None
        decisions = wait_for(decided, deadline_s=DEADLINE_S)
        assert decisions, f"not every pod's decision reached the log:\n{engine.process.tail()}"
        assert all(r["fallback_reason"] == "" and r.get("fragmentation") == pytest.approx(0.5) for r in decisions), \
            [(r["pod"]["name"], r["fallback_reason"], r.get("fragmentation")) for r in decisions]
    finally:
        engine.stop()
        label(lambda name: None)  # a merge patch with null removes the label
