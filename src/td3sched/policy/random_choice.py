"""``random``: every feasible node scores the same, so the simulator picks one uniformly at random."""

from __future__ import annotations

import numpy as np

from td3sched.policy.base import Policy, PodRequest
from td3sched.simulator.cluster import Cluster


class RandomChoice(Policy):
    name = "random"

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        return np.zeros(len(nodes))
