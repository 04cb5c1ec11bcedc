"""A model with a fragmentation share (action mode ``fragmentation``) served by the engine: its card
carries its scenario's typical pods; the engine blends the score with FGD's measured with them over the
snapshot's allocation (what the bound pods' requests leave free, GPUs included, and each node's pool),
says the share in its reply, never hands a held action to the plugin, and falls back
(``no_allocation``) where the state does not know the allocation; the engine in process is the
simulator's td3 policy on that model, bit for bit, on tiny and on dlrm-small (whose pods take GPUs),
both measuring the share with the card's typical pods (on another scenario too), and the served engine
places as the engine in process."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.engine.decision import FragmentationMeasure, ModelSlot, PodSpec  # noqa: E402
from td3sched.engine.state import Allocation, NodeSnapshot  # noqa: E402
from td3sched.engine.twin import EngineTwin  # noqa: E402
from td3sched.metrics.fragmentation import (PoolTypicalPods, TypicalPods, node_fragmentation,  # noqa: E402
                                            typical_pods_from_json, typical_pods_to_json)
from td3sched.policy import make_policy  # noqa: E402
from td3sched.policy.fgd import fragmentation_decrease  # noqa: E402
from td3sched.policy.static_weights import blend_fragmentation, product_score  # noqa: E402
from td3sched.policy.features import utilisation  # noqa: E402
from td3sched.rl.actions import ACTION_DIMENSIONS, decode  # noqa: E402
from td3sched.rl.card import CARD_FILE, ModelError, read_card  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

from tests.engine.conftest import make_service, pinned_model, snapshot  # noqa: E402

POD = PodSpec("train-1", cpu_milli=4000, mem_mib=8192)
GPU_POD = PodSpec("train-2", cpu_milli=4000, mem_mib=8192, gpu_count=1, gpu_milli=500)
SHARE_PRE_ACTIVATION = 0.0
"""The fragmentation output's bias: a share of sigmoid(0) = 0.5."""
GPU_TYPICAL = PoolTypicalPods((
    TypicalPods(np.array([[2000.0, 4096, 0, 0], [8000, 16384, 0, 0]]), np.array([0, 0]), np.array([0, 0]),
                np.array([0.7, 0.3])),
    TypicalPods(np.array([[4000.0, 8192, 0, 0], [8000, 8192, 0, 0]]), np.array([1, 2]), np.array([500, 1000]),
                np.array([0.6, 0.4])),
))


def _model(folder, hold_s: float = 0.0, scenario: str = "tiny"):
    """A fragmentation-mode model whose share output is pinned at 0.5 (its other outputs as initialised)."""
    return pinned_model(folder, "fragmentation", SHARE_PRE_ACTIVATION, seed=5, scenario=scenario,
                        **({"action_hold_s": hold_s} if hold_s else {}))


@pytest.fixture(scope="module")
def frag_model(tmp_path_factory):
    return _model(tmp_path_factory.mktemp("frag") / "model")


def _with_allocation(snap: NodeSnapshot, free, gpu_free, pool) -> NodeSnapshot:
    return NodeSnapshot(snap.names, snap.allocatable, snap.capacity_usage, snap.observed, snap.scraped_at_s,
                        taken_at_s=snap.taken_at_s, allocation=Allocation(free, gpu_free, pool))


def _six_nodes() -> NodeSnapshot:
    """Six nodes of known CPU use and allocation: two CPU-pool nodes, three GPU-pool nodes, one of a pool
    the model does not know."""
    snap = snapshot(6, cpu_util=[0.2, 0.3, 0.25, 0.35, 0.3, 0.2])
    free = np.array([[14000, 60000, 500, 100], [3000, 9000, 500, 100], [9000, 20000, 500, 100],
                     [4500, 8192, 500, 100], [12000, 30000, 500, 100], [6000, 20000, 500, 100]], dtype=float)
    gpu_free = np.array([[0, 0], [0, 0], [1000, 500], [500, 0], [1000, 1000], [1000, 0]])
    return _with_allocation(snap, free, gpu_free, ("cpu", "cpu", "gpu", "gpu", "gpu", "spot"))


