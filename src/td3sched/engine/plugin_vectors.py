"""Test vectors that hold the Go ``td3score`` plugin (``scheduler/``) to this package's rules.

The plugin computes a static score when the engine gives no usable answer, applies the safety
filter and turns a v1.Pod into the engine's ``Pod``; each of those has one implementation here, and
the plugin's Go port is checked against what this module writes, never against hand-copied
constants:

    static_score   policy.features.utilisation + policy.static_weights.weighted_closeness, rounded
                   to 0-100 as the engine rounds (numpy rint: halves to even); a node without fresh
                   metrics scores decision.NEUTRAL_SCORE; with a hold-back ceiling
                   (policy.static_weights.within_ceiling), a node above it scores 0, as the engine's
                   decision scores it (the plugin scores a held action with a ceiling so)
    safety         simulator.filter.safety_ok
    pods           kubernetes_objects.pod_from_k8s (requests as NodeResourcesFit counts them, QoS,
                   limits, the controller that owns the pod)
    siblings       policy.siblings.spread_siblings: a score lowered for the pod's siblings on the node
                   (the plugin's in-process inference of a model whose card fixes a sibling spread)
    prometheus     prometheus_source.DEFAULT_QUERIES and the snapshot's unit conversions
    observation    rl.observation.observe over candidates of an engine snapshot (``NodeSnapshot``: every
                   known node counts as ready), with the assign cache's usage and the pod
    fallback_fragmentation
                   the engine's fallback with a fragmentation share (``DecisionEngine.decide`` with no
                   model, ``fallback_fragmentation`` and the typical pods of a ``fallback_measure``):
                   the static score blended with FGD's (``policy.fgd.fragmentation_decrease`` over the
                   nodes' allocation, ``state.gpu_layout`` of whole GPUs, each node's pool by name,
                   ``static_weights.blend_fragmentation`` over the fresh candidates); the plugin's Go
                   fallback with ``fallbackFragmentation`` is held to it
    fragmentation_decisions
                   the engine's decision serving the shipped blend (a model of action mode
                   fragmentation) on such nodes, with the typical pods GetModel sends: what the
                   plugin's in-process inference of such a model must answer
    actor          a shipped model's ONNX graph (``ACTOR_MODEL``) run by ONNX Runtime on observations
                   around its normaliser and past its clip, and ``rl.actions.decode`` of pre-activations
                   in the action modes full, seed and ceiling: the plugin's own
                   inference (``scheduler/pkg/actor``) is held to both

``td3sched plugin-vectors`` writes the file (``scheduler/testdata/vectors.json``); a Python test checks
that the committed file is what this module writes today, and the Go tests read it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from td3sched.engine.decision import NEUTRAL_SCORE, RANGE_SLACK, PodSpec
from td3sched.engine.kubernetes_objects import pod_from_k8s
from td3sched.engine.prometheus_source import DEFAULT_QUERIES, MIB
from td3sched.engine.state import NodeSnapshot
from td3sched.policy.base import DEFAULT_MEMORY_REQUEST_MIB, DEFAULT_MILLI_CPU_REQUEST, PodRequest
from td3sched.policy.features import utilisation
from td3sched.policy.static_weights import MAX_CEILING, validate_weights, weighted_closeness, within_ceiling
from td3sched.rl.actions import CEILING_RANGE, LOGIT_LIMIT
from td3sched.rl.observation import OBSERVATION_FIELDS, observe
from td3sched.simulator.filter import safety_ok

SCHEMA = 4
ROUNDING_MARGIN = 1e-9
"""A drawn vector whose 100 x score lies this close to a half is redrawn: the two languages may sum
the four weighted terms in different orders, and only the float score is compared with a tolerance."""


class _Nodes:
    """The two arrays ``features.utilisation`` reads of a cluster."""

    def __init__(self, observed: np.ndarray, capacity: np.ndarray):
        self.observed = observed
        self.capacity_usage = capacity


def static_score(pod_cpu_milli: float, pod_mem_mib: float, observed, capacity, recent, weights, tau: float,
                 fresh: bool, ceiling: float | None = None) -> tuple[list[float] | None, float, int, bool]:
    """(utilisation with the pod, score in [0, 1], score 0-100, held back) of one node, as the engine
    scores it (``DecisionEngine.decide``: a node above the ceiling scores 0)."""
    weights, tau = validate_weights(weights, tau)
    if not fresh:
        return None, NEUTRAL_SCORE, int(np.rint(100.0 * NEUTRAL_SCORE)), False
    request = PodSpec("vector", pod_cpu_milli, pod_mem_mib).request(0.0)
    nodes = _Nodes(np.asarray([observed], dtype=float), np.asarray([capacity], dtype=float))
    u = utilisation(request, np.array([0]), nodes, np.asarray([recent], dtype=float))
    scores = weighted_closeness(u, weights, tau)
    held_back = ceiling is not None and not bool(within_ceiling(u, ceiling)[0])
    if held_back:
        scores[0] = 0.0
    score = float(scores[0])
    return u[0].tolist(), score, int(np.rint(100.0 * score)), held_back


def _near_half(x: float) -> bool:
    return abs((100.0 * x) % 1.0 - 0.5) < ROUNDING_MARGIN


def static_score_vectors(rng: np.random.Generator, n: int = 240) -> list[dict]:
    out = []
    taus = [0.0, 1.0, 0.5, 0.3, 0.7]
    one_hot = [list(np.eye(4)[i]) for i in range(4)]
    while len(out) < n:
        i = len(out)
        cores = float(rng.choice([2, 4, 8, 16, 64, 96]))
        capacity = [cores * 1000.0, float(rng.choice([4096, 16384, 65536, 262144])), 1.0,
                    float(rng.choice([1000.0, 10000.0, 25000.0]))]
        load = rng.uniform(0.0, 1.2 if i % 7 == 0 else 0.95, size=4)   # some nodes observed over capacity
        observed = [float(x) for x in load * np.array(capacity)]
        recent = [0.0, 0.0] if i % 3 else [float(rng.uniform(0, 2000)), float(rng.uniform(0, 4096))]
        cpu = 0.0 if i % 5 == 0 else float(rng.choice([50, 100, 250, 1000, 3500]))   # 0: the non-zero default
        mem = 0.0 if i % 6 == 0 else float(rng.uniform(16, 8192))
        weights = one_hot[i % 4] if i % 9 == 0 else [float(x) for x in rng.dirichlet(np.ones(4))]
        tau = taus[i % len(taus)] if i % 2 else float(rng.uniform(0, 1))
        fresh = i % 11 != 5
        ceiling = float(rng.uniform(0.5, MAX_CEILING)) if i % 4 == 1 else None
        u, score, score_100, held_back = static_score(cpu, mem, observed, capacity, recent, weights, tau, fresh,
                                                      ceiling)
        if fresh and (_near_half(score) or (ceiling is not None and abs(u[0] - ceiling) < ROUNDING_MARGIN)):
            continue
        weights = list(validate_weights(weights, tau)[0])
        out.append({"pod_cpu_milli": cpu, "pod_mem_mib": mem, "observed": observed, "capacity": capacity,
                    "recent": recent, "weights": weights, "tau": tau, "ceiling": ceiling, "fresh": fresh,
                    "utilisation": u, "score": score, "score_0_100": score_100, "held_back": held_back})
    return out


def safety_vectors(rng: np.random.Generator, n: int = 60) -> list[dict]:
    out = []
    for i in range(n):
        allocatable = float(rng.choice([2000, 4000, 16000, 96000]))
        threshold = [0.9, 0.5, 1.0, 0.75][i % 4]
        share = [threshold, threshold + 1e-6, threshold - 1e-6][i % 3] if i % 2 else float(rng.uniform(0, 1.1))
        observed = share * allocatable
        ok = bool(safety_ok(np.array([observed]), np.array([allocatable]), threshold)[0])
        out.append({"observed_cpu_milli": observed, "allocatable_cpu_milli": allocatable, "threshold": threshold,
                    "ok": ok})
    return out


def _container(name: str, requests: dict | None = None, limits: dict | None = None) -> dict:
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}


def _pod(name: str, containers: list[dict], inits: list[dict] | None = None, overhead: dict | None = None,
         qos: str | None = None, owners: list[dict] | None = None) -> dict:
    spec = {"schedulerName": "td3-scheduler", "containers": containers}
    if inits:
        spec["initContainers"] = inits
    if overhead:
        spec["overhead"] = overhead
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "vectors"}, "spec": spec}
    if owners:
        pod["metadata"]["ownerReferences"] = owners
    if qos:
        pod["status"] = {"qosClass": qos}
    return pod


POD_EXAMPLES = [
    _pod("best-effort", [_container("a")]),
    _pod("burstable", [_container("a", {"cpu": "250m", "memory": "64Mi"})]),
    _pod("guaranteed", [_container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})]),
    _pod("limit-only", [_container("a", None, {"cpu": "500m", "memory": "256Mi"})]),
    _pod("two-containers", [_container("a", {"cpu": "100m", "memory": "100Mi"}),
                            _container("b", {"cpu": "1.5", "memory": "1G"}, {"memory": "2Gi"})]),
    _pod("one-limit-missing", [_container("a", {"cpu": "100m"}, {"cpu": "200m"}), _container("b", {"cpu": "100m"})]),
    _pod("init-larger", [_container("a", {"cpu": "100m", "memory": "50Mi"})],
         inits=[_container("init", {"cpu": "2", "memory": "10Mi"})]),
    _pod("overhead", [_container("a", {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "2Gi"})],
         overhead={"cpu": "250m", "memory": "120Mi"}),
    _pod("gpu", [_container("a", {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"},
                            {"nvidia.com/gpu": "2"})]),
    _pod("status-qos", [_container("a", {"cpu": "100m"})], qos="Burstable"),
    _pod("exponent", [_container("a", {"cpu": "2e-1", "memory": "134217728"})]),
    _pod("rdma", [_container("a", {"cpu": "8", "memory": "16Gi", "koordinator.sh/rdma": "25"},
                             {"koordinator.sh/rdma": "25"}), _container("b", {"koordinator.sh/rdma": "10"})]),
    _pod("replica", [_container("a", {"cpu": "100m"})],
         owners=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": "u0"},
                 {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u1", "controller": True}]),
    _pod("owned-not-controlled", [_container("a", {"cpu": "100m"})],
         owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u1", "controller": False}]),
]


def sibling_vectors(rng: np.random.Generator, n: int = 40) -> list[dict]:
    """Scores in [0, 1] lowered for the pod's siblings on a node by a spread (``spread_siblings``), spreads
    0 and the bounds among them."""
    from td3sched.policy.siblings import MAX_SPREAD, spread_siblings

    out = []
    for i in range(n):
        score = float(rng.choice([0.0, 1.0, rng.uniform()]))
        siblings = int(rng.choice([0, 1, 2, 7]))
        spread = float((0.0, MAX_SPREAD, 3.0)[i] if i < 3 else rng.uniform(0, 10))
        value = float(spread_siblings(np.array([score]), np.array([siblings]), spread)[0])
        out.append({"score": score, "siblings": siblings, "spread": spread, "value": value})
    return out


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def pod_vectors() -> list[dict]:
    out = []
    for pod in POD_EXAMPLES:
        spec = pod_from_k8s(pod)
        expected = {"name": spec.name, "namespace": spec.namespace, "cpu_milli": spec.cpu_milli,
                    "mem_mib": spec.mem_mib, "disk_gib": spec.disk_gib, "rdma_pct": spec.rdma_pct, "gpu_count": spec.gpu_count,
                    "gpu_milli": spec.gpu_milli, "qos": ("Guaranteed", "Burstable", "BestEffort")[spec.qos],
                    "cpu_limit_milli": _finite_or_none(spec.cpu_limit_milli),
                    "mem_limit_mib": _finite_or_none(spec.mem_limit_mib), "owner": spec.owner}
        out.append({"pod": pod, "expected": expected})
    return out


ACTOR_MODEL = "td3-openb"
"""The shipped model whose graph the actor vectors run (the repository's ``models/`` folder)."""
PLUGIN_ACTION_MODES = ("full", "seed", "ceiling")
"""The action modes the plugin decodes and scores itself; the others read requests it does not keep."""


def observation_vectors(rng: np.random.Generator, n: int = 40) -> list[dict]:
    """Decisions over candidates of a snapshot of ``known`` nodes, as the engine observes them
    (``DecisionEngine.decide``: the utilisation with the pod and the assign cache's usage, then
    ``observe``), with the pod's time and the cluster's recent OOM kills."""
    out = []
    for i in range(n):
        known = int(rng.choice([1, 2, 5, 40, 120]))
        k = int(rng.integers(1, known + 1)) if i % 3 else known
        cores = rng.choice([2.0, 8.0, 64.0, 96.0], size=known)
        mem = rng.choice([4096.0, 65536.0, 262144.0], size=known)
        alloc = np.column_stack([cores * 1000.0, mem, rng.choice([50.0, 100.0, 400.0], size=known),
                                 rng.choice([0.5, 100.0], size=known)])
        cap = np.column_stack([cores * 1000.0, mem, np.ones(known), rng.choice([1000.0, 10000.0], size=known)])
        observed = rng.uniform(0.0, 1.1, size=(known, 4)) * cap
        snap = NodeSnapshot(tuple(f"n{j}" for j in range(known)), alloc, cap, observed, np.zeros(known))
        nodes = np.sort(rng.choice(known, size=k, replace=False))
        recent = np.zeros((known, 2))
        if i % 2:
            recent[nodes] = rng.uniform(0.0, 1.0, size=(k, 2)) * [2000.0, 4096.0]
        pod = PodSpec("vector", cpu_milli=0.0 if i % 5 == 0 else float(rng.choice([100.0, 2500.0, 32000.0])),
                      mem_mib=0.0 if i % 6 == 0 else float(rng.uniform(16.0, 65536.0)),
                      disk_gib=float(rng.choice([0.0, 10.0])), rdma_pct=float(rng.choice([0.0, 25.0])),
                      qos=i % 3)
        time_s = float(rng.uniform(1.6e9, 1.8e9))
        oom = float(rng.choice([0.0, 0.0, 1.0, 12.0]))
        request = pod.request(time_s)
        u = utilisation(request, nodes, snap, recent)
        obs = observe(request, nodes, snap, u, oom)
        out.append({"pod": {"cpu_milli": pod.cpu_milli, "mem_mib": pod.mem_mib, "disk_gib": pod.disk_gib,
                            "rdma_pct": pod.rdma_pct, "qos": ("Guaranteed", "Burstable", "BestEffort")[pod.qos]},
                    "time_s": time_s, "oom_kills_recent": oom, "known_nodes": known,
                    "candidates": [{"allocatable": alloc[j].tolist(), "capacity": cap[j].tolist(),
                                    "observed": observed[j].tolist(), "recent": recent[j].tolist()} for j in nodes],
                    "observation": [float(x) for x in obs]})
    return out


def actor_vectors(rng: np.random.Generator, observations_from: list[dict], n: int = 24) -> dict:
    """The ``ACTOR_MODEL`` graph's pre-activations by ONNX Runtime on observations around its normaliser's
    mean and past its clip edges, and decoded pre-activations of every ``PLUGIN_ACTION_MODES``."""
    import hashlib

    from td3sched.rl.actions import decode
    from td3sched.rl.card import ONNX_FILE
    from td3sched.rl.onnx_actor import load_actor
    from td3sched.shipped import model_folder

    folder = model_folder(ACTOR_MODEL)
    actor = load_actor(folder)
    graph = (folder / ONNX_FILE).read_bytes()
    observations = [np.asarray(c["observation"], dtype=np.float32) for c in observations_from]
    wide = rng.normal(0.0, 1.0, size=(n, len(observations[0]))) * rng.choice([1.0, 100.0], size=(n, 1))
    x = np.vstack([np.stack(observations), wide]).astype(np.float32)  # wide: past the normaliser's clip
    pre = actor.act(x)
    decoded = []
    for i in range(n):
        for mode in PLUGIN_ACTION_MODES:
            width = 6 if mode == "ceiling" else 5
            a = (rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, size=width) * (0.2 if i % 4 == 0 else 1.0)).astype(np.float32)
            args = decode(a, mode)
            decoded.append({"action_mode": mode, "pre_activations": [float(v) for v in a],
                            "weights": [float(w) for w in args.weights], "tau": float(args.tau),
                            "ceiling": None if args.ceiling is None else float(args.ceiling)})
    return {"model": f"models/{ACTOR_MODEL}/{ONNX_FILE}", "onnx_sha256": hashlib.sha256(graph).hexdigest(),
            "version": actor.version, "action_mode": actor.action_mode,
            "cases": [{"observation": [float(v) for v in o], "pre_activations": [float(v) for v in p]}
                      for o, p in zip(x, pre)],
            "decode": decoded}


