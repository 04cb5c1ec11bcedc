"""``gpu-packing``: shared GPUs first, then free GPUs on used nodes, then empty nodes.

The FGD paper's GpuPacking baseline (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/simulator/plugin/gpu_packing_score.go``, ``getPackingScore``). For a GPU pod on a node with
``free`` idle GPUs out of ``gpus``, the GPUs it would take are, smallest free milli first, the first
``gpu_count`` with at least ``gpu_milli`` free:

    case 3, every GPU of the node idle:   score = max(33 - free, free)
    case 2, it takes k >= 1 idle GPUs:    score = max(50 - k, 33)
    case 1, only partly used GPUs:        score = max(100 - (sum over the GPUs taken of
                                                  free milli x 100 // 1000) // 10, 50)
    score = 0 for a pod without GPUs (every node alike)

(the caps, including case 3's odd ``max(.., free)``, are the artifact's). Integer arithmetic as in Go.
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.simulator.cluster import GPU_MILLI, Cluster

MAX_NODE_SCORE = 100


class GpuPacking(Policy):
    name = "gpu-packing"

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        if pod.gpu_count == 0 or pod.gpu_milli <= 0:
            return np.zeros(len(nodes))
        capacity = cluster.gpu_capacity[nodes]
        gpu_free = np.where(capacity > 0, capacity - cluster.gpu_used[nodes], -1)   # -1: no such GPU
        gpus = (capacity > 0).sum(axis=1)
        idle = (gpu_free == GPU_MILLI).sum(axis=1)
        ascending = np.sort(gpu_free, axis=1, kind="stable")
        eligible = ascending >= pod.gpu_milli
        taken = eligible & (np.cumsum(eligible, axis=1) <= pod.gpu_count)
        idle_taken = (taken & (ascending == GPU_MILLI)).sum(axis=1)
        free_pct = (np.where(taken, ascending, 0) * 100 // GPU_MILLI).sum(axis=1)
        return np.select(
            [idle == gpus, idle_taken > 0],
            [np.maximum(MAX_NODE_SCORE // 3 - idle, idle), np.maximum(MAX_NODE_SCORE // 2 - idle_taken,
                                                                      MAX_NODE_SCORE // 3)],
            np.maximum(MAX_NODE_SCORE - free_pct // 10, MAX_NODE_SCORE // 2)).astype(float)
