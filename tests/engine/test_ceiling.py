"""A model with the hold-back ceiling (action mode ``ceiling``) served by the engine: /filter fails the
nodes its action holds back, naming the ceiling; ScoreNodes scores them 0, excluded and held_back, and
says the ceiling and the card's dimensions; the engine in process is the simulator's td3 policy on
that model, and the extender door places every pod as the engine in process does."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.engine.decision import PodSpec  # noqa: E402
from td3sched.engine.twin import EngineTwin  # noqa: E402
from td3sched.policy import make_policy  # noqa: E402
from td3sched.policy.features import utilisation  # noqa: E402
from td3sched.rl.actions import ACTION_DIMENSIONS, LOGIT_LIMIT, ceiling_of, decode  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

from tests.engine.conftest import make_service, pinned_model, snapshot  # noqa: E402

POD = PodSpec("web-1", cpu_milli=2000, mem_mib=512)
CEILING_PRE_ACTIVATION = -10.0
"""The ceiling output's bias before the tanh: the pre-activation is -5, the ceiling 0.507."""


@pytest.fixture(scope="module")
def ceiling_model(tmp_path_factory):
    """A ceiling-mode model whose ceiling output is pinned low (its other outputs as initialised)."""
    return pinned_model(tmp_path_factory.mktemp("ceiling") / "model", "ceiling", CEILING_PRE_ACTIVATION, seed=4)


def test_filter_fails_the_held_back_nodes_and_names_the_ceiling(ceiling_model):
    actor = load_actor(ceiling_model)
    snap = snapshot(6, cpu_util=[0.2, 0.45, 0.6, 0.3, 0.95, 0.55])
    service, clock = make_service(actor, snap)
    failed = service.filter(list(snap.names), POD)
    u = utilisation(POD.request(clock()), np.arange(6), snap, np.zeros((6, 2)))[:, 0]
    ceiling = decode(actor.act(np.zeros(OBSERVATION_SIZE, dtype=np.float32)), "ceiling").ceiling
    assert ceiling == pytest.approx(ceiling_of(-LOGIT_LIMIT)) == pytest.approx(0.507, abs=1e-3)
    held = {f"node-{i}" for i in range(6) if i != 4 and u[i] > ceiling}  # node-4: the safety filter's
    assert held == {"node-1", "node-2", "node-5"}  # the pod adds 12.5% of a node
    assert set(failed) == held | {"node-4"} and "safety filter" in failed["node-4"]
    for name in held:
        assert f"would exceed the model's ceiling of {ceiling_of(-LOGIT_LIMIT):.0%} for this pod" in failed[name] and "hold-back ceiling" in failed[name]
    # /prioritize then scores the nodes that passed with the filter's own decision
    passing = [n for n in snap.names if n not in failed]
    _, d = service.score_nodes(POD, passing, api="prioritize")
    assert d.candidates == passing and not d.held_back.any() and d.ceiling == pytest.approx(ceiling)
    # ScoreNodes (no /filter) scores held-back nodes 0 and marks them
    _, d = service.score_nodes(POD, list(snap.names))
    assert [snap.names[i] for i in np.flatnonzero(d.held_back)] == sorted(held | {"node-4"})
    assert np.all(d.scores[d.held_back] == 0)


def test_shadow_mode_holds_nothing_back(ceiling_model):
    snap = snapshot(6, cpu_util=[0.2, 0.45, 0.6, 0.3, 0.5, 0.55])
    service, _ = make_service(load_actor(ceiling_model), snap, shadow=True)
    assert service.filter(list(snap.names), POD) == {}


def test_models_without_a_ceiling_filter_as_before(actor):
    snap = snapshot(6, cpu_util=[0.2, 0.45, 0.6, 0.3, 0.95, 0.55])
    service, _ = make_service(actor, snap)
    assert list(service.filter(list(snap.names), POD)) == ["node-4"]
    _, d = service.score_nodes(POD, list(snap.names))
    assert d.ceiling is None and d.held_back is None


def test_score_nodes_reply_carries_the_ceiling_and_the_held_back_nodes(ceiling_model):
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.v1 import engine_pb2

    snap = snapshot(6, cpu_util=[0.2, 0.45, 0.6, 0.3, 0.5, 0.55])
    service, _ = make_service(load_actor(ceiling_model), snap)
    request = engine_pb2.ScoreNodesRequest(pod=engine_pb2.Pod(name="web-1", cpu_milli=2000, mem_mib=512),
                                           candidates=list(snap.names))
    reply = DecisionEngineServicer(service).ScoreNodes(request, None)
    assert reply.action.action_mode == "ceiling" and list(reply.action.dimensions) == list(ACTION_DIMENSIONS["ceiling"])
    assert reply.action.ceiling == pytest.approx(ceiling_of(-LOGIT_LIMIT)) and len(reply.action.pre_activations) == 6
    held = [s.node for s in reply.scores if s.held_back]
    assert held and all(s.excluded and s.score == 0 for s in reply.scores if s.held_back)
    assert all(not s.excluded for s in reply.scores if not s.held_back)


@pytest.fixture(scope="module")
def tiny():
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    return scenario.build(1), start, start + 2 * 3600


def _twin(world, start, end, folder, door, like=None):
    with EngineTwin(load_actor(folder), door, like, safety_cpu_util=world.config.safety_cpu_util) as twin:
        metrics = Simulation(world, twin, 1, start, end).run()["metrics"]
    return metrics, twin.placements


def test_the_engine_in_process_is_the_td3_policy_holding_back_and_the_extender_places_alike(tiny, ceiling_model):
    world, start, end = tiny
    exact, _ = _twin(world, start, end, ceiling_model, "in-process")
    policy = Simulation(world, make_policy(f"td3:{ceiling_model}"), 1, start, end).run()["metrics"]
    assert exact == policy
    assert policy["decisions"] > policy["binds"]  # pods were held back and waited
    served = _twin(world, start, end, ceiling_model, "extender")
    local = _twin(world, start, end, ceiling_model, "in-process", like="extender")
    assert served[1] == local[1] and served[0] == local[0]
    assert served[0]["decisions"] > served[0]["binds"]
