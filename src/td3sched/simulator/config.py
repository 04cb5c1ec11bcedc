"""Simulator constants. Every default here is documented in docs/simulator.md with its source.

Each class is a pydantic dataclass: a field's type (``td3sched.quantities``) is its allowed range,
its docstring its description, and constructing one with a value out of range raises ValueError.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from pydantic.dataclasses import dataclass

from td3sched.quantities import (SETTINGS, Count, Flag, Interval, Positive, Seconds, SecondsOrZero, Share, Weight,
                                 number, whole)
from td3sched.simulator.queue import QueueConfig

Utilisation = number(0, 1.5, lo_open=True)
"""A utilisation threshold in (0, 1.5] (real CPU use can exceed requests, so above 1 is allowed)."""
BelowOne = number(0, 1, lo_open=True, hi_open=True)
"""A utilisation in (0, 1)."""
Factor = number(1)
"""A factor >= 1."""
Days = number(0)
"""Days, 0 allowed."""
Sigma = number(0, 5)
"""A log-normal sigma (5 already spreads latencies over 10 orders of magnitude)."""
Percent = whole(0, 100)
"""A whole percentage, 0 to 100."""
ScoreLevels = whole(0, 1000)
"""0 (no rounding) or the top of a whole-number score scale."""


@dataclass(frozen=True, config=SETTINGS)
class LatencyModel:
    """Latency of latency-sensitive pods: base x contention factor of their node.

    factor = 1 + sum_r w_r * (1 / (1 - rho_r) - 1), r in (cpu, disk, net), rho_r the node's real
    utilisation of r capped at ``rho_cap``: an M/M/1 queue's sojourn time relative to an idle server.
    """

    base_median_ms: Positive = 40.0
    """Median of the per-service base latency (log-normal across services)."""
    base_sigma: Sigma = 0.35
    """Log-normal sigma of the base latency across services."""
    weight_cpu: Weight = 0.6
    """Weight of the CPU queue in the contention factor."""
    weight_disk: Weight = 0.2
    """Weight of the disk queue in the contention factor."""
    weight_net: Weight = 0.2
    """Weight of the network queue in the contention factor."""
    rho_cap: BelowOne = 0.98
    """Utilisation at which the M/M/1 factor is capped (below 1: at 1 the queue is unbounded)."""
    slo_factor: Factor = 2.0
    """A sample breaches the service's SLO when latency > slo_factor x base."""


@dataclass(frozen=True, config=SETTINGS)
class Autoscaler:
    """cluster-autoscaler's behaviour at its defaults (cluster-autoscaler FAQ, "What are the
    parameters to CA?"); docs/simulator.md cites each."""

    enabled: Flag = True
    """Whether the autoscaler runs at all (false: every pool keeps its starting node count)."""
    scan_interval_s: Interval = 10.0
    """How often the autoscaler looks at the cluster (--scan-interval, 10 s)."""
    new_pod_scale_up_delay_s: SecondsOrZero = 0.0
    """Pods younger than this do not trigger a scale-up (--new-pod-scale-up-delay, 0 s)."""
    provision_delay_s: Seconds = 120.0
    """A node asked for becomes schedulable after this delay (VM boot and node join; assumption)."""
    scale_down_unneeded_s: Seconds = 600.0
    """A node is removed after being unneeded this long (--scale-down-unneeded-time, 10 min)."""
    scale_down_utilization_threshold: Share = 0.5
    """A node is unneeded when its requested share is below this and its pods fit elsewhere
    (--scale-down-utilization-threshold, 0.5; GPU nodes by requested GPUs)."""
    scale_down_delay_after_add_s: SecondsOrZero = 600.0
    """No scale-down for this long after a scale-up (--scale-down-delay-after-add, 10 min)."""
    max_empty_bulk_delete: Count = 10
    """Empty nodes removed at most per scan (--max-empty-bulk-delete, 10)."""
    scale_down_non_empty_candidates: Count = 30
    """Non-empty nodes checked for a drain per scan (--scale-down-non-empty-candidates-count, 30);
    at most one is drained per scan (--max-drain-parallelism, 1)."""
    start_nodes: Literal["pools", "needed"] = "pools"
    """The nodes each pool starts a run with: ``pools``, the scenario's ``count``; ``needed``, the nodes
    that the pods alive or arriving at the run's start request (the scale-up estimate), within
    [min_count, max_count]: a cluster whose autoscaler has followed its load, for a scenario whose counts
    come from another day (dlrm, dlrm-small). A cluster without the autoscaler keeps its pools' ``count``
    either way."""


