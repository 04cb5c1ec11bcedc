"""End to end on a real control plane (etcd, kube-apiserver, a kube-scheduler; loopback only): pods are
bound where the decision engine's scores say, never to a node over the safety threshold, and still
bound when the engine is dead, slow or answering garbage.

Both paths: the td3-scheduler (the TD3Score plugin: PreScore asks the engine, Filter applies the
safety rule on live metrics, PostBind reports the binding) and the stock kube-scheduler with the
engine as its HTTP extender (filter + prioritize, ignorable). The schedulers run the shipped
configurations (scheduler/config/) with only the addresses changed.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from concurrent import futures

import numpy as np
import pytest

from td3sched.policy.static_weights import served_scores, weighted_closeness
from tests.engine.prometheus_harness import free_port, wait_for
from tests.k8s.conftest import HOT_NODE, NODES
from tests.k8s.control_plane import MODEL, REPO, Engine, extender_config, plugin_config

PLUGIN_SCHEDULER = "td3-scheduler"
EXTENDER_SCHEDULER = "td3-extender"
BIND_DEADLINE_S = 120
GENEROUS_MS = 5000
"""The engine deadline of the tests about what the engine answers (not about its speed): on a loaded
2-core machine a Python engine misses the shipped 15 ms now and then, and that pod is rightly scored
statically. The deadline itself is tested with an engine slower than it."""


def create_pods(cluster, namespace: str, scheduler: str, n: int) -> list[str]:
    """``n`` pods with distinct requests (so no two share a batching signature), 100m-1.25 CPU, 64Mi-1.5Gi."""
    names = []
    for i in range(n):
        name = f"pod-{i:03d}"
        cluster.create_pod(namespace, name, scheduler, cpu=f"{100 + 50 * (i % 24) + i}m", memory=f"{64 + 61 * i % 1500}Mi")
        names.append(name)
    return names


def wait_bound(cluster, namespace: str, names: list[str]) -> dict[str, str]:
    def all_bound():
        b = cluster.bindings(namespace)
        return b if len(b) == len(names) else None
    bound = wait_for(all_bound, deadline_s=BIND_DEADLINE_S, every_s=0.5)
    if bound is None:
        have = cluster.bindings(namespace)
        pytest.fail(f"{len(have)} of {len(names)} pods bound within {BIND_DEADLINE_S} s; unbound: "
                    f"{sorted(set(names) - set(have))[:10]}")
    assert set(bound) == set(names)
    return bound


def argmax_set(scores: dict[str, float]) -> set[str]:
    best = max(scores.values())
    return {n for n, s in scores.items() if s == best}


def schedule_through_plugin(cluster, engine, prometheus, namespace, start_scheduler, n: int = 24):
    """``n`` pods scheduled by the td3-scheduler on ``engine``: (scheduler, pod -> node, the engine's log
    records once every binding is in it). None on the hot node."""
    scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prometheus,
                                                        engineTimeoutMillis=GENEROUS_MS))
    names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, n)
    bound = wait_bound(cluster, namespace, names)
    assert HOT_NODE not in bound.values(), f"a pod was bound to {HOT_NODE}, over the safety threshold"

    def logged():
        records = engine.records()
        reported = {r["pod"]["name"] for r in records if r["kind"] == "binding" and r["pod"]["namespace"] == namespace}
        return records if reported >= set(names) else None
    records = wait_for(logged, deadline_s=30, every_s=0.2)
    assert records is not None, "PostBind did not report every binding to the engine (ReportBinding)"
    return scheduler, bound, records


def test_plugin_binds_where_the_engine_scores_highest(cluster, engine, prometheus, namespace, start_scheduler):
    scheduler, bound, records = schedule_through_plugin(cluster, engine, prometheus, namespace, start_scheduler)
    names = sorted(bound)
    decisions = {r["decision_id"]: r for r in records if r["kind"] == "decision"}
    first = next(r for r in records if r["kind"] == "decision" and r["pod"]["namespace"] == namespace)
    assert {c["node"] for c in first["candidates"]} == {n[0] for n in NODES} - {HOT_NODE}, \
        "the first pod fits every node: Filter must drop exactly the one over the safety threshold"
    for r in records:
        if r["kind"] != "binding" or r["pod"]["namespace"] != namespace:
            continue
        pod = r["pod"]["name"]
        assert r["node"] == bound[pod], f"{pod}: reported bound to {r['node']}, the API says {bound[pod]}"
        decision = decisions[r["decision_id"]]  # the decision PreScore asked for, linked by its id
        assert decision["pod"]["name"] == pod and not decision["fallback_reason"]
        scores = {c["node"]: c["score"] for c in decision["candidates"]}
        assert HOT_NODE not in scores, f"{pod}: the safety filter let {HOT_NODE} through to PreScore"
        assert bound[pod] in argmax_set(scores), f"{pod}: bound to {bound[pod]} ({scores[bound[pod]]}), engine: {scores}"
    assert len({r["pod"]["name"] for r in decisions.values() if r["pod"]["namespace"] == namespace}) == len(names)
    assert len(set(bound.values())) > 1, f"every pod on one node: {bound}"
    assert scheduler.metric("td3score_decisions_total", source="engine") >= len(names)
    assert scheduler.metric("td3score_fallbacks_total") == 0
    assert scheduler.metric("td3score_safety_filtered_nodes_total") >= len(names)
    # the safety filter read the engine's copy of the metrics (metricsSource: engine), not Prometheus
    assert scheduler.metric("td3score_node_metrics_refreshes_total", reader="engine", result="ok") >= 1
    assert scheduler.metric("td3score_node_metrics_refreshes_total", reader="prometheus") == 0


def start_inference_in_plugin(engine, prometheus, start_scheduler):
    """The td3-scheduler with ``inference: plugin`` on ``engine``, once it has loaded the engine's model."""
    scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prometheus,
                                                        inference="plugin"))
    assert wait_for(lambda: scheduler.metric("td3score_model_refreshes_total", result="loaded") >= 1 or None,
                    deadline_s=60, every_s=0.2), "the plugin did not load the engine's model"
    return scheduler


