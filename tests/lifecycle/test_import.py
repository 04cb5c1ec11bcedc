"""import-history against a real Prometheus (the engine's test harness) with recorded series: the
decisions rebuilt from a v1.PodList see each node's metrics as they were at the pod's bind time (a
node's load changes mid-way; decisions before and after the change see the old and the new value),
the chosen node is the one the pod was bound to, the features are the engine's, and each node's
requests are those of the pods imported before."""

from __future__ import annotations

import datetime
import json
import time

import numpy as np
import pytest

pytest.importorskip("grpc")

from td3sched.engine.prometheus_source import DEFAULT_QUERIES  # noqa: E402
from td3sched.lifecycle.history import Decisions, read_history  # noqa: E402
from td3sched.lifecycle.importer import (bindings_from_audit_log, bindings_from_pod_list, import_history,  # noqa: E402
                                       overload_from_prometheus)

from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode,  # noqa: E402
                                             ensure_prometheus)

QUERIES = {name: q.replace("[1m]", "[5s]") for name, q in DEFAULT_QUERIES.items()}


def _pod(name: str, node: str | None, bound_s: float | None, cpu: str = "500m", mem: str = "256Mi") -> dict:
    status = {"phase": "Running"}
    if bound_s is not None:
        stamp = datetime.datetime.fromtimestamp(bound_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
            "schedulerName": "default-scheduler"}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "shop"}, "spec": spec, "status": status}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Prometheus scraping four nodes every second for ~30 s; node-a's CPU goes from 50% to 20% busy
    at ``change_s``; node-d's is 90% busy throughout (over the objective's 85%). Yields (url, change_s,
    end_s, nodes)."""
    binary = ensure_prometheus()
    nodes = {"node-a": SimulatedNode("node-a", 4, 0.5, 16, 0.25), "node-b": SimulatedNode("node-b", 8, 0.25, 32, 0.5),
             "node-c": SimulatedNode("node-c", 2, 0.3, 8, 0.4), "node-d": SimulatedNode("node-d", 2, 0.9, 8, 0.4)}
    exporter = NodeExporterStub(list(nodes.values()))
    prom = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{exporter.port}")
    prom.start()
    time.sleep(16)
    # the counters keep their history: from now on node-a's idle counter grows at 80% a core, not 50%
    a = nodes["node-a"]
    change_s = time.time()
    base = exporter.started
    old_exposition = a.exposition

    def changed(elapsed_s, stamp_ms):
        before = change_s - base
        if elapsed_s <= before:
            return old_exposition(elapsed_s, stamp_ms)
        a.cpu_busy = 0.5
        idle = (1 - 0.5) * before + (1 - 0.2) * (elapsed_s - before)
        busy = 0.5 * before + 0.2 * (elapsed_s - before)
        text = old_exposition(elapsed_s, stamp_ms)
        lines = []
        for line in text.splitlines():
            if line.startswith("node_cpu_seconds_total") and 'mode="idle"' in line:
                line = line.rsplit(" ", 2)[0] + f" {idle:.6f} {stamp_ms}"
            elif line.startswith("node_cpu_seconds_total") and 'mode="user"' in line:
                line = line.rsplit(" ", 2)[0] + f" {busy:.6f} {stamp_ms}"
            lines.append(line)
        return "".join(f"{x}\n" for x in lines)

    a.exposition = changed
    time.sleep(14)
    yield prom.url, change_s, time.time(), nodes
    prom.stop()
    exporter.stop()


def test_imported_decisions_see_the_metrics_of_their_bind_time(recorded, tmp_path):
    url, change_s, end_s, nodes = recorded
    before = [int(change_s) - 3, int(change_s) - 2]          # the 5 s rate window all before the change
    after = [int(change_s) + 8, int(change_s) + 10]          # ... all after it
    pods = [_pod(f"web-{i}", "node-c", t) for i, t in enumerate(before + after)]
    # kills: web-0 says nothing; web-1 restarted once after an OOM kill; web-2 three times; web-3 never
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    pods[1]["status"]["containerStatuses"] = [{"name": "c", "restartCount": 1, "lastState": oom}]
    pods[2]["status"]["containerStatuses"] = [{"name": "c", "restartCount": 3, "lastState": oom}]
    pods[3]["status"]["containerStatuses"] = [{"name": "c", "restartCount": 0}]
    pods += [_pod("pending", None, None), _pod("unscheduled", "node-b", None)]
    path, counts = import_history({"items": pods}, url, tmp_path / "import.parquet", step_s=1.0, queries=QUERIES)
    assert counts["bindings"] == 4 and counts["pods_skipped"] == 2 and counts["bound"] == 4
    assert counts["kills_known"] == 2
    rows = read_history(path).to_pylist()
    assert [r["pod_name"] for r in rows] == ["web-0", "web-1", "web-2", "web-3"]
    assert [r["outcome_kills"] for r in rows] == [None, 1, None, 0]
    assert [r["wait_s"] for r in rows] == [None] * 4  # these pods carry no creationTimestamp
    for r, t in zip(rows, before + after):
        assert r["source"] == "import" and r["policy"] == "cluster:default-scheduler" and r["time_s"] == t
        assert r["chosen_node"] == "node-c" and r["model_version"] is None and r["weights"] is None
        assert sorted(c["node"] for c in r["candidates"]) == ["node-a", "node-b", "node-c", "node-d"]
        assert r["cpu_milli"] == 500 and r["mem_mib"] == 256 and len(r["observation"]) == 35
    u_a = [next(c for c in r["candidates"] if c["node"] == "node-a")["u_cpu"] for r in rows]
    request = 500 / 4000  # the pod's CPU request over node-a's 4 cores (nothing was bound there)
    # rate() over scrapes a busy machine may delay: within 1e-3 of the exporter's rates (measured: 2e-5)
    np.testing.assert_allclose(np.array(u_a) - request, [0.5, 0.5, 0.2, 0.2], atol=1e-3)
    u_b = [next(c for c in r["candidates"] if c["node"] == "node-b")["u_mem"] for r in rows]
    np.testing.assert_allclose(np.array(u_b) - 256 / (32 * 1024), 0.5, atol=1e-6)
    assert Decisions.from_table(read_history(path)).chosen.tolist() == [2, 2, 2, 2]  # node-c, names sorted
    # each node's requests: the imported pods bound there before, with the pod (node-c: 2 cores, 8 GiB)
    r_c = [next((c["r_cpu"], c["r_mem"]) for c in r["candidates"] if c["node"] == "node-c") for r in rows]
    np.testing.assert_allclose(r_c, [(500 * (i + 1) / 2000, 256 * (i + 1) / 8192) for i in range(4)])
    r_a = {next((c["r_cpu"], c["r_mem"]) for c in r["candidates"] if c["node"] == "node-a") for r in rows}
    assert r_a == {(500 / 4000, 256 / 16384)}
    Decisions.from_table(read_history(path)).require_requests()


def test_a_pods_overload_hours_are_its_nodes_steps_over_the_threshold_while_it_was_there(recorded, tmp_path):
    """``outcome_overload_h``: the steps (1 s) of the pod's stay at which its node's CPU was over 85% busy:
    every step on node-d (90%), none on node-c (30%); a pod still running counts to the latest departure."""
    url, change_s, _, _ = recorded
    t0 = int(change_s) - 3  # as the first test's: Prometheus has a 5 s rate window of node-d by then
    pods = [_pod("hot-0", "node-d", t0), _pod("cool-0", "node-c", t0), _pod("hot-1", "node-d", t0 + 2)]
    for pod in pods[:2]:
        pod["metadata"]["deletionTimestamp"] = _stamp(t0 + 6)
    path, counts = import_history({"items": pods}, url, tmp_path / "import.parquet", step_s=1.0, queries=QUERIES)
    assert counts["bound"] == 3
    rows = {r["pod_name"]: r for r in read_history(path).to_pylist()}
    # one point a step from the binding to the departure: 6 s and 4 s; a scrape a busy machine delayed past the
    # 5 s rate window would leave a point out (not over)
    assert rows["hot-0"]["outcome_overload_h"] == pytest.approx(6 / 3600, abs=1 / 3600)
    assert rows["hot-1"]["outcome_overload_h"] == pytest.approx(4 / 3600, abs=1 / 3600)
    assert rows["cool-0"]["outcome_overload_h"] == 0.0
    with pytest.raises(ValueError, match=r"overload_util=1.5: expected a share of the node's CPU in \(0, 1\]"):
        import_history({"items": pods}, url, tmp_path / "x.parquet", overload_util=1.5)
    # the engine's decision log gets them the same way (history-from-log --prometheus), from the rows alone
    again = [{**r, "outcome_overload_h": None} for r in rows.values()]
    again.append({**again[0], "chosen_node": None})  # a decision never bound: nothing to count
    assert overload_from_prometheus(again, url, 1.0, queries=QUERIES) == 3
    assert [r["outcome_overload_h"] for r in again] == [r["outcome_overload_h"] for r in rows.values()] + [None]
    with pytest.raises(ValueError, match=r"prometheus.queries: missing \['cpu_busy_cores'"):
        overload_from_prometheus(again, url, 1.0, queries={"cpu_cores": QUERIES["cpu_cores"]})


def test_a_pod_list_without_items_is_refused():
    from td3sched.lifecycle.history import HistoryError

    with pytest.raises(HistoryError, match=r"expected a v1.PodList"):
        bindings_from_pod_list(json.loads('{"kind": "Pod"}'))


def _stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _audit(verb_ref: dict, t: float, request=None, response=None, code=201, verb: str = "create") -> str:
    """One audit.k8s.io/v1 Event as the API server writes it (level RequestResponse)."""
    event = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "auditID": f"id-{t}",
             "stage": "ResponseComplete", "verb": verb, "user": {"username": "system:kube-scheduler"},
             "objectRef": {"apiVersion": "v1", **verb_ref}, "responseStatus": {"metadata": {}, "code": code},
             "requestReceivedTimestamp": _stamp(t - 0.001), "stageTimestamp": _stamp(t)}
    if request is not None:
        event["requestObject"] = request
    if response is not None:
        event["responseObject"] = response
    return json.dumps(event)


def test_an_audit_log_gives_the_decisions_of_the_same_bindings_as_the_pod_list(recorded, tmp_path):
    url, change_s, _, _ = recorded
    times = [int(change_s) - 3, int(change_s) - 2, int(change_s) + 8]
    lines, listed = [], []
    for i, t in enumerate(times):
        pod = _pod(f"api-{i}", None, None, cpu=f"{100 * (i + 1)}m")
        pod["status"] = {}
        ref = {"resource": "pods", "namespace": "shop", "name": f"api-{i}"}
        lines.append(_audit(ref, t - 1.0, request=pod, response=pod))
        binding = {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": f"api-{i}", "namespace": "shop"},
                   "target": {"kind": "Node", "name": "node-b"}}
        lines.append(_audit({**ref, "subresource": "binding"}, float(t), request=binding))
        listed.append(_pod(f"api-{i}", "node-b", t, cpu=f"{100 * (i + 1)}m"))
        listed[-1]["metadata"]["creationTimestamp"] = _stamp(t - 1.0)  # the audit log's create
    lines.append(_audit({"resource": "pods", "namespace": "shop", "name": "ghost", "subresource": "binding"},
                        float(times[-1]), request={"target": {"name": "node-a"}}))  # its creation is not logged
    lines.append(_audit({"resource": "pods", "namespace": "shop", "name": "api-0", "subresource": "binding"},
                        float(times[-1]), request={"target": {"name": "node-a"}}, code=409))  # a refused binding
    deleted = times[1] + 5  # api-1 is deleted: the audit log's delete, the PodList's deletionTimestamp
    lines.append(_audit({"resource": "pods", "namespace": "shop", "name": "api-1"}, float(deleted), code=200,
                        verb="delete"))
    listed[1]["metadata"]["deletionTimestamp"] = _stamp(deleted)
    log = tmp_path / "audit.log"
    log.write_text("\n".join(lines) + "\n")
    path, counts = import_history(None, url, tmp_path / "audit.parquet", step_s=1.0, queries=QUERIES, audit_log=log)
    assert counts["bindings"] == 3 and counts["pods_skipped"] == 1
    by_audit = read_history(path).to_pylist()
    by_list = read_history(import_history({"items": listed}, url, tmp_path / "list.parquet", step_s=1.0,
                                          queries=QUERIES)[0]).to_pylist()
    drop = ("decision_id",)
    for a, b in zip(by_audit, by_list, strict=True):
        assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
    assert [r["chosen_node"] for r in by_audit] == ["node-b"] * 3
    assert [r["wait_s"] for r in by_audit] == [1.0] * 3  # created a second before the binding
    assert [(r["outcome_left_s"], r["outcome"]) for r in by_audit] == [(None, None), (deleted, "departure"),
                                                                        (None, None)]


def test_an_audit_log_binds_the_pod_created_before_the_binding_wherever_the_create_is_written(tmp_path):
    """An API server writes a create's ResponseComplete event once its response is sent: the scheduler may
    have bound the pod, and the binding's event been written, first. A name used again binds its newer pod."""
    ref = {"resource": "pods", "namespace": "shop", "name": "api"}
    first, second = _pod("api", None, None, cpu="100m"), _pod("api", None, None, cpu="700m")
    binding = {"target": {"kind": "Node", "name": "node-b"}}
    lines = [
        _audit({**ref, "subresource": "binding"}, 100.0, request=binding),  # written before its pod's create
        _audit(ref, 100.5, request=first, response=first),  # received at 100.499, after the binding: not its pod
        _audit(ref, 99.9, request=first, response=first),  # the create the first binding made
        _audit(ref, 200.0, code=200, verb="delete"),
        _audit(ref, 300.0, request=second, response=second),  # the name used again
        _audit({**ref, "subresource": "binding"}, 301.0, request={"target": {"name": "node-a"}}),
    ]
    log = tmp_path / "audit.log"
    log.write_text("\n".join(lines) + "\n")
    bindings, skipped = bindings_from_audit_log(log)
    assert skipped == 0
    assert [(b.node, b.time_s, b.left_s) for b in bindings] == [("node-b", 100.0, 200.0), ("node-a", 301.0, None)]
    assert [round(b.wait_s, 6) for b in bindings] == [0.1, 1.0]
    assert [b.pod.cpu_milli for b in bindings] == [100.0, 700.0]


