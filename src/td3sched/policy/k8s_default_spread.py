"""``k8s-default-spread``: ``k8s-default`` with PodTopologySpread's system default constraints.

A stock kube-scheduler spreads the pods of one Service, ReplicaSet or StatefulSet over nodes even when
the pods ask for nothing: PodTopologySpread, plugin weight 2 in the default profile, scores with the
system default constraints (``maxSkew: 3`` over ``kubernetes.io/hostname`` and ``maxSkew: 5`` over
``topology.kubernetes.io/zone``, both ``ScheduleAnyway``). ``k8s-default`` leaves it out; this policy adds
it, computed as kube-scheduler does (pkg/scheduler/framework/plugins/podtopologyspread/scoring.go):

    raw_n   = round(c_n * log(k + 2) + (maxSkew - 1))        c_n: the pod's siblings running on node n
                                                             k:   the feasible nodes scored
    score_n = 100 * (max raw + min raw - raw_n) // max raw    (NormalizeScore)
    total_n = LeastAllocated_n + BalancedAllocation_n + 2 * score_n

The simulator's nodes carry no zone label, and system-defaulted constraints skip a node without the
key, so only the hostname constraint scores. A pod's siblings are the running pods of its workload (its
app: kube-scheduler counts the pods of the pod's first owner reference); a pod without one gets no
constraint (kube-scheduler then skips the plugin). Assumed pods count at once, as in kube-scheduler's
snapshot: the simulator binds instantly.
"""

from __future__ import annotations

import math

import numpy as np

from td3sched.policy.base import PodRequest
from td3sched.policy.k8s_default import MAX_NODE_SCORE, K8sDefault
from td3sched.policy.siblings import Siblings
from td3sched.simulator.cluster import Cluster

HOSTNAME_MAX_SKEW = 3
"""The system default constraint's maxSkew over ``kubernetes.io/hostname``."""
PLUGIN_WEIGHT = 2
"""PodTopologySpread's weight in kube-scheduler's default profile."""


def topology_spread_scores(siblings: np.ndarray, max_skew: int = HOSTNAME_MAX_SKEW) -> np.ndarray:
    """PodTopologySpread's normalised scores (0-100) of the candidates running ``siblings`` [k] of the
    pod's workload, for one hostname constraint over the k candidates: fewer siblings score higher."""
    counts = np.asarray(siblings, dtype=np.float64)
    if len(counts) == 0:
        return counts
    raw = np.floor(counts * math.log(len(counts) + 2) + (max_skew - 1) + 0.5)  # Go's math.Round, for x >= 0
    high, low = raw.max(), raw.min()
    if high == 0:
        return np.full(len(counts), float(MAX_NODE_SCORE))
    return np.floor(MAX_NODE_SCORE * (high + low - raw) / high)  # int64 division of non-negative values


class K8sDefaultSpread(K8sDefault):
    name = "k8s-default-spread"
    compiled_score = None  # the sibling counts live in Python: the simulator's plain loop runs it

    def __init__(self) -> None:
        super().__init__()
        self.siblings = Siblings()

    def attach(self, context) -> None:
        super().attach(context)
        self.siblings = Siblings()

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        scores = super().score(pod, nodes, cluster)
        if pod.app is None:
            return scores
        return scores + PLUGIN_WEIGHT * topology_spread_scores(self.siblings.counts(pod.app, nodes))

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        self.siblings.add(pod.app, node)

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        self.siblings.remove(pod.app, node)

    @property
    def counts_releases(self) -> bool:
        return True
