"""Fragmentation: the share of provisioned CPU that is free but unusable by the workload.

FGD (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC'23), generalised from GPUs to CPU and memory:

    typical pods M: the scenario's request shapes, clustered into at most 20 representatives,
                    each weighted by its frequency p_m (sum p_m = 1)
    F_n  = sum_m p_m * freeCPU_n * [m does not fit node n in some resource]
    fragmentation = sum_n F_n / sum_n allocatable CPU_n        (provisioned nodes only)

"Fits" is the scheduler's own Filter rule (``simulator.filter.fit_matrix``): CPU, memory, disk,
RDMA and GPUs. Anti-affinity and node selectors are placement rules, not resources, and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.simulator.filter import fit_matrix
from td3sched.workload.pods import Workload

MAX_SHAPES = 20


@dataclass(frozen=True)
class TypicalPods:
    """Representative request shapes and their frequencies."""

    request: np.ndarray
    """[M, 4] CPU milli, memory MiB, disk GiB, RDMA %."""
    gpu_count: np.ndarray
    gpu_milli: np.ndarray
    weight: np.ndarray
    """p_m, summing to 1."""

    @classmethod
    def from_workload(cls, workload: Workload, max_shapes: int = MAX_SHAPES, seed: int = 0) -> "TypicalPods":
        """Distinct request shapes; when there are more than ``max_shapes``, a weighted k-means on
        log-scaled features picks clusters and each is represented by its most frequent member."""
        if len(workload) == 0:
            raise ValueError("cannot derive typical pods from an empty workload")
        feats = np.column_stack([workload.request, workload.gpu_count, workload.gpu_milli])
        shapes, counts = np.unique(feats, axis=0, return_counts=True)
        if len(shapes) > max_shapes:
            labels = _weighted_kmeans(np.log1p(shapes), counts.astype(float), max_shapes, seed)
            reps, weights = [], []
            for k in np.unique(labels):
                members = np.flatnonzero(labels == k)
                reps.append(shapes[members[np.argmax(counts[members])]])
                weights.append(counts[members].sum())
            shapes, counts = np.array(reps), np.array(weights)
        w = counts / counts.sum()
        return cls(shapes[:, :4].astype(float), shapes[:, 4].astype(np.int64), shapes[:, 5].astype(np.int64), w)


def _weighted_kmeans(x: np.ndarray, w: np.ndarray, k: int, seed: int, iters: int = 50) -> np.ndarray:
    """Lloyd's k-means with sample weights and k-means++ seeding; returns labels."""
    rng = np.random.default_rng(seed)
    scale = x.std(axis=0)
    x = x / np.where(scale > 0, scale, 1.0)
    centers = [x[rng.choice(len(x), p=w / w.sum())]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None, :] - np.array(centers)[None]) ** 2).sum(-1), axis=1) * w
        if d2.sum() == 0:
            break
        centers.append(x[rng.choice(len(x), p=d2 / d2.sum())])
    c = np.array(centers)
    labels = np.zeros(len(x), dtype=np.int64)
    for _ in range(iters):
        new = np.argmin(((x[:, None, :] - c[None]) ** 2).sum(-1), axis=1)
        if np.array_equal(new, labels) and _ > 0:
            break
        labels = new
        for j in range(len(c)):
            m = labels == j
            if m.any():
                c[j] = np.average(x[m], axis=0, weights=w[m])
    return labels


def node_fragmentation(free: np.ndarray, gpu_free: np.ndarray, typical: TypicalPods) -> np.ndarray:
    """F_n for each node row given: free CPU weighted by the share of typical pods that do not fit."""
    fits = fit_matrix(free, gpu_free, typical.request, typical.gpu_count, typical.gpu_milli)
    unfit_share = (~fits).astype(float) @ typical.weight
    return np.maximum(free[:, 0], 0.0) * unfit_share


def cluster_fragmentation(free: np.ndarray, gpu_free: np.ndarray, allocatable_cpu: np.ndarray,
                          typical: TypicalPods) -> float:
    """sum F_n / sum allocatable CPU over the given (provisioned) nodes; 0 for no nodes."""
    total = float(allocatable_cpu.sum())
    if total <= 0:
        return 0.0
    return float(node_fragmentation(free, gpu_free, typical).sum() / total)
