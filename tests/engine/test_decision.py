"""A decision scores as the simulator's td3 policy does; stale nodes get the documented treatment;
a broken model falls back with its reason counted; the assign cache moves scores after bindings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from td3sched.engine.decision import NEUTRAL_SCORE, PodSpec
from td3sched.engine.state import NotReady
from td3sched.policy.features import utilisation
from td3sched.policy.static_weights import weighted_closeness
from td3sched.rl.actions import action_to_weights
from td3sched.rl.observation import observe

from tests.engine.conftest import make_service, snapshot

POD = PodSpec("web-1", cpu_milli=500, mem_mib=512)


def test_scores_are_the_shared_score_of_the_models_action(actor):
    snap = snapshot(6)
    service, clock = make_service(actor, snap)
    _, d = service.score_nodes(POD, list(snap.names))
    nodes = np.arange(6)
    req = POD.request(clock())
    u = utilisation(req, nodes, snap, np.zeros((6, 2)))
    obs = observe(req, nodes, snap, u, 0.0)
    np.testing.assert_array_equal(d.observation, obs)
    w, tau = action_to_weights(actor.act(obs), actor.action_mode)
    np.testing.assert_allclose(d.scores, weighted_closeness(u, w, tau))
    assert not d.fallback and d.model_version == actor.version and np.all((0 <= d.scores) & (d.scores <= 1))


def test_not_ready_without_a_snapshot(actor):
    service, _ = make_service(actor)
    with pytest.raises(NotReady):
        service.score_nodes(POD, ["node-0"])


@pytest.mark.parametrize("candidates, field", [([], "candidates: empty"), (["node-1", "node-1"], "duplicate"),
                                               ([""], "non-empty")])
def test_bad_candidates_name_the_field(actor, candidates, field):
    service, _ = make_service(actor, snapshot(3))
    with pytest.raises(ValueError, match=field):
        service.score_nodes(POD, candidates)


def test_bad_pod_values_name_the_field():
    with pytest.raises(ValueError, match=r"pod.cpu_milli=nan"):
        PodSpec("p", cpu_milli=float("nan"))
    with pytest.raises(ValueError, match=r"pod.mem_mib=-1"):
        PodSpec("p", mem_mib=-1)


def test_stale_and_unknown_nodes_fail_open_with_a_neutral_score(actor):
    snap = snapshot(4, age_s=[0, 0, 500, 0])
    service, _ = make_service(actor, snap, max_age_s=60)
    _, d = service.score_nodes(POD, ["node-0", "node-2", "ghost"])
    assert d.stale.tolist() == [False, True, True] and not d.excluded.any()
    assert d.scores[1] == d.scores[2] == NEUTRAL_SCORE
    assert service.filter(["node-0", "node-2", "ghost"]) == {}


def test_stale_and_unknown_nodes_fail_closed_are_excluded_and_filtered_by_reason(actor):
    snap = snapshot(4, age_s=[0, 0, 500, 0])
    service, _ = make_service(actor, snap, mode="fail-closed", max_age_s=60)
    _, d = service.score_nodes(POD, ["node-0", "node-2", "ghost"])
    assert d.excluded.tolist() == [False, True, True] and d.scores[1] == d.scores[2] == 0
    failed = service.filter(["node-0", "node-2", "ghost"])
    assert set(failed) == {"node-2", "ghost"}
    assert "500 s old, over 60 s" in failed["node-2"] and "no metrics" in failed["ghost"]


def test_no_fresh_candidate_falls_back_with_its_reason(actor):
    service, _ = make_service(actor, snapshot(3, age_s=[999, 999, 999]))
    _, d = service.score_nodes(POD, ["node-0", "node-1"])
    assert d.fallback_reason == "no_fresh_metrics" and np.all(d.scores == NEUTRAL_SCORE)


def test_safety_filter_names_the_observed_cpu(actor):
    snap = snapshot(3, cpu_util=[0.95, 0.5, 0.9])
    service, _ = make_service(actor, snap)
    failed = service.filter(list(snap.names))
    assert list(failed) == ["node-0"] and "observed CPU 95% of allocatable is above 90%" in failed["node-0"]


class BrokenActor:
    """An actor that answers ``value`` (or raises) with the real actor's interface."""

    def __init__(self, actor, value):
        self.value, self.action_size, self.action_mode = value, actor.action_size, actor.action_mode
        self.version, self.folder = "broken", "broken"

    def act(self, obs):
        if self.value is None:
            raise RuntimeError("model crashed")
        return np.full(self.action_size, self.value, dtype=np.float32)


@pytest.mark.parametrize("value, reason", [(float("nan"), "nan"), (7.0, "out_of_range"), (None, "model_error")])
def test_a_broken_model_falls_back_to_the_configured_arguments_counted_by_reason(actor, value, reason):
    snap = snapshot(5)
    service, clock = make_service(actor, snap)
    service.engine.models.actor = BrokenActor(actor, value)
    service.engine.fallback_weights, service.engine.fallback_tau = np.array([0.5, 0, 0.5, 0]), 0.0
    for _ in range(3):
        _, d = service.score_nodes(POD, list(snap.names))
    assert d.fallback_reason == reason
    u = utilisation(POD.request(clock()), np.arange(5), snap, np.zeros((5, 2)))
    np.testing.assert_allclose(d.scores, weighted_closeness(u, np.array([0.5, 0, 0.5, 0]), 0.0))
    assert service.metrics.fallbacks.labels(reason)._value.get() == 3


