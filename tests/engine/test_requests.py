"""A model with a requests share (action mode ``requests``) served by the engine: it scores CPU and
memory by the snapshot's requests to the share its action gives, says the share in its reply, never
hands a held action to the plugin (whose own score reads usage), and falls back (``no_requests``)
where the state does not know the requests; the state keeps them from the pod watch's list and
bindings; the engine in process is the simulator's td3 policy on that model, bit for bit. A model with
a balance share too (action mode ``balance``) likewise, the term left out for a BestEffort pod."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.engine.decision import PodSpec  # noqa: E402
from td3sched.engine.state import NodeInventory, NodeSnapshot, ShadowState  # noqa: E402
from td3sched.engine.twin import EngineTwin  # noqa: E402
from td3sched.policy import make_policy  # noqa: E402
from td3sched.policy.features import requested_utilisation, utilisation, with_requests  # noqa: E402
from td3sched.policy.static_weights import pod_balance, product_score, weighted_closeness  # noqa: E402
from td3sched.rl.actions import ACTION_DIMENSIONS, decode  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE  # noqa: E402

from tests.engine.conftest import make_service, pinned_model, snapshot  # noqa: E402

POD = PodSpec("web-1", cpu_milli=2000, mem_mib=4096)
SHARE_PRE_ACTIVATION = 1.0
"""The requests output's bias before the tanh: the pre-activation 5 tanh(1) = 3.81, a share of 0.978."""


def _model(folder, hold_s: float = 0.0):
    """A requests-mode model whose share output is pinned high (its other outputs as initialised)."""
    return pinned_model(folder, "requests", SHARE_PRE_ACTIVATION, seed=5, action_hold_s=hold_s)


@pytest.fixture(scope="module")
def requests_model(tmp_path_factory):
    return _model(tmp_path_factory.mktemp("requests") / "model")


@pytest.fixture(scope="module")
def balance_model(tmp_path_factory):
    """A balance-mode model whose two shares are pinned at 0.978."""
    return pinned_model(tmp_path_factory.mktemp("balance") / "model", "balance", SHARE_PRE_ACTIVATION, seed=5,
                        outputs=(5, 6))


def _with_requests(snap: NodeSnapshot, requested) -> NodeSnapshot:
    return NodeSnapshot(snap.names, snap.allocatable, snap.capacity_usage, snap.observed, snap.scraped_at_s,
                        taken_at_s=snap.taken_at_s, nonzero_requested=requested)


def _six_nodes(requested) -> NodeSnapshot:
    """Six nodes of known CPU use and the given non-zero requests [6, 2]."""
    return _with_requests(snapshot(6, cpu_util=[0.2, 0.3, 0.25, 0.35, 0.3, 0.2]), np.array(requested, dtype=float))


def test_the_engine_scores_by_requests_to_the_actions_share(requests_model):
    actor = load_actor(requests_model)
    snap = _six_nodes([[14000, 60000], [1000, 2000], [8000, 30000], [0, 0], [12000, 10000], [4000, 50000]])
    service, clock = make_service(actor, snap)
    _, d = service.score_nodes(POD, list(snap.names))
    args = decode(actor.act(d.observation), "requests")
    assert args.requests == pytest.approx(0.978, abs=1e-3) and d.requests == args.requests
    nodes = np.arange(6)
    request = POD.request(clock())
    u = utilisation(request, nodes, snap, None)
    r = requested_utilisation(request, nodes, snap)
    np.testing.assert_allclose(r[3], [2000 / 16000, 4096 / 65536])  # the pod alone on an empty node
    np.testing.assert_array_equal(d.scores, weighted_closeness(with_requests(u, r, args.requests), args.weights,
                                                               args.tau))
    assert not np.array_equal(d.scores, weighted_closeness(u, args.weights, args.tau))  # usage alone differs
    np.testing.assert_array_equal(d.requested, r)
    # the reply says the share and the card's dimensions
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.v1 import engine_pb2

    reply = DecisionEngineServicer(service).ScoreNodes(engine_pb2.ScoreNodesRequest(
        pod=engine_pb2.Pod(name="web-1", cpu_milli=2000, mem_mib=4096), candidates=list(snap.names)), None)
    assert reply.action.action_mode == "requests" and list(reply.action.dimensions) == list(ACTION_DIMENSIONS["requests"])
    assert reply.action.requests == pytest.approx(args.requests) and not reply.fallback


def test_without_the_requests_the_engine_falls_back_and_says_why(requests_model):
    service, _ = make_service(load_actor(requests_model), snapshot(6))  # metrics alone: no requests
    _, d = service.score_nodes(POD, None)
    assert d.fallback_reason == "no_requests" and d.requests == 0.0
    np.testing.assert_array_equal(d.weights, service.engine.fallback_weights)


