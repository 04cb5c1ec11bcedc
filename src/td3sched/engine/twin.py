"""The digital twin: the simulator driving the served engine, so that the path the evaluation
measures is the path a scheduler calls.

``EngineTwin`` is a simulator policy. At ``attach`` it builds an engine whose shadow state is fed by
the simulation (``SimulatorSource``: the observed metrics, never the ground truth, on the
simulation's clock), serves it on 127.0.0.1 behind one front door, and then asks it what a
scheduler would ask, one call per pod:

    door          per pod                                               bindings
    in-process    EngineService.score_nodes, scores rounded as ``like``  EngineService.report_binding
    grpc          ScoreNodes over loopback gRPC (scores 0-100)          ReportBinding over gRPC
    extender      /filter, then /prioritize over loopback HTTP,          the engine's pod watch
                  kube-scheduler's JSON, nodeCacheCapable (scores 0-10)  (EngineService.report_binding)

The simulator's Filter runs first, its Select picks among the highest answers (ties at random, from
the run's seed): the twin's placements are what a kube-scheduler scoring by the engine alone would
do. A front door answers integers, so the same run through the engine in process must round the
same way (``like``) to be the same run, bit for bit; ``like=None`` keeps the scores in [0, 1], the
simulator's own ``td3`` policy exactly.

The twin is also the engine's pod watch: each pod carries its app as its controller (``PodSpec.owner``)
and every release is reported (``EngineService.forget_binding``), so that a model with a sibling spread is
served on the pods' siblings as the td3 policy counts them.

The engine never sees stale metrics here (the td3 policy has no staleness rule), and its safety
threshold is the simulator's (``safety_cpu_util``), so /filter refuses nothing the simulator's Filter
let through, except what a model's hold-back ceiling holds back: exactly what the td3 policy's own
Filter holds back (the twin of a ceiling model is the td3 policy through the extender door, or
in process ``like="extender"``; ScoreNodes alone can only score held-back nodes 0).

    with EngineTwin(load_actor("models/td3-dlrm"), door="grpc") as twin:
        record = Simulation(world, twin, seed, start_s, end_s).run()
    twin.placements   # (pod index, node name) in bind order
"""

from __future__ import annotations

import numpy as np

from td3sched.engine.client import ExtenderClient, GrpcClient
from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec
from td3sched.engine.extender import MAX_EXTENDER_PRIORITY, ExtenderFrontDoor
from td3sched.engine.grpc_server import GrpcFrontDoor
from td3sched.engine.service import EngineService
from td3sched.engine.simulator_source import SimulatorSource
from td3sched.engine.state import ShadowState, Staleness
from td3sched.policy.base import Policy, PodRequest
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.config import SimConfig

DOORS = ("in-process", "grpc", "extender")
MAX_SCORE = {"grpc": 100, "extender": MAX_EXTENDER_PRIORITY, None: None}
"""The integer scale each front door answers on (None: the scores in [0, 1])."""
NEVER_STALE_S = 1e12
"""The twin's staleness horizon: the simulator's observed metrics are as fresh as its pipeline makes them."""


TWIN_NAMESPACE = "twin"


def pod_spec(pod: PodRequest, namespace: str = TWIN_NAMESPACE) -> PodSpec:
    """What a scheduler would tell the engine about a simulated pod of ``namespace``: its app is its
    controller, of the same namespace."""
    cpu, mem, disk, rdma = pod.request.tolist()
    return PodSpec(f"pod-{pod.index}", cpu, mem, disk, rdma, gpu_count=pod.gpu_count, gpu_milli=pod.gpu_milli,
                   qos=pod.qos, cpu_limit_milli=pod.cpu_limit_milli, mem_limit_mib=pod.mem_limit_mib,
                   namespace=namespace, owner="" if pod.app is None else f"{namespace}/App/{pod.app}")


