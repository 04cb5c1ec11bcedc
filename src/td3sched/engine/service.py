"""The engine's one set of operations, behind every front door (gRPC, the HTTP extender): a decision
is made, counted in the metrics, written to the decision log and timed here, once.

A model with a hold-back ceiling decides in the extender's /filter (``DecisionEngine.filter``): that
decision is logged and kept for the pod's /prioritize that follows (``REUSE_S``, the same pod, the
candidates among the filter's), which scores with the same action, as the simulator's td3 policy
scores with the action its Filter took; otherwise /prioritize decides afresh.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import os
import threading
import time
from collections import OrderedDict

import numpy as np

from td3sched.engine.decision import Decision, DecisionEngine, PodSpec
from td3sched.engine.decision_log import DecisionLog
from td3sched.engine.metrics import EngineMetrics
from td3sched.engine.state import binding_key


def freeze_startup_heap() -> None:
    """Leave every object alive now (the modules, the model, the compiled kernels' machinery: a few
    hundred thousand) out of the garbage collector's scans from now on (``gc.freeze``). A serving
    process calls it once, when started and before it serves: a full collection then scans only
    what requests created, and its pauses, which set a call's tail at thousands of candidates, stop
    growing with what was imported (docs/engine.md, Evidence)."""
    gc.collect()
    gc.freeze()


REUSE_S = 30.0
"""How long (engine clock) a /filter decision stays the one the same pod's /prioritize uses."""
REUSE_MAX = 4096
"""Filter decisions kept for reuse (the oldest go first)."""
EXPECT_LEVELS = {"score_nodes": 100, "prioritize": 10}
"""The score levels each front door answers in (ScoreNodes 0-100, the extender's /prioritize 0-10), by the
``api`` of ``EngineService.score_nodes``: the nodes its answer ranks first are where the scheduler may bind
the pod (``_expect``). GetSchedulingWeights is not here: the plugin scores with the action itself,
counting its own assumed pods."""


def _finite_list(x) -> list | None:
    if x is None:
        return None
    return [float(v) if math.isfinite(v) else None for v in np.asarray(x, dtype=float).ravel()]


