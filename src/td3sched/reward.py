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
above its limit), ``slo_breach`` per latency-SLO breach episode and ``slo_hour`` per hour a
latency-sensitive pod spends above its SLO (its latency samples above it, each a tick long).

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
node-hours (the lost work of a restarted instance); a latency breach a quarter. ``slo_hour`` is 0 by
default: an episode is priced once however long it lasts, and the hours above the SLO are the
tail-priced objective's term (docs/td3.md, *Pricing the tail*), which prices a breach by its
length.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from pydantic.dataclasses import dataclass

from td3sched.quantities import SETTINGS, Share, Weight

COMPONENTS = ("nodes", "fragmentation", "overload", "pending", "oom", "slo", "slo_time")
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
    slo_hour: Weight = 0.0
    """Node-hours one hour of a latency-sensitive pod above its SLO costs (0: only the episodes count)."""
    overload_util: Share = 0.85
    """Real CPU utilisation above which a node counts as overloaded."""

    def rate_weights(self) -> np.ndarray:
        return np.array([self.node_hour, self.fragmentation, self.overload, self.pending])

    def event_weights(self) -> np.ndarray:
        return np.array([self.oom_kill, self.slo_breach, self.slo_hour])


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
    after its placement: the events of its own cycle (an OOM kill at the bind) are its own.

    The state lives in small arrays that the compiled kernels below update in place, so the
    simulator's compiled event loop (``simulator.fastpath``) and this class charge decisions with
    the same floating-point operations."""

    def __init__(self, cfg: RewardConfig, max_nodes: float = 1.0):
        if not (math.isfinite(max_nodes) and max_nodes > 0):
            raise ValueError(f"max_nodes={max_nodes!r}: expected a positive number of nodes")
        self.cfg = cfg
        self.max_nodes = float(max_nodes)
        self.rate_w, self.event_w = cfg.rate_weights(), cfg.event_weights()
        self.scalars = np.array([0.0, 0.0, self.max_nodes])
        """[time the open decision started, total reward, max nodes]"""
        self.flags = np.zeros(3, dtype=np.int64)
        """[a decision is open, a baseline of events exists, decisions settled]"""
        self.rates = np.zeros(4)
        """The open decision's cost rate terms."""
        self.baseline = np.zeros(3)
        """The run's event counts when the last decision was settled: the next one's baseline."""
        self.components = np.zeros(len(COMPONENTS))
        """Node-hours of each component so far (weighted)."""

    @property
    def total(self) -> float:
        return float(self.scalars[1])

    @property
    def count(self) -> int:
        return int(self.flags[2])

    def settle(self, t: float, events) -> float:
        """Charge the open decision up to ``t`` with the events since it was opened; returns its
        reward (0.0 and nothing counted when none is open). ``events``: the run's event counts
        so far [OOM kills, SLO breach episodes, pod-hours above the SLO]."""
        if len(events) != len(self.event_w):
            raise ValueError(f"events {list(events)!r}: expected {len(self.event_w)} counts (OOM kills, SLO breach "
                             "episodes, pod-hours above the SLO)")
        return settle_decision(self.scalars, self.flags, self.rates, self.baseline, self.components, self.rate_w,
                               self.event_w, float(t), float(events[0]), float(events[1]), float(events[2]))

    def open(self, t: float, rates) -> None:
        """Start a decision at ``t`` with the cost rate terms of the cluster after it."""
        if not self.flags[1]:
            raise RuntimeError("open() before settle(): a decision's cycle settles the one before it first")
        open_decision(self.scalars, self.flags, self.rates, float(t), float(rates[0]), float(rates[1]),
                      float(rates[2]), float(rates[3]))

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


@njit(cache=True, nogil=True)
def settle_decision(scalars, flags, rates, baseline, components, rate_w, event_w, t, oom, slo, slo_time):
    """``RewardTracker.settle`` on its arrays: the open decision's rate terms over the hours since
    it opened plus the events since the baseline, added to the components; returns its reward."""
    b_oom, b_slo, b_time = baseline[0], baseline[1], baseline[2]
    baseline[0], baseline[1], baseline[2] = oom, slo, slo_time
    flags[1] = 1
    if flags[0] == 0:
        return 0.0
    flags[0] = 0
    hours = max(t - scalars[0], 0.0) / 3600.0
    cost = 0.0
    for i in range(4):
        c = rate_w[i] * rates[i] * hours
        components[i] += c
        cost += c
    c = event_w[0] * (oom - b_oom)
    components[4] += c
    cost += c
    c = event_w[1] * (slo - b_slo)
    components[5] += c
    cost += c
    c = event_w[2] * (slo_time - b_time)
    components[6] += c
    cost += c
    r = -cost / scalars[2]
    scalars[1] += r
    flags[2] += 1
    return r


@njit(cache=True, nogil=True)
def open_decision(scalars, flags, rates, t, nodes, stranded, overload, pending):
    """``RewardTracker.open`` on its arrays (the caller checked that a baseline exists)."""
    scalars[0] = t
    flags[0] = 1
    rates[0], rates[1], rates[2], rates[3] = nodes, stranded, overload, pending
