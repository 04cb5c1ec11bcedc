"""Node features of the product's score, one implementation for ``static-weights`` and the TD3 policy.

For a pod and each feasible node, the utilisation of each resource *including the pod*, from the
observed (lagged) metrics corrected by the assign cache:

    u_cpu = (observed CPU + assign-cache CPU + pod CPU request) / allocatable CPU
    u_mem = (observed memory + assign-cache memory + pod memory request) / allocatable memory
    u_io  = observed disk bandwidth / node disk bandwidth
    u_net = observed network bandwidth / node NIC bandwidth

(kube-scheduler's non-zero defaults stand in for an empty CPU or memory request; a pod declares no
bandwidth, so it adds nothing to u_io and u_net.) Each feature is the closeness of u to the target
utilisation tau, the TargetLoadPacking shape: 1 at tau, falling linearly to 0 at the far end of [0, 1]

    f(u) = clip(1 - |u - tau| / max(tau, 1 - tau), 0, 1)

tau = 0 gives the idle fractions of the reference design (1 - u: C, M, I, N), tau = 1 a
most-allocated score (u).

**Requests share** (``with_requests``): the score may read CPU and memory by what pods *request*
rather than by what they use, as kube-scheduler does, or by a blend of the two:

    r_cpu = (non-zero requests of the node's pods + the pod's) / allocatable CPU      (r_mem alike)
    u'_r  = (1 - rho) x u_r + rho x r_r        r in {cpu, mem}; rho in [0, 1], the requests share

rho = 0 (the default) is the reference design's usage-only score, bit for bit; rho = 1 with weights
(1/2, 1/2, 0, 0) and tau = 0 is kube-scheduler's LeastAllocated. Requests are what a scheduler
promised; usage is what the node feels: a node whose pods request much and use little looks idle by
usage and full by requests, and only requests protect the pods that will grow into them.

**Balance** (``balanced``): how alike a node's CPU and memory fill, kube-scheduler's
BalancedAllocation for two resources before its rounding,

    b(u) = 1 - |min(u'_cpu, 1) - min(u'_mem, 1)| / 2          in [1/2, 1]

on the CPU and memory the score reads (``u'``: usage, requests or their blend). A node whose CPU and
memory fill alike leaves room for the next pod of either shape: it lowers fragmentation.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from td3sched.policy.base import PodRequest
from td3sched.simulator.cluster import Cluster

FEATURES = ("cpu", "mem", "io", "net")
_NO_RECENT = np.zeros((0, 2))
"""``recent`` of no node: the assign cache adds nothing."""


@njit(cache=True, nogil=True, boundscheck=True)
def candidate_utilisation(observed, recent, extra, capacity, nodes, out):
    """``utilisation`` into ``out`` [k, columns]: for node n = nodes[i],
    (observed[n, r] + recent[n, r] + extra[r]) / capacity[n, r] for the first ``extra.shape[0]``
    columns (CPU, memory), observed[n, r] / capacity[n, r] for the rest; ``recent`` of length 0 adds
    nothing. The additions in NumPy's order, so the values are the same to the bit; an index out of
    range raises IndexError, as NumPy's indexing does."""
    has_recent = recent.shape[0] > 0
    added = extra.shape[0]
    for i in range(nodes.shape[0]):
        n = nodes[i]
        for r in range(observed.shape[1]):
            v = observed[n, r]
            if r < added:
                if has_recent:
                    v = v + recent[n, r]
                v = v + extra[r]
            out[i, r] = v / capacity[n, r]
    return out


def utilisation(pod: PodRequest, nodes: np.ndarray, cluster: Cluster, recent: np.ndarray | None) -> np.ndarray:
    """[k, 4] utilisation of CPU, memory, disk and network of each node with the pod on it: the
    NumPy rule

        used = cluster.observed[nodes].copy(); used[:, :2] += recent[nodes]; used[:, :2] += pod.nonzero_cpu_mem
        u = used / cluster.capacity_usage[nodes]

    in one compiled pass (``candidate_utilisation``; a property test holds it to the rule, bit for
    bit). ``nodes`` are node indices (integers), ``recent`` [N, 2] or None."""
    nodes = np.asarray(nodes)
    if nodes.dtype.kind not in "iu":
        raise ValueError(f"utilisation: nodes of dtype {nodes.dtype}: expected node indices (integers)")
    out = np.empty((nodes.shape[0], cluster.observed.shape[1]))
    return candidate_utilisation(cluster.observed, _NO_RECENT if recent is None else recent, pod.nonzero_cpu_mem,
                                 cluster.capacity_usage, nodes, out)


def requested_utilisation(pod: PodRequest, nodes: np.ndarray, cluster) -> np.ndarray:
    """[k, 2] CPU and memory requested on each node with the pod on it, over the node's allocatable:
    (non-zero requests bound there + the pod's non-zero request) / capacity, the requests kube-scheduler
    scores (``cluster.nonzero_requested``, kube-scheduler's non-zero defaults for an empty request)."""
    nodes = np.asarray(nodes)
    return (cluster.nonzero_requested[nodes] + pod.nonzero_cpu_mem) / cluster.capacity_usage[nodes, :2]


def with_requests(u: np.ndarray, r: np.ndarray, share: float) -> np.ndarray:
    """``u`` [k, 4] with its CPU and memory columns blended with the requested utilisation ``r`` [k, 2]:
    (1 - share) x u + share x r. ``share`` 0 returns ``u`` itself (the usage-only score, unchanged)."""
    if share == 0.0:
        return u
    out = u.copy()
    out[:, :2] = (1.0 - share) * u[:, :2] + share * r
    return out


def balanced(u: np.ndarray) -> np.ndarray:
    """[k] balance of nodes of utilisation ``u`` [k, >=2]: 1 - |min(u_cpu, 1) - min(u_mem, 1)| / 2."""
    return 1.0 - np.abs(np.minimum(u[:, 0], 1.0) - np.minimum(u[:, 1], 1.0)) / 2.0


def closeness(u: np.ndarray, tau: float) -> np.ndarray:
    """1 at tau, falling linearly to 0 at the far end of [0, 1]; clipped to [0, 1]."""
    return np.clip(1.0 - np.abs(u - tau) / max(tau, 1.0 - tau), 0.0, 1.0)