def test_plugin_runs_the_engines_model_itself(cluster, engine, prometheus, namespace, start_scheduler):
    """``inference: plugin``: the scheduler fetches the engine's graph (GetModel) and decides each pod
    itself, no ScoreNodes call; the bindings still reach the engine (in batches), the safety filter still
    holds. That its scores are the engine's is the Go tests' (the shared vectors)."""
    scheduler = start_inference_in_plugin(engine, prometheus, start_scheduler)
    names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 24)
    bound = wait_bound(cluster, namespace, names)
    assert HOT_NODE not in bound.values(), f"a pod was bound to {HOT_NODE}, over the safety threshold"
    assert len(set(bound.values())) > 1, f"every pod on one node: {bound}"

    def reported():
        records = engine.records()
        mine = [r for r in records if (r.get("pod") or {}).get("namespace") == namespace]
        return mine if {r["pod"]["name"] for r in mine if r["kind"] == "binding"} >= set(names) else None
    records = wait_for(reported, deadline_s=30, every_s=0.2)
    assert records is not None, "the batched bindings did not all reach the engine (ReportBindings)"
    assert all(r["node"] == bound[r["pod"]["name"]] for r in records if r["kind"] == "binding")
    assert not [r for r in records if r["kind"] == "decision"], "the engine was asked to decide a pod"
    assert scheduler.metric("td3score_decisions_total", source="plugin") == len(names)
    assert scheduler.metric("td3score_decisions_total", source="engine") == 0
    assert scheduler.metric("td3score_fallbacks_total") == 0
    assert scheduler.metric("td3score_safety_filtered_nodes_total") >= len(names)


