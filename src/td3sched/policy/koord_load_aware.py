"""``koord-loadaware``: Koordinator LoadAwareScheduling, least-used real load with a usage filter.

Follows koordinator-sh/koordinator pkg/scheduler/plugins/loadaware/ (load_aware.go Filter, Score,
loadAwareSchedulingScorer; estimator/default_estimator.go; pod_assign_cache.go addPod) and the
defaults of pkg/scheduler/apis/config/v1beta3/defaults.go. CPU in milli-cores, memory in bytes:

    estimate(p)_r = round(q_r * factor_r / 100), capped at the limit      q_r = limit if limit > request
                    default 250m CPU / 200 MiB when q_r = 0 (no request and no limit)      else request
    used_n,r      = observed_n,r                                          node usage, system included
                    + sum of estimate(p)_r over pods p bound to n at t_bind > last_scrape_s - window_s
                    + estimate(pod)_r                                     the pod being scheduled
    Filter        : n passes when round(100 * used_n,r / alloc_n,r) <= threshold_r for every r
    Score         : (sum_r w_r * least_r) // sum_r w_r,  least_r = (alloc - used) * 100 // alloc (0 if used > alloc)

Defaults: thresholds CPU 65%, memory 95%; weights CPU 1, memory 1; scaling factors CPU 85%, memory
70%; round is Go's (halves away from zero).

The Filter is the policy's ``filter`` hook: the simulator applies it after its own Filter, and a
pod that no node passes stays pending (Unschedulable) until a retry finds a node, as in Koordinator.

Mapping to the simulator:
- Node usage is ``Cluster.observed`` (koordlet's NodeMetric NodeUsage, reported every 60 s).
- Koordinator adds the estimate of a pod whose usage the NodeMetric does not have yet, or that was
  bound less than the report interval (60 s) before the NodeMetric update, minus the pod's reported
  usage (``max(0, estimate - reported)``). The pipeline publishes node usage only, so a pod bound in
  the last ``window_s`` (60 s, the simulator's counterpart of the report interval) before the last
  scrape counts with its whole estimate even if the scrape saw part of it.
- The original drops a pod from its cache when the pod is deleted; policies are not told of
  departures, so a pod that leaves within ``window_s`` of its bind still counts until it ages out.
- Prod-pod thresholds, aggregated (percentile) usage and metric expiry are not modelled.

Spec: ``koord-loadaware:cpu_threshold=65:mem_threshold=95:cpu_weight=1:mem_weight=1:cpu_factor=85:mem_factor=70``.
Thresholds and factors are whole percentages in [1, 100] (Koordinator's validateResourceThresholds;
a threshold of 0 turns that resource's check off, as a missing threshold does in Koordinator);
weights are whole numbers in [1, 100] (validateResourceWeights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.go_arith import go_round
from td3sched.policy.k8s_default import MAX_NODE_SCORE, MIB
from td3sched.policy.spec import args_from_spec, require
from td3sched.simulator.cluster import Cluster

NAME = "koord-loadaware"
DEFAULT_MILLI_CPU = 250.0
"""Estimate of a pod with no CPU request or limit (estimator DefaultMilliCPURequest, 0.25 core)."""
DEFAULT_MEMORY_BYTES = 200.0 * MIB
"""Estimate of a pod with no memory request or limit (estimator DefaultMemoryRequest, 200 MiB)."""


@dataclass(frozen=True)
class LoadAwareArgs:
    cpu_threshold: int = 65
    """Filter: reject a node whose estimated CPU usage would exceed this % of allocatable (0 = no check)."""
    mem_threshold: int = 95
    """Filter: reject a node whose estimated memory usage would exceed this % of allocatable (0 = no check)."""
    cpu_weight: int = 1
    """Weight of CPU in the least-used score."""
    mem_weight: int = 1
    """Weight of memory in the least-used score."""
    cpu_factor: int = 85
    """Estimated CPU usage of a pod not yet in the metrics, % of its request (or limit when larger)."""
    mem_factor: int = 70
    """Estimated memory usage of a pod not yet in the metrics, % of its request (or limit when larger)."""

    def __post_init__(self) -> None:
        for name, low in (("cpu_threshold", 0), ("mem_threshold", 0), ("cpu_weight", 1), ("mem_weight", 1),
                          ("cpu_factor", 1), ("mem_factor", 1)):
            v = getattr(self, name)
            require(NAME, name, v, isinstance(v, int) and low <= v <= 100, f"a whole number in [{low}, 100]")


def estimate_usage(pod: PodRequest, args: LoadAwareArgs) -> np.ndarray:
    """[2] estimated CPU milli and memory bytes of ``pod`` (the default estimator)."""
    out = np.empty(2)
    for r, (request, limit, factor, default) in enumerate((
            (pod.request[0], pod.cpu_limit_milli, args.cpu_factor, DEFAULT_MILLI_CPU),
            (pod.request[1] * MIB, pod.mem_limit_mib * MIB, args.mem_factor, DEFAULT_MEMORY_BYTES))):
        limit = limit if np.isfinite(limit) else 0.0   # inf = no limit
        quantity = limit if limit > request else request
        if quantity == 0:
            out[r] = default
            continue
        estimate = float(go_round(quantity * factor / 100))
        out[r] = min(estimate, limit) if limit > 0 else estimate
    return out


def least_used(used, alloc) -> np.ndarray:
    """Koordinator's leastUsedScore: (alloc - used) * 100 // alloc, 0 when used > alloc."""
    return np.where(used > alloc, 0.0, np.floor((alloc - used) * MAX_NODE_SCORE / alloc))


class KoordLoadAware(Policy):
    name = NAME

    def __init__(self, args: LoadAwareArgs = LoadAwareArgs()):
        self.args = args
        self.cache: AssignCache | None = None
        self.thresholds = np.array([args.cpu_threshold, args.mem_threshold], dtype=float)

    @classmethod
    def from_spec(cls, spec: str) -> "KoordLoadAware":
        return cls(args_from_spec(LoadAwareArgs, NAME, spec))

    def attach(self, context) -> None:
        super().attach(context)
        self.lookback_s = context.window_s
        self.cache = AssignCache(context.cluster.size, columns=2, horizon_s=context.window_s + context.scrape_s)

    def estimated_used(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """[k, 2] used_n,r of the formula: observed + recent pods' estimates + the pod's estimate."""
        used = cluster.observed[nodes, :2] * [1.0, MIB]
        if self.cache is not None:
            since = np.nextafter(cluster.last_scrape_s - self.lookback_s, np.inf)  # strictly after
            used += self.cache.usage_since(since)[nodes]
        return used + estimate_usage(pod, self.args)

    def rejected(self, used: np.ndarray, alloc: np.ndarray) -> np.ndarray:
        """[k] Koordinator's Filter verdict: some resource's rounded usage % above its threshold."""
        pct = go_round(used / alloc * 100)
        return ((self.thresholds > 0) & (pct > self.thresholds)).any(axis=1)

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        alloc = cluster.allocatable[nodes, :2] * [1.0, MIB]
        used = self.estimated_used(pod, nodes, cluster)
        a = self.args
        score = np.floor((a.cpu_weight * least_used(used[:, 0], alloc[:, 0])
                          + a.mem_weight * least_used(used[:, 1], alloc[:, 1])) / (a.cpu_weight + a.mem_weight))
        return score

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        alloc = cluster.allocatable[nodes, :2] * [1.0, MIB]
        return ~self.rejected(self.estimated_used(pod, nodes, cluster), alloc)

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        if self.cache is not None:
            self.cache.add(node, pod.time_s, estimate_usage(pod, self.args))