def test_the_card_carries_the_scenario_s_typical_pods_to_the_bit(frag_model):
    names, typical = load_scenario("tiny").typical_pods()
    actor = load_actor(frag_model)
    assert actor.typical_pods[0] == names == ("cpu", "gpu")
    for got, want in zip(actor.typical_pods[1].pools, typical.pools):
        for field in ("request", "gpu_count", "gpu_milli", "weight"):
            assert getattr(got, field).tobytes() == getattr(want, field).tobytes()
    # the card's form reads back to the bit
    back_names, back = typical_pods_from_json(json.loads(json.dumps(typical_pods_to_json(typical, names))))
    assert back_names == names and all(a.weight.tobytes() == b.weight.tobytes() for a, b in zip(back.pools, typical.pools))


def test_a_malformed_or_missing_typical_pods_entry_is_refused_by_name(frag_model, tmp_path):
    card = json.loads((frag_model / CARD_FILE).read_text())
    card["typical_pods"]["sets"][1]["weight"] = [0.5] * len(card["typical_pods"]["sets"][1]["weight"])
    (tmp_path / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match=r"typical_pods\['gpu'\]: expected .*weights >= 0 summing to 1"):
        read_card(tmp_path)
    card["typical_pods"] = {"pools": ["cpu"], "sets": []}
    (tmp_path / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match="one set per distinct, non-empty pool name"):
        read_card(tmp_path)
    # a fragmentation model without typical pods (a card written before they were) is refused at load and reload
    model = SimpleNamespace(folder="runs/frag", dimensions=ACTION_DIMENSIONS["fragmentation"], typical_pods=None)
    with pytest.raises(ValueError, match="runs/frag: declares the action dimension 'frag' but its card has no "
                                         "typical_pods"):
        ModelSlot(model)
    with pytest.raises(ValueError, match="retrain it"):
        ModelSlot().swap(model)


def test_the_engine_blends_fgd_s_score_by_the_action_s_share(frag_model):
    from td3sched.engine.grpc_server import DecisionEngineServicer
    from td3sched.engine.v1 import engine_pb2

    actor = load_actor(frag_model)
    actor.typical_pods = (("cpu", "gpu"), GPU_TYPICAL)  # a measure whose GPU shapes matter on these nodes
    snap = _six_nodes()
    nodes = np.arange(6)
    for pod in (POD, GPU_POD):  # each on the nodes as they are (the first would count where it is expected)
        service, clock = make_service(actor, snap)
        _, d = service.score_nodes(pod, list(snap.names))
        args = decode(actor.act(d.observation), "fragmentation")
        assert args.fragmentation == pytest.approx(0.5) and d.fragmentation == args.fragmentation
        request = pod.request(clock())
        plain = product_score(utilisation(request, nodes, snap, None), None, args.weights, args.tau)
        typical = PoolTypicalPods(GPU_TYPICAL.pools + (TypicalPods.empty(),))
        pool = np.array([0, 0, 1, 1, 1, 2])
        a = snap.allocation
        decrease = fragmentation_decrease(typical, request, a.free, a.gpu_free, pool,
                                          typical.node_fragmentation(a.free, a.gpu_free, pool))
        assert decrease[5] == 0.0  # a pool the card does not name: no typical pods, no fragmentation
        assert np.ptp(decrease) > 0
        np.testing.assert_array_equal(d.scores, blend_fragmentation(plain, decrease, args.fragmentation))
        assert not np.array_equal(d.scores, plain)
    # the reply says the share and the card's dimensions; the decision log record too
    reply = DecisionEngineServicer(service).ScoreNodes(engine_pb2.ScoreNodesRequest(
        pod=engine_pb2.Pod(name="train-1", cpu_milli=4000, mem_mib=8192), candidates=list(snap.names)), None)
    assert reply.action.action_mode == "fragmentation"
    assert list(reply.action.dimensions) == list(ACTION_DIMENSIONS["fragmentation"])
    assert reply.action.fragmentation == pytest.approx(0.5) and not reply.fallback


def test_without_an_allocation_the_engine_falls_back_and_says_why(frag_model):
    service, _ = make_service(load_actor(frag_model), snapshot(6))  # metrics alone: no allocation
    _, d = service.score_nodes(POD, None)
    assert d.fallback_reason == "no_allocation" and d.fragmentation == 0.0
    np.testing.assert_array_equal(d.weights, service.engine.fallback_weights)


