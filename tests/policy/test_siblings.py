"""The sibling spread: counting each workload's running pods per node, and the score term that keeps them apart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy import make_policy
from td3sched.policy.siblings import Siblings, spread_siblings, validate_spread
from tests.simulator.worlds import P, constant_profiles, node, pool, simulate, world


def test_siblings_count_bindings_and_releases_per_workload_and_node():
    s = Siblings()
    s.add("a", 3)
    s.add("a", 3)
    s.add("a", 7)
    s.add("b", 3)
    s.add(None, 3)                                   # a pod of its own: nobody's sibling
    assert s.counts("a", np.array([7, 3, 5])).tolist() == [1.0, 2.0, 0.0]
    assert s.counts("b", np.array([3, 7])).tolist() == [1.0, 0.0]
    assert s.counts("c", np.array([3])).tolist() == [0.0] and s.counts(None, np.array([3])).tolist() == [0.0]
    s.remove("a", 3)
    s.remove("a", 7)
    assert s.nodes_of("a") == {3: 1} and len(s) == 2
    s.remove("a", 3)
    s.remove("b", 3)
    assert len(s) == 0 and s.nodes_of("a") == {}
    with pytest.raises(ValueError, match="workload 'a' counted on node 3"):
        s.remove("a", 3)                             # a release without its binding is a bookkeeping error


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), max_size=40), st.lists(st.integers(0, 25), max_size=30))
def test_sibling_counts_are_a_bincount_of_the_running_pods(pods, candidates):
    s = Siblings()
    for app, n in pods:
        s.add(app, n)
    nodes = np.array(candidates, dtype=np.int64)
    for app in range(4):
        on = [n for a, n in pods if a == app]
        expected = np.bincount(np.array(on, dtype=np.int64), minlength=26)[nodes] if len(nodes) else np.zeros(0)
        assert s.counts(app, nodes).tolist() == expected.tolist()


def test_the_spread_lowers_a_node_by_its_siblings_and_keeps_scores_in_the_unit_interval():
    scores = np.array([0.9, 0.2, 0.5, 1.0])
    siblings = np.array([1, 0, 0, 3])
    assert spread_siblings(scores, siblings, 0.0) is scores            # no term: the score itself
    out = spread_siblings(scores, siblings, 3.0)
    # (s + 3 / (n + 1)) / 4
    assert out == pytest.approx([(0.9 + 1.5) / 4, (0.2 + 3) / 4, (0.5 + 3) / 4, (1.0 + 0.75) / 4])
    assert np.all((out >= 0) & (out <= 1))
    # with a spread above 1 every node without a sibling outranks every node with one
    assert out[[1, 2]].min() > out[[0, 3]].max()
    # the order is that of s - spread x n / (n + 1)
    assert np.argsort(out).tolist() == np.argsort(scores - 3.0 * siblings / (siblings + 1)).tolist()


@pytest.mark.parametrize("bad", [-0.5, 101, float("nan"), float("inf"), "x", True])
def test_a_bad_spread_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="spread"):
        validate_spread(bad)
    with pytest.raises(ValueError, match="spread"):
        make_policy(f"static-weights:spread={bad}")


def test_a_spec_with_a_spread_reads_back():
    p = make_policy("static-weights:w=1/0/0/0:tau=0.4:frag=0.25:spread=3")
    assert p.spread == 3.0 and p.spec.endswith(":frag=0.25:spread=3") and make_policy(p.spec).spec == p.spec
    assert "spread" not in make_policy("static-weights:spread=0").spec
    assert not make_policy("static-weights").counts_releases and p.counts_releases


def _replicas(app_b: str):
    """Two 4000m nodes; "a" (app "svc") arrives first, "b" (app ``app_b``) a second later, "c" (app "svc")
    runs from 2 s to 12 s. The score packs (tau 1): the assign cache makes a's node the fuller one."""
    return [P("a", t=0.0, cpu=500, app="svc"), P("b", t=1.0, cpu=500, app=app_b),
            P("c", t=2.0, dur=10.0, cpu=500, app="svc")]


def test_in_a_run_the_spread_keeps_replicas_apart_and_forgets_a_sibling_that_left():
    nodes = [pool("p", node(4000, 8192), 2)]
    for seed in range(4):
        run = simulate(world(nodes, _replicas("svc"), constant_profiles()),
                       make_policy("static-weights:w=1/0/0/0:tau=1:spread=3"), end_s=60, seed=seed)
        placed = {e["pod"]: e["node"] for e in run.of("placement")}
        assert placed["a"] != placed["b"]          # b is a's sibling: the other node, against the packing
        assert run.sim.policy.siblings.nodes_of(run.sim.w.app[0]) != {}
        assert len(run.sim.policy.siblings) == 2   # c left at 12 s: a and b remain counted
        other = simulate(world(nodes, _replicas("other"), constant_profiles()),
                         make_policy("static-weights:w=1/0/0/0:tau=1:spread=3"), end_s=60, seed=seed)
        placed = {e["pod"]: e["node"] for e in other.of("placement")}
        assert placed["a"] == placed["b"]          # no sibling: the score packs as it would without the term
        plain = simulate(world(nodes, _replicas("svc"), constant_profiles()),
                         make_policy("static-weights:w=1/0/0/0:tau=1"), end_s=60, seed=seed)
        placed = {e["pod"]: e["node"] for e in plain.of("placement")}
        assert placed["a"] == placed["b"]          # without the spread the replicas pack together
