"""k8s-default-spread: k8s-default plus PodTopologySpread's system default hostname constraint, against
kube-scheduler's arithmetic worked out by hand (podtopologyspread/scoring.go), and in a run."""

from __future__ import annotations

import math

import numpy as np

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest
from td3sched.policy.k8s_default import K8sDefault
from td3sched.policy.k8s_default_spread import topology_spread_scores
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BURSTABLE
from tests.simulator.worlds import INF, P, constant_profiles, node, pool, simulate, world


def test_the_topology_spread_scores_are_kube_scheduler_s_by_hand():
    # three candidates with 0, 1 and 2 siblings; weight log(3 + 2) = 1.609; maxSkew 3 adds 2:
    #   raw = round(2) = 2, round(3.609) = 4, round(5.219) = 5; min 2, max 5
    #   normalised: 100 * (5 + 2 - raw) // 5 = 100, 60, 40
    assert math.isclose(math.log(5), 1.6094, abs_tol=1e-4)
    assert topology_spread_scores(np.array([0, 1, 2])).tolist() == [100, 60, 40]
    # no candidate runs a sibling: every raw score is maxSkew - 1 = 2, all normalise to 100
    assert topology_spread_scores(np.zeros(4)).tolist() == [100] * 4
    # one sibling over 40 candidates: raw 2 + log(42) = 5.74 -> 6 against 2; 100 * (8 - 6) // 6 = 33
    counts = np.zeros(40)
    counts[7] = 1
    scores = topology_spread_scores(counts)
    assert scores[7] == 33 and (np.delete(scores, 7) == 100).all()
    assert topology_spread_scores(np.zeros(0)).tolist() == []


def _req(app) -> PodRequest:
    return PodRequest(0, np.array([500.0, 512.0, 0.0, 0.0]), 0, 0, BURSTABLE, INF, INF, 0.0, app=app)


def _cluster() -> Cluster:
    return Cluster([pool("a", node(cpu=4000, mem=8192), 3)])


def test_a_pod_s_siblings_lower_its_nodes_by_twice_the_plugin_s_score_and_a_pod_without_an_app_is_not_spread():
    c = _cluster()
    policy = make_policy("k8s-default-spread")
    replica = _req(app=7)
    base = K8sDefault().score(replica, np.arange(3), c)
    policy.bound(replica, 1, c)
    policy.bound(replica, 2, c)
    policy.bound(replica, 2, c)
    got = policy.score(replica, np.arange(3), c)
    np.testing.assert_array_equal(got - base, 2 * np.array([100, 60, 40]))
    loner = _req(app=None)
    np.testing.assert_array_equal(policy.score(loner, np.arange(3), c), base)
    other = _req(app=8)
    np.testing.assert_array_equal(policy.score(other, np.arange(3), c), base + 200)
    policy.released(replica, 2, c)  # 0, 1, 1 siblings: raw 2, 4, 4; 100 * (4 + 2 - raw) // 4 = 100, 50, 50
    np.testing.assert_array_equal(policy.score(replica, np.arange(3), c) - base, 2 * np.array([100, 50, 50]))


def test_in_a_run_replicas_that_k8s_default_stacks_are_spread():
    # two nodes, one already half requested; k8s-default puts both replicas on the emptier node, the
    # default topology spread sends the second to the other: 2 * (100 - 50) outweighs the requests' gap
    nodes = [pool("n", node(4000, 8192), 2)]
    pods = [P("fill", cpu=1000, mem=1024, dur=1e6, pool="n"), P("a", t=1.0, cpu=200, mem=256, app="svc"),
            P("b", t=2.0, cpu=200, mem=256, app="svc")]
    for seed in range(4):
        plain = simulate(world(nodes, pods, constant_profiles()), make_policy("k8s-default"), end_s=30, seed=seed)
        spread = simulate(world(nodes, pods, constant_profiles()), make_policy("k8s-default-spread"), end_s=30,
                          seed=seed)
        assert plain.node_of("a") == plain.node_of("b") != plain.node_of("fill")
        assert spread.node_of("a") != spread.node_of("b")
        assert spread.sim.policy.counts_releases