@pytest.mark.parametrize("statuses, kills", [
    (None, None),
    ([{"name": "c", "restartCount": 0}], 0),
    ([{"name": "c", "restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled"}}}], 1),
    ([{"name": "c", "restartCount": 1, "lastState": {"terminated": {"reason": "Error"}}}], 0),
    ([{"name": "c", "restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled"}}},
      {"name": "sidecar", "restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled"}}}], 2),
    ([{"name": "c", "restartCount": 2, "lastState": {"terminated": {"reason": "OOMKilled"}}}], None),
    ([{"name": "c", "restartCount": 0}, {"name": "sidecar", "restartCount": 5}], None),
    ([{"name": "c", "restartCount": "1"}], None),
])
def test_a_listed_pods_kills_are_read_where_its_statuses_pin_them_down(statuses, kills):
    pod = _pod("web", "node-a", 1000.0)
    if statuses is not None:
        pod["status"]["containerStatuses"] = statuses
    bindings, _ = bindings_from_pod_list({"items": [pod]})
    assert bindings[0].kills == kills


def test_a_finished_pod_left_when_its_last_container_finished():
    pods = [_pod("done", "node-a", 1000.0), _pod("running", "node-a", 1001.0)]
    pods[0]["status"].update(phase="Succeeded", containerStatuses=[
        {"name": "c", "state": {"terminated": {"exitCode": 0, "finishedAt": _stamp(1500.0)}}},
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "finishedAt": _stamp(1510.0)}}}])
    pods[1]["status"]["containerStatuses"] = [{"name": "c", "state": {"running": {"startedAt": _stamp(1002.0)}}}]
    bindings, skipped = bindings_from_pod_list({"items": pods})
    assert skipped == 0 and [(b.pod.name, b.left_s) for b in bindings] == [("done", 1510.0), ("running", None)]