def decision_vectors(rng: np.random.Generator, n: int = 16) -> list[dict]:
    """The engine's whole decision (``DecisionEngine.decide`` serving ``ACTOR_MODEL``) for pods over
    candidates of a snapshot in which some nodes are stale: what the plugin's in-process inference must
    answer. Allocatables are whole milli-cores, MiB, GiB and RDMA percents, as a v1.Node states them."""
    from td3sched.engine.decision import DecisionEngine, ModelSlot
    from td3sched.engine.state import ShadowState, Staleness
    from td3sched.rl.onnx_actor import load_actor

    slot = ModelSlot(load_actor(ACTOR_MODEL))
    out = []
    for i in range(n):
        known = int(rng.choice([3, 12, 30]))
        now = float(rng.uniform(1.6e9, 1.8e9))
        cores = rng.choice([4.0, 16.0, 64.0], size=known)
        mem = rng.choice([8192.0, 65536.0, 262144.0], size=known)
        alloc = np.column_stack([cores * 1000.0, mem, rng.choice([50.0, 100.0], size=known),
                                 rng.choice([25.0, 100.0], size=known)])
        cap = np.column_stack([cores * 1000.0, mem, np.ones(known), rng.choice([1000.0, 10000.0], size=known)])
        observed = rng.uniform(0.0, 0.95, size=(known, 4)) * cap
        stale = rng.uniform(size=known) < 0.15
        scraped = np.where(stale, now - 3600.0, now - 5.0)
        oom = float(rng.choice([0.0, 3.0]))
        names = tuple(f"n{j}" for j in range(known))
        fail_closed = i % 4 == 3
        state = ShadowState(lambda t=now: t, Staleness(mode="fail-closed" if fail_closed else "fail-open"))
        state.publish(NodeSnapshot(names, alloc, cap, observed, scraped, oom_kills_recent=oom))
        engine = DecisionEngine(state, slot)
        k = int(rng.integers(1, known + 1))
        candidates = [names[j] for j in np.sort(rng.choice(known, size=k, replace=False))]
        pod = PodSpec("vector", cpu_milli=float(rng.choice([0.0, 250.0, 4000.0])),
                      mem_mib=float(rng.choice([0.0, 512.0, 16384.0])), disk_gib=float(rng.choice([0.0, 5.0])),
                      rdma_pct=float(rng.choice([0.0, 10.0])), qos=i % 3)
        d = engine.decide(pod, candidates)
        out.append({"now_s": now, "oom_kills_recent": oom, "fail_closed": fail_closed,
                    "nodes": [{"name": names[j], "allocatable": alloc[j].tolist(), "capacity": cap[j].tolist(),
                               "observed": observed[j].tolist(), "sample_time_s": float(scraped[j])}
                              for j in range(known)],
                    "pod": {"cpu_milli": pod.cpu_milli, "mem_mib": pod.mem_mib, "disk_gib": pod.disk_gib,
                            "rdma_pct": pod.rdma_pct, "qos": ("Guaranteed", "Burstable", "BestEffort")[pod.qos]},
                    "candidates": candidates, "fallback_reason": d.fallback_reason,
                    "scores": [float(x) for x in d.scores], "scores_0_100": d.scores_0_100(),
                    "weights": [float(w) for w in d.weights], "tau": float(d.tau)})
    return out


