"""The event loop's common case, compiled: arrivals that bind at once and departures nobody waits for.

Most of a run is two kinds of event: a pod arrives and a node takes it in its first scheduling
cycle, and a pod departs while no pod waits for resources. ``run_events`` runs those in one
compiled loop (numba) with the same state, the same arithmetic and the same order as
``engine.Simulation``'s Python path; it hands every other case back to that path, at a point where
the Python code resumes exactly where the loop stopped (docs/simulator.md, *Speed*):

- ``STOP``: the next event is not one of the two (a tick, a scrape, an autoscaler scan that may
  change something, the queue's backoff or flush, a node becoming ready, a restart, an eviction
  check, the span's end or the warm-up's end), or it involves what only Python handles (a GPU pod,
  a container over its memory limit at the bind, a fit class the failure memo knows to find no
  node); nothing of that event has happened yet;
- ``FAILED``: the arrival's Filter pass (done, with kube-scheduler's walk advanced) found no node;
  the pod has not entered the queue yet;
- ``MEMORY``: a bind put a node's memory above its pressure level: the kubelet and the kernel
  (Python) look at the node;
- ``FREED``: a departure freed room on a ready node for a class of pods waiting for resources:
  the queueing hint (Python) picks the pods it moves.

Only policies that declare a compiled score (``Policy.compiled_score``) and no hooks run here;
the engine's equivalence test runs every case both ways and compares the runs' records.
``EventHeap`` is the simulator's event heap (departures, nodes ready, restarts, eviction checks),
shared by both paths.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from td3sched import reward
from td3sched.reward import open_decision, settle_decision
from td3sched.simulator import kernels, running
from td3sched.simulator.kernels import (best_nodes, filter_nodes, k8s_default_scores, reward_state, room_matrix,
                                        unneeded_nodes)
from td3sched.simulator.running import add_running, remove_running


def drop_stale_cache(module: Path, sources: list[Path]) -> bool:
    """numba's on-disk cache keys a compiled function on its own source file only, so after an edit of
    ``kernels.py``, ``reward.py`` or ``running.py`` the cached ``run_events`` would still run the old
    kernels it inlined. The ``sources``' contents are stamped next to ``module``'s cache (its ``__pycache__``);
    when they changed, the module's cached code is dropped so that numba compiles it afresh. Returns
    whether it dropped it. Nothing happens where the folder is not writable (numba then caches
    elsewhere, per installed version, and an installed version does not change)."""
    cache = module.with_name("__pycache__")
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    stamp = cache / f"{module.stem}.sources-sha256"
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return False
        for f in cache.glob(f"{module.stem}.*.nb[ic]"):
            f.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        return False
    return True


drop_stale_cache(Path(__file__), [Path(kernels.__file__), Path(reward.__file__), Path(running.__file__)])

STOP, FAILED, MEMORY, FREED = 0, 1, 2, 3
"""Why ``run_events`` returned (module docstring)."""
DEPART = 0
"""The heap's departure kind (engine._DEPART)."""
K8S_DEFAULT = 1
"""``Policy.compiled_score`` values ``run_events`` knows."""
COMPILED_SCORES = {"k8s-default": K8S_DEFAULT}
RUNNING, PENDING, DONE = 2, 1, 3  # engine's pod states (kept literal: numba compiles them as constants)
RESOURCES, USAGE, SHAPE = 1, 2, 4  # queue reasons (simulator.queue)
OUT = 0  # queue.OUT
MIB = float(1 << 20)


class CompiledCall:
    """Calls a numba function whose arguments keep their types from call to call (one simulation's
    arrays and scalars): the first call goes through numba's dispatcher, which compiles or loads the
    code and types every argument; later calls go straight to the compiled overload for those types
    (its ``entry_point``), skipping the typing of ``run_events``'s hundred-odd arguments (about
    30 microseconds a call, some 13,000 calls a simulated dlrm day). A function that is not a numba
    dispatcher (a test's wrapper) is called as it is. ``verify``: type every call's arguments and
    check they are the first call's (the tests)."""

    def __init__(self, fn, verify: bool = False):
        self.fn = fn
        self.verify = verify
        self._entry = None
        self._sig: tuple | None = None

    def _types(self, args: tuple) -> tuple:
        return tuple(self.fn.typeof_pyval(a) for a in args)

    def __call__(self, *args):
        if self._entry is not None:
            if self.verify and self._types(args) != self._sig:
                raise TypeError(f"{self.fn.__name__}: argument types changed between calls: {self._types(args)} "
                                f"after {self._sig}")
            return self._entry(*args)
        out = self.fn(*args)
        overloads = getattr(self.fn, "overloads", None)
        if overloads is not None:
            sig = self._types(args)
            compiled = overloads.get(sig)
            if compiled is not None:
                self._entry, self._sig = compiled.entry_point, sig
        return out


