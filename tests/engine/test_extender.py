"""The HTTP extender on a real server on 127.0.0.1, with request bodies as kube-scheduler marshals
``extenderv1.ExtenderArgs`` (Go field names on the wire; a full v1.Pod and v1.NodeList as the API
server serves them), in both nodeCacheCapable modes; malformed input gets a 4xx naming the field."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from td3sched.engine.decision import PodSpec
from td3sched.engine.extender import ExtenderFrontDoor
from td3sched.engine.kubernetes_objects import parse_quantity, pod_from_k8s, pod_to_k8s

from tests.engine.conftest import make_service, snapshot
from tests.engine.fuzzing import fuzz_extender

FIXTURES = Path(__file__).parent / "fixtures"
POD = json.loads((FIXTURES / "pod.json").read_text())
NODES = json.loads((FIXTURES / "nodelist.json").read_text())
NAMES = ["node-0", "node-1", "node-2"]
FILTER_RESULT_FIELDS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
TIMEOUT_S = 10.0


class Extender:
    def __init__(self, service, **kw):
        self.service = service
        self.door = ExtenderFrontDoor(service, "127.0.0.1", 0, **kw)

    def call(self, method: str, path: str, body=None, raw: bytes | None = None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.door.port, timeout=TIMEOUT_S)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        try:
            return resp.status, json.loads(payload)
        except json.JSONDecodeError:
            return resp.status, payload.decode()


@pytest.fixture
def extender(actor):
    service, _ = make_service(actor, snapshot(3, cpu_util=[0.95, 0.4, 0.2]))
    ext = Extender(service, read_timeout_s=1.0, max_body_bytes=1 << 20)
    yield ext
    ext.door.stop()


def test_the_pod_reads_as_node_resources_fit_counts_it():
    pod = pod_from_k8s(POD)
    assert pod.name == "web-7d9f8b6c5-x2k4q" and pod.namespace == "shop"
    assert pod.cpu_milli == 600 and pod.mem_mib == 576 and pod.disk_gib == 2  # containers' sum beats the init one
    assert pod.qos == 1 and pod.cpu_limit_milli == pod.mem_limit_mib == float("inf")  # the sidecar has no limits
    one = pod_from_k8s({**POD, "spec": {**POD["spec"], "containers": POD["spec"]["containers"][:1]}})
    assert one.cpu_limit_milli == 1000 and one.mem_limit_mib == 1024
    assert parse_quantity("65851340Ki", "q") == 65851340 * 1024 and parse_quantity("1e3", "q") == 1000
    assert parse_quantity("1.5", "q") == 1.5 and parse_quantity("100m", "q") == pytest.approx(0.1)


def test_filter_node_cache_capable_returns_node_names_and_names_the_reason(extender):
    status, result = extender.call("POST", "/filter", {"Pod": POD, "Nodes": None, "NodeNames": NAMES})
    assert status == 200 and set(result) == FILTER_RESULT_FIELDS
    assert result["NodeNames"] == ["node-1", "node-2"] and result["Nodes"] is None
    assert list(result["FailedNodes"]) == ["node-0"] and "observed CPU 95%" in result["FailedNodes"]["node-0"]
    assert result["FailedAndUnresolvableNodes"] == {} and result["Error"] == ""


def test_filter_with_full_node_objects_returns_the_passing_node_objects(extender):
    status, result = extender.call("POST", "/filter", {"Pod": POD, "Nodes": NODES, "NodeNames": None})
    assert status == 200 and set(result) == FILTER_RESULT_FIELDS and result["NodeNames"] is None
    assert result["Nodes"]["kind"] == "NodeList"
    assert result["Nodes"]["items"] == NODES["items"][1:]  # the objects themselves, untouched
    assert list(result["FailedNodes"]) == ["node-0"]


@pytest.mark.parametrize("cache_capable", [True, False])
def test_prioritize_scores_0_to_10_from_the_engines_decision(extender, cache_capable):
    args = {"Pod": POD, "Nodes": None, "NodeNames": NAMES} if cache_capable else {"Pod": POD, "Nodes": NODES,
                                                                                   "NodeNames": None}
    status, result = extender.call("POST", "/prioritize", args)
    assert status == 200 and [h["Host"] for h in result] == NAMES
    assert all(set(h) == {"Host", "Score"} and isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in result)
    _, d = extender.service.score_nodes(pod_from_k8s(POD), NAMES)
    assert [h["Score"] for h in result] == [int(round(10 * s)) for s in d.scores]


def test_prioritize_answers_the_best_node_alone_at_the_top(tmp_path):
    """Rounded to 0-10, nodes within a tenth of the best would tie with it and kube-scheduler would pick
    among them at random: the answer keeps the best alone at the top, a node that rounds to it a level below."""
    from td3sched.rl.onnx_actor import load_actor
    from td3sched.rl.static_model import write_static_model

    actor = load_actor(write_static_model("static-weights:w=1/0/0/0:tau=0", tmp_path / "idle", "tiny"))
    service, _ = make_service(actor, snapshot(3, cpu_util=[0.3, 0.31, 0.6]))
    ext = Extender(service)
    try:
        status, result = ext.call("POST", "/prioritize", {"Pod": POD, "Nodes": None, "NodeNames": NAMES})
    finally:
        ext.door.stop()
    _, d = service.score_nodes(pod_from_k8s(POD), NAMES, api="prioritize")
    rounded = [int(round(10 * s)) for s in d.scores]
    assert status == 200 and rounded[0] == rounded[1] > rounded[2] and d.scores[0] > d.scores[1]
    assert [h["Score"] for h in result] == [rounded[0], rounded[0] - 1, rounded[2]]


def test_shadow_mode_answers_neutral_scores_but_logs_the_decision(actor):
    service, _ = make_service(actor, snapshot(3), shadow=True)
    ext = Extender(service)
    try:
        status, result = ext.call("POST", "/prioritize", {"Pod": POD, "Nodes": None, "NodeNames": NAMES})
    finally:
        ext.door.stop()
    assert status == 200 and {h["Score"] for h in result} == {5}
    assert service.metrics.decisions.labels("shadow", actor.version)._value.get() == 1


@pytest.mark.parametrize("raw, field", [
    (b"{not json", "body: not JSON"),
    (b"[1, 2]", "expected an ExtenderArgs object"),
    (json.dumps({"Pod": POD, "Nodes": None, "NodeNames": None}).encode(), "both null"),
    (json.dumps({"Pod": POD, "NodeNames": "node-0"}).encode(), "NodeNames"),
    (json.dumps({"Pod": POD, "Nodes": {"items": 5}}).encode(), "Nodes.items"),
    (json.dumps({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}).encode(), "Nodes.items[0].metadata.name"),
    (json.dumps({"Pod": "web", "NodeNames": NAMES}).encode(), "Pod: expected an object"),
    (json.dumps({"Pod": {**POD, "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}},
                 "NodeNames": NAMES}).encode(), "Pod.spec.containers[0].resources.requests.cpu"),
    (json.dumps({"pod": POD, "NodeNames": NAMES}).encode(), "unknown fields ['pod']"),
])
def test_malformed_requests_get_400_naming_the_field(extender, raw, field):
    for path in ("/filter", "/prioritize"):
        status, result = extender.call("POST", path, raw=raw)
        assert status == 400 and field in result["Error"], result


def test_an_empty_candidate_list_is_answered_empty(extender):
    status, result = extender.call("POST", "/filter", {"Pod": POD, "Nodes": None, "NodeNames": []})
    assert status == 200 and result["NodeNames"] == [] and result["FailedNodes"] == {}
    status, result = extender.call("POST", "/prioritize", {"Pod": POD, "Nodes": None, "NodeNames": []})
    assert status == 200 and result == []


def test_unknown_nodes_pass_the_filter_fail_open_and_score_neutral(extender):
    status, result = extender.call("POST", "/prioritize", {"Pod": POD, "Nodes": None, "NodeNames": ["node-1", "new"]})
    assert status == 200 and result[1] == {"Host": "new", "Score": 5}


def test_huge_bodies_and_missing_lengths_are_refused(extender):
    with socket.create_connection(("127.0.0.1", extender.door.port), timeout=TIMEOUT_S) as s:
        # refused by its declared length, before the body is read (a client still sending it would get
        # a broken pipe when the server closes: the test sends headers alone)
        s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % ((1 << 20) + 1))
        reply = b""
        while chunk := s.recv(500):  # the server closes the connection after its answer
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 413") and b"at most" in reply
    with socket.create_connection(("127.0.0.1", extender.door.port), timeout=TIMEOUT_S) as s:
        s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(200).startswith(b"HTTP/1.1 411")


def test_a_stalled_client_is_dropped_while_others_are_served(extender):
    with socket.create_connection(("127.0.0.1", extender.door.port), timeout=TIMEOUT_S) as slow:
        slow.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"Pod\":")
        status, _ = extender.call("POST", "/filter", {"Pod": POD, "Nodes": None, "NodeNames": NAMES})
        assert status == 200
        assert slow.recv(100) == b""  # closed by the server's read timeout, not by us


def test_health_readiness_and_metrics(actor):
    service, _ = make_service(actor)
    ext = Extender(service)
    try:
        assert ext.call("GET", "/healthz")[0] == 200
        assert ext.call("GET", "/readyz")[0] == 503
        status, result = ext.call("POST", "/prioritize", {"Pod": POD, "NodeNames": NAMES})
        assert status == 503 and "no node metrics" in result["Error"]
        service.engine.state.publish(snapshot(3))
        assert ext.call("GET", "/readyz")[0] == 200
        ext.call("POST", "/prioritize", {"Pod": POD, "NodeNames": NAMES})
        status, text = ext.call("GET", "/metrics")
    finally:
        ext.door.stop()
    assert status == 200
    for line in (f'td3sched_decisions_total{{outcome="model",version="{actor.version}"}} 1.0',
                 'td3sched_requests_rejected_total{api="prioritize",code="503"} 1.0',
                 f'td3sched_model_info{{version="{actor.version}"}} 1.0',
                 'td3sched_decision_latency_seconds_count{api="prioritize"} 1.0'):
        assert line in text, line


def test_fuzzed_requests_get_an_answer_never_a_crash(extender):
    """A few hundred generated bodies (the benchmark sends 100,000): 200 or 400 naming the field."""
    assert fuzz_extender(extender.door.port, 300) > 100
    assert extender.call("POST", "/prioritize", {"Pod": POD, "NodeNames": NAMES})[0] == 200


def test_the_extender_sends_without_nagles_delay():
    """kube-scheduler keeps its connection to the extender alive; headers and body leave in two
    writes, and with Nagle's algorithm the body waited for the client's delayed ACK, ~40 ms a call
    (found by benchmarks/bench_k8s.py: 10 pods/s through the extender). Its time is measured there;
    here, that the server's connections switch Nagle off."""
    from td3sched.engine.extender import ExtenderHandler

    assert ExtenderHandler.disable_nagle_algorithm is True


