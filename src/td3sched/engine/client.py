"""Clients of the engine's front doors, as a scheduler calls them: what the digital twin
(``engine.twin``), the benchmark and the tests use to reach a served engine.

    GrpcClient      ScoreNodes (one call per pod, every candidate), ReportBinding, over a gRPC channel
    ExtenderClient  /filter and /prioritize as kube-scheduler calls an extender with
                    ``nodeCacheCapable: true`` (``NodeNames`` in, ``NodeNames`` out), over HTTP/1.1
                    keep-alive; the pod travels as a v1.Pod (``kubernetes_objects.pod_to_k8s``)

Every call has a deadline; a failed call raises (``grpc.RpcError``, ``ExtenderError``), it never
answers something made up.
"""

from __future__ import annotations

import http.client
import json
import math

import grpc
import numpy as np

from td3sched.engine.decision import PodSpec
from td3sched.engine.kubernetes_objects import pod_to_k8s
from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

MAX_MESSAGE_BYTES = 16 << 20
_QOS_CLASS = (engine_pb2.QOS_CLASS_GUARANTEED, engine_pb2.QOS_CLASS_BURSTABLE, engine_pb2.QOS_CLASS_BEST_EFFORT)
"""PodSpec.qos (QOS_NAMES order) -> the proto's QosClass."""


def pod_to_proto(pod: PodSpec) -> engine_pb2.Pod:
    """The proto Pod of a PodSpec (a limit of inf, none, is sent as 0)."""
    return engine_pb2.Pod(
        namespace=pod.namespace, name=pod.name, cpu_milli=pod.cpu_milli, mem_mib=pod.mem_mib, disk_gib=pod.disk_gib,
        rdma_pct=pod.rdma_pct, gpu_count=pod.gpu_count, gpu_milli=pod.gpu_milli, qos=_QOS_CLASS[pod.qos],
        cpu_limit_milli=pod.cpu_limit_milli if math.isfinite(pod.cpu_limit_milli) else 0.0,
        mem_limit_mib=pod.mem_limit_mib if math.isfinite(pod.mem_limit_mib) else 0.0, owner=pod.owner)


class GrpcClient:
    """``DecisionEngine`` over one channel (``target`` "host:port")."""

    max_score = 100

    def __init__(self, target: str, timeout_s: float = 10.0, credentials: grpc.ChannelCredentials | None = None):
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        self.channel = (grpc.secure_channel(target, credentials, options) if credentials is not None
                        else grpc.insecure_channel(target, options))
        self.stub = engine_pb2_grpc.DecisionEngineStub(self.channel)
        self.timeout_s = timeout_s

    def score_nodes(self, pod: PodSpec, candidates: list[str]) -> engine_pb2.ScoreNodesResponse:
        return self.stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod_to_proto(pod), candidates=candidates),
                                    timeout=self.timeout_s)

    def scores(self, pod: PodSpec, candidates: list[str]) -> tuple[np.ndarray, str]:
        """(scores 0-100 in the candidates' order, decision id); excluded candidates score 0."""
        reply = self.score_nodes(pod, candidates)
        if len(reply.scores) != len(candidates):
            raise ValueError(f"ScoreNodes answered {len(reply.scores)} scores for {len(candidates)} candidates")
        return np.array([s.score for s in reply.scores], dtype=np.float64), reply.decision_id

    def report_binding(self, pod: PodSpec, node: str, decision_id: str = "") -> None:
        self.stub.ReportBinding(engine_pb2.ReportBindingRequest(pod=pod_to_proto(pod), node=node,
                                                                decision_id=decision_id), timeout=self.timeout_s)

    def close(self) -> None:
        self.channel.close()


class ExtenderError(RuntimeError):
    """The extender answered something other than 200 (its ``Error`` in the message)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"extender answered {status}: {message}")
        self.status = status


class ExtenderClient:
    """kube-scheduler's calls to an HTTP extender, ``nodeCacheCapable: true``."""

    max_score = 10

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict):
        """The decoded JSON answer of a POST; ``ExtenderError`` for a status other than 200."""
        data = json.dumps(body, separators=(",", ":")).encode()
        for attempt in (0, 1):  # a kept-alive connection the server has closed is opened again, once
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                resp = self._conn.getresponse()
                payload = resp.read()
                break
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest):
                self.close()
                if attempt:
                    raise
        answer = json.loads(payload)
        if resp.status != 200:
            raise ExtenderError(resp.status, answer.get("Error", "") if isinstance(answer, dict) else str(answer))
        return answer

    def filter(self, pod: PodSpec, candidates: list[str]) -> dict[str, str]:
        """Failed nodes -> reason (``FailedNodes`` and ``FailedAndUnresolvableNodes``)."""
        result = self.post("/filter", {"Pod": pod_to_k8s(pod), "Nodes": None, "NodeNames": candidates})
        if result.get("Error"):
            raise ExtenderError(200, result["Error"])
        return {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}

    def scores(self, pod: PodSpec, candidates: list[str]) -> tuple[np.ndarray, str]:
        """(scores 0-10 in the candidates' order, "": the extender gives no decision id)."""
        answer = self.post("/prioritize", {"Pod": pod_to_k8s(pod), "Nodes": None, "NodeNames": candidates})
        by_host = {h["Host"]: h["Score"] for h in answer}
        if set(by_host) != set(candidates):
            raise ValueError(f"/prioritize answered hosts that are not the {len(candidates)} candidates")
        return np.array([by_host[n] for n in candidates], dtype=np.float64), ""

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