class EventHeap:
    """A binary heap of events (t, kind, seq, a, b) in arrays, ordered by (t, kind, seq); ``seq``
    counts pushes, so equal times and kinds pop in the order they were pushed (as ``heapq`` did
    with tuples). Compiled push and pop, so the compiled loop and Python share it."""

    def __init__(self, capacity: int = 1024):
        self.t = np.empty(capacity)
        self.ints = np.empty((capacity, 4), dtype=np.int64)  # kind, seq, a, b
        self.meta = np.zeros(2, dtype=np.int64)  # size, pushes so far

    def __len__(self) -> int:
        return int(self.meta[0])

    def reserve(self, extra: int) -> None:
        """Room for ``extra`` more events."""
        need = int(self.meta[0]) + extra
        if need > len(self.t):
            size = max(need, 2 * len(self.t))
            self.t = np.concatenate([self.t, np.empty(size - len(self.t))])
            self.ints = np.concatenate([self.ints, np.empty((size - len(self.ints), 4), dtype=np.int64)])

    def push(self, t: float, kind: int, a: int, b: int) -> None:
        self.reserve(1)
        heap_push(self.t, self.ints, self.meta, float(t), kind, a, b)

    def peek_t(self) -> float:
        return float(self.t[0]) if self.meta[0] else np.inf

    def pop(self) -> tuple[float, int, int, int]:
        """(t, kind, a, b) of the first event."""
        if not self.meta[0]:
            raise IndexError("pop from an empty event heap")
        t, kind, a, b = heap_pop(self.t, self.ints, self.meta)
        return t, int(kind), int(a), int(b)


@njit(cache=True, nogil=True, inline="always")
def _before(ht, hi, i, j):
    if ht[i] != ht[j]:
        return ht[i] < ht[j]
    if hi[i, 0] != hi[j, 0]:
        return hi[i, 0] < hi[j, 0]
    return hi[i, 1] < hi[j, 1]


@njit(cache=True, nogil=True, inline="always")
def _swap(ht, hi, i, j):
    ht[i], ht[j] = ht[j], ht[i]
    for k in range(4):
        hi[i, k], hi[j, k] = hi[j, k], hi[i, k]


@njit(cache=True, nogil=True)
def heap_push(ht, hi, meta, t, kind, a, b):
    """Push an event (the caller made room)."""
    i = meta[0]
    meta[0] += 1
    meta[1] += 1
    ht[i] = t
    hi[i, 0], hi[i, 1], hi[i, 2], hi[i, 3] = kind, meta[1], a, b
    while i > 0:
        parent = (i - 1) // 2
        if not _before(ht, hi, i, parent):
            break
        _swap(ht, hi, i, parent)
        i = parent


@njit(cache=True, nogil=True)
def heap_pop(ht, hi, meta):
    """Pop the first event: (t, kind, a, b)."""
    t, kind, a, b = ht[0], hi[0, 0], hi[0, 2], hi[0, 3]
    n = meta[0] - 1
    meta[0] = n
    if n > 0:
        ht[0] = ht[n]
        for k in range(4):
            hi[0, k] = hi[n, k]
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            child = left
            if left + 1 < n and _before(ht, hi, left + 1, left):
                child = left + 1
            if not _before(ht, hi, child, i):
                break
            _swap(ht, hi, i, child)
            i = child
    return t, kind, a, b


