"""``td3sched import-history``: the scheduling history of a cluster that never ran td3-scheduler.

Decisions are rebuilt from the pods' bindings and the nodes' metrics at bind time:

- **bindings**, from one of
  - a v1.PodList (``kubectl get pods -A -o json``, or the API's ``/api/v1/pods``): every pod with
    ``spec.nodeName`` and a ``PodScheduled`` condition that is True; its bind time is that
    condition's ``lastTransitionTime`` (whole seconds, as the API server keeps it). Pods without a
    bind time are counted and skipped;
  - an API server audit log (JSON lines of ``audit.k8s.io/v1`` Events, an audit policy of level
    Request or RequestResponse for pods and pods/binding): each successful ``create`` of a
    ``pods/binding`` (stage ResponseComplete) is a binding to its ``requestObject.target.name``, at its
    ``stageTimestamp`` (microseconds); the pod is the one of the latest successful pod ``create``
    received before it (``responseObject``, else ``requestObject``), wherever in the log: an API server
    writes a create's ResponseComplete event once its response is sent, and a scheduler watching the
    pod may have bound it, and the binding's event been written, first. Bindings of pods whose creation
    is not in the log are counted and skipped;

  requests, limits and QoS are read as the engine's extender reads a v1.Pod
  (``engine.kubernetes_objects``);
- **departures** (``outcome_left_s``, ``outcome`` ``departure``): in a PodList, a pod that has
  finished (phase Succeeded or Failed) left at its containers' latest ``state.terminated.finishedAt``,
  and a pod being deleted at its ``metadata.deletionTimestamp``; in an audit log, at the successful
  ``delete`` of the pod after its binding. Pods still running have none;
- **kills** (``outcome_kills``): in a PodList, where its container statuses pin them down (``_kills``:
  a container restarted at most once, the restart's cause in ``lastState``); else, and in an audit
  log, null;
- **waits** (``wait_s``): the bind time minus the pod's ``metadata.creationTimestamp`` (in an audit log
  without it, the time of the pod's create);
- **overload** (``outcome_overload_h``): the hours its node's CPU was above the objective's overload
  threshold (``RewardConfig.overload_util``, 85%: ``cpu_busy_cores`` over ``cpu_cores``) while the pod was
  on it, from the same range queries, a step each, from the binding to the departure; a pod still
  running counts to the end of the range (the latest binding or departure): so far, as a simulator's
  history counts a pod still on its node. Missing points count as not over; null for a node without a
  CPU series. Its time above a latency SLO (``outcome_slo_h``, ``outcome_node_slo_h``) is in neither
  source: null;
- **metrics**: the engine's Prometheus queries (``engine.prometheus_source``, the same PromQL) as
  range queries (``/api/v1/query_range``) over the bindings' and departures' span, step ``step_s``; a binding at time t
  sees each series' latest point at or before t (what an instant query at that grid time returns).

- **requests** (the candidates' ``r_cpu``, ``r_mem``): each node's requests at a binding are the sum
  of the imported pods bound to it before and not yet departed. Pods the source does not list (deleted
  before a PodList was taken, created before an audit log starts) are not counted, so a node's
  requests are a lower bound until those pods are gone.

The bindings are then replayed, in time order, through the decision engine itself
(``engine.decision`` and ``engine.service``, no model): for each, the snapshot of its time is
published, the pod is scored over every node with metrics (the cluster's Filter is not replayed:
every node is a candidate), the decision is logged to a decision log in a temporary folder, and the
binding is reported (so the assign cache corrects the next decisions as the engine's would). The log
is converted by ``lifecycle.engine_log``; rows get ``source`` ``import``, ``policy``
``cluster:<schedulerName>`` and no model, action, weights or tau. The candidates' features and the
observation are thus the engine's, to the bit, on the metrics the cluster had at bind time.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import json
import math
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec
from td3sched.engine.decision_log import DecisionLog
from td3sched.engine.kubernetes_objects import oom_kills_since, pod_from_k8s
from td3sched.engine.prometheus_source import (DEFAULT_QUERIES, PrometheusSource, api_result,
                                               snapshot_from_values)
from td3sched.engine.service import EngineService
from td3sched.engine.state import ShadowState, Staleness, requested_row
from td3sched.lifecycle.engine_log import decisions_from_log
from td3sched.lifecycle.history import DEFAULT_CANDIDATES, HistoryError, check_candidates, write_history
from td3sched.reward import RewardConfig

MAX_POINTS = 10_000
"""Points per series in one range query (Prometheus refuses more than 11,000): longer spans are split."""
DEFAULT_STEP_S = 15.0


@dataclass(frozen=True)
class Binding:
    pod: PodSpec
    node: str
    time_s: float
    scheduler: str
    left_s: float | None = None
    """When the pod left the node (it finished, or was deleted), None while it runs or when unknown."""
    kills: int | None = None
    """OOM kills of its containers on the node, each followed by a restart (``_kills``); None when unknown."""
    created_s: float | None = None
    """When the pod was created (its ``metadata.creationTimestamp``, else the audit log's create), None when
    unknown: its wait before the binding is ``time_s - created_s``."""

    @property
    def wait_s(self) -> float | None:
        """Seconds from the pod's creation to its binding (0 at least: both can be whole seconds)."""
        return None if self.created_s is None else max(self.time_s - self.created_s, 0.0)


def _binding(pod: dict, node, time_s: float, where: str, left_s: float | None = None,
             kills: int | None = None, created_s: float | None = None) -> Binding:
    """The Binding of a Kubernetes pod object to ``node`` at ``time_s`` (a bad pod: HistoryError
    naming ``where``); its creation time from the object, else ``created_s``."""
    try:
        spec_pod = pod_from_k8s(pod, where)
    except ValueError as exc:
        raise HistoryError(str(exc)) from None
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if created:
        created_s = _time(created, f"{where}.metadata.creationTimestamp")
    return Binding(spec_pod, str(node), time_s, str(scheduler), left_s, kills, created_s)


FINISHED_PHASES = ("Succeeded", "Failed")


def _left_s(pod: dict, where: str) -> float | None:
    """When a listed pod left its node: a finished pod at its containers' latest finishedAt, a pod
    being deleted at its deletionTimestamp; None while it runs."""
    status = pod.get("status") or {}
    if status.get("phase") in FINISHED_PHASES:
        ends = [_time(c["state"]["terminated"]["finishedAt"], f"{where}.status.containerStatuses[{i}]")
                for i, c in enumerate(status.get("containerStatuses") or [])
                if ((c.get("state") or {}).get("terminated") or {}).get("finishedAt")]
        if ends:
            return max(ends)
    deleted = (pod.get("metadata") or {}).get("deletionTimestamp")
    return _time(deleted, f"{where}.metadata.deletionTimestamp") if deleted else None

def _kills(pod: dict) -> int | None:
    """OOM kills of a listed pod's containers, each followed by a restart, where the PodList pins them
    down (``engine.kubernetes_objects.oom_kills_since`` from no restart: a container restarted at most
    once, the restart's cause in ``lastState``); else None."""
    return oom_kills_since(pod, {})


def _time(text: str, where: str) -> float:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise HistoryError(f"{where}: time {text!r}: expected an RFC 3339 time") from None


def bindings_from_pod_list(pod_list, where: str = "PodList") -> tuple[list[Binding], int]:
    """(bindings in time order, pods skipped: not bound, or no PodScheduled=True condition)."""
    if not isinstance(pod_list, dict) or not isinstance(pod_list.get("items"), list):
        raise HistoryError(f"{where}: expected a v1.PodList (an object with items), got {type(pod_list).__name__}")
    out, skipped = [], 0
    for i, pod in enumerate(pod_list["items"]):
        at = f"{where}.items[{i}]"
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"
                     and c.get("status") == "True" and c.get("lastTransitionTime")), None)
        if not node or cond is None:
            skipped += 1
            continue
        out.append(_binding(pod, node, _time(cond["lastTransitionTime"], at), at, _left_s(pod, at), _kills(pod)))
    out.sort(key=lambda b: b.time_s)
    return out, skipped