def test_bindings_raise_the_nodes_utilisation_until_a_newer_scrape(actor):
    snap = snapshot(3, cpu_util=[0.2, 0.2, 0.2])
    service, clock = make_service(actor, snap)
    _, before = service.score_nodes(POD, list(snap.names))
    for k in range(1, 5):  # each binding counts from the next decision on (the state keeps its sums between them)
        service.report_binding(PodSpec("x", cpu_milli=2000, mem_mib=4096), "node-1")
        _, after = service.score_nodes(POD, list(snap.names))
        assert after.utilisation[1, 0] == pytest.approx(before.utilisation[1, 0] + k * 2000 / 16000)
    assert after.utilisation[0, 0] == before.utilisation[0, 0]
    clock.t += 30  # a scrape after the bindings sees them: the cache no longer adds them
    newer = snapshot(3, cpu_util=[0.2, 0.7, 0.2], now=clock.t)
    service.engine.state.publish(newer)
    _, later = service.score_nodes(POD, list(snap.names))
    assert later.utilisation[1, 0] == pytest.approx(0.7 + 500 / 16000)
    with pytest.raises(KeyError):
        service.report_binding(POD, "ghost")


def test_a_burst_answered_before_its_bindings_counts_each_pod_where_it_was_answered(tmp_path):
    """kube-scheduler scores a burst back to back and binds each pod asynchronously: until a pod's binding is
    reported the engine counts its requests on the node its answer ranked first, so the burst does not pile
    onto the node that looked coolest; the binding's report moves it to its node, and a pod never reported
    bound stops counting after EXPECT_S."""
    from td3sched.engine.state import EXPECT_S, binding_key
    from td3sched.rl.onnx_actor import load_actor
    from td3sched.rl.static_model import write_static_model

    actor = load_actor(write_static_model("static-weights:w=1/0/0/0:tau=0", tmp_path / "idle", "tiny"))
    snap = snapshot(4, cpu_util=[0.3, 0.32, 0.34, 0.36])
    service, clock = make_service(actor, snap)
    pods = [PodSpec(f"batch-{i}", cpu_milli=4000, mem_mib=1024) for i in range(4)]
    tops = []
    for pod in pods:
        _, d = service.score_nodes(pod, list(snap.names))
        tops.append(int(d.scores.argmax()))
    assert tops == [0, 1, 2, 3]  # the coolest first, then each a quarter of a node hotter than it looked
    assert b"td3sched_expected_pods 4.0" in service.metrics.exposition()
    _, d = service.score_nodes(POD, list(snap.names))
    state = service.engine.state
    state.unexpect_pod(binding_key(POD.namespace, POD.name))
    base = [0.3, 0.32, 0.34, 0.36]
    np.testing.assert_allclose(d.utilisation[:, 0], np.add(base, 0.25 + 500 / 16000))
    service.report_binding(pods[0], "node-3")  # the scheduler put it elsewhere: it counts there alone
    _, d = service.score_nodes(POD, list(snap.names))
    state.unexpect_pod(binding_key(POD.namespace, POD.name))
    np.testing.assert_allclose(d.utilisation[:, 0], np.add(base, np.array([0, 0.25, 0.25, 0.5]) + 500 / 16000))
    clock.t += EXPECT_S  # the others never bound (they wait in the queue): they stop counting
    assert b"td3sched_expected_pods 0.0" in service.metrics.exposition()
    _, d = service.score_nodes(POD, list(snap.names))
    np.testing.assert_allclose(d.utilisation[:, 0], np.add(base, np.array([0, 0, 0, 0.25]) + 500 / 16000))
    with pytest.raises(ValueError, match=r"estimate_cpu_mem=\[-1, 0\]: expected \[CPU milli, memory MiB\]"):
        state.expect_pod("default/y", "", ["node-0"], [-1, 0])


def test_expected_pods_follow_their_nodes_by_name_when_the_node_set_changes():
    from tests.engine.conftest import Clock

    from td3sched.engine.state import NodeSnapshot, ShadowState

    state = ShadowState(Clock())
    state.publish(snapshot(3))
    state.expect_pod("default/a", "", ["node-2"], [4000, 1024])
    state.expect_pod("default/b", "", ["node-0", "node-2"], [1000, 0])
    assert state.recent_usage(state.snapshot).tolist() == [[500, 0], [0, 0], [4500, 1024]]
    s = snapshot(4)  # a node joins, and the source lists them in another order
    state.publish(NodeSnapshot(tuple(reversed(s.names)), s.allocatable, s.capacity_usage, s.observed, s.scraped_at_s,
                               taken_at_s=s.taken_at_s))
    assert state.recent_usage(state.snapshot).tolist() == [[0, 0], [4500, 1024], [0, 0], [500, 0]]
    state.unexpect_pod("default/a")
    state.unexpect_pod("default/b")
    assert state.recent_usage(state.snapshot) is None


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), cpu=st.floats(0, 64000), mem=st.floats(0, 1e6), qos=st.integers(0, 2),
       stale=st.lists(st.booleans(), min_size=40, max_size=40), seed=st.integers(0, 10))
