"""The gRPC front door on a real server on 127.0.0.1: one ScoreNodes call scores every candidate,
bad input is INVALID_ARGUMENT naming the field, no metrics yet is UNAVAILABLE, health follows
readiness, and a drain lets calls in flight finish."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from td3sched.engine.grpc_server import SERVICE_NAME, GrpcFrontDoor
from td3sched.engine.v1 import engine_pb2, engine_pb2_grpc

from tests.engine.conftest import make_service, snapshot
from tests.engine.fuzzing import fuzz_score_nodes

DEADLINE_S = 10.0


@pytest.fixture
def served(actor):
    service, clock = make_service(actor, snapshot(20, age_s=[0] * 19 + [900]))
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{door.port}")
    yield service, engine_pb2_grpc.DecisionEngineStub(channel), channel
    channel.close()
    door.stop(0)


def pod(**kw):
    return engine_pb2.Pod(**{"name": "web-1", "namespace": "default", "cpu_milli": 500, "mem_mib": 512,
                             "qos": engine_pb2.QOS_CLASS_BURSTABLE, **kw})


def test_score_nodes_scores_every_candidate_in_one_call(served, actor):
    service, stub, _ = served
    names = [f"node-{i}" for i in range(20)]
    reply = stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(), candidates=names), timeout=DEADLINE_S)
    assert [s.node for s in reply.scores] == names
    assert all(0 <= s.score <= 100 for s in reply.scores)
    assert reply.scores[19].stale and reply.scores[19].score == 50 and not reply.scores[0].stale
    assert reply.model_version == actor.version and not reply.fallback and not reply.advisory
    assert len(reply.action.pre_activations) == actor.action_size and len(reply.action.weights) == 4
    assert abs(sum(reply.action.weights) - 1) < 1e-9 and reply.action.action_mode == actor.action_mode
    _, direct = service.score_nodes(service_pod(), names)
    assert [s.score for s in reply.scores] == direct.scores_0_100()
    weights = stub.GetSchedulingWeights(engine_pb2.GetSchedulingWeightsRequest(pod=pod()), timeout=DEADLINE_S)
    assert len(weights.action.weights) == 4 and weights.model_version == actor.version
    stub.ReportBinding(engine_pb2.ReportBindingRequest(pod=pod(), node="node-3", decision_id=reply.decision_id),
                       timeout=DEADLINE_S)


def service_pod():
    from td3sched.engine.decision import PodSpec

    return PodSpec("web-1", 500, 512, namespace="default")


@pytest.mark.parametrize("request_, field", [
    (engine_pb2.ScoreNodesRequest(candidates=["node-1"]), "pod: missing"),
    (engine_pb2.ScoreNodesRequest(pod=pod(), candidates=[]), "candidates: empty"),
    (engine_pb2.ScoreNodesRequest(pod=pod(name=""), candidates=["node-1"]), "pod.name"),
    (engine_pb2.ScoreNodesRequest(pod=pod(cpu_milli=float("nan")), candidates=["node-1"]), "pod.cpu_milli"),
    (engine_pb2.ScoreNodesRequest(pod=pod(mem_mib=-5), candidates=["node-1"]), "pod.mem_mib"),
    (engine_pb2.ScoreNodesRequest(pod=pod(), candidates=["node-1", "node-1"]), "candidates: duplicate"),
])
def test_bad_input_is_invalid_argument_naming_the_field(served, request_, field):
    _, stub, _ = served
    with pytest.raises(grpc.RpcError) as err:
        stub.ScoreNodes(request_, timeout=DEADLINE_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()


def test_a_binding_to_an_unknown_node_is_invalid_argument(served):
    _, stub, _ = served
    with pytest.raises(grpc.RpcError) as err:
        stub.ReportBinding(engine_pb2.ReportBindingRequest(pod=pod(), node="ghost"), timeout=DEADLINE_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ghost" in err.value.details()


def test_report_bindings_keeps_the_good_bindings_and_names_the_bad_ones(served):
    """A batch is taken binding by binding, as ReportBinding takes each: a bad one is named by its index
    and field, the others reach the assign cache."""
    service, stub, _ = served
    state = service.engine.state
    before = state.recent_usage(state.snapshot)
    before = 0.0 if before is None else float(before[:, 0].sum())
    reply = stub.ReportBindings(engine_pb2.ReportBindingsRequest(bindings=[
        engine_pb2.ReportBindingRequest(pod=pod(name="a"), node="node-1"),
        engine_pb2.ReportBindingRequest(pod=pod(name="b"), node="ghost"),
        engine_pb2.ReportBindingRequest(pod=pod(name="c"), node=""),
        engine_pb2.ReportBindingRequest(pod=pod(name="d", cpu_milli=250), node="node-2"),
    ]), timeout=DEADLINE_S)
    assert reply.accepted == 2
    assert len(reply.rejected) == 2 and reply.rejected[0].startswith("bindings[1]: ") and "ghost" in reply.rejected[0]
    assert reply.rejected[1].startswith("bindings[2]: node: empty")
    after = float(state.recent_usage(state.snapshot)[:, 0].sum())
    assert after - before == 500 + 250, "the two good bindings' CPU requests are in the assign cache"
    assert stub.ReportBindings(engine_pb2.ReportBindingsRequest(), timeout=DEADLINE_S).accepted == 0


def test_unavailable_and_not_serving_until_the_state_is_filled(actor):
    service, _ = make_service(actor)  # no snapshot
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        stub = engine_pb2_grpc.DecisionEngineStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(), candidates=["node-1"]), timeout=DEADLINE_S)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        check = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
        assert health.Check(check, timeout=DEADLINE_S).status == health_pb2.HealthCheckResponse.NOT_SERVING
        service.engine.state.publish(snapshot(3))
        watch = health.Watch(check, timeout=DEADLINE_S)
        for status in watch:
            if status.status == health_pb2.HealthCheckResponse.SERVING:
                break
        watch.cancel()
        assert stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(), candidates=["node-1"]),
                               timeout=DEADLINE_S).scores[0].node == "node-1"
    door.stop(0)


def test_shadow_mode_marks_answers_advisory(actor):
    service, _ = make_service(actor, snapshot(3), shadow=True)
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        reply = engine_pb2_grpc.DecisionEngineStub(channel).ScoreNodes(
            engine_pb2.ScoreNodesRequest(pod=pod(), candidates=["node-0", "node-1"]), timeout=DEADLINE_S)
    door.stop(0)
    assert reply.advisory
    assert service.metrics.decisions.labels("shadow", reply.model_version)._value.get() == 1


def test_fuzzed_score_nodes_get_an_answer_or_invalid_argument(served):
    """A few hundred generated requests (the benchmark sends 100,000): never a crash."""
    _, stub, _ = served
    assert fuzz_score_nodes(stub, 300) > 100
    assert stub.ScoreNodes(engine_pb2.ScoreNodesRequest(pod=pod(), candidates=["node-1"]), timeout=DEADLINE_S).scores



def test_get_model_sends_the_served_graph_once_and_what_a_scheduler_needs_to_run_it(served, actor):
    from td3sched.rl.card import ONNX_FILE
    from td3sched.rl.observation import OBSERVATION_FIELDS

    _, stub, _ = served
    first = stub.GetModel(engine_pb2.GetModelRequest(), timeout=DEADLINE_S)
    assert first.model_version == actor.version
    assert first.onnx == (Path(actor.folder) / ONNX_FILE).read_bytes()
    assert (first.action_mode, list(first.dimensions)) == (actor.action_mode, list(actor.dimensions))
    assert first.action_hold_s == actor.action_hold_s
    assert list(first.observation_fields) == list(OBSERVATION_FIELDS)
    assert not first.advisory and not first.fail_closed
    assert first.oom_kills_recent == 0.0
    service = served[0]
    service.engine.state.publish(dataclasses.replace(snapshot(20), oom_kills_recent=7.0))
    assert stub.GetModel(engine_pb2.GetModelRequest(), timeout=DEADLINE_S).oom_kills_recent == 7.0  # the state's
    again = stub.GetModel(engine_pb2.GetModelRequest(known_version=actor.version), timeout=DEADLINE_S)
    assert again.model_version == actor.version and again.onnx == b""  # unchanged: no graph
    other = stub.GetModel(engine_pb2.GetModelRequest(known_version="an-older-one"), timeout=DEADLINE_S)
    assert other.onnx == first.onnx
    assert first.typical_pods == ""  # no fragmentation share: no typical pods


def test_get_model_sends_a_fragmentation_model_s_typical_pods():
    """The shipped blend (action mode fragmentation): GetModel sends its card's typical pods, which a
    scheduler running it measures the share with."""
    import json

    from td3sched.metrics.fragmentation import typical_pods_from_json
    from td3sched.rl.card import card_typical_pods
    from td3sched.rl.onnx_actor import load_actor
    from tests.engine.conftest import REPO

    blend = load_actor(REPO / "models" / "static-blend-dlrm-small")
    service, _ = make_service(blend, snapshot(3))
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        reply = engine_pb2_grpc.DecisionEngineStub(channel).GetModel(engine_pb2.GetModelRequest(), timeout=DEADLINE_S)
    door.stop(0)
    assert reply.action_mode == "fragmentation"
    names, typical = typical_pods_from_json(json.loads(reply.typical_pods))
    card_names, card_typical = card_typical_pods(blend.card)
    assert names == card_names and names
    for sent, card in zip(typical.pools, card_typical.pools):
        np.testing.assert_array_equal(sent.request, card.request)
        np.testing.assert_array_equal(sent.weight, card.weight)
        np.testing.assert_array_equal(sent.gpu_milli, card.gpu_milli)


def test_get_model_says_shadow_mode_fail_closed_staleness_and_no_model(actor):
    for kwargs, expected in (({"shadow": True}, (actor.version, True, False)),
                             ({"mode": "fail-closed"}, (actor.version, False, True))):
        service, _ = make_service(actor, snapshot(3), **kwargs)
        door = GrpcFrontDoor(service, "127.0.0.1", 0)
        with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
            reply = engine_pb2_grpc.DecisionEngineStub(channel).GetModel(engine_pb2.GetModelRequest(),
                                                                         timeout=DEADLINE_S)
        door.stop(0)
        assert (reply.model_version, reply.advisory, reply.fail_closed) == expected, kwargs
    service, _ = make_service(None, snapshot(3))
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        reply = engine_pb2_grpc.DecisionEngineStub(channel).GetModel(engine_pb2.GetModelRequest(), timeout=DEADLINE_S)
    door.stop(0)
    assert reply.model_version == "" and reply.onnx == b"" and list(reply.observation_fields)


def test_get_node_metrics_sends_the_sources_snapshot_once_and_says_when_its_refresh_failed(served):
    import math

    import numpy as np

    service, stub, _ = served
    state = service.engine.state
    observed = state.metrics.observed.copy()
    observed[3, 1] = math.nan  # a metric missing
    scraped = state.metrics.scraped_at_s.copy()
    scraped[5] = -math.inf  # never scraped
    snap = dataclasses.replace(state.metrics, observed=observed, scraped_at_s=scraped, taken_at_s=1_000_123.456789,
                               index={})
    state.publish(snap)
    first = stub.GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(), timeout=DEADLINE_S)
    assert list(first.nodes) == list(snap.names) and first.taken_at_s == snap.taken_at_s
    assert not first.unchanged and not first.refresh_failed and first.refresh_error == ""
    np.testing.assert_array_equal(np.reshape(first.observed, (-1, 4)), snap.observed)  # NaN where NaN
    np.testing.assert_array_equal(np.reshape(first.capacity, (-1, 4)), snap.capacity_usage)
    np.testing.assert_array_equal(first.sample_time_s, snap.scraped_at_s)
    again = stub.GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(known_taken_at_s=first.taken_at_s),
                                timeout=DEADLINE_S)
    assert again.unchanged and not again.nodes and not again.observed and again.taken_at_s == snap.taken_at_s
    state.refresh_failed("query cpu_cores at http://127.0.0.1:1: connection refused")
    stale = stub.GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(), timeout=DEADLINE_S)
    assert stale.refresh_failed and "connection refused" in stale.refresh_error and list(stale.nodes) == list(snap.names)
    state.publish(dataclasses.replace(snap, taken_at_s=snap.taken_at_s + 2, index={}))
    newer = stub.GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(known_taken_at_s=first.taken_at_s),
                                timeout=DEADLINE_S)
    assert not newer.unchanged and not newer.refresh_failed and len(newer.nodes) == snap.size
    with pytest.raises(grpc.RpcError) as err:
        stub.GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(known_taken_at_s=math.nan), timeout=DEADLINE_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "known_taken_at_s" in err.value.details()


def test_get_node_metrics_is_unavailable_before_the_first_snapshot(actor):
    service, _ = make_service(actor)
    door = GrpcFrontDoor(service, "127.0.0.1", 0)
    with grpc.insecure_channel(f"127.0.0.1:{door.port}") as channel:
        with pytest.raises(grpc.RpcError) as err:
            engine_pb2_grpc.DecisionEngineStub(channel).GetNodeMetrics(engine_pb2.GetNodeMetricsRequest(),
                                                                       timeout=DEADLINE_S)
    door.stop(0)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "no node metrics" in err.value.details()
