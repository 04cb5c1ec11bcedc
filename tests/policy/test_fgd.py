"""fgd against fragmentation growth worked out by hand, and its GPU assignment against Bind's.

    F_n = max(freeCPU_n, 0) * sum_m p_m * [typical pod m does not fit node n]
    score_n = -(F_n(after the pod) - F_n(before))
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.metrics.fragmentation import PoolTypicalPods, TypicalPods
from td3sched.metrics.gpu_fragmentation import GpuTypicalPods
from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.fgd import FGD, assign_gpus
from td3sched.scenario import load_scenario
from td3sched.simulator.cluster import GPU_MILLI, Cluster
from td3sched.simulator.engine import Simulation
from td3sched.simulator.filter import choose_gpus
from td3sched.workload.pods import BURSTABLE
from tests.simulator.worlds import node, pool, typical


def _pod(cpu, mem, gpus=0, gpu_milli=0):
    return PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), gpus, gpu_milli, BURSTABLE, np.inf, np.inf, 0.0)


def _attached(cluster, typ):
    if isinstance(typ, TypicalPods):
        typ = PoolTypicalPods.same(typ, len(cluster.pools))
    policy = FGD()
    policy.attach(PolicyContext(cluster, 30.0, 60.0, typ, None))
    return policy


def test_cpu_memory_fragmentation_growth_by_hand():
    # Typical pods: A = (2000m, 4096Mi) with p = 0.75, B = (500m, 8192Mi) with p = 0.25.
    typ = typical([(2000, 4096), (500, 8192)], [0.75, 0.25])
    c = Cluster([pool("p", node(4000, 32768), 3)])
    c.free[:, :2] = [[3000, 10000], [2500, 20000], [1800, 9000]]
    # The pod (1000m, 2048Mi):
    #   n0 before (3000, 10000): A fits, B fits             F = 0
    #      after  (2000,  7952): A fits, B does not (7952 < 8192)
    #                                                       F = 2000 * 0.25 = 500      score -500
    #   n1 before (2500, 20000): both fit                   F = 0
    #      after  (1500, 17952): A does not (1500 < 2000)   F = 1500 * 0.75 = 1125     score -1125
    #   n2 before (1800,  9000): A does not                 F = 1800 * 0.75 = 1350
    #      after  ( 800,  6952): neither                    F =  800 * 1    =  800     score +550
    # FGD puts the pod on n2, the node that is already fragmented.
    scores = _attached(c, typ).score(_pod(1000, 2048), np.array([0, 1, 2]), c)
    assert scores == pytest.approx([-500, -1125, 550])


def test_each_node_is_scored_with_its_pools_typical_pods():
    # Pool a: A = (2000m, 4096Mi) only; pool b: B = (500m, 8192Mi) only. Same node shape and state.
    typ = PoolTypicalPods((typical([(2000, 4096)], [1.0]), typical([(500, 8192)], [1.0])))
    c = Cluster([pool("a", node(4000, 32768), 1), pool("b", node(4000, 32768), 1)])
    c.free[:, :2] = [[3000, 10000], [3000, 10000]]
    # The pod (1000m, 2048Mi) leaves (2000, 7952) on either node:
    #   a: A still fits                                   score 0
    #   b: B no longer fits (7952 < 8192): F = 2000 x 1   score -2000
    scores = _attached(c, typ).score(_pod(1000, 2048), np.array([0, 1]), c)
    assert scores == pytest.approx([0, -2000])


def test_gpu_share_follows_binds_best_fit_by_hand():
    # Typical pods: C = a 500-milli share (1000m, 1000Mi), D = one whole GPU (1000m, 1000Mi), p = 0.5 each.
    typ = typical([(1000, 1000, 0, 0, 1, 500), (1000, 1000, 0, 0, 1, GPU_MILLI)], [0.5, 0.5])
    c = Cluster([pool("g", node(8000, 65536, gpus=2), 3)])
    c.gpu_used[:] = GPU_MILLI - np.array([[1000, 300], [1000, 500], [600, 0]])   # free milli per GPU
    # A pod taking a 400-milli share (1000m, 1000Mi); CPU free is 8000 before and 7000 after.
    #   g0 free [1000, 300]: only GPU 0 fits -> [600, 300]. Before C and D fit: F = 0.
    #      After C fits (600), D does not (no whole GPU): F = 7000 * 0.5 = 3500           score -3500
    #   g1 free [1000, 500]: best fit is GPU 1 (500) -> [1000, 100]. C and D still fit:  score 0
    #      (had it taken GPU 0 -> [600, 500], D would no longer fit: F = 3500)
    #   g2 free [600, 0]: before C fits, D does not: F = 8000 * 0.5 = 4000
    #      after [200, 0]: neither fits: F = 7000                                         score -3000
    scores = _attached(c, typ).score(_pod(1000, 1000, 1, 400), np.array([0, 1, 2]), c)
    assert scores == pytest.approx([-3500, 0, -3000])


def test_whole_gpus_take_the_first_free_ones():
    gpu_free = np.array([[1000, 300, 1000, 1000], [0, 1000, 1000, 500]])
    assert assign_gpus(gpu_free, 2, GPU_MILLI).tolist() == [[1000, 0, 1000, 0], [0, 1000, 1000, 0]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 100, 250, 300, 500, 700, 1000]), min_size=4, max_size=4),
                min_size=1, max_size=6),
       st.integers(1, 3), st.sampled_from([100, 250, 500, 700, 1000]))
def test_assign_gpus_is_binds_choice_on_every_node(rows, gpu_count, gpu_milli):
    gpu_free = np.array(rows, dtype=np.int64)
    if gpu_milli < GPU_MILLI:
        gpu_count = 1
    taken = assign_gpus(gpu_free, gpu_count, gpu_milli)
    for row, got in zip(gpu_free, taken):
        fits = (row >= gpu_milli).any() if gpu_count == 1 and gpu_milli < GPU_MILLI else \
            (row == GPU_MILLI).sum() >= gpu_count
        if not fits:
            continue
        want = np.zeros_like(row)
        want[choose_gpus(row, gpu_count, gpu_milli)] = gpu_milli
        assert got.tolist() == want.tolist()


def test_fragmentation_before_is_recomputed_when_a_node_changes():
    typ = typical([(2000, 4096), (500, 8192)], [0.75, 0.25])
    c = Cluster([pool("p", node(4000, 32768), 2)])
    policy = _attached(c, typ)
    nodes = np.array([0, 1])
    first = policy.score(_pod(1000, 2048), nodes, c)
    c.free[0, :2] = [1800, 9000]             # as if pods were bound to node 0 since
    second = policy.score(_pod(1000, 2048), nodes, c)
    assert second[1] == first[1]
    assert second[0] == pytest.approx(550)    # n2 of the hand-computed case above


def test_fgd_runs_the_tiny_scenario():
    sc = load_scenario("tiny")
    world = sc.build(1)
    start, _ = sc.span("train")
    result = Simulation(world, make_policy("fgd"), 1, start, start + 3 * 3600).run()
    m = result["metrics"]
    assert m["decisions"] > 0 and np.isfinite(m["episode_reward"])


def test_sigmoid_node_score_of_the_artifact_by_hand():
    # The first hand-computed case (decreases -500, -1125, +550) as the artifact scores it:
    # int(100 x sigmoid(d / 1000)): sigmoid(-0.5) = 0.3775 -> 37, sigmoid(-1.125) = 0.2451 -> 24,
    # sigmoid(0.55) = 0.6341 -> 63.
    typ = PoolTypicalPods.same(typical([(2000, 4096), (500, 8192)], [0.75, 0.25]), 1)
    c = Cluster([pool("p", node(4000, 32768), 3)])
    c.free[:, :2] = [[3000, 10000], [2500, 20000], [1800, 9000]]
    policy = make_policy("fgd:sigmoid_scale=1000")
    policy.attach(PolicyContext(c, 30.0, 60.0, typ, None))
    assert policy.score(_pod(1000, 2048), np.array([0, 1, 2]), c).tolist() == [37, 24, 63]


def test_share_gpu_goes_where_fragmentation_grows_least():
    # The paper's GPU measure, one typical pod: a 350-milli share (1000m), p = 1. Node free [400, 700]
    # milli, 8000m CPU. A 300-milli share: best fit takes GPU 0 -> [100, 700]: the typical share
    # still fits, but GPU 0's 100 milli is too small for it: F = 100, score -100. On GPU 1 ->
    # [400, 400]: fits, nothing too small: F = 0, score 0. With share_gpu=1 the policy scores 0 and
    # names GPU 1.
    measure = GpuTypicalPods(np.array([1000]), np.array([350]), np.array([1]), ("",), np.array([1.0]), ("g",))
    c = Cluster([pool("g", node(8000, 65536, gpus=2), 1)])
    c.gpu_used[0] = [600, 300]
    pod, nodes = _pod(1000, 1000, 1, 300), np.array([0])
    best_fit, per_gpu = make_policy("fgd"), make_policy("fgd:share_gpu=1")
    for policy in (best_fit, per_gpu):
        policy.attach(PolicyContext(c, 30.0, 60.0, measure, None))
    assert best_fit.score(pod, nodes, c).tolist() == [-100]
    assert best_fit.choose_gpus(pod, 0, c) is None
    assert per_gpu.score(pod, nodes, c).tolist() == [0]
    assert per_gpu.choose_gpus(pod, 0, c).tolist() == [1]


def test_fgd_arguments_are_validated():
    with pytest.raises(ValueError, match="share_gpu=2"):
        make_policy("fgd:share_gpu=2")
    with pytest.raises(ValueError, match="sigmoid_scale=-1.0"):
        make_policy("fgd:sigmoid_scale=-1")