def test_stale_nodes_are_counted_across_the_whole_state_as_they_age(actor):
    """td3sched_state_stale_nodes counts every node of the state whose metrics are stale or missing,
    at scrape time; td3sched_stale_nodes only the last decision's candidates."""
    from td3sched.engine.state import NodeSnapshot

    base = snapshot(6, age_s=[0, 0, 500, 0, 30, 0])
    observed = base.observed.copy()
    observed[5, 2] = float("nan")  # a metric missing
    snap = NodeSnapshot(base.names, base.allocatable, base.capacity_usage, observed, base.scraped_at_s,
                        taken_at_s=base.taken_at_s)
    service, clock = make_service(actor, snap, max_age_s=60)
    ext = Extender(service)
    try:
        ext.call("POST", "/prioritize", {"Pod": POD, "NodeNames": ["node-0", "node-1"]})
        _, before = ext.call("GET", "/metrics")
        clock.t += 45  # node-4's metrics (30 s old) pass 60 s; no refresh, no decision in between
        _, after = ext.call("GET", "/metrics")
    finally:
        ext.door.stop()
    assert "td3sched_stale_nodes 0.0" in before and "td3sched_state_nodes 6.0" in before
    assert "td3sched_state_stale_nodes 2.0" in before  # node-2 (500 s), node-5 (NaN)
    assert "td3sched_state_stale_nodes 3.0" in after and "td3sched_stale_nodes 0.0" in after


AMOUNT = st.floats(0, 1e9, allow_nan=False, allow_infinity=False, allow_subnormal=True)


@settings(max_examples=300, deadline=None)
@given(cpu=AMOUNT, mem=AMOUNT, disk=AMOUNT, rdma=st.floats(0, 800), qos=st.integers(0, 2),
       cpu_limit=st.one_of(st.just(float("inf")), AMOUNT), mem_limit=st.one_of(st.just(float("inf")), AMOUNT),
       gpus=st.integers(0, 8))
def test_a_pod_read_back_from_its_v1_pod_asks_exactly_the_same(cpu, mem, disk, rdma, qos, cpu_limit, mem_limit, gpus):
    """Quantities are written as exact decimals and read exactly, rounded once: the twin's extender
    path asks the engine what the pod asks, to the bit."""
    pod = PodSpec("p", cpu, mem, disk, rdma, gpu_count=gpus, gpu_milli=1000 if gpus else 0, qos=qos,
                  cpu_limit_milli=cpu_limit, mem_limit_mib=mem_limit, namespace="ns")
    back = pod_from_k8s(json.loads(json.dumps(pod_to_k8s(pod))))
    assert back == pod
