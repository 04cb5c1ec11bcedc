"""The sibling spread served: the engine knows each bound pod's controller from its pod watch (and
ReportBinding), lowers the candidates that run the pod's siblings as ``static-weights``' spread does, falls
back when it cannot know them, and in process places as the simulator's td3 policy with the same card."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from td3sched.engine.config import FallbackSettings  # noqa: E402
from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec  # noqa: E402
from td3sched.engine.kubernetes_objects import pod_from_k8s, pod_to_k8s  # noqa: E402
from td3sched.engine.service import EngineService  # noqa: E402
from td3sched.engine.state import ShadowState, Staleness, binding_key  # noqa: E402
from td3sched.engine.twin import EngineTwin  # noqa: E402
from td3sched.policy import make_policy  # noqa: E402
from td3sched.policy.features import utilisation  # noqa: E402
from td3sched.policy.siblings import spread_siblings  # noqa: E402
from td3sched.policy.static_weights import product_score  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.rl.static_model import write_static_model  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402
from tests.engine.conftest import Clock, make_service, snapshot  # noqa: E402

SPEC = "static-weights:w=1/0/0/0:tau=0.4:spread=3"
OWNER = "shop/ReplicaSet/web-7d9"
POD = PodSpec("web-7d9-x", cpu_milli=500, mem_mib=512, namespace="shop", owner=OWNER)


@pytest.fixture(scope="module")
def spread_model(tmp_path_factory):
    return write_static_model(SPEC, tmp_path_factory.mktemp("spread") / "model", "tiny", action_hold_s=600.0)


def _replica(name: str, node: str) -> PodSpec:
    return PodSpec(name, cpu_milli=500, mem_mib=512, namespace="shop", owner=OWNER)


def test_the_state_counts_each_controller_s_pods_per_node_once_however_reported():
    state = ShadowState(Clock())
    assert state.sibling_counts(OWNER, ["a"]) is None and not state.knows_pods   # no pod watch: unknown
    state.place_pod("shop/r1", OWNER, "a")                                      # ignored until then
    state.set_pods({"shop/r1": (OWNER, "a"), "shop/r2": (OWNER, "a"), "shop/lone": ("", "b"),
                    "other/x": ("other/Job/x", "b")})
    assert state.sibling_counts(OWNER, ["a", "b", "c"]).tolist() == [2, 0, 0]
    state.place_pod("shop/r3", OWNER, "b")
    state.place_pod("shop/r3", OWNER, "b")                                      # ReportBinding, then the watch
    state.place_pod("shop/r2", OWNER, "c")                                      # moved: rebound elsewhere
    assert state.sibling_counts(OWNER, ["a", "b", "c"]).tolist() == [1, 1, 1]
    state.remove_pod("shop/r1")
    state.remove_pod("shop/r1")                                                 # gone twice: once
    state.remove_pod("shop/lone")                                               # never counted
    assert state.sibling_counts(OWNER, ["a", "b", "c"]).tolist() == [0, 1, 1]
    assert state.sibling_counts("", ["a", "b"]).tolist() == [0, 0]              # no owner: no siblings
    assert state.sibling_counts("other/Job/x", ["b"]).tolist() == [1]


def _pod(owners) -> dict:
    return {"metadata": {"name": "p", "namespace": "shop", "ownerReferences": owners},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}}


def test_a_v1_pod_s_controller_is_its_owner_and_reads_back():
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "u1", "controller": True}
    assert pod_from_k8s(_pod([rs])).owner == OWNER
    assert pod_from_k8s(_pod([{**rs, "controller": False}])).owner == ""       # owned, not controlled
    assert pod_from_k8s(_pod([])).owner == "" and pod_from_k8s(_pod(None)).owner == ""
    with pytest.raises(ValueError, match=r"ownerReferences\[0\]: kind None"):
        pod_from_k8s(_pod([{"name": "x", "controller": True}]))
    with pytest.raises(ValueError, match=r"ownerReferences\[0\]"):
        pod_from_k8s(_pod(["x"]))
    assert pod_from_k8s(json.loads(json.dumps(pod_to_k8s(POD)))) == POD
    with pytest.raises(ValueError, match="pod.owner='web'"):
        pod_to_k8s(PodSpec("p", namespace="shop", owner="web"))
    with pytest.raises(ValueError, match="pod.owner=3"):
        PodSpec("p", owner=3)


def test_the_engine_lowers_the_candidates_running_the_pod_s_siblings_by_the_card_s_spread(spread_model):
    actor = load_actor(spread_model)
    assert actor.sibling_spread == 3.0
    snap = snapshot(4, cpu_util=[0.4, 0.4, 0.2, 0.6])
    service, clock = make_service(actor, snap)
    _, blind = service.score_nodes(POD, None)
    assert blind.fallback_reason == "no_pods" and blind.spread == 0.0           # no pod watch: the fallback
    service.engine.state.set_pods({})
    service.report_binding(_replica("web-7d9-a", "node-0"), "node-0")
    service.report_binding(_replica("web-7d9-b", "node-0"), "node-0")
    service.report_binding(_replica("web-7d9-c", "node-2"), "node-2")
    service.report_binding(PodSpec("db-0", cpu_milli=500, mem_mib=512, namespace="shop", owner="shop/StatefulSet/db"),
                           "node-1")
    _, d = service.score_nodes(POD, None)
    assert not d.fallback and d.spread == 3.0 and d.action_valid_s == 0.0       # the plugin has no such term
    service.engine.state.unexpect_pod(binding_key(POD.namespace, POD.name))     # as it scored: not its own neighbour
    request = POD.request(clock())
    plain = product_score(utilisation(request, np.arange(4), snap, service.engine.state.recent_usage(snap)), None,
                          d.weights, d.tau)
    np.testing.assert_array_equal(d.scores, spread_siblings(plain, np.array([2.0, 0, 1, 0]), 3.0))
    assert d.scores.argmax() == 1                          # node 0 is as cool by usage, but runs two siblings
    service.forget_binding("shop", "web-7d9-a", "node-0")
    service.forget_binding("shop", "web-7d9-b", "node-0")
    _, after = service.score_nodes(POD, None)                 # (their requests stay in the assign cache)
    np.testing.assert_array_equal(after.scores, spread_siblings(plain, np.array([0.0, 0, 1, 0]), 3.0))


def test_a_burst_of_replicas_scored_before_any_binding_is_reported_lands_apart(spread_model):
    """kube-scheduler scores a burst's replicas back to back and binds each asynchronously: the engine counts
    each replica on the nodes its answer ranks first (shared among ties) until its binding is reported,
    where the report says after it, and nowhere after EXPECT_S unbound; a shadow engine counts nothing.
    (Each also counts in those nodes' usage: ``test_a_burst_of_pods_counts_where_each_was_answered``.)"""
    from td3sched.engine.state import EXPECT_S

    actor = load_actor(spread_model)
    service, clock = make_service(actor, snapshot(4, cpu_util=[0.2, 0.25, 0.3, 0.35]))
    service.engine.state.set_pods({})
    tops = []
    for name in ("web-7d9-a", "web-7d9-b", "web-7d9-c"):
        _, d = service.score_nodes(_replica(name, ""), None)
        tops.append(d.candidates[int(np.argmax(d.scores))])
    assert tops == ["node-3", "node-2", "node-1"], tops       # by usage alone (target 40%) all three: node-3
    state = service.engine.state
    nodes = ["node-0", "node-1", "node-2", "node-3"]
    assert state.sibling_counts(OWNER, nodes).tolist() == [0, 1, 1, 1]
    assert state.sibling_counts(OWNER, nodes, "shop/web-7d9-a").tolist() == [0, 1, 1, 0]  # not its own sibling
    service.report_binding(_replica("web-7d9-a", ""), "node-0")  # the scheduler put a elsewhere: it moves
    service.report_binding(_replica("web-7d9-b", ""), "node-2")
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 1, 1, 0]
    state.expect_pod("shop/web-7d9-b", OWNER, ["node-3"])        # a bound pod is not moved by a ranking
    clock.t += EXPECT_S                                          # c never bound: it stops counting
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 0, 1, 0]
    state.expect_pod("shop/web-7d9-d", OWNER, ["node-1", "node-3"])  # tied first: either, at random
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 0.5, 1, 0.5]
    assert state.sibling_counts(OWNER, nodes, "shop/web-7d9-d").tolist() == [1, 0, 1, 0]
    state.set_pods({"shop/web-7d9-a": (OWNER, "node-0")})      # a fresh list: b is gone, d still expected
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 0.5, 0, 0.5]
    state.place_pod("shop/web-7d9-d", OWNER, "node-3")         # bound: on its node alone
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 0, 0, 1]
    state.remove_pod("shop/web-7d9-d")
    assert state.sibling_counts(OWNER, nodes).tolist() == [1, 0, 0, 0]

    # ScoreNodes answers in 0-100: every node its answer ties first may take the pod, so each counts it
    tied, _ = make_service(actor, snapshot(4, cpu_util=[0.3, 0.3, 0.2, 0.3]))
    tied.engine.state.set_pods({})
    _, d = tied.score_nodes(_replica("web-7d9-a", ""), nodes)
    assert (d.answer(100) == d.answer(100).max()).sum() == 3 and len(set(d.scores.tolist())) == 4
    assert tied.engine.state.sibling_counts(OWNER, nodes).tolist() == [1 / 3, 1 / 3, 0, 1 / 3]
    # the extender's 0-10 would tie nodes within a tenth: it answers the best alone at the top, counted there
    extender, _ = make_service(actor, snapshot(4, cpu_util=[0.34, 0.35, 0.1, 0.1]))
    extender.engine.state.set_pods({})
    _, d = extender.score_nodes(_replica("web-7d9-a", ""), nodes, api="prioritize")
    assert (np.round(d.scores * 10) == np.round(d.scores.max() * 10)).sum() >= 2  # rounded, they would tie
    answer = d.answer(10)
    assert (answer == answer.max()).sum() == 1 and answer.argmax() == d.scores.argmax()
    counts = extender.engine.state.sibling_counts(OWNER, nodes)
    assert counts.tolist() == [float(i == d.scores.argmax()) for i in range(4)]

    shadow, _ = make_service(actor, snapshot(4, cpu_util=[0.2, 0.25, 0.3, 0.35]), shadow=True)
    shadow.engine.state.set_pods({})
    for name in ("web-7d9-a", "web-7d9-b"):
        shadow.score_nodes(_replica(name, ""), None)
    assert shadow.engine.state.sibling_counts(OWNER, nodes).tolist() == [0, 0, 0, 0]