def test_plugin_runs_a_fragmentation_model_itself(cluster, prometheus, processes, namespace, start_scheduler,
                                                  tmp_path):
    """``inference: plugin`` with the shipped blend served (action mode fragmentation): GetModel sends its
    card's typical pods with the graph, so the scheduler decides each pod itself, the share included; no
    pod falls back. That its scores are the engine's is the Go tests' (fragmentation_decisions)."""
    engine = Engine(tmp_path / "engine", prometheus, processes, model=str(REPO / "models" / "static-blend-dlrm-small"),
                    kubernetes={"kubeconfig": str(cluster.kubeconfig)})  # its own decisions need the allocation
    try:
        engine.wait_fresh([n[0] for n in NODES])
        scheduler = start_inference_in_plugin(engine, prometheus, start_scheduler)
        names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 12)
        bound = wait_bound(cluster, namespace, names)
        assert HOT_NODE not in bound.values(), f"a pod was bound to {HOT_NODE}, over the safety threshold"
        assert scheduler.metric("td3score_decisions_total", source="plugin") == len(names)
        assert scheduler.metric("td3score_fallbacks_total") == 0
    finally:
        engine.stop()


def held_copy(model, folder, hold_s: float):
    """The shipped model with a card that declares an action hold: the same network, asked once per hold
    (the ONNX graph exported again, as it names the card it was made from)."""
    import json
    import shutil

    from td3sched.rl.onnx_export import export_onnx

    shutil.copytree(model, folder)
    card = json.loads((folder / "model.json").read_text())
    card["action_hold_s"] = hold_s
    (folder / "model.json").write_text(json.dumps(card, indent=1))
    export_onnx(folder)
    return folder


def test_plugin_scores_a_held_action_itself_one_engine_call_per_hold(cluster, prometheus, processes, tmp_path,
                                                                     namespace, start_scheduler):
    """A model that holds its action for 600 s: the engine answers the first pod and says how long its
    action holds; the plugin scores every later pod with it (no engine call), over its own metrics."""
    engine = Engine(tmp_path / "engine", prometheus, processes, model=str(held_copy(MODEL, tmp_path / "held", 600)))
    try:
        engine.wait_fresh([n[0] for n in NODES])
        scheduler, bound, records = schedule_through_plugin(cluster, engine, prometheus, namespace, start_scheduler)
    finally:
        engine.stop()
    names = sorted(bound)
    decided = [r for r in records if r["kind"] == "decision" and r["pod"]["namespace"] == namespace]
    assert len(decided) == 1, f"{len(decided)} engine decisions for {len(names)} pods within one hold"
    assert not decided[0]["fallback_reason"]
    assert scheduler.metric("td3score_decisions_total", source="engine") == 1
    assert scheduler.metric("td3score_decisions_total", source="held") == len(names) - 1
    assert scheduler.metric("td3score_fallbacks_total") == 0
    assert scheduler.metric("td3score_safety_filtered_nodes_total") >= len(names)


def test_extender_binds_where_the_engine_scores_highest(cluster, engine, namespace, start_scheduler):
    config = extender_config(f"http://127.0.0.1:{engine.http_port}")
    config["extenders"][0]["httpTimeout"] = "30s"  # an extender past it is ignored, by design
    start_scheduler("extender", config)
    names = create_pods(cluster, namespace, EXTENDER_SCHEDULER, 24)
    bound = wait_bound(cluster, namespace, names)
    assert HOT_NODE not in bound.values(), f"a pod was bound to {HOT_NODE}, over the safety threshold"
    records = wait_for(lambda: (rs := engine.records()) and rs, deadline_s=10)
    by_pod = {}
    for r in records:  # /prioritize: one decision per pod's scheduling cycle
        if r["kind"] == "decision" and r["pod"]["namespace"] == namespace:
            by_pod.setdefault(r["pod"]["name"], []).append(r)
    assert set(by_pod) == set(names), f"pods without a /prioritize decision: {set(names) - set(by_pod)}"
    for pod, decisions in by_pod.items():
        assert len(decisions) == 1, f"{pod}: {len(decisions)} decisions for one scheduling cycle"
        d = decisions[0]
        assert HOT_NODE not in [c["node"] for c in d["candidates"]], f"{pod}: /filter let {HOT_NODE} through"
        # the extender answered the score in 0-10, the best alone at the top: recompute it from the logged
        # utilisation and action
        u = np.array([c["u"] for c in d["candidates"]], dtype=float)
        extender_scores = served_scores(weighted_closeness(u, np.array(d["weights"]), d["tau"]), 10).tolist()
        scores = dict(zip([c["node"] for c in d["candidates"]], extender_scores))
        assert bound[pod] in argmax_set(scores), f"{pod}: bound to {bound[pod]}, the extender answered {scores}"


