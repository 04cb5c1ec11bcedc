"""The FGD artifact's baselines (dotprod, best-fit, gpu-packing, gpu-clustering) against scores
worked out by hand from the artifact's formulas (hkust-adsl/kubernetes-scheduler-simulator,
pkg/simulator/plugin/*_score.go): 128000 milli-CPU and 8000 milli-GPU are the largest node."""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.best_fit import normalize_score
from td3sched.policy.gpu_clustering import gpu_kind
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import GUARANTEED
from tests.simulator.worlds import node, pool


def _pod(cpu, gpus=0, gpu_milli=0):
    return PodRequest(0, np.array([cpu, 1024.0, 0.0, 0.0]), gpus, gpu_milli, GUARANTEED, cpu, 1024.0, 0.0)


def _cluster(cpu_free, gpu_free, gpus_per_node):
    """Nodes of 128 cores with ``gpus_per_node`` GPUs, set to the given free CPU and free milli per GPU."""
    c = Cluster([pool("g", node(128_000, 1_048_576, gpus=gpus_per_node), len(cpu_free))])
    c.free[:, 0] = cpu_free
    c.gpu_used[:] = c.gpu_capacity - np.array(gpu_free)
    return c


def test_dotprod_by_hand():
    # Pod: 32000m, one 500-milli share: (32000/128000, 500/8000) = (0.25, 0.0625).
    # n0: free (64000, 1000 + 500 + 0 + 0)  -> (0.5, 0.1875):  dot 0.125 + 0.01171875 = 0.13671875
    #     int(100 x (1 - 0.13671875 / 2)) = int(93.16) = 93
    # n1: free (40000, 4 x 1000)            -> (0.3125, 0.5):  dot 0.078125 + 0.03125 = 0.109375
    #     int(100 x (1 - 0.0546875)) = int(94.53) = 94
    # n2: free (32000, 1000 + 0 + 0 + 0)    -> (0.25, 0.125):  dot 0.0625 + 0.0078125 = 0.0703125
    #     int(100 x (1 - 0.03515625)) = int(96.48) = 96       least free along the demand: best
    c = _cluster([64_000, 40_000, 32_000], [[1000, 500, 0, 0], [1000] * 4, [1000, 0, 0, 0]], 4)
    scores = make_policy("dotprod").score(_pod(32_000, 1, 500), np.arange(3), c)
    assert scores.tolist() == [93, 94, 96]


def test_best_fit_by_hand():
    # Pod: 32000m, one 500-milli share.
    # n0: left CPU 32000, GPU 1500 - 500 = 1000: 0.5 x 0.25 + 0.5 x 0.125 = 0.1875   raw int(81.25) = 81
    # n1: left CPU  8000, GPU 4000 - 500 = 3500: 0.5 x 0.0625 + 0.5 x 0.4375 = 0.25  raw 75
    # n2: left CPU 64000, GPU 8000 - 500 = 7500: 0.5 x 0.5 + 0.5 x 0.9375 = 0.71875 raw int(28.125) = 28
    # normalised: (raw - 28) x 100 // 53 -> 100, 4700 // 53 = 88, 0
    c = Cluster([pool("g", node(128_000, 1_048_576, gpus=8), 3)])
    c.free[:, 0] = [64_000, 40_000, 96_000]
    c.gpu_used[:] = c.gpu_capacity - np.array([[1000, 500] + [0] * 6, [1000] * 4 + [0] * 4, [1000] * 8])
    scores = make_policy("best-fit").score(_pod(32_000, 1, 500), np.arange(3), c)
    assert scores.tolist() == [100, 88, 0]


def test_best_fit_normalisation_of_equal_scores_is_zero():
    assert normalize_score(np.array([42, 42, 42])).tolist() == [0, 0, 0]
    assert normalize_score(np.array([10, 20])).tolist() == [0, 100]


def test_gpu_packing_by_hand():
    c = _cluster([64_000] * 5, [[1000, 500, 0, 0], [1000] * 4, [1000, 200, 0, 0], [0, 0, 0, 900],
                                [1000, 1000, 1000, 0]], 4)
    # A 300-milli share:
    #   n0 [1000, 500, 0, 0]: smallest fitting GPU 500 (partly used): case 1, 100 - (500 x 100 // 1000) // 10 = 95
    #   n1 all 4 idle: case 3, max(33 - 4, 4) = 29
    #   n2 [1000, 200, ..]: 200 < 300, so it takes the idle GPU: case 2, max(50 - 1, 33) = 49
    #   n3 [0, 0, 0, 900]: case 1, 100 - 90 // 10 = 91
    #   n4 three idle of four: takes the idle GPU: 49
    share = make_policy("gpu-packing").score(_pod(4000, 1, 300), np.arange(5), c)
    assert share.tolist() == [95, 29, 49, 91, 49]
    # Two whole GPUs on n1 (all idle: 29) and n4 (takes 2 idle: max(50 - 2, 33) = 48).
    whole = make_policy("gpu-packing").score(_pod(4000, 2, 1000), np.array([1, 4]), c)
    assert whole.tolist() == [29, 48]
    # An 8-GPU node, all idle: max(33 - 8, 8) = 25 (the artifact's cap); a pod without GPUs: 0 everywhere.
    big = _cluster([64_000], [[1000] * 8], 8)
    assert make_policy("gpu-packing").score(_pod(4000, 1, 300), np.array([0]), big).tolist() == [25]
    assert make_policy("gpu-packing").score(_pod(4000), np.arange(5), c).tolist() == [0] * 5


def test_gpu_clustering_by_hand():
    c = Cluster([pool("g8", node(128_000, 1_048_576, gpus=8), 4), pool("g2", node(128_000, 1_048_576, gpus=2), 1)])
    policy = make_policy("gpu-clustering")
    policy.attach(PolicyContext(c, 0.0, 0.0, None, None))
    share, one, two = _pod(1000, 1, 500), _pod(1000, 1, 1000), _pod(1000, 2, 1000)
    for pod, n, used in ((share, 0, [500]), (share, 1, [500]), (one, 1, [0, 1000]), (two, 3, [1000, 1000])):
        c.gpu_used[n, :len(used)] += used
        policy.bound(pod, n, c)
    # base = 25 x (8000 - free milli) // 8000:
    #   n0 free 7500 -> 1;  holds share only
    #   n1 free 6500 -> 4;  holds share and 1-gpu
    #   n2 free 8000 -> 0;  holds nothing
    #   n3 free 6000 -> 6;  holds 2-gpu only
    #   n4 free 2000 (a 2-GPU node) -> 25 x 6000 // 8000 = 18; holds nothing
    nodes = np.arange(5)
    assert policy.score(share, nodes, c).tolist() == [1 + 75, 4 + 50, 0 + 25, 6, 18 + 25]
    assert policy.score(two, nodes, c).tolist() == [1, 4, 25, 6 + 75, 43]
    assert policy.score(_pod(1000), nodes, c).tolist() == [0] * 5
    # n3's pod leaves: n3 holds nothing again.
    c.gpu_used[3] = 0
    policy.released(two, 3, c)
    assert policy.score(two, nodes, c).tolist() == [1, 4, 25, 25, 43]


def test_gpu_kind_rejects_a_multi_gpu_share():
    assert gpu_kind(0, 0) is None and gpu_kind(1, 300) == "share" and gpu_kind(4, 1000) == "4-gpu"
    with pytest.raises(ValueError, match="2 GPUs of 500 milli"):
        gpu_kind(2, 500)
