"""Fragmentation: the share of provisioned CPU that is free but unusable by the workload.

FGD (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC'23), generalised from GPUs to CPU and memory, with one typical set
per node pool:

    typical pods M_k of pool k: the request shapes of the pods that may run on pool k (node
                    selector) and arrive in the scenario's train span, clustered into at most 20
                    representatives, each weighted by the CPU-seconds its pods request, p_m
                    (sum p_m = 1 per pool; a shape without CPU request has p_m = 0 and is dropped)
    F_n  = sum_{m in M_pool(n)} p_m * freeCPU_n * [m does not fit node n in some resource]
    fragmentation = sum_n F_n / sum_n allocatable CPU_n        (provisioned nodes only)

so the cluster value is the allocatable-CPU-weighted mean of the per-pool values. "Fits" is the
scheduler's own Filter rule (``simulator.filter.fit_matrix``): CPU, memory, disk, RDMA and GPUs.
Anti-affinity is a placement rule, not a resource, and is left out; node selectors decide which
pool's typical set a pod belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit

from pydantic.dataclasses import dataclass as pydantic_dataclass

from td3sched.quantities import SETTINGS, Count
from td3sched.simulator.cluster import GPU_MILLI
from td3sched.simulator.kernels import padded_typical, unfit_share
from td3sched.workload.pods import Workload, unique_rows

MAX_SHAPES = 20


@pydantic_dataclass(frozen=True, config=SETTINGS)
class FragmentationConfig:
    """How the fragmentation metric's typical pods are chosen (a scenario's ``fragmentation:``)."""

    max_shapes: Count = MAX_SHAPES
    """Typical pod shapes per pool at most: more distinct shapes are merged by a weighted k-means."""


@dataclass(frozen=True)
class TypicalPods:
    """Representative request shapes of one pool and their weights."""

    request: np.ndarray
    """[M, 4] CPU milli, memory MiB, disk GiB, RDMA %."""
    gpu_count: np.ndarray
    gpu_milli: np.ndarray
    weight: np.ndarray
    """p_m, summing to 1 (an empty set has no shapes)."""

    def __len__(self) -> int:
        return len(self.weight)

    @classmethod
    def empty(cls) -> "TypicalPods":
        """No typical pods: every node of the pool has F_n = 0."""
        return cls(np.zeros((0, 4)), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))

    @classmethod
    def from_requests(cls, request: np.ndarray, gpu_count: np.ndarray, gpu_milli: np.ndarray,
                      weight: np.ndarray, max_shapes: int = MAX_SHAPES, seed: int = 0) -> "TypicalPods":
        """Distinct request shapes with the summed ``weight`` of their pods (shapes of weight 0
        dropped); when there are more than ``max_shapes``, a weighted k-means on log-scaled features
        picks clusters and each is represented by its heaviest member, with the cluster's weight."""
        feats = np.column_stack([np.asarray(request, dtype=float).reshape(-1, 4), gpu_count, gpu_milli])
        weight = np.asarray(weight, dtype=float)
        if len(feats) != len(weight):
            raise ValueError(f"{len(feats)} pods but {len(weight)} weights")
        if not np.all(np.isfinite(weight) & (weight >= 0)):
            raise ValueError("pod weights must be finite and non-negative")
        keep = weight > 0
        if not keep.any():
            return cls.empty()
        shapes, inverse = unique_rows(feats[keep])
        weights = np.bincount(inverse.reshape(-1), weights=weight[keep], minlength=len(shapes))
        if len(shapes) > max_shapes:
            labels = _weighted_kmeans(np.log1p(shapes), weights, max_shapes, seed)
            reps, merged = [], []
            for k in np.unique(labels):
                members = np.flatnonzero(labels == k)
                reps.append(shapes[members[np.argmax(weights[members])]])
                merged.append(weights[members].sum())
            shapes, weights = np.array(reps), np.array(merged)
        w = weights / weights.sum()
        return cls(shapes[:, :4].astype(float), shapes[:, 4].astype(np.int64), shapes[:, 5].astype(np.int64), w)


def cpu_seconds(workload: Workload, end_s: float) -> np.ndarray:
    """CPU-seconds (milli-CPU x s) each pod requests before ``end_s``: CPU request x
    min(lifetime, end_s - arrival); 0 for pods arriving at or after ``end_s``."""
    return workload.request[:, 0] * np.clip(np.minimum(workload.duration_s, end_s - workload.arrival_s), 0.0, None)