def _pod_record(pod: PodSpec) -> dict:
    """The pod as JSON: a limit of inf (none) is written null. Its fields are scalars, so they are read as
    they are (``dataclasses.asdict`` deep-copies each, half of a binding's cost in the engine)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in vars(pod).items()}


class EngineService:
    def __init__(self, engine: DecisionEngine, log: DecisionLog | None = None, metrics: EngineMetrics | None = None):
        self.engine = engine
        self.log = log
        self.metrics = metrics or EngineMetrics()
        self.metrics.set_version(engine.models.version)
        self.metrics.watch_state(engine.state)
        self._ids = itertools.count()
        self._prefix = f"{os.getpid():x}-{int(time.time()):x}"
        self._filtered: OrderedDict[tuple[str, str], tuple[str, Decision]] = OrderedDict()
        self._filtered_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.engine.state.ready

    def _next_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def _log_decision(self, decision_id: str, pod: PodSpec, d: Decision) -> None:
        if self.log is None:
            return
        fresh_u = iter(d.utilisation if d.utilisation is not None else ())
        fresh_r = iter(d.requested if d.requested is not None else ())
        candidates = []
        for name, score, stale in zip(d.candidates, d.scores_0_100(), d.stale):
            u = None if stale else _finite_list(next(fresh_u, None))
            r = None if stale else _finite_list(next(fresh_r, None))
            candidates.append({"node": name, "score": score, "stale": bool(stale), "u": u, "r": r})
        self.log.append({
            "kind": "decision", "time_s": d.time_s, "decision_id": decision_id, "pod": _pod_record(pod),
            "observation": _finite_list(d.observation), "action": _finite_list(d.pre_activations),
            "weights": _finite_list(d.weights), "tau": float(d.tau), "model_version": d.model_version,
            "fallback_reason": d.fallback_reason, "advisory": d.advisory, "candidates": candidates,
            **({"requests": float(d.requests)} if d.requests else {}),
            **({"balance": float(d.balance)} if d.balance else {}),
            **({"fragmentation": float(d.fragmentation)} if d.fragmentation else {}),
            **({"spread": float(d.spread)} if d.spread else {}),
            **({} if d.ceiling is None else {"ceiling": float(d.ceiling),
                                             "held_back": [n for n, h in zip(d.candidates, d.held_back) if h]})})
        self.metrics.log_records.inc()

    def score_nodes(self, pod: PodSpec, candidates: list[str] | None, api: str = "score_nodes") -> tuple[str, Decision]:
        """(decision id, decision); ``ValueError`` / ``NotReady`` pass through to the front door."""
        start = time.perf_counter()
        self.engine.state.unexpect_pod(binding_key(pod.namespace, pod.name))
        reused = self._reuse(pod, candidates) if api == "prioritize" else None
        if reused is not None:
            self._expect(pod, reused[1], api)
            self.metrics.observe_latency(api, time.perf_counter() - start)
            return reused
        d = self.engine.decide(pod, candidates)
        decision_id = self._next_id()
        self.metrics.record_decision(d)
        self._log_decision(decision_id, pod, d)
        self._expect(pod, d, api)
        self.metrics.observe_latency(api, time.perf_counter() - start)
        return decision_id, d

    def _expect(self, pod: PodSpec, d: Decision, api: str) -> None:
        """Count the pod on the candidates its answer ranks first until its binding is reported
        (``ShadowState.expect_pod``): in their usage and, with an owner, among its siblings there. The next
        pod of a burst, scored before that report, then sees it where it will most likely be, as
        kube-scheduler sees its assumed pods. The answer's own levels decide the ties (``EXPECT_LEVELS``,
        ``Decision.answer``): the scheduler picks among the tied nodes at random. Advisory decisions (shadow
        mode) place nothing and count nothing; neither does an action handed to the plugin, which counts
        its own assumed pods."""
        levels = EXPECT_LEVELS.get(api)
        if levels is None or d.advisory or not len(d.candidates):
            return
        scores = np.where(d.eligible, d.answer(levels), -1)
        if scores.max() < 0:
            return
        top = [d.candidates[i] for i in np.flatnonzero(scores == scores.max())]
        self.engine.state.expect_pod(binding_key(pod.namespace, pod.name), pod.owner, top,
                                     pod.request(0.0).nonzero_cpu_mem)

    def filter(self, candidates: list[str], pod: PodSpec | None = None) -> dict[str, str]:
        """Failed nodes -> reason (``DecisionEngine.filter``); a decision taken for ``pod`` (a model with
        a hold-back ceiling) is counted, logged and kept for its /prioritize."""
        start = time.perf_counter()
        if pod is not None:
            self.engine.state.unexpect_pod(binding_key(pod.namespace, pod.name))
        failed, d = self.engine.filter(candidates, pod)
        if d is not None:
            decision_id = self._next_id()
            self.metrics.record_decision(d)
            self._log_decision(decision_id, pod, d)
            with self._filtered_lock:
                self._filtered[(pod.namespace, pod.name)] = (decision_id, d)
                self._filtered.move_to_end((pod.namespace, pod.name))
                while len(self._filtered) > REUSE_MAX:
                    self._filtered.popitem(last=False)
        self.metrics.observe_latency("filter", time.perf_counter() - start)
        return failed

    def _reuse(self, pod: PodSpec, candidates: list[str] | None) -> tuple[str, Decision] | None:
        """The pod's /filter decision restricted to ``candidates``, if recent and they are among its own."""
        with self._filtered_lock:
            kept = self._filtered.pop((pod.namespace, pod.name), None)
        if kept is None or candidates is None:
            return None
        decision_id, d = kept
        where = {n: i for i, n in enumerate(d.candidates)}
        if not 0 <= self.engine.state.clock() - d.time_s <= REUSE_S or any(n not in where for n in candidates):
            return None
        i = np.fromiter((where[n] for n in candidates), dtype=np.int64, count=len(candidates))
        return decision_id, dataclasses.replace(
            d, candidates=list(candidates), scores=d.scores[i], excluded=d.excluded[i], stale=d.stale[i],
            held_back=d.held_back[i] if d.held_back is not None else None, utilisation=None)

    def report_binding(self, pod: PodSpec, node: str, decision_id: str = "", source: str = "report_binding",
                       created_s: float | None = None) -> bool:
        """Feed the assign cache and the pods' workloads (``KeyError`` for an unknown node): the one path of
        ``ReportBinding``
        and of the pod watch (``source``: report_binding, pod_watch). A binding the other source has
        already counted (``ShadowState.report_binding``) is logged but not counted again. True when
        counted. ``created_s``: when the pod was created (Unix seconds; the pod watch reads it), logged
        with the binding so that the history knows the pod's wait."""
        key = binding_key(pod.namespace, pod.name)
        counted = self.engine.state.report_binding(node, pod.request(0.0).nonzero_cpu_mem, pod=key, source=source)
        self.engine.state.place_pod(key, pod.owner, node)
        self.metrics.bindings.labels(source, "counted" if counted else "duplicate").inc()
        if self.log is not None:
            self.log.append({"kind": "binding", "time_s": self.engine.state.clock(), "decision_id": decision_id,
                             "pod": _pod_record(pod), "node": node, "source": source, "counted": counted,
                             **({} if created_s is None else {"created_s": float(created_s)})})
            self.metrics.log_records.inc()
        return counted

    def forget_binding(self, namespace: str, name: str, node: str = "") -> None:
        """The pod is gone (the pod watch saw it deleted or finished): out of the assign cache, and a
        ``release`` record in the decision log (the history's departures)."""
        self.engine.state.forget_binding(binding_key(namespace, name))
        self.engine.state.remove_pod(binding_key(namespace, name))
        if self.log is not None:
            self.log.append({"kind": "release", "time_s": self.engine.state.clock(),
                             "pod": {"namespace": namespace, "name": name}, "node": node})
            self.metrics.log_records.inc()

    def report_kills(self, namespace: str, name: str, node: str, kills: int | None) -> None:
        """The pod watch saw a bound pod's containers OOM-killed (``kills``; None: restarted more often
        than its statuses say why): a ``kills`` record in the decision log (the history's
        ``outcome_kills``)."""
        if self.log is not None:
            self.log.append({"kind": "kills", "time_s": self.engine.state.clock(),
                             "pod": {"namespace": namespace, "name": name}, "node": node, "kills": kills})
            self.metrics.log_records.inc()

    def reload(self, actor) -> None:
        """Validate and swap in a new model; the version changes in responses, logs and metrics."""
        self.engine.models.swap(actor)
        self.metrics.set_version(self.engine.models.version)

    def rejected(self, api: str, code: str) -> None:
        self.metrics.rejected.labels(api, code).inc()
