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
from numba import njit

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
@njit(cache=True, nogil=True, inline="always")
def _linear_quantile(ordered, k, q):
    """``np.quantile(x, q)`` (method "linear") of the sorted ``ordered`` [k], in numpy's own arithmetic
    (``numpy.lib._function_base_impl._quantile`` and ``_lerp``)."""
    virtual = (k - 1) * q
    if virtual >= k - 1:  # numpy takes the largest value (k = 1)
        return ordered[k - 1]
    below = int(np.floor(virtual))
    gamma = virtual - below
    a = ordered[below]
    b = ordered[below + 1]
    diff = b - a
    if gamma < 0.5:
        return a + diff * gamma
    return b - diff * (1.0 - gamma)


SORT_IN_KERNEL_MAX = 512
"""Up to this many nodes the statistics' kernel sorts each column itself; beyond, NumPy's vectorised
sort (``presorted``) is several times faster than the compiled one (7x at 5,000 nodes)."""


def presorted(u: np.ndarray) -> np.ndarray:
    """``u.T`` sorted along its rows when the kernel should not sort (more than ``SORT_IN_KERNEL_MAX``
    nodes); otherwise an empty [0, 0] array, and the kernel sorts."""
    return np.sort(u.T, axis=1) if u.shape[0] > SORT_IN_KERNEL_MAX else _NOT_SORTED


_NOT_SORTED = np.empty((0, 0))


@njit(cache=True, nogil=True)
def utilisation_stats_into(u, ordered, out):
    """``utilisation_stats`` into ``out`` [columns * 6]: per column of ``u`` [k, columns]
    mean, std, min, max, p10, p90, the values of ``u.mean(axis=0)``, ``u.std(axis=0)`` and
    ``np.quantile(u, [0, 0.1, 0.9, 1], axis=0)`` to the last bit: NumPy reduces a C-ordered array
    along its first axis row by row (no pairwise summation), and so does this loop. ``ordered``
    is ``u.T`` sorted along its rows, or [0, 0]: sort here (``presorted``)."""
    k, columns = u.shape
    given = ordered.shape[0] == columns and ordered.shape[1] == k
    column = np.empty(0 if given else k)
    for r in range(columns):
        total = 0.0
        for i in range(k):
            total += u[i, r]
        mean = total / k
        squares = 0.0
        for i in range(k):
            d = u[i, r] - mean
            squares += d * d
        if given:
            column = ordered[r]
        else:
            column[:] = u[:, r]
            column.sort()
        o = 6 * r
        out[o] = mean
        out[o + 1] = np.sqrt(squares / k)
        out[o + 2] = column[0]
        out[o + 3] = column[k - 1]
        out[o + 4] = _linear_quantile(column, k, 0.1)
        out[o + 5] = _linear_quantile(column, k, 0.9)
    return out


@njit(cache=True, nogil=True, boundscheck=True)
def observation_into(request, qos, allocatable, nodes, u, ordered, ready, oom_log1p, day_sin, day_cos, out):
    """``observe`` into ``out`` (float32, OBSERVATION_FIELDS' layout): the request over the largest
    allocatable among ``nodes``, the QoS one-hot, ``utilisation_stats_into(u, ordered)``, the feasible share of
    the ready nodes and the three scalars given, each rounded to float32 from the float64 NumPy
    computes."""
    stats = np.empty(6 * u.shape[1])
    utilisation_stats_into(u, ordered, stats)
    for r in range(request.shape[0]):
        largest = allocatable[nodes[0], r]
        for i in range(1, nodes.shape[0]):
            largest = max(largest, allocatable[nodes[i], r])
        out[r] = np.float32(request[r] / largest)
    for j in range(3):
        out[4 + j] = np.float32(1.0 if j == qos else 0.0)
    for j in range(stats.shape[0]):
        out[7 + j] = np.float32(stats[j])
    count = 0
    for n in range(ready.shape[0]):
        count += ready[n]
    out[31] = np.float32(nodes.shape[0] / max(count, 1))
    out[32] = np.float32(oom_log1p)
    out[33] = np.float32(day_sin)
    out[34] = np.float32(day_cos)
    return out


def utilisation_stats(u: np.ndarray) -> np.ndarray:
    """[24]: for each resource (FEATURES order) mean, std, min, max, p10, p90 of u[:, r] (finite u).

    The values of ``u.mean(axis=0)``, ``u.std(axis=0)`` and ``np.quantile(u, [0, 0.1, 0.9, 1], axis=0)``
    to the last bit (a property test holds them to it), in one compiled pass (``utilisation_stats_into``)
    instead of numpy's general-purpose wrappers, which cost ten times the arithmetic at a hundred
    nodes. The simulator's td3 policy and the decision engine both call this: a change here changes
    both alike."""
    u = np.ascontiguousarray(u, dtype=np.float64)
    if u.ndim != 2 or u.shape[0] == 0:
        raise ValueError(f"utilisation_stats: u of shape {u.shape}: expected [nodes >= 1, resources]")
    return utilisation_stats_into(u, presorted(u), np.empty(len(UTILISATION_STATS) * u.shape[1]))


def observe(pod: PodRequest, nodes: np.ndarray, cluster: Cluster, u: np.ndarray, oom_kills_recent: float) -> np.ndarray:
    """The observation (float32, OBSERVATION_FIELDS order) of one decision, in one compiled pass
    (``observation_into``).

    ``u`` is ``policy.features.utilisation(pod, nodes, cluster, recent)``; ``oom_kills_recent`` the
    node OOM kills of the last ``OOM_WINDOW_S`` seconds (``OomWindow``).
    """
    if len(nodes) == 0:
        raise ValueError("observe: no feasible node; the simulator only asks a policy when one exists")
    angle = 2.0 * math.pi * (pod.time_s % DAY_S) / DAY_S
    u = np.ascontiguousarray(u, dtype=np.float64)
    return observation_into(pod.request, pod.qos, cluster.allocatable, np.asarray(nodes), u, presorted(u),
                            cluster.ready, math.log1p(oom_kills_recent), math.sin(angle), math.cos(angle),
                            np.empty(OBSERVATION_SIZE, dtype=np.float32))


class OomWindow:
    """Node OOM kills over the last ``window_s``, from a cumulative count read at each decision.

    ``kills(t, total)`` records ``total`` (kills since the run started) at time ``t`` and returns
    ``total`` minus the total recorded at the latest decision at or before ``t - window_s`` (0
    before the first window has passed). Kill times are thus known to the decision that first saw
    them: a kill between two decisions counts from the later one. A count lower than the last one
    read is a counter that started afresh (a simulation's measured span starts its counts after the
    warm-up), read as Prometheus reads a counter reset: the kills before it still count in the
    window, and the result is never negative.
    """

    def __init__(self, window_s: float = OOM_WINDOW_S):
        self.window_s = window_s
        self.records: deque[tuple[float, int]] = deque([(-math.inf, 0)])
        self._last = 0
        """The last count read, as given."""
        self._offset = 0
        """Kills counted before the counter's resets."""

    def kills(self, t: float, total: int) -> int:
        if total < self._last:
            self._offset += self._last
        self._last = total
        total += self._offset
        self.records.append((t, total))
        horizon = t - self.window_s
        while len(self.records) > 1 and self.records[1][0] <= horizon:
            self.records.popleft()
        return total - self.records[0][1]