@dataclass(frozen=True)
class PoolTypicalPods:
    """One ``TypicalPods`` per node pool, indexed like ``Cluster.pools``."""

    pools: tuple[TypicalPods, ...]

    def __len__(self) -> int:
        return len(self.pools)

    def __getitem__(self, pool: int) -> TypicalPods:
        return self.pools[pool]

    @classmethod
    def same(cls, typical: TypicalPods, n_pools: int) -> "PoolTypicalPods":
        """The same typical set for each of ``n_pools`` pools."""
        return cls((typical,) * n_pools)

    @classmethod
    def from_workload(cls, workload: Workload, pool_names: tuple[str, ...] | list[str], start_s: float,
                      end_s: float, max_shapes: int = MAX_SHAPES, seed: int = 0) -> "PoolTypicalPods":
        """Per pool (``pool_names``, the cluster's pools in order): the typical pods of the pods
        arriving in ``[start_s, end_s)`` that may run on the pool (no node selector, or one naming
        it), each weighted by the CPU-seconds it requests before ``end_s`` (``cpu_seconds``)."""
        if not end_s > start_s:
            raise ValueError(f"typical pods: window [{start_s}, {end_s}) is empty")
        arrives = (workload.arrival_s >= start_s) & (workload.arrival_s < end_s)
        weight = np.where(arrives, cpu_seconds(workload, end_s), 0.0)
        sets = []
        for name in pool_names:
            may_run = workload.pool == -1
            if name in workload.pool_names:
                may_run = may_run | (workload.pool == workload.pool_names.index(name))
            rows = np.flatnonzero(may_run & (weight > 0))
            sets.append(TypicalPods.from_requests(workload.request[rows], workload.gpu_count[rows],
                                                  workload.gpu_milli[rows], weight[rows], max_shapes, seed))
        return cls(tuple(sets))

    def node_fragmentation(self, free: np.ndarray, gpu_free: np.ndarray, pool: np.ndarray) -> np.ndarray:
        """F_n of each node row, with the typical set of its pool (``pool``: [N] pool indices), in one
        compiled pass (``node_fragmentation``'s rule and summation order)."""
        free, gpu_free, pool = self._rows(free, gpu_free, pool)
        out = np.empty(len(free))
        _pool_fragmentation(free, gpu_free, pool, *self.padded, out)
        return out

    def fragmentation_decrease(self, request: np.ndarray, gpu_count: int, gpu_milli: int, free: np.ndarray,
                               gpu_free: np.ndarray, pool: np.ndarray, before: np.ndarray) -> np.ndarray:
        """[N] ``before`` minus F_n of each row with a pod of ``request`` [4], ``gpu_count`` GPUs of
        ``gpu_milli`` each placed on it, its GPUs taken as Bind takes them (``policy.fgd.assign_gpus``:
        a share on the fitting GPU with the least free milli, lowest index on ties, the first GPU when
        none fits; whole GPUs on the lowest-indexed entirely free ones), in one compiled pass."""
        free, gpu_free, pool = self._rows(free, gpu_free, pool)
        out = np.empty(len(free))
        _fragmentation_decrease(free, gpu_free, pool, np.ascontiguousarray(before, dtype=np.float64),
                                np.ascontiguousarray(request, dtype=np.float64).reshape(4), int(gpu_count),
                                int(gpu_milli), *self.padded, out)
        return out

    def _rows(self, free, gpu_free, pool) -> tuple:
        pool = np.ascontiguousarray(pool, dtype=np.int64).reshape(-1)
        free = np.ascontiguousarray(free, dtype=np.float64).reshape(-1, 4)
        if len(pool) != len(free):
            raise ValueError(f"{len(free)} nodes but {len(pool)} pool indices")
        if len(pool) and (pool.min() < 0 or pool.max() >= len(self.pools)):
            raise ValueError(f"pool index out of range: typical pods for {len(self.pools)} pools")
        return free, np.ascontiguousarray(gpu_free, dtype=np.int64).reshape(len(free), -1), pool

    @cached_property
    def padded(self) -> tuple:
        """The pools' typical pods as padded arrays (``simulator.kernels.padded_typical``), made once."""
        return padded_typical(self)