def test_scores_stay_in_range_and_weights_on_the_simplex(actor, n, cpu, mem, qos, stale, seed):
    snap = snapshot(n, age_s=np.where(stale[:n], 1000.0, 0.0), seed=seed)
    service, _ = make_service(actor, snap)
    _, d = service.score_nodes(PodSpec("p", cpu_milli=cpu, mem_mib=mem, qos=qos), list(snap.names))
    assert np.all((d.scores >= 0) & (d.scores <= 1)) and len(d.scores) == n
    assert d.weights.sum() == pytest.approx(1.0) and np.all(d.weights >= 0) and 0 <= d.tau <= 1
    assert all(0 <= s <= 100 for s in d.scores_0_100())


@pytest.mark.parametrize("with_model", [True, False])
def test_warm_up_decides_on_its_own_cluster_and_leaves_the_served_state_alone(actor, with_model, tmp_path):
    from td3sched.engine.decision_log import DecisionLog

    snap = snapshot(3)
    log = DecisionLog(tmp_path / "decisions.jsonl")
    service, _ = make_service(actor if with_model else None, snap, log=log)
    service.engine.warm_up()
    assert service.engine.state.snapshot is snap and service.engine.state.assigned() == {}
    assert sum(s.value for m in service.metrics.decisions.collect() for s in m.samples if s.name.endswith("_total")) == 0
    log.close()
    assert (tmp_path / "decisions.jsonl").read_text() == ""
    _, d = service.score_nodes(POD, list(snap.names))  # and the engine decides as before
    assert d.fallback == (not with_model) and d.candidates == list(snap.names)


def test_a_model_that_holds_its_action_is_asked_once_per_hold(tmp_path):
    """A card's action_hold_s: decisions within the hold of the last action use it (action_held), as
    the simulator's td3 policy does; after the hold, or for another model, the actor is asked again."""
    torch = pytest.importorskip("torch")
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.onnx_actor import load_actor
    from td3sched.rl.td3 import TD3, TD3Config

    torch.manual_seed(0)
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16, 16)), seed=3)  # untrained: its action moves with the state
    agent.normalizer.update(np.random.default_rng(3).normal(size=(50, OBSERVATION_SIZE)))
    folder = tmp_path / "held"
    agent.save(folder, {"scenario": "tiny", "span": "train", "training": {"steps": 0}, "action_hold_s": 600})
    held = load_actor(folder)
    snap = snapshot(6)
    service, clock = make_service(held, snap, max_age_s=3600)
    _, first = service.score_nodes(POD, list(snap.names))
    clock.t += 300
    other = PodSpec("batch-7", cpu_milli=4000, mem_mib=8192, qos=2)
    _, second = service.score_nodes(other, list(snap.names))
    assert not first.action_held and second.action_held
    np.testing.assert_array_equal(second.pre_activations, first.pre_activations)
    assert not np.array_equal(held.act(second.observation), first.pre_activations)  # it would have chosen anew
    assert (first.action_valid_s, second.action_valid_s) == (600.0, 300.0)  # what a scheduler may reuse it for
    clock.t += 300  # the hold is over
    _, third = service.score_nodes(other, list(snap.names))
    assert not third.action_held and third.action_valid_s == 600.0
    np.testing.assert_array_equal(third.pre_activations, held.act(third.observation))


@pytest.mark.parametrize("mode, shadow", [("fail-closed", False), ("fail-open", True)])
def test_a_held_action_is_not_offered_for_reuse_where_a_scheduler_would_score_differently(tmp_path, mode, shadow):
    """action_valid_s is 0 under fail-closed staleness (its exclusions are the engine's, not the
    plugin's) and in shadow mode (the answer is advisory); a model without a hold offers 0 too."""
    torch = pytest.importorskip("torch")
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.onnx_actor import load_actor
    from td3sched.rl.td3 import TD3, TD3Config

    torch.manual_seed(0)
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16, 16)), seed=3)
    agent.normalizer.update(np.random.default_rng(3).normal(size=(50, OBSERVATION_SIZE)))
    agent.save(tmp_path / "held", {"scenario": "tiny", "span": "train", "training": {"steps": 0}, "action_hold_s": 600})
    agent.save(tmp_path / "per-pod", {"scenario": "tiny", "span": "train", "training": {"steps": 0}})
    snap = snapshot(6)
    service, _ = make_service(load_actor(tmp_path / "held"), snap, mode=mode, max_age_s=3600, shadow=shadow)
    _, d = service.score_nodes(POD, list(snap.names))
    assert not d.fallback and d.action_valid_s == 0.0
    service, _ = make_service(load_actor(tmp_path / "per-pod"), snap, max_age_s=3600)
    _, d = service.score_nodes(POD, list(snap.names))
    assert not d.fallback and d.action_valid_s == 0.0
