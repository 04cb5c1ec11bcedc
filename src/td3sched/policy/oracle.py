"""``oracle``: a hindsight reference bound, not a competitor. Least true peak load after placement.

It reads what no real scheduler has: every node's *true* current usage (``Cluster.usage``, the
ground truth, where every other policy reads the lagged ``Cluster.observed``) and the pod's own
*future* usage (``PolicyContext.hindsight``, ``simulator.usage.Hindsight``). It measures the
head-room a learned policy could reach; it is never part of ``--policies all`` and must be named.

    H       = min(remaining run time of the pod, horizon_s)              look-ahead window
    peak_r  = max over the profile slots of [t, t + H) of the pod's usage_r     r in CPU, memory
              (the simulator's formula, simulator/usage.py; memory capped at the pod's limit, where
              the simulator holds a container)
    cap_r   = allocatable_r + system overhead_r                          what usage_r is measured against
    u_r     = (usage_r now + peak_r) / cap_r                             usage includes the overhead
    score   = 100 x (1 - max(u_cpu, u_mem))                              least loaded after placement
              - 10^6 when usage_mem now + peak_mem > cap_mem              (a node OOM): scored lowest

Greedy, pod by pod: a node's other pods count at their usage now, not their future peaks, and disk
and network (which the latency model also reads) are left out. A simple documented reference, not the
optimum, and not guaranteed to beat every policy on every metric or on the reward.

Spec: ``oracle:horizon_s=3600`` (seconds, > 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.k8s_default import MAX_NODE_SCORE
from td3sched.policy.spec import args_from_spec, finite, require
from td3sched.simulator.cluster import Cluster

NAME = "oracle"
OVER_MEMORY_PENALTY = 1e6
"""Subtracted from the score of a node whose predicted memory exceeds its capacity: below any other."""


@dataclass(frozen=True)
class OracleArgs:
    horizon_s: float = 3600.0
    """Longest look-ahead into the pod's future usage, seconds."""

    def __post_init__(self) -> None:
        require(NAME, "horizon_s", self.horizon_s, finite(self.horizon_s) and self.horizon_s > 0,
                "a positive number of seconds")


class Oracle(Policy):
    name = NAME

    def __init__(self, args: OracleArgs = OracleArgs()):
        self.args = args

    @classmethod
    def from_spec(cls, spec: str) -> "Oracle":
        return cls(args_from_spec(OracleArgs, NAME, spec))

    def attach(self, context) -> None:
        if getattr(context, "hindsight", None) is None:
            raise ValueError(f"policy {NAME!r} needs the run's ground truth (PolicyContext.hindsight), "
                             "which the simulator provides")
        super().attach(context)

    def peak(self, pod: PodRequest) -> np.ndarray:
        """[2] the pod's peak CPU milli and memory MiB over its look-ahead window."""
        h = self.context.hindsight
        horizon = min(float(h.remaining_s(pod.index)), self.args.horizon_s)
        usage = h.future_usage(pod.index, pod.time_s, pod.time_s + horizon)
        peak = usage[:, :2].max(axis=0)
        if math.isfinite(pod.mem_limit_mib):
            peak[1] = min(peak[1], pod.mem_limit_mib)
        return peak

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        capacity = cluster.allocatable[nodes, :2] + cluster.overhead[nodes]
        after = cluster.usage[nodes, :2] + self.peak(pod)
        score = MAX_NODE_SCORE * (1.0 - (after / capacity).max(axis=1))
        return np.where(after[:, 1] > capacity[:, 1], score - OVER_MEMORY_PENALTY, score)
