"""k8s-default against kube-scheduler's scores worked out by hand.

LeastAllocated (NodeResourcesFit, cpu and memory weight 1), integer arithmetic with memory in bytes:
    per resource: (alloc - req) * 100 // alloc   (0 when req > alloc)
    req = node's non-zero requested + pod's non-zero request (100m CPU / 200 MiB for an empty one)
    score = (cpu + mem) // 2
BalancedAllocation on actual requests: int((1 - |f_cpu - f_mem| / 2) * 100), f = min(1, req / alloc),
skipped for BestEffort pods.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest
from td3sched.policy.k8s_default import K8sDefault
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE

from tests.simulator.worlds import INF, P, node, pool, simulate, world

MIB = 1 << 20


def least_allocated_by_hand(nonzero_cpu, nonzero_mem_mib, alloc_cpu, alloc_mem_mib):
    """Go integer arithmetic: milli-CPU and bytes."""
    def one(req, cap):
        return 0 if req > cap else (cap - req) * 100 // cap
    return (one(int(nonzero_cpu), int(alloc_cpu)) + one(int(nonzero_mem_mib * MIB), int(alloc_mem_mib * MIB))) // 2


# Three nodes: (CPU milli, memory MiB), and what is already on them.
SHAPES = [(4000, 8192), (8000, 16384), (2000, 32768)]
#   n0: a pod requesting (1000m, 2048Mi)           requested (1000, 2048), non-zero (1000, 2048)
#   n1: a BestEffort pod                            requested (0, 0),       non-zero (100, 200)
#   n2: a pod requesting (500m, no memory)          requested (500, 0),     non-zero (500, 200)
REQUESTED = [(1000, 2048), (0, 0), (500, 0)]
NONZERO = [(1000, 2048), (100, 200), (500, 200)]

# A Burstable pod requesting (1500m, 3000Mi):
#   n0 LA: cpu (4000-2500)*100//4000 = 37; mem (8192-5048)*100//8192 = 314400//8192 = 38 -> 75//2 = 37
#      BA: f_cpu = 2500/4000 = 0.625, f_mem = 5048/8192 = 0.6162109375
#          1 - 0.0087890625/2 = 0.99560546875 -> 99                                 total 136
#   n1 LA: cpu (8000-1600)*100//8000 = 80; mem (16384-3200)*100//16384 = 80 -> 80
#      BA: f_cpu = 1500/8000 = 0.1875, f_mem = 3000/16384 = 0.18310546875
#          1 - 0.00439453125/2 = 0.997802734375 -> 99                               total 179
#   n2 LA: cpu (2000-2000)*100//2000 = 0; mem (32768-3200)*100//32768 = 90 -> 90//2 = 45
#      BA: f_cpu = 2000/2000 = 1, f_mem = 3000/32768 = 0.091552734375
#          1 - 0.908447265625/2 = 0.5457763671875 -> 54                             total 99
BURSTABLE_SCORES = [37 + 99, 80 + 99, 45 + 54]
# A BestEffort pod (non-zero 100m / 200Mi, no BalancedAllocation):
#   n0: cpu 2900*100//4000 = 72; mem 5944*100//8192 = 72 -> 72
#   n1: cpu 7800*100//8000 = 97; mem 15984*100//16384 = 97 -> 97
#   n2: cpu 1400*100//2000 = 70; mem 32368*100//32768 = 98 -> 168//2 = 84
BEST_EFFORT_SCORES = [72, 97, 84]


def _cluster():
    c = Cluster([pool(f"n{i}", node(cpu=cpu, mem=mem), 1) for i, (cpu, mem) in enumerate(SHAPES)])
    for i in range(3):
        c.requested[i, :2] = REQUESTED[i]
        c.free[i] = c.allocatable[i] - c.requested[i]
        c.nonzero_requested[i] = NONZERO[i]
    return c


def _req(cpu, mem, qos):
    return PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), 0, 0, qos, INF, INF, 0.0)


def test_hand_values_agree_with_the_integer_formula():
    # the comments above, recomputed with Go integer arithmetic (guards against arithmetic slips)
    for i, (cpu, mem) in enumerate(SHAPES):
        nz = NONZERO[i]
        assert least_allocated_by_hand(nz[0] + 100, nz[1] + 200, cpu, mem) == BEST_EFFORT_SCORES[i]
    assert [least_allocated_by_hand(NONZERO[i][0] + 1500, NONZERO[i][1] + 3000, *SHAPES[i]) for i in range(3)] \
        == [37, 80, 45]


def test_scores_of_a_burstable_pod():
    scores = K8sDefault().score(_req(1500, 3000, BURSTABLE), np.arange(3), _cluster())
    np.testing.assert_array_equal(scores, BURSTABLE_SCORES)


def test_scores_of_a_best_effort_pod_skip_balanced_allocation():
    scores = K8sDefault().score(_req(0, 0, BEST_EFFORT), np.arange(3), _cluster())
    np.testing.assert_array_equal(scores, BEST_EFFORT_SCORES)


def test_scores_of_a_subset_of_nodes_are_in_the_order_given():
    scores = make_policy("k8s-default").score(_req(1500, 3000, BURSTABLE), np.array([2, 0]), _cluster())
    np.testing.assert_array_equal(scores, [BURSTABLE_SCORES[2], BURSTABLE_SCORES[0]])


def test_non_zero_default_can_push_a_resource_past_allocatable():
    # one node (2000m, 8192Mi) whose CPU is fully requested, memory untouched (non-zero 200Mi);
    # a pod requesting only 1024Mi passes Filter (no CPU request) but counts 100m for scoring:
    #   LA: cpu 2000 + 100 > 2000 -> 0; mem (8192 - 1224)*100//8192 = 85 -> 85//2 = 42
    #   BA: f_cpu = min(2000/2000, 1) = 1, f_mem = 1024/8192 = 0.125 -> (1 - 0.4375)*100 = 56.25 -> 56
    c = Cluster([pool("a", node(cpu=2000, mem=8192), 1)])
    c.requested[0, 0] = 2000
    c.free[0] = c.allocatable[0] - c.requested[0]
    c.nonzero_requested[0] = (2000, 200)
    assert K8sDefault().score(_req(0, 1024, BURSTABLE), np.array([0]), c).tolist() == [42 + 56]


def test_simulator_picks_the_highest_score_with_its_own_bookkeeping():
    # the same three nodes, filled by pinned pods; the new pods may go anywhere
    pools = [pool(f"n{i}", node(cpu=cpu, mem=mem), 1) for i, (cpu, mem) in enumerate(SHAPES)]
    pods = [P("x", cpu=1000, mem=2048, pool="n0"), P("y", pool="n1"), P("z", cpu=500, pool="n2"),
            P("p", t=1, cpu=1500, mem=3000), P("q", t=2)]
    run = simulate(world(pools, pods), end_s=10)
    placed = {e["pod"]: e for e in run.of("placement")}
    assert placed["p"]["node"] == "n1-0000" and placed["p"]["score"] == max(BURSTABLE_SCORES) == 179
    assert placed["p"]["feasible"] == 3
    # q (BestEffort) after p landed on n1: n1's non-zero requested is (100 + 1500, 200 + 3000)
    #   n1: cpu (8000 - 1700)*100//8000 = 78; mem (16384 - 3400)*100//16384 = 79 -> 157//2 = 78
    #   n0: 72, n2: 84 (as before)  -> n2 wins with 84
    assert least_allocated_by_hand(1700, 3400, 8000, 16384) == 78
    assert placed["q"]["node"] == "n2-0000" and placed["q"]["score"] == 84


def test_ties_are_broken_at_random_and_reproducibly():
    pools = [pool("a", node(cpu=4000, mem=8192), 3)]   # three identical empty nodes
    pods = [P("p", cpu=1000, mem=1024)]
    w = world(pools, pods)
    chosen = [simulate(w, seed=s, end_s=10).node_of("p") for s in range(150)]
    counts = Counter(chosen)
    assert set(counts) == {"a-0000", "a-0001", "a-0002"}
    # uniform: each ~ Binomial(150, 1/3), mean 50, sd 5.8 -> [25, 75] is beyond 4 sd
    assert all(25 <= n <= 75 for n in counts.values()), counts
    # same seed, same choice
    assert [simulate(w, seed=s, end_s=10).node_of("p") for s in range(10)] == chosen[:10]


def test_two_tied_nodes_both_get_chosen_over_seeds():
    # node f holds a pinned pod (lower LeastAllocated); t0 and t1 are identical and empty: they tie
    shape = node(cpu=4000, mem=8192)
    pods = [P("filler", cpu=3000, mem=4096, pool="f"), P("p", t=1, cpu=500, mem=512)]
    w = world([pool("f", shape, 1), pool("t", shape, 2)], pods)
    seen = Counter(simulate(w, seed=s, end_s=10).node_of("p") for s in range(40))
    assert set(seen) == {"t-0000", "t-0001"}, seen
