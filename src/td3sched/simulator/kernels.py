"""The scheduling cycle's per-node loops, compiled (numba): Filter, k8s-default's Score, Select.

Each function is the loop form of a NumPy rule defined elsewhere, and a property test
(tests/simulator/test_kernels.py) holds it to that rule on random clusters:

- ``filter_nodes``: ``filter.fits_one`` (requests, GPUs), the pool, the anti-affinity cap, readiness,
  the safety filter and the memory-pressure taint, as ``Simulation._filter`` documents them, over
  kube-scheduler's walk (``nodes_to_find``);
- ``k8s_default_scores``: ``policy.k8s_default.least_allocated`` + ``balanced_allocation``, in the
  same floating-point operations, so scores are bit-identical;
- ``best_nodes``: the top score and its ties (Select breaks them with the run's random generator).

A decision at dlrm's size runs over ~2,500 nodes; as NumPy it is some twenty array operations of a
few microseconds each, here one pass (docs/simulator.md, Speed).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from td3sched.simulator.running import CPU_LIMIT, MEM_LIMIT, SIZE_CPU, SIZE_DISK, SIZE_MEM, SIZE_NET

GPU_MILLI = 1000  # simulator.cluster.GPU_MILLI (kept literal: numba compiles it as a constant)


@njit(cache=True, nogil=True)
def filter_nodes(start, to_find, pool, pool_of, ready, provisioned, free, gpu_capacity, gpu_used, request, gpu_count,
                 gpu_milli, app_count, cap, observed, safety_cpu, best_effort, memory_pressure, pressure_until, t,
                 out):
    """Filter for one pod, walking node slots from ``start`` round the cluster (kube-scheduler's
    ``findNodesThatPassFilters``) until ``to_find`` nodes passed or every slot was seen; the nodes
    that passed are written to ``out`` in walk order.

    ``pool`` (>= 0) is the pod's node selector: a node of another pool fails (NodeAffinity).
    Returns ``(count, fits_any, fits_everywhere, walked)``: how many passed; whether any ready node
    fits the pod by resources (requests, GPUs, the cap); whether no provisioned node of the pod's
    pool was rejected by resources (so usage alone rejected the others); and how many slots the walk
    covered (the next cycle starts there). ``app_count`` is the pod's app's count per node (length 0
    when the app has no pods counted) and ``cap`` its limit per node (<= 0: none).
    """
    size = ready.shape[0]
    count = 0
    fits_any = False
    fits_everywhere = True
    share = gpu_count == 1 and gpu_milli < GPU_MILLI
    has_counts = app_count.shape[0] > 0 and cap > 0
    walked = 0
    while walked < size and count < to_find:
        n = start + walked
        if n >= size:
            n -= size
        walked += 1
        if pool >= 0 and pool_of[n] != pool:
            continue
        ok = ready[n]
        if ok:
            for j in range(request.shape[0]):
                if request[j] > 0 and not free[n, j] >= request[j]:
                    ok = False
                    break
        if ok and gpu_count > 0:
            if share:
                ok = False
                for g in range(gpu_capacity.shape[1]):
                    if gpu_capacity[n, g] - gpu_used[n, g] >= gpu_milli:
                        ok = True
                        break
            else:
                whole = 0
                for g in range(gpu_capacity.shape[1]):
                    if gpu_capacity[n, g] - gpu_used[n, g] == GPU_MILLI:
                        whole += 1
                ok = whole >= gpu_count
        if ok and has_counts and not app_count[n] < cap:
            ok = False
        if not ok:
            if provisioned[n]:
                fits_everywhere = False
            continue
        fits_any = True
        if not observed[n, 0] <= safety_cpu[n]:
            continue
        if best_effort and not (observed[n, 1] < memory_pressure[n] and pressure_until[n] <= t):
            continue
        out[count] = n
        count += 1
    return count, fits_any, fits_everywhere, walked


def nodes_to_find(percentage: int, nodes: int) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind``: how many feasible nodes a cycle looks for before
    it stops filtering and scores them. ``percentage`` is ``percentageOfNodesToScore`` (0: adaptive,
    50 - nodes/125 percent, at least 5); clusters under 100 nodes, and every answer under 100, give
    ``max(100, ...)`` or all nodes (pkg/scheduler/schedule_one.go)."""
    if nodes < 100:
        return nodes
    if percentage == 0:
        percentage = max(50 - nodes // 125, 5)
    return max(nodes * percentage // 100, 100)


@njit(cache=True, nogil=True)
def k8s_default_scores(nodes, nonzero_requested, requested, alloc_cpu, alloc_mem_bytes, nz_cpu, nz_mem, req_cpu,
                       req_mem, best_effort, mib, out):
    """LeastAllocated + BalancedAllocation (policy.k8s_default) for each of ``nodes``, into ``out``."""
    for i in range(nodes.shape[0]):
        n = nodes[i]
        a_cpu = alloc_cpu[n]
        a_mem = alloc_mem_bytes[n]
        r_cpu = nonzero_requested[n, 0] + nz_cpu
        r_mem = (nonzero_requested[n, 1] + nz_mem) * mib
        cpu = max(np.floor((a_cpu - r_cpu) * 100 / a_cpu), 0.0)
        mem = max(np.floor((a_mem - r_mem) * 100 / a_mem), 0.0)
        score = np.floor((cpu + mem) / 2)
        if not best_effort:
            f_cpu = min((requested[n, 0] + req_cpu) / a_cpu, 1.0)
            f_mem = min((requested[n, 1] + req_mem) * mib / a_mem, 1.0)
            score += np.trunc((1 - abs(f_cpu - f_mem) / 2) * 100)
        out[i] = score


@njit(cache=True, nogil=True)
def best_nodes(scores, ties):
    """The top score and its positions in ``scores`` (written to ``ties``); count -1 when a score
    is not finite."""
    top = -np.inf
    count = 0
    for i in range(scores.shape[0]):
        s = scores[i]
        if not np.isfinite(s):
            return -1, s
        if s > top:
            top = s
            count = 0
        if s == top:
            ties[count] = i
            count += 1
    return count, top


LANES = 8
"""Independent running sums in ``overload_sum`` and ``weighted_total``."""


@njit(cache=True, nogil=True, inline="always")
def _lanes_total(acc):
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))


