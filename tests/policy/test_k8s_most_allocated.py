"""k8s-most-allocated against kube-scheduler's scores worked out by hand.

MostAllocated (NodeResourcesFit, cpu and memory weight 1), Go integer arithmetic:
    per resource: min(req, alloc) * 100 // alloc,   req = node's non-zero requested + pod's non-zero request
    score = (w_cpu * cpu + w_mem * mem) // (w_cpu + w_mem)
BalancedAllocation on actual requests: int((1 - |f_cpu - f_mem| / 2) * 100), skipped for BestEffort pods.
Memory is counted in bytes; MiB x 2^20 cancels in every quotient, so the arithmetic below is in MiB.
"""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest
from td3sched.policy.k8s_most_allocated import K8sMostAllocated, MostAllocatedArgs
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE

from tests.simulator.worlds import INF, P, node, pool, simulate, world

# (CPU milli, memory MiB) of three nodes, their pods' requests and the non-zero requests:
#   n0: a pod requesting (1000m, 2048Mi)     n1: a BestEffort pod     n2: a pod requesting (500m, no memory)
SHAPES = [(4000, 8192), (8000, 16384), (2000, 32768)]
REQUESTED = [(1000, 2048), (0, 0), (500, 0)]
NONZERO = [(1000, 2048), (100, 200), (500, 200)]

# A Burstable pod requesting (1500m, 3000Mi):
#   n0 MA: cpu 2500*100//4000 = 250000//4000 = 62;  mem 5048*100//8192 = 504800//8192 = 61  -> 123//2 = 61
#      BA: f_cpu = 2500/4000 = 0.625, f_mem = 5048/8192 = 0.6162109375
#          1 - 0.0087890625/2 = 0.99560546875 -> 99                                      total 160
#   n1 MA: cpu 1600*100//8000 = 20;  mem 3200*100//16384 = 320000//16384 = 19           -> 39//2 = 19
#      BA: f_cpu = 1500/8000 = 0.1875, f_mem = 3000/16384 = 0.18310546875
#          1 - 0.00439453125/2 = 0.997802734375 -> 99                                    total 118
#   n2 MA: cpu 2000*100//2000 = 100; mem 3200*100//32768 = 320000//32768 = 9            -> 109//2 = 54
#      BA: f_cpu = 2000/2000 = 1, f_mem = 3000/32768 = 0.091552734375
#          1 - 0.908447265625/2 = 0.5457763671875 -> 54                                  total 108
BURSTABLE_SCORES = [61 + 99, 19 + 99, 54 + 54]
# A BestEffort pod (non-zero 100m / 200Mi, no BalancedAllocation):
#   n0: cpu 1100*100//4000 = 27;  mem 2248*100//8192 = 224800//8192 = 27   -> 27
#   n1: cpu 200*100//8000 = 2;    mem 400*100//16384 = 40000//16384 = 2    -> 2
#   n2: cpu 600*100//2000 = 30;   mem 400*100//32768 = 40000//32768 = 1    -> 31//2 = 15
BEST_EFFORT_SCORES = [27, 2, 15]


def _cluster():
    c = Cluster([pool(f"n{i}", node(cpu=cpu, mem=mem), 1) for i, (cpu, mem) in enumerate(SHAPES)])
    for i in range(3):
        c.requested[i, :2] = REQUESTED[i]
        c.free[i] = c.allocatable[i] - c.requested[i]
        c.nonzero_requested[i] = NONZERO[i]
    return c


def _req(cpu, mem, qos):
    return PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), 0, 0, qos, INF, INF, 0.0)


def test_scores_of_a_burstable_pod():
    scores = K8sMostAllocated().score(_req(1500, 3000, BURSTABLE), np.arange(3), _cluster())
    np.testing.assert_array_equal(scores, BURSTABLE_SCORES)


def test_scores_of_a_best_effort_pod_skip_balanced_allocation():
    scores = K8sMostAllocated().score(_req(0, 0, BEST_EFFORT), np.arange(3), _cluster())
    np.testing.assert_array_equal(scores, BEST_EFFORT_SCORES)


def test_a_request_above_allocatable_counts_as_allocatable():
    # one node (2000m, 8192Mi) whose CPU is fully requested; a pod requesting only 1024Mi counts 100m:
    #   MA: cpu 2000 + 100 > 2000 -> 2000*100//2000 = 100; mem (200 + 1024)*100//8192 = 122400//8192 = 14
    #       -> 114//2 = 57
    #   BA: f_cpu = 1, f_mem = 1024/8192 = 0.125 -> (1 - 0.4375)*100 = 56.25 -> 56
    c = Cluster([pool("a", node(cpu=2000, mem=8192), 1)])
    c.requested[0, 0] = 2000
    c.free[0] = c.allocatable[0] - c.requested[0]
    c.nonzero_requested[0] = (2000, 200)
    assert K8sMostAllocated().score(_req(0, 1024, BURSTABLE), np.array([0]), c).tolist() == [57 + 56]


def test_resource_weights_from_the_spec():
    # cpu 3, memory 1, the Burstable pod: MA = (3 * cpu + mem) // 4, BA unchanged
    #   n0: (3*62 + 61)//4 = 247//4 = 61 -> 160;  n1: (3*20 + 19)//4 = 79//4 = 19 -> 118
    #   n2: (3*100 + 9)//4 = 309//4 = 77 -> 77 + 54 = 131
    policy = make_policy("k8s-most-allocated:cpu_weight=3;mem_weight=1")
    assert policy.args == MostAllocatedArgs(cpu_weight=3, mem_weight=1)
    scores = policy.score(_req(1500, 3000, BURSTABLE), np.arange(3), _cluster())
    np.testing.assert_array_equal(scores, [160, 118, 131])


@pytest.mark.parametrize("spec, message", [
    ("cpu_weight=0", "cpu_weight=0: expected a whole number in [1, 100]"),
    ("mem_weight=101", "mem_weight=101: expected a whole number in [1, 100]"),
    ("cpu_weight=1.5", "cpu_weight='1.5': expected a whole number"),
    ("weight=1", "unknown argument(s) ['weight']"),
    ("cpu_weight", "expected key=value"),
])
def test_bad_arguments_are_named(spec, message):
    with pytest.raises(ValueError) as err:
        K8sMostAllocated.from_spec(spec)
    assert message in str(err.value)


def test_the_simulator_packs_the_second_pod_onto_the_first_ones_node():
    # two empty (4000m, 8192Mi) nodes; p (1000m, 1024Mi) ties and lands at random, then q (1000m,
    # 1024Mi) scores on p's node: MA cpu 2000*100//4000 = 50, mem 2048*100//8192 = 25 -> 75//2 = 37;
    # BA f = (0.5, 0.25) -> (1 - 0.125)*100 = 87.5 -> 87: 124. On the empty node: MA cpu 25, mem 12
    # -> 37//2 = 18; BA f = (0.25, 0.125) -> 93.75 -> 93: 111. q joins p.
    w = world([pool("a", node(cpu=4000, mem=8192), 2)], [P("p", cpu=1000, mem=1024), P("q", t=1, cpu=1000, mem=1024)])
    for seed in range(4):
        run = simulate(w, policy=K8sMostAllocated(), seed=seed, end_s=10)
        placed = {e["pod"]: e for e in run.of("placement")}
        assert placed["q"]["node"] == placed["p"]["node"] and placed["q"]["score"] == 37 + 87
