"""``k8s-most-allocated``: kube-scheduler's bin-packing resource scoring.

NodeResourcesFit with the MostAllocated strategy plus NodeResourcesBalancedAllocation, plugin
weight 1 each, on requests, as kube-scheduler computes them (kubernetes
pkg/scheduler/framework/plugins/noderesources/most_allocated.go, resource_allocation.go,
balanced_allocation.go):

    MostAllocated      = (sum_r w_r * (min(req_r, alloc_r) * 100 // alloc_r)) // sum_r w_r,  r in (cpu, memory)
                         req_r = node's non-zero requested + pod's non-zero request (100m CPU and
                         200 MiB for an empty request); a req_r above alloc_r counts as alloc_r
    BalancedAllocation = int((1 - |f_cpu - f_mem| / 2) * 100), f_r = min(1, (requested + pod) / alloc)
                         on actual requests; skipped (0) for a BestEffort pod (k8s_default.balanced_allocation)
    score = MostAllocated + BalancedAllocation                                            (0..200)

Memory is counted in bytes and CPU in milli-cores, as kube-scheduler counts them, so the integer
divisions match.

Spec: ``k8s-most-allocated:cpu_weight=1:mem_weight=1``. Defaults: weight 1 each (kube-scheduler's
default ``resources`` of the NodeResourcesFit scoring strategy); a weight must be a whole number in
[1, 100] (kube-scheduler's validateResources).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.k8s_default import MAX_NODE_SCORE, MIB, balanced_allocation
from td3sched.policy.spec import args_from_spec, require
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BEST_EFFORT

NAME = "k8s-most-allocated"
MAX_RESOURCE_WEIGHT = 100


@dataclass(frozen=True)
class MostAllocatedArgs:
    cpu_weight: int = 1
    """Weight of CPU in MostAllocated (kube-scheduler default 1)."""
    mem_weight: int = 1
    """Weight of memory in MostAllocated (kube-scheduler default 1)."""

    def __post_init__(self) -> None:
        for name in ("cpu_weight", "mem_weight"):
            w = getattr(self, name)
            require(NAME, name, w, isinstance(w, int) and 1 <= w <= MAX_RESOURCE_WEIGHT,
                    f"a whole number in [1, {MAX_RESOURCE_WEIGHT}]")


def most_allocated(requested_cpu, requested_mem, alloc_cpu, alloc_mem, cpu_weight: int = 1,
                   mem_weight: int = 1) -> np.ndarray:
    """kube-scheduler's mostResourceScorer for cpu and memory. Inputs are whole milli-CPU and bytes
    held as float64 (exact below 2**53), so floor of the quotient equals Go's integer division."""
    cpu = np.floor(np.minimum(requested_cpu, alloc_cpu) * MAX_NODE_SCORE / alloc_cpu)
    mem = np.floor(np.minimum(requested_mem, alloc_mem) * MAX_NODE_SCORE / alloc_mem)
    return np.floor((cpu_weight * cpu + mem_weight * mem) / (cpu_weight + mem_weight))


class K8sMostAllocated(Policy):
    name = NAME

    def __init__(self, args: MostAllocatedArgs = MostAllocatedArgs()):
        self.args = args

    @classmethod
    def from_spec(cls, spec: str) -> "K8sMostAllocated":
        return cls(args_from_spec(MostAllocatedArgs, NAME, spec))

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        alloc_cpu = cluster.allocatable[nodes, 0]
        alloc_mem = cluster.allocatable[nodes, 1] * MIB
        nz = pod.nonzero_cpu_mem
        nonzero = cluster.nonzero_requested[nodes]
        score = most_allocated(nonzero[:, 0] + nz[0], (nonzero[:, 1] + nz[1]) * MIB, alloc_cpu, alloc_mem,
                               self.args.cpu_weight, self.args.mem_weight)
        if pod.qos != BEST_EFFORT:
            requested = cluster.requested[nodes]
            score += balanced_allocation(requested[:, 0] + pod.request[0], (requested[:, 1] + pod.request[1]) * MIB,
                                         alloc_cpu, alloc_mem)
        return score
