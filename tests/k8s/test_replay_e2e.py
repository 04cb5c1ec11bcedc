"""A trace replay on the live control plane: the pods of a tiny window go, one decision at a time, to a
real kube-scheduler (the td3-scheduler with the TD3Score plugin, the shipped configuration) on the
test's apiserver, whose nodes and bound pods mirror the simulated cluster's; the engine it calls over
loopback gRPC is fed from the simulation (``engine.twin``), with the shipped model. Every placement is
kube-scheduler's, and the run's placements and metrics equal the simulator's own run through the
same engine for the same seed.

What mirrors what (``LiveMirror``): a ready simulated node is a Node with the simulator's allocatable
(CPU, memory, ``ephemeral-storage`` for disk, ``koordinator.sh/rdma`` for RDMA, ``nvidia.com/gpu``),
its pool as a label; a pod asks what ``kubernetes_objects.pod_to_k8s`` writes for it (the engine reads
the same fields back, through the plugin), its pool as a node selector, and an app's per-node cap
(the simulator's anti-affinity) as one unit of an extended resource per app of which a node offers
the cap. A pod leaves the API when it leaves the simulated node, a node when the simulator's
autoscaler removes it. A node under memory pressure (the simulator's kubelet) carries the
memory-pressure taint, which every pod but a BestEffort one tolerates (as the PodTolerationRestriction
admission plugin writes it); a node over the safety threshold of observed CPU, a taint no pod tolerates.

kube-scheduler breaks a tie between the best nodes at random, the simulator from the run's seed: the
simulator's run takes kube-scheduler's pick where the engine's best score is shared (and nowhere
else; the tie count is printed). The plugin's safety filter reads Prometheus, which has no metrics for
these nodes (it lets them pass, fail-open): the taint above stands in for it here, and
``test_scheduling_e2e`` holds the plugin's own filter to live Prometheus metrics.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np
import pytest

from td3sched.engine.kubernetes_objects import GPU_RESOURCE, QOS_NAMES, RDMA_RESOURCE, pod_to_k8s
from td3sched.engine.twin import EngineTwin, pod_spec
from td3sched.rl.onnx_actor import load_actor
from td3sched.scenario import load_scenario
from td3sched.simulator.engine import Simulation
from tests.engine.prometheus_harness import wait_for
from tests.k8s.control_plane import MODEL, ApiError, plugin_config

WINDOW_H = 2.0
"""Hours of tiny's test span replayed (92 pods arrive in it), from an empty cluster as ``tests/engine/test_twin.py``."""
SEED = 1
LABEL = "td3sched.test/replay"
POOL_LABEL = "td3sched.test/pool"
APP_RESOURCE = "td3sched.test/app-{}"
SYNC_LABEL = "td3sched.test/sync"
MEMORY_PRESSURE = {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}
OVER_SAFETY = {"key": "td3sched.test/over-safety-threshold", "effect": "NoSchedule"}
BIND_DEADLINE_S = 60.0
BEST_EFFORT = QOS_NAMES.index("BestEffort")
MAX_BATCH_AGE_S = 0.6
"""kube-scheduler reuses the previous pod's ranking for an identical pod within 500 ms (opportunistic
batching, KEP-5598): the simulator asks for every pod, so the replay spaces identical pods by more."""


def quantity(value: float, unit: str = "") -> str:
    if value != int(value):
        raise ValueError(f"{value!r}{unit}: the replay writes whole quantities only")
    return f"{int(value)}{unit}"


