"""Small hand-built worlds for simulator tests.

Everything is explicit: node shapes, pods (with their usage sizes and profile rows), constant or
hand-chosen usage shapes, typical pods and the simulator config. Defaults are chosen so that a test
only states what matters to it:

- nodes have no system overhead unless asked, and big disk / RDMA / bandwidth;
- pods request nothing but what they say, have no limits, use nothing (size 0) unless asked;
- the autoscaler is off unless asked; the latency base has no spread (base_sigma = 0, so every
  service's base latency is exactly ``base_median_ms``);
- usage_scale and mem_level are 1 unless asked, whatever the calibrated defaults are.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field

import numpy as np

from td3sched.metrics.fragmentation import PoolTypicalPods, TypicalPods
from td3sched.policy.base import Policy
from td3sched.policy.k8s_default import K8sDefault
from td3sched.simulator.cluster import NodeShape, Pool
from td3sched.simulator.config import Autoscaler, LatencyModel, SimConfig
from td3sched.simulator.engine import EventLog, Simulation, World
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE, GUARANTEED, Workload
from td3sched.workload.profiles import UsageProfiles

INF = math.inf
G, B, BE = GUARANTEED, BURSTABLE, BEST_EFFORT


def node(cpu: float = 4000, mem: float = 8192, gpus: int = 0, *, disk_gib: float = 1000, rdma: float = 100,
         disk_mbps: float = 1000, net_mbps: float = 1000, oh_cpu: float = 0, oh_mem: float = 0) -> NodeShape:
    return NodeShape(cpu_milli=cpu, mem_mib=mem, gpus=gpus, disk_gib=disk_gib, rdma_pct=rdma,
                     disk_mbps=disk_mbps, net_mbps=net_mbps, overhead_cpu_milli=oh_cpu, overhead_mem_mib=oh_mem)


def pool(name: str, shape: NodeShape, count: int, max_count: int | None = None, min_count: int = 0) -> Pool:
    return Pool(name, (shape,) * (count if max_count is None else max_count), count, min_count)


@dataclass
class P:
    """One pod. ``qos`` defaults to what Kubernetes would derive from requests and limits."""

    name: str
    t: float = 0.0
    dur: float = INF
    cpu: float = 0.0
    mem: float = 0.0
    disk: float = 0.0
    rdma: float = 0.0
    cpu_limit: float = INF
    mem_limit: float = INF
    gpus: int = 0
    gpu_milli: int = 0
    qos: int | None = None
    ls: bool = False
    app: str = "app"
    cap: int = -1
    pool: str | None = None
    size_cpu: float = 0.0
    size_mem: float = 0.0
    size_disk: float = 0.0
    size_net: float = 0.0
    profile: int = 0

    def derived_qos(self) -> int:
        if self.qos is not None:
            return self.qos
        if self.cpu == 0 and self.mem == 0 and math.isinf(self.cpu_limit) and math.isinf(self.mem_limit):
            return BE
        if self.cpu_limit == self.cpu and self.mem_limit == self.mem:
            return G
        return B


def workload(pods: list[P], pool_names: tuple[str, ...] = ()) -> Workload:
    pods = sorted(pods, key=lambda p: p.t)
    pools = tuple(dict.fromkeys(list(pool_names) + [p.pool for p in pods if p.pool is not None]))
    apps = tuple(dict.fromkeys(p.app for p in pods))
    n = len(pods)
    return Workload(
        name=np.array([p.name for p in pods], dtype=str),
        arrival_s=np.array([p.t for p in pods], dtype=float),
        duration_s=np.array([p.dur for p in pods], dtype=float),
        request=np.array([[p.cpu, p.mem, p.disk, p.rdma] for p in pods], dtype=float).reshape(n, 4),
        cpu_limit_milli=np.array([p.cpu_limit for p in pods], dtype=float),
        mem_limit_mib=np.array([p.mem_limit for p in pods], dtype=float),
        gpu_count=np.array([p.gpus for p in pods], dtype=np.int64),
        gpu_milli=np.array([p.gpu_milli for p in pods], dtype=np.int64),
        qos=np.array([p.derived_qos() for p in pods], dtype=np.int8),
        latency_sensitive=np.array([p.ls for p in pods], dtype=bool),
        app=np.array([apps.index(p.app) for p in pods], dtype=np.int32),
        app_names=apps,
        max_per_node=np.array([p.cap for p in pods], dtype=np.int32),
        pool=np.array([pools.index(p.pool) if p.pool is not None else -1 for p in pods], dtype=np.int16),
        pool_names=pools,
        size_cpu_milli=np.array([p.size_cpu for p in pods], dtype=float),
        size_mem_mib=np.array([p.size_mem for p in pods], dtype=float),
        size_disk_mbps=np.array([p.size_disk for p in pods], dtype=float),
        size_net_mbps=np.array([p.size_net for p in pods], dtype=float),
        profile=np.array([p.profile for p in pods], dtype=np.int32),
    )


def constant_profiles(cpu: float = 1.0, mem: float = 1.0, disk: float = 1.0, net: float = 1.0,
                      rows: int = 1, slots: int = 1) -> UsageProfiles:
    """Every row and slot has the same shape values."""
    shape = np.empty((4, rows, slots), dtype=np.float32)
    for k, v in enumerate((cpu, mem, disk, net)):
        shape[k] = v
    return UsageProfiles(step_s=300, shape=shape, source_ids=tuple(f"vm{i}" for i in range(rows)))


def profiles_from(shape: np.ndarray) -> UsageProfiles:
    """Hand-chosen [4, V, T] shapes on the 300 s grid."""
    shape = np.asarray(shape, dtype=np.float32)
    assert shape.ndim == 3 and shape.shape[0] == 4
    return UsageProfiles(step_s=300, shape=shape, source_ids=tuple(f"vm{i}" for i in range(shape.shape[1])))


def typical(shapes: list[tuple], weights: list[float]) -> TypicalPods:
    """One pool's typical pods; shapes: (cpu, mem[, disk, rdma[, gpu_count, gpu_milli]])."""
    req, gc, gm = [], [], []
    for s in shapes:
        s = tuple(s) + (0,) * (6 - len(s))
        req.append(s[:4])
        gc.append(s[4])
        gm.append(s[5])
    return TypicalPods(np.array(req, dtype=float), np.array(gc, dtype=np.int64), np.array(gm, dtype=np.int64),
                       np.array(weights, dtype=float))


