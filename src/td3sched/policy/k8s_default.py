"""``k8s-default``: kube-scheduler's default resource scoring.

NodeResourcesFit with the LeastAllocated strategy (cpu weight 1, memory weight 1) plus
NodeResourcesBalancedAllocation, plugin weight 1 each, computed on requests exactly as
kube-scheduler does (kubernetes pkg/scheduler/framework/plugins/noderesources:
least_allocated.go, balanced_allocation.go, resource_allocation.go):

    LeastAllocated   = (sum_r w_r * floor((alloc_r - req_r) * 100 / alloc_r)) // sum_r w_r
                       req_r = node's non-zero requested + pod's non-zero request (100m CPU and
                       200 MiB for an empty request); 0 when req_r > alloc_r
    BalancedAllocation = int((1 - |f_cpu - f_mem| / 2) * 100), f_r = min(1, (requested + pod) / alloc)
                       on actual requests; skipped (0) for a BestEffort pod
    score = LeastAllocated + BalancedAllocation

Memory is counted in bytes, as kube-scheduler counts it, so integer rounding matches.
"""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.kernels import k8s_default_scores
from td3sched.workload.pods import BEST_EFFORT

MAX_NODE_SCORE = 100
MIB = float(1 << 20)


def least_allocated(requested_cpu, requested_mem, alloc_cpu, alloc_mem) -> np.ndarray:
    """kube-scheduler's leastResourceScorer, cpu and memory weight 1. Inputs are whole milli-CPU
    and bytes held as float64 (exact below 2**53); the floor of the correctly rounded quotient equals
    Go's integer division at these magnitudes, and a negative score (requested > capacity) is 0."""
    cpu = np.maximum(np.floor((alloc_cpu - requested_cpu) * MAX_NODE_SCORE / alloc_cpu), 0.0)
    mem = np.maximum(np.floor((alloc_mem - requested_mem) * MAX_NODE_SCORE / alloc_mem), 0.0)
    cpu += mem
    return np.floor(cpu / 2, out=cpu)


def balanced_allocation(requested_cpu, requested_mem, alloc_cpu, alloc_mem) -> np.ndarray:
    """kube-scheduler's balancedResourceScorer for cpu and memory."""
    f_cpu = np.minimum(requested_cpu / alloc_cpu, 1.0)
    f_mem = np.minimum(requested_mem / alloc_mem, 1.0)
    return np.trunc((1 - np.abs(f_cpu - f_mem) / 2) * MAX_NODE_SCORE)


class K8sDefault(Policy):
    name = "k8s-default"
    compiled_score = "k8s-default"  # the simulator's compiled loop scores with k8s_default_scores too

    def __init__(self) -> None:
        self._cluster: Cluster | None = None

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """``least_allocated`` + ``balanced_allocation``, in one compiled pass (bit-identical)."""
        if self._cluster is not cluster:  # allocatable never changes: keep contiguous copies
            self._cluster = cluster
            self._alloc_cpu = np.ascontiguousarray(cluster.allocatable[:, 0])
            self._alloc_mem = cluster.allocatable[:, 1] * MIB
        nz = pod.nonzero_cpu_mem
        out = np.empty(len(nodes))
        k8s_default_scores(np.asarray(nodes, dtype=np.int64), cluster.nonzero_requested, cluster.requested,
                           self._alloc_cpu, self._alloc_mem, float(nz[0]), float(nz[1]), float(pod.request[0]),
                           float(pod.request[1]), pod.qos == BEST_EFFORT, MIB, out)
        return out