def test_plugin_with_a_dead_engine_still_schedules_on_the_static_score(cluster, prometheus, namespace,
                                                                       start_scheduler):
    dead = free_port()  # nothing listens there
    scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{dead}", prometheus))
    wait_for(lambda: scheduler.metric("td3score_node_metrics_refreshes_total", result="ok") >= 1, deadline_s=30)
    names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 12)
    bound = wait_bound(cluster, namespace, names)
    assert HOT_NODE not in bound.values(), "the safety filter works without the engine (its own live metrics)"
    assert scheduler.metric("td3score_node_metrics_refreshes_total", reader="engine", result="error") >= 1
    assert scheduler.metric("td3score_node_metrics_refreshes_total", reader="prometheus", result="ok") >= 1
    assert scheduler.metric("td3score_fallbacks_total", reason="unavailable") >= len(names)
    assert scheduler.metric("td3score_decisions_total", source="engine") == 0


TYPICAL_PODS = {"pools": ["a"], "sets": [{"request": [[3000.0, 2048.0, 0.0, 0.0]], "gpu_count": [0], "gpu_milli": [0],
                                           "weight": [1.0]}]}
"""One typical pod of 3 cores: a node whose free CPU it no longer fits counts that CPU as fragmented."""


def fgd_argmax(cluster, pod_cpu_milli: float, pod_mem_mib: float) -> tuple[set[str], np.ndarray]:
    """The nodes the plugin's fallback with a fragmentation share of 1 scores 100 for such a pod (the
    engine's fallback rule: FGD's decrease over the feasible candidates, scaled to [0, 1], rounded), from
    the API server's nodes and every bound pod's requests; and the decreases."""
    from td3sched.engine.decision import FragmentationMeasure, PodSpec
    from td3sched.engine.kubernetes_objects import pod_from_k8s
    from td3sched.engine.kubernetes_source import node_allocatable
    from td3sched.engine.state import Allocation
    from td3sched.metrics.fragmentation import typical_pods_from_json
    from td3sched.policy.static_weights import minmax

    names = [n[0] for n in NODES]
    nodes = {n["metadata"]["name"]: n for n in cluster.request("GET", "/api/v1/nodes")["items"]}
    free = np.array([node_allocatable(nodes[name], 100.0, 100.0)[1] for name in names])
    for pod in cluster.request("GET", "/api/v1/pods")["items"]:
        node = pod["spec"].get("nodeName")
        if node in names:
            spec = pod_from_k8s(pod)
            free[names.index(node)] -= [spec.cpu_milli, spec.mem_mib, spec.disk_gib, spec.rdma_pct]
    feasible = [i for i, name in enumerate(names) if name != HOT_NODE and free[i, 0] >= pod_cpu_milli
                and free[i, 1] >= pod_mem_mib]
    allocation = Allocation(free[feasible], np.zeros((len(feasible), 1)), ("a",) * len(feasible))
    request = PodSpec("p", cpu_milli=pod_cpu_milli, mem_mib=pod_mem_mib).request(0.0)
    decrease = FragmentationMeasure(*typical_pods_from_json(TYPICAL_PODS)).decrease(
        request, np.arange(len(feasible)), allocation)
    scores = np.rint(100 * minmax(decrease))
    return {names[feasible[j]] for j in np.flatnonzero(scores == scores.max())}, decrease