@njit(cache=True, nogil=True)
def _known_to_fail(k, t, memo_on, memo_epoch, memo_t, memo_reasons, freed, n_freed, ready, pool_of, free,
                   gpu_capacity, gpu_used, class_request, class_gpu_count, class_gpu_milli, class_pool, class_app_row,
                   class_cap, app_count):
    """``Simulation._still_failing`` for a class of CPU pods, without its memo update: True when the
    class is known to find no node (the Python path then takes the pod and updates it)."""
    if not memo_on or memo_epoch[k] < 0:
        return False
    epoch, reasons = memo_epoch[k], memo_reasons[k]
    if epoch == n_freed and (memo_t[k] == t or reasons & USAGE == 0):
        return True
    if reasons & USAGE or n_freed - epoch > 256:
        return False
    for i in range(epoch, n_freed):
        if freed[i] < 0:
            return False
    pool, cap = class_pool[k], class_cap[k]
    if class_gpu_count[k] > 0:
        return False  # GPU classes never get here: the caller hands GPU pods to Python
    for i in range(epoch, n_freed):
        n = freed[i]
        if not ready[n] or (pool >= 0 and pool_of[n] != pool):
            continue
        ok = True
        for j in range(4):
            if class_request[k, j] > 0 and not free[n, j] >= class_request[k, j]:
                ok = False
                break
        if ok and cap > 0 and not app_count[class_app_row[k], n] < cap:
            ok = False
        if ok:
            return False
    return True


