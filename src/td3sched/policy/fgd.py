"""``fgd``: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23).

Each feasible node is scored by how much placing the pod there *grows* a fragmentation measure
F_n: the scenario's typical pods (``PolicyContext.typical``). By default that is the simulator's own
measure (``metrics.fragmentation.node_fragmentation``, with the typical pods M of the node's pool and
their CPU-seconds weights p_m):

    F_n(free, gpu_free) = max(freeCPU_n, 0) * sum_{m in M_pool(n)} p_m * [typical pod m does not fit node n]

    score_n = -( F_n(free_n - request, gpu_free_n - assigned_n) - F_n(free_n, gpu_free_n) )

``free`` is allocatable minus requested (CPU, memory, disk, RDMA), so the pod's requests move every
resource the fit test reads. ``assigned_n`` is what Bind would take from the node's GPUs
(``simulator.filter.choose_gpus``, vectorised here by ``assign_gpus``): a GPU share goes on the GPU
with the least free milli that still fits it, whole GPUs on the lowest-indexed entirely free ones.
A pod without GPUs leaves ``gpu_free`` unchanged. The paper's own measure (idle GPU the target
workload cannot use, ``metrics.gpu_fragmentation.GpuTypicalPods``) plugs in the same way: any
object with ``node_fragmentation(free, gpu_free, pool) -> [N]`` is a measure. The node whose
fragmentation grows least (or shrinks most) wins. FGD's upstream plugin squashes the same difference
through a sigmoid into an integer in [0, 100]; that keeps the order but makes close differences tie
(``sigmoid_scale`` below), and by default it is left out.

Arguments (``fgd:sigmoid_scale=1000:share_gpu=1``), both off by default:

- ``sigmoid_scale`` > 0: the score is the artifact's node score (hkust-adsl/kubernetes-scheduler-simulator,
  ``pkg/simulator/plugin/fgd_score.go``), ``int(100 x sigmoid(decrease / sigmoid_scale))`` in 0..100,
  truncated as Go's int64() does: decreases within a few percent of ``sigmoid_scale`` tie, and the
  scheduler's tie-break decides between them. The artifact uses 1000 (milli-GPU).
- ``share_gpu`` = 1: a GPU share is scored on each GPU of the node it fits and placed on the best
  one (the first on ties), not by best fit: the artifact's ``allocateGpuIdBasedOnFGDScore``. The
  policy then names the GPUs (``choose_gpus``) and the simulator binds the pod there.

F_n(before) depends only on a node's free resources, so it is kept per node and recomputed only
for the nodes whose free resources changed since the policy last saw them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.metrics.fragmentation import PoolTypicalPods
from td3sched.metrics.gpu_fragmentation import GpuTypicalPods
from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.spec import args_from_spec, finite, require
from td3sched.simulator.cluster import GPU_MILLI, Cluster

NAME = "fgd"
MAX_NODE_SCORE = 100


@dataclass(frozen=True)
class FGDArgs:
    sigmoid_scale: float = 0.0
    """0: score = the decrease of F_n. > 0: int(100 x sigmoid(decrease / sigmoid_scale)), the
    artifact's integer node score (it uses 1000)."""
    share_gpu: int = 0
    """0: a GPU share goes on the GPU best fit picks (as Bind does). 1: on the GPU where F_n grows
    least, the artifact's FGD GPU selection."""

    def __post_init__(self) -> None:
        require(NAME, "sigmoid_scale", self.sigmoid_scale, finite(self.sigmoid_scale) and self.sigmoid_scale >= 0,
                "a number >= 0 (0: no sigmoid)")
        require(NAME, "share_gpu", self.share_gpu, self.share_gpu in (0, 1), "0 or 1")


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