def test_the_fallback_s_spread_applies_where_the_state_knows_the_pods():
    state = ShadowState(Clock(), Staleness())
    state.publish(snapshot(3, cpu_util=[0.3, 0.3, 0.3]))
    engine = DecisionEngine(state, ModelSlot(None), np.array([1.0, 0, 0, 0]), 0.4, fallback_spread=3.0)
    service = EngineService(engine)
    service.report_binding(_replica("web-7d9-a", "node-0"), "node-0")          # not counted: no pod watch yet
    _, d = service.score_nodes(POD, ["node-0", "node-1"])
    assert d.fallback_reason == "no_model" and d.spread == 0.0
    state.set_pods({"shop/web-7d9-a": (OWNER, "node-0")})
    _, d = service.score_nodes(POD, ["node-0", "node-1"])
    assert d.spread == 3.0 and d.scores[1] > d.scores[0]
    with pytest.raises(ValueError, match="spread=-1"):
        DecisionEngine(state, ModelSlot(None), fallback_spread=-1)
    with pytest.raises(ValueError, match="spread"):
        FallbackSettings(weights=[1, 0, 0, 0], spread=101)


@pytest.fixture(scope="module")
def tiny():
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    return scenario.build(1), start, start + 2 * 3600


@pytest.mark.parametrize("door, like", [("in-process", None), ("grpc", None), ("extender", None)])
def test_the_engine_places_as_the_td3_policy_with_the_card_s_spread(spread_model, tiny, door, like):
    world, start, end = tiny
    with EngineTwin(load_actor(spread_model), door, like, safety_cpu_util=world.config.safety_cpu_util) as twin:
        served = Simulation(world, twin, 1, start, end).run()["metrics"]
    assert twin.decisions > 20
    if door == "in-process":
        assert served == Simulation(world, make_policy(f"td3:{spread_model}"), 1, start, end).run()["metrics"]
        assert served != Simulation(world, make_policy(SPEC.replace(":spread=3", "")), 1, start, end).run()["metrics"]
    else:  # the front doors' whole numbers: the same run as in process, rounded as they round
        with EngineTwin(load_actor(spread_model), "in-process", door,
                        safety_cpu_util=world.config.safety_cpu_util) as twin:
            assert served == Simulation(world, twin, 1, start, end).run()["metrics"]
