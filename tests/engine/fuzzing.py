"""Generated requests for the engine's front doors and the contract every answer must keep: the
tests run a few hundred (CI), the benchmark (``benchmarks/bench_engine.py --fuzz``) 100,000.

    gRPC ScoreNodes   any pod fields (NaN, infinities, negative, any QoS value, any GPU count) and
                      candidate lists (known, unknown, empty, duplicate names): OK with a score
                      0-100 per candidate in their order, or INVALID_ARGUMENT with a message
    HTTP extender     any JSON in ExtenderArgs' fields, the real v1.Pod and v1.NodeList with any
                      part replaced, and raw bytes: 200, or 400 with the ``Error`` naming the field

Anything else (another status, no answer within the deadline, a dropped connection) is a crash.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import grpc
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from td3sched.engine.v1 import engine_pb2

FIXTURES = Path(__file__).parent / "fixtures"
POD = json.loads((FIXTURES / "pod.json").read_text())
NODES = json.loads((FIXTURES / "nodelist.json").read_text())
DEADLINE_S = 10.0

NUMBER = st.floats(allow_nan=True, allow_infinity=True, width=64)
NODE_NAMES = [f"node-{i}" for i in range(22)] + ["", "x"]
SCORE_NODES = st.builds(
    lambda name, cpu, mem, qos, gpus, gpu_milli, candidates: engine_pb2.ScoreNodesRequest(
        pod=engine_pb2.Pod(name=name, cpu_milli=cpu, mem_mib=mem, qos=qos, gpu_count=gpus, gpu_milli=gpu_milli),
        candidates=candidates),
    name=st.text(max_size=6), cpu=NUMBER, mem=NUMBER, qos=st.integers(0, 3), gpus=st.integers(0, 8),
    gpu_milli=st.integers(0, 5000), candidates=st.lists(st.sampled_from(NODE_NAMES), max_size=30))

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
EXTENDER_NAMES = ["node-0", "node-1", "node-2", "x", ""]
EXTENDER_ARGS = st.fixed_dictionaries({}, optional={
    "Pod": st.one_of(JSON, st.just(POD), st.builds(lambda spec: {**POD, "spec": spec}, JSON)),
    "Nodes": st.one_of(JSON, st.just(NODES), st.builds(lambda items: {"items": items}, JSON)),
    "NodeNames": st.one_of(JSON, st.lists(st.sampled_from(EXTENDER_NAMES), max_size=5))})
EXTENDER_BODY = st.one_of(EXTENDER_ARGS.map(lambda args: json.dumps(args).encode()), st.binary(max_size=64))


def check_score_nodes(stub, request) -> None:
    """The ScoreNodes contract for one request (AssertionError otherwise)."""
    try:
        reply = stub.ScoreNodes(request, timeout=DEADLINE_S)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT and exc.details(), (exc.code(), exc.details())
        return
    assert [s.node for s in reply.scores] == list(request.candidates)
    assert all(0 <= s.score <= 100 for s in reply.scores)


def check_extender(port: int, path: str, body: bytes) -> None:
    """The extender contract for one POST (AssertionError otherwise)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
    finally:
        conn.close()
    assert resp.status in (200, 400), (resp.status, payload[:200])
    result = json.loads(payload)
    if resp.status == 400:
        assert isinstance(result, dict) and result["Error"], result


def fuzz_settings(examples: int):
    """Generate only (no shrinking replay database): a bounded number of fresh examples."""
    return settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


def fuzz_score_nodes(stub, examples: int) -> int:
    """``examples`` generated ScoreNodes requests through ``check_score_nodes``; the number sent."""
    sent = [0]

    @fuzz_settings(examples)
    @given(request=SCORE_NODES)
    def run(request):
        sent[0] += 1
        check_score_nodes(stub, request)

    run()
    return sent[0]


def fuzz_extender(port: int, examples: int) -> int:
    """``examples`` generated extender POSTs through ``check_extender``; the number sent."""
    sent = [0]

    @fuzz_settings(examples)
    @given(body=EXTENDER_BODY, path=st.sampled_from(["/filter", "/prioritize"]))
    def run(body, path):
        sent[0] += 1
        check_extender(port, path, body)

    run()
    return sent[0]
