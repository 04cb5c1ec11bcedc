"""``trimaran-tlp``: Trimaran TargetLoadPacking, best-fit packing of real CPU load around a target.

Follows kubernetes-sigs/scheduler-plugins pkg/trimaran/targetloadpacking/targetloadpacking.go
(Score, PredictUtilisation), pkg/trimaran/handler.go (PodAssignEventHandler) and the defaults of
apis/config/v1/defaults.go:

    predicted(pod) = CPU limit                        if the pod has one
                     round(CPU request * multiplier)  else if it has a request      (multiplier 1.5)
                     default_cpu_milli                otherwise                     (1000m)
    missing_n      = sum of predicted(p) over pods p bound to n after, or within window_s before, the
                     metrics window's end (the last scrape): t_bind > last_scrape_s - window_s
    U_n            = 100 * (observed CPU_n + predicted(pod) + missing_n) / capacity CPU_n      (%)

    score_n = round((100 - T) * U_n / T + T)          U_n <= T     rises from T at 0 to 100 at T
              round(T * (100 - U_n) / (100 - T))      T < U_n <= 100   falls from T just above T to 0 at 100
              0                                       U_n > 100

with T the target utilisation (40%) and Go's round (halves away from zero). The score is already on
kube-scheduler's 0..100 scale and the plugin does not normalise it, so neither does this policy.
Note the original's jump at the target: 100 at U = T, about T just above it.

Mapping to the simulator:
- Observed CPU is the load-watcher's node CPU utilisation times node capacity. With the default
  metric provider (Kubernetes metrics-server, ``Latest`` operator) that is the node's recent CPU
  usage, which ``Cluster.observed`` is (system daemons included).
- Capacity is the node's ``Status.Capacity``: allocatable + system overhead here.
- The original counts a pod again when it was bound less than metricsAgentReportingIntervalSeconds
  = 60 s before the window end, because its usage may not be in the metrics yet; the simulator's
  counterpart is ``window_s`` (60 s by default), after which a pod is fully in ``observed``.
- The original drops a pod from its cache when the pod is deleted; policies are not told of
  departures, so a pod that leaves within ``window_s`` of its bind still counts until it ages out.
- There is no pod overhead (``Spec.Overhead``) and every pod is one container.

Spec: ``trimaran-tlp:target_pct=40:multiplier=1.5:default_cpu_milli=1000``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.go_arith import go_round
from td3sched.policy.spec import args_from_spec, finite, require
from td3sched.simulator.cluster import Cluster

NAME = "trimaran-tlp"


@dataclass(frozen=True)
class TargetLoadPackingArgs:
    target_pct: int = 40
    """Target CPU utilisation T in percent (targetUtilization, default 40; the README recommends 10
    below the utilisation wanted)."""
    multiplier: float = 1.5
    """Predicted CPU of a container with a request and no limit: request x this (defaultRequestsMultiplier)."""
    default_cpu_milli: int = 1000
    """Predicted CPU of a container with neither request nor limit (defaultRequests, 1 core)."""

    def __post_init__(self) -> None:
        t, m, d = self.target_pct, self.multiplier, self.default_cpu_milli
        require(NAME, "target_pct", t, isinstance(t, int) and 1 <= t <= 100, "a whole percentage in [1, 100]")
        require(NAME, "multiplier", m, finite(m) and m > 0, "a number > 0")
        require(NAME, "default_cpu_milli", d, isinstance(d, int) and d >= 0, "a whole number of milli-CPU >= 0")


def predicted_cpu_milli(pod: PodRequest, args: TargetLoadPackingArgs) -> float:
    """PredictUtilisation: the limit, else the request x multiplier (rounded), else the default."""
    if math.isfinite(pod.cpu_limit_milli):
        return float(pod.cpu_limit_milli)
    if pod.request[0] > 0:
        return float(go_round(pod.request[0] * args.multiplier))
    return float(args.default_cpu_milli)


def target_load_score(utilisation_pct: np.ndarray, target_pct: float) -> np.ndarray:
    """The piecewise score of predicted CPU utilisation U (%) around the target T."""
    u, t = np.asarray(utilisation_pct, dtype=np.float64), float(target_pct)
    rising = go_round((100 - t) * u / t + t)
    with np.errstate(divide="ignore", invalid="ignore"):  # T = 100: the falling branch is never taken
        falling = go_round(t * (100 - u) / (100 - t))
    return np.where(u <= t, rising, np.where(u <= 100, falling, 0.0))


class TargetLoadPacking(Policy):
    name = NAME

    def __init__(self, args: TargetLoadPackingArgs = TargetLoadPackingArgs()):
        self.args = args
        self.cache: AssignCache | None = None

    @classmethod
    def from_spec(cls, spec: str) -> "TargetLoadPacking":
        return cls(args_from_spec(TargetLoadPackingArgs, NAME, spec))

    def attach(self, context) -> None:
        super().attach(context)
        self.lookback_s = context.window_s
        self.cache = AssignCache(context.cluster.size, columns=1, horizon_s=context.window_s + context.scrape_s)

    def missing_cpu_milli(self, cluster: Cluster) -> np.ndarray:
        """[N] predicted CPU of pods bound after last_scrape_s - window_s (strictly), per node."""
        if self.cache is None:
            return np.zeros(cluster.size)
        since = np.nextafter(cluster.last_scrape_s - self.lookback_s, np.inf)  # strictly after
        return self.cache.usage_since(since)[:, 0]

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        capacity = cluster.allocatable[nodes, 0] + cluster.overhead[nodes, 0]
        used = cluster.observed[nodes, 0] + predicted_cpu_milli(pod, self.args) + self.missing_cpu_milli(cluster)[nodes]
        return target_load_score(100 * used / capacity, self.args.target_pct)

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        if self.cache is not None:
            self.cache.add(node, pod.time_s, [predicted_cpu_milli(pod, self.args)])
