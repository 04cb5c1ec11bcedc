"""The gRPC front door (``proto/td3sched/engine/v1/engine.proto``; stubs from ``make setup``).

Status codes as the gRPC documentation defines them: INVALID_ARGUMENT with a message naming the field
for bad input (no pod name, negative or NaN requests, empty or duplicate candidates, an unknown
node in ReportBinding), UNAVAILABLE while the shadow state has no metrics yet. The standard health
service (``grpc.health.v1``) reports SERVING once the state is filled, NOT_SERVING before and while
draining. The server binds loopback unless configured otherwise.
"""

from __future__ import annotations

import json
import math
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from td3sched.engine.decision import PodSpec
from td3sched.engine.service import EngineService
from td3sched.engine.state import NotReady
from td3sched.metrics.fragmentation import typical_pods_to_json
from td3sched.rl.observation import OBSERVATION_FIELDS

try:
    from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc
except ImportError as exc:  # pragma: no cover - a checkout without `make setup`
    raise ImportError(f"the engine's gRPC stubs are missing ({exc}): run `make setup`, which generates them "
                      "from proto/") from None

SERVICE_NAME = "td3sched.engine.v1.DecisionEngine"
MAX_CANDIDATES = 100_000
# QosClass enum -> PodSpec.qos (Guaranteed 0, Burstable 1, BestEffort 2); unspecified reads as Burstable
_QOS = {0: 1, 1: 0, 2: 1, 3: 2}


def pod_from_proto(pod) -> PodSpec:
    """A PodSpec, or ValueError naming the field."""
    if not pod.name:
        raise ValueError("pod.name: empty: expected the pod's name")
    if pod.qos not in _QOS:
        raise ValueError(f"pod.qos={pod.qos}: expected a QosClass value")
    for key in ("cpu_milli", "mem_mib", "disk_gib", "rdma_pct", "cpu_limit_milli", "mem_limit_mib"):
        value = getattr(pod, key)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"pod.{key}={value!r}: expected a finite non-negative number")
    return PodSpec(pod.name, pod.cpu_milli, pod.mem_mib, pod.disk_gib, pod.rdma_pct, int(pod.gpu_count),
                   int(pod.gpu_milli), _QOS[pod.qos], pod.cpu_limit_milli or math.inf, pod.mem_limit_mib or math.inf,
                   pod.namespace, pod.owner)


def action_to_proto(d, action_mode: str, dimensions=()):
    return engine_pb2.Action(pre_activations=[] if d.pre_activations is None or d.fallback else
                             [float(x) for x in d.pre_activations],
                             weights=[float(w) for w in d.weights], tau=float(d.tau), action_mode=action_mode,
                             ceiling=float(d.ceiling) if getattr(d, "ceiling", None) is not None else 0.0,
                             dimensions=list(dimensions), requests=float(getattr(d, "requests", 0.0)),
                             balance=float(getattr(d, "balance", 0.0)),
                             fragmentation=float(getattr(d, "fragmentation", 0.0)),
                             spread=float(getattr(d, "spread", 0.0)))


def score_nodes_reply(names, scores_0_100: list[int], stale, excluded, action, model_version: str,
                      fallback_reason: str, advisory: bool, decision_id: str,
                      held_back=None, action_valid_s: float = 0.0) -> engine_pb2.ScoreNodesResponse:
    """The ScoreNodes reply, candidates in their order (the benchmark's no-op server builds its reply
    with this too, so that the two differ by the decision only). A held-back node is also excluded."""
    node_score = engine_pb2.NodeScore
    if held_back is not None and held_back.any():
        scores = [node_score(node=n, score=s, stale=st, excluded=ex or hb, held_back=hb)
                  for n, s, st, ex, hb in zip(names, scores_0_100, stale.tolist(), excluded.tolist(),
                                              held_back.tolist())]
    elif stale.any():
        scores = [node_score(node=n, score=s, stale=st, excluded=ex)
                  for n, s, st, ex in zip(names, scores_0_100, stale.tolist(), excluded.tolist())]
    else:
        scores = [node_score(node=n, score=s) for n, s in zip(names, scores_0_100)]
    return engine_pb2.ScoreNodesResponse(scores=scores, action=action, model_version=model_version,
                                         fallback=bool(fallback_reason), fallback_reason=fallback_reason,
                                         advisory=advisory, decision_id=decision_id,
                                         action_valid_s=action_valid_s)