def test_a_held_fragmentation_action_is_not_handed_to_the_plugin(tmp_path):
    service, clock = make_service(load_actor(_model(tmp_path / "held", hold_s=60.0)), _six_nodes())
    _, first = service.score_nodes(POD, None)
    clock.t += 10
    _, second = service.score_nodes(POD, None)
    assert not first.fallback and first.fragmentation > 0
    assert second.action_held and first.action_valid_s == second.action_valid_s == 0.0


def test_a_static_blend_written_as_a_model_is_served_as_the_blend(tmp_path):
    from td3sched.rl.static_model import write_static_model

    spec = "static-weights:w=1/0/0/0:tau=0.4:frag=0.25"
    actor = load_actor(write_static_model(spec, tmp_path / "blend", "tiny", action_hold_s=3600.0))
    snap = _six_nodes()
    for pod in (POD, GPU_POD):  # each on the nodes as they are (the first would count where it is expected)
        service, clock = make_service(actor, snap)
        _, d = service.score_nodes(pod, list(snap.names))
        assert not d.fallback and d.fragmentation == pytest.approx(0.25)
        assert d.tau == pytest.approx(0.4) and d.weights[0] == pytest.approx(1.0, abs=2e-4)
        request = pod.request(clock())
        plain = product_score(utilisation(request, np.arange(6), snap, None), None, d.weights, d.tau)
        measure = FragmentationMeasure(*actor.typical_pods)
        np.testing.assert_array_equal(d.scores, blend_fragmentation(
            plain, measure.decrease(request, np.arange(6), snap.allocation), d.fragmentation))
        assert d.action_valid_s == 0.0  # the plugin's own score has no fgd term

@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_node_s_fragmentation_is_the_same_bits_whatever_it_is_scored_with(seed):
    """The simulator's FGD recomputes only the nodes that changed; the engine scores a pod's candidates:
    both agree exactly only if a row's F_n does not depend on the rows beside it. And it is the
    scheduler's fit rule (``fit_matrix``), GPUs included, weighted by the shapes that do not fit."""
    from td3sched.simulator.filter import fit_matrix

    rng = np.random.default_rng(seed)
    n, m, g = int(rng.integers(2, 60)), int(rng.integers(0, 30)), int(rng.integers(0, 5))
    w = rng.random(m)
    count = rng.choice([0, 0, 1, 2], m)
    milli = np.where(count == 1, rng.choice([250, 500, 1000], m), np.where(count > 0, 1000, 0))
    typical = TypicalPods(rng.choice([0.0, 500, 1000, 4000], (m, 4)), count.astype(np.int64), milli.astype(np.int64),
                          w / w.sum() if m else w)
    free = rng.choice([-100.0, 0, 300, 800, 2500, 6000], (n, 4))
    gpu_free = rng.choice([0, 250, 500, 1000], (n, g)).astype(np.int64)
    whole = node_fragmentation(free, gpu_free, typical)
    lo = int(rng.integers(0, n))
    hi = int(rng.integers(lo + 1, n + 1))
    assert node_fragmentation(free[lo:hi], gpu_free[lo:hi], typical).tobytes() == whole[lo:hi].tobytes()
    assert all(node_fragmentation(free[i:i + 1], gpu_free[i:i + 1], typical)[0] == whole[i] for i in range(n))
    if g or not (count > 0).any():  # fit_matrix needs a GPU column to ask about GPUs
        fits = fit_matrix(free, gpu_free, typical.request, typical.gpu_count, typical.gpu_milli)
        np.testing.assert_allclose(whole, np.maximum(free[:, 0], 0) * np.where(fits, 0.0, typical.weight).sum(axis=1),
                                   rtol=1e-12, atol=1e-9)


def test_an_allocation_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"free \(2, 3\)"):
        Allocation(np.zeros((2, 3)), np.zeros((2, 1)), ("a", "b"))
    with pytest.raises(ValueError, match="free milli-GPU in \\[0, 1000\\]"):
        Allocation(np.zeros((2, 4)), np.full((2, 1), 1500), ("a", "b"))
    with pytest.raises(ValueError, match="allocation: 2 nodes, expected 3"):
        _with_allocation(snapshot(3), np.zeros((2, 4)), np.zeros((2, 1)), ("a", "b"))


