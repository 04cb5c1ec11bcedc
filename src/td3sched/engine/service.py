"""The engine's one set of operations, behind every front door (gRPC, the HTTP extender): a decision
is made, counted in the metrics, written to the decision log and timed here, once.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time

import numpy as np

from td3sched.engine.decision import Decision, DecisionEngine, PodSpec
from td3sched.engine.decision_log import DecisionLog
from td3sched.engine.metrics import EngineMetrics
from td3sched.engine.state import binding_key


def _finite_list(x) -> list | None:
    if x is None:
        return None
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=float).ravel()]


def _pod_record(pod: PodSpec) -> dict:
    """The pod as JSON: a limit of inf (none) is written null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in dataclasses.asdict(pod).items()}


class EngineService:
    def __init__(self, engine: DecisionEngine, log: DecisionLog | None = None, metrics: EngineMetrics | None = None):
        self.engine = engine
        self.log = log
        self.metrics = metrics or EngineMetrics()
        self.metrics.set_version(engine.models.version)
        self.metrics.watch_state(engine.state)
        self._ids = itertools.count()
        self._prefix = f"{os.getpid():x}-{int(time.time()):x}"

    @property
    def ready(self) -> bool:
        return self.engine.state.ready

    def _next_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def _log_decision(self, decision_id: str, pod: PodSpec, d: Decision) -> None:
        if self.log is None:
            return
        fresh_u = iter(d.utilisation if d.utilisation is not None else ())
        candidates = []
        for name, score, stale in zip(d.candidates, d.scores_0_100(), d.stale):
            u = None if stale else _finite_list(next(fresh_u, None))
            candidates.append({"node": name, "score": score, "stale": bool(stale), "u": u})
        self.log.append({
            "kind": "decision", "time_s": d.time_s, "decision_id": decision_id, "pod": _pod_record(pod),
            "observation": _finite_list(d.observation), "action": _finite_list(d.pre_activations),
            "weights": _finite_list(d.weights), "tau": float(d.tau), "model_version": d.model_version,
            "fallback_reason": d.fallback_reason, "advisory": d.advisory, "candidates": candidates})
        self.metrics.log_records.inc()

    def score_nodes(self, pod: PodSpec, candidates: list[str] | None, api: str = "score_nodes") -> tuple[str, Decision]:
        """(decision id, decision); ``ValueError`` / ``NotReady`` pass through to the front door."""
        start = time.perf_counter()
        d = self.engine.decide(pod, candidates)
        decision_id = self._next_id()
        self.metrics.record_decision(d)
        self._log_decision(decision_id, pod, d)
        self.metrics.observe_latency(api, time.perf_counter() - start)
        return decision_id, d

    def filter(self, candidates: list[str]) -> dict[str, str]:
        start = time.perf_counter()
        failed = self.engine.filter(candidates)
        self.metrics.observe_latency("filter", time.perf_counter() - start)
        return failed

    def report_binding(self, pod: PodSpec, node: str, decision_id: str = "", source: str = "report_binding") -> bool:
        """Feed the assign cache (``KeyError`` for an unknown node): the one path of ``ReportBinding``
        and of the pod watch (``source``: report_binding, pod_watch). A binding the other source has
        already counted (``ShadowState.report_binding``) is logged but not counted again. True when
        counted."""
        counted = self.engine.state.report_binding(node, pod.request(0.0).nonzero_cpu_mem,
                                                   pod=binding_key(pod.namespace, pod.name), source=source)
        self.metrics.bindings.labels(source, "counted" if counted else "duplicate").inc()
        if self.log is not None:
            self.log.append({"kind": "binding", "time_s": self.engine.state.clock(), "decision_id": decision_id,
                             "pod": _pod_record(pod), "node": node, "source": source, "counted": counted})
            self.metrics.log_records.inc()
        return counted

    def forget_binding(self, namespace: str, name: str) -> None:
        """The pod is gone (the pod watch saw it deleted or finished)."""
        self.engine.state.forget_binding(binding_key(namespace, name))

    def reload(self, actor) -> None:
        """Validate and swap in a new model; the version changes in responses, logs and metrics."""
        self.engine.models.swap(actor)
        self.metrics.set_version(self.engine.models.version)

    def rejected(self, api: str, code: str) -> None:
        self.metrics.rejected.labels(api, code).inc()