def node_metrics_reply(snap, known_taken_at_s: float, refresh_failed: bool,
                       refresh_error: str) -> engine_pb2.GetNodeMetricsResponse:
    """GetNodeMetrics' reply: the snapshot's nodes with their observed usage, capacities and sample times
    as flat arrays, or ``unchanged`` alone when the caller holds this snapshot already."""
    common = {"taken_at_s": float(snap.taken_at_s), "refresh_failed": bool(refresh_failed),
              "refresh_error": refresh_error if refresh_failed else ""}
    if known_taken_at_s and known_taken_at_s == snap.taken_at_s:
        return engine_pb2.GetNodeMetricsResponse(unchanged=True, **common)
    return engine_pb2.GetNodeMetricsResponse(nodes=snap.names, observed=snap.observed.ravel().tolist(),
                                             capacity=snap.capacity_usage.ravel().tolist(),
                                             sample_time_s=snap.scraped_at_s.tolist(), **common)


def invalid_message(exc: Exception) -> str:
    """What an INVALID_ARGUMENT says: the ValueError's message, or the unknown node a KeyError names."""
    return f"node: unknown node {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)


class DecisionEngineServicer(engine_pb2_grpc.DecisionEngineServicer):
    def __init__(self, service: EngineService):
        self.service = service

    def _guard(self, api, context, fn):
        try:
            return fn()
        except NotReady as exc:
            self.service.rejected(api, "UNAVAILABLE")
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except (ValueError, KeyError) as exc:
            self.service.rejected(api, "INVALID_ARGUMENT")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, invalid_message(exc))

    def _mode(self) -> tuple[str, tuple[str, ...]]:
        """The served model's action mode and declared dimensions ("", () without a model)."""
        actor = self.service.engine.models.actor
        return (actor.action_mode, tuple(getattr(actor, "dimensions", ()))) if actor is not None else ("", ())

    def ScoreNodes(self, request, context):
        def run():
            if not request.HasField("pod"):
                raise ValueError("pod: missing")
            if not request.candidates:
                raise ValueError("candidates: empty: expected the nodes that passed Filter")
            if len(request.candidates) > MAX_CANDIDATES:
                raise ValueError(f"candidates: {len(request.candidates)} names, expected at most {MAX_CANDIDATES}")
            decision_id, d = self.service.score_nodes(pod_from_proto(request.pod), list(request.candidates))
            return score_nodes_reply(d.candidates, d.scores_0_100(), d.stale, d.excluded,
                                     action_to_proto(d, *self._mode()), d.model_version, d.fallback_reason,
                                     d.advisory, decision_id, d.held_back, d.action_valid_s)
        return self._guard("score_nodes", context, run)

    def GetSchedulingWeights(self, request, context):
        def run():
            if not request.HasField("pod"):
                raise ValueError("pod: missing")
            _, d = self.service.score_nodes(pod_from_proto(request.pod), None, api="get_weights")
            return engine_pb2.GetSchedulingWeightsResponse(
                action=action_to_proto(d, *self._mode()), model_version=d.model_version, fallback=d.fallback,
                fallback_reason=d.fallback_reason, advisory=d.advisory)
        return self._guard("get_weights", context, run)

    def _report_binding(self, request) -> None:
        if not request.HasField("pod"):
            raise ValueError("pod: missing")
        if not request.node:
            raise ValueError("node: empty: expected the node the pod was bound to")
        self.service.report_binding(pod_from_proto(request.pod), request.node, request.decision_id)

    def ReportBinding(self, request, context):
        def run():
            self._report_binding(request)
            return engine_pb2.ReportBindingResponse()
        return self._guard("report_binding", context, run)

    def ReportBindings(self, request, context):
        """Each binding as ReportBinding takes it; a bad one is named in ``rejected``, the rest are kept."""
        def run():
            if len(request.bindings) > MAX_CANDIDATES:
                raise ValueError(f"bindings: {len(request.bindings)}, expected at most {MAX_CANDIDATES}")
            rejected = []
            for i, binding in enumerate(request.bindings):
                try:
                    self._report_binding(binding)
                except (ValueError, KeyError) as exc:
                    self.service.rejected("report_bindings", "INVALID_ARGUMENT")
                    rejected.append(f"bindings[{i}]: {invalid_message(exc)}")
            return engine_pb2.ReportBindingsResponse(accepted=len(request.bindings) - len(rejected), rejected=rejected)
        return self._guard("report_bindings", context, run)

    def GetModel(self, request, context):
        """The served model's graph (only when ``known_version`` is not the one served) and what a
        scheduler running it needs: its action mode, hold, observation layout, shadow mode, staleness,
        the cluster's recent OOM kills (the observation's field 32, from the engine's state) and, for a
        fragmentation share, the typical pods it is measured with."""
        def run():
            engine = self.service.engine
            actor = engine.models.actor
            common = {"observation_fields": list(OBSERVATION_FIELDS), "advisory": engine.shadow,
                      "fail_closed": engine.state.staleness.mode == "fail-closed",
                      "oom_kills_recent": engine.state.snapshot.oom_kills_recent if engine.state.ready else 0.0}
            if actor is None:
                return engine_pb2.GetModelResponse(**common)
            graph = b"" if request.known_version == actor.version else getattr(actor, "graph", b"")
            return engine_pb2.GetModelResponse(model_version=actor.version, onnx=graph, action_mode=actor.action_mode,
                                               dimensions=list(getattr(actor, "dimensions", ())),
                                               action_hold_s=float(getattr(actor, "action_hold_s", 0.0)),
                                               typical_pods=typical_pods_json(actor),
                                               sibling_spread=float(getattr(actor, "sibling_spread", 0.0)), **common)
        return self._guard("get_model", context, run)

    def GetNodeMetrics(self, request, context):
        """The metrics source's last snapshot, packed (node_metrics_reply); UNAVAILABLE before the first."""
        def run():
            known = request.known_taken_at_s
            if not math.isfinite(known):
                raise ValueError(f"known_taken_at_s={known!r}: expected a finite time, or 0 for none")
            state = self.service.engine.state
            snap = state.metrics
            if snap is None:
                raise NotReady("no node metrics yet: the engine's metrics source has not published a snapshot")
            return node_metrics_reply(snap, known, state.last_refresh_failed, state.last_error)
        return self._guard("get_node_metrics", context, run)