BLEND_MODEL = "static-blend-dlrm-small"
"""A shipped blend whose card's typical pods (dlrm-small's, GPUs included) some fragmentation vectors use."""


def _random_typical(rng: np.random.Generator, pools: tuple[str, ...]):
    from td3sched.metrics.fragmentation import PoolTypicalPods, TypicalPods

    sets = []
    for _ in pools:
        m = int(rng.integers(1, 6))
        # disk and RDMA: some sets never request them, so that the fit test leaves those columns out
        request = np.column_stack([rng.choice([500.0, 2000.0, 8000.0, 16000.0], size=m),
                                   rng.choice([1024.0, 8192.0, 32768.0], size=m),
                                   rng.choice([0.0, 20.0], size=m) * rng.integers(0, 2),
                                   rng.choice([0.0, 25.0], size=m) * rng.integers(0, 2)])
        gpu_count = rng.choice([0, 0, 1, 2, 4], size=m).astype(np.int64)
        gpu_milli = np.where(gpu_count > 0, 1000, 0).astype(np.int64)
        weight = rng.uniform(0.05, 1.0, size=m)
        sets.append(TypicalPods(request, gpu_count, gpu_milli, weight / weight.sum()))
    return pools, PoolTypicalPods(tuple(sets))


def fragmentation_vectors(rng: np.random.Generator, n: int = 24, model: bool = False) -> list[dict]:
    """Scores blended with FGD's (see the module docstring): the engine's fallback with a fragmentation
    share, or (``model``) the engine's decision serving the shipped blend ``BLEND_MODEL`` (a model of
    action mode fragmentation, run by ONNX Runtime, its card's typical pods). Nodes as a v1.Node and the
    scheduler's NodeInfo state them (allocatable and the bound pods' requests in whole milli-cores, MiB,
    GiB and RDMA percents; whole GPUs, some requested; a pool label, some of a pool the typical pods do
    not name, some without one), some with stale metrics; pods with and without GPUs."""
    from td3sched.engine.decision import DecisionEngine, FragmentationMeasure, ModelSlot
    from td3sched.engine.grpc_server import typical_pods_json
    from td3sched.engine.state import Allocation, ShadowState, Staleness, gpu_layout
    from td3sched.metrics.fragmentation import read_typical_pods, typical_pods_to_json
    from td3sched.rl.card import CARD_FILE, ONNX_FILE
    from td3sched.rl.onnx_actor import load_actor

    repo = Path(__file__).resolve().parents[3]
    shipped = read_typical_pods(repo / "models" / BLEND_MODEL / CARD_FILE)
    blend = load_actor(repo / "models" / BLEND_MODEL) if model else None
    out = []
    while len(out) < n:
        i = len(out)
        names, typical = shipped if model or i % 3 == 0 else _random_typical(rng, ("p0", "p1"))
        known = int(rng.choice([4, 12, 30]))
        now = float(rng.uniform(1.6e9, 1.8e9))
        cores = rng.choice([16.0, 64.0, 96.0], size=known)
        mem = rng.choice([65536.0, 262144.0, 786432.0], size=known)
        alloc = np.column_stack([cores * 1000.0, mem, rng.choice([100.0, 500.0], size=known),
                                 rng.choice([100.0, 200.0], size=known)])
        full = rng.uniform(size=(known, 4)) < 0.2  # some columns nearly full: a pod's request overdraws them
        requested = np.floor(alloc * np.where(full, rng.uniform(0.95, 1.0, size=(known, 4)),
                                              rng.uniform(0.0, 1.0, size=(known, 4))))
        gpus = rng.choice([0, 2, 8], size=known).astype(np.int64)
        gpus_requested = np.floor(gpus * rng.uniform(0.0, 1.0, size=known)).astype(np.int64)
        pools = tuple(str(x) for x in rng.choice([*names, "other", ""], size=known))
        cap = np.column_stack([cores * 1000.0, mem, np.ones(known), np.full(known, 10000.0)])
        observed = rng.uniform(0.0, 0.9, size=(known, 4)) * cap
        stale = rng.uniform(size=known) < 0.15
        scraped = np.where(stale, now - 3600.0, now - 5.0)
        node_names = tuple(f"n{j}" for j in range(known))
        state = ShadowState(lambda t=now: t, Staleness())
        allocation = Allocation(alloc - requested, gpu_layout(gpus, gpus_requested), pools)
        state.publish(NodeSnapshot(node_names, alloc, cap, observed, scraped, allocation=allocation))
        weights = rng.dirichlet(np.ones(4)) if i % 2 else np.array([1.0, 0.0, 0.0, 0.0])
        tau, share = float(rng.choice([0.0, 0.4, 0.7])), float(rng.choice([0.25, 0.5, 1.0]))
        engine = DecisionEngine(state, ModelSlot(blend), weights, tau, fallback_fragmentation=share,
                                fallback_measure=FragmentationMeasure(names, typical))
        k = int(rng.integers(1, known + 1))
        candidates = [node_names[j] for j in np.sort(rng.choice(known, size=k, replace=False))]
        gpu_count = int(rng.choice([0, 0, 1, 2]))
        pod = PodSpec("vector", cpu_milli=float(rng.choice([0.0, 1000.0, 8000.0])),
                      mem_mib=float(rng.choice([0.0, 4096.0, 32768.0])), disk_gib=float(rng.choice([0.0, 10.0])),
                      rdma_pct=float(rng.choice([0.0, 25.0])), gpu_count=gpu_count,
                      gpu_milli=1000 if gpu_count else 0)
        d = engine.decide(pod, candidates)
        if any(_near_half(float(x)) for x in d.scores):
            continue  # the two languages' last bits may round this one differently
        if model:
            weights, tau, share = d.weights, d.tau, d.fragmentation
        out.append({"now_s": now, "weights": [float(w) for w in weights], "tau": float(tau), "share": float(share),
                    "typical_pods": json.loads(typical_pods_json(blend)) if model else
                    typical_pods_to_json(typical, names),
                    **({"model": f"models/{BLEND_MODEL}/{ONNX_FILE}", "version": blend.version} if model else {}),
                    "nodes": [{"name": node_names[j], "allocatable": alloc[j].tolist(),
                               "requested": requested[j].tolist(), "gpus": int(gpus[j]),
                               "gpus_requested": int(gpus_requested[j]), "pool": pools[j],
                               "capacity": cap[j].tolist(), "observed": observed[j].tolist(),
                               "sample_time_s": float(scraped[j])} for j in range(known)],
                    "pod": {"cpu_milli": pod.cpu_milli, "mem_mib": pod.mem_mib, "disk_gib": pod.disk_gib,
                            "rdma_pct": pod.rdma_pct, "gpu_count": pod.gpu_count, "gpu_milli": pod.gpu_milli},
                    "candidates": candidates, "fallback_reason": d.fallback_reason,
                    "fragmentation": float(d.fragmentation),
                    "scores": [float(x) for x in d.scores], "scores_0_100": d.scores_0_100()})
    return out