def test_a_held_action_reading_requests_is_not_handed_to_the_plugin(tmp_path):
    actor = load_actor(_model(tmp_path / "held", hold_s=60.0))
    snap = _with_requests(snapshot(4), np.zeros((4, 2)))
    service, clock = make_service(actor, snap)
    _, first = service.score_nodes(POD, None)
    clock.t += 10
    _, second = service.score_nodes(POD, None)
    assert second.action_held and first.action_valid_s == second.action_valid_s == 0.0


def _row(cpu: float, mem: float) -> np.ndarray:
    """A pod's row of ``REQUESTED_COLUMNS`` asking ``cpu`` milli and ``mem`` MiB (non-zero as asked)."""
    return np.array([cpu, mem, cpu, mem, 0.0, 0.0, 0.0])


def test_the_state_keeps_each_nodes_requests_from_the_list_and_the_bindings():
    state = ShadowState(lambda: 0.0)
    names = ("a", "b", "c")
    state.set_inventory(NodeInventory(names, np.tile([16000.0, 65536.0, 100.0, 100.0], (3, 1)), np.zeros(3, int)))
    assert state.snapshot.nonzero_requested is None  # no pod list yet: not known
    state.set_requested({"a": _row(1000.0, 2048.0), "ghost": _row(5.0, 5.0)})
    np.testing.assert_array_equal(state.snapshot.nonzero_requested, [[1000, 2048], [0, 0], [0, 0]])
    state.add_requested("b", _row(500.0, 256.0))
    state.add_requested("a", -_row(1000.0, 2048.0))
    np.testing.assert_array_equal(state.snapshot.nonzero_requested, [[0, 0], [500, 256], [0, 0]])
    # a metrics refresh joins them again; a node the inventory gains starts with what the list said
    state.publish(snapshot(3))
    np.testing.assert_array_equal(state.snapshot.nonzero_requested, [[0, 0], [500, 256], [0, 0]])
    state.set_inventory(NodeInventory(("b", "ghost"), np.tile([16000.0, 65536.0, 100.0, 100.0], (2, 1)),
                                      np.zeros(2, int)))
    np.testing.assert_array_equal(state.snapshot.nonzero_requested, [[500, 256], [5, 5]])
    with pytest.raises(ValueError, match="nonzero_requested: shape"):
        _with_requests(snapshot(3), np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"a binding's requests: \[1.0, 2.0\]: expected 7 finite numbers"):
        state.add_requested("b", np.array([1.0, 2.0]))


def test_the_engine_scores_with_the_balance_share_but_not_for_a_best_effort_pod(balance_model):
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.v1 import engine_pb2

    actor = load_actor(balance_model)
    snap = _six_nodes([[14000, 6000], [1000, 2000], [8000, 30000], [0, 0], [12000, 10000], [4000, 50000]])
    service, clock = make_service(actor, snap)
    nodes = np.arange(6)
    for qos in (BURSTABLE, BEST_EFFORT):
        pod = PodSpec("web-1", cpu_milli=2000, mem_mib=4096, qos=qos)
        _, d = service.score_nodes(pod, list(snap.names))
        args = decode(actor.act(d.observation), "balance")
        assert args.requests == pytest.approx(0.978, abs=1e-3) and args.balance == pytest.approx(0.978, abs=1e-3)
        assert d.balance == args.balance and d.requests == args.requests
        request = pod.request(clock())
        u, r = utilisation(request, nodes, snap, None), requested_utilisation(request, nodes, snap)
        balance = pod_balance(args.balance, qos)
        assert (balance == 0.0) == (qos == BEST_EFFORT)
        np.testing.assert_array_equal(d.scores, product_score(u, r, args.weights, args.tau, args.requests, balance))
        without = weighted_closeness(with_requests(u, r, args.requests), args.weights, args.tau)
        assert np.array_equal(d.scores, without) == (qos == BEST_EFFORT)
    reply = DecisionEngineServicer(service).ScoreNodes(engine_pb2.ScoreNodesRequest(
        pod=engine_pb2.Pod(name="web-1", cpu_milli=2000, mem_mib=4096), candidates=list(snap.names)), None)
    assert reply.action.action_mode == "balance" and list(reply.action.dimensions) == list(ACTION_DIMENSIONS["balance"])
    assert reply.action.balance == pytest.approx(0.978, abs=1e-3) and reply.action_valid_s == 0.0


@pytest.mark.parametrize("model", ["requests_model", "balance_model"])
def test_the_engine_in_process_is_the_td3_policy_reading_requests(model, request):
    folder = request.getfixturevalue(model)
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    world = scenario.build(1)
    end = start + 2 * 3600
    with EngineTwin(load_actor(folder), "in-process", safety_cpu_util=world.config.safety_cpu_util) as twin:
        exact = Simulation(world, twin, 1, start, end).run()["metrics"]
    policy = Simulation(world, make_policy(f"td3:{folder}"), 1, start, end).run()["metrics"]
    assert exact == policy
    usage_only = Simulation(world, make_policy("static-weights"), 1, start, end).run()["metrics"]
    assert policy != usage_only