def typical_for_pools(named: tuple[str, ...], typical: PoolTypicalPods, pool_names) -> PoolTypicalPods:
    """The typical pods of the pools ``pool_names`` (a cluster's, in its order) from sets named by
    ``named`` (a model card's, ``typical_pods_from_json``): each pool gets the set of its name, and a
    pool ``named`` does not name gets none (its nodes' fragmentation is 0). The one rule by which the
    simulator's td3 policy and the decision engine measure a served model's fragmentation share."""
    if len(named) != len(typical.pools):
        raise ValueError(f"typical pods: {len(typical.pools)} sets for {len(named)} pool names {list(named)}")
    by_name = dict(zip(named, typical.pools))
    return PoolTypicalPods(tuple(by_name.get(str(name), TypicalPods.empty()) for name in pool_names))


def typical_pods_to_json(typical: PoolTypicalPods, pool_names) -> dict:
    """``typical`` as a model card keeps it (``typical_pods_from_json`` reads it back to the bit):
    ``{"pools": [name, ...], "sets": [{"request", "gpu_count", "gpu_milli", "weight"}, ...]}``, one set
    per pool named, in the cluster's pool order."""
    names = [str(n) for n in pool_names]
    if len(names) != len(typical.pools):
        raise ValueError(f"typical pods: {len(typical.pools)} sets for {len(names)} pool names {names}")
    return {"pools": names, "sets": [{"request": t.request.tolist(), "gpu_count": t.gpu_count.tolist(),
                                      "gpu_milli": t.gpu_milli.tolist(), "weight": t.weight.tolist()}
                                     for t in typical.pools]}


def typical_pods_from_json(data) -> tuple[tuple[str, ...], PoolTypicalPods]:
    """(pool names, typical pods per pool) from ``typical_pods_to_json``'s form, or a ValueError naming
    the entry and what was expected."""
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list) or not isinstance(data.get("sets"), list):
        raise ValueError("typical_pods: expected {\"pools\": [pool names], \"sets\": [one set per pool]}")
    names, sets = data["pools"], data["sets"]
    if len(names) != len(sets) or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"typical_pods: pools {names!r} with {len(sets)} sets: expected one set per distinct, "
                         "non-empty pool name")
    out = []
    for name, entry in zip(names, sets):
        where = f"typical_pods[{name!r}]"
        try:
            request = np.asarray(entry["request"], dtype=float).reshape(-1, 4)
            gpu_count = np.asarray(entry["gpu_count"], dtype=np.int64).reshape(-1)
            gpu_milli = np.asarray(entry["gpu_milli"], dtype=np.int64).reshape(-1)
            weight = np.asarray(entry["weight"], dtype=float).reshape(-1)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: expected request [M, 4], gpu_count [M], gpu_milli [M] and weight [M] "
                             f"numbers ({exc})") from None
        m = len(weight)
        if not (len(request) == len(gpu_count) == len(gpu_milli) == m):
            raise ValueError(f"{where}: {len(request)} requests, {len(gpu_count)} GPU counts, {len(gpu_milli)} "
                             f"GPU millis for {m} weights: expected one of each per shape")
        if not (np.isfinite(request).all() and (request >= 0).all() and (gpu_count >= 0).all()
                and ((gpu_milli >= 0) & (gpu_milli <= 1000)).all() and np.isfinite(weight).all()
                and (weight >= 0).all() and (m == 0 or abs(weight.sum() - 1.0) < 1e-9)):
            raise ValueError(f"{where}: expected non-negative requests and GPU counts, GPU millis in [0, 1000] "
                             "and weights >= 0 summing to 1")
        out.append(TypicalPods(request, gpu_count, gpu_milli, weight))
    return tuple(names), PoolTypicalPods(tuple(out))


