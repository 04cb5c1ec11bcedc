"""Typical pods per node pool, weighted by requested CPU-seconds, frozen per scenario; the cluster
fragmentation as the allocatable-CPU-weighted combination of the pools' values.

    p_m ~ sum over the pool's pods of shape m arriving in the train span of
          cpu request x min(lifetime, train end - arrival)
    fragmentation = sum_n F_n / sum_n allocatable_cpu_n,  F_n with the typical set of n's pool
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from td3sched.metrics.fragmentation import PoolTypicalPods, TypicalPods, cluster_fragmentation
from td3sched.policy import make_policy
from td3sched.scenario import _TYPICAL, load_scenario
from td3sched.simulator.engine import Simulation
from td3sched.trace.location import traces_dir
from tests.simulator.worlds import P, node, pool, simulate, typical, workload, world


def _shapes(typ: TypicalPods) -> set[tuple]:
    return {(*map(float, r), int(g), int(m)) for r, g, m in zip(typ.request, typ.gpu_count, typ.gpu_milli)}


def _shape(p: P) -> tuple:
    return (p.cpu, p.mem, p.disk, p.rdma, p.gpus, p.gpu_milli)


def test_each_pool_gets_only_the_pods_that_may_run_on_it():
    pods = [P("c", cpu=1000, mem=2048, pool="cpu", dur=100),
            P("g", cpu=4000, mem=8192, gpus=1, gpu_milli=1000, pool="gpu", dur=100),
            P("any", cpu=500, mem=512, dur=100),
            P("late", cpu=3000, mem=1024, pool="cpu", t=1000, dur=100)]   # arrives after the window
    w = workload(pods)
    typ = PoolTypicalPods.from_workload(w, ("cpu", "gpu", "spare"), 0.0, 1000.0)
    by_name = {p.name: _shape(p) for p in pods}
    assert _shapes(typ[0]) == {by_name["c"], by_name["any"]}
    assert _shapes(typ[1]) == {by_name["g"], by_name["any"]}
    assert _shapes(typ[2]) == {by_name["any"]}        # a pool no pod selects: the pods without a selector


def test_weights_are_requested_cpu_seconds_and_zero_cpu_shapes_drop_out():
    pods = [P("a", cpu=1000, mem=100, dur=100),            # 1000 x 100           = 100,000
            P("b", cpu=500, mem=100, dur=400),             #  500 x 400           = 200,000
            P("b2", cpu=500, mem=100, t=900, dur=1e9),     #  500 x (1000 - 900)  =  50,000, same shape as b
            P("mem-only", cpu=0, mem=4096, dur=1e9),       #    0: dropped
            *[P(f"be{i}", dur=1e9) for i in range(10)]]    # BestEffort (0, 0): dropped
    typ = PoolTypicalPods.from_workload(workload(pods), ("p",), 0.0, 1000.0)[0]
    got = {s[:2]: float(p) for s, p in zip(map(tuple, typ.request), typ.weight)}
    assert got == pytest.approx({(1000.0, 100.0): 100_000 / 350_000, (500.0, 100.0): 250_000 / 350_000})


def test_clusters_are_weighted_by_cpu_seconds_too():
    # One cluster: its representative is the member with the most CPU-seconds (b: 200,000 > a: 150,000),
    # though a has more pods.
    pods = [*[P(f"a{i}", cpu=1000, mem=100, dur=50) for i in range(3)], P("b", cpu=2000, mem=100, dur=100),
            P("be", dur=100)]
    typ = PoolTypicalPods.from_workload(workload(pods), ("p",), 0.0, 1000.0, max_shapes=1)[0]
    assert typ.request[:, 0].tolist() == [2000.0] and typ.weight.tolist() == [1.0]


def test_only_zero_cpu_pods_give_an_empty_set_and_no_fragmentation():
    typ = PoolTypicalPods.from_workload(workload([P("be", dur=100)]), ("p",), 0.0, 1000.0)
    assert len(typ[0]) == 0
    free = np.array([[100.0, 100.0, 0.0, 0.0]])
    assert typ.node_fragmentation(free, np.zeros((1, 0), dtype=np.int64), np.array([0])).tolist() == [0.0]


def test_two_pools_by_hand_the_capacity_weighted_mean():
    # pool a: one 4000m / 8192 MiB node, typical set {(2000m, 1024Mi): 1}
    # pool b: one 8000m / 16384 MiB node, typical set {(1000m, 4096Mi): 0.5, (3000m, 1024Mi): 0.5}
    typ = PoolTypicalPods((typical([(2000, 1024)], [1.0]), typical([(1000, 4096), (3000, 1024)], [0.5, 0.5])))
    pods = [P("x", cpu=3000, mem=1024, pool="a"),     # node a free (1000, 7168): (2000, 1024) does not fit
            P("y", cpu=5500, mem=10240, pool="b")]    # node b free (2500, 6144): (3000, 1024) does not fit
    # F_a = 1000 x 1 = 1000 (pool a: 1000 / 4000 = 0.25); F_b = 2500 x 0.5 = 1250 (pool b: 1250 / 8000 = 0.15625)
    # fragmentation = (1000 + 1250) / (4000 + 8000) = 0.1875 = (4000 x 0.25 + 8000 x 0.15625) / 12000
    w = world([pool("a", node(4000, 8192), 1), pool("b", node(8000, 16384), 1)], pods, typ=typ)
    run = simulate(w, end_s=120)
    assert run.sim.cluster_fragmentation() == pytest.approx(0.1875, rel=1e-12)
    c = run.sim.cluster
    np.testing.assert_allclose(typ.node_fragmentation(c.free, c.gpu_free(), c.pool_of), [1000, 1250])
    assert cluster_fragmentation(c.free, c.gpu_free(), c.allocatable[:, 0], typ, c.pool_of) == pytest.approx(0.1875)
    # pool a's set on both nodes: (2000, 1024) fits node b, so only F_a counts
    assert cluster_fragmentation(c.free, c.gpu_free(), c.allocatable[:, 0], typ[0]) == pytest.approx(1000 / 12000)


def test_the_fragmentation_memo_tells_pools_apart():
    # Two nodes of the same shape and the same free resources, in pools with different typical sets:
    # the per-node memo must not hand pool b the value of pool a.
    typ = PoolTypicalPods((typical([(2000, 1024)], [1.0]), typical([(500, 1024)], [1.0])))
    pods = [P("x", cpu=3000, mem=1024, pool="a"), P("y", cpu=3000, mem=1024, pool="b")]
    w = world([pool("a", node(4000, 8192), 1), pool("b", node(4000, 8192), 1)], pods, typ=typ)
    run = simulate(w, end_s=120)
    # free (1000, 7168) on both: (2000, 1024) does not fit node a, (500, 1024) fits node b
    assert run.sim.frag_cache.tolist() == [1000.0, 0.0]
    assert run.sim.cluster_fragmentation() == pytest.approx(1000 / 8000)


def test_tiny_typical_sets_come_from_the_train_span_per_pool():
    sc = load_scenario("tiny")
    w = sc.build(1)
    wl = w.workload
    start, end = sc.span("train")
    in_train = (wl.arrival_s >= start) & (wl.arrival_s < end) & (wl.request[:, 0] > 0)
    for k, p in enumerate(w.pools):
        typ = w.typical[k]
        may = in_train & ((wl.pool == -1) | (wl.pool == wl.pool_names.index(p.name)))
        allowed = {(*map(float, wl.request[i]), int(wl.gpu_count[i]), int(wl.gpu_milli[i]))
                   for i in np.flatnonzero(may)}
        assert 0 < len(typ) <= 20 and _shapes(typ) <= allowed
        assert typ.weight.sum() == pytest.approx(1.0) and (typ.request[:, 0] > 0).all()
    assert (w.typical[0].gpu_count == 0).all() and (w.typical[1].gpu_count > 0).all()
    assert _same(load_scenario("tiny").build(2).typical, w.typical)      # frozen: not the run's seed


def _same(a: PoolTypicalPods, b: PoolTypicalPods) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(TypicalPods))
        for x, y in zip(a.pools, b.pools))


def _dlrm_available() -> bool:
    try:
        traces_dir()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.parametrize("name", ["tiny", pytest.param("dlrm", marks=pytest.mark.skipif(
    not _dlrm_available(), reason="real traces not available"))])
def test_fragmentation_unchanged_by_set_days(name):
    # A run with --set days=0.125 (and another seed) scores its placements with the same typical pods
    # as the scenario as filed, so the same placements give the same fragmentation.
    _TYPICAL.clear()
    short = load_scenario(name, ["days=0.125"]).build(2)
    _TYPICAL.clear()                           # computed again, independently, from the scenario as filed
    filed = load_scenario(name).build(1).typical
    assert _same(short.typical, filed)

    def run(w):
        return Simulation(w, make_policy("k8s-default"), 2, 0.0, 1800.0).run()["metrics"]

    own = run(short)
    swapped = run(dataclasses.replace(short, typical=filed))
    assert own["decisions"] > 0 and own["fragmentation"] > 0
    assert own["fragmentation"] == swapped["fragmentation"]
    assert own["cost_fragmentation"] == swapped["cost_fragmentation"]
