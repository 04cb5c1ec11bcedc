"""The reward TD3 optimises and the baselines are ranked by: one module, used by the simulator
(episode reward of every run), the best-static search and TD3 training.

For each scheduling decision (each bind), from the simulator's ground truth:

    r_t = - alpha * fragmentation_t - beta * overload_t - gamma * sla_t - delta * efficiency_t

    fragmentation_t  cluster fragmentation right after the placement (metrics.fragmentation)
    overload_t       sum over provisioned nodes of max(0, real CPU utilisation - 0.85) / node count
    sla_t            min(1, events / sla_norm): OOM kills, latency-SLO breaches and pods pending
                     longer than 60 s since the previous decision
    efficiency_t     provisioned nodes / the pools' maximum (delta = 0: the reference design)

The episode reward is the sum of r_t over the decisions of a run's span.
"""

from __future__ import annotations

import numpy as np
from pydantic.dataclasses import dataclass

from td3sched.quantities import SETTINGS, Positive, Share, Weight


@dataclass(frozen=True, config=SETTINGS)
class RewardConfig:
    alpha: Weight = 1.0
    """Weight of fragmentation (a share of provisioned CPU, in [0, 1])."""
    beta: Weight = 10.0
    """Weight of overload (at most 0.15 when every node runs at 100% CPU, so 10 puts it on the
    scale of the other terms)."""
    gamma: Weight = 1.0
    """Weight of the SLA term (in [0, 1])."""
    delta: Weight = 0.0
    """Weight of the efficiency term; 0 gives the reference design's reward."""
    overload_util: Share = 0.85
    """Real CPU utilisation above which a node counts as overloaded."""
    sla_norm: Positive = 10.0
    """SLA events between two decisions at which the SLA term saturates at 1."""


def overload(cpu_utilisation: np.ndarray, provisioned: np.ndarray, threshold: float) -> float:
    """sum_n max(0, utilisation_n - threshold) / N over provisioned nodes.

    ``cpu_utilisation`` is real CPU usage / allocatable for every node slot, ``provisioned`` 1.0 for
    a provisioned node and 0.0 otherwise (float, so this is two vector operations and a dot product).
    """
    count = float(provisioned.sum())
    if count == 0:
        return 0.0
    return float(np.maximum(cpu_utilisation - threshold, 0.0) @ provisioned) / count


def decision_reward(cfg: RewardConfig, fragmentation: float, overload_value: float, sla_events: int,
                    provisioned_frac: float) -> tuple[float, tuple[float, float, float, float]]:
    """r_t and its four terms (fragmentation, overload, sla, efficiency), before weighting."""
    sla = min(1.0, sla_events / cfg.sla_norm)
    terms = (fragmentation, overload_value, sla, provisioned_frac)
    r = -(cfg.alpha * terms[0] + cfg.beta * terms[1] + cfg.gamma * terms[2] + cfg.delta * terms[3])
    return r, terms


class RewardTracker:
    """Sums r_t over a run and keeps the means of its terms."""

    def __init__(self, cfg: RewardConfig):
        self.cfg = cfg
        self.total = 0.0
        self.count = 0
        self.term_sums = np.zeros(4)
        self.last_events = 0

    def step(self, fragmentation: float, overload_value: float, events_so_far: int, provisioned_frac: float) -> float:
        r, terms = decision_reward(self.cfg, fragmentation, overload_value, events_so_far - self.last_events,
                                   provisioned_frac)
        self.last_events = events_so_far
        self.total += r
        self.count += 1
        self.term_sums += terms
        return r

    def result(self) -> dict[str, float]:
        n = max(self.count, 1)
        return {
            "episode_reward": self.total,
            "reward_per_decision": self.total / n,
            "reward_fragmentation": self.term_sums[0] / n,
            "reward_overload": self.term_sums[1] / n,
            "reward_sla": self.term_sums[2] / n,
            "reward_efficiency": self.term_sums[3] / n,
        }
