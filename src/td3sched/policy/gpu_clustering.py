"""``gpu-clustering``: pods of the same GPU kind together, on nodes with little GPU left.

The FGD paper's GpuClustering baseline (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/simulator/plugin/gpu_clustering_score.go``; the kinds are ``GetGpuAffinityFromPodAnnotation``
in ``pkg/type/open-gpu-share/utils/pod.go``). A GPU pod's kind is "share" (one GPU, less than 1000
milli) or "k-gpu" (k whole GPUs); a node's kinds are those of the GPU pods bound to it:

    base  = 25 x (8000 - free milli-GPU of the node) // 8000          (0..25; Go integer arithmetic)
    score = base + 75   the node holds pods of the pod's kind and of no other kind
            base + 50   the node holds pods of the pod's kind and of other kinds
            base + 25   the node holds no GPU pod
            base        the node holds GPU pods of other kinds only
    score = 0           for a pod without GPUs (every node alike)

The policy counts the GPU pods of each kind per node from the binds and releases it is told of.
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.max_spec import MAX_SPEC_GPU_MILLI
from td3sched.simulator.cluster import GPU_MILLI, Cluster

QUARTER = 25
"""MaxNodeScore / 4."""


def gpu_kind(gpu_count: int, gpu_milli: int) -> str | None:
    """The artifact's GPU affinity tag: None (no GPU), "share", or "<k>-gpu"."""
    if gpu_count == 0:
        return None
    if gpu_count == 1 and gpu_milli < GPU_MILLI:
        return "share"
    if gpu_milli == GPU_MILLI:
        return f"{gpu_count}-gpu"
    raise ValueError(f"gpu-clustering: a pod with {gpu_count} GPUs of {gpu_milli} milli each has no GPU kind: "
                     "expected one shared GPU (< 1000 milli) or whole GPUs (1000 milli)")


class GpuClustering(Policy):
    name = "gpu-clustering"

    def __init__(self) -> None:
        self.kinds: dict[str, np.ndarray] = {}
        """Pods of each GPU kind bound to each node."""

    def attach(self, context) -> None:
        super().attach(context)
        self.kinds = {}
        self._size = context.cluster.size

    def _count(self, kind: str) -> np.ndarray:
        if kind not in self.kinds:
            self.kinds[kind] = np.zeros(self._size, dtype=np.int64)
        return self.kinds[kind]

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        kind = gpu_kind(pod.gpu_count, pod.gpu_milli)
        if kind is None:
            return np.zeros(len(nodes))
        if not hasattr(self, "_size"):
            raise ValueError("gpu-clustering: attach(PolicyContext) must be called before score")
        gpu_free = (cluster.gpu_capacity[nodes] - cluster.gpu_used[nodes]).sum(axis=1)
        base = QUARTER * (MAX_SPEC_GPU_MILLI - gpu_free)
        base = np.sign(base) * (np.abs(base) // MAX_SPEC_GPU_MILLI)   # Go's division truncates toward zero
        kinds_held = sum((c[nodes] > 0).astype(np.int64) for c in self.kinds.values()) if self.kinds \
            else np.zeros(len(nodes), dtype=np.int64)
        same = self._count(kind)[nodes] > 0
        bonus = np.where(same, np.where(kinds_held == 1, 3 * QUARTER, 2 * QUARTER),
                         np.where(kinds_held == 0, QUARTER, 0))
        return (base + bonus).astype(float)

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        kind = gpu_kind(pod.gpu_count, pod.gpu_milli)
        if kind is not None:
            self._count(kind)[node] += 1

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        kind = gpu_kind(pod.gpu_count, pod.gpu_milli)
        if kind is not None:
            self._count(kind)[node] -= 1
