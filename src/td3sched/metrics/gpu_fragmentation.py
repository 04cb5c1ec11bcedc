"""GPU fragmentation as the FGD paper defines it: the expected idle GPU the target workload cannot use.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent", USENIX ATC'23, §3; the artifact's ``NodeGpuShareFragAmount`` and ``GetTypicalPods``
(hkust-adsl/kubernetes-scheduler-simulator, ``pkg/utils/frag.go``).

Target workload: the pod shapes m = (CPU milli, GPU milli per GPU, GPU count, GPU type) of a trace,
most frequent first, taken until they cover ``coverage`` (95%) of its pods, each weighted by its pod
count, p_m renormalised to sum to 1. For node n with idle GPU milli ``idle_n = sum_g free_{n,g}``:

    F_n = sum_m p_m * idle_n                                  m requests no GPU, or n has no GPU
                                                              type m accepts, or m does not fit n
        + sum_m p_m * sum_{g: free_{n,g} < milli_m} free_{n,g}   m fits n: only its too-small GPUs
    fragmentation amount = sum_n F_n                          (milli-GPU; % of all GPUs in reports)
    fragmentation ratio  = sum_n F_n / sum_n idle_n          (% of idle GPUs)

"Fits" is the scheduler's own Filter rule (``simulator.filter.fit_matrix``) on CPU and GPUs only:
memory is enforced when pods are placed, but the measure leaves it out, as the paper does. This is
the same shape as the simulator's own measure (``metrics.fragmentation``: typical pods, weights p_m,
"does not fit"), with the paper's unit: idle GPU instead of free CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.simulator.filter import fit_matrix

COVERAGE = 0.95
"""Share of the trace's pods the typical shapes cover (the artifact's ``podPopularityThreshold``)."""


@dataclass(frozen=True)
class GpuTypicalPods:
    """The target workload: typical pod shapes, their weights, and which GPU models each accepts.

    Node pools stand for GPU models (``pool_models[k]`` is pool k's model), so the FGD policy's
    ``node_fragmentation(free, gpu_free, pool)`` call works with this measure as with
    ``metrics.fragmentation.PoolTypicalPods``.
    """

    cpu_milli: np.ndarray
    gpu_milli: np.ndarray
    """Milli-GPU per requested GPU (1000: whole GPUs; 0: no GPU)."""
    gpu_count: np.ndarray
    gpu_types: tuple[str, ...]
    """Accepted GPU models of each shape, joined by "|"; "" accepts any."""
    weight: np.ndarray
    """p_m, summing to 1."""
    pool_models: tuple[str, ...]
    """GPU model of each node pool, in the cluster's pool order."""

    def __post_init__(self) -> None:
        m = len(self.weight)
        for name in ("cpu_milli", "gpu_milli", "gpu_count"):
            if len(getattr(self, name)) != m:
                raise ValueError(f"typical GPU pods: {name} has {len(getattr(self, name))} entries, expected {m}")
        if len(self.gpu_types) != m:
            raise ValueError(f"typical GPU pods: {len(self.gpu_types)} GPU types for {m} shapes")
        if m and not np.isclose(self.weight.sum(), 1.0):
            raise ValueError(f"typical GPU pods: weights sum to {self.weight.sum()}, expected 1")
        accepts = np.ones((len(self.pool_models), m), dtype=bool)
        for j, spec in enumerate(self.gpu_types):
            models = [s for s in spec.split("|") if s]
            if models:
                accepts[:, j] = [model in models for model in self.pool_models]
        object.__setattr__(self, "_accepts", accepts)

    def __len__(self) -> int:
        return len(self.weight)

    @classmethod
    def from_pods(cls, cpu_milli, gpu_milli, gpu_count, gpu_spec, pool_models, coverage: float = COVERAGE
                  ) -> "GpuTypicalPods":
        """The shapes covering ``coverage`` of the pods, as the artifact's ``GetTypicalPods`` takes them:
        by pod count, most frequent first (ties: the larger shape first, comparing CPU, GPU milli, GPU
        count, then GPU type, as its sort does), one shape at a time until the covered count reaches
        ``coverage`` x all pods; weights renormalised over the shapes kept."""
        if not 0 < coverage <= 1:
            raise ValueError(f"typical GPU pods: coverage={coverage!r}: expected a share in (0, 1]")
        keys = list(zip(np.asarray(cpu_milli, dtype=np.int64).tolist(), np.asarray(gpu_milli, dtype=np.int64).tolist(),
                        np.asarray(gpu_count, dtype=np.int64).tolist(), [str(s) for s in gpu_spec]))
        if not keys:
            raise ValueError("typical GPU pods: no pods")
        counts: dict[tuple, int] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        order = sorted(counts, key=lambda k: (counts[k], k), reverse=True)
        kept, covered = [], 0
        while covered < coverage * len(keys):
            kept.append(order[len(kept)])
            covered += counts[kept[-1]]
        w = np.array([counts[k] for k in kept], dtype=float)
        return cls(np.array([k[0] for k in kept], dtype=np.int64), np.array([k[1] for k in kept], dtype=np.int64),
                   np.array([k[2] for k in kept], dtype=np.int64), tuple(k[3] for k in kept), w / w.sum(),
                   tuple(pool_models))

    def node_fragmentation(self, free: np.ndarray, gpu_free: np.ndarray, pool: np.ndarray) -> np.ndarray:
        """F_n (milli-GPU) of each node row: ``free`` [N, 4] (CPU first), ``gpu_free`` [N, G], ``pool`` [N]."""
        pool = np.asarray(pool)
        if len(pool) != len(free) or len(gpu_free) != len(free):
            raise ValueError(f"GPU fragmentation: {len(free)} free rows, {len(gpu_free)} GPU rows, {len(pool)} pools")
        gpu_free = np.asarray(gpu_free)
        idle = gpu_free.sum(axis=1).astype(float)
        if len(self) == 0:
            return idle
        request = np.zeros((len(self), free.shape[1]))
        request[:, 0] = self.cpu_milli            # CPU and GPUs only: memory is not part of the measure
        fits = fit_matrix(free, gpu_free, request, self.gpu_count, self.gpu_milli)
        usable = fits & (self.gpu_count > 0)[None, :] & self._accepts[pool]
        too_small = (gpu_free[:, :, None] < self.gpu_milli[None, None, :]) * gpu_free[:, :, None]
        stranded = np.where(usable, too_small.sum(axis=1), idle[:, None])
        return stranded @ self.weight


def gpu_fragmentation(free: np.ndarray, gpu_free: np.ndarray, pool: np.ndarray, typical: GpuTypicalPods
                      ) -> tuple[float, float]:
    """(fragmentation amount in milli-GPU, fragmentation ratio = amount / idle milli-GPU; 0 with nothing idle)."""
    amount = float(typical.node_fragmentation(free, gpu_free, pool).sum())
    idle = float(np.asarray(gpu_free).sum())
    return amount, (amount / idle if idle > 0 else 0.0)
