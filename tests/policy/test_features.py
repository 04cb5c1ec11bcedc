"""policy.features.utilisation: the compiled pass equals its NumPy rule, bit for bit."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy.base import PodRequest
from td3sched.policy.features import utilisation


def numpy_rule(pod, nodes, cluster, recent):
    used = cluster.observed[nodes].copy()
    if recent is not None:
        used[:, :2] += recent[nodes]
    used[:, :2] += pod.nonzero_cpu_mem
    return used / cluster.capacity_usage[nodes]


def cluster_of(rng, n):
    capacity = rng.uniform(1.0, 1e5, size=(n, 4))
    return SimpleNamespace(observed=rng.uniform(0, 2, size=(n, 4)) * capacity, capacity_usage=capacity)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), k=st.integers(0, 80), seed=st.integers(0, 2**32 - 1), with_recent=st.booleans(),
       cpu=st.sampled_from([0.0, 1.0, 250.0, 3333.3]), mem=st.sampled_from([0.0, 64.0, 1e4]))
def test_utilisation_is_the_numpy_rule_to_the_bit(n, k, seed, with_recent, cpu, mem):
    rng = np.random.default_rng(seed)
    cluster = cluster_of(rng, n)
    nodes = rng.integers(0, n, size=k)  # repeats and any order, as candidates come
    recent = rng.uniform(0, 5000, size=(n, 2)) if with_recent else None
    pod = PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), 0, 0, 1, np.inf, np.inf, 0.0)
    got = utilisation(pod, nodes, cluster, recent)
    assert got.shape == (k, 4) and got.dtype == np.float64
    np.testing.assert_array_equal(got, numpy_rule(pod, nodes, cluster, recent))


def test_nodes_must_be_indices_in_range():
    cluster = cluster_of(np.random.default_rng(0), 3)
    pod = PodRequest(0, np.array([100.0, 100.0, 0.0, 0.0]), 0, 0, 1, np.inf, np.inf, 0.0)
    with pytest.raises(ValueError, match="expected node indices"):
        utilisation(pod, np.array([True, False, True]), cluster, None)
    with pytest.raises(IndexError):
        utilisation(pod, np.array([0, 3]), cluster, None)