class LiveMirror:
    """The live cluster kept equal to the simulated one: nodes, bound pods, and kube-scheduler's cache
    caught up (its ``scheduler_cache_size`` gauges, refreshed every second) before each decision."""

    def __init__(self, plane, namespace: str, world, start_s: float, end_s: float):
        self.plane, self.namespace = plane, namespace
        w = world.workload
        window = (w.arrival_s >= start_s) & (w.arrival_s < end_s)
        caps: dict[int, set[int]] = {}
        for app, cap in zip(w.app[window].tolist(), w.max_per_node[window].tolist()):
            caps.setdefault(app, set()).add(cap)
        mixed = {w.app_names[a]: sorted(c) for a, c in caps.items() if len(c) > 1 and max(c) > 0}
        if mixed:  # an extended resource caps every pod that asks for it alike
            raise ValueError(f"apps with pods of different per-node caps in the window: {mixed}")
        self.cap = {a: next(iter(c)) for a, c in caps.items() if max(c) > 0}
        self.workload = w
        self.nodes: set[str] = set()
        self.taints: dict[str, tuple] = {}
        """Live node -> its taints."""
        self.sync_node, self.syncs = f"sync-{namespace}"[:63].rstrip("-"), 0
        self.pods: dict[int, str] = {}
        """Simulated pod index -> live pod name, of the pods bound in both."""
        self.dirty = True
        self.scheduler = None
        self.baseline = (0, 0)

    def start(self, scheduler) -> None:
        """Every node and pod of the API in kube-scheduler's cache: the baseline the mirror adds to."""
        self.scheduler = scheduler
        self.plane.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": self.sync_node, "labels": {SYNC_LABEL: "0"}}})
        self.plane.write_node_status(self.sync_node, {"cpu": "1", "memory": "1Gi", "pods": "1000"})
        nodes = len(self.plane.request("GET", "/api/v1/nodes")["items"])
        pods = sum(1 for p in self.plane.request("GET", "/api/v1/pods")["items"] if p["spec"].get("nodeName"))
        self.baseline = (nodes, pods)
        self.dirty = True
        self.settle()

    def node_resources(self, cluster, n: int) -> dict:
        cpu, mem, disk, rdma = cluster.allocatable[n].tolist()
        resources = {"cpu": quantity(cpu, "m"), "memory": quantity(mem, "Mi"), "ephemeral-storage": quantity(disk, "Gi"),
                     RDMA_RESOURCE: quantity(rdma), "pods": "1000"}
        gpus = int((cluster.gpu_capacity[n] > 0).sum())
        if gpus:
            resources[GPU_RESOURCE] = str(gpus)
        resources.update({APP_RESOURCE.format(a): str(cap) for a, cap in self.cap.items()})
        return resources

    def sync_nodes(self, cluster) -> None:
        ready = {str(cluster.names[n]): n for n in np.flatnonzero(cluster.ready)}
        for name in sorted(self.nodes - set(ready)):
            self.plane.delete_node(name)
            self.nodes.discard(name)
            self.taints.pop(name, None)
            self.dirty = True
        for name in sorted(set(ready) - self.nodes):
            n = ready[name]
            self.plane.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {"kubernetes.io/hostname": name, LABEL: self.namespace,
                                         POOL_LABEL: cluster.pool_names[int(cluster.pool_of[n])]}}})
            self.plane.write_node_status(name, self.node_resources(cluster, n))
            self.nodes.add(name)
            self.dirty = True

    def sync_taints(self, cluster, t: float, safety_cpu_util: float) -> bool:
        """The taints that hold pods off the live nodes the simulator's Filter holds them off
        (``kernels.filter_nodes``) at ``t``: the memory-pressure taint (BestEffort pods), and one no pod
        tolerates where observed CPU is above the safety threshold (the plugin's safety filter reads
        Prometheus, which has no metrics for these nodes). True when one changed."""
        ready = np.flatnonzero(cluster.ready)
        calm = (cluster.observed[ready, 1] < cluster.memory_pressure_mib[ready]) & (cluster.pressure_until[ready] <= t)
        hot = ~(cluster.observed[ready, 0] <= safety_cpu_util * cluster.allocatable[ready, 0])
        taints = {str(cluster.names[n]): tuple(x for x, on in ((MEMORY_PRESSURE, not c), (OVER_SAFETY, h)) if on)
                  for n, c, h in zip(ready, calm, hot)}
        changed = [name for name in sorted(taints) if taints[name] != self.taints.get(name, ())]
        for name in changed:
            self.plane.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": list(taints[name]) or None}},
                               content_type="application/merge-patch+json")
        self.taints = taints
        return bool(changed)

    def barrier(self, deadline_s: float = 30.0) -> None:
        """Until kube-scheduler's cache has every node update made so far: one watch delivers them in
        order, so a probe pod that only the sync node's newest label admits is bound once the cache
        holds that label and everything written to nodes before it."""
        self.syncs += 1
        self.plane.request("PATCH", f"/api/v1/nodes/{self.sync_node}", {"metadata": {"labels": {SYNC_LABEL: str(self.syncs)}}},
                           content_type="application/merge-patch+json")
        name = f"probe-{self.syncs}"
        self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "td3-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {SYNC_LABEL: str(self.syncs)},
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}})
        if not wait_for(lambda: self.plane.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{name}")["spec"]
                        .get("nodeName"), deadline_s=deadline_s, every_s=0.02):
            raise RuntimeError(f"the sync probe {name} was not bound within {deadline_s} s")
        self.baseline = (self.baseline[0], self.baseline[1] + 1)  # the probe stays, on the sync node

    def settle(self, deadline_s: float = 30.0) -> None:
        """Until kube-scheduler's cache holds exactly the live nodes and bound pods."""
        if not self.dirty:
            return
        want = {"nodes": self.baseline[0] + len(self.nodes), "pods": self.baseline[1] + len(self.pods)}

        def caught_up():
            return all(self.scheduler.metric("scheduler_cache_size", type=k) == v for k, v in want.items())
        if not wait_for(caught_up, deadline_s=deadline_s, every_s=0.1):
            have = {k: self.scheduler.metric("scheduler_cache_size", type=k) for k in want}
            raise RuntimeError(f"kube-scheduler's cache did not catch up within {deadline_s} s: {have}, expected {want}")
        self.dirty = False

    def live_pod(self, pod) -> dict:
        """The v1.Pod asking what the simulated pod asks."""
        w, i = self.workload, pod.index
        obj = pod_to_k8s(pod_spec(pod, self.namespace))
        obj.pop("status")
        obj["metadata"].pop("uid")
        spec = obj["spec"]
        spec.update({"schedulerName": "td3-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {LABEL: self.namespace}})
        if pod.qos != BEST_EFFORT:
            spec["tolerations"] = [{**MEMORY_PRESSURE, "operator": "Exists"}]
        if w.pool[i] >= 0:
            spec["nodeSelector"][POOL_LABEL] = w.pool_names[int(w.pool[i])]
        app = int(w.app[i])
        if app in self.cap:
            resources = spec["containers"][0]["resources"]
            key = APP_RESOURCE.format(app)
            resources["requests"][key] = "1"
            resources.setdefault("limits", {})[key] = "1"  # extended resources: limits equal requests
        return obj

    def bind(self, pod) -> str:
        """Create the pod, wait until kube-scheduler has bound it: the node."""
        name = f"pod-{pod.index}"
        self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", self.live_pod(pod))

        def node():
            got = self.plane.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{name}")
            return got["spec"].get("nodeName")
        bound = wait_for(node, deadline_s=BIND_DEADLINE_S, every_s=0.02)
        if not bound:
            raise AssertionError(f"{name} (simulated pod {pod.index}) not bound within {BIND_DEADLINE_S} s")
        self.pods[pod.index] = name
        return bound

    def release(self, pod) -> None:
        name = self.pods.pop(pod.index)
        try:
            self.plane.delete_pod(self.namespace, name)
        except ApiError as exc:
            if exc.status != 404:
                raise
        self.dirty = True

    def clear(self) -> None:
        for index in list(self.pods):
            self.plane.delete_pod(self.namespace, self.pods.pop(index))
        for name in sorted(self.nodes) + [self.sync_node]:
            try:
                self.plane.delete_node(name)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.nodes.clear()


class KubeSchedulerReplay(EngineTwin):
    """The simulation's pods placed by a live kube-scheduler: the engine (fed by the simulation, served
    over loopback gRPC) answers the td3-scheduler's PreScore; the simulator binds each pod where
    kube-scheduler bound it. Checked at every decision: kube-scheduler's candidates are the simulator's
    feasible nodes, the plugin told the engine what the simulator tells it of the pod, and the pod went
    to a node with the engine's best score."""

    name = "kube-scheduler-replay"

    def __init__(self, actor, mirror: LiveMirror, start_scheduler, safety_cpu_util: float):
        super().__init__(actor, "grpc", safety_cpu_util=safety_cpu_util)
        self.mirror, self.start_scheduler = mirror, start_scheduler
        self.asked: dict[str, tuple] = {}
        self.reported: set[str] = set()
        self.ties = self.single = 0
        self._last: tuple | None = None

    def attach(self, context) -> None:
        super().attach(context)
        service = self.service
        score_nodes, report_binding = service.score_nodes, service.report_binding

        def recording_score_nodes(pod, candidates, api="score_nodes"):
            decision_id, d = score_nodes(pod, candidates, api=api)
            self.asked[pod.name] = (pod, list(d.candidates), d.scores_0_100())
            return decision_id, d

        def recording_report_binding(pod, node, decision_id="", source="report_binding"):
            counted = report_binding(pod, node, decision_id, source=source)
            self.reported.add(pod.name)
            return counted
        service.score_nodes, service.report_binding = recording_score_nodes, recording_report_binding
        self.mirror.start(self.start_scheduler(self._servers[0].port))

    def filter(self, pod, nodes, cluster):
        out = super().filter(pod, nodes, cluster)
        self.mirror.sync_nodes(cluster)
        if self.mirror.sync_taints(cluster, pod.time_s, self.safety_cpu_util):
            self.mirror.barrier()
        self.mirror.settle()
        return out

    def score(self, pod, nodes, cluster) -> np.ndarray:
        feasible = cluster.names[nodes].tolist()
        expected = pod_spec(pod, self.mirror.namespace)
        signature = dataclasses.replace(expected, name="")
        if self._last is not None and self._last[0] == signature:
            time.sleep(max(0.0, self._last[1] + MAX_BATCH_AGE_S - time.monotonic()))
        name = f"pod-{pod.index}"
        self.asked.pop(name, None)
        node = self.mirror.bind(pod)
        self._last = (signature, time.monotonic())
        if not wait_for(lambda: name in self.reported, deadline_s=10, every_s=0.005):
            raise AssertionError(f"{name}: the plugin's PostBind never reported the binding (ReportBinding)")
        self.reported.discard(name)
        asked = self.asked.pop(name, None)
        if asked is None:
            # kube-scheduler scores nothing when one node passes Filter
            assert feasible == [node], f"{name}: bound to {node} without asking the engine; simulator: {feasible}"
            self.single += 1
        else:
            told, candidates, scores = asked
            assert sorted(candidates) == sorted(feasible), \
                f"{name}: kube-scheduler's candidates {sorted(candidates)}, the simulator's {sorted(feasible)}; " \
                f"{self.why(pod, set(candidates) ^ set(feasible), cluster)}"
            assert dataclasses.replace(told, name="", namespace="") == dataclasses.replace(expected, name="", namespace=""), \
                f"{name}: the plugin told the engine {told}, the simulator {expected}"
            by_node = dict(zip(candidates, scores))
            best = max(by_node.values())
            assert by_node[node] == best, f"{name}: bound to {node} ({by_node[node]}), the engine's best is {best}: {by_node}"
            self.ties += sum(s == best for s in by_node.values()) > 1
        self.decisions += 1
        return np.array([name == node for name in feasible], dtype=np.float64)

    def why(self, pod, names, cluster) -> str:
        """What the simulator knows of ``names`` that its Filter reads besides the requests."""
        out = []
        for name in sorted(names):
            n = int(np.flatnonzero(cluster.names == name)[0])
            out.append(f"{name}: observed CPU {cluster.observed[n, 0] / cluster.allocatable[n, 0]:.3f} of allocatable, "
                       f"memory {cluster.observed[n, 1]:.0f} MiB (pressure at {cluster.memory_pressure_mib[n]:.0f}, "
                       f"until {cluster.pressure_until[n]:.0f} s, now {pod.time_s:.0f} s), live taint "
                       f"{self.mirror.taints.get(name)}, free {cluster.free[n].tolist()}")
        return "; ".join(out)

    def bound(self, pod, node, cluster) -> None:
        self.placements.append((int(pod.index), str(cluster.names[node])))  # the plugin's PostBind reported it

    def released(self, pod, node, cluster, reason="departure") -> None:
        self.mirror.release(pod)


class TieTaker(EngineTwin):
    """The simulator's run through the engine in process, scores rounded as ScoreNodes answers them,
    taking the replay's node where the engine's best score is shared by several."""

    def __init__(self, actor, placements: list[tuple[int, str]], safety_cpu_util: float):
        super().__init__(actor, "in-process", like="grpc", safety_cpu_util=safety_cpu_util)
        self.live = list(placements)
        self.taken = 0

    def score(self, pod, nodes, cluster) -> np.ndarray:
        scores = super().score(pod, nodes, cluster)
        k = len(self.placements)
        if k < len(self.live) and self.live[k][0] == pod.index:
            names = cluster.names[nodes].tolist()
            if self.live[k][1] in names:
                i = names.index(self.live[k][1])
                if scores[i] == scores.max() and (scores == scores.max()).sum() > 1:
                    scores = scores.copy()
                    scores[i] += 0.5
                    self.taken += 1
        return scores


@pytest.fixture
def tiny_window():
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    return scenario.build(SEED), start, start + WINDOW_H * 3600


def test_trace_replay_places_as_the_simulator(cluster, prometheus, namespace, start_scheduler, tiny_window):
    world, start, end = tiny_window
    safety = world.config.safety_cpu_util
    mirror = LiveMirror(cluster, namespace, world, start, end)

    def scheduler_for(port: int):  # generous deadlines: a missed one (static score, lost report) is other tests' subject
        return start_scheduler("plugin", plugin_config(f"127.0.0.1:{port}", prometheus, engineTimeoutMillis=10_000,
                                                       bindingTimeoutMillis=10_000, safetyCPUUtil=safety))
    replay = KubeSchedulerReplay(load_actor(MODEL), mirror, scheduler_for, safety)
    began = time.monotonic()
    try:
        with replay:
            live = Simulation(world, replay, SEED, start, end).run()
    finally:
        mirror.clear()
    with TieTaker(load_actor(MODEL), replay.placements, safety) as local:
        simulated = Simulation(world, local, SEED, start, end).run()
    print(f"\nreplay: {replay.decisions} pods bound by kube-scheduler in {time.monotonic() - began:.0f} s on "
          f"{len({n for _, n in replay.placements})} nodes; {replay.ties} ties for the best score (the "
          f"simulator took {local.taken} of kube-scheduler's picks), {replay.single} pods with one feasible node",
          file=sys.stderr)
    assert replay.decisions > 50
    assert local.taken == replay.ties
    assert replay.placements == local.placements  # every placement, in order
    assert live["metrics"] == simulated["metrics"]  # every metric, bit for bit