def _twin_against_policy(folder, world, start, end):
    with EngineTwin(load_actor(folder), "in-process", safety_cpu_util=world.config.safety_cpu_util) as twin:
        exact = Simulation(world, twin, 1, start, end).run()["metrics"]
    assert twin.decisions > 20
    return exact, Simulation(world, make_policy(f"td3:{folder}"), 1, start, end).run()["metrics"]


@pytest.fixture(scope="module")
def tiny():
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    return scenario.build(1), start, start + 2 * 3600


def test_the_engine_in_process_is_the_td3_policy_with_a_fragmentation_share(frag_model, tiny):
    world, start, end = tiny
    exact, policy = _twin_against_policy(frag_model, world, start, end)
    assert exact == policy
    args = decode(load_actor(frag_model).act(np.zeros(OBSERVATION_SIZE, dtype=np.float32)), "fragmentation")
    assert args.fragmentation > 0
    assert policy != Simulation(world, make_policy("static-weights"), 1, start, end).run()["metrics"]


@pytest.mark.parametrize("door", ["grpc", "extender"])
def test_the_served_engine_with_a_fragmentation_share_places_as_in_process(frag_model, tiny, door):
    world, start, end = tiny
    runs = []
    for d, like in ((door, None), ("in-process", door)):
        with EngineTwin(load_actor(frag_model), d, like, safety_cpu_util=world.config.safety_cpu_util) as twin:
            metrics = Simulation(world, twin, 1, start, end).run()["metrics"]
        runs.append((metrics, twin.placements))
    assert len(runs[0][1]) > 20
    assert runs[0] == runs[1]


def test_on_dlrm_small_with_gpus_the_engine_in_process_is_the_td3_policy(tmp_path):
    from td3sched.trace.location import traces_dir

    try:
        traces_dir()
    except FileNotFoundError as exc:  # like every test that reads the real traces
        pytest.skip(f"real traces not available ({exc})")
    folder = _model(tmp_path / "dlrm-small", scenario="dlrm-small")
    scenario = load_scenario("dlrm-small")
    start, _ = scenario.span("test")
    world = scenario.build(1)
    w = world.workload
    first_gpu_pod = w.arrival_s[(w.gpu_count > 0) & (w.arrival_s >= start)].min()  # GPU pods are rare: go to one
    begin = max(start, first_gpu_pod - 600.0)
    window = (w.arrival_s >= begin) & (w.arrival_s < begin + 1800)
    assert (w.gpu_count[window] > 0).any() and any((t.gpu_count > 0).any() for t in world.typical.pools)
    exact, policy = _twin_against_policy(folder, world, begin, begin + 1800)
    assert exact == policy


def test_a_model_of_another_scenario_is_measured_with_its_card_s_typical_pods(tmp_path, tiny):
    """dlrm-small's typical pods on tiny's pools of the same names: the simulator's td3 policy measures the
    share with the card's sets, as the engine serves the model, not with tiny's own."""
    from td3sched.rl.policy import TD3Policy
    from td3sched.trace.location import traces_dir

    try:
        traces_dir()
    except FileNotFoundError as exc:  # like every test that reads the real traces
        pytest.skip(f"real traces not available ({exc})")
    folder = _model(tmp_path / "dlrm-small", scenario="dlrm-small")
    world, start, end = tiny
    names, card = load_actor(folder).typical_pods
    assert names == tuple(p.name for p in world.pools) == ("cpu", "gpu")
    assert any(a.weight.tobytes() != b.weight.tobytes() for a, b in zip(card.pools, world.typical.pools))
    policy = make_policy(f"td3:{folder}")
    exact, measured = _twin_against_policy(folder, world, start, end)
    assert exact == measured
    Simulation(world, policy, 1, start, start + 600).run()
    assert all(a.weight.tobytes() == b.weight.tobytes() for a, b in zip(policy.fgd.typical.pools, card.pools))
    # measured with tiny's own typical pods instead (a card without any), the same model places otherwise
    actor = load_actor(folder)
    actor.typical_pods = None
    assert Simulation(world, TD3Policy(actor), 1, start, end).run()["metrics"] != measured


