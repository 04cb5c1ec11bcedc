"""The engine's own Prometheus metrics (prometheus_client; base units, counters end in ``_total``,
labels with small fixed sets of values). One registry per engine, served at ``/metrics``.

    td3sched_decision_latency_seconds{api}           histogram: score_nodes, get_weights, prioritize, filter
    td3sched_decisions_total{outcome,version}        model, fallback, shadow, error
    td3sched_fallbacks_total{reason}                 no_model, model_error, nan, out_of_range, no_fresh_metrics
    td3sched_requests_rejected_total{api,code}       bad input (INVALID_ARGUMENT / 400) and not ready (UNAVAILABLE / 503)
    td3sched_model_info{version}                     1 for the served model
    td3sched_stale_nodes                             candidates with stale or missing metrics at the last decision
    td3sched_state_stale_nodes                       nodes of the whole shadow state with stale or missing metrics,
                                                     counted when scraped (ages grow between refreshes)
    td3sched_state_nodes                             nodes the shadow state knows
    td3sched_expected_pods                           pods answered whose binding has not been reported yet,
                                                     counted where the answer ranked them (at scrape time)
    td3sched_action_weight{resource}                 histogram of the weights chosen (cpu, mem, io, net)
    td3sched_action_tau                              histogram of tau
    td3sched_state_refreshes_total{result}           shadow-state refreshes: ok, error
    td3sched_decision_log_records_total              records written to the decision log
    td3sched_bindings_total{source,result}           bindings reported (report_binding, pod_watch): counted,
                                                     duplicate (already counted), unknown_node, invalid_pod
    td3sched_kubernetes_watch_restarts_total{resource,reason}   watches of pods / nodes restarted: gone (410,
                                                     re-listed), error (reconnected after a back-off)
    td3sched_kubernetes_watch_last_event_age_seconds{resource}  since the last event, bookmark or list
                                                     (since the watch started, before the first)
    td3sched_kubernetes_watch_synced{resource}       1 once the first list is applied
"""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from td3sched.policy.features import FEATURES

LATENCY_BUCKETS_S = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1.0)
SHARE_BUCKETS = tuple(i / 10 for i in range(1, 11))


class EngineMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.latency = Histogram("td3sched_decision_latency_seconds", "Time to answer one request, by API.",
                                 ["api"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.decisions = Counter("td3sched_decisions", "Decisions by outcome and model version.",
                                 ["outcome", "version"], registry=r)
        self.fallbacks = Counter("td3sched_fallbacks", "Decisions that used the fallback arguments, by reason.",
                                 ["reason"], registry=r)
        self.rejected = Counter("td3sched_requests_rejected", "Requests refused, by API and status code.",
                                ["api", "code"], registry=r)
        self.model_info = Gauge("td3sched_model_info", "The served model's version (value 1).", ["version"], registry=r)
        self.stale_nodes = Gauge("td3sched_stale_nodes", "Candidates with stale or missing metrics at the last decision.",
                                 registry=r)
        self.state_stale_nodes = Gauge("td3sched_state_stale_nodes",
                                       "Nodes of the shadow state with stale or missing metrics, at scrape time.",
                                       registry=r)
        self.state_nodes = Gauge("td3sched_state_nodes", "Nodes the shadow state knows.", registry=r)
        self.expected_pods = Gauge("td3sched_expected_pods",
                                   "Pods answered whose binding has not been reported yet, at scrape time.",
                                   registry=r)
        self.weight = Histogram("td3sched_action_weight", "Weights chosen per resource.", ["resource"],
                                buckets=SHARE_BUCKETS, registry=r)
        self.tau = Histogram("td3sched_action_tau", "Target utilisation tau chosen.", buckets=SHARE_BUCKETS, registry=r)
        self.refreshes = Counter("td3sched_state_refreshes", "Shadow-state refreshes by result.", ["result"], registry=r)
        self.log_records = Counter("td3sched_decision_log_records", "Records written to the decision log.", registry=r)
        self.bindings = Counter("td3sched_bindings", "Bindings reported, by source and result.",
                                ["source", "result"], registry=r)
        self.watch_restarts = Counter("td3sched_kubernetes_watch_restarts",
                                      "Watches of the API server restarted, by resource and reason.",
                                      ["resource", "reason"], registry=r)
        self.watch_event_age = Gauge("td3sched_kubernetes_watch_last_event_age_seconds",
                                     "Seconds since the watch's last event, bookmark or list.", ["resource"],
                                     registry=r)
        self.watch_synced = Gauge("td3sched_kubernetes_watch_synced",
                                  "1 once the watch's first list is applied.", ["resource"], registry=r)
        self._version = None
        self._weight_children = [self.weight.labels(name) for name in FEATURES]
        self._decision_children: dict[tuple[str, str], object] = {}
        self.latency_children: dict[str, object] = {}

    def watch_state(self, state) -> None:
        """Count the state's nodes, and its stale ones (``ShadowState.fresh`` at the state's clock),
        whenever the metrics are collected: a node goes stale by ageing, between two refreshes."""
        def stale() -> float:
            if not state.ready:
                return 0.0
            snap = state.snapshot
            return float(snap.size - int(np.count_nonzero(state.fresh(snap, state.clock()))))

        self.state_stale_nodes.set_function(stale)
        self.state_nodes.set_function(lambda: float(state.snapshot.size) if state.ready else 0.0)
        self.expected_pods.set_function(lambda: float(state.expected_pods()))

    def watch_kubernetes(self, watches) -> None:
        """Export each watch's health (``kubernetes_source.ResourceWatch``: ``resource``,
        ``last_event_age_s()``, ``synced``), read when the metrics are collected."""
        for w in watches:
            self.watch_event_age.labels(w.resource).set_function(w.last_event_age_s)
            self.watch_synced.labels(w.resource).set_function(lambda w=w: float(w.synced))

    def set_version(self, version: str) -> None:
        if self._version is not None:
            self.model_info.remove(self._version)
        self.model_info.labels(version).set(1)
        self._version = version

    def record_decision(self, decision) -> None:
        outcome = "shadow" if decision.advisory else ("fallback" if decision.fallback else "model")
        key = (outcome, decision.model_version)
        counter = self._decision_children.get(key)
        if counter is None:  # labels() takes a lock and builds a key: once per outcome and version
            counter = self._decision_children[key] = self.decisions.labels(*key)
        counter.inc()
        if decision.fallback:
            self.fallbacks.labels(decision.fallback_reason).inc()
        self.stale_nodes.set(int(decision.stale.sum()))
        for child, w in zip(self._weight_children, decision.weights.tolist()):
            child.observe(w)
        self.tau.observe(float(decision.tau))

    def observe_latency(self, api: str, seconds: float) -> None:
        child = self.latency_children.get(api)
        if child is None:
            child = self.latency_children[api] = self.latency.labels(api)
        child.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