@njit(cache=True, nogil=True)
def overload_sum(usage_cpu, cpu_cores, inv_alloc_cpu, provisioned, threshold):
    """sum over provisioned nodes of max(0, delivered CPU / allocatable - threshold), in nodes
    (reward.overload): delivered = min(demand, cores). Summed in eight lanes (``weighted_total``)."""
    acc = np.zeros(LANES)
    n = usage_cpu.shape[0]
    whole = n - n % LANES
    for i in range(0, whole, LANES):
        for lane in range(LANES):
            a, c = usage_cpu[i + lane], cpu_cores[i + lane]
            u = (a if a < c else c) * inv_alloc_cpu[i + lane] - threshold
            acc[lane] += (u if u > 0.0 else 0.0) * provisioned[i + lane]
    for k in range(whole, n):
        a, c = usage_cpu[k], cpu_cores[k]
        u = (a if a < c else c) * inv_alloc_cpu[k] - threshold
        acc[k - whole] += (u if u > 0.0 else 0.0) * provisioned[k]
    return _lanes_total(acc)


BLOCK = 64
"""Nodes per block of the reward's sums (``reward_state``), by default (``block_count``)."""


def block_count(nodes: int, block: int = BLOCK) -> int:
    """How many blocks of about ``block`` node slots cover ``nodes`` slots: the length of the
    reward's block arrays (``reward_state``). The kernels derive the block size from that length
    (``block_size``), so the blocks are equal but for the last."""
    return max((nodes + block - 1) // block, 1)


@njit(cache=True, nogil=True, inline="always")
def block_size(nodes, blocks):
    """Node slots per block when ``blocks`` blocks cover ``nodes`` slots (the last may be shorter)."""
    return max((nodes + blocks - 1) // blocks, 1)


@njit(cache=True, nogil=True)
def lane_sum(values):
    """sum_i values_i in ``weighted_total``'s rounding order (lane i mod 8, lanes added pairwise)."""
    acc = np.zeros(LANES)
    n = values.shape[0]
    whole = n - n % LANES
    for i in range(0, whole, LANES):
        for lane in range(LANES):
            acc[lane] += values[i + lane]
    for k in range(whole, n):
        acc[k - whole] += values[k]
    return _lanes_total(acc)


@njit(cache=True, nogil=True)
def reward_state(dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight, length, checked,
                 frag_cache, usage_cpu, cpu_cores, inv_alloc_cpu, provisioned, threshold, stale, block_sums):
    """What a decision's reward reads, in one call: ``refresh_fragmentation`` of the dirty nodes into
    ``frag_cache``, then ``(overload, stranded)``: ``overload_sum`` and ``weighted_total(frag_cache,
    provisioned)`` over the whole cluster, each summed by blocks of ``BLOCK`` node slots.

    Blocks are ``block_size(nodes, len(stale))`` consecutive slots (``BLOCK`` by default);
    ``block_sums[0, b]`` and ``block_sums[1, b]`` hold block b's two sums (each in its function's
    rounding order over the block's slots); only blocks flagged in ``stale`` are recomputed (and
    unflagged), and the totals are ``lane_sum`` over the blocks. A decision changes a node or two, so
    it recomputes one or two blocks instead of the cluster. Callers flag a block whenever its nodes'
    CPU usage or provisioning changes; ``refresh_fragmentation`` flags the blocks of the nodes it
    refreshes (every change of free resources or GPUs marks a node dirty)."""
    refresh_fragmentation(dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight, length,
                          checked, frag_cache, stale)
    n = frag_cache.shape[0]
    size = block_size(n, stale.shape[0])
    for b in range(stale.shape[0]):
        if not stale[b]:
            continue
        stale[b] = False
        lo = b * size
        hi = min(lo + size, n)
        block_sums[0, b] = overload_sum(usage_cpu[lo:hi], cpu_cores[lo:hi], inv_alloc_cpu[lo:hi], provisioned[lo:hi],
                                        threshold)
        block_sums[1, b] = weighted_total(frag_cache[lo:hi], provisioned[lo:hi])
    return lane_sum(block_sums[0]), lane_sum(block_sums[1])


@njit(cache=True, nogil=True)
def weighted_total(values, weights):
    """sum_i values_i x weights_i in one fixed rounding order for every caller: element i goes to
    lane i mod 8, the lanes are added pairwise. Eight independent sums let the CPU overlap the
    additions (a single running sum waits on each one), about twice as fast at dlrm's size."""
    acc = np.zeros(LANES)
    n = values.shape[0]
    whole = n - n % LANES
    for i in range(0, whole, LANES):
        for lane in range(LANES):
            acc[lane] += values[i + lane] * weights[i + lane]
    for k in range(whole, n):
        acc[k - whole] += values[k] * weights[k]
    return _lanes_total(acc)


def padded_typical(typical) -> tuple:
    """``PoolTypicalPods`` as padded arrays for ``refresh_fragmentation``: request [P, S, 4], GPU
    count and milli [P, S], weight [P, S], shapes per pool [P], and whether ``fit_matrix`` compares
    column j for pool k at all [P, 4] (it does when any shape of the pool requests j)."""
    pools = typical.pools
    s = max([len(t) for t in pools] + [1])
    request = np.zeros((len(pools), s, 4))
    count = np.zeros((len(pools), s), dtype=np.int64)
    milli = np.zeros((len(pools), s), dtype=np.int64)
    weight = np.zeros((len(pools), s))
    length = np.zeros(len(pools), dtype=np.int64)
    for k, t in enumerate(pools):
        m = len(t)
        length[k] = m
        request[k, :m] = t.request
        count[k, :m], milli[k, :m], weight[k, :m] = t.gpu_count, t.gpu_milli, t.weight
    checked = (request > 0).any(axis=1)
    return request, count, milli, weight, length, checked


@njit(cache=True, nogil=True)
def refresh_fragmentation(dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight,
                          length, checked, out, stale):
    """F_n (metrics.fragmentation.node_fragmentation, with the node's pool's typical pods) of every
    node flagged in ``dirty``, into ``out``; the flags are cleared, and the node's block is flagged
    in ``stale`` (``reward_state``). Same fit rule as ``fit_matrix``.

    A decision flags a node or two of thousands: the flags are read eight at a time (as 64-bit
    words), and only a word with a flag set is looked into."""
    size = block_size(dirty.shape[0], stale.shape[0])
    whole = dirty.shape[0] - dirty.shape[0] % 8
    words = dirty[:whole].view(np.uint64)
    for i in range(words.shape[0]):
        if words[i] == 0:
            continue
        for n in range(8 * i, 8 * i + 8):
            if dirty[n]:
                _refresh_node(n, dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight,
                              length, checked, out, stale, size)
    for n in range(whole, dirty.shape[0]):
        if dirty[n]:
            _refresh_node(n, dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight,
                          length, checked, out, stale, size)


@njit(cache=True, nogil=True, inline="always")
def _refresh_node(n, dirty, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, weight, length,
                  checked, out, stale, size):
    """``refresh_fragmentation`` of node ``n``."""
    dirty[n] = False
    stale[n // size] = True
    k = pool_of[n]
    largest = -1
    whole = 0
    for g in range(gpu_capacity.shape[1]):
        f = gpu_capacity[n, g] - gpu_used[n, g]
        if f > largest:
            largest = f
        if f == GPU_MILLI:
            whole += 1
    out[n] = max(free[n, 0], 0.0) * unfit_share(free[n], largest, whole, k, request, gpu_count, gpu_milli, weight,
                                                 length, checked)


@njit(cache=True, nogil=True, inline="always")
def unfit_share(free, largest, whole, k, request, gpu_count, gpu_milli, weight, length, checked):
    """The weight of pool ``k``'s typical shapes (``padded_typical``) that do not fit a node with ``free``
    [4] resources, ``largest`` free milli on one GPU and ``whole`` entirely free GPUs, summed in shape
    order (``fit_matrix``'s rule: column j is compared when some shape of the pool requests it)."""
    unfit = 0.0
    for s in range(length[k]):
        fits = True
        for j in range(4):
            if checked[k, j] and not free[j] >= request[k, s, j]:
                fits = False
                break
        c = gpu_count[k, s]
        if fits and c > 0:
            if c == 1 and gpu_milli[k, s] < GPU_MILLI:
                fits = largest >= gpu_milli[k, s]
            else:
                fits = whole >= c
        if not fits:
            unfit += weight[k, s]
    return unfit


@njit(cache=True, nogil=True)
def room_matrix(nodes, free, gpu_capacity, gpu_used, pool_of, request, gpu_count, gpu_milli, pool, out):
    """``out[i, k]``: how many pods of shape k node ``nodes[i]``'s free resources and GPUs could hold,
    shape k alone; 0 where one does not fit (``filter.fits_node``'s rule) or the shape's ``pool``
    (>= 0) is not the node's. The queueing hints' bound on the pods an event can help."""
    big = float(1 << 30)
    for i in range(nodes.shape[0]):
        n = nodes[i]
        whole = 0
        for g in range(gpu_capacity.shape[1]):
            if gpu_capacity[n, g] - gpu_used[n, g] == GPU_MILLI:
                whole += 1
        for k in range(request.shape[0]):
            if pool[k] >= 0 and pool[k] != pool_of[n]:
                out[i, k] = 0
                continue
            room = big
            for j in range(request.shape[1]):
                if request[k, j] > 0:
                    room = min(room, np.floor(max(free[n, j], 0.0) / request[k, j]))
            c = gpu_count[k]
            if c > 0:
                if c == 1 and gpu_milli[k] < GPU_MILLI:
                    share = 0.0
                    for g in range(gpu_capacity.shape[1]):
                        share += np.floor((gpu_capacity[n, g] - gpu_used[n, g]) / max(gpu_milli[k], 1))
                    room = min(room, share)
                else:
                    room = min(room, float(whole // c))
            out[i, k] = int(room)


@njit(cache=True, nogil=True)
def walk_room(request, gpu_count, gpu_milli, free_row, gpu_free_row, taken):
    """The room walk of one node: pods (rows, in the order the queue would try them) each take their
    share of ``free_row`` and ``gpu_free_row`` if they fit (``filter.fits_node``; GPUs as
    ``filter.choose_gpus`` assigns them); a pod that does not fit is skipped. Writes the rows taken
    to ``taken`` and returns how many."""
    free = free_row.copy()
    gpu = gpu_free_row.copy()
    m = 0
    for i in range(request.shape[0]):
        ok = True
        for j in range(request.shape[1]):
            r = request[i, j]
            if r > 0 and not r <= free[j]:
                ok = False
                break
        c = gpu_count[i]
        share = c == 1 and gpu_milli[i] < GPU_MILLI
        if ok and c > 0:
            if share:
                ok = gpu.shape[0] > 0 and gpu.max() >= gpu_milli[i]
            else:
                ok = (gpu == GPU_MILLI).sum() >= c
        if not ok:
            continue
        taken[m] = i
        m += 1
        for j in range(request.shape[1]):
            free[j] -= request[i, j]
        if c > 0:
            if share:  # best fit: the least free GPU that still fits, lowest index on ties
                best = -1
                for g in range(gpu.shape[0]):
                    if gpu[g] >= gpu_milli[i] and (best < 0 or gpu[g] < gpu[best]):
                        best = g
                gpu[best] -= gpu_milli[i]
            else:  # the first entirely free GPUs
                left = c
                for g in range(gpu.shape[0]):
                    if left > 0 and gpu[g] == GPU_MILLI:
                        gpu[g] -= gpu_milli[i]
                        left -= 1
    return m


@njit(cache=True, nogil=True)
def tick_cpu(slot_node, slot_profile, slot_size_cpu, slot_weight, slot_ls, slot_cpu, slot_crashed, n_running,
             shape_cpu, usage_scale, capacity, slot_pressure):
    """The per-pod part of a tick's CPU sample, in one pass over the running pods (their slots,
    ``simulator.running``: the first ``n_running`` of each slot column; ``slot_cpu`` is a pod's
    ``pod_usage[:, 0]``):

    - ``(raw, demand, batch)``: the pods' CPU demand before their CFS quotas (``usage_scale x
      profile x size``, at least what they use; 0 for a pod that uses nothing), after them
      (``pod_usage[:, 0]``), and after them for pods that are not latency-sensitive;
    - ``slot_pressure[s]`` for every slot whose pod runs on a node that serves a latency-sensitive
      pod (one running and not crashed): ``contention.sharing_pressure`` over that node's pods,
      with ``capacity`` per node (other slots are left as they were).

    ``shape_cpu`` is the CPU row of the profiles' current slot (length 0: no profiles, raw = use).
    """
    n_nodes = capacity.shape[0]
    m = n_running
    raw = 0.0
    demand = 0.0
    batch = 0.0
    on_ls = np.zeros(n_nodes, dtype=np.bool_)
    has_shape = shape_cpu.shape[0] > 0
    use = np.empty(m)
    for i in range(m):
        d = slot_cpu[i]
        use[i] = d
        if d > 0:
            r = usage_scale * shape_cpu[slot_profile[i]] * slot_size_cpu[i] if has_shape else 0.0
            raw += max(r, d)
        demand += d
        if slot_ls[i]:
            if not slot_crashed[i]:
                on_ls[slot_node[i]] = True
        else:
            batch += d
    # the pods of each node that serves a latency-sensitive pod, grouped by node (a counting sort)
    start = np.zeros(n_nodes + 1, dtype=np.int64)
    for i in range(m):
        if on_ls[slot_node[i]]:
            start[slot_node[i] + 1] += 1
    for n in range(n_nodes):
        start[n + 1] += start[n]
    fill = start[:n_nodes].copy()
    mates = np.empty(start[n_nodes], dtype=np.int64)  # slots
    key = np.empty(start[n_nodes])
    wt = np.empty(start[n_nodes])
    for i in range(m):
        n = slot_node[i]
        if on_ls[n]:
            k = fill[n]
            mates[k] = i
            wt[k] = slot_weight[i]
            key[k] = use[i] / wt[k]
            fill[n] += 1
    for n in range(n_nodes):
        a, b = start[n], start[n + 1]
        if a == b:
            continue
        # the node's pods by d/w (an insertion sort: a node holds tens of pods)
        for k in range(a + 1, b):
            kk, ik, wk = key[k], mates[k], wt[k]
            j = k - 1
            while j >= a and key[j] > kk:
                key[j + 1], mates[j + 1], wt[j + 1] = key[j], mates[j], wt[j]
                j -= 1
            key[j + 1], mates[j + 1], wt[j + 1] = kk, ik, wk
        w_total = 0.0
        for k in range(a, b):
            w_total += wt[k]
        d_before = 0.0
        w_before = 0.0
        cap = capacity[n]
        for k in range(a, b):
            d = use[mates[k]]
            level = d_before + key[k] * (w_total - w_before)
            if cap > 0:
                slot_pressure[mates[k]] = level / cap
            else:
                slot_pressure[mates[k]] = np.inf if d > 0 else 0.0
            d_before += d
            w_before += wt[k]
    return raw, demand, batch


@njit(cache=True, nogil=True)
def tick_latency(pods, slot_node, slot_ls, slot_base_ms, slot_pressure, slot_crashed, n_running, breaching, io_factor,
                 weight_cpu, rho_cap, slo_factor, ls_pods, state, app, base_ms, cap_factor, pending_state):
    """A tick's latency samples: ``(latency_ms, breaches, breach_samples)``.

    Each running, not crashed, latency-sensitive pod (a slot with ``slot_ls``) is served with the
    factor ``1 + weight_cpu x (1 / (1 - rho) - 1) + io_factor[node]``, ``rho`` its CPU pressure
    (``tick_cpu``'s ``slot_pressure``) capped at ``rho_cap``; its latency is its base times the
    factor, a breach sample when the factor is above ``slo_factor``, and a breach (an SLA
    violation) when it was not breaching at the previous tick; ``breaching[pod]`` is updated.
    A latency-sensitive pod that waits (bound in CrashLoopBackOff, or among ``ls_pods`` with
    ``state == pending_state``) serves at the cap: its base times ``cap_factor``, a breach sample.
    Samples come served first, in slot order, then waiting; the histogram does not see the order."""
    n_ls = 0
    for i in range(n_running):
        if slot_ls[i]:
            n_ls += 1
    pending = np.empty(ls_pods.shape[0], dtype=np.int64)  # the pending ones, in ls_pods' order
    n_pending = 0
    for j in range(ls_pods.shape[0]):
        if state[ls_pods[j]] == pending_state:
            pending[n_pending] = ls_pods[j]
            n_pending += 1
    latency = np.empty(n_ls + n_pending)
    k = 0
    breaches = 0
    samples = 0
    waiting = n_ls + n_pending
    for i in range(n_running):
        if not slot_ls[i]:
            continue
        if slot_crashed[i]:
            waiting -= 1
            latency[waiting] = slot_base_ms[i] * cap_factor
            samples += 1
            continue
        rho = min(slot_pressure[i], rho_cap)
        factor = 1.0 + weight_cpu * (1.0 / (1.0 - rho) - 1.0) + io_factor[slot_node[i]]
        latency[k] = slot_base_ms[i] * factor
        k += 1
        p = pods[i]
        above = factor > slo_factor
        if above:
            samples += 1
            if not breaching[p]:
                breaches += 1
        breaching[p] = above
    for j in range(n_pending):
        p = pending[j]
        waiting -= 1
        latency[waiting] = base_ms[app[p]] * cap_factor
        samples += 1
    return latency, breaches, samples


@njit(cache=True, nogil=True)
def requested_utilisation(requested, allocatable, gpu_capacity, gpu_used, out):
    """cluster-autoscaler's utilisation of each node into ``out``: the larger of requested CPU and
    memory over allocatable; a node with GPUs, requested GPUs over its GPUs alone
    (cluster-autoscaler simulator/cluster/utilization/info.go)."""
    for n in range(requested.shape[0]):
        cap = 0
        used = 0
        for g in range(gpu_capacity.shape[1]):
            cap += gpu_capacity[n, g]
            used += gpu_used[n, g]
        if cap > 0:
            out[n] = used / cap
        else:
            out[n] = max(requested[n, 0] / allocatable[n, 0], requested[n, 1] / allocatable[n, 1])
    return out


@njit(cache=True, nogil=True)
def unneeded_nodes(requested, allocatable, gpu_capacity, gpu_used, provisioned, ready, threshold, since, t, unneeded_s,
                   util, ripe):
    """A scale-down scan's bookkeeping (cluster-autoscaler's unneeded nodes): ``util`` is each node's
    ``requested_utilisation``; a provisioned, ready node under ``threshold`` is unneeded since
    ``since[n]`` (set to ``t`` when it becomes so; ``inf`` for a node that is not);
    ``ripe[n]``: unneeded for at least ``unneeded_s``. Returns how many nodes are ripe."""
    requested_utilisation(requested, allocatable, gpu_capacity, gpu_used, util)
    count = 0
    for n in range(util.shape[0]):
        if provisioned[n] and ready[n] and util[n] < threshold:
            if np.isinf(since[n]):
                since[n] = t
            ripe[n] = t - since[n] >= unneeded_s
            count += ripe[n]
        else:
            since[n] = np.inf
            ripe[n] = False
    return count


@njit(cache=True, nogil=True)
def refresh_pod_usage(pods, slot_node, slot_profile, slot_size, slot_crashed, n_running, shape, usage_scale, mem_level,
                      overhead, provisioned, pod_usage, node_usage, slot_cpu):
    """Every running pod's usage re-read from its profile's ``shape`` ([4, V], the current slot), as
    ``usage.pod_usage`` computes it (``usage_scale`` and ``mem_level`` in the profiles' precision),
    into ``pod_usage``, and each node's usage rebuilt from its pods (summed in slot order, as
    ``np.bincount`` over the running pods does) plus its system overhead when provisioned, into
    ``node_usage``. The pods are the running pods' slots (``simulator.running``: ``pods``, their
    node, profile, sizes and limits by ``running``'s row constants, crash state); ``slot_cpu`` gets
    each one's CPU. A crashed pod uses nothing; so does a pod whose memory is above its limit, which
    the caller OOM-kills: those pods are returned, in slot order."""
    m = n_running
    over = np.empty(m, dtype=np.int64)
    k = 0
    node_usage[:] = 0.0
    for i in range(m):
        v = slot_profile[i]
        cpu = min((usage_scale * shape[0, v]) * slot_size[SIZE_CPU, i], slot_size[CPU_LIMIT, i])
        mem = (mem_level * shape[1, v]) * slot_size[SIZE_MEM, i]
        disk = shape[2, v] * slot_size[SIZE_DISK, i]
        net = shape[3, v] * slot_size[SIZE_NET, i]
        if slot_crashed[i] or mem > slot_size[MEM_LIMIT, i]:
            if not slot_crashed[i]:
                over[k] = pods[i]
                k += 1
            cpu, mem, disk, net = 0.0, 0.0, 0.0, 0.0
        p = pods[i]
        pod_usage[p, 0], pod_usage[p, 1], pod_usage[p, 2], pod_usage[p, 3] = cpu, mem, disk, net
        slot_cpu[i] = cpu
        n = slot_node[i]
        node_usage[n, 0] += cpu
        node_usage[n, 1] += mem
        node_usage[n, 2] += disk
        node_usage[n, 3] += net
    for n in range(node_usage.shape[0]):
        if provisioned[n]:
            node_usage[n, 0] += overhead[n, 0]
            node_usage[n, 1] += overhead[n, 1]
    return over[:k]