def test_plugin_with_a_dead_engine_falls_back_to_fgd_s_blend(cluster, prometheus, namespace, start_scheduler,
                                                             tmp_path):
    """With fallbackFragmentation 1 (FGD's order alone) and the engine dead, each pod, created once the one
    before is bound, goes where FGD's decrease over the nodes' allocation (the API server's nodes and
    bound pods, each node's pool from its label) is highest, as the engine's fallback would score it."""
    import json

    typical = tmp_path / "typical.json"
    typical.write_text(json.dumps(TYPICAL_PODS), encoding="utf-8")
    names = [n[0] for n in NODES]

    def label(value) -> None:
        for name in names:
            cluster.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {"td3sched.io/pool": value}}},
                            content_type="application/merge-patch+json")

    label("a")
    try:
        scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{free_port()}", prometheus,
                                                            fallbackFragmentation=1.0, fallbackTypicalPods=str(typical)))
        wait_for(lambda: scheduler.metric("td3score_node_metrics_refreshes_total", result="ok") >= 1, deadline_s=30)
        moved = 0
        for i, cpu in enumerate([1500, 1000, 2500, 500, 2000, 1200, 3000, 700, 1800, 2200]):
            expected, decrease = fgd_argmax(cluster, cpu, 256.0)
            moved += np.ptp(decrease) > 0
            name = f"frag-{i:02d}"
            cluster.create_pod(namespace, name, PLUGIN_SCHEDULER, cpu=f"{cpu}m", memory="256Mi")
            node = wait_bound(cluster, namespace, [f"frag-{j:02d}" for j in range(i + 1)])[name]
            assert node in expected, f"{name} ({cpu}m) bound to {node}; FGD's best: {sorted(expected)} ({decrease})"
        assert moved >= 5, "FGD's decrease hardly told the nodes apart: the test would pass on any order"
        assert scheduler.metric("td3score_fallbacks_total", reason="unavailable") >= 10
    finally:
        label(None)  # a merge patch with null removes the label


def test_an_unreadable_typical_pods_file_stops_the_scheduler_naming_it(cluster, prometheus, start_scheduler,
                                                                       tmp_path):
    missing = tmp_path / "no-such-typical-pods.json"
    with pytest.raises(RuntimeError, match="no-such-typical-pods.json"):
        start_scheduler("plugin", plugin_config(f"127.0.0.1:{free_port()}", prometheus, fallbackFragmentation=0.25,
                                                fallbackTypicalPods=str(missing)))


def test_extender_dead_engine_is_ignored(cluster, namespace, start_scheduler):
    start_scheduler("extender", extender_config(f"http://127.0.0.1:{free_port()}"))
    names = create_pods(cluster, namespace, EXTENDER_SCHEDULER, 12)
    wait_bound(cluster, namespace, names)  # ignorable: true: scheduling goes on without the extender


class SlowProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk ``delay_s`` before passing it on: the engine,
    slower than the plugin's deadline."""

    def __init__(self, target_port: int, delay_s: float):
        self.target_port, self.delay_s = target_port, delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while chunk := src.recv(65536):
                time.sleep(self.delay_s)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        self.stopped.set()
        self.listener.close()


