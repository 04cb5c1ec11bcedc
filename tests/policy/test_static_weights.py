"""static-weights, its features and the assign cache, against hand-computed scores."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy import make_policy
from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.features import closeness, requested_utilisation
from td3sched.policy.static_weights import (StaticWeights, pod_balance, product_score, rounded_scores,
                                           served_scores, validate_weights)
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BURSTABLE
from tests.simulator.worlds import node, pool


def test_closeness_shape():
    u = np.array([0.0, 0.4, 1.0, 1.3])
    assert closeness(u, 0.0) == pytest.approx([1.0, 0.6, 0.0, 0.0])       # idle fraction, clipped
    assert closeness(u, 1.0) == pytest.approx([0.0, 0.4, 1.0, 0.7])       # most allocated
    # tau 0.4: 1 at 0.4, 0 at the far end 1.0 (distance 0.6); at 0: 1 - 0.4/0.6
    assert closeness(u, 0.4) == pytest.approx([1 - 0.4 / 0.6, 1.0, 0.0, 0.0])


def _cluster():
    c = Cluster([pool("p", node(4000, 8192, disk_mbps=1000, net_mbps=1000), 2)])
    # observed: CPU milli, memory MiB, disk MB/s, network Mbit/s
    c.observed[0] = [1000, 2048, 500, 0]
    c.observed[1] = [3000, 0, 0, 1000]
    c.last_scrape_s = 100.0
    return c


def _pod(t=110.0):
    return PodRequest(0, np.array([1000.0, 2048.0, 0.0, 0.0]), 0, 0, BURSTABLE, np.inf, np.inf, t)


def _attached(policy, c):
    policy.attach(PolicyContext(c, 30.0, 60.0, None, None))
    return policy


def test_static_weights_scores_by_hand():
    c = _cluster()
    p = _attached(StaticWeights([0.4, 0.3, 0.2, 0.1], tau=0.0), c)
    # node 0 with the pod: u = [(1000+1000)/4000, (2048+2048)/8192, 500/1000, 0/1000] = [.5, .5, .5, 0]
    #   tau 0 -> f = 1 - u = [.5, .5, .5, 1]; score = .4*.5 + .3*.5 + .2*.5 + .1*1 = 0.55
    # node 1: u = [(3000+1000)/4000, 2048/8192, 0, 1] = [1, .25, 0, 1] -> f = [0, .75, 1, 0]
    #   score = .3*.75 + .2*1 = 0.425
    assert p.score(_pod(), np.array([0, 1]), c) == pytest.approx([0.55, 0.425])


def test_tau_one_packs():
    c = _cluster()
    p = _attached(StaticWeights([1.0, 0.0, 0.0, 0.0], tau=1.0), c)
    # CPU utilisation with the pod: node 0 0.5, node 1 1.0 -> most-allocated prefers node 1
    assert p.score(_pod(), np.array([0, 1]), c) == pytest.approx([0.5, 1.0])


def test_assign_cache_adds_pods_bound_since_the_last_scrape():
    c = _cluster()
    p = _attached(StaticWeights([1.0, 0.0, 0.0, 0.0], tau=0.0), c)
    before = p.score(_pod(), np.array([0]), c)[0]          # 1 - 2000/4000 = 0.5
    p.bound(_pod(t=105.0), 0, c)                           # bound after the scrape at 100: invisible
    after = p.score(_pod(), np.array([0]), c)[0]           # 1 - (1000 + 1000 + 1000)/4000 = 0.25
    assert (before, after) == pytest.approx((0.5, 0.25))
    c.last_scrape_s = 130.0                                # the next scrape sees it: no correction
    assert p.score(_pod(), np.array([0]), c)[0] == pytest.approx(0.5)


def test_assign_cache_sums_per_node_and_forgets_old_entries():
    cache = AssignCache(3, horizon_s=60.0)
    cache.add(0, 10.0, [100, 10])
    cache.add(2, 20.0, [200, 20])
    cache.add(0, 50.0, [300, 30])
    assert cache.usage_since(15.0).tolist() == [[300, 30], [0, 0], [200, 20]]
    cache.add(1, 100.0, [1, 1])          # 10 and 20 are now older than the horizon (100 - 60 = 40)
    assert cache.size == 2
    assert cache.usage_since(0.0).tolist() == [[300, 30], [1, 1], [0, 0]]


def _summed_anew(cache: AssignCache, since_s: float) -> np.ndarray:
    """What ``usage_since`` answers summing the held entries afresh (the rule it keeps incrementally)."""
    out = np.zeros((cache.nodes, cache.estimate.shape[1]))
    recent = cache.time[: cache.size] >= since_s
    np.add.at(out, cache.node[: cache.size][recent], cache.estimate[: cache.size][recent])
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 30), st.floats(0, 1e4), st.floats(0, 1e4),
                          st.sampled_from(["same", "scrape", "back", "none"])), min_size=1, max_size=80))
def test_assign_cache_kept_sums_are_the_sums_anew_to_the_bit(steps):
    """The sums since a time are kept and updated as pods are added; whatever the order of adds,
    scrapes (a later since), earlier since times and entries ageing out, they are what summing the
    held entries anew gives, to the bit, and read-only."""
    cache = AssignCache(5, horizon_s=45.0, capacity=4)  # small: it grows too
    t, since = 0.0, 0.0
    for node, dt, cpu, mem, ask in steps:
        t += dt
        cache.add(node, t, [cpu, mem])
        if ask == "scrape":
            since = t - dt / 2
        elif ask == "back":
            since = max(0.0, since - 20.0)
        if ask != "none":
            got = cache.usage_since(since)
            np.testing.assert_array_equal(got, _summed_anew(cache, since))
            with pytest.raises(ValueError):
                got[0, 0] = 1.0


@pytest.mark.parametrize("weights,tau,match", [
    ([0.5, 0.5, 0.5, -0.5], 0.0, r"weights \[0.5, 0.5, 0.5, -0.5\]"),
    ([0.3, 0.3, 0.3, 0.3], 0.0, "summing to 1"),
    ([0.5, 0.5], 0.0, "4 non-negative"),
    ([0.25] * 4, 1.5, "tau=1.5"),
])
def test_bad_arguments_are_named(weights, tau, match):
    with pytest.raises(ValueError, match=match):
        validate_weights(weights, tau)


def test_spec_round_trip_and_errors():
    p = make_policy("static-weights:w=0.4/0.3/0.2/0.1:tau=0.5")
    assert p.weights.tolist() == [0.4, 0.3, 0.2, 0.1] and p.tau == 0.5
    assert p.spec == "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5"
    assert make_policy(p.spec).weights.tolist() == p.weights.tolist()
    with pytest.raises(ValueError, match="unknown argument"):
        make_policy("static-weights:x=1")
    with pytest.raises(ValueError, match="expected w=a/b/c/d"):
        make_policy("static-weights:w=a/b/c/d")
    with pytest.raises(ValueError, match="takes no arguments"):
        make_policy("random:x=1")


def test_the_older_spec_syntax_is_still_read():
    old = make_policy("static-weights:w=0.4,0.3,0.2,0.1;tau=0.5")
    assert old.weights.tolist() == [0.4, 0.3, 0.2, 0.1] and old.tau == 0.5
    assert old.spec == "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5"
    assert make_policy("k8s-most-allocated:cpu_weight=3;mem_weight=1").args == \
        make_policy("k8s-most-allocated:cpu_weight=3:mem_weight=1").args


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.001, 10), min_size=4, max_size=4), st.floats(0, 1))
def test_a_printed_spec_needs_no_shell_quoting_and_reads_back(raw, tau):
    """The shell ate the ``;tau=...`` of the older syntax: a spec as printed (best-static's stored
    result, a run record) must survive being pasted unquoted, and split whole out of --policies."""
    import shlex

    from td3sched.evaluate.grid import split_policies

    p = StaticWeights(np.array(raw) / np.sum(raw), tau)
    assert shlex.quote(p.spec) == p.spec  # no character a POSIX shell treats specially
    assert shlex.split(f"td3sched simulate --policy {p.spec}")[-1] == p.spec
    back = make_policy(p.spec)
    assert np.allclose(back.weights, p.weights, atol=1e-5) and back.tau == pytest.approx(p.tau, abs=1e-5)
    assert split_policies([f"k8s-default,{p.spec},random"], ["k8s-default", "static-weights", "random"]) == [
        "k8s-default", p.spec, "random"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 10), min_size=4, max_size=4), st.floats(0, 1))
def test_scores_of_simplex_weights_stay_in_unit_interval(raw, tau):
    w = np.array(raw) / np.sum(raw)
    c = _cluster()
    p = _attached(StaticWeights(w / w.sum(), tau), c)
    s = p.score(_pod(), np.array([0, 1]), c)
    assert np.all((s >= -1e-12) & (s <= 1 + 1e-12))


def test_the_ceiling_holds_a_pod_off_nodes_it_would_push_over_and_scores_the_rest():
    c = _cluster()
    # CPU utilisation with the pod: node 0 (1000+1000)/4000 = 0.5, node 1 (3000+1000)/4000 = 1.0
    packer = _attached(StaticWeights([1.0, 0.0, 0.0, 0.0], tau=1.0, ceiling=0.75), c)
    pod, nodes = _pod(), np.array([0, 1])
    keep = packer.filter(pod, nodes, c)
    assert keep.tolist() == [True, False]                    # tau 1 alone would pack onto node 1
    assert packer.score(pod, nodes[keep], c) == pytest.approx([0.5])
    assert packer.filter(pod, np.array([1]), c).tolist() == [False]   # nothing left: the pod waits
    # at the boundary the node stays; no ceiling keeps every node
    assert _attached(StaticWeights([1.0, 0.0, 0.0, 0.0], 1.0, ceiling=1.0), c).filter(pod, nodes, c).all()
    assert _attached(StaticWeights([1.0, 0.0, 0.0, 0.0], 1.0), c).filter(pod, nodes, c) is None


def test_the_ceiling_in_a_run_keeps_the_pod_pending_until_a_node_has_room():
    from tests.simulator.worlds import P, constant_profiles, simulate, world

    # one 4000m node; "hog" uses 3000m from 0 s to 600 s; "b" (500m) arrives at 100 s. With a 0.8
    # ceiling, b would take the node to (3000 + 500) / 4000 = 0.875 once the hog is observed: it waits
    # until the hog is gone (at most two scrapes later).
    pods = [P("hog", t=0.0, dur=600.0, cpu=3000, size_cpu=3000), P("b", t=100.0, cpu=500)]
    run = simulate(world([pool("p", node(4000, 8192), 1)], pods, constant_profiles()),
                   make_policy("static-weights:ceiling=0.8"), end_s=1200)
    placed = {e["pod"]: e["t"] for e in run.of("placement")}
    assert placed["hog"] == 0.0 and 600.0 <= placed["b"] <= 720.0
    no_ceiling = simulate(world([pool("p", node(4000, 8192), 1)], pods, constant_profiles()),
                          make_policy("static-weights"), end_s=1200)
    assert {e["pod"]: e["t"] for e in no_ceiling.of("placement")}["b"] == 100.0


@pytest.mark.parametrize("spec", ["static-weights:ceiling=0", "static-weights:ceiling=1.6",
                                  "static-weights:ceiling=nan", "static-weights:ceiling=x"])
def test_a_bad_ceiling_is_refused_by_name(spec):
    with pytest.raises(ValueError, match="ceiling"):
        make_policy(spec)


def test_a_spec_with_a_ceiling_reads_back():
    p = make_policy("static-weights:w=0.4/0.3/0.2/0.1:tau=0.5:ceiling=0.75")
    assert p.ceiling == 0.75 and make_policy(p.spec).spec == p.spec
    assert "ceiling" not in make_policy("static-weights").spec


def _requested_cluster():
    """``_cluster`` with requests bound: node 0 none (its usage is high), node 1 most of it (its usage is
    low in memory); with ``_pod`` on them, by requests: node 0 [.25, .25], node 1 [.75, 1]."""
    c = _cluster()
    c.nonzero_requested[0] = [0.0, 0.0]
    c.nonzero_requested[1] = [2000.0, 6144.0]
    return c


def test_a_requests_share_scores_cpu_and_memory_by_requests():
    c = _requested_cluster()
    pod, nodes = _pod(), np.array([0, 1])
    # by requests, with the pod: node 0 [1000/4000, 2048/8192] = [.25, .25]; node 1 [3000/4000, 8192/8192] = [.75, 1]
    least = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0:req=1"), c)
    assert least.score(pod, nodes, c) == pytest.approx([0.75, 0.125])
    # by usage (test_static_weights_scores_by_hand's utilisations): node 0 [.5, .5], node 1 [1, .25]
    usage = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0"), c)
    assert usage.score(pod, nodes, c) == pytest.approx([0.5, 0.375])
    # half and half: the mean of the two utilisations
    half = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0:req=0.5"), c)
    assert half.score(pod, nodes, c) == pytest.approx([0.625, 0.25])
    # the ceiling reads observed usage whatever the share: node 1's CPU with the pod is 1.0 by usage
    ceiling = _attached(make_policy("static-weights:w=0.5/0.5/0/0:ceiling=0.9:req=1"), c)
    assert ceiling.filter(pod, nodes, c).tolist() == [True, False]
    assert ceiling.score(pod, nodes[:1], c) == pytest.approx([0.75])


@pytest.mark.parametrize("key, attribute", [("req", "requests"), ("bal", "balance"), ("frag", "fragmentation")])
def test_a_share_rounds_trips_its_spec_and_refuses_a_bad_one(key, attribute):
    p = make_policy(f"static-weights:w=0.5/0.5/0/0:tau=0:{key}=0.75")
    assert getattr(p, attribute) == 0.75 and make_policy(p.spec).spec == p.spec and p.spec.endswith(f":{key}=0.75")
    assert key not in make_policy(f"static-weights:{key}=0").spec  # the default: no share
    for bad in ("-0.1", "1.01", "nan", "x"):
        with pytest.raises(ValueError, match=key):
            make_policy(f"static-weights:{key}={bad}")


def test_a_balance_share_blends_the_score_with_how_alike_cpu_and_memory_fill():
    from td3sched.workload.pods import BEST_EFFORT

    c = _requested_cluster()
    pod, nodes = _pod(), np.array([0, 1])
    # by requests, with the pod: node 0 [.25, .25] (balance 1), node 1 [.75, 1] (balance 1 - .25/2 = .875);
    # LeastAllocated [.75, .125] (test_a_requests_share_scores_cpu_and_memory_by_requests)
    kube = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0:req=1:bal=0.5"), c)
    assert kube.score(pod, nodes, c) == pytest.approx([(0.75 + 1) / 2, (0.125 + 0.875) / 2])
    only = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0:req=1:bal=1"), c)
    assert only.score(pod, nodes, c) == pytest.approx([1.0, 0.875])
    # by usage (node 0 [.5, .5], node 1 [1, .25]): the balance of usage
    usage = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0:bal=1"), c)
    assert usage.score(pod, nodes, c) == pytest.approx([1.0, 1 - 0.75 / 2])
    # a BestEffort pod is scored without the term, as BalancedAllocation skips it
    best_effort = dataclasses.replace(pod, qos=BEST_EFFORT)
    assert kube.score(best_effort, nodes, c) == pytest.approx([0.75, 0.125])
    assert make_policy(kube.spec).spec == kube.spec and kube.spec.endswith(":req=1:bal=0.5")


def test_scores_as_served_are_the_front_doors_whole_numbers():
    c = _cluster()
    pod, nodes = _pod(), np.array([0, 1])
    exact = _attached(make_policy("static-weights:w=0.5/0.5/0/0:tau=0"), c).score(pod, nodes, c)
    served = make_policy("static-weights:w=0.5/0.5/0/0:tau=0")
    served.attach(PolicyContext(c, 30.0, 60.0, None, None, score_levels=100))
    np.testing.assert_array_equal(served.score(pod, nodes, c), np.rint(100 * exact))
    assert served.score(pod, nodes, c).tolist() == [50.0, 38.0]  # 0.5 and 0.375, half to even


def test_requests_and_balance_rank_nodes_as_kube_schedulers_default_scoring():
    """With requests alone, weights (1/2, 1/2, 0, 0) at tau 0 and a balance share of 1/2, the score is
    kube-scheduler's default scoring (LeastAllocated plus BalancedAllocation, k8s-default) halved, before
    their rounding: over a run's decisions the best node by the score is within a point of k8s-default's
    best (the two roundings) and one of them in more than 95% of decisions; without the balance term,
    or with it for BestEffort pods too, in far fewer."""
    from td3sched.policy.k8s_default import K8sDefault
    from td3sched.scenario import load_scenario
    from td3sched.simulator.engine import Simulation

    k8s = K8sDefault()
    gaps = {"kube": [], "no balance": [], "balance for every pod": []}

    class Checking(StaticWeights):
        def score(self, pod, nodes, cluster):
            s = super().score(pod, nodes, cluster)
            k = k8s.score(pod, nodes, cluster)
            u = self.utilisation(pod, nodes, cluster)
            r = requested_utilisation(pod, nodes, cluster)
            for name, balance in (("kube", pod_balance(0.5, pod.qos)), ("no balance", 0.0),
                                  ("balance for every pod", 0.5)):
                chosen = np.argmax(product_score(u, r, self.weights, self.tau, 1.0, balance))
                gaps[name].append(k.max() - k[chosen])
            return s

    scenario = load_scenario("tiny")
    start, end = scenario.span("test")
    Simulation(scenario.build(1), Checking([0.5, 0.5, 0.0, 0.0], 0.0, requests=1.0, balance=0.5), 1, start,
               end).run()
    kube = np.array(gaps["kube"])
    assert len(kube) > 200 and kube.max() <= 1 and np.mean(kube == 0) > 0.95
    for other in ("no balance", "balance for every pod"):
        assert np.mean(np.equal(gaps[other], 0)) < 0.9, other


def test_requests_only_ranks_nodes_as_kube_schedulers_least_allocated():
    """With requests alone and weights (1/2, 1/2, 0, 0) at tau 0, the score is LeastAllocated before its
    rounding: over a run's decisions the best node by the score is within LeastAllocated's rounding
    (it floors each resource's score to a whole number, then their mean) of LeastAllocated's best, and
    most often one of them."""
    from td3sched.policy.k8s_default import MIB, least_allocated
    from td3sched.scenario import load_scenario
    from td3sched.simulator.engine import Simulation

    checked = []

    class Checking(StaticWeights):
        def score(self, pod, nodes, cluster):
            s = super().score(pod, nodes, cluster)
            req = cluster.nonzero_requested[nodes] + pod.nonzero_cpu_mem
            la = least_allocated(req[:, 0], req[:, 1] * MIB, cluster.allocatable[nodes, 0],
                                 cluster.allocatable[nodes, 1] * MIB)
            r = requested_utilisation(pod, nodes, cluster)
            np.testing.assert_allclose(s, 1 - r.clip(0, 1).mean(axis=1), rtol=1e-12, atol=1e-12)
            checked.append(la.max() - la[np.argmax(s)])
            return s

    scenario = load_scenario("tiny")
    start, end = scenario.span("test")
    Simulation(scenario.build(1), Checking([0.5, 0.5, 0.0, 0.0], 0.0, requests=1.0), 1, start, end).run()
    assert len(checked) > 200 and max(checked) <= 1 and np.mean(np.equal(checked, 0)) > 0.9


def test_the_fragmentation_share_blends_the_score_with_fgds_each_scaled_over_the_candidates():
    from td3sched.policy.static_weights import blend_fragmentation, minmax

    scores, gradient = np.array([0.2, 0.6, 0.4]), np.array([-30.0, -10.0, 10.0])   # fgd: higher grows less
    assert minmax(scores) == pytest.approx([0.0, 1.0, 0.5]) and minmax(gradient) == pytest.approx([0.0, 0.5, 1.0])
    assert blend_fragmentation(scores, gradient, 0.25) == pytest.approx([0.0, 0.75 + 0.125, 0.375 + 0.25])
    assert blend_fragmentation(scores, gradient, 0.0) is scores                      # no share: the score itself
    assert minmax(np.array([3.0, 3.0])).tolist() == [0.0, 0.0] and minmax(np.array([])).size == 0


def test_a_fragmentation_share_of_one_places_as_fgd_and_a_share_between_differs_from_both():
    """Scaling keeps FGD's order and ties, so the share 1 is fgd's run to the last digit; the product's
    score with a share of 0.5 is a third policy."""
    from td3sched.run import run_simulation

    def cost(spec):
        return run_simulation("tiny", spec, 1, span="test")["metrics"]["cost_node_hours"]

    fgd = cost("fgd")
    assert cost("static-weights:w=1/0/0/0:tau=0.4:frag=1") == fgd
    half = cost("static-weights:w=1/0/0/0:tau=0.4:frag=0.5")
    assert half != fgd and half != cost("static-weights:w=1/0/0/0:tau=0.4")


def test_a_fragmentation_share_anchors_only_an_actor_of_the_fragmentation_mode():
    from td3sched.rl.actions import decode, encode, static_score_args

    spec = "static-weights:w=1/0/0/0:tau=0.4:frag=0.25"
    with pytest.raises(ValueError, match="needs the action mode 'fragmentation'"):
        static_score_args(spec, "full")
    args = static_score_args(spec, "fragmentation")
    assert args.fragmentation == 0.25
    assert decode(encode(args, "fragmentation"), "fragmentation").fragmentation == pytest.approx(0.25)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.04, 0.3, 0.31, 0.349, 0.35, 0.5, 0.96, 1.0]) | st.floats(0, 1), min_size=1,
                max_size=12),
       st.sampled_from([10, 100]), st.integers(0, 2**32 - 1))
def test_served_scores_keep_the_best_alone_at_the_top_where_the_extender_answers(scores, levels, seed):
    """At the extender's 0-10 the nodes of the best score (among the eligible) hold the top level alone, the
    others are at most a level below their rounding; ScoreNodes' 0-100 are the rounding itself."""
    eligible = np.random.default_rng(seed).random(len(scores)) < 0.8
    s = np.where(eligible, scores, 0.0)  # as the engine scores excluded and held-back nodes
    q, rounded = served_scores(s, levels, eligible), rounded_scores(s, levels)
    assert np.all((0 <= q) & (q <= levels)) and np.all(q == np.rint(q))
    if levels == 100 or not eligible.any():
        np.testing.assert_array_equal(q, rounded)
        return
    best = eligible & (s == s[eligible].max())
    assert set(np.flatnonzero(q == q.max())) == set(np.flatnonzero(best))
    assert np.all(q[~best] >= rounded[~best] - 1) and np.all(q[~best] <= rounded[~best])
    assert np.all(q[best] == max(rounded[best].max(), 1))