@njit(cache=True, nogil=True)
def run_events(
        # where the loop is and where it must stop
        ai, t_stop, arrival_order, arrival_time,
        # the event heap and the capacity epochs
        ht, hi, meta, freed, n_freed_arr,
        # pods: the workload's columns
        request, gpu_count, gpu_milli, qos_best_effort, app, app_row, max_per_node, app_count, pool_of_pod, fit_class,
        profile, size_cpu, size_mem, size_disk, size_net, cpu_limit, mem_limit, prof_shape, prof_step_s,
        usage_scale, mem_level,
        # pods: the simulation's state
        state, node_of, remaining, started, queued_at, flagged, gen, pod_usage, nonzero, run_pos, n_run_arr, run_slots,
        run_sources,
        crashed, crashes, last_crash_s, breaching,
        # the queue's arrays, and what the loop needs to know of the rest of it
        q_attempts, q_backoff_until, q_stamp, q_seq, q_where, others_pending, w_request, w_gpu_count, w_gpu_milli,
        w_pool, room,
        # the failure memo and the fit classes
        memo_on, memo_epoch, memo_t, memo_reasons, class_request, class_gpu_count, class_gpu_milli, class_pool,
        class_app_row, class_cap, class_fits_a_template,
        # the cluster
        pool_to_cluster, c_pool_of, ready, provisioned, free, requested, nonzero_requested, pod_count, empty_since,
        allocatable, alloc_mem_bytes, gpu_capacity, gpu_used, usage, observed, safety_cpu, memory_pressure,
        pressure_until, dirty, no_counts, scratch, walk, to_find,
        # the reward
        frag_args, frag_cache, cpu_cores, inv_alloc_cpu, prov_f, prov_count, prov_alloc_cpu, overload_util,
        stale_blocks, block_sums,
        r_scalars, r_flags, r_rates, r_baseline, r_components, rate_w, event_w, oom_events, slo_events, slo_time_events,
        # the autoscaler's scans
        next_scan, scan_s, last_scale_up_s, scale_down_delay_s, scale_down_threshold, unneeded_since, unneeded_s,
        util, ripe,
        # the policy's score, the run's random generator, Select's scores, and the run's counters
        score_kind, rng, scores, pending_cpu_arr, waits, counters, sla_pending_s):
    """Run arrivals and departures from arrival ``ai`` while they are the next events and before
    ``t_stop`` (module docstring). Returns (why, ai, t, pod, node, reasons): where it stopped, the
    time of the last event it ran, and for FAILED / MEMORY / FREED the pod, node and reasons the
    Python path resumes with. ``counters``: [arrivals, decisions, binds, waits recorded].

    An autoscaler scan due before ``t_stop`` (``next_scan[0]``) that would change nothing runs here:
    no pod pends (so nothing to scale up for) and no node is ripe for scale-down
    (``kernels.unneeded_nodes``, whose bookkeeping it updates as the scan does); ``next_scan[0]``
    moves on by ``scan_s``. Any other scan is a STOP."""
    n_arr = arrival_order.shape[0]
    walk_node = np.zeros(1, dtype=np.int64)
    n_slots = prof_shape.shape[2]
    us32 = np.float32(usage_scale)
    ml32 = np.float32(mem_level)
    t = t_stop
    while True:
        t_arr = arrival_time[ai] if ai < n_arr else np.inf
        t_heap = ht[0] if meta[0] > 0 else np.inf
        t = min(t_arr, t_heap)
        t_scan = next_scan[0]
        if t_scan < t_stop and t_scan < t_heap and t_scan <= t_arr:  # Simulation.run's order at equal times
            # Simulation._autoscale: scale-up only for pending pods; scale-down only for ripe nodes
            if others_pending:
                return STOP, ai, t_scan, -1, -1, 0
            if t_scan - last_scale_up_s >= scale_down_delay_s and unneeded_nodes(
                    requested, allocatable, gpu_capacity, gpu_used, provisioned, ready, scale_down_threshold,
                    unneeded_since, t_scan, unneeded_s, util, ripe) > 0:
                return STOP, ai, t_scan, -1, -1, 0  # (the scan repeats the bookkeeping: the same at the same t)
            next_scan[0] = t_scan + scan_s
            continue
        if t >= t_stop:
            return STOP, ai, t, -1, -1, 0
        if t_heap == t:  # the heap first at equal times, as the Python loop
            if hi[0, 0] != DEPART:
                return STOP, ai, t, -1, -1, 0
            pod, g = hi[0, 2], hi[0, 3]
            if not (state[pod] == RUNNING and gen[pod] == g):
                heap_pop(ht, hi, meta)  # a stale departure: the pod left already
                continue
            if gpu_count[pod] > 0 or n_freed_arr[0] >= freed.shape[0]:
                return STOP, ai, t, -1, -1, 0
            heap_pop(ht, hi, meta)
            # Simulation._release
            n = node_of[pod]
            freed[n_freed_arr[0]] = n
            n_freed_arr[0] += 1
            for j in range(4):
                requested[n, j] -= request[pod, j]
                free[n, j] += request[pod, j]
            for j in range(2):
                nonzero_requested[n, j] -= nonzero[pod, j]
            pod_count[n] -= 1
            if app_row[app[pod]] >= 0:
                app_count[app_row[app[pod]], n] -= 1
            if pod_count[n] == 0:
                empty_since[n] = t
                for j in range(4):
                    requested[n, j] = 0.0
                    free[n, j] = allocatable[n, j]
                for j in range(2):
                    nonzero_requested[n, j] = 0.0
            for j in range(4):
                usage[n, j] -= pod_usage[pod, j]
                pod_usage[pod, j] = 0.0
            crashed[pod] = False
            crashes[pod] = 0
            last_crash_s[pod] = -np.inf
            breaching[pod] = False
            dirty[n] = True
            node_of[pod] = -1
            gen[pod] += 1
            remove_running(pod, run_pos, n_run_arr, run_slots[0], run_slots[1], run_slots[2], run_slots[3],
                           run_slots[4], run_slots[5], run_slots[6], run_slots[7], run_slots[8])
            state[pod] = DONE
            if w_request.shape[0] and ready[n]:  # Simulation._capacity_freed: could a waiting class use it?
                walk_node[0] = n
                room_matrix(walk_node, free, gpu_capacity, gpu_used, c_pool_of, w_request, w_gpu_count, w_gpu_milli,
                            w_pool, room)
                for j in range(w_request.shape[0]):
                    if room[0, j] > 0:
                        return FREED, ai, t, pod, n, 0
            continue

        # an arrival: hand to Python what only Python does, before anything happened
        pod = arrival_order[ai]
        k = fit_class[pod]
        if gpu_count[pod] > 0 or counters[3] >= waits.shape[0] or meta[0] >= ht.shape[0]:
            return STOP, ai, t, -1, -1, 0
        shape_slot = int(t // prof_step_s) % n_slots
        v = profile[pod]
        cpu = min((us32 * prof_shape[0, v, shape_slot]) * size_cpu[pod], cpu_limit[pod])
        mem = (ml32 * prof_shape[1, v, shape_slot]) * size_mem[pod]
        if mem > mem_limit[pod]:
            return STOP, ai, t, -1, -1, 0
        n_freed = n_freed_arr[0]
        if _known_to_fail(k, t, memo_on, memo_epoch, memo_t, memo_reasons, freed, n_freed, ready, c_pool_of, free,
                          gpu_capacity, gpu_used, class_request, class_gpu_count, class_gpu_milli, class_pool,
                          class_app_row, class_cap, app_count):
            return STOP, ai, t, -1, -1, 0
        ai += 1
        counters[0] += 1
        # Filter, with kube-scheduler's walk (Simulation._filter)
        best_effort = qos_best_effort[pod]
        row, cap = app_row[app[pod]], max_per_node[pod]
        counts = app_count[row] if cap > 0 else no_counts
        count, fits_any, fits_everywhere, walked = filter_nodes(
            walk[0], to_find, pool_to_cluster[pool_of_pod[pod]], c_pool_of, ready, provisioned, free, gpu_capacity,
            gpu_used, request[pod], 0, 0, counts, cap, observed, safety_cpu, best_effort, memory_pressure,
            pressure_until, t, scratch)
        walk[0] = (walk[0] + walked) % ready.shape[0]
        if count == 0:
            if not fits_any:
                reasons = RESOURCES | (0 if class_fits_a_template[k] else SHAPE)
            else:
                reasons = USAGE | (0 if fits_everywhere else RESOURCES)
            return FAILED, ai, t, pod, -1, reasons
        # the pod entered the queue and its cycle runs at once (Simulation._enqueue, queue.add, pop_active)
        state[pod] = PENDING
        queued_at[pod] = t
        flagged[pod] = False
        q_attempts[pod] = 0
        q_backoff_until[pod] = t
        q_stamp[pod] = t
        q_seq[pod] += 1
        q_where[pod] = OUT
        pending_cpu_arr[0] += nonzero[pod, 0]
        counters[1] += 1
        settle_decision(r_scalars, r_flags, r_rates, r_baseline, r_components, rate_w, event_w, t, oom_events,
                        slo_events, slo_time_events)
        # Score and Select (ties at random, with the run's generator)
        nodes = scratch[:count].copy()
        out = scores[:count]
        if score_kind == K8S_DEFAULT:
            k8s_default_scores(nodes, nonzero_requested, requested, allocatable[:, 0], alloc_mem_bytes,
                               nonzero[pod, 0], nonzero[pod, 1], request[pod, 0], request[pod, 1], best_effort, MIB,
                               out)
        ties, top = best_nodes(out, scratch)
        if ties < 1:
            raise ValueError("the compiled score returned a score that is not finite")
        choice = scratch[0] if ties == 1 else scratch[rng.integers(0, ties)]
        n = nodes[choice]
        # Bind (Simulation._bind)
        for j in range(4):
            requested[n, j] += request[pod, j]
            free[n, j] -= request[pod, j]
        for j in range(2):
            nonzero_requested[n, j] += nonzero[pod, j]
        pod_count[n] += 1
        if row >= 0:
            app_count[row, n] += 1
        empty_since[n] = np.inf
        state[pod] = RUNNING
        node_of[pod] = n
        pod_usage[pod, 0] = cpu
        pod_usage[pod, 1] = mem
        pod_usage[pod, 2] = prof_shape[2, v, shape_slot] * size_disk[pod]
        pod_usage[pod, 3] = prof_shape[3, v, shape_slot] * size_net[pod]
        for j in range(4):
            usage[n, j] += pod_usage[pod, j]
        dirty[n] = True
        add_running(pod, n, run_pos, n_run_arr, run_slots[0], run_slots[1], run_slots[2], run_slots[3], run_slots[4],
                    run_slots[5], run_slots[6], run_slots[7], run_slots[8], run_sources[0], run_sources[1],
                    run_sources[2], run_sources[3], run_sources[4], run_sources[5], run_sources[6], run_sources[7])
        started[pod] = t
        wait = t - queued_at[pod]
        waits[counters[3]] = wait
        counters[3] += 1
        if wait > sla_pending_s and not flagged[pod]:
            counters[4] += 1
        if np.isfinite(remaining[pod]):
            heap_push(ht, hi, meta, t + remaining[pod], DEPART, pod, gen[pod])
        # the pod left the queue (queue.bound); Simulation.schedule's pending CPU
        pending_cpu_arr[0] = pending_cpu_arr[0] - nonzero[pod, 0] if others_pending else 0.0
        counters[2] += 1
        # the decision's cost rate (Simulation._open_decision)
        over, frag_total = reward_state(dirty, free, gpu_capacity, gpu_used, c_pool_of, frag_args[0], frag_args[1],
                                        frag_args[2], frag_args[3], frag_args[4], frag_args[5], frag_cache, usage[:, 0],
                                        cpu_cores, inv_alloc_cpu, prov_f, overload_util, stale_blocks, block_sums)
        if prov_alloc_cpu > 0:
            stranded = frag_total / prov_alloc_cpu * prov_count
            pending = pending_cpu_arr[0] / prov_alloc_cpu * prov_count
        else:
            stranded, pending = 0.0, 0.0
        open_decision(r_scalars, r_flags, r_rates, t, prov_count, stranded, over, pending)
        if usage[n, 1] > memory_pressure[n]:
            return MEMORY, ai, t, pod, n, 0
