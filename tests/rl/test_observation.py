"""The observation: its layout, values worked out by hand, a fixed size for any node count, and the
5-minute OOM kill window."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy.base import PodRequest
from td3sched.policy.features import utilisation
from hypothesis.extra.numpy import arrays

from td3sched.rl.observation import OBSERVATION_FIELDS, OBSERVATION_SIZE, OomWindow, observe, utilisation_stats
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE
from tests.simulator.worlds import node, pool


def test_layout_is_the_documented_one():
    assert OBSERVATION_SIZE == 35 == len(set(OBSERVATION_FIELDS))
    assert OBSERVATION_FIELDS[:7] == ("request_cpu", "request_mem", "request_disk", "request_rdma",
                                      "qos_guaranteed", "qos_burstable", "qos_best_effort")
    assert OBSERVATION_FIELDS[7:13] == tuple(f"util_cpu_{s}" for s in ("mean", "std", "min", "max", "p10", "p90"))
    assert OBSERVATION_FIELDS[25] == "util_net_mean" and OBSERVATION_FIELDS[30] == "util_net_p90"
    assert OBSERVATION_FIELDS[31:] == ("feasible_share", "oom_kills_5min_log1p", "time_of_day_sin", "time_of_day_cos")


def _cluster():
    # two 4-core / 8 GiB nodes and one 8-core / 16 GiB node
    c = Cluster([pool("a", node(4000, 8192, disk_gib=100, rdma=100, disk_mbps=1000, net_mbps=1000), 2),
                 pool("b", node(8000, 16384, disk_gib=200, rdma=50, disk_mbps=1000, net_mbps=1000), 1)])
    c.observed[:] = [[1000, 2048, 100, 0], [3000, 0, 0, 500], [2000, 4096, 500, 250]]
    return c


def test_values_by_hand():
    c = _cluster()
    pod = PodRequest(0, np.array([1000.0, 2048.0, 10.0, 25.0]), 0, 0, BURSTABLE, np.inf, np.inf, 6 * 3600.0)
    nodes = np.array([0, 1])  # node 2 is not feasible
    u = utilisation(pod, nodes, c, None)
    # u with the pod: node 0 [(1000+1000)/4000, (2048+2048)/8192, 100/1000, 0]   = [.5, .5, .1, 0]
    #                 node 1 [(3000+1000)/4000, (0+2048)/8192, 0, 500/1000]      = [1, .25, 0, .5]
    np.testing.assert_allclose(u, [[0.5, 0.5, 0.1, 0.0], [1.0, 0.25, 0.0, 0.5]])
    obs = observe(pod, nodes, c, u, oom_kills_recent=3)
    assert obs.dtype == np.float32 and obs.shape == (35,)
    # requests over the largest allocatable among the feasible nodes (4000, 8192, 100, 100)
    np.testing.assert_allclose(obs[0:4], [0.25, 0.25, 0.1, 0.25])
    np.testing.assert_array_equal(obs[4:7], [0, 1, 0])
    # cpu: mean .75, std .25, min .5, max 1, p10 .55, p90 .95 (linear interpolation)
    np.testing.assert_allclose(obs[7:13], [0.75, 0.25, 0.5, 1.0, 0.55, 0.95], rtol=1e-6)
    np.testing.assert_allclose(obs[13:19], [0.375, 0.125, 0.25, 0.5, 0.275, 0.475], rtol=1e-6)
    np.testing.assert_allclose(obs[25:31], [0.25, 0.25, 0.0, 0.5, 0.05, 0.45], rtol=1e-6)
    assert obs[31] == pytest.approx(2 / 3)                    # 2 feasible of 3 ready
    assert obs[32] == pytest.approx(math.log(4))               # log(1 + 3 kills)
    assert obs[33] == pytest.approx(1.0) and obs[34] == pytest.approx(0.0, abs=1e-7)  # 06:00


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2), st.floats(0, 1e7), st.integers(0, 2**31 - 1))
def test_fixed_size_and_finite_for_any_node_count(k, qos, t, seed):
    rng = np.random.default_rng(seed)
    c = Cluster([pool("a", node(4000, 8192), k)])
    c.observed[:] = rng.uniform(0, 1, (k, 4)) * c.capacity_usage
    c.ready[:] = True
    nodes = np.flatnonzero(rng.uniform(size=k) < 0.7)
    if len(nodes) == 0:
        nodes = np.array([0])
    pod = PodRequest(0, rng.uniform(0, 2000, 4), 0, 0, qos, np.inf, np.inf, t)
    obs = observe(pod, nodes, c, utilisation(pod, nodes, c, None), int(rng.integers(0, 50)))
    assert obs.shape == (OBSERVATION_SIZE,) and np.all(np.isfinite(obs))
    assert obs[4:7].sum() == 1 and obs[4 + qos] == 1
    assert 0 < obs[31] <= 1


def test_no_feasible_node_is_an_error():
    c = _cluster()
    pod = PodRequest(0, np.zeros(4), 0, 0, BEST_EFFORT, np.inf, np.inf, 0.0)
    with pytest.raises(ValueError, match="no feasible node"):
        observe(pod, np.array([], dtype=np.int64), c, np.zeros((0, 4)), 0)


def test_oom_window_counts_the_last_five_minutes():
    w = OomWindow(300.0)
    assert w.kills(0.0, 0) == 0
    assert w.kills(100.0, 2) == 2        # 2 kills since the start
    assert w.kills(250.0, 5) == 5
    assert w.kills(400.0, 5) == 3        # the total at t=100 (2) is the newest at or before 400-300
    assert w.kills(560.0, 6) == 1        # base: t=250 (5)
    assert w.kills(2000.0, 6) == 0       # base: t=560 (6)


def test_oom_window_reads_a_count_that_starts_afresh_as_a_counter_reset():
    """The simulator's counts start afresh when its measured span begins after the warm-up: the
    window keeps the kills before the reset and never goes negative (a td3 policy on dlrm crashed on
    log1p of a negative count)."""
    w = OomWindow(300.0)
    assert w.kills(0.0, 0) == 0
    assert w.kills(100.0, 4) == 4
    assert w.kills(200.0, 0) == 4        # reset: the 4 kills of the last 5 minutes still count
    assert w.kills(300.0, 1) == 5        # one more since the reset
    assert w.kills(450.0, 1) == 1        # base: t=100 (4): what is left is the kill after the reset
    assert w.kills(2000.0, 1) == 0


def numpy_stats(u: np.ndarray) -> np.ndarray:
    """The statistics as numpy's general functions compute them: what utilisation_stats must equal."""
    q = np.quantile(u, [0.0, 0.1, 0.9, 1.0], axis=0)
    return np.stack([u.mean(axis=0), u.std(axis=0), q[0], q[3], q[1], q[2]], axis=1).ravel()


# utilisations as they come (0 to a few times over, many repeated values), and any finite magnitude
VALUES = st.one_of(st.floats(0, 3), st.sampled_from([0.0, 0.25, 0.5, 1.0]),
                   st.floats(-1e150, 1e150, allow_nan=False, allow_subnormal=True))


@settings(max_examples=400, deadline=None)
@given(u=st.integers(1, 40).flatmap(lambda k: arrays(np.float64, (k, 4), elements=VALUES)))
def test_utilisation_stats_are_numpys_to_the_bit(u):
    np.testing.assert_array_equal(utilisation_stats(u), numpy_stats(u))


@settings(max_examples=60, deadline=None)
@given(k=st.sampled_from([100, 511, 997, 3001, 5000]), seed=st.integers(0, 2**32 - 1), ties=st.booleans())
def test_utilisation_stats_are_numpys_to_the_bit_at_cluster_sizes(k, seed, ties):
    u = np.random.default_rng(seed).uniform(0, 1.5, size=(k, 4))
    if ties:
        u = np.round(u, 1)
    np.testing.assert_array_equal(utilisation_stats(u), numpy_stats(u))