def bindings_from_audit_log(path) -> tuple[list[Binding], int]:
    """(bindings in time order, bindings skipped: their pod's creation is not in the log) of an API
    server audit log (see the module's docstring)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise HistoryError(f"audit log {path}: not found: expected the API server's --audit-log-path file") from None
    events = []  # (where, event, pod key) of the successful pod creates, bindings and deletes, in the log's order
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HistoryError(f"{where}: not a JSON audit event ({exc})") from None
        if event.get("kind") != "Event" or event.get("stage") != "ResponseComplete" or \
                event.get("verb") not in ("create", "delete"):
            continue
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        if ref.get("resource") != "pods" or not 200 <= int(code) < 300:
            continue
        events.append((where, event, (str(ref.get("namespace") or ""), str(ref.get("name") or ""))))
    # the creates first: a create's event can come after the binding of the pod it made
    creates: dict[tuple[str, str], list[tuple[float, dict, float | None]]] = {}  # pod -> (received, object, time)
    for where, event, key in events:
        if event["verb"] != "create" or event["objectRef"].get("subresource"):
            continue
        pod = event.get("responseObject") or event.get("requestObject")
        if not isinstance(pod, dict):
            raise HistoryError(f"{where}: pod create without a request or response object: expected an audit "
                               "policy of level Request or RequestResponse for pods")
        name = (pod.get("metadata") or {}).get("name") or key[1]
        stamp = event.get("stageTimestamp") or event.get("requestReceivedTimestamp")
        received = event.get("requestReceivedTimestamp") or stamp
        creates.setdefault((key[0] or str((pod.get("metadata") or {}).get("namespace") or ""), name), []).append(
            (_time(received, where) if received else -math.inf, pod, _time(stamp, where) if stamp else None))
    out, skipped = [], 0
    bound_at: dict[tuple[str, str], int] = {}  # pod -> its latest binding's index in out
    for where, event, key in events:
        subresource = event["objectRef"].get("subresource")
        stamp = event.get("stageTimestamp") or event.get("requestReceivedTimestamp")
        if event["verb"] == "delete":
            k = bound_at.pop(key, None) if not subresource else None
            if k is not None:
                out[k] = dataclasses.replace(out[k], left_s=_time(stamp, where))
        elif subresource == "binding":
            target = ((event.get("requestObject") or {}).get("target") or {}).get("name")
            if not target:
                raise HistoryError(f"{where}: binding without requestObject.target.name: expected an audit policy "
                                   "of level Request or RequestResponse for pods/binding")
            t = _time(stamp, where)
            made = [c for c in creates.get(key, ()) if c[0] <= t]
            if not made:
                skipped += 1
                continue
            _, pod, created_s = max(made, key=lambda c: c[0])
            bound_at[key] = len(out)
            out.append(_binding(pod, target, t, where, created_s=created_s))
    out.sort(key=lambda b: b.time_s)
    return out, skipped


def read_pod_list(source: str, token: str | None = None, timeout_s: float = 30.0, ca_file=None) -> dict:
    """A v1.PodList from a file, or from an API server URL (``https://host:6443/api/v1/pods``), with a
    bearer ``token`` and the server's CA certificate ``ca_file`` (default: the system's)."""
    if source.startswith(("http://", "https://")):
        import ssl

        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
        request = urllib.request.Request(source, headers={"Accept": "application/json",
                                                          **({"Authorization": f"Bearer {token}"} if token else {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
            raise HistoryError(f"pod list {source}: {exc}") from None
    try:
        return json.loads(Path(source).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HistoryError(f"pod list {source}: not found: expected `kubectl get pods -A -o json` output") from None
    except json.JSONDecodeError as exc:
        raise HistoryError(f"pod list {source}: not JSON ({exc})") from None


class MetricsHistory:
    """The engine's queries over a past span, as range queries; ``snapshot_at(t)`` the snapshot of each
    series' latest point at or before t. ``names``: only those queries (``snapshot_at`` needs them all)."""

    def __init__(self, source: PrometheusSource, start_s: float, end_s: float, step_s: float = DEFAULT_STEP_S,
                 names: tuple[str, ...] | None = None):
        if not step_s > 0:
            raise ValueError(f"step_s={step_s!r}: expected seconds > 0")
        self.source, self.step_s = source, step_s
        self.series: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        for name, query in source.queries.items():
            if names is not None and name not in names:
                continue
            points: dict[str, list] = {}
            lo = start_s
            while lo <= end_s:
                hi = min(end_s, lo + step_s * (MAX_POINTS - 1))
                for series in self._range(name, query, lo, hi, step_s):
                    key = "" if name == "oom_kills_5m" else source.node_of(series["metric"])
                    if name == "oom_kills_5m" or key:
                        points.setdefault(key, []).extend(series["values"])
                lo = hi + step_s
            self.series[name] = {k: (np.array([float(t) for t, _ in v]), np.array([float(x) for _, x in v]))
                                 for k, v in points.items()}

    def _range(self, name: str, query: str, start_s: float, end_s: float, step_s: float) -> list:
        return api_result(self.source.url, "query_range", {"query": query, "start": f"{start_s:.3f}",
                                                          "end": f"{end_s:.3f}", "step": f"{step_s:g}"},
                          self.source.timeout_s, f"range query {name}")

    @staticmethod
    def _at(times: np.ndarray, values: np.ndarray, t: float) -> float:
        i = int(np.searchsorted(times, t, side="right")) - 1
        return float(values[i]) if i >= 0 else math.nan

    def overload_hours(self, node: str, start_s: float, end_s: float, util: float) -> float | None:
        """Hours of ``[start_s, end_s)`` that ``node``'s CPU was above ``util`` of its cores: its
        ``cpu_busy_cores`` points in the span over the ``cpu_cores`` of their time, a step each (a missing
        point is not over); None for a node without both series."""
        busy, cores = self.series["cpu_busy_cores"].get(node), self.series["cpu_cores"].get(node)
        if busy is None or cores is None:
            return None
        times, values = busy
        within = (times >= start_s) & (times < end_s)
        limit = np.array([self._at(*cores, t) for t in times[within]]) * util
        return int(np.count_nonzero(values[within] > limit)) * self.step_s / 3600.0

    def snapshot_at(self, t: float):
        values: dict = {}
        for name, by_node in self.series.items():
            if name == "oom_kills_5m":
                v = self._at(*by_node[""], t) if "" in by_node else math.nan
                values[name] = 0.0 if math.isnan(v) else v
            else:
                at = {node: self._at(times, vals, t) for node, (times, vals) in by_node.items()}
                values[name] = {node: v for node, v in at.items() if not math.isnan(v)}
        return snapshot_from_values(values, self.source.disk_gib, self.source.rdma_pct, t)


