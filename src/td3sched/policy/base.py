"""The interface every scoring policy implements: (pod, feasible nodes, cluster) -> scores."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from td3sched.simulator.cluster import Cluster

#: kube-scheduler's non-zero defaults for a container with no request (pkg/scheduler/util).
DEFAULT_MILLI_CPU_REQUEST = 100.0
DEFAULT_MEMORY_REQUEST_MIB = 200.0
RELEASE_REASONS = ("departure", "evicted:scale_down", "evicted:memory_pressure")
"""Why a pod left its node (``Policy.released``): it ran to its end; the autoscaler drained its node;
the kubelet evicted it under memory pressure. An evicted pod is recreated and scheduled again. A
container killed for memory stays on its node and restarts there: not a release."""


@dataclass(frozen=True)
class PodRequest:
    """What a policy may know of the pod being scheduled."""

    index: int
    request: np.ndarray
    """[4] CPU milli, memory MiB, disk GiB, RDMA %."""
    gpu_count: int
    gpu_milli: int
    qos: int
    cpu_limit_milli: float
    mem_limit_mib: float
    time_s: float
    app: object = None
    """The pod's workload, whose pods are its siblings (``policy.siblings``): the app's index in the
    simulator, the controller that owns it (namespace/kind/name) in the engine; None: a pod of its own."""

    @property
    def nonzero_cpu_mem(self) -> np.ndarray:
        """CPU and memory request with kube-scheduler's defaults for an empty request."""
        cpu, mem = self.request[0], self.request[1]
        return np.array([cpu if cpu > 0 else DEFAULT_MILLI_CPU_REQUEST,
                         mem if mem > 0 else DEFAULT_MEMORY_REQUEST_MIB])


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may see of a run besides the pod: the cluster (requests, allocatable and the
    *observed* usage of the metrics pipeline; never the ground truth), the metrics pipeline's
    settings, and the scenario's typical pods (for fragmentation-aware policies). ``hindsight`` and
    ``Cluster.usage`` are ground truth, for hindsight policies (reference bounds) only."""

    cluster: Cluster
    scrape_s: float
    window_s: float
    typical: object
    """``metrics.fragmentation.PoolTypicalPods`` of the scenario: typical pods per node pool,
    indexed like ``cluster.pools``."""
    pipeline: object
    """``simulator.metrics_pipeline.MetricsPipeline``: usage statistics over its history."""
    oom_kills: Callable[[], int] | None = None
    """Node OOM kills so far in the run (Kubernetes reports them as events any scheduler can watch)."""
    score_levels: int = 0
    """``SimConfig.served_score_levels``: the whole-number scale the product's score reaches the scheduler
    on (0: unrounded)."""
    hindsight: object | None = None
    """Ground truth for hindsight policies only (``oracle``): ``simulator.usage.Hindsight``, every pod's
    future usage. The simulator fills it; a policy that competes must never read it."""


class Policy(ABC):
    """A scoring policy. Higher score wins; the simulator breaks ties uniformly at random."""

    name = "policy"
    compiled_score: str | None = None
    """The name of a compiled score the simulator's fast loop knows (``simulator.fastpath``), for a
    policy whose ``score`` is that kernel and that has no filter or hooks; None otherwise."""

    @property
    def fingerprint(self) -> str:
        """What a run's outcome depends on besides the policy's spec (a trained model's hash), or ""
        when the spec says it all. Recorded in every run; a resumed grid recomputes a run whose
        fingerprint differs from the policy's now."""
        return ""

    def attach(self, context: PolicyContext) -> None:
        """Told once, before a run starts, what it may see of the run."""
        self.context = context

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray | None:
        """The policy's own Filter, applied after the simulator's: a bool mask over ``nodes`` (False
        rejects a node), or None to keep them all. No node left: the pod stays pending."""
        return None

    @abstractmethod
    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Scores of the feasible ``nodes`` (indices into the cluster's arrays) for ``pod``."""

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        """Told after the pod is bound to ``node`` (for policies that remember recent placements)."""

    def choose_gpus(self, pod: PodRequest, node: int, cluster: Cluster) -> np.ndarray | None:
        """The GPUs of ``node`` the pod is bound to, or None for Bind's own choice
        (``simulator.filter.choose_gpus``: best fit for a share, the first idle GPUs otherwise)."""
        return None

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        """Told after the pod has left ``node``, for policies that count what each node holds;
        ``reason`` is one of ``RELEASE_REASONS``."""

    @property
    def counts_releases(self) -> bool:
        """Whether the simulator tells this policy of releases (``released``); only a policy that overrides
        ``released`` is told (one call per departure otherwise). A policy that counts only in some settings
        says so here."""
        return type(self).released is not Policy.released