class EngineTwin(Policy):
    name = "engine-twin"

    def __init__(self, actor, door: str = "grpc", like: str | None = None,
                 safety_cpu_util: float | None = None, timeout_s: float = 30.0):
        """``actor``: the served model (``rl.onnx_actor.OnnxActor``); ``door``: one of ``DOORS``;
        ``like``: for the in-process door, the front door whose rounding (and, for the extender,
        whose /filter) it reproduces, or None for the exact scores; ``safety_cpu_util``: the world's
        (``world.config.safety_cpu_util``; default, the simulator's default)."""
        if door not in DOORS:
            raise ValueError(f"engine twin door {door!r}: expected one of {', '.join(DOORS)}")
        if like not in MAX_SCORE or (door != "in-process" and like is not None):
            raise ValueError(f"engine twin like={like!r}: expected grpc, extender or None, with the in-process door")
        self.actor, self.door, self.like = actor, door, (door if door != "in-process" else like)
        self.safety_cpu_util = float(SimConfig().safety_cpu_util if safety_cpu_util is None else safety_cpu_util)
        self.timeout_s = timeout_s
        self.placements: list[tuple[int, str]] = []
        self.decisions = 0
        self._servers: list = []
        self.client = None

    def attach(self, context) -> None:
        super().attach(context)
        self.close()
        self.placements, self.decisions, self.now, self._filtered = [], 0, 0.0, False
        self.state = ShadowState(lambda: self.now, Staleness(max_age_s=NEVER_STALE_S))
        self.source = SimulatorSource(context.cluster, self.state, lambda: self.now,
                                      context.oom_kills or (lambda: 0))
        self.service = EngineService(DecisionEngine(self.state, ModelSlot(self.actor),
                                                    safety_cpu_util=self.safety_cpu_util))
        self.state.set_pods({})  # the twin is the engine's pod watch: it reports every binding and release
        if self.door == "grpc":
            door = GrpcFrontDoor(self.service, "127.0.0.1", 0, max_workers=2)
            self._servers.append(door)
            self.client = GrpcClient(f"127.0.0.1:{door.port}", self.timeout_s)
        elif self.door == "extender":
            door = ExtenderFrontDoor(self.service, "127.0.0.1", 0, read_timeout_s=self.timeout_s)
            self._servers.append(door)
            self.client = ExtenderClient("127.0.0.1", door.port, self.timeout_s)

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray | None:
        """The first thing asked of a decision: the engine's state catches up with the simulation
        (one snapshot per decision, as the td3 policy reads the cluster once), then, behind the
        extender, kube-scheduler's /filter."""
        self.now = pod.time_s
        self.source.refresh()
        self._filtered = self.like == "extender" or (self.door == "in-process" and self.service.engine.serves_ceiling())
        if not self._filtered:  # a ceiling model in process holds back as the td3 policy's Filter does
            return None
        names = cluster.names[nodes].tolist()
        spec = pod_spec(pod)
        failed = self.client.filter(spec, names) if self.door == "extender" else self.service.filter(names, spec)
        return np.array([n not in failed for n in names], dtype=bool) if failed else None

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        names = cluster.names[nodes].tolist()
        spec = pod_spec(pod)
        if self.door == "in-process":
            api = "prioritize" if self._filtered else "score_nodes"  # /filter's decision, as the extender
            self._decision_id, d = self.service.score_nodes(spec, names, api=api)
            scores = d.scores if self.like is None else d.answer(MAX_SCORE[self.like]).astype(np.float64)
        else:
            scores, self._decision_id = self.client.scores(spec, names)
        self.decisions += 1
        return scores

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        name = str(cluster.names[node])
        self.placements.append((int(pod.index), name))
        if self.door == "grpc":
            self.client.report_binding(pod_spec(pod), name, self._decision_id)
        else:
            self.service.report_binding(pod_spec(pod), name, self._decision_id)

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        """The pod left its node: the engine's pod watch would see it gone."""
        self.service.forget_binding(TWIN_NAMESPACE, f"pod-{pod.index}", str(cluster.names[node]))

    def close(self) -> None:
        """Stop the front door and close the client (also at the next ``attach``)."""
        if self.client is not None:
            self.client.close()
            self.client = None
        for server in self._servers:
            server.stop(0) if isinstance(server, GrpcFrontDoor) else server.stop()
        self._servers = []

    def __enter__(self) -> "EngineTwin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
