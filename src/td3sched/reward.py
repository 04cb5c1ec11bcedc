"""The objective every run reports, the best-static search ranks by and TD3 optimises: what the
cluster costs, in node-hours.

The cost rate of the cluster at time t, in node-equivalents (a provisioned node for one hour costs
``node_hour``):

    c(t) = node_hour      x N(t)                          provisioned nodes
         + fragmentation  x F(t) x N(t)                   capacity stranded by fragmentation (F: share
                                                          of provisioned CPU, metrics.fragmentation)
         + overload       x sum_n max(0, u_n(t) - 0.85)   real CPU above 85% of a node's allocatable
         + pending        x P(t)                          pending pods' CPU requests (kube-scheduler's
                                                          non-zero default for none), in nodes of the
                                                          cluster's mean allocatable CPU

and each event costs at once: ``oom_kill`` per kernel OOM kill (a node out of memory, or a container
above its limit) and ``slo_breach`` per latency-SLO breach episode.

**A semi-MDP.** The rate is read at every decision (a scheduling cycle that consulted the policy)
and held until the next one; decision k is charged

    cost_k = c(t_k) x (t_{k+1} - t_k) / 1 h  +  the events of (t_k, t_{k+1}]

(the last decision of a span until the span's end). The run's cost is the sum over its decisions:
the integral of the rate over the span plus its events, whatever the number of decisions. The
reward of decision k is ``r_k = -cost_k / max nodes`` (cluster-hours, so scenarios of every size
share a scale), and a learner discounts by the time elapsed (``discount``), as Decima does.

**Why these weights** (docs/policies.md, *The objective*, re-ranks the baselines under others):
nodes are the unit; stranded capacity costs what the capacity costs; a node at 100% CPU costs 1.5
nodes more (0.15 x 10: the reference design's overload weight); a pending pod's requested capacity
costs twice what it would cost to serve it (the work not done, and the wait); an OOM kill costs two
node-hours (the lost work of a restarted instance); a latency breach a quarter.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic.dataclasses import dataclass

from td3sched.quantities import SETTINGS, Share, Weight

COMPONENTS = ("nodes", "fragmentation", "overload", "pending", "oom", "slo")
"""The run's cost, split: node-hours of each rate term, then the events' node-hours."""


@dataclass(frozen=True, config=SETTINGS)
class RewardConfig:
    node_hour: Weight = 1.0
    """Cost of one provisioned node for one hour: the unit of the objective."""
    fragmentation: Weight = 1.0
    """Cost of one node-hour of capacity stranded by fragmentation (fragmentation x nodes)."""
    overload: Weight = 10.0
    """Cost of one node-hour of CPU above ``overload_util`` (a node at 100% CPU: 0.15 of it)."""
    pending: Weight = 2.0
    """Cost of one node-hour of pending pods' CPU requests."""
    oom_kill: Weight = 2.0
    """Node-hours one OOM kill costs (node or container)."""
    slo_breach: Weight = 0.25
    """Node-hours one latency-SLO breach episode costs."""
    overload_util: Share = 0.85
    """Real CPU utilisation above which a node counts as overloaded."""

    def rate_weights(self) -> np.ndarray:
        return np.array([self.node_hour, self.fragmentation, self.overload, self.pending])

    def event_weights(self) -> np.ndarray:
        return np.array([self.oom_kill, self.slo_breach])


def overload(cpu_utilisation: np.ndarray, provisioned: np.ndarray, threshold: float) -> float:
    """sum_n max(0, utilisation_n - threshold) over provisioned nodes, in nodes.

    ``cpu_utilisation`` is real CPU usage / allocatable for every node slot, ``provisioned`` 1.0 for
    a provisioned node and 0.0 otherwise.
    """
    return float(np.maximum(cpu_utilisation - threshold, 0.0) @ provisioned)


def discount(gamma_per_hour: float, elapsed_s: float) -> float:
    """The semi-MDP discount of a transition that took ``elapsed_s``: gamma_per_hour ** hours."""
    return gamma_per_hour ** (elapsed_s / 3600.0)


class RewardTracker:
    """The run's cost, decision by decision (module docstring).

    A decision's cycle first ``settle``s the decision before it (charged up to ``t``, the events
    counted so far), then ``open``s its own with the cost rate terms [N, F x N, overload, pending]
    after its placement: the events of its own cycle (an OOM kill at the bind) are its own."""

    def __init__(self, cfg: RewardConfig, max_nodes: float = 1.0):
        if not (math.isfinite(max_nodes) and max_nodes > 0):
            raise ValueError(f"max_nodes={max_nodes!r}: expected a positive number of nodes")
        self.cfg = cfg
        self.max_nodes = float(max_nodes)
        self._rate_w, self._event_w = cfg.rate_weights(), cfg.event_weights()
        self.total = 0.0
        self.count = 0
        self.components = np.zeros(len(COMPONENTS))
        """Node-hours of each component so far (weighted)."""
        self._open: tuple[float, np.ndarray] | None = None
        self._events: np.ndarray | None = None
        """The run's event counts when the last decision was settled: the next one's baseline."""

    def settle(self, t: float, events) -> float:
        """Charge the open decision up to ``t`` with the events since it was opened; returns its
        reward (0.0 and nothing counted when none is open). ``events``: the run's event counts
        so far [OOM kills, SLO breaches]."""
        events = np.asarray(events, dtype=np.float64)
        baseline, self._events = self._events, events
        if self._open is None:
            return 0.0
        t0, rates = self._open
        self._open = None
        hours = max(float(t) - t0, 0.0) / 3600.0
        cost = np.concatenate([self._rate_w * rates * hours, self._event_w * (events - baseline)])
        self.components += cost
        r = -float(cost.sum()) / self.max_nodes
        self.total += r
        self.count += 1
        return r

    def open(self, t: float, rates) -> None:
        """Start a decision at ``t`` with the cost rate terms of the cluster after it."""
        if self._events is None:
            raise RuntimeError("open() before settle(): a decision's cycle settles the one before it first")
        self._open = (float(t), np.asarray(rates, dtype=np.float64))

    def result(self) -> dict[str, float]:
        out = {"episode_reward": self.total, "cost_node_hours": float(self.components.sum())}
        out.update({f"cost_{name}": float(v) for name, v in zip(COMPONENTS, self.components)})
        return out


class StepRewardTracker(RewardTracker):
    """The engine's reward tracker, also keeping what was charged since the reader last took it, so
    each decision's reward can be read on its own (and any cycle's in between: a pod the policy held
    back is charged as a decision too). The env's steps (rl.env) and the recorded history's
    ``reward`` column (lifecycle.record) read it."""

    unclaimed = 0.0

    def settle(self, t: float, events) -> float:
        r = super().settle(t, events)
        self.unclaimed += r
        return r

    def take(self) -> float:
        r, self.unclaimed = self.unclaimed, 0.0
        return r
