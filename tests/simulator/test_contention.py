"""CPU contention: cgroup weights from requests, and CFS's weighted max-min split of a node's CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.simulator.contention import CpuShare, cpu_weight, deliver_cpu

INF = math.inf
REL = 1e-9


def tol(scale) -> float:
    """Absolute tolerance for sums of CPU in milli-CPU of this size."""
    return 1e-6 * max(1.0, float(scale))


# --- cpu.weight ---------------------------------------------------------------------------------

def test_cpu_weight_by_hand():
    # shares = max(2, milli * 1024 // 1000), weight = 1 + ((shares - 2) * 9999) // 262142
    #   0 m    -> shares 2 (MinShares)     -> weight 1
    #   1 m    -> 1024 // 1000 = 1 -> 2    -> weight 1
    #   100 m  -> 102                      -> 1 + 999900 // 262142 = 1 + 3 = 4
    #   1000 m -> 1024                     -> 1 + 10218978 // 262142 = 1 + 38 = 39
    #   2000 m -> 2048                     -> 1 + 20457954 // 262142 = 1 + 78 = 79
    #   10^6 m -> 1048576 > MaxShares, clamped to 262144 -> 1 + 9999 = 10000
    requests = np.array([0, 1, 100, 1000, 2000, 1_000_000])
    assert cpu_weight(requests).tolist() == [1, 1, 4, 39, 79, 10000]
    assert cpu_weight(np.array([999.2])).tolist() == cpu_weight(np.array([1000])).tolist()  # MilliValue rounds up


@given(st.lists(st.floats(0, 1e7), min_size=2, max_size=20))
def test_cpu_weight_in_range_and_monotone(requests):
    requests = np.sort(np.array(requests))
    w = cpu_weight(requests)
    assert w.min() >= 1 and w.max() <= 10000
    assert np.all(np.diff(w) >= 0)


@pytest.mark.parametrize("bad", [-1.0, math.nan, INF])
def test_cpu_weight_rejects_bad_requests(bad):
    with pytest.raises(ValueError, match="request_cpu_milli"):
        cpu_weight(np.array([100.0, bad]))


# --- the split, by hand ---------------------------------------------------------------------------

def test_two_nodes_by_hand():
    # Node A (0), capacity 4000 m:
    #   G  Guaranteed, request 2000, limit 2000, demand 3000 -> effective 2000 (1000 throttled), weight 79
    #   B  Burstable,  request 1000, limit inf,  demand 3000 -> effective 3000,                  weight 39
    #   BE BestEffort, request 0,    limit inf,  demand 2000 -> effective 2000,                  weight 1
    # Effective demand 7000 > 4000: water-filling. Sorted by d / w:
    #   G 2000/79 = 25.32,  B 3000/39 = 76.92,  BE 2000/1 = 2000
    # f_0 = 0    + 25.32 * (79 + 39 + 1) = 3012.7 < 4000
    # f_1 = 2000 + 76.92 * (39 + 1)      = 5076.9 >= 4000  -> k = 1
    # lambda = (4000 - 2000) / (39 + 1) = 50
    #   G  gets its 2000 (2000 / 79 < 50), B gets 50 * 39 = 1950, BE gets 50 * 1 = 50; total 4000.
    # Node B (1), capacity 2000 m: one Burstable pod (request 500, demand 500) fits and gets 500.
    request = np.array([2000, 1000, 0, 500])
    weight = cpu_weight(request)
    assert weight.tolist() == [79, 39, 1, 20]
    share = deliver_cpu(node_of=np.array([0, 0, 0, 1]),
                        demand_milli=np.array([3000.0, 3000.0, 2000.0, 500.0]),
                        weight=weight,
                        limit_milli=np.array([2000.0, INF, INF, INF]),
                        capacity_milli=np.array([4000.0, 2000.0]))
    assert isinstance(share, CpuShare)
    np.testing.assert_allclose(share.delivered_milli, [2000, 1950, 50, 500], rtol=REL)
    np.testing.assert_allclose(share.throttled_milli, [1000, 0, 0, 0])
    np.testing.assert_allclose(share.node_demand_milli, [7000, 500])
    np.testing.assert_allclose(share.node_delivered_milli, [4000, 500], rtol=REL)
    np.testing.assert_allclose(share.node_throttled_milli, [1000, 0])


def test_empty_nodes_and_zero_demand():
    share = deliver_cpu(node_of=np.array([2, 2]), demand_milli=np.array([0.0, 5000.0]), weight=np.array([50, 1]),
                        limit_milli=np.array([INF, INF]), capacity_milli=np.array([1000.0, 0.0, 1000.0]))
    np.testing.assert_allclose(share.delivered_milli, [0, 1000])
    np.testing.assert_allclose(share.node_delivered_milli, [0, 0, 1000])
    np.testing.assert_allclose(share.node_demand_milli, [0, 0, 5000])

    none = deliver_cpu(np.array([], dtype=np.int64), np.array([]), np.array([]), np.array([]), np.array([1.0, 2.0]))
    assert none.delivered_milli.shape == (0,)
    assert none.node_delivered_milli.dtype == np.float64 and none.node_delivered_milli.tolist() == [0, 0]


def test_zero_capacity_delivers_nothing():
    share = deliver_cpu(np.array([0, 0]), np.array([100.0, 200.0]), np.array([1, 10]), np.array([INF, INF]),
                        np.array([0.0]))
    assert share.delivered_milli.tolist() == [0, 0]


# --- the split, properties ------------------------------------------------------------------------

@st.composite
def nodes_and_pods(draw):
    n_nodes = draw(st.integers(1, 5))
    n_pods = draw(st.integers(0, 25))
    pods = st.integers(0, n_nodes - 1)
    node_of = np.array(draw(st.lists(pods, min_size=n_pods, max_size=n_pods)), dtype=np.int64)
    demand = np.array(draw(st.lists(st.one_of(st.just(0.0), st.sampled_from([100.0, 1000.0, 2500.0]),
                                              st.floats(0, 8000)), min_size=n_pods, max_size=n_pods)))
    request = np.array(draw(st.lists(st.sampled_from([0, 1, 100, 250, 1000, 2000, 4000]), min_size=n_pods,
                                     max_size=n_pods)))
    weight = cpu_weight(request)
    limit = np.array(draw(st.lists(st.one_of(st.just(INF), st.floats(0, 6000)), min_size=n_pods,
                                   max_size=n_pods)))
    capacity = np.array(draw(st.lists(st.one_of(st.just(0.0), st.sampled_from([1000.0, 4000.0, 16000.0]),
                                                st.floats(0, 20000)), min_size=n_nodes, max_size=n_nodes)))
    return node_of, demand, weight, limit, capacity


def reference_split(demand: np.ndarray, weight: np.ndarray, capacity: float) -> np.ndarray:
    """Progressive filling on one node, pod by pod: raise the level until a pod is satisfied, repeat."""
    out = np.zeros(len(demand))
    left = np.ones(len(demand), dtype=bool)
    room = capacity
    while left.any():
        level = room / weight[left].sum()
        done = left & (demand <= level * weight)
        if not done.any():
            out[left] = level * weight[left]
            break
        out[done] = demand[done]
        room -= demand[done].sum()
        left &= ~done
    return out


@settings(max_examples=300, deadline=None)
@given(nodes_and_pods())
def test_split_invariants(world):
    node_of, demand, weight, limit, capacity = world
    share = deliver_cpu(node_of, demand, weight, limit, capacity)
    effective = np.minimum(demand, limit)
    got = share.delivered_milli

    assert np.all(got >= 0)
    assert np.all(got <= effective)
    np.testing.assert_allclose(share.throttled_milli, demand - effective)
    for n in range(len(capacity)):
        mine = node_of == n
        d, w, g = effective[mine], weight[mine], got[mine]
        assert share.node_demand_milli[n] == pytest.approx(d.sum(), rel=REL, abs=1e-9)
        assert share.node_delivered_milli[n] == pytest.approx(g.sum(), rel=REL, abs=1e-9)
        assert g.sum() <= capacity[n] + tol(capacity[n])
        if d.sum() >= capacity[n]:       # work-conserving: a node short of CPU hands all of it out
            assert g.sum() == pytest.approx(capacity[n], rel=1e-6, abs=1e-9)
        else:                            # a node with room serves everyone
            np.testing.assert_allclose(g, d, rtol=REL)
        # weighted fairness: a pod not fully served is at the top level delivered / weight
        short = g < d - tol(d.max(initial=0))
        if short.any():
            level = g / w
            assert level[short].min() >= level.max() - tol(level.max())
        np.testing.assert_allclose(g, reference_split(d, w.astype(float), capacity[n]),
                                   rtol=1e-9, atol=tol(capacity[n]))


@settings(max_examples=150, deadline=None)
@given(nodes_and_pods(), st.data())
def test_other_nodes_do_not_matter(world, data):
    node_of, demand, weight, limit, capacity = world
    n = data.draw(st.integers(0, len(capacity) - 1))
    together = deliver_cpu(node_of, demand, weight, limit, capacity).delivered_milli
    mine = node_of == n
    alone = deliver_cpu(node_of[mine], demand[mine], weight[mine], limit[mine], capacity).delivered_milli
    np.testing.assert_allclose(together[mine], alone, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("n_nodes", [300, 70_000])  # 70,000 > 65,536 nodes: the sort without 16-bit node ids
def test_many_nodes_match_reference(n_nodes):
    rng = np.random.default_rng(7)
    n_pods = 6000
    node_of = rng.choice(n_nodes, 300, replace=False)[rng.integers(0, 300, n_pods)]  # ~20 pods a node
    demand = rng.exponential(800, n_pods) * (rng.random(n_pods) > 0.1)
    weight = cpu_weight(rng.choice([0, 100, 500, 1000, 4000], n_pods))
    limit = np.where(rng.random(n_pods) < 0.5, INF, rng.uniform(100, 3000, n_pods))
    capacity = rng.uniform(0, 30000, n_nodes)
    share = deliver_cpu(node_of, demand, weight, limit, capacity)
    effective = np.minimum(demand, limit)
    assert (share.node_demand_milli > capacity).sum() > 50  # plenty of nodes in contention
    for n in np.unique(node_of):
        mine = node_of == n
        np.testing.assert_allclose(share.delivered_milli[mine],
                                   reference_split(effective[mine], weight[mine].astype(float), capacity[n]),
                                   rtol=1e-9, atol=tol(capacity[n]))


# --- bad input ------------------------------------------------------------------------------------

def good():
    return dict(node_of=np.array([0, 1]), demand_milli=np.array([10.0, 20.0]), weight=np.array([1, 2]),
                limit_milli=np.array([INF, 5.0]), capacity_milli=np.array([100.0, 100.0]))


@pytest.mark.parametrize("name, value", [
    ("node_of", np.array([0, 2])),
    ("node_of", np.array([0, -1])),
    ("node_of", np.array([0.0, 1.0])),
    ("node_of", np.array([[0, 1]])),
    ("demand_milli", np.array([10.0, -1.0])),
    ("demand_milli", np.array([10.0, math.nan])),
    ("demand_milli", np.array([10.0, INF])),
    ("demand_milli", np.array([10.0])),
    ("weight", np.array([1, 0])),
    ("weight", np.array([1.0, math.nan])),
    ("weight", np.array([1, 2, 3])),
    ("limit_milli", np.array([INF, -5.0])),
    ("limit_milli", np.array([INF, math.nan])),
    ("capacity_milli", np.array([100.0, -1.0])),
    ("capacity_milli", np.array([100.0, math.nan])),
    ("capacity_milli", np.array([[100.0, 100.0]])),
])
def test_bad_input_names_the_argument(name, value):
    kw = good()
    kw[name] = value
    with pytest.raises(ValueError, match=name):
        deliver_cpu(**kw)


def test_sharing_pressure_by_hand():
    from td3sched.simulator.contention import sharing_pressure

    # node 0, capacity 4000m: G (d 2000, w 79), B (d 3000, w 39), BE (d 2000, w 1)
    # r = d / w: BE 2000, B 76.9, G 25.3.
    # G:  min(2000, 25.3*79) + min(3000, 25.3*39) + min(2000, 25.3*1) = 2000 + 987.3 + 25.3
    # B:  2000 + 3000 + 76.9 ;  BE: 2000 + 3000 + 2000 = 7000 (the whole demand)
    d = np.array([2000.0, 3000.0, 2000.0, 500.0])
    w = np.array([79.0, 39.0, 1.0, 39.0])
    got = sharing_pressure(np.array([0, 0, 0, 1]), d, w, np.array([4000.0, 1000.0]))
    rg, rb = 2000 / 79, 3000 / 39
    expected = [(2000 + rg * 39 + rg) / 4000, (2000 + 3000 + rb) / 4000, 7000 / 4000, 0.5]
    np.testing.assert_allclose(got, expected)
    # the pods not fully served are exactly those with pressure >= 1 (deliver_cpu)
    share = deliver_cpu(np.array([0, 0, 0, 1]), d, w, np.full(4, np.inf), np.array([4000.0, 1000.0]))
    np.testing.assert_array_equal(share.delivered_milli < d - 1e-9, got > 1)
