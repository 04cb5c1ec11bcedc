"""CPU contention on a node: how Linux shares a node's CPU between its pods' cgroups.

**Weights.** The kubelet turns a pod's CPU request into cgroup v1 shares (kubernetes
``pkg/kubelet/cm/helpers_linux.go``, ``MilliCPUToShares``)::

    shares = clamp(request_milli * 1024 // 1000, MinShares=2, MaxShares=262144)

so a zero request (BestEffort) gets MinShares 2. On cgroup v2 shares become ``cpu.weight`` by the
linear map of [2, 262144] onto [1, 10000] (opencontainers/runc ``libcontainer/cgroups/utils.go``,
``ConvertCPUSharesToCgroupV2Value``, now in opencontainers/cgroups ``utils.go``; the kubelet's own
``getCPUWeight`` in ``pkg/kubelet/cm/cgroup_manager_linux.go``, which writes the pod cgroups, is
the same formula capped at 10000)::

    weight = 1 + ((shares - 2) * 9999) // 262142

**Split.** CFS bandwidth control caps a pod at its limit (``cpu.max`` quota, kernel
``Documentation/scheduler/sched-bwc.rst``), so a pod can use at most ``d = min(demand, limit)``.
CFS shares the CPU between runnable cgroups in proportion to ``cpu.weight`` and is
work-conserving (kernel ``Documentation/admin-guide/cgroup-v2.rst``, "Weights"): a pod that wants
less than its share leaves the remainder to the others. That is weighted max-min fairness. On a node with capacity
``C`` whose pods want more than ``C`` in total, the level ``lambda`` solves::

    sum_i min(d_i, lambda * w_i) = C          and pod i gets   min(d_i, lambda * w_i)

With the pods sorted by ``r_i = d_i / w_i``, the left side at ``lambda = r_k`` is
``f_k = sum_{j<k} d_j + r_k * sum_{j>=k} w_j`` (non-decreasing in k); for the first k with
``f_k >= C``, ``lambda = (C - sum_{j<k} d_j) / sum_{j>=k} w_j``. ``deliver_cpu`` does this for
all nodes at once: one sort by (node, r), cumulative sums restarted per node, no Python loop.

**What is simplified.** The split is flat over the node's pods. The real cgroup tree has a level
more: Guaranteed pods sit under ``kubepods`` next to the ``burstable`` and ``besteffort`` QoS
cgroups (the kubelet sets ``burstable`` to the shares of the sum of its pods' requests and
``besteffort`` to MinShares), so CPU left over by an idle Burstable pod goes to the other
Burstable pods first. CPU the node's system daemons use is served first: callers pass, per node,
``capacity_milli = allocatable + system reserved - system daemons' usage``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
MAX_WEIGHT = 10000


@dataclass(frozen=True)
class CpuShare:
    """CPU a node's pods get in one tick, per pod and summed per node (milli-CPU)."""

    delivered_milli: np.ndarray
    """[P] CPU each pod gets: at most its demand capped at its limit."""
    throttled_milli: np.ndarray
    """[P] demand above the pod's limit, cut by the CFS quota: ``demand - min(demand, limit)``."""
    node_demand_milli: np.ndarray
    """[N] effective demand ``sum min(demand, limit)`` of each node's pods."""
    node_delivered_milli: np.ndarray
    """[N] CPU each node delivers to its pods, ``<= capacity_milli``. The node's raw demand is
    ``node_demand_milli + node_throttled_milli``; ``node_demand_milli - node_delivered_milli`` is
    the demand lost to contention (``cpu_contention_frac`` when divided by the demand)."""
    node_throttled_milli: np.ndarray
    """[N] demand above limits summed per node (``cpu_throttled_frac`` when divided by the demand)."""


