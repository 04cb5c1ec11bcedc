"""``best-fit``: the node with the least CPU and GPU left after the pod, min-max normalised.

The FGD paper's BestFit baseline (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/simulator/plugin/best_fit_score.go``, ``getBestFitScore`` and its ``NormalizeScore`` in
``plugin_utils.go``), with the largest node of the cluster as scale (``policy.max_spec``):

    left  = 0.5 x (free CPU - CPU request) / 128000 + 0.5 x (free milli-GPU - GPU request) / 8000
    raw   = int(100 x (1 - left))                                 (Go's int64 truncation)
    score = (raw - min raw) x 100 // (max raw - min raw)          over the feasible nodes; 0 when all equal

Free milli-GPU is summed over the node's GPUs; the GPU request is GPU count x milli-GPU per GPU.
Memory is not part of the score. The integer steps make ties common; the scheduler breaks them.
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.max_spec import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI
from td3sched.simulator.cluster import Cluster

MAX_NODE_SCORE = 100
WEIGHT_CPU = WEIGHT_GPU = 0.5


def normalize_score(raw: np.ndarray) -> np.ndarray:
    """The artifact's ``NormalizeScore``: integer min-max scaling of scores to 0..100 (all 0 when equal)."""
    raw = np.asarray(raw, dtype=np.int64)
    if len(raw) == 0:
        return raw.astype(float)
    low, span = raw.min(), raw.max() - raw.min()
    if span == 0:
        return np.zeros(len(raw))
    return ((raw - low) * MAX_NODE_SCORE // span).astype(float)


class BestFit(Policy):
    name = "best-fit"

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        cpu_left = cluster.free[nodes, 0] - pod.request[0]
        gpu_left = (cluster.gpu_capacity[nodes] - cluster.gpu_used[nodes]).sum(axis=1) - pod.gpu_count * pod.gpu_milli
        left = cpu_left / MAX_SPEC_CPU_MILLI * WEIGHT_CPU
        left = left + gpu_left / MAX_SPEC_GPU_MILLI * WEIGHT_GPU
        raw = np.trunc((1.0 - left) * MAX_NODE_SCORE)
        return normalize_score(raw)
