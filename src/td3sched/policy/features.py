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
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import PodRequest
from td3sched.simulator.cluster import Cluster

FEATURES = ("cpu", "mem", "io", "net")


def utilisation(pod: PodRequest, nodes: np.ndarray, cluster: Cluster, recent: np.ndarray | None) -> np.ndarray:
    """[k, 4] utilisation of CPU, memory, disk and network of each node with the pod on it."""
    used = cluster.observed[nodes].copy()
    if recent is not None:
        used[:, :2] += recent[nodes]
    used[:, :2] += pod.nonzero_cpu_mem
    return used / cluster.capacity_usage[nodes]


def closeness(u: np.ndarray, tau: float) -> np.ndarray:
    """1 at tau, falling linearly to 0 at the far end of [0, 1]; clipped to [0, 1]."""
    return np.clip(1.0 - np.abs(u - tau) / max(tau, 1.0 - tau), 0.0, 1.0)