def cpu_weight(request_cpu_milli: np.ndarray) -> np.ndarray:
    """cgroup v2 ``cpu.weight`` (int64, 1..10000) of pods with these CPU requests (milli-CPU, >= 0).

    ``shares = clamp(request * 1024 // 1000, 2, 262144)`` (kubelet ``MilliCPUToShares``), then
    ``weight = 1 + ((shares - 2) * 9999) // 262142`` (runc ``ConvertCPUSharesToCgroupV2Value``).
    A fractional request is rounded up to whole milli-CPU, as ``Quantity.MilliValue`` does.
    """
    request = np.asarray(request_cpu_milli, dtype=np.float64)
    bad = ~(np.isfinite(request) & (request >= 0))
    if bad.any():
        i = np.argwhere(bad)[0]
        raise ValueError(f"cpu_weight: request_cpu_milli{list(i)} = {request[tuple(i)]!r}: "
                         "expected a finite CPU request in milli-CPU >= 0")
    milli = np.ceil(request).astype(np.int64)
    shares = np.clip(milli * SHARES_PER_CPU // MILLI_CPU_TO_CPU, MIN_SHARES, MAX_SHARES)
    return 1 + ((shares - MIN_SHARES) * (MAX_WEIGHT - 1)) // (MAX_SHARES - MIN_SHARES)


def deliver_cpu(node_of: np.ndarray, demand_milli: np.ndarray, weight: np.ndarray, limit_milli: np.ndarray,
                capacity_milli: np.ndarray) -> CpuShare:
    """Split each node's CPU between its pods as CFS does (module docstring).

    ``node_of`` [P] is each pod's node index into ``capacity_milli`` [N]; ``demand_milli`` [P] is
    the CPU the pod would use on an idle node; ``weight`` [P] its ``cpu.weight`` (``cpu_weight``);
    ``limit_milli`` [P] its CPU limit (``inf`` = none). ``capacity_milli`` [N] is what the node
    has for pods once its system daemons are served. Nodes may hold no pods.
    """
    node_of, demand, weight, limit, capacity = _validated(node_of, demand_milli, weight, limit_milli,
                                                          capacity_milli)
    n_nodes = len(capacity)
    effective = np.minimum(demand, limit)
    throttled = demand - effective
    node_demand = _per_node(node_of, effective, n_nodes)
    on_short = (node_demand > capacity)[node_of]      # pods on nodes in contention
    if on_short.all() and len(on_short):
        delivered = _water_fill(node_of, effective, weight, capacity)
    else:
        delivered = effective.copy()
        if on_short.any():
            on_short = np.flatnonzero(on_short)
            delivered[on_short] = _water_fill(node_of[on_short], effective[on_short], weight[on_short], capacity)
    return CpuShare(
        delivered_milli=delivered,
        throttled_milli=throttled,
        node_demand_milli=node_demand,
        node_delivered_milli=_per_node(node_of, delivered, n_nodes),
        node_throttled_milli=_per_node(node_of, throttled, n_nodes),
    )


def sharing_pressure(node_of: np.ndarray, demand_milli: np.ndarray, weight: np.ndarray,
                     capacity_milli: np.ndarray) -> np.ndarray:
    """[P] the CPU pressure each pod meets on its node under weighted processor sharing (GPS):

        rho_i = sum_j min(d_j, r_i * w_j) / C_n,     r_i = d_i / w_i,  j over the pods of i's node

    the demand the node must serve before pod i is fully served at its own weighted level, over the
    node's capacity (Parekh and Gallager, "A Generalized Processor Sharing Approach to Flow Control",
    IEEE/ACM ToN 1993). With equal weights and one pod it is the node's utilisation; a heavy
    weight (a large request) shields a pod from BestEffort neighbours; rho_i >= 1 exactly when pod
    i does not get its demand (``deliver_cpu``). ``demand_milli`` is after the limit; a pod with
    no demand meets no pressure.
    """
    node_of, demand, w, _, capacity = _validated(node_of, demand_milli, weight, np.full(len(demand_milli), np.inf),
                                                 capacity_milli)
    if len(demand) == 0:
        return np.zeros(0)
    f = _sorted_levels(node_of, demand, w, len(capacity))
    cap = capacity[node_of[f.order]]
    out = np.empty_like(demand)
    out[f.order] = np.where(cap > 0, f.level_at / np.where(cap > 0, cap, 1.0), np.where(f.d_s > 0, np.inf, 0.0))
    return out


@dataclass(frozen=True)
class _Levels:
    """Pods sorted by (node, d/w), with the water-filling function at each pod's own level."""

    order: np.ndarray
    d_s: np.ndarray
    w_s: np.ndarray
    nodes: np.ndarray
    """Nodes with pods, in sorted order; ``count`` pods each, the first at ``start``."""
    count: np.ndarray
    start: np.ndarray
    d_before: np.ndarray
    """sum_{j<k} d_j within the node."""
    w_from: np.ndarray
    """sum_{j>=k} w_j within the node."""
    level_at: np.ndarray
    """f_k = d_before + r_k * w_from, non-decreasing within a node."""


def _sorted_levels(node_of: np.ndarray, demand: np.ndarray, weight: np.ndarray, n_nodes: int) -> _Levels:
    order = _order_by_node_then(node_of, demand / weight, n_nodes)
    d_s, w_s = demand[order], weight[order]
    count = np.bincount(node_of, minlength=n_nodes)
    nodes = np.flatnonzero(count)                    # sorted pods run node by node, in node order
    count = count[nodes]
    start = np.cumsum(count) - count                 # first sorted pod of each node
    d_before = np.cumsum(d_s) - d_s                  # sum_{j<k} d_j, not yet restarted per node
    w_before = np.cumsum(w_s) - w_s
    d_before -= np.repeat(d_before[start], count)    # restart at each node's first pod
    w_before -= np.repeat(w_before[start], count)
    w_from = np.repeat(np.add.reduceat(w_s, start), count) - w_before   # sum_{j>=k} w_j
    level_at = d_before + (d_s / w_s) * w_from
    return _Levels(order, d_s, w_s, nodes, count, start, d_before, w_from, level_at)


def _per_node(node_of: np.ndarray, values: np.ndarray, n_nodes: int) -> np.ndarray:
    """Sum of ``values`` per node, float64 [N] (``np.bincount`` gives int64 when there are no pods)."""
    return np.bincount(node_of, weights=values, minlength=n_nodes).astype(np.float64, copy=False)


def _water_fill(node_of: np.ndarray, demand: np.ndarray, weight: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Weighted max-min split of ``capacity[n]`` between the pods of each node n (module docstring).

    Every node present must be short (its pods' demand above its capacity).
    """
    f = _sorted_levels(node_of, demand, weight, len(capacity))
    cap = capacity[f.nodes]
    k = np.add.reduceat(f.level_at < np.repeat(cap, f.count), f.start, dtype=np.intp)
    # f_last = the node's demand > capacity, so k < count; the minimum guards against rounding
    pos = f.start + np.minimum(k, f.count - 1)
    level = np.maximum((cap - f.d_before[pos]) / f.w_from[pos], 0.0)
    out = np.empty_like(demand)
    out[f.order] = np.minimum(f.d_s, np.repeat(level, f.count) * f.w_s)
    return out


def _order_by_node_then(node_of: np.ndarray, key: np.ndarray, n_nodes: int) -> np.ndarray:
    """Permutation sorting by node, then by ``key`` within a node (about 5x faster than ``np.lexsort``)."""
    by_key = np.argsort(key)
    if n_nodes <= np.iinfo(np.uint16).max + 1:       # stable sort of 16-bit ints is a radix sort
        return by_key[np.argsort(node_of[by_key].astype(np.uint16), kind="stable")]
    composite = node_of[by_key].astype(np.int64) * len(key) + np.arange(len(key))
    return by_key[np.argsort(composite)]


def _validated(node_of, demand_milli, weight, limit_milli, capacity_milli):
    capacity = _float_vector("capacity_milli", capacity_milli)
    node = np.asarray(node_of)
    if node.ndim != 1:
        raise ValueError(f"deliver_cpu: node_of has shape {node.shape}, expected one node index per pod [P]")
    if node.size and not np.issubdtype(node.dtype, np.integer):
        raise ValueError(f"deliver_cpu: node_of has dtype {node.dtype}, expected integer node indices")
    n_pods = len(node)
    out_of_range = (node < 0) | (node >= len(capacity))
    if out_of_range.any():
        i = int(np.argmax(out_of_range))
        raise ValueError(f"deliver_cpu: node_of[{i}] = {node[i]}: expected a node index in "
                         f"[0, {len(capacity)}) (capacity_milli has {len(capacity)} nodes)")
    demand = _float_vector("demand_milli", demand_milli, n_pods)
    w = _float_vector("weight", weight, n_pods)
    limit = _float_vector("limit_milli", limit_milli, n_pods)
    _require("demand_milli", demand, np.isfinite(demand) & (demand >= 0), "a finite CPU demand >= 0")
    _require("weight", w, np.isfinite(w) & (w > 0), "a finite cpu.weight > 0 (see cpu_weight)")
    _require("limit_milli", limit, limit >= 0, "a CPU limit >= 0, inf for none")  # NaN fails too
    _require("capacity_milli", capacity, capacity >= 0, "a node CPU capacity >= 0")
    return node.astype(np.intp, copy=False), demand, w, limit, capacity


def _float_vector(name: str, value, n: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"deliver_cpu: {name} is not numeric: {exc}") from None
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        expected = "one value per node [N]" if n is None else f"one value per pod, shape ({n},) like node_of"
        raise ValueError(f"deliver_cpu: {name} has shape {arr.shape}, expected {expected}")
    return arr


def _require(name: str, arr: np.ndarray, ok: np.ndarray, expected: str) -> None:
    if not ok.all():
        i = int(np.argmin(ok))
        raise ValueError(f"deliver_cpu: {name}[{i}] = {arr[i]!r}: expected {expected}")
