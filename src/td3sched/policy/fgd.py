"""``fgd``: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23).

Each feasible node is scored by how much placing the pod there *grows* the simulator's own
fragmentation measure (``metrics.fragmentation.node_fragmentation``, with the typical pods M of
the node's pool and their CPU-seconds weights p_m):

    F_n(free, gpu_free) = max(freeCPU_n, 0) * sum_{m in M_pool(n)} p_m * [typical pod m does not fit node n]

    score_n = -( F_n(free_n - request, gpu_free_n - assigned_n) - F_n(free_n, gpu_free_n) )

``free`` is allocatable minus requested (CPU, memory, disk, RDMA), so the pod's requests move every
resource the fit test reads. ``assigned_n`` is what Bind would take from the node's GPUs
(``simulator.filter.choose_gpus``, vectorised here by ``assign_gpus``): a GPU share goes on the GPU
with the least free milli that still fits it, whole GPUs on the lowest-indexed entirely free ones.
A pod without GPUs leaves ``gpu_free`` unchanged. The node whose fragmentation grows least (or
shrinks most) wins; FGD's upstream plugin squashes the same difference through a sigmoid into
[0, 100], which keeps the order and is left out here.

F_n(before) depends only on a node's free resources, so it is kept per node and recomputed only
for the nodes whose free resources changed since the policy last saw them.
"""

from __future__ import annotations

import numpy as np

from td3sched.metrics.fragmentation import PoolTypicalPods
from td3sched.policy.base import Policy, PodRequest
from td3sched.simulator.cluster import GPU_MILLI, Cluster


def assign_gpus(gpu_free: np.ndarray, gpu_count: int, gpu_milli: int) -> np.ndarray:
    """[k, G] milli-GPU that Bind would take from each node's GPUs (``choose_gpus`` row by row).

    A share (one GPU, ``gpu_milli`` < 1000): the GPU with the least free milli that still fits,
    lowest index on ties. Whole GPUs: the ``gpu_count`` lowest-indexed entirely free GPUs, each
    taking ``gpu_milli``. Rows where nothing fits (never a feasible node) take from the first GPU.
    """
    taken = np.zeros_like(gpu_free)
    if gpu_count == 0:
        return taken
    if gpu_count == 1 and gpu_milli < GPU_MILLI:
        unfit = np.iinfo(np.int64).max
        best = np.argmin(np.where(gpu_free >= gpu_milli, gpu_free, unfit), axis=1)
        taken[np.arange(len(gpu_free)), best] = gpu_milli
        return taken
    whole = gpu_free == GPU_MILLI
    taken[whole & (np.cumsum(whole, axis=1) <= gpu_count)] = gpu_milli
    return taken


class FGD(Policy):
    name = "fgd"

    def __init__(self) -> None:
        self.typical: PoolTypicalPods | None = None

    def attach(self, context) -> None:
        super().attach(context)
        if not isinstance(context.typical, PoolTypicalPods):
            raise ValueError("fgd needs the scenario's typical pods per pool (PolicyContext.typical), "
                             f"got {type(context.typical).__name__}")
        self.typical = context.typical
        c = context.cluster
        self._seen_free = np.full_like(c.free, np.nan)
        self._seen_gpu_used = np.full_like(c.gpu_used, -1)
        self._before = np.zeros(c.size)

    def _fragmentation_before(self, nodes: np.ndarray, free: np.ndarray, gpu_free: np.ndarray,
                              gpu_used: np.ndarray, pool: np.ndarray) -> np.ndarray:
        """F_n of ``nodes`` as they are, recomputed only where free resources changed."""
        changed = (free != self._seen_free[nodes]).any(axis=1) | (gpu_used != self._seen_gpu_used[nodes]).any(axis=1)
        if changed.any():
            idx = nodes[changed]
            self._before[idx] = self.typical.node_fragmentation(free[changed], gpu_free[changed], pool[changed])
            self._seen_free[idx] = free[changed]
            self._seen_gpu_used[idx] = gpu_used[changed]
        return self._before[nodes]

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        if self.typical is None:
            raise ValueError("fgd: attach(PolicyContext) must be called before score")
        free = cluster.free[nodes]
        gpu_used = cluster.gpu_used[nodes]
        gpu_free = cluster.gpu_capacity[nodes] - gpu_used
        pool = cluster.pool_of[nodes]
        before = self._fragmentation_before(nodes, free, gpu_free, gpu_used, pool)
        gpu_after = gpu_free - assign_gpus(gpu_free, pod.gpu_count, pod.gpu_milli) if pod.gpu_count else gpu_free
        after = self.typical.node_fragmentation(free - pod.request, gpu_after, pool)
        return before - after
