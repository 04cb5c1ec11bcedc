"""``trimaran-lvrb``: Trimaran LoadVariationRiskBalancing, spreading the risk of load variation.

Follows kubernetes-sigs/scheduler-plugins pkg/trimaran/loadvariationriskbalancing/
(loadvariationriskbalancing.go Score, analysis.go computeScore), pkg/trimaran/resourcestats.go
(CreateResourceStats, GetMuSigma) and the defaults of apis/config/v1/defaults.go. For r in (CPU,
memory), with alloc_r the node's allocatable and avg_r, std_r the node's utilisation statistics as
the load-watcher reports them (fraction of node capacity, over its 15-minute window):

    used_r  = clip(avg_r * alloc_r, 0, alloc_r)      std_abs_r = clip(std_r * alloc_r, 0, alloc_r)
    mu_r    = clip((used_r + request_r) / alloc_r, 0, 1)          the pod's request on top of the mean
    sigma_r = clip(margin * clip(std_abs_r / alloc_r, 0, 1) ** (1 / sensitivity), 0, 1)
    risk_r  = (mu_r + sigma_r) / 2
    score_n = round(min_r (1 - risk_r) * 100)         Go's round (halves away from zero), 0..100

``request`` is the pod's actual request (no non-zero defaults: GetResourceRequested), CPU in milli,
memory in MiB (the original's bytes x 2^-20). There is no assign-cache correction: the original's
Score creates a PodAssignEventHandler but never reads it.

Mapping to the simulator:
- The statistics are ``MetricsPipeline.stats(window_s)``: mean and population standard deviation
  (Prometheus ``avg_over_time`` / ``stddev_over_time``) of the raw scrapes in the last ``window_s``.
  The plugin has no window of its own: it takes whatever the load-watcher publishes, whose window is
  15 minutes (load-watcher FifteenMinutes, queried with the Prometheus provider, the only provider
  that reports a standard deviation; with the default metrics-server provider sigma is 0). Hence
  the default ``window_s = 900``.
- The load-watcher reports utilisation as a fraction of node capacity (allocatable + system
  overhead here) and the plugin multiplies it by *allocatable*; this policy does the same, so with
  overhead the mean counts as ``usage x allocatable / capacity``.

Spec: ``trimaran-lvrb:margin=1:sensitivity=1:window_s=900``. Defaults margin 1 and sensitivity 1
(DefaultSafeVarianceMargin, DefaultSafeVarianceSensitivity: risk = mu + sigma). The original
replaces a negative value by the default and accepts sensitivity 0 (sigma ** inf); here a negative
margin or a sensitivity <= 0 is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.go_arith import go_round
from td3sched.policy.spec import args_from_spec, finite, require
from td3sched.simulator.cluster import Cluster

NAME = "trimaran-lvrb"
LOAD_WATCHER_WINDOW_S = 900.0
"""load-watcher's FifteenMinutes window, whose statistics Trimaran reads."""


@dataclass(frozen=True)
class LoadVariationRiskBalancingArgs:
    margin: float = 1.0
    """Multiplier of the standard deviation (safeVarianceMargin, default 1)."""
    sensitivity: float = 1.0
    """Root power of the standard deviation (safeVarianceSensitivity, default 1; the README recommends 2)."""
    window_s: float = LOAD_WATCHER_WINDOW_S
    """Window of the mean and standard deviation (load-watcher's 15 minutes)."""

    def __post_init__(self) -> None:
        require(NAME, "margin", self.margin, finite(self.margin) and self.margin >= 0, "a number >= 0")
        require(NAME, "sensitivity", self.sensitivity, finite(self.sensitivity) and self.sensitivity > 0,
                "a number > 0")
        require(NAME, "window_s", self.window_s, finite(self.window_s) and self.window_s > 0,
                "a positive number of seconds")


def risk_score(used, std_abs, request, alloc, margin: float, sensitivity: float) -> np.ndarray:
    """(1 - risk) * 100 of one resource (computeScore), before the min over resources and rounding."""
    used = np.clip(used, 0.0, alloc)
    std_abs = np.clip(std_abs, 0.0, alloc)
    mu = np.clip((used + max(request, 0.0)) / alloc, 0.0, 1.0)
    sigma = np.clip(std_abs / alloc, 0.0, 1.0) ** (1.0 / sensitivity)
    sigma = np.clip(sigma * margin, 0.0, 1.0)
    return (1.0 - (mu + sigma) / 2) * 100


class LoadVariationRiskBalancing(Policy):
    name = NAME

    def __init__(self, args: LoadVariationRiskBalancingArgs = LoadVariationRiskBalancingArgs()):
        self.args = args
        self.pipeline = None

    @classmethod
    def from_spec(cls, spec: str) -> "LoadVariationRiskBalancing":
        return cls(args_from_spec(LoadVariationRiskBalancingArgs, NAME, spec))

    def attach(self, context) -> None:
        super().attach(context)
        self.pipeline = context.pipeline
        self.pipeline.retain(self.args.window_s)

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        mean, std = self.pipeline.stats(self.args.window_s)
        alloc = cluster.allocatable[nodes, :2]
        to_alloc = alloc / (alloc + cluster.overhead[nodes])  # utilisation of capacity x allocatable
        used = mean[nodes, :2] * to_alloc
        std_abs = std[nodes, :2] * to_alloc
        a = self.args
        cpu = risk_score(used[:, 0], std_abs[:, 0], pod.request[0], alloc[:, 0], a.margin, a.sensitivity)
        mem = risk_score(used[:, 1], std_abs[:, 1], pod.request[1], alloc[:, 1], a.margin, a.sensitivity)
        return go_round(np.minimum(cpu, mem))