def read_typical_pods(path) -> tuple[tuple[str, ...], PoolTypicalPods]:
    """(pool names, typical pods per pool) from a JSON file: ``typical_pods_to_json``'s form, or a model
    card whose ``typical_pods`` holds it (a model trained with a fragmentation share, or a shipped blend's
    card). A ValueError names the file and what was expected."""
    import json
    from pathlib import Path

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"typical pods {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"typical pods {path}: not readable JSON ({exc})") from None
    if isinstance(data, dict) and "typical_pods" in data:
        data = data["typical_pods"]
    try:
        return typical_pods_from_json(data)
    except ValueError as exc:
        raise ValueError(f"typical pods {path}: {exc} (or a model card holding them under typical_pods)") from None


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
    """F_n for each node row given: free CPU weighted by the share of typical pods that do not fit
    (``simulator.filter.fit_matrix``'s rule), in one compiled pass (``_row_fragmentation``).

    Each row's value depends on that row alone, to the bit: the unfit shapes' weights are summed in
    shape order, as the simulator's own metric kernel sums them (``simulator.kernels``), so a node
    scores the same however many others are scored with it. The simulator's FGD, which recomputes
    only the nodes that changed, and the decision engine, which measures a pod's candidates, agree
    exactly (a BLAS product's summation order moved with a row's place in the batch)."""
    return PoolTypicalPods((typical,)).node_fragmentation(free, gpu_free, np.zeros(len(free), dtype=np.int64))


@njit(cache=True, nogil=True)
def _row_fragmentation(free, gpu_free, k, request, gpu_count, gpu_milli, weight, length, checked):
    """F of one node (free [4], gpu_free [G]) of pool ``k``, as the simulator's metric kernel takes it
    (``simulator.kernels.unfit_share``)."""
    largest = -1
    whole = 0
    for g in range(gpu_free.shape[0]):
        f = gpu_free[g]
        if f > largest:
            largest = f
        if f == GPU_MILLI:
            whole += 1
    return max(free[0], 0.0) * unfit_share(free, largest, whole, k, request, gpu_count, gpu_milli, weight, length,
                                           checked)


@njit(cache=True, nogil=True)
def _pool_fragmentation(free, gpu_free, pool, request, gpu_count, gpu_milli, weight, length, checked, out):
    for n in range(free.shape[0]):
        out[n] = _row_fragmentation(free[n], gpu_free[n], pool[n], request, gpu_count, gpu_milli, weight, length,
                                    checked)


@njit(cache=True, nogil=True)
def _fragmentation_decrease(free, gpu_free, pool, before, pod_request, pod_count, pod_milli, request, gpu_count,
                            gpu_milli, weight, length, checked, out):
    row_free = np.empty(4)
    row_gpu = np.empty(gpu_free.shape[1], dtype=np.int64)
    unfit = np.iinfo(np.int64).max
    for n in range(free.shape[0]):
        for j in range(4):
            row_free[j] = free[n, j] - pod_request[j]
        for g in range(gpu_free.shape[1]):
            row_gpu[g] = gpu_free[n, g]
        if pod_count > 0 and gpu_free.shape[1] > 0:
            if pod_count == 1 and pod_milli < GPU_MILLI:
                best, least = 0, unfit
                for g in range(gpu_free.shape[1]):
                    if gpu_free[n, g] >= pod_milli and gpu_free[n, g] < least:
                        best, least = g, gpu_free[n, g]
                row_gpu[best] -= pod_milli
            else:
                taken = 0
                for g in range(gpu_free.shape[1]):
                    if gpu_free[n, g] == GPU_MILLI and taken < pod_count:
                        row_gpu[g] -= pod_milli
                        taken += 1
        out[n] = before[n] - _row_fragmentation(row_free, row_gpu, pool[n], request, gpu_count, gpu_milli, weight,
                                                length, checked)


def cluster_fragmentation(free: np.ndarray, gpu_free: np.ndarray, allocatable_cpu: np.ndarray,
                          typical: TypicalPods | PoolTypicalPods, pool: np.ndarray | None = None) -> float:
    """sum F_n / sum allocatable CPU over the given (provisioned) nodes; 0 for no nodes. With a
    ``PoolTypicalPods``, ``pool`` gives each node's pool index."""
    total = float(allocatable_cpu.sum())
    if total <= 0:
        return 0.0
    if isinstance(typical, PoolTypicalPods):
        if pool is None:
            raise ValueError("cluster_fragmentation: per-pool typical pods need the nodes' pool indices")
        f = typical.node_fragmentation(free, gpu_free, pool)
    else:
        f = node_fragmentation(free, gpu_free, typical)
    return float(f.sum() / total)
