"""The compiled scheduling-cycle loops (simulator/kernels.py) against the NumPy rules they compile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy.k8s_default import MIB, balanced_allocation, least_allocated
from td3sched.simulator.filter import fits_one
from td3sched.simulator.kernels import best_nodes, filter_nodes, k8s_default_scores, nodes_to_find, overload_sum
from td3sched.reward import overload

VALUES = [-1e-9, 0.0, 100.0, 250.0, 999.999, 1000.0, 4000.0]


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 12))
    g = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    free = rng.choice(VALUES, size=(n, 4))
    gpu_capacity = np.where(rng.random((n, g)) < 0.7, 1000, 0).astype(np.int64)
    gpu_used = np.minimum(rng.choice([0, 250, 500, 1000], size=(n, g)), gpu_capacity).astype(np.int64)
    ready = rng.random(n) < 0.8
    provisioned = ready | (rng.random(n) < 0.5)
    observed = rng.choice([0.0, 800.0, 900.0, 950.0], size=(n, 4))
    safety = np.full(n, 900.0)
    pressure = np.full(n, 900.0)
    until = rng.choice([-np.inf, 5.0, 20.0], size=n)
    request = rng.choice(VALUES[1:], size=4) * (rng.random(4) < 0.6)
    count = int(rng.choice([0, 0, 1, 2]))
    milli = int(rng.choice([250, 500, 1000])) if count == 1 else (1000 if count else 0)
    app_count = rng.integers(0, 3, size=n) if rng.random() < 0.5 else np.zeros(0, dtype=np.int64)
    cap = int(rng.integers(0, 3))
    pool_of = rng.integers(0, 2, size=n).astype(np.int16)
    return dict(start=int(rng.integers(0, n)), to_find=int(rng.integers(1, n + 2)), pool=int(rng.integers(-1, 2)),
                pool_of=pool_of, ready=ready, provisioned=provisioned, free=free, gpu_capacity=gpu_capacity,
                gpu_used=gpu_used, request=request, count=count, milli=milli, app_count=app_count, cap=cap,
                observed=observed, safety=safety, best_effort=bool(rng.random() < 0.5), pressure=pressure,
                until=until, t=10.0)


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_filter_nodes_is_filters_rule_on_kube_schedulers_walk(c):
    n_slots = len(c["ready"])
    # the rule, in NumPy: the pool, resources (fits_one), readiness and the cap, then usage
    in_pool = (c["pool_of"] == c["pool"]) | (c["pool"] < 0)
    fit = in_pool & c["ready"] & fits_one(c["free"], c["gpu_capacity"] - c["gpu_used"], c["request"], c["count"],
                                          c["milli"])
    if c["cap"] > 0 and len(c["app_count"]):
        fit &= c["app_count"] < c["cap"]
    passed = fit & (c["observed"][:, 0] <= c["safety"])
    if c["best_effort"]:
        passed &= (c["observed"][:, 1] < c["pressure"]) & (c["until"] <= c["t"])
    # kube-scheduler's walk: from start round the slots, until to_find nodes passed
    order = (c["start"] + np.arange(n_slots)) % n_slots
    found = order[passed[order]][: c["to_find"]]
    walked = n_slots if len(found) < c["to_find"] else int(np.flatnonzero(order == found[-1])[0]) + 1
    seen = order[:walked]
    out = np.empty(n_slots, dtype=np.int64)
    n, fits_any, everywhere, w = filter_nodes(c["start"], c["to_find"], c["pool"], c["pool_of"], c["ready"],
                                              c["provisioned"], c["free"], c["gpu_capacity"], c["gpu_used"],
                                              c["request"], c["count"], c["milli"], c["app_count"], c["cap"],
                                              c["observed"], c["safety"], c["best_effort"], c["pressure"],
                                              c["until"], c["t"], out)
    assert out[:n].tolist() == found.tolist()
    assert w == walked
    assert fits_any == bool(fit[seen].any())
    assert everywhere == (not (in_pool & c["provisioned"] & ~fit)[seen].any())


@pytest.mark.parametrize("nodes, want", [(1, 1), (99, 99), (100, 100), (250, 120), (500, 230), (2898, 782),
                                         (5000, 500), (6000, 300), (20000, 1000)])
def test_nodes_to_find_is_kube_schedulers_adaptive_rule(nodes, want):
    # 50 - n/125 percent, at least 5, at least 100 nodes (pkg/scheduler/schedule_one.go)
    assert nodes_to_find(0, nodes) == want


def test_nodes_to_find_with_a_set_percentage():
    assert nodes_to_find(100, 2898) == 2898
    assert nodes_to_find(10, 2898) == 289
    assert nodes_to_find(1, 2898) == 100


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_k8s_default_scores_are_bit_identical_to_the_numpy_rule(seed, best_effort):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    alloc = np.column_stack([rng.choice([1000.0, 3900.0, 96000.0, 192000.0], n),
                             rng.choice([2048.0, 15000.0, 770000.0], n)])
    requested = alloc * rng.random((n, 2)) * (rng.random((n, 2)) < 0.9)
    nonzero = requested + rng.choice([0.0, 100.0, 200.0], size=(n, 2))
    req = rng.choice([0.0, 1.0, 250.0, 3333.0, 64000.0], size=2)
    nz = np.where(req > 0, req, [100.0, 200.0])
    nodes = rng.permutation(n)[: int(rng.integers(1, n + 1))]
    a_cpu, a_mem = alloc[nodes, 0], alloc[nodes, 1] * MIB
    want = least_allocated(nonzero[nodes, 0] + nz[0], (nonzero[nodes, 1] + nz[1]) * MIB, a_cpu, a_mem)
    if not best_effort:
        want = want + balanced_allocation(requested[nodes, 0] + req[0], (requested[nodes, 1] + req[1]) * MIB,
                                          a_cpu, a_mem)
    out = np.empty(len(nodes))
    k8s_default_scores(nodes, nonzero, requested, np.ascontiguousarray(alloc[:, 0]), alloc[:, 1] * MIB,
                       float(nz[0]), float(nz[1]), float(req[0]), float(req[1]), best_effort, MIB, out)
    assert out.tobytes() == want.tobytes()


def test_best_nodes_returns_every_tie_of_the_top_score_and_refuses_non_finite_scores():
    ties = np.empty(5, dtype=np.int64)
    count, top = best_nodes(np.array([3.0, 7.0, 1.0, 7.0, 7.0]), ties)
    assert (count, top) == (3, 7.0) and ties[:3].tolist() == [1, 3, 4]
    for bad in (np.nan, np.inf, -np.inf):
        assert best_nodes(np.array([1.0, bad]), ties)[0] == -1


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_overload_sum_is_the_rewards_overload(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    alloc = rng.choice([1000.0, 4000.0], n)
    cores = alloc + 500.0
    usage = rng.random(n) * 6000.0
    prov = (rng.random(n) < 0.7).astype(np.float64)
    want = overload(np.minimum(usage, cores) / alloc, prov, 0.85)
    assert np.isclose(overload_sum(usage, cores, 1.0 / alloc, prov, 0.85), want, rtol=1e-12, atol=1e-12)


def test_pod_usage_of_one_pod_equals_its_row_of_the_array_form():
    from types import SimpleNamespace

    from td3sched.simulator.usage import pod_usage

    rng = np.random.default_rng(0)
    n = 50
    w = SimpleNamespace(size_cpu_milli=rng.random(n) * 1e5,
                        cpu_limit_milli=np.where(rng.random(n) < 0.5, np.inf, rng.random(n) * 1e5),
                        size_mem_mib=rng.random(n) * 1e4, size_disk_mbps=rng.random(n), size_net_mbps=rng.random(n))
    cfg = SimpleNamespace(usage_scale=1.13, mem_level=0.71)
    shape = rng.random((4, n))
    rows = pod_usage(w, cfg, np.arange(n), shape)
    one = np.array([pod_usage(w, cfg, i, shape[:, i]) for i in range(n)])
    assert one.tobytes() == rows.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_refresh_fragmentation_is_node_fragmentation_of_each_changed_node(seed):
    from td3sched.metrics.fragmentation import PoolTypicalPods, TypicalPods, node_fragmentation
    from td3sched.simulator.kernels import block_count, block_size, padded_typical, refresh_fragmentation

    rng = np.random.default_rng(seed)
    n, g = int(rng.integers(1, 40)), int(rng.integers(1, 5))  # the flags are read by words of 8
    sets = []
    for _ in range(int(rng.integers(1, 4))):
        m = int(rng.integers(0, 6))
        count = rng.choice([0, 0, 1, 2], m)
        milli = np.where(count == 1, rng.choice([250, 500, 1000], m), np.where(count > 0, 1000, 0))
        w = rng.random(m)
        sets.append(TypicalPods(rng.choice(VALUES[1:], (m, 4)) * (rng.random((m, 4)) < 0.6), count.astype(np.int64),
                                milli.astype(np.int64), w / w.sum() if m else w))
    typical = PoolTypicalPods(tuple(sets))
    pool_of = rng.integers(0, len(sets), n).astype(np.int16)
    free = rng.choice(VALUES, (n, 4))
    cap = np.where(rng.random((n, g)) < 0.6, 1000, 0).astype(np.int64)
    used = np.minimum(rng.choice([0, 250, 500, 1000], (n, g)), cap).astype(np.int64)
    dirty = rng.random(n) < rng.choice([0.05, 0.7])
    want = np.full(n, -1.0)
    changed = np.flatnonzero(dirty)
    for i in changed:
        want[i] = node_fragmentation(free[i][None], (cap - used)[i][None], typical[int(pool_of[i])])[0]
    out = np.full(n, -1.0)
    flags = dirty.copy()
    stale = np.zeros(block_count(n, int(rng.integers(1, 5))), dtype=bool)
    size = block_size(n, len(stale))  # nodes a block, as the kernels see it
    refresh_fragmentation(dirty, free, cap, used, pool_of, *padded_typical(typical), out, stale)
    assert not dirty.any()
    assert out.tobytes() == want.tobytes()  # both sum the unfit shapes' weights in shape order: the same bits
    assert (stale == [flags[b * size:(b + 1) * size].any() for b in range(len(stale))]).all()

    # reward_state: the same refresh, then the overload and stranded sums by blocks, recomputing the
    # stale ones (here: those of the refreshed nodes, and one more)
    from td3sched.simulator.kernels import lane_sum, reward_state, weighted_total

    usage, cores, inv = rng.random(n) * 6000.0, np.full(n, 4500.0), np.full(n, 1 / 4000.0)
    prov = (rng.random(n) < 0.7).astype(np.float64)
    fused = np.full(n, -1.0)
    blocks = [(b * size, min((b + 1) * size, n)) for b in range(len(stale))]
    sums = np.array([[overload_sum(usage[lo:hi], cores[lo:hi], inv[lo:hi], prov[lo:hi], 0.85) for lo, hi in blocks],
                     [weighted_total(out[lo:hi], prov[lo:hi]) for lo, hi in blocks]])
    held = sums.copy()
    held[:, [b for b in range(len(stale)) if flags[blocks[b][0]:blocks[b][1]].any()]] = np.nan  # must be redone
    extra = int(rng.integers(0, len(stale)))
    usage[blocks[extra][0]] += 700.0  # a usage change the caller flags itself
    sums[0, extra] = overload_sum(usage[blocks[extra][0]:blocks[extra][1]], cores[blocks[extra][0]:blocks[extra][1]],
                                  inv[blocks[extra][0]:blocks[extra][1]], prov[blocks[extra][0]:blocks[extra][1]], 0.85)
    stale = np.zeros(len(stale), dtype=bool)
    stale[extra] = True
    load, stranded = reward_state(flags, free, cap, used, pool_of, *padded_typical(typical), fused, usage, cores, inv,
                                  prov, 0.85, stale, held)
    assert not flags.any() and not stale.any() and fused.tobytes() == out.tobytes()
    assert held.tobytes() == sums.tobytes()
    assert (load, stranded) == (lane_sum(sums[0]), lane_sum(sums[1]))
    assert np.isclose(load, overload_sum(usage, cores, inv, prov, 0.85), rtol=1e-12, atol=1e-12)
    assert np.isclose(stranded, weighted_total(out, prov), rtol=1e-12, atol=1e-9)


def _walk_by_hand(request, count, milli, free, gpu_free):
    """The room walk in NumPy (filter.fits_node and filter.choose_gpus), pod by pod."""
    from td3sched.simulator.filter import choose_gpus, fits_node

    free, gpu_free, taken = free.copy(), gpu_free.copy(), []
    for i in range(len(request)):
        if fits_node(free, gpu_free, request[i:i + 1], count[i:i + 1], milli[i:i + 1])[0]:
            taken.append(i)
            free -= request[i]
            if count[i]:
                gpu_free[choose_gpus(gpu_free, int(count[i]), int(milli[i]))] -= int(milli[i])
    return taken


@st.composite
def shapes_and_node(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, g = int(rng.integers(1, 10)), int(rng.integers(1, 5))
    count = rng.choice([0, 0, 1, 1, 2], m).astype(np.int64)
    milli = np.where(count == 1, rng.choice([100, 250, 500, 1000], m), np.where(count > 0, 1000, 0)).astype(np.int64)
    request = rng.choice([0.0, 100.0, 250.0, 1000.0, 3000.0], (m, 4)) * (rng.random((m, 4)) < 0.6)
    free = rng.choice(VALUES, 4) * rng.integers(1, 5)
    gpu_free = np.where(rng.random(g) < 0.7, rng.choice([0, 150, 500, 1000], g), 0).astype(np.int64)
    return request, count, milli, free, gpu_free


@settings(max_examples=300, deadline=None)
@given(shapes_and_node())
def test_walk_room_is_the_pod_by_pod_walk(case):
    from td3sched.simulator.kernels import walk_room

    request, count, milli, free, gpu_free = case
    taken = np.empty(len(request), dtype=np.int64)
    m = walk_room(request, count, milli, free, gpu_free, taken)
    assert taken[:m].tolist() == _walk_by_hand(request, count, milli, free, gpu_free)


@settings(max_examples=300, deadline=None)
@given(shapes_and_node(), st.integers(0, 2))
def test_room_matrix_counts_how_many_of_a_shape_the_walk_takes(case, node_pool):
    from td3sched.simulator.kernels import room_matrix, walk_room

    request, count, milli, free, gpu_free = case
    pool = np.resize(np.array([-1, 0, 1]), len(request)).astype(np.int64)
    out = np.empty((1, len(request)), dtype=np.int64)
    room_matrix(np.array([0]), free[None], gpu_free[None], np.zeros_like(gpu_free)[None],
                np.array([node_pool], dtype=np.int16), request, count, milli, pool, out)
    for k in range(len(request)):
        if pool[k] >= 0 and pool[k] != node_pool:
            assert out[0, k] == 0
            continue
        reps = 64  # enough copies to exhaust the node, unless the shape asks for nothing
        taken = np.empty(reps, dtype=np.int64)
        n = walk_room(np.repeat(request[k:k + 1], reps, axis=0), np.repeat(count[k:k + 1], reps),
                      np.repeat(milli[k:k + 1], reps), free, gpu_free, taken)
        assert min(out[0, k], reps) == n


def _running_world(rng):
    """Random pods, some of them running (in a RunningPods, added and removed in a random order)."""
    from types import SimpleNamespace

    from td3sched.simulator.running import SIZE_COLUMNS, RunningPods

    n_pods, n_nodes = int(rng.integers(1, 60)), int(rng.integers(1, 8))
    node_of = rng.integers(0, n_nodes, n_pods).astype(np.int64)
    profile = rng.integers(0, 5, n_pods)
    size_cpu = rng.choice([100.0, 1000.0, 4000.0], n_pods)
    weight = rng.choice([1, 2, 39, 157], n_pods).astype(np.int64)
    app = rng.integers(0, 4, n_pods)
    base_ms = rng.choice([5.0, 20.0, 80.0], 4)
    ls = rng.random(n_pods) < 0.4
    pod_usage = rng.choice([0.0, 50.0, 400.0, 1500.0], size=(n_pods, 4)) * rng.random((n_pods, 4))
    crashed = rng.random(n_pods) < 0.2
    w = SimpleNamespace(profile=profile, app=app, latency_sensitive=ls, size_cpu_milli=size_cpu,
                        **{name: rng.random(n_pods) * 1000 for name in SIZE_COLUMNS[1:]})
    run = RunningPods(w, weight, base_ms, pod_usage, crashed, capacity=1)
    live = set()
    for pod in rng.integers(0, n_pods, 3 * n_pods):  # starts, stops and changes, in a random order
        pod = int(pod)
        if pod in live and rng.random() < 0.3:  # its usage or crash state changes while it runs
            pod_usage[pod, 0] = rng.choice([0.0, 700.0])
            crashed[pod] = not crashed[pod]
            run.sync(pod)
        elif pod in live:
            run.remove(pod)
            live.remove(pod)
        else:
            run.add(pod, int(node_of[pod]))
            live.add(pod)
    return dict(n_pods=n_pods, n_nodes=n_nodes, node_of=node_of, profile=profile, size_cpu=size_cpu, weight=weight,
                app=app, base_ms=base_ms, ls=ls, pod_usage=pod_usage, crashed=crashed, w=w, run=run, live=live)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_running_pods_keep_each_pods_columns_in_its_slot(seed):
    """After any sequence of starts and stops, the slots hold exactly the running pods, pos is each
    one's slot (-1 for the others), and every slot column is its pod's."""
    from td3sched.simulator.running import SIZE_COLUMNS

    world = _running_world(np.random.default_rng(seed))
    run = world["run"]
    pods = run.pods[: run.n]
    assert sorted(pods.tolist()) == sorted(world["live"])
    assert (run.pos[pods] == np.arange(run.n)).all()
    assert (np.delete(run.pos, pods) == -1).all()
    assert (run.node[: run.n] == world["node_of"][pods]).all()
    assert (run.profile[: run.n] == world["profile"][pods]).all()
    assert (run.weight[: run.n] == world["weight"][pods]).all()
    for row, name in enumerate(SIZE_COLUMNS):
        assert (run.size[row, : run.n] == getattr(world["w"], name)[pods]).all()
    assert (run.base_ms[: run.n] == world["base_ms"][world["app"][pods]]).all()
    assert (run.latency_sensitive[: run.n] == world["ls"][pods]).all()
    assert (run.cpu[: run.n] == world["pod_usage"][pods, 0]).all()
    assert (run.crashed[: run.n] == world["crashed"][pods]).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_tick_cpu_is_the_samples_numpy_rule(seed):
    """tick_cpu's totals are the tick's NumPy sums, and its pressure is contention.sharing_pressure over
    the pods of every node that serves a running, not crashed, latency-sensitive pod."""
    from td3sched.simulator.contention import sharing_pressure
    from td3sched.simulator.kernels import tick_cpu

    rng = np.random.default_rng(seed)
    world = _running_world(rng)
    run, node_of, ls = world["run"], world["node_of"], world["ls"]
    pod_usage, crashed = world["pod_usage"], world["crashed"]
    running = run.pods[: run.n]
    shape_cpu = rng.random(5).astype(np.float32)
    scale = np.float32(rng.choice([0.4, 1.0, 5.0]))
    capacity = rng.choice([0.0, 1000.0, 4000.0], world["n_nodes"])
    run.pressure[:] = -1.0
    raw, demand, batch = tick_cpu(run.node, run.profile, run.size[0], run.weight, run.latency_sensitive, run.cpu,
                                  run.crashed, run.n, shape_cpu, scale, capacity, run.pressure)
    d = pod_usage[running, 0]
    profile, size_cpu = world["profile"], world["size_cpu"]
    want_raw = np.where(d > 0, np.maximum(scale * shape_cpu[profile[running]] * size_cpu[running], d), 0.0)
    assert np.isclose(raw, want_raw.sum(), rtol=1e-12, atol=1e-9)
    assert np.isclose(demand, d.sum(), rtol=1e-12, atol=1e-9)
    assert np.isclose(batch, d[~ls[running]].sum(), rtol=1e-12, atol=1e-9)
    serving = running[ls[running] & ~crashed[running]]
    mates = running[np.isin(node_of[running], node_of[serving])]
    want = sharing_pressure(node_of[mates], pod_usage[mates, 0], world["weight"][mates], capacity)
    assert np.allclose(run.pressure[run.pos[mates]], want, rtol=1e-12, atol=1e-12)
    others = np.setdiff1d(np.arange(run.n), run.pos[mates])
    assert (run.pressure[others] == -1.0).all()  # untouched


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_tick_latency_is_the_samples_numpy_rule(seed):
    """tick_latency's samples (as a multiset), breaches and breach samples are the tick's NumPy rule
    over the latency-sensitive pods: served ones at their factor, crashed and pending ones at the cap;
    ``breaching`` ends as the served pods' breach state, untouched for the others."""
    from td3sched.simulator.kernels import tick_latency

    rng = np.random.default_rng(seed)
    world = _running_world(rng)
    run, n_pods, ls, app, base_ms = world["run"], world["n_pods"], world["ls"], world["app"], world["base_ms"]
    running = run.pods[: run.n]
    pending_state, running_state = 1, 2
    state = np.where(rng.random(n_pods) < 0.3, pending_state, 3).astype(np.int8)
    state[running] = running_state
    crashed = world["crashed"]
    pressure_of = rng.choice([0.0, 0.5, 0.9, 0.99, 3.0, np.inf], n_pods)
    run.pressure[: run.n] = pressure_of[running]
    io_factor = rng.choice([0.0, 0.3, 4.0], world["n_nodes"])
    breaching = rng.random(n_pods) < 0.5
    before = breaching.copy()
    w_cpu, rho_cap, slo, cap_factor = 0.7, 0.98, float(rng.choice([1.5, 3.0])), 42.0
    ls_pods = np.flatnonzero(ls)
    latency, breaches, samples = tick_latency(run.pods, run.node, run.latency_sensitive, run.base_ms, run.pressure,
                                              run.crashed, run.n, breaching, io_factor, w_cpu, rho_cap, slo, ls_pods,
                                              state, app, base_ms, cap_factor, pending_state)
    served = ls_pods[(state[ls_pods] == running_state) & ~crashed[ls_pods]]
    waiting = ls_pods[(state[ls_pods] == pending_state) | ((state[ls_pods] == running_state) & crashed[ls_pods])]
    rho = np.minimum(pressure_of[served], rho_cap)
    factor = 1.0 + w_cpu * (1.0 / (1.0 - rho) - 1.0) + io_factor[world["node_of"][served]]
    want = np.concatenate([base_ms[app[served]] * factor, base_ms[app[waiting]] * cap_factor])
    assert np.array_equal(np.sort(latency), np.sort(want))
    above = factor > slo
    assert breaches == int((above & ~before[served]).sum())
    assert samples == int(above.sum()) + len(waiting)
    assert (breaching[served] == above).all()
    others = np.setdiff1d(np.arange(n_pods), served)
    assert (breaching[others] == before[others]).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_requested_utilisation_is_cluster_autoscalers_rule(seed):
    from td3sched.simulator.kernels import requested_utilisation

    rng = np.random.default_rng(seed)
    n, g = int(rng.integers(1, 20)), int(rng.integers(1, 5))
    allocatable = rng.choice([1000.0, 4000.0, 96000.0], size=(n, 4))
    requested = allocatable * rng.random((n, 4))
    gpu_capacity = np.where(rng.random((n, g)) < 0.4, 1000, 0).astype(np.int64)
    gpu_used = np.minimum(rng.choice([0, 250, 1000], size=(n, g)), gpu_capacity).astype(np.int64)
    util = np.maximum(requested[:, 0] / allocatable[:, 0], requested[:, 1] / allocatable[:, 1])
    cap = gpu_capacity.sum(axis=1)
    want = np.where(cap > 0, gpu_used.sum(axis=1) / np.maximum(cap, 1), util)
    got = requested_utilisation(requested, allocatable, gpu_capacity, gpu_used, np.empty(n))
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_unneeded_nodes_is_the_scale_down_scans_rule(seed):
    """A node is unneeded while provisioned, ready and under the threshold, since the first scan that
    saw it so; ripe once unneeded long enough; a node that stops being unneeded starts again."""
    from td3sched.simulator.kernels import requested_utilisation, unneeded_nodes

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    allocatable = np.full((n, 4), 4000.0)
    gpu_capacity, gpu_used = np.zeros((n, 1), dtype=np.int64), np.zeros((n, 1), dtype=np.int64)
    since, want_since = np.full(n, np.inf), np.full(n, np.inf)
    for t in np.cumsum(rng.choice([10.0, 60.0, 300.0], 12)):
        requested = allocatable * rng.choice([0.0, 0.2, 0.5, 0.9], size=(n, 4))
        provisioned, ready = rng.random(n) < 0.9, rng.random(n) < 0.9
        low = provisioned & ready & (requested_utilisation(requested, allocatable, gpu_capacity, gpu_used,
                                                           np.empty(n)) < 0.5)
        want_since[~low] = np.inf
        want_since[low & np.isinf(want_since)] = t
        want = low & (t - want_since >= 600.0)
        util, ripe = np.empty(n), np.empty(n, dtype=bool)
        count = unneeded_nodes(requested, allocatable, gpu_capacity, gpu_used, provisioned, ready, 0.5, since, t,
                               600.0, util, ripe)
        assert count == want.sum() and (ripe == want).all() and np.array_equal(since, want_since)