def config(autoscaler: bool | Autoscaler = False, latency: LatencyModel | None = None, **kw) -> SimConfig:
    """SimConfig with usage_scale = mem_level = 1 unless given (hand arithmetic must not depend on
    the calibrated defaults), the autoscaler off and latency bases without spread."""
    if isinstance(autoscaler, bool):
        autoscaler = Autoscaler(enabled=autoscaler)
    kw.setdefault("usage_scale", 1.0)
    kw.setdefault("mem_level", 1.0)
    return SimConfig(latency=latency or LatencyModel(base_sigma=0.0), autoscaler=autoscaler, **kw)


def world(pools: list[Pool] | tuple[Pool, ...], pods: list[P] | Workload, profiles: UsageProfiles | None = None,
          cfg: SimConfig | None = None, typ: TypicalPods | PoolTypicalPods | None = None) -> World:
    """``typ``: typical pods per pool, or one ``TypicalPods`` used for every pool."""
    pools = tuple(pools)
    w = pods if isinstance(pods, Workload) else workload(pods)
    typ = typ if typ is not None else typical([(1, 1)], [1.0])
    if isinstance(typ, TypicalPods):
        typ = PoolTypicalPods.same(typ, len(pools))
    return World(pools=pools, workload=w, profiles=profiles or constant_profiles(),
                 config=cfg or config(), typical=typ)


@dataclass
class Run:
    sim: Simulation
    result: dict
    events: list[dict] = field(default_factory=list)

    @property
    def metrics(self) -> dict:
        return self.result["metrics"]

    def node_of(self, pod_name: str) -> str | None:
        """Cluster node name the pod runs on at the end (None if not running)."""
        sim = self.sim
        i = int(np.flatnonzero(sim.w.name == pod_name)[0])
        n = int(sim.node[i])
        return None if n < 0 else str(sim.cluster.names[n])

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]


def simulate(w: World, policy: Policy | None = None, seed: int = 0, start_s: float = 0.0, end_s: float = 600.0,
             prepare=None) -> Run:
    """Run a world with an in-memory event log. ``prepare(sim)`` may wrap methods before the run."""
    stream = io.StringIO()
    sim = Simulation(w, policy or K8sDefault(), seed, start_s, end_s, events=EventLog(stream))
    if prepare is not None:
        prepare(sim)
    result = sim.run()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    return Run(sim, result, events)


class PreferOrder(Policy):
    """Scores nodes by a fixed preference: earlier cluster slots in ``order`` score higher."""

    name = "prefer-order"

    def __init__(self, order: list[int]):
        self.order = order

    def score(self, pod, nodes, cluster):
        rank = {n: len(self.order) - i for i, n in enumerate(self.order)}
        return np.array([float(rank.get(int(n), 0)) for n in nodes])