def typical_pods_json(actor) -> str:
    """A served model's typical pods as GetModel sends them (``typical_pods_to_json``'s form), for a model
    with a fragmentation share; "" for any other."""
    typical = getattr(actor, "typical_pods", None)
    if typical is None or "frag" not in getattr(actor, "dimensions", ()):
        return ""
    names, pools = typical
    return json.dumps(typical_pods_to_json(pools, names), separators=(",", ":"))


class GrpcFrontDoor:
    """A started gRPC server with the engine and health services; ``port`` is the bound one."""

    def __init__(self, service: EngineService, address: str = "127.0.0.1", port: int = 0, max_workers: int = 8,
                 credentials: grpc.ServerCredentials | None = None):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
                                  options=[("grpc.max_receive_message_length", 16 << 20)])
        engine_pb2_grpc.add_DecisionEngineServicer_to_server(DecisionEngineServicer(service), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        target = f"{address}:{port}"
        self.port = (self.server.add_secure_port(target, credentials) if credentials is not None
                     else self.server.add_insecure_port(target))
        if self.port == 0:
            raise OSError(f"gRPC: cannot bind {target}")
        self.address = address
        self.service = service
        self._stop = threading.Event()
        self.server.start()
        self._watch = threading.Thread(target=self._health_loop, name="grpc-health", daemon=True)
        self._watch.start()

    def _set(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def _health_loop(self) -> None:
        while not self._stop.is_set():
            self._set(self.service.ready)
            self._stop.wait(0.2)

    def stop(self, grace_s: float = 5.0) -> None:
        """Drain: NOT_SERVING, refuse new calls, let calls in flight finish (up to ``grace_s``)."""
        self._stop.set()
        self._set(False)
        self.server.stop(grace_s).wait()