def test_the_state_keeps_each_node_s_allocation_from_the_list_and_the_bindings():
    """With the node inventory (allocatable, whole GPUs, pool label) and the pods' requests, every
    snapshot carries what the requests leave free, GPUs included; a binding changes it in place."""
    from td3sched.engine.state import NodeInventory, ShadowState, gpu_layout, requested_row
    from td3sched.policy.base import PodRequest

    def row(cpu, mem, gpus=0, disk=0.0):
        return requested_row(PodRequest(0, np.array([cpu, mem, disk, 0.0]), gpus, 1000 if gpus else 0, 0,
                                        np.inf, np.inf, 0.0))

    state = ShadowState(lambda: 0.0)
    alloc = np.array([[16000.0, 65536, 100, 100], [32000, 131072, 200, 100]])
    state.set_inventory(NodeInventory(("a", "b"), alloc, np.array([0, 4]), ("cpu", "gpu")))
    assert state.snapshot.allocation is None  # no pod list yet: not known
    state.set_requested({"a": row(1000, 2048), "b": row(8000, 16384, gpus=3, disk=20)})
    a = state.snapshot.allocation
    np.testing.assert_array_equal(a.free, [[15000, 63488, 100, 100], [24000, 114688, 180, 100]])
    np.testing.assert_array_equal(a.gpu_free, [[0, 0, 0, 0], [1000, 0, 0, 0]])
    assert a.pool == ("cpu", "gpu")
    state.add_requested("b", -row(4000, 8192, gpus=2))
    np.testing.assert_array_equal(state.snapshot.allocation.gpu_free[1], [1000, 1000, 1000, 0])
    np.testing.assert_array_equal(state.snapshot.allocation.free[1], [28000, 122880, 180, 100])
    # the layout: free GPUs first, never more than the node has, never fewer than none
    np.testing.assert_array_equal(gpu_layout(np.array([2, 1, 0]), np.array([3, 0, 0])), [[0, 0], [1000, 0], [0, 0]])
    with pytest.raises(ValueError, match="2 pools for 1 nodes"):
        NodeInventory(("a",), alloc[:1], np.array([0]), ("cpu", "gpu"))


def test_warm_up_loads_the_fragmentation_kernel_and_leaves_the_served_state_alone(frag_model):
    snap = _six_nodes()
    service, _ = make_service(load_actor(frag_model), snap)
    service.engine.warm_up()
    assert service.engine.state.snapshot is snap and service.engine.state.assigned() == {}


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_compiled_decrease_is_the_pod_placed_by_bind_s_gpu_rule(seed):
    """``PoolTypicalPods.fragmentation_decrease`` (one compiled pass) gives the bits of placing the pod
    by hand: its requests taken from each row, its GPUs as ``assign_gpus`` takes them, F_n again."""
    from td3sched.policy.base import PodRequest
    from td3sched.policy.fgd import assign_gpus

    rng = np.random.default_rng(seed)
    n, g, pools = int(rng.integers(1, 40)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
    sets = []
    for _ in range(pools):
        m = int(rng.integers(0, 8))
        count = rng.choice([0, 0, 1, 2], m)
        milli = np.where(count == 1, rng.choice([250, 500, 1000], m), np.where(count > 0, 1000, 0))
        w = rng.random(m)
        sets.append(TypicalPods(rng.choice([0.0, 500, 1000, 4000], (m, 4)), count.astype(np.int64),
                                milli.astype(np.int64), w / w.sum() if m else w))
    typical = PoolTypicalPods(tuple(sets))
    free = rng.choice([-100.0, 0, 300, 800, 2500, 6000], (n, 4))
    gpu_free = rng.choice([0, 250, 500, 1000], (n, g)).astype(np.int64)
    pool = rng.integers(0, pools, n)
    count = int(rng.choice([0, 1, 1, 2]))
    milli = int(rng.choice([250, 500, 1000])) if count == 1 else (1000 if count else 0)
    pod = PodRequest(0, rng.choice([0.0, 200, 1500], 4), count, milli, 0, np.inf, np.inf, 0.0)
    before = typical.node_fragmentation(free, gpu_free, pool)
    gpu_after = gpu_free - assign_gpus(gpu_free, count, milli) if count else gpu_free
    by_hand = before - typical.node_fragmentation(free - pod.request, gpu_after, pool)
    got = fragmentation_decrease(typical, pod, free, gpu_free, pool, before)
    assert got.tobytes() == by_hand.tobytes()