CPU_QUERIES = ("cpu_cores", "cpu_busy_cores")
"""The queries a pod's overload hours read."""


def check_overload_util(util: float) -> None:
    """Refuse an overload threshold that is not a share of a node's CPU, before any query runs."""
    if not 0.0 < util <= 1.0:
        raise ValueError(f"overload_util={util!r}: expected a share of the node's CPU in (0, 1]")


def fill_overload_hours(rows: list[dict], metrics: MetricsHistory, end_s: float, util: float) -> int:
    """Set ``outcome_overload_h`` of each row with a chosen node: the hours its node's CPU was above ``util``
    (``MetricsHistory.overload_hours``) from the decision to its departure (``outcome_left_s``), or to
    ``end_s`` for a pod still there. The rows that got a value."""
    known = 0
    for row in rows:
        if row["chosen_node"] is None:
            continue
        left = row["outcome_left_s"]
        row["outcome_overload_h"] = metrics.overload_hours(row["chosen_node"], row["time_s"],
                                                           end_s if left is None else left, util)
        known += row["outcome_overload_h"] is not None
    return known


def overload_from_prometheus(rows: list[dict], prometheus_url: str, step_s: float = DEFAULT_STEP_S,
                             queries: dict[str, str] | None = None, node_label: str = "",
                             node_names: dict | None = None,
                             overload_util: float = RewardConfig().overload_util) -> int:
    """``fill_overload_hours`` of history rows (the engine's decision log, ``lifecycle.engine_log``) from the
    CPU range queries of ``prometheus_url`` over the rows' span, to the latest departure. The rows that got a
    value."""
    check_overload_util(overload_util)
    bound = [r for r in rows if r["chosen_node"] is not None]
    if not bound:
        return 0
    start_s = min(r["time_s"] for r in bound)
    end_s = max(max(r["time_s"], r["outcome_left_s"] or r["time_s"]) for r in bound)
    state = ShadowState(lambda: end_s, Staleness(60.0, "fail-open"))
    source = PrometheusSource(prometheus_url, state, dict(queries or DEFAULT_QUERIES), node_label=node_label,
                              node_names=dict(node_names or {}))
    metrics = MetricsHistory(source, start_s - step_s, end_s, step_s, names=CPU_QUERIES)
    return fill_overload_hours(rows, metrics, end_s, overload_util)