def test_plugin_with_an_engine_slower_than_the_deadline_falls_back_on_time(cluster, engine, prometheus, namespace,
                                                                           start_scheduler):
    proxy = SlowProxy(engine.grpc_port, delay_s=0.3)  # 300 ms a chunk against a 15 ms deadline
    try:
        scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{proxy.port}", prometheus))
        wait_for(lambda: scheduler.metric("td3score_node_metrics_refreshes_total", result="ok") >= 1, deadline_s=30)
        names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 10)
        bound = wait_bound(cluster, namespace, names)
        assert HOT_NODE not in bound.values()
        assert scheduler.metric("td3score_fallbacks_total", reason="timeout") >= len(names)
        # each engine call was cut at the deadline, none waited for the proxy's 600 ms round trip
        cut = scheduler.metric("td3score_engine_request_duration_seconds_bucket", call="score_nodes", le="0.125")
        every = scheduler.metric("td3score_engine_request_duration_seconds_count", call="score_nodes")
        assert every >= len(names) and cut == every, f"{cut} of {every} ScoreNodes calls ended within 125 ms"
    finally:
        proxy.stop()


class GarbageEngine:
    """A DecisionEngine on 127.0.0.1 that answers every ScoreNodes with ``spoil``(a good answer)."""

    def __init__(self, spoil):
        import grpc

        from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

        outer = self
        self.calls = 0

        class Servicer(engine_pb2_grpc.DecisionEngineServicer):
            def ScoreNodes(self, request, context):
                outer.calls += 1
                reply = engine_pb2.ScoreNodesResponse(
                    action=engine_pb2.Action(weights=[0.25] * 4, tau=0.0), decision_id=f"g-{outer.calls}")
                for n in request.candidates:
                    reply.scores.add(node=n, score=50)
                spoil(reply)
                return reply

            def ReportBinding(self, request, context):
                return engine_pb2.ReportBindingResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        engine_pb2_grpc.add_DecisionEngineServicer_to_server(Servicer(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(0)


def _nan_weights(reply):
    reply.action.weights[0] = math.nan


def _score_out_of_range(reply):
    reply.scores[0].score = 7_000


def _node_missing(reply):
    del reply.scores[-1]


@pytest.mark.parametrize("spoil, reason", [(_nan_weights, "nan"), (_score_out_of_range, "invalid"),
                                           (_node_missing, "missing_node")])
def test_plugin_with_an_engine_answering_garbage_falls_back(cluster, prometheus, namespace, start_scheduler, spoil,
                                                            reason):
    fake = GarbageEngine(spoil)
    try:
        scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{fake.port}", prometheus,
                                                            engineTimeoutMillis=GENEROUS_MS))
        wait_for(lambda: scheduler.metric("td3score_node_metrics_refreshes_total", result="ok") >= 1, deadline_s=30)
        names = create_pods(cluster, namespace, PLUGIN_SCHEDULER, 6)
        bound = wait_bound(cluster, namespace, names)
        assert HOT_NODE not in bound.values()
        assert fake.calls >= len(names)
        assert scheduler.metric("td3score_fallbacks_total", reason=reason) >= len(names)
        assert scheduler.metric("td3score_decisions_total", source="engine") == 0
    finally:
        fake.stop()


def test_every_node_is_a_fake_with_status(cluster):
    """The fake nodes carry what the scheduler reads: allocatable CPU and memory, no taints."""
    nodes = {n["metadata"]["name"]: n for n in cluster.request("GET", "/api/v1/nodes")["items"]}
    for name, cores, _, mem_gib, _ in NODES:
        status = nodes[name]["status"]["allocatable"]
        assert status["cpu"] == f"{cores * 1000}m" or status["cpu"] == str(cores)
        assert not nodes[name]["spec"].get("taints")


def test_invalid_plugin_args_stop_the_scheduler_naming_the_field(k8s_bins, cluster, prometheus, tmp_path):
    import subprocess

    import yaml

    config = plugin_config("127.0.0.1:1", prometheus, safetyCPUUtil=1.5)
    config["clientConnection"]["kubeconfig"] = str(cluster.kubeconfig)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run([str(k8s_bins / "td3-scheduler"), f"--config={path}", "--secure-port=0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "TD3Score args: args.safetyCPUUtil: Invalid value: 1.5: expected a share in (0, 1]" in result.stderr


SIBLING_SPEC = "static-weights:w=1/0/0/0:tau=1:spread=3"
"""Packing (tau 1: the busiest node by CPU wins) with a sibling spread: without the spread every replica
would go to the busiest node under the safety threshold; with it, each goes to a node no sibling runs on."""
REPLICAS = 6
"""Fewer than the nodes under the safety threshold (7): each replica can have a node of its own."""


def create_replica(cluster, namespace: str, name: str, scheduler: str) -> None:
    """A pod of the ReplicaSet ``web`` (an owner reference marked controller; no controller-manager runs,
    so the ReplicaSet need not exist)."""
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True,
            "uid": "0b9c6c1e-0000-4000-8000-000000000002"}]},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})