@dataclass(frozen=True, config=SETTINGS)
class Kubelet:
    """The kubelet's memory handling at its defaults; docs/simulator.md §5 cites each."""

    backoff_initial_s: Interval = 10.0
    """First restart delay of a crashed container (kubelet ``backOffPeriod``, pkg/kubelet/kubelet.go)."""
    backoff_max_s: Seconds = 300.0
    """Cap of the doubling restart delay (kubelet ``MaxContainerBackOff``, 5 min)."""
    backoff_reset_s: Seconds = 600.0
    """A crash more than this after the previous one starts the back-off again at ``backoff_initial_s``
    (client-go util/flowcontrol/backoff.go ``hasExpired``: 2 x the max delay)."""
    eviction_monitoring_s: Interval = 10.0
    """The eviction manager evicts on a node at most once per this period (kubelet
    ``evictionMonitoringPeriod``, 10 s)."""
    pressure_transition_s: SecondsOrZero = 300.0
    """MemoryPressure stays on this long after the pressure ends
    (--eviction-pressure-transition-period, 5 min)."""

    def __post_init__(self) -> None:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s={self.backoff_max_s:g} must be at least "
                             f"backoff_initial_s={self.backoff_initial_s:g}")



@dataclass(frozen=True, config=SETTINGS)
class SimConfig:
    tick_s: Interval = 60.0
    """Usage tick: pod usage is re-read from its profile and metrics are sampled."""
    scrape_s: Interval = 30.0
    """Metrics pipeline scrape interval (Prometheus' default-ish 30 s)."""
    window_s: Interval = 60.0
    """Rate window: observed usage is the mean of the scrapes within it (rate(...[1m]))."""
    usage_scale: Positive = 1.13
    """Global CPU demand scale: a pod's CPU demand = usage_scale x shape x size (its limit caps
    what it gets). The largest scale (0.01 grid) at which at most 10% of DLRM (pod, 5-minute slot)
    samples over dlrm's train span reach their CPU limit: 9.9% at 1.13, 10.3% at 1.14, so the
    Bitbrains profiles keep their shape (benchmarks/calibrate_dlrm.py, docs/simulator.md §7);
    never tuned per policy."""
    mem_level: Positive = 0.71
    """Memory in use at a profile's peak, as a fraction of the pod's memory size. Calibrated on dlrm
    under k8s-default to the reference's 14 kernel OOM kills per week (probes on days 21-21.5,
    seed 1: 0.70 -> 0, 0.72 -> 42, 0.74 -> 140, 0.78 -> 392 per week; benchmarks/calibrate_dlrm.py,
    docs/simulator.md §7)."""
    safety_cpu_util: Utilisation = 0.90
    """Safety filter: nodes whose observed CPU utilisation is above this are never chosen."""
    percentage_of_nodes_to_score: Percent = 0
    """kube-scheduler's ``percentageOfNodesToScore``: a scheduling cycle walks the nodes from where
    the previous one stopped and stops filtering once it has found this share of the cluster's
    nodes feasible; only those are scored. 0 is kube-scheduler's adaptive default (50 - nodes/125
    percent, at least 5%, at least 100 nodes: 27%, 782 nodes, at dlrm's 2,898); 100 scores every feasible
    node."""
    served_score_levels: ScoreLevels = 0
    """How the product's score (``static-weights``, ``td3``) reaches Select: 0, as it is (its own
    continuous order, the policy's ranking); n > 0, as a front door answers a scheduler in the whole
    numbers 0..n (100: the td3score plugin's ScoreNodes, kube-scheduler's MaxNodeScore, rounded; 10: the
    extender's MaxExtenderPriority, rounded with the best nodes alone at the top;
    ``policy.static_weights.served_scores``), Select then breaking the ties at random as kube-scheduler
    does: the policy as a cluster runs it. The baselines score with their own plugins' integers whatever this says."""
    overload_util: Utilisation = 0.85
    """A (node, tick) sample is overloaded when real CPU utilisation is above this."""
    warmup_days: Days = 3.0
    """A span starts from the state its policy reaches after this warm-up before it (the train
    span, which starts at the trace's beginning, gives up its own first days); metrics and the
    reward count only the span."""
    sla_pending_s: SecondsOrZero = 60.0
    """A pod pending longer than this is an SLA violation (once per wait)."""
    latency: LatencyModel = field(default_factory=LatencyModel)
    autoscaler: Autoscaler = field(default_factory=Autoscaler)
    queue: QueueConfig = field(default_factory=QueueConfig)
    kubelet: Kubelet = field(default_factory=Kubelet)

    def __post_init__(self) -> None:
        if self.window_s < self.scrape_s:
            raise ValueError(f"window_s={self.window_s:g} must be at least scrape_s={self.scrape_s:g}")