def fragmentation_decrease(typical, pod: PodRequest, free: np.ndarray, gpu_free: np.ndarray, pool: np.ndarray,
                           before: np.ndarray) -> np.ndarray:
    """[k] how much placing ``pod`` on each node row lowers its F_n (negative: raises it): ``before``
    (F_n as the rows are) minus F_n with the pod's requests taken from ``free`` [k, 4] and its GPUs from
    ``gpu_free`` [k, G] as Bind takes them (``assign_gpus``); ``typical`` is the measure, ``pool`` [k]
    each row's pool index. FGD's score (no sigmoid), and the decision engine's for a fragmentation share."""
    compiled = getattr(typical, "fragmentation_decrease", None)  # PoolTypicalPods: one compiled pass, same values
    if compiled is not None:
        return compiled(pod.request, pod.gpu_count, pod.gpu_milli, free, gpu_free, pool, before)
    gpu_after = gpu_free - assign_gpus(gpu_free, pod.gpu_count, pod.gpu_milli) if pod.gpu_count else gpu_free
    return before - typical.node_fragmentation(free - pod.request, gpu_after, pool)


class FGD(Policy):
    name = NAME

    def __init__(self, args: FGDArgs = FGDArgs()) -> None:
        self.args = args
        self.typical: PoolTypicalPods | GpuTypicalPods | None = None

    @classmethod
    def from_spec(cls, spec: str) -> "FGD":
        return cls(args_from_spec(FGDArgs, NAME, spec))

    def _node_score(self, decrease: np.ndarray) -> np.ndarray:
        if self.args.sigmoid_scale <= 0:
            return decrease
        return np.trunc(MAX_NODE_SCORE / (1.0 + np.exp(-decrease / self.args.sigmoid_scale)))

    def attach(self, context) -> None:
        super().attach(context)
        if not callable(getattr(context.typical, "node_fragmentation", None)):
            raise ValueError("fgd needs a fragmentation measure in PolicyContext.typical (typical pods per pool, "
                             f"with node_fragmentation(free, gpu_free, pool)), got {type(context.typical).__name__}")
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
        if self._per_gpu(pod):
            return self._share_scores(pod, free, gpu_free, pool, before)[0]
        return self._node_score(fragmentation_decrease(self.typical, pod, free, gpu_free, pool, before))

    def _per_gpu(self, pod: PodRequest) -> bool:
        return bool(self.args.share_gpu) and pod.gpu_count == 1 and pod.gpu_milli < GPU_MILLI

    def _share_scores(self, pod: PodRequest, free: np.ndarray, gpu_free: np.ndarray, pool: np.ndarray,
                      before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per node: the best score of a share over the GPUs it fits, and that GPU (first on ties)."""
        best = np.full(len(free), -np.inf)
        best_gpu = np.zeros(len(free), dtype=np.int64)
        for g in range(gpu_free.shape[1]):
            rows = np.flatnonzero(gpu_free[:, g] >= pod.gpu_milli)
            if len(rows) == 0:
                continue
            gpu_after = gpu_free[rows].copy()
            gpu_after[:, g] -= pod.gpu_milli
            after = self.typical.node_fragmentation(free[rows] - pod.request, gpu_after, pool[rows])
            score = self._node_score(before[rows] - after)
            better = score > best[rows]
            best[rows[better]] = score[better]
            best_gpu[rows[better]] = g
        return best, best_gpu

    def choose_gpus(self, pod: PodRequest, node: int, cluster: Cluster) -> np.ndarray | None:
        if not self._per_gpu(pod):
            return None
        row = np.array([node])
        free, gpu_used = cluster.free[row], cluster.gpu_used[row]
        gpu_free = cluster.gpu_capacity[row] - gpu_used
        pool = cluster.pool_of[row]
        before = self.typical.node_fragmentation(free, gpu_free, pool)
        score, gpu = self._share_scores(pod, free, gpu_free, pool, before)
        if not np.isfinite(score[0]):
            raise ValueError(f"fgd: a {pod.gpu_milli}-milli share fits no GPU of node {node}")
        return gpu[:1]
