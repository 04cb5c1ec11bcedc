"""``dotprod``: the dot product of the pod's demand and the node's free resources, smallest first.

Tetris' alignment heuristic (Grandl et al., SIGCOMM'14) as the FGD paper's artifact configures it
for its openb experiments (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/simulator/plugin/dot_product_score.go`` with ``-dimext merge -norm max``; the vectors come from
``pkg/type/resource.go``, ``ToVirtualNodeResourceList`` / ``ToVirtualPodResourceList``): CPU and the
GPUs merged into one dimension, each normalised by the largest node of the cluster
(``policy.max_spec``):

    node = (free CPU / 128000, free milli-GPU over all the node's GPUs / 8000)
    pod  = (CPU request / 128000, GPU count x milli-GPU per GPU / 8000)
    score = int(100 x (1 - (node . pod) / 2))                    (Go's int64 truncation, 0..100)

The larger the dot product, the *lower* the score, as in the artifact: the pod goes where the free
resources along its demand are smallest (a packing rule). Memory is not part of the score.
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.max_spec import MAX_SPEC_CPU_MILLI, MAX_SPEC_GPU_MILLI
from td3sched.simulator.cluster import Cluster

MAX_NODE_SCORE = 100


class DotProduct(Policy):
    name = "dotprod"

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        cpu_free = cluster.free[nodes, 0] / MAX_SPEC_CPU_MILLI
        gpu_free = (cluster.gpu_capacity[nodes] - cluster.gpu_used[nodes]).sum(axis=1) / MAX_SPEC_GPU_MILLI
        dot = cpu_free * (pod.request[0] / MAX_SPEC_CPU_MILLI) + gpu_free * (pod.gpu_count * pod.gpu_milli
                                                                             / MAX_SPEC_GPU_MILLI)
        return np.trunc(MAX_NODE_SCORE * (1.0 - dot / 2))
