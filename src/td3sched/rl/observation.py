"""What the TD3 actor sees of one scheduling decision: a fixed-size vector, whatever the node count.

For a pod and its feasible nodes (the nodes that passed Filter), with ``u`` the [k, 4] utilisations
of ``policy.features.utilisation`` (pod included, observed usage corrected by the assign cache):

    index   field                      meaning
    0-3     request_{cpu,mem,disk,rdma} the pod's requests / the largest allocatable of that resource
                                        among the feasible nodes
    4-6     qos_{guaranteed,burstable,best_effort}  QoS class, one-hot
    7-30    util_{r}_{stat}             for r in cpu, mem, io, net (6 values each, in that order):
                                        mean, std, min, max, p10, p90 of u[:, r] over the feasible nodes
    31      feasible_share              feasible nodes / ready nodes
    32      oom_kills_5min_log1p        log(1 + node OOM kills in the last 5 simulated minutes)
    33-34   time_of_day_{sin,cos}       sin and cos of 2 pi (t mod 1 day) / 1 day

``OBSERVATION_FIELDS`` names every index; a model card records it, and a model whose layout differs
from this one is refused. Everything here is vectorised over the feasible nodes.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from td3sched.policy.base import PodRequest
from td3sched.policy.features import FEATURES
from td3sched.simulator.cluster import Cluster

UTILISATION_STATS = ("mean", "std", "min", "max", "p10", "p90")
OOM_WINDOW_S = 300.0
"""Node OOM kills are counted over the last 5 simulated minutes."""
DAY_S = 86400.0

OBSERVATION_FIELDS: tuple[str, ...] = (
    "request_cpu", "request_mem", "request_disk", "request_rdma",  # SCALAR_RESOURCES order
    "qos_guaranteed", "qos_burstable", "qos_best_effort",          # QOS_NAMES order (qos 0, 1, 2)
    *(f"util_{r}_{s}" for r in FEATURES for s in UTILISATION_STATS),
    "feasible_share",
    "oom_kills_5min_log1p",
    "time_of_day_sin",
    "time_of_day_cos",
)
OBSERVATION_SIZE = len(OBSERVATION_FIELDS)
STD_FLOORS = {"oom_kills_5min_log1p": 0.5}
"""Floors under the normaliser's standard deviation (``rl.normalizer``), for models trained from now
on. OOM kills are rare, so the running std of log(1 + kills) is tiny and, unfloored, the normaliser's
clip (10 std) was reached at two kills: one kill and a hundred read alike. With 0.5 the clip is at
log(1 + k) = 5 (k = 147 kills in 5 minutes) and one kill reads about 1.4."""


def std_floor() -> np.ndarray:
    """[OBSERVATION_SIZE] the ``STD_FLOORS`` by field, 0 elsewhere."""
    floor = np.zeros(OBSERVATION_SIZE)
    for name, value in STD_FLOORS.items():
        floor[OBSERVATION_FIELDS.index(name)] = value
    return floor
_QUANTILES = (0.1, 0.9)
"""p10 and p90: numpy's default ("linear") quantiles, as ``np.quantile`` computes them."""


def _linear_quantile(ordered: np.ndarray, k: int, q: float) -> np.ndarray:
    """``np.quantile(u, q, axis=0, method="linear")`` from ``ordered``, u.T sorted along its rows:
    numpy's own arithmetic, step by step (``numpy.lib._function_base_impl._quantile`` and ``_lerp``),
    so the result is the same to the bit."""
    virtual = (k - 1) * q
    if virtual >= k - 1:  # numpy takes the largest value (k = 1)
        return ordered[:, k - 1]
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = ordered[:, below], ordered[:, below + 1]
    diff = b - a
    return a + diff * gamma if gamma < 0.5 else b - diff * (1.0 - gamma)


def utilisation_stats(u: np.ndarray) -> np.ndarray:
    """[24]: for each resource (FEATURES order) mean, std, min, max, p10, p90 of u[:, r] (finite u).

    The values of ``u.mean(axis=0)``, ``u.std(axis=0)`` and ``np.quantile(u, [0, 0.1, 0.9, 1], axis=0)``
    to the last bit (a property test holds them to it), computed without numpy's general-purpose
    wrappers, which cost ten times the arithmetic at a hundred nodes. The simulator's td3 policy and
    the decision engine both call this: a change here changes both alike."""
    u = np.asarray(u, dtype=np.float64)
    k = u.shape[0]
    if k == 0:
        raise ValueError("utilisation_stats: no node")
    # mean and std as numpy's _mean and _var: sum along the axis, divide; square the deviations, sum, divide, sqrt
    mean = np.add.reduce(u, axis=0) / k
    dev = u - mean
    np.square(dev, out=dev)
    std = np.sqrt(np.add.reduce(dev, axis=0) / k)
    ordered = np.sort(u.T, axis=1)  # [resource, k]: sorting contiguous rows beats numpy's multi-rank partition
    out = np.empty((u.shape[1], len(UTILISATION_STATS)))
    out[:, 0] = mean
    out[:, 1] = std
    out[:, 2] = ordered[:, 0]
    out[:, 3] = ordered[:, k - 1]
    out[:, 4] = _linear_quantile(ordered, k, _QUANTILES[0])
    out[:, 5] = _linear_quantile(ordered, k, _QUANTILES[1])
    return out.ravel()


def observe(pod: PodRequest, nodes: np.ndarray, cluster: Cluster, u: np.ndarray, oom_kills_recent: float) -> np.ndarray:
    """The observation (float32, OBSERVATION_FIELDS order) of one decision.

    ``u`` is ``policy.features.utilisation(pod, nodes, cluster, recent)``; ``oom_kills_recent`` the
    node OOM kills of the last ``OOM_WINDOW_S`` seconds (``OomWindow``).
    """
    if len(nodes) == 0:
        raise ValueError("observe: no feasible node; the simulator only asks a policy when one exists")
    obs = np.empty(OBSERVATION_SIZE, dtype=np.float64)
    obs[0:4] = pod.request / cluster.allocatable[nodes].max(axis=0)
    obs[4:7] = 0.0
    obs[4 + pod.qos] = 1.0
    obs[7:31] = utilisation_stats(u)
    obs[31] = len(nodes) / max(int(np.count_nonzero(cluster.ready)), 1)
    obs[32] = math.log1p(oom_kills_recent)
    angle = 2.0 * math.pi * (pod.time_s % DAY_S) / DAY_S
    obs[33] = math.sin(angle)
    obs[34] = math.cos(angle)
    return obs.astype(np.float32)


class OomWindow:
    """Node OOM kills over the last ``window_s``, from a cumulative count read at each decision.

    ``kills(t, total)`` records ``total`` (kills since the run started) at time ``t`` and returns
    ``total`` minus the total recorded at the latest decision at or before ``t - window_s`` (0
    before the first window has passed). Kill times are thus known to the decision that first saw
    them: a kill between two decisions counts from the later one.
    """

    def __init__(self, window_s: float = OOM_WINDOW_S):
        self.window_s = window_s
        self.records: deque[tuple[float, int]] = deque([(-math.inf, 0)])

    def kills(self, t: float, total: int) -> int:
        self.records.append((t, total))
        horizon = t - self.window_s
        while len(self.records) > 1 and self.records[1][0] <= horizon:
            self.records.popleft()
        return total - self.records[0][1]