def test_refresh_pod_usage_is_pod_usage_with_the_memory_limit_and_bincount():
    """The compiled refresh, over the running pods' slots, gives ``usage.pod_usage``'s numbers, zero for
    crashed pods and for pods over their memory limit (returned, in slot order), and node sums
    exactly as ``np.bincount`` over the running pods."""
    from types import SimpleNamespace

    from td3sched.simulator.kernels import refresh_pod_usage
    from td3sched.simulator.running import RunningPods

    rng = np.random.default_rng(3)
    pods, nodes, profiles = 400, 9, 7
    shape = rng.random((4, profiles)).astype(np.float32)
    profile = rng.integers(profiles, size=pods).astype(np.int32)
    size_cpu, size_mem = rng.random(pods) * 4000, rng.random(pods) * 8000
    size_disk, size_net = rng.random(pods) * 50, rng.random(pods) * 900
    cpu_limit = np.where(rng.random(pods) < 0.3, np.inf, rng.random(pods) * 3000)
    mem_limit = np.where(rng.random(pods) < 0.3, np.inf, rng.random(pods) * 9000)
    crashed = rng.random(pods) < 0.1
    node_of = rng.integers(nodes, size=pods)
    running = rng.permutation(pods)[:300]
    overhead = rng.random((nodes, 2)) * 100
    provisioned = rng.random(nodes) < 0.8
    scale, level = np.float32(1.7), np.float32(0.9)
    pod_usage, node_usage = np.full((pods, 4), -1.0), np.full((nodes, 4), -1.0)
    w = SimpleNamespace(profile=profile, app=np.zeros(pods, dtype=np.int64), latency_sensitive=np.zeros(pods, bool),
                        size_cpu_milli=size_cpu, cpu_limit_milli=cpu_limit, size_mem_mib=size_mem,
                        mem_limit_mib=mem_limit, size_disk_mbps=size_disk, size_net_mbps=size_net)
    run = RunningPods(w, np.ones(pods, dtype=np.int64), np.ones(1), pod_usage, crashed, capacity=7)
    for pod in running:
        run.add(int(pod), int(node_of[pod]))
    for pod in running[::3]:  # departures move other pods into their slots
        run.remove(int(pod))
    running = run.pods[: run.n].copy()
    run.cpu[:] = -1.0
    over = refresh_pod_usage(run.pods, run.node, run.profile, run.size, run.crashed, run.n, shape, scale, level,
                             overhead, provisioned, pod_usage, node_usage, run.cpu)

    s = shape[:, profile[running]]
    expected = np.stack([np.minimum(1.7 * s[0] * size_cpu[running], cpu_limit[running]),
                         0.9 * s[1] * size_mem[running], s[2] * size_disk[running], s[3] * size_net[running]], axis=-1)
    killed = ~crashed[running] & (expected[:, 1] > mem_limit[running])
    assert killed.any() and crashed[running].any()
    np.testing.assert_array_equal(over, running[killed])
    expected[crashed[running] | killed] = 0.0
    np.testing.assert_array_equal(pod_usage[running], expected)
    np.testing.assert_array_equal(run.cpu[: run.n], expected[:, 0])  # the slots' copy
    assert (pod_usage[np.setdiff1d(np.arange(pods), running)] == -1.0).all()  # pods not running: untouched
    sums = np.stack([np.bincount(node_of[running], weights=expected[:, j], minlength=nodes) for j in range(4)], axis=-1)
    sums[:, :2] += overhead * provisioned[:, None]
    np.testing.assert_array_equal(node_usage, sums)