@pytest.mark.parametrize("path", ["plugin", "plugin-inference", "extender", "dead-engine"])
def test_replicas_of_one_controller_land_on_nodes_of_their_own(cluster, prometheus, processes, namespace,
                                                               start_scheduler, tmp_path, path):
    """A model whose card fixes a sibling spread, served with the pod watch: through the td3-scheduler
    asking the engine, through the td3-scheduler running the model itself (siblings from its NodeInfo, where
    its own assumed pods count), through the stock kube-scheduler with the extender, and through the
    td3-scheduler with no engine at all, on its static fallback with the model's spread (``fallbackSpread``).

    All replicas wait before the scheduler starts, as a ReplicaSet's burst does: it scores each before the
    last one's binding reaches the engine, which counts a replica where its answer ranked it first until
    then (``ShadowState.expect_pod``; without that they stack on one node). The extender answers the best
    node alone at the top of its 0-10 (``served_scores``), so kube-scheduler binds where the engine
    counted."""
    from td3sched.rl.static_model import write_static_model

    model = write_static_model(SIBLING_SPEC, tmp_path / "sibling", "tiny")
    engine = Engine(tmp_path / "engine", prometheus, processes, model=str(model),
                    kubernetes={"kubeconfig": str(cluster.kubeconfig)})
    try:
        engine.wait_fresh([n[0] for n in NODES])
        names = [f"web-{i}" for i in range(REPLICAS)]
        for name in names:  # all waiting before the scheduler starts: it takes them back to back
            create_replica(cluster, namespace, name, EXTENDER_SCHEDULER if path == "extender" else PLUGIN_SCHEDULER)
        if path == "plugin-inference":
            scheduler = start_inference_in_plugin(engine, prometheus, start_scheduler)
        elif path == "dead-engine":  # the model's score as the static fallback: packing, the spread of 3
            scheduler = start_scheduler("plugin", plugin_config(
                f"127.0.0.1:{free_port()}", prometheus, fallbackWeights=[1, 0, 0, 0], fallbackTau=1.0,
                fallbackSpread=3.0))
        elif path == "plugin":
            scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prometheus,
                                                                engineTimeoutMillis=GENEROUS_MS))
        else:
            config = extender_config(f"http://127.0.0.1:{engine.http_port}")
            config["extenders"][0]["httpTimeout"] = "30s"
            scheduler = start_scheduler("extender", config)
        bound = wait_bound(cluster, namespace, names)
        records = engine.records()
    finally:
        engine.stop()
    assert HOT_NODE not in bound.values(), f"a replica was bound to {HOT_NODE}, over the safety threshold"
    assert len(set(bound.values())) == REPLICAS, f"replicas share a node: {bound}"
    decided = [r for r in records if r["kind"] == "decision" and r["pod"]["namespace"] == namespace]
    if path == "plugin-inference":
        assert not decided and scheduler.metric("td3score_decisions_total", source="plugin") == REPLICAS
    elif path == "dead-engine":
        assert not decided and scheduler.metric("td3score_decisions_total", source="static") >= REPLICAS
    else:
        assert len(decided) >= REPLICAS and all(not r["fallback_reason"] and r["spread"] == 3.0 for r in decided)
        assert {r["pod"]["owner"] for r in decided} == {f"{namespace}/ReplicaSet/web"}