def import_history(pod_list, prometheus_url: str, out, step_s: float = DEFAULT_STEP_S, max_age_s: float = 60.0,
                   queries: dict[str, str] | None = None, node_label: str = "", node_names: dict | None = None,
                   progress: Callable[[str], None] | None = None, audit_log=None,
                   overload_util: float = RewardConfig().overload_util,
                   candidates: int | None = None) -> tuple[Path, dict]:
    """Rebuild the decisions of ``pod_list`` (a v1.PodList), or of the API server audit log ``audit_log``
    (``pod_list`` None), on the metrics of ``prometheus_url`` and write them to the Parquet file ``out``,
    each with at most ``candidates`` of its candidates (``history.HistoryWriter``; None: its default): (the
    file, counts).
    ``overload_util``: the CPU share above which a node counts as overloaded (``outcome_overload_h``)."""
    check_overload_util(overload_util)
    candidates = check_candidates(DEFAULT_CANDIDATES if candidates is None else candidates)
    say = progress or (lambda line: None)
    bindings, skipped = bindings_from_pod_list(pod_list) if audit_log is None else bindings_from_audit_log(audit_log)
    if not bindings:
        raise HistoryError(f"{'pod list' if audit_log is None else f'audit log {audit_log}'}: no binding to import "
                           f"({skipped} skipped)")
    start_s = bindings[0].time_s
    end_s = max([bindings[-1].time_s, *(b.left_s for b in bindings if b.left_s is not None)])
    clock = [start_s]
    state = ShadowState(lambda: clock[0], Staleness(max_age_s, "fail-open"))
    source = PrometheusSource(prometheus_url, state, dict(queries or DEFAULT_QUERIES), node_label=node_label,
                              node_names=dict(node_names or {}))
    t0 = time.perf_counter()
    metrics = MetricsHistory(source, start_s - step_s, end_s, step_s)
    say(f"{len(bindings):,} bindings from {start_s:.0f} to {bindings[-1].time_s:.0f} (Unix s); metrics to the "
        f"latest departure, {end_s:.0f}, read in "
        f"{time.perf_counter() - t0:.1f} s")
    counts = {"bindings": len(bindings), "pods_skipped": skipped, "no_metrics": 0}
    with tempfile.TemporaryDirectory(prefix="td3sched-import-") as tmp:
        log = DecisionLog(Path(tmp) / "decisions.jsonl", fsync_interval_s=60.0)
        service = EngineService(DecisionEngine(state, ModelSlot(None)), log)
        schedulers, lefts, kills, waits = {}, {}, {}, {}
        state.set_requested({})
        departing: list[tuple[float, int, str, np.ndarray]] = []  # a heap: (left, order, node, requests)
        for k, b in enumerate(bindings):
            while departing and departing[0][0] <= b.time_s:
                _, _, node, req = heapq.heappop(departing)
                state.add_requested(node, -req)
            clock[0] = b.time_s
            snap = metrics.snapshot_at(b.time_s)
            if snap.size == 0:
                counts["no_metrics"] += 1
                continue
            state.publish(snap)
            decision_id, _ = service.score_nodes(b.pod, None)
            schedulers[decision_id] = b.scheduler
            lefts[decision_id] = b.left_s
            kills[decision_id] = b.kills
            waits[decision_id] = b.wait_s
            req = requested_row(b.pod.request(b.time_s))
            state.add_requested(b.node, req)
            if b.left_s is not None:
                heapq.heappush(departing, (b.left_s, k, b.node, req))
            if b.node in snap.index:
                service.report_binding(b.pod, b.node, decision_id)
            else:  # a node without metrics: the binding is logged, the assign cache cannot hold it
                log.append({"kind": "binding", "time_s": b.time_s, "decision_id": decision_id,
                            "pod": {"name": b.pod.name, "namespace": b.pod.namespace}, "node": b.node})
            if (k + 1) % 1000 == 0:
                say(f"{k + 1:,} of {len(bindings):,} bindings replayed")
        log.close()
        rows, log_counts = decisions_from_log(Path(tmp) / "decisions.jsonl")
    for row in rows:
        d = row["decision_id"]
        left = lefts[d]
        row.update(source="import", policy=f"cluster:{schedulers[d]}", model_version=None,
                   action=None, weights=None, tau=None, outcome_left_s=left,
                   outcome=None if left is None else "departure", outcome_kills=kills[d], wait_s=waits[d])
    fill_overload_hours(rows, metrics, end_s, overload_util)
    counts.update(decisions=log_counts["decisions"], bound=log_counts["bound"],
                  departures=sum(left is not None for left in lefts.values()),
                  kills_known=sum(k is not None for k in kills.values()))
    return write_history(out, rows, candidates), counts