def vectors(seed: int = 11) -> dict:
    rng = np.random.default_rng(seed)
    out = {
        "schema": SCHEMA,
        "about": "written by `td3sched plugin-vectors` (src/td3sched/engine/plugin_vectors.py); do not edit",
        "constants": {"default_milli_cpu_request": DEFAULT_MILLI_CPU_REQUEST,
                      "default_memory_request_mib": DEFAULT_MEMORY_REQUEST_MIB,
                      "neutral_score": NEUTRAL_SCORE, "mib_bytes": MIB, "logit_limit": LOGIT_LIMIT,
                      "range_slack": RANGE_SLACK, "ceiling_range": list(CEILING_RANGE),
                      "observation_fields": list(OBSERVATION_FIELDS)},
        "prometheus_queries": dict(DEFAULT_QUERIES),
        "static_score": static_score_vectors(rng),
        "safety": safety_vectors(rng),
        "pods": pod_vectors(),
    }
    out["observation"] = observation_vectors(rng)
    out["actor"] = actor_vectors(rng, out["observation"])
    out["decisions"] = decision_vectors(rng)
    out["fallback_fragmentation"] = fragmentation_vectors(rng)
    out["fragmentation_decisions"] = fragmentation_vectors(rng, 16, model=True)
    out["siblings"] = sibling_vectors(rng)
    return out


def render(seed: int = 11) -> str:
    return json.dumps(vectors(seed), indent=1, sort_keys=True) + "\n"


def write_vectors(path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(), encoding="utf-8")
    return path
