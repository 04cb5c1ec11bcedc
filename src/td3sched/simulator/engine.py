"""The discrete-event loop: arrivals, scheduling cycles, departures, usage ticks, scrapes, OOM kills
and the autoscaler, in time order.

At equal times events run in this order: departures, nodes becoming ready, container restarts
(CrashLoopBackOff ends), the kubelet's eviction re-checks, the scheduling queue's own moves
(backoffs ending, the unschedulable flush), the usage tick, the metrics scrape, the autoscaler's
scan, arrivals.

Pods wait in kube-scheduler's scheduling queue (``simulator.queue``): each arrival enters the active
queue and gets a scheduling cycle at once; a pod that fits nowhere waits, unschedulable, until a
cluster event that could help it (a pod leaving a node it fits, a node becoming ready, new node
metrics for pods held back by usage) or the 5-minute flush, and then after its backoff.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

import numpy as np

from td3sched.metrics.collector import MetricsCollector
from td3sched.metrics.fragmentation import PoolTypicalPods
from td3sched.policy.base import Policy, PolicyContext, PodRequest
from td3sched.reward import RewardConfig, RewardTracker
from td3sched.simulator.autoscaler import ClusterAutoscaler
from td3sched.simulator.cluster import Cluster, Pool
from td3sched.simulator.config import SimConfig
from td3sched.simulator.contention import cpu_weight
from td3sched.simulator import fastpath
from td3sched.simulator.fastpath import EventHeap
from td3sched.simulator.filter import choose_gpus, fit_matrix, fits_one
from td3sched.simulator.kernels import (best_nodes, block_count, filter_nodes, nodes_to_find, padded_typical,
                                        refresh_fragmentation, refresh_pod_usage, reward_state, room_matrix, tick_cpu,
                                        tick_latency, walk_room)
from td3sched.simulator.metrics_pipeline import MetricsPipeline
from td3sched.simulator.queue import POLICY, RESOURCES, SHAPE, USAGE, SchedulingQueue
from td3sched.simulator.running import SIZE_CPU, RunningPods
from td3sched.simulator.usage import Hindsight, pod_usage
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE, QOS_NAMES, Workload, unique_rows
from td3sched.workload.profiles import UsageProfiles

FUTURE, PENDING, RUNNING, DONE = 0, 1, 2, 3
HEATMAP_NODES = 256
"""Node slots (evenly spaced) whose hourly CPU utilisation a run records for heatmaps."""
_DEPART, _READY, _RESTART, _EVICT_CHECK = 0, 1, 2, 3
"""Heap event kinds, in their order at equal times."""


@dataclass(frozen=True)
class World:
    """Everything a run needs besides the policy and the seed."""

    pools: tuple[Pool, ...]
    workload: Workload
    profiles: UsageProfiles
    config: SimConfig
    typical: PoolTypicalPods
    """Typical pods of each pool (indexed like ``pools``), for the fragmentation metric."""
    reward: RewardConfig = RewardConfig()


class EventLog:
    """Every event of a run as JSON lines, for audits and independent recomputation (schema in
    docs/simulator.md, "The event log"). With ``detail``, every tick also writes each provisioned
    node's delivered CPU and memory."""

    def __init__(self, stream: TextIO, detail: bool = False):
        self.stream = stream
        self.detail = detail

    def write(self, t: float, kind: str, **fields) -> None:
        self.stream.write(json.dumps({"t": round(t, 3), "event": kind, **fields}) + "\n")


class Simulation(ClusterAutoscaler):
    """One run of one policy over ``[start_s, end_s)`` of a world.

    With ``warmup_s``, the run starts from the state the same policy reaches after a warm-up: the
    simulation begins at ``max(0, start_s - warmup_s)`` and measures from ``measure_s =
    max(start_s, begin + warmup_s)`` (a span that starts at the trace's beginning gives up its own
    first ``warmup_s``); metrics and the reward count only ``[measure_s, end_s)``.
    """

    def __init__(self, world: World, policy: Policy, seed: int, start_s: float, end_s: float,
                 events: EventLog | None = None, progress: Callable[[float], None] | None = None,
                 warmup_s: float = 0.0):
        if not end_s > start_s:
            raise ValueError(f"span [{start_s}, {end_s}) is empty: expected end_s > start_s")
        if not warmup_s >= 0:
            raise ValueError(f"warmup_s={warmup_s!r}: expected seconds >= 0")
        begin = max(0.0, float(start_s) - warmup_s)
        self.measure_s = max(float(start_s), begin + warmup_s)
        if not self.measure_s < end_s:
            raise ValueError(f"span [{start_s}, {end_s}) with a warm-up of {warmup_s:g} s leaves nothing to "
                             f"measure (it would start at {self.measure_s:g} s): expected a shorter warm-up")
        start_s = begin
        self.world = world
        self.cfg = world.config
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.start_s, self.end_s = float(start_s), float(end_s)
        self.events = events
        self.progress = progress

        w = world.workload
        self.w = w
        self.cluster = Cluster(list(world.pools))
        c = self.cluster
        for k, name in enumerate(w.pool_names):
            if name not in c.pool_names:
                raise ValueError(f"workload selects pool {name!r}, the cluster has {', '.join(c.pool_names)}")
        self.pool_to_cluster = np.array([c.pool_names.index(n) for n in w.pool_names] + [-1], dtype=np.int64)
        self.pipeline = MetricsPipeline(c.size, 4, self.cfg.scrape_s, self.cfg.window_s, gauges=(1,))
        c.empty_since[c.provisioned] = self.start_s  # the span's first nodes are new, not idle since t=0

        p = len(w)
        self.state = np.full(p, FUTURE, dtype=np.int8)
        self.node = np.full(p, -1, dtype=np.int64)
        self.gpus: list[np.ndarray | None] = [None] * p
        self.remaining = w.duration_s.astype(np.float64).copy()
        self.started = np.full(p, np.nan)
        self.queued_at = np.full(p, np.nan)
        self.flagged = np.zeros(p, dtype=bool)
        self.crashed = np.zeros(p, dtype=bool)
        """Bound pods whose container was OOM-killed and waits for its restart (CrashLoopBackOff):
        they keep their node and requests but use nothing (``pod_usage`` row 0) and serve nothing;
        latency code counts latency-sensitive crashed pods as served at the cap."""
        self.crashes = np.zeros(p, dtype=np.int64)
        """Consecutive crashes of a pod's container (its back-off exponent)."""
        self.kills_on_node = np.zeros(p, dtype=np.int64)
        """Kills of a pod's container (its own memory limit or the node's OOM killer) since it was last
        put on a node, for the policy hooks told of its release (``Policy.released``); zeroed after
        each release. A run with hooks never takes the compiled path, so only Python binds count."""
        self.overload_ticks_on_node = np.zeros(p, dtype=np.int64)
        """Ticks at which the node a pod is on had its real CPU above the objective's overload threshold
        (``RewardConfig.overload_util``), since the pod was put there; kept, and zeroed after each release,
        as ``kills_on_node``, for a policy told of releases (``_count_pod_outcomes``)."""
        self.slo_ticks_on_node = np.zeros(p, dtype=np.int64)
        """Ticks a latency-sensitive pod served above its latency SLO on its node, or waited there for a
        container restart (served at the cap), since it was put there: its breach samples while bound
        (``kernels.tick_latency``); kept as ``overload_ticks_on_node``."""
        self.node_slo_ticks = np.zeros(0, dtype=np.int64)  # per node, set once the cluster exists
        """Ticks latency-sensitive pods on each node served above their SLO (``slo_ticks_on_node`` summed over
        the node's pods), since the run began."""
        self.node_slo_mark = np.zeros(p, dtype=np.int64)
        """``node_slo_ticks`` of a pod's node when the pod was put there: ``colocated_slo_ticks`` counts from it."""
        self.last_crash_s = np.full(p, -np.inf)
        self._mem_check: list[int] = []
        """Nodes that got a pod's usage since their last memory check (checked after the bind)."""
        self._next_evict_s = None  # per node, set once the cluster exists
        self.breaching = np.zeros(p, dtype=bool)
        """Latency above its SLO at the last tick (one SLA violation per breach episode)."""
        self.gen = np.zeros(p, dtype=np.int64)
        self.pod_usage = np.zeros((p, 4))
        self.nonzero = np.column_stack([
            np.where(w.request[:, 0] > 0, w.request[:, 0], 100.0),
            np.where(w.request[:, 1] > 0, w.request[:, 1], 200.0),
        ])
        capped = np.zeros(len(w.app_names), dtype=bool)
        capped[w.app[w.max_per_node > 0]] = True
        self.app_row = np.where(capped, np.cumsum(capped) - 1, -1).astype(np.int64)
        """Apps with an anti-affinity cap on any pod (every pod of such an app counts against it): the
        app's row of ``Cluster.app_count``; -1 for an app without a cap."""
        self.cluster.app_count = np.zeros((int(capped.sum()), self.cluster.size), dtype=np.int64)
        self._init_queue()
        self._unneeded_since = np.full(self.cluster.size, np.inf)
        self._util_scratch, self._ripe_scratch = np.empty(self.cluster.size), np.empty(self.cluster.size, dtype=bool)
        self._last_scale_up_s = -math.inf
        self.heap = EventHeap()

        lat = self.cfg.latency
        lat_rng = np.random.default_rng([seed, 7])
        self.base_ms = lat.base_median_ms * np.exp(lat.base_sigma * lat_rng.standard_normal(len(w.app_names)))
        self.ls_index = np.flatnonzero(w.latency_sensitive)

        # Pods alive when the span starts enter at start_s with what is left of their run time.
        alive = (w.arrival_s < self.start_s) & (w.arrival_s + w.duration_s > self.start_s)
        if self.cfg.autoscaler.enabled and self.cfg.autoscaler.start_nodes == "needed":
            # the pods the run starts with: those alive and those arriving at its first instant (a
            # stream's steady-state prefill arrives at t = 0)
            self._start_nodes((w.arrival_s <= self.start_s) & (w.arrival_s + w.duration_s > self.start_s))
        self.remaining[alive] = w.arrival_s[alive] + w.duration_s[alive] - self.start_s
        in_span = (w.arrival_s >= self.start_s) & (w.arrival_s < self.end_s)
        self.arrival_order = np.flatnonzero(alive | in_span)
        self.arrival_time = np.maximum(w.arrival_s[self.arrival_order], self.start_s)
        self.metrics = MetricsCollector(self.end_s - self.measure_s, self.cfg.tick_s)
        self.measuring = self.measure_s <= self.start_s
        # The policy keeps its context after the run, so the context's readers hold the simulation
        # weakly: a cycle through it would keep the world (gigabytes on dlrm) alive until Python's
        # cycle collector happens to run, which large arrays never prompt.
        me, remaining = weakref.ref(self), self.remaining
        policy.attach(PolicyContext(c, self.cfg.scrape_s, self.cfg.window_s, world.typical, self.pipeline,
                                    oom_kills=lambda: me().metrics.oom_kills,
                                    score_levels=self.cfg.served_score_levels,
                                    hindsight=Hindsight(w, world.profiles, self.cfg, lambda pod: remaining[pod])))
        self.frag_cache = np.zeros(c.size)
        self.dirty = np.ones(c.size, dtype=bool)
        """Nodes whose free resources, GPUs or usage changed since their F_n was last computed."""
        self._stale_blocks = np.ones(block_count(c.size), dtype=bool)
        self._block_sums = np.zeros((2, block_count(c.size)))
        """The reward's per-block sums and which blocks need recomputing (kernels.reward_state): a
        node's block is flagged through ``dirty``, and every block when usage is re-read or the
        provisioned nodes change."""
        self.decision_wall_s = 0.0
        self._max_nodes = float(c.size)
        self.reward = RewardTracker(world.reward, self._max_nodes)
        self._typical_arrays = padded_typical(world.typical)
        self._inv_alloc_cpu = 1.0 / c.allocatable[:, 0]
        self._next_start = 0
        """The slot the next scheduling cycle's Filter starts from (kube-scheduler's nextStartNodeIndex)."""
        self._pending_cpu = 0.0
        """CPU requests (non-zero default for none) of the pods in the scheduling queue."""
        self._provisioned_changed()
        self._heatmap_nodes = np.unique(np.linspace(0, c.size - 1, min(c.size, HEATMAP_NODES)).astype(np.int64))
        self._slot, self._slot_shape = -1, np.empty((4, 0))
        self._usage_slot = -1
        self._safety_cpu_milli = self.cfg.safety_cpu_util * self.cluster.allocatable[:, 0]
        self._mem_capacity = self.cluster.allocatable[:, 1] + self.cluster.overhead[:, 1]
        self._now = self.start_s
        self._next_evict_s = np.full(self.cluster.size, -np.inf)
        """The eviction manager may evict on a node again from this time (monitoring period)."""
        self.node_slo_ticks = np.zeros(self.cluster.size, dtype=np.int64)
        lat = self.cfg.latency
        self._lat_weights = np.array([lat.weight_cpu, lat.weight_disk, lat.weight_net])
        self._lat_capacity = np.ascontiguousarray(self.cluster.capacity_usage[:, [2, 3]])
        self.cpu_weight = cpu_weight(w.request[:, 0]) if len(w) else np.zeros(0, dtype=np.int64)
        """cgroup v2 cpu.weight of each pod, from its CPU request (simulator.contention)."""
        self.running_pods = RunningPods(w, self.cpu_weight, self.base_ms, self.pod_usage, self.crashed)
        """The running pods, with the columns a tick reads kept in their order (simulator.running)."""
        self._cpu_cores = self.cluster.allocatable[:, 0] + self.cluster.overhead[:, 0]
        self._policy_counts_releases = policy.counts_releases
        """Only a policy that counts releases is told (``Policy.counts_releases``)."""
        self._node_scratch = np.empty(c.size, dtype=np.int64)
        """Scratch for the compiled Filter and Select (kernels)."""
        self._no_counts = np.zeros(0, dtype=np.int64)

    @property
    def n_running(self) -> int:
        return self.running_pods.n

    @property
    def running(self) -> np.ndarray:
        """Running pods in ``running[:n_running]``, in their slots' order (``RunningPods``)."""
        return self.running_pods.pods

    # --- pod usage -------------------------------------------------------------------------------
    def _usage_of(self, pods, t: float) -> np.ndarray:
        """Real usage of a pod ([4]) or pods ([k, 4]) now: CPU milli (throttled at the limit), memory
        MiB, disk MB/s, network Mbit/s."""
        w = self.w
        return pod_usage(w, self.cfg, pods, self._shape_at(t)[:, w.profile[pods]])

    def _shape_at(self, t: float) -> np.ndarray:
        """[4, V]: every profile's shape at ``t`` (one contiguous copy per profile slot)."""
        prof = self.world.profiles
        slot = prof.slot(t)
        if slot != self._slot:
            self._slot, self._slot_shape = slot, np.ascontiguousarray(prof.shape[:, :, slot])
        return self._slot_shape

    # --- scheduling cycle ------------------------------------------------------------------------
    def _init_queue(self) -> None:
        """The scheduling queue, and the fit classes its hints and the Filter memo work on: pods
        alike in everything Filter reads (requests, GPUs, pool, a capped app, the cap, BestEffort)."""
        w, c = self.w, self.cluster
        keys = np.column_stack([w.request, w.gpu_count, w.gpu_milli, w.pool,
                                self.app_row[w.app], w.max_per_node,
                                w.qos == BEST_EFFORT]) if len(w) else np.zeros((0, 10))
        classes, fit_class = unique_rows(keys)
        self.fit_class = fit_class.ravel().astype(np.int64)
        self._class_pod = np.zeros(len(classes), dtype=np.int64)
        """One pod of each class (for what Filter reads beyond the class columns: the app)."""
        self._class_pod[self.fit_class[::-1]] = np.arange(len(w))[::-1]
        self.class_request = np.ascontiguousarray(classes[:, :4])
        self.class_gpu_count = classes[:, 4].astype(np.int64)
        self.class_gpu_milli = classes[:, 5].astype(np.int64)
        self.class_pool = (self.pool_to_cluster[classes[:, 6].astype(np.int64)] if len(classes)
                           else np.zeros(0, np.int64))
        self.class_app_row = classes[:, 7].astype(np.int64)
        self.class_cap = classes[:, 8].astype(np.int64)
        self._class_best_effort = classes[:, 9].astype(bool) if len(classes) else np.zeros(0, dtype=bool)
        # node templates of each pool: an empty node of each distinct shape
        self.template_fits = np.zeros((len(c.pools), len(classes)), dtype=bool)
        for k, sl in enumerate(c.pool_slice):
            shapes = np.unique(np.column_stack([c.allocatable[sl], c.gpu_capacity[sl]]), axis=0)
            fits = fit_matrix(shapes[:, :4], shapes[:, 4:].astype(np.int64), self.class_request,
                              self.class_gpu_count, self.class_gpu_milli)
            self.template_fits[k] = fits.any(axis=0)
        allowed = np.where(self.class_pool[None, :] < 0, True,
                           self.class_pool[None, :] == np.arange(len(c.pools))[:, None])
        self.class_fits_a_template = (self.template_fits & allowed).any(axis=0)
        self.queue = SchedulingQueue(len(w), self.cfg.queue, self.fit_class)
        self.failure_memo = True
        """Skip Filter for a class known to find no node (exact; off only to test that it is)."""
        self._memo_epoch = np.full(len(classes), -1, dtype=np.int64)
        self._memo_t = np.zeros(len(classes))
        self._memo_reasons = np.zeros(len(classes), dtype=np.int64)
        """Per fit class: the capacity epoch, time and reasons of its last cycle that found no node
        (epoch -1: none yet)."""
        self._freed = np.empty(4096, dtype=np.int32)  # 4 bytes a release: dlrm releases millions of pods
        self._n_freed = np.zeros(1, dtype=np.int64)
        """The node each capacity epoch freed room on (-1: every node, new metrics); the epoch is
        its length. Capacity only grows through these events, so a class that found no node finds
        none until one of them touches a node it fits."""
        self.shape_reported = np.zeros(len(w), dtype=bool)

    @property
    def pending(self) -> list[int]:
        """Pods waiting in the scheduling queue, in arrival order."""
        return sorted(self.queue.pending)

    def feasible(self, pod: int) -> np.ndarray:
        """Indices of the nodes that pass Filter for ``pod``."""
        return self._filter(pod)[0]

    def _filter(self, pod: int, t: float | None = None, walk: bool = False) -> tuple[np.ndarray, int]:
        """The nodes that pass Filter for ``pod`` and, when none does, why (queue reason bits).

        Filter: ready; the pod's pool (node selector); requests within free resources (a resource
        not requested always fits); the GPUs (one share of a GPU, or whole free GPUs); the app's
        anti-affinity cap; then the safety filter (observed CPU above the threshold) and, for
        BestEffort pods, the memory-pressure taint. Compiled as ``kernels.filter_nodes``.

        ``walk``: a scheduling cycle's Filter, as kube-scheduler runs it: from where the previous
        cycle stopped, until ``nodes_to_find`` nodes passed (``percentage_of_nodes_to_score``);
        otherwise every node, in slot order."""
        w, c = self.w, self.cluster
        t = self._now if t is None else t
        cap = int(w.max_per_node[pod])
        counts = c.app_count[self.app_row[w.app[pod]]] if cap > 0 else self._no_counts
        start, to_find = (self._next_start, self._to_find) if walk else (0, c.size)
        n, fits_any, fits_everywhere, walked = filter_nodes(
            start, to_find, self.pool_to_cluster[w.pool[pod]], c.pool_of, c.ready, c.provisioned, c.free,
            c.gpu_capacity, c.gpu_used, w.request[pod], int(w.gpu_count[pod]), int(w.gpu_milli[pod]), counts, cap,
            c.observed, self._safety_cpu_milli, bool(w.qos[pod] == BEST_EFFORT), c.memory_pressure_mib,
            c.pressure_until, t, self._node_scratch)
        if walk:
            self._next_start = (start + walked) % c.size
        if not fits_any:
            shape = 0 if self.class_fits_a_template[self.fit_class[pod]] else SHAPE
            return np.empty(0, dtype=np.int64), RESOURCES | shape
        return self._node_scratch[:n].copy(), USAGE | (0 if fits_everywhere else RESOURCES)

    def pod_request(self, pod: int, t: float) -> PodRequest:
        w = self.w
        return PodRequest(pod, w.request[pod], int(w.gpu_count[pod]), int(w.gpu_milli[pod]), int(w.qos[pod]),
                          float(w.cpu_limit_milli[pod]), float(w.mem_limit_mib[pod]), t, int(w.app[pod]))

    def _epoch_freed(self, node: int) -> None:
        n = int(self._n_freed[0])
        if n == len(self._freed):
            self._freed = np.concatenate([self._freed, np.empty(n, dtype=np.int32)])
        self._freed[n] = node
        self._n_freed[0] = n + 1

    @property
    def _epoch(self) -> int:
        """The capacity epoch: how many room-freeing events so far."""
        return int(self._n_freed[0])

    def _still_failing(self, k: int, t: float) -> int | None:
        """The reasons class ``k`` finds no node now, known without a Filter pass, or None.

        Exact: binds only take room; room comes back only through the events in ``_freed``. A class
        held back by usage (policies may depend on time) is known only at the same time and epoch;
        one rejected by resources alone stays rejected unless a node freed since fits it."""
        epoch = int(self._memo_epoch[k])
        if not self.failure_memo or epoch < 0:
            return None
        t_fail, reasons, now = float(self._memo_t[k]), int(self._memo_reasons[k]), self._epoch
        if epoch == now and (t_fail == t or reasons & USAGE == 0):
            return reasons
        if reasons & USAGE or now - epoch > 256:
            return None
        freed = np.unique(self._freed[epoch:now])
        if freed[0] < 0:
            return None
        c, w = self.cluster, self.w
        pod_like = self._class_pod[k]
        pool = self.class_pool[k]
        ok = c.ready[freed] & ((pool < 0) | (c.pool_of[freed] == pool))
        ok &= fits_one(c.free[freed], c.gpu_capacity[freed] - c.gpu_used[freed], self.class_request[k],
                       int(self.class_gpu_count[k]), int(self.class_gpu_milli[k]))
        cap = self.class_cap[k]
        if cap > 0:
            ok &= c.app_count[self.class_app_row[k], freed] < cap
        if ok.any():
            return None
        self._remember_failure(k, t, reasons)
        return reasons

    def _remember_failure(self, k: int, t: float, reasons: int) -> None:
        self._memo_epoch[k], self._memo_t[k], self._memo_reasons[k] = self._epoch, t, reasons

    def schedule(self, pod: int, t: float, memo: bool = True) -> bool:
        """One scheduling cycle: Filter, Score, Select (ties at random), Bind. A pod that no node
        passes goes back to the scheduling queue with the reasons. ``memo=False``: the caller knows
        the failure memo has no answer for the pod's class."""
        t0 = time.perf_counter()
        self.metrics.decisions += 1
        k = int(self.fit_class[pod])
        reasons = self._still_failing(k, t) if memo else None
        if reasons is None:
            nodes, reasons = self._filter(pod, t, walk=True)
            req = self.pod_request(pod, t) if len(nodes) else None
            if req is not None:  # the policy is consulted: a decision (reward.py)
                self._settle_decision(t)
                keep = self.policy.filter(req, nodes, self.cluster)
                if keep is not None:
                    held = len(nodes) > 0
                    nodes = nodes[keep]
                    if held and len(nodes) == 0:
                        reasons = USAGE | POLICY | (reasons & RESOURCES)
        else:
            nodes = np.empty(0, dtype=np.int64)
        if len(nodes) == 0:
            self._remember_failure(k, t, reasons)
            self._unschedulable([pod], t, [reasons])
            if req is not None:  # held back by the policy: still a decision
                self._open_decision(t)
            self.decision_wall_s += time.perf_counter() - t0
            return False
        scores = np.asarray(self.policy.score(req, nodes, self.cluster), dtype=np.float64)
        ties, top = best_nodes(scores, self._node_scratch) if scores.shape == nodes.shape else (-1, np.nan)
        if ties < 1:
            raise ValueError(f"policy {self.policy.name!r} returned scores of shape {scores.shape} "
                             f"(a score {top}) for {len(nodes)} nodes: expected finite scores, one per node")
        choice = self._node_scratch[0] if ties == 1 else self._node_scratch[self.rng.integers(ties)]
        node = int(nodes[choice])
        self._bind(pod, node, t)
        self.queue.bound(pod)
        self._pending_cpu = self._pending_cpu - self.nonzero[pod, 0] if self.queue.pending else 0.0
        self.metrics.binds += 1
        self.policy.bound(req, node, self.cluster)
        self._open_decision(t)
        self.decision_wall_s += time.perf_counter() - t0
        if self.events:
            self.events.write(t, "placement", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]),
                              score=float(scores[choice]), feasible=int(len(nodes)))
        return True

    def _bind(self, pod: int, node: int, t: float) -> None:
        w, c = self.w, self.cluster
        c.requested[node] += w.request[pod]
        c.free[node] -= w.request[pod]
        c.nonzero_requested[node] += self.nonzero[pod]
        c.pod_count[node] += 1
        c.empty_since[node] = np.inf
        if w.gpu_count[pod]:
            g = self.policy.choose_gpus(self.pod_request(pod, t), node, c)
            if g is None:
                g = choose_gpus(c.gpu_capacity[node] - c.gpu_used[node], int(w.gpu_count[pod]), int(w.gpu_milli[pod]))
            c.gpu_used[node, g] += int(w.gpu_milli[pod])
            self.gpus[pod] = g
        if self.app_row[w.app[pod]] >= 0:
            c.app_count[self.app_row[w.app[pod]], node] += 1
        self.state[pod] = RUNNING
        self.node[pod] = node
        self.node_slo_mark[pod] = self.node_slo_ticks[node]
        usage = self._usage_of(pod, t)
        if usage[1] > w.mem_limit_mib[pod]:
            usage = self._limit_memory(np.array([pod]), usage[None, :], t)[0]
        self.pod_usage[pod] = usage
        c.usage[node] += usage
        self._mem_check.append(node)  # kernel OOM and kubelet eviction, once the cycle is done
        self.dirty[node] = True
        self.running_pods.add(pod, node)
        self.started[pod] = t
        wait = t - self.queued_at[pod]
        self.metrics.pending_waits.append(wait)
        if wait > self.cfg.sla_pending_s and not self.flagged[pod]:
            self.metrics.pending_violations += 1
        if math.isfinite(self.remaining[pod]):
            self._push(t + self.remaining[pod], _DEPART, pod, int(self.gen[pod]))

    def _release(self, pod: int, t: float, reason: str) -> int:
        """Take a running pod off its node (``reason``: one of ``policy.base.RELEASE_REASONS``);
        returns the node."""
        w, c = self.w, self.cluster
        node = int(self.node[pod])
        self._epoch_freed(node)
        c.requested[node] -= w.request[pod]
        c.free[node] += w.request[pod]
        c.nonzero_requested[node] -= self.nonzero[pod]
        c.pod_count[node] -= 1
        if c.pod_count[node] == 0:
            c.empty_since[node] = t
            c.requested[node] = 0.0  # drop float drift on an empty node
            c.free[node] = c.allocatable[node]
            c.nonzero_requested[node] = 0.0
        g = self.gpus[pod]
        if g is not None:
            c.gpu_used[node, g] -= int(w.gpu_milli[pod])
            self.gpus[pod] = None
        if self.app_row[w.app[pod]] >= 0:
            c.app_count[self.app_row[w.app[pod]], node] -= 1
        c.usage[node] -= self.pod_usage[pod]
        self.pod_usage[pod] = 0.0
        self.crashed[pod] = False
        self.crashes[pod] = 0
        self.last_crash_s[pod] = -np.inf
        self.breaching[pod] = False
        self.dirty[node] = True
        self.node[pod] = -1
        if self._policy_counts_releases:
            self.policy.released(self.pod_request(pod, t), node, c, reason)
        self.kills_on_node[pod] = 0
        self.overload_ticks_on_node[pod] = 0
        self.slo_ticks_on_node[pod] = 0
        self.gen[pod] += 1
        self.running_pods.remove(pod)
        return node

    def _push(self, t: float, kind: int, a: int, b: int) -> None:
        self.heap.push(t, kind, a, b)

    def _enqueue(self, pod: int, t: float) -> None:
        """A new or recreated pod enters the active queue; the scheduler takes it at once."""
        self.state[pod] = PENDING
        self.queued_at[pod] = t
        self.flagged[pod] = False
        self.queue.add(pod, t)
        self._pending_cpu += self.nonzero[pod, 0]
        self._drain(t)

    def _unschedulable(self, pods: list[int], t: float, reasons: list[int]) -> None:
        """Cycles at ``t`` found no node for ``pods`` (in the order they ran): back to the queue."""
        self.state[pods] = PENDING
        self.queue.failed_many(pods, t, reasons)
        for pod, r in zip(pods, reasons):
            if r & SHAPE and not self.shape_reported[pod]:
                self.shape_reported[pod] = True
                self.metrics.unschedulable_by_shape += 1
                if self.events:
                    self.events.write(t, "unschedulable_by_shape", pod=str(self.w.name[pod]))

    def _drain(self, t: float) -> None:
        """Scheduling cycles for every pod in the active queue, oldest queue timestamp first.

        A pod whose fit class is known to find no node now (the failure memo, ``_still_failing``)
        fails without a cycle; runs of such pods are handed to the queue together. Exact: a failed
        cycle changes nothing that Filter reads, so what is known holds until the next cycle that
        runs (it may bind, and a bind may OOM-kill or evict), and the pods are parked in the order
        they were popped."""
        q = self.queue
        known: dict[int, int] = {}
        batch: list[int] = []
        why: list[int] = []
        while (pod := q.pop_active()) is not None:
            k = int(self.fit_class[pod])
            reasons = known.get(k)
            if reasons is None:
                reasons = self._still_failing(k, t)
                if reasons is not None:
                    known[k] = reasons
            if reasons is not None:
                batch.append(pod)
                why.append(reasons)
                continue
            if batch:
                self._fail_known(batch, why, known, t)
                batch, why = [], []
            known.clear()  # this cycle may change the cluster
            self.schedule(pod, t, memo=False)
            if self._mem_check:
                check, self._mem_check = self._mem_check, []
                if len(check) > 1:
                    self._memory_changed(np.unique(check), t)
                elif self.cluster.usage[check[0], 1] > self.cluster.memory_pressure_mib[check[0]]:
                    self._memory_changed(np.array(check, dtype=np.int64), t)  # else: neither OOM nor pressure
        if batch:
            self._fail_known(batch, why, known, t)

    def _fail_known(self, pods: list[int], reasons: list[int], known: dict[int, int], t: float) -> None:
        """Attempts of pods whose class is known to find no node: counted, and parked in order."""
        t0 = time.perf_counter()
        self.metrics.decisions += len(pods)
        for k, r in known.items():
            self._remember_failure(k, t, r)
        self._unschedulable(pods, t, reasons)
        self.decision_wall_s += time.perf_counter() - t0

    def _capacity_freed(self, node: int, t: float) -> None:
        """Queueing hint for a pod deleted from ``node``: the unschedulable pods that now fit it move
        to the active or backoff queue (``_room_takers``)."""
        if self.queue.by_class and self.cluster.ready[node]:
            takers = self._room_takers(node, t)
            if len(takers):
                self.queue.move(takers, t)
                self._drain(t)

    def _room_takers(self, node: int, t: float) -> np.ndarray:
        """The unschedulable pods (rejected by resources) that ``node``, the one node that changed,
        can take: walked in the order the active queue would try them, each taking its share of the
        node's free resources and GPUs, so pods that would fail at once are not moved. At most as
        many pods of a class are read as the node could hold of that class alone."""
        q = self.queue
        classes = q.classes_waiting_for_resources()
        room = self._room(np.array([node]), classes)[0]
        fits = room > 0
        if not fits.any():
            return np.zeros(0, dtype=np.int64)
        classes, limit = classes[fits], room[fits] + 1  # + 1: room is floor(free / request), rounded
        # Most departures free room for a pod or two: walk each class's first two pods, and all of
        # them only when some class had both taken and has more waiting. Exact: a class whose pod
        # was refused refuses every later pod of it (pods of a class are alike, room only shrinks).
        few = np.minimum(limit, 2)
        takers = self._walk(node, q.waiting_in(classes, t, few))
        if len(takers) >= 2 and (limit > 2).any():
            k, n = np.unique(self.fit_class[takers], return_counts=True)
            if any(len(q.by_class[int(c)]) > 2 for c in k[n >= 2]):
                takers = self._walk(node, q.waiting_in(classes, t, limit))
        return takers

    def _walk(self, node: int, cand: np.ndarray) -> np.ndarray:
        """The candidates (in queue order) ``node`` takes, each its share (``kernels.walk_room``)."""
        c, w = self.cluster, self.w
        taken = np.empty(len(cand), dtype=np.int64)
        m = walk_room(w.request[cand], w.gpu_count[cand], w.gpu_milli[cand], c.free[node],
                      c.gpu_capacity[node] - c.gpu_used[node], taken)
        return cand[taken[:m]]

    def _room(self, nodes: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """[N, K] how many pods of class k node n's free resources and GPUs could hold, that class
        alone; 0 where one does not fit or the class may not use the node's pool
        (``kernels.room_matrix``)."""
        c = self.cluster
        out = np.empty((len(nodes), len(classes)), dtype=np.int64)
        room_matrix(nodes, c.free, c.gpu_capacity, c.gpu_used, c.pool_of, self.class_request[classes],
                    self.class_gpu_count[classes], self.class_gpu_milli[classes], self.class_pool[classes], out)
        return out

    # --- departures, kills, ticks --------------------------------------------------------------------
    def _depart(self, pod: int, t: float) -> None:
        node = self._release(pod, t, "departure")
        self.state[pod] = DONE
        if self.events:
            self.events.write(t, "departure", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]))
        self._capacity_freed(node, t)

    def _recreate(self, pod: int, t: float) -> None:
        """A pod killed or evicted off its node is recreated by its controller with the run time it
        has left, and queued like a new pod (the caller drains the queue once its pass is done)."""
        self.state[pod] = PENDING
        self.queued_at[pod] = t
        self.flagged[pod] = False
        self.queue.add(pod, t)
        self._pending_cpu += self.nonzero[pod, 0]

    def _tick(self, t: float) -> None:
        c, cfg = self.cluster, self.cfg
        slot = int(t // self.world.profiles.step_s)
        if slot != self._usage_slot:  # profiles are step-wise: usage only moves when the slot does
            self._usage_slot = slot
            self._refresh_usage(t)
            self._memory_changed(np.flatnonzero(c.provisioned), t)
        self._sample(t)
        # pods pending too long: one violation per wait
        if self.queue.pending:
            pend = np.fromiter(self.queue.pending, dtype=np.int64, count=len(self.queue.pending))
            late = pend[(t - self.queued_at[pend] > cfg.sla_pending_s) & ~self.flagged[pend]]
            self.flagged[late] = True
            self.metrics.pending_violations += len(late)

    def _refresh_usage(self, t: float) -> None:
        """Re-read every running pod's usage from its profile and rebuild node usage from it
        (compiled: ``kernels.refresh_pod_usage``, the arithmetic of ``usage.pod_usage`` and
        ``_limit_memory``); containers above their memory limit are then OOM-killed."""
        c = self.cluster
        shape = self._shape_at(t)
        precision = shape.dtype.type
        run = self.running_pods
        over = refresh_pod_usage(run.pods, run.node, run.profile, run.size, run.crashed, run.n, shape,
                                 precision(self.cfg.usage_scale), precision(self.cfg.mem_level), c.overhead,
                                 c.provisioned, self.pod_usage, c.usage, run.cpu)
        self._stale_blocks[:] = True
        for pod in over:  # its usage is 0 already, on its node too
            self._crash(int(pod), t, "container_oom")

    def _limit_memory(self, pods: np.ndarray, usage: np.ndarray, t: float) -> np.ndarray:
        """``usage`` of bound ``pods`` as it is: zero for pods in CrashLoopBackOff, and a container
        whose memory is above its limit is OOM-killed by the kernel (``_crash``) and uses nothing
        until its restart. The caller puts the returned usage on the nodes."""
        crashed = self.crashed[pods]
        over = ~crashed & (usage[:, 1] > self.w.mem_limit_mib[pods])
        for pod in pods[over]:
            self.pod_usage[pod] = 0.0  # the caller books the node's usage
            self._crash(int(pod), t, "container_oom")
        usage[crashed | over] = 0.0
        return usage

    # --- memory: container OOM, CrashLoopBackOff, kernel OOM killer, kubelet eviction --------------
    def _crash(self, pod: int, t: float, kind: str) -> None:
        """The kernel kills ``pod``'s container (``kind``: "container_oom" for memory above its limit,
        "oom_kill" for a node out of memory). The pod stays bound with its requests and uses nothing
        until the kubelet restarts it after the CrashLoopBackOff delay (10 s doubling per consecutive
        crash, at most 5 min; a crash more than 10 min after the previous one starts again at 10 s)."""
        k, c = self.cfg.kubelet, self.cluster
        node = int(self.node[pod])
        c.usage[node] -= self.pod_usage[pod]
        self.pod_usage[pod] = 0.0
        self.crashed[pod] = True
        self.running_pods.sync(pod)
        self.dirty[node] = True
        self.breaching[pod] = False
        if t - self.last_crash_s[pod] > k.backoff_reset_s:
            self.crashes[pod] = 0
        delay = min(k.backoff_initial_s * 2.0 ** self.crashes[pod], k.backoff_max_s)
        self.crashes[pod] += 1
        self.kills_on_node[pod] += 1
        self.last_crash_s[pod] = t
        if kind == "container_oom":
            self.metrics.container_ooms += 1
        else:
            self.metrics.oom_kills += 1
        self._push(t + delay, _RESTART, pod, int(self.gen[pod]))
        if self.events:
            self.events.write(t, kind, pod=str(self.w.name[pod]), node=str(c.names[node]), restart_in=delay)

    def _restart(self, pod: int, t: float) -> None:
        """The kubelet restarts a crashed container: its usage is re-read from its profile now (it may
        crash again at once), and the node's memory is checked."""
        self.crashed[pod] = False
        node = int(self.node[pod])
        if self.events:
            self.events.write(t, "container_restart", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]))
        usage = self._limit_memory(np.array([pod]), self._usage_of(pod, t)[None, :], t)[0]
        self.pod_usage[pod] = usage
        self.running_pods.sync(pod)
        self.cluster.usage[node] += usage
        self.dirty[node] = True
        self._memory_changed(np.array([node]), t)

    def _memory_changed(self, nodes: np.ndarray, t: float) -> None:
        """Memory usage of ``nodes`` changed: the kernel OOM killer acts on those above their capacity
        (allocatable + overhead), then, at the same instant, the kubelet evicts on those below 5%
        available. Pods evicted re-enter the queue, which is drained once all nodes are done."""
        c = self.cluster
        nodes = nodes[c.provisioned[nodes]]
        if len(nodes) == 0:
            return
        hot = nodes[c.usage[nodes, 1] > self._mem_capacity[nodes]]
        pressed = nodes[c.usage[nodes, 1] > c.memory_pressure_mib[nodes]]
        if len(hot) == 0 and len(pressed) == 0:
            return
        running = self.running[: self.n_running]
        up = ~self.crashed[running]
        bound, nodes_of = running[up], self.running_pods.node[: len(running)][up]
        for node in hot:
            self._oom_node(int(node), bound[nodes_of == node], t)
        freed = []
        for node in pressed:
            if self._evict_memory(int(node), bound[nodes_of == node], t):
                freed.append(int(node))
        for node in freed:
            self._capacity_freed(node, t)
        if freed:
            self._drain(t)

    def _oom_node(self, node: int, pods: np.ndarray, t: float) -> None:
        """The kernel OOM killer on ``node`` out of memory: kill the container of the highest
        oom_score = memory / capacity x 1000 + oom_score_adj until memory fits. oom_score_adj by QoS
        (pkg/kubelet/qos/policy.go): Guaranteed -997, BestEffort 1000, Burstable
        min(max(2, 1000 - 1000 x memory request / capacity), 999). Ties by workload index."""
        w, c = self.w, self.cluster
        capacity = self._mem_capacity[node]
        mem = self.pod_usage[pods, 1]
        burstable = np.clip(1000 - np.floor(1000 * w.request[pods, 1] / capacity), 2, 999)
        adj = np.where(w.qos[pods] == BEST_EFFORT, 1000, np.where(w.qos[pods] == BURSTABLE, burstable, -997))
        score = np.floor(mem / capacity * 1000) + adj
        for pod in pods[np.lexsort((pods, -score))]:
            if c.usage[node, 1] <= capacity:
                break
            if self.pod_usage[pod, 1] > 0:
                self._crash(int(pod), t, "oom_kill")

    def _evict_memory(self, node: int, pods: np.ndarray, t: float) -> bool:
        """The kubelet's eviction manager on ``node`` under memory pressure (memory.available < 5% of
        capacity): MemoryPressure holds for the transition period; if the node did not evict within
        the monitoring period, evict pods one at a time, ranked as ``rankMemoryPressure`` does (usage
        above request first, by that excess; then the others by usage; largest first), until
        available is back at the threshold. Returns whether a pod was evicted."""
        c, k = self.cluster, self.cfg.kubelet
        pods = pods[self.pod_usage[pods, 1] > 0]  # evicting a pod using no memory frees none
        c.pressure_until[node] = max(c.pressure_until[node], t + k.pressure_transition_s)
        if t < self._next_evict_s[node]:
            return False
        mem = self.pod_usage[pods, 1]
        excess = mem - self.w.request[pods, 1]
        above = excess > 0
        order = np.lexsort((pods, -np.where(above, excess, mem), ~above))
        evicted = False
        for pod in pods[order]:
            if c.usage[node, 1] <= c.memory_pressure_mib[node]:
                break
            self._evict(int(pod), t, "memory_pressure")
            evicted = True
        if evicted:
            self._next_evict_s[node] = t + k.eviction_monitoring_s
            self._push(t + k.eviction_monitoring_s, _EVICT_CHECK, node, 0)
        return evicted

    def _refresh_fragmentation(self) -> None:
        """Recompute F_n of the nodes whose free resources changed since the last call (compiled:
        ``kernels.refresh_fragmentation``, the rule of ``metrics.fragmentation.node_fragmentation``)."""
        c = self.cluster
        refresh_fragmentation(self.dirty, c.free, c.gpu_capacity, c.gpu_used, c.pool_of, *self._typical_arrays,
                              self.frag_cache, self._stale_blocks)

    def _provisioned_changed(self) -> None:
        """Nodes were added, became ready or were removed."""
        c = self.cluster
        self._to_find = nodes_to_find(self.cfg.percentage_of_nodes_to_score, int(c.ready.sum()))
        self._prov_f = c.provisioned.astype(np.float64)
        self._prov_alloc_cpu = float(self._prov_f @ c.allocatable[:, 0])
        self._prov_count = float(self._prov_f.sum())
        self._stale_blocks[:] = True

    def cluster_fragmentation(self) -> float:
        """The fragmentation metric of the cluster now (provisioned nodes)."""
        self._refresh_fragmentation()
        return float(self.frag_cache @ self._prov_f / self._prov_alloc_cpu) if self._prov_alloc_cpu > 0 else 0.0

    def delivered_usage(self) -> np.ndarray:
        """[N, 4] node usage as node_exporter reports it: CPU delivered, not demanded. A node serves
        its system daemons first (the overhead) and its pods at most the rest of its cores, so
        delivered CPU = min(demand incl. daemons, allocatable + overhead); ``cluster.usage`` holds
        the demand (after each pod's CFS quota)."""
        c = self.cluster
        out = c.usage.copy()
        np.minimum(out[:, 0], self._cpu_cores, out=out[:, 0])
        return out

    def _cost_events(self) -> np.ndarray:
        """The run's event counts the objective prices: OOM kills (node and container), SLO breach episodes and
        pod-hours above the SLO (latency samples above it, a tick each)."""
        m = self.metrics
        return np.array([m.oom_kills + m.container_ooms, m.slo_breaches, m.breach_hours], dtype=np.float64)

    def _settle_decision(self, t: float) -> None:
        """Charge the open decision (reward.py) up to ``t``."""
        self.reward.settle(t, self._cost_events())

    def _open_decision(self, t: float) -> None:
        """Start decision k at ``t`` with the cost rate of the cluster now, from the ground truth:
        nodes, stranded capacity, overload and pending requests, in node-equivalents."""
        c = self.cluster
        over, frag_total = reward_state(self.dirty, c.free, c.gpu_capacity, c.gpu_used, c.pool_of,
                                        *self._typical_arrays, self.frag_cache, c.usage[:, 0], self._cpu_cores,
                                        self._inv_alloc_cpu, self._prov_f, self.reward.cfg.overload_util,
                                        self._stale_blocks, self._block_sums)
        n = self._prov_count
        if self._prov_alloc_cpu > 0:
            stranded = frag_total / self._prov_alloc_cpu * n
            pending = self._pending_cpu / self._prov_alloc_cpu * n
        else:
            stranded, pending = 0.0, 0.0
        self.reward.open(t, np.array([n, stranded, over, pending]))

    def _sample(self, t: float) -> None:
        c, w, cfg = self.cluster, self.w, self.cfg
        prov = c.provisioned.astype(np.float64)
        self._refresh_fragmentation()
        alloc = prov @ c.allocatable
        usage = self.delivered_usage()
        if self.events and self.events.detail:
            nodes = np.flatnonzero(c.provisioned)
            self.events.write(t, "tick", nodes=nodes.tolist(), cpu_milli=np.round(usage[nodes, 0], 3).tolist(),
                              mem_mib=np.round(usage[nodes, 1], 3).tolist())
        pods_cpu, pods_mem = prov @ usage[:, :2] - prov @ c.overhead
        frag = float(self.frag_cache @ prov / alloc[0]) if alloc[0] > 0 else 0.0
        overloaded = int(prov @ (usage[:, 0] > cfg.overload_util * c.allocatable[:, 0]))

        # CPU contention: demand (after quotas) a node could not serve, and demand cut by quotas
        demand = np.maximum(c.usage[:, 0] - c.overhead[:, 0], 0.0) * prov
        unserved = float(np.maximum(demand - c.allocatable[:, 0], 0.0).sum())
        # per pod: demand before and after the quotas, and the pressure on nodes serving LS pods
        scale = self._slot_shape.dtype.type(self.cfg.usage_scale)  # the profiles' precision, as pod_usage
        run = self.running_pods
        raw_total, pods_demand, batch_demand = tick_cpu(
            run.node, run.profile, run.size[SIZE_CPU], run.weight, run.latency_sensitive, run.cpu, run.crashed, run.n,
            self._slot_shape[0], scale, c.allocatable[:, 0], run.pressure)
        throttled = raw_total - pods_demand

        # latency: CPU from the pressure each pod meets under weighted processor sharing on its node
        # (tick_cpu); disk and network from the node's utilisation, the same for its pods. A
        # latency-sensitive pod pending, or bound but waiting for a container restart, serves its
        # requests at the cap: breach samples, not breach episodes (a wait counts as
        # sla_pending_too_long, a crash as an OOM kill)
        lat = cfg.latency
        cap_factor = 1.0 + (1.0 / (1.0 - lat.rho_cap) - 1.0) * (lat.weight_cpu + lat.weight_disk + lat.weight_net)
        rho_io = np.minimum(c.usage[:, 2:] / self._lat_capacity, lat.rho_cap)
        io_factor = (1.0 / (1.0 - rho_io) - 1.0) @ np.array([lat.weight_disk, lat.weight_net])
        latency, breaches, breach_samples = tick_latency(
            run.pods, run.node, run.latency_sensitive, run.base_ms, run.pressure, run.crashed, run.n, self.breaching,
            io_factor, float(lat.weight_cpu), float(lat.rho_cap), float(lat.slo_factor), self.ls_index, self.state,
            w.app, self.base_ms, cap_factor, PENDING)
        if self._policy_counts_releases:
            self._count_pod_outcomes(usage, run)
        sample = self._heatmap_nodes
        node_util = np.where(c.provisioned[sample], usage[sample, 0] / c.allocatable[sample, 0], np.nan)
        self.metrics.tick(pods_cpu=float(pods_cpu), pods_mem=float(pods_mem), alloc_cpu=float(alloc[0]),
                          alloc_mem=float(alloc[1]), fragmentation=frag, nodes=int(prov.sum()),
                          overloaded=overloaded, latency_ms=latency, breaches=breaches,
                          breach_samples=breach_samples, node_util=node_util,
                          cpu_demand=raw_total, cpu_unserved=unserved, cpu_throttled=throttled,
                          batch_demand=batch_demand, pods_demand=pods_demand)

    def _count_pod_outcomes(self, usage: np.ndarray, run) -> None:
        """A tick's part of each running pod's outcome on its node: whether the node is over the objective's
        overload threshold (delivered CPU, as the objective reads it), and whether a latency-sensitive
        pod served above its SLO (``breaching``, which ``tick_latency`` has just set) or waited for a
        container restart."""
        n = run.n
        pods = run.pods[:n]
        over = usage[:, 0] > self.reward.cfg.overload_util * self.cluster.allocatable[:, 0]
        self.overload_ticks_on_node[pods] += over[run.node[:n]]
        above = run.latency_sensitive[:n] & (run.crashed[:n] | self.breaching[pods])
        self.slo_ticks_on_node[pods] += above
        self.node_slo_ticks += np.bincount(run.node[:n][above], minlength=len(self.node_slo_ticks))

    def colocated_slo_ticks(self, pod: int, node: int) -> int:
        """Ticks the latency-sensitive pods on ``node`` (``pod`` included) served above their SLO since ``pod``
        was last put there: what its stay shared of the node's tail, its own part and its neighbours'. Read
        while ``pod`` is on ``node``, or when it is released from it (as ``slo_ticks_on_node``, for a policy
        told of releases)."""
        return int(self.node_slo_ticks[node] - self.node_slo_mark[pod])

    def _evict(self, pod: int, t: float, reason: str = "scale_down") -> None:
        """The pod is evicted (a drain for scale-down, or the kubelet under memory pressure) and
        recreated by its controller with the run time it has left."""
        node = self._release(pod, t, f"evicted:{reason}")
        self.remaining[pod] = max(self.remaining[pod] - (t - self.started[pod]), 0.0)
        self.metrics.evictions += 1
        if reason == "memory_pressure":
            self.metrics.evictions_memory += 1
        if self.events:
            self.events.write(t, "eviction", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]),
                              reason=reason)
        self._recreate(pod, t)

    def _metrics_changed(self, t: float) -> None:
        """Queueing hint for new node metrics: a pod a policy's filter held back tries again; one
        the safety filter or the memory-pressure taint held back, only if some ready node it fits
        by resources now passes them, and only as many pods of a class as those nodes could hold
        (the first ones in the order the active queue would try them; the room walk's bound, over
        every node that passes)."""
        c, q = self.cluster, self.queue
        held = np.fromiter(q.usage_held, dtype=np.int64, count=len(q.usage_held))
        by_policy = (q.reasons[held] & POLICY) != 0
        rest = held[~by_policy]
        classes = np.unique(self.fit_class[rest])
        cool = c.ready & (c.observed[:, 0] <= self._safety_cpu_milli)
        calm = cool & (c.observed[:, 1] < c.memory_pressure_mib) & (c.pressure_until <= t)
        limit = np.zeros(len(classes), dtype=np.int64)
        best_effort = self._class_best_effort[classes]
        for passing, sel in ((cool, ~best_effort), (calm, best_effort)):
            nodes, ks = np.flatnonzero(passing), classes[sel]
            if len(nodes) == 0 or len(ks) == 0:
                continue
            limit[sel] = self._room(nodes, ks).sum(axis=0)
        order = rest[np.lexsort((q.entered[rest], q.backoff_until[rest] > t))]
        group = np.searchsorted(classes, self.fit_class[order])
        by_group = np.argsort(group, kind="stable")
        rank = np.empty(len(order), dtype=np.int64)  # place of each pod among its class, in order
        sorted_group = group[by_group]
        rank[by_group] = np.arange(len(order)) - np.searchsorted(sorted_group, sorted_group, side="left")
        move = np.concatenate([held[by_policy], order[rank < limit[group]]])
        if len(move):
            q.move_usage_held(t, np.sort(move).tolist())
            self._drain(t)

    def _node_requested(self, node: int, ready_at: float) -> None:
        """A node asked for from the provider becomes ready at ``ready_at``."""
        self._push(ready_at, _READY, node, 0)

    def _node_ready(self, node: int, t: float) -> None:
        c = self.cluster
        if not c.provisioned[node] or c.ready[node]:
            return
        c.ready[node] = True
        self._provisioned_changed()
        c.empty_since[node] = t
        self.dirty[node] = True
        self._epoch_freed(node)
        if self.events:
            self.events.write(t, "node_ready", node=str(c.names[node]))
        # queueing hint for a new node: the unschedulable pods it fits, by resources or by shape
        q = self.queue
        gpu_free = (c.gpu_capacity[node] - c.gpu_used[node])[None]
        if q.by_class:
            q.move(self._room_takers(node, t), t)
        if q.shape_held:
            held = np.fromiter(q.shape_held, dtype=np.int64, count=len(q.shape_held))
            cls = self.fit_class[held]
            fits = fit_matrix(c.free[node][None], gpu_free, self.class_request[cls], self.class_gpu_count[cls],
                              self.class_gpu_milli[cls])[0]
            fits &= (self.class_pool[cls] < 0) | (self.class_pool[cls] == c.pool_of[node])
            q.move_shape_held(held[fits].tolist(), t)
        self._drain(t)

    def _log_arrival(self, pod: int, t: float) -> None:
        w = self.w

        def limit(v: float) -> float | None:
            return None if math.isinf(v) else float(v)

        pool = int(w.pool[pod])
        self.events.write(t, "arrival", pod=str(w.name[pod]), request=w.request[pod].tolist(),
                          gpu_count=int(w.gpu_count[pod]), gpu_milli=int(w.gpu_milli[pod]),
                          cpu_limit_milli=limit(w.cpu_limit_milli[pod]), mem_limit_mib=limit(w.mem_limit_mib[pod]),
                          qos=QOS_NAMES[int(w.qos[pod])], pool=w.pool_names[pool] if pool >= 0 else None,
                          latency_sensitive=bool(w.latency_sensitive[pod]), app=str(w.app_names[int(w.app[pod])]),
                          max_per_node=int(w.max_per_node[pod]), run_s=limit(self.remaining[pod]))

    def _log_node(self, t: float, kind: str, n: int) -> None:
        c = self.cluster
        self.events.write(t, kind, node=str(c.names[n]), index=int(n), pool=c.pool_names[int(c.pool_of[n])],
                          allocatable=c.allocatable[n].tolist(), overhead=c.overhead[n].tolist(),
                          bandwidth=c.bandwidth[n].tolist(), gpus=int((c.gpu_capacity[n] > 0).sum()))

    def _start_measuring(self) -> None:
        """End of the warm-up: metrics and the reward start afresh; the pods alive now count as
        the span's pods (as pods alive at a span's start always have)."""
        self.measuring = True
        self.metrics = MetricsCollector(self.end_s - self.measure_s, self.cfg.tick_s)
        self.metrics.arrivals = int(np.isin(self.state, (PENDING, RUNNING)).sum())
        self.reward = type(self.reward)(self.world.reward, self._max_nodes)
        if self.events:
            self.events.write(self.measure_s, "span_start", pods_alive=self.metrics.arrivals,
                              pending=len(self.queue.pending))
        for pod in self.queue.pending:  # a wait that began in the warm-up counts once more in the span
            self.flagged[pod] = False

    # --- the compiled common case (simulator.fastpath) ---------------------------------------------
    fast_path = True
    """Run arrivals that bind at once and departures nobody waits for in the compiled loop when the
    policy allows it (``fastpath``); False runs every event in Python (the equivalence tests)."""
    verify_compiled_calls = False
    """Check that every call of the compiled loop passes the argument types of the first
    (``fastpath.CompiledCall``; the tests)."""

    def _fast_path_args(self) -> tuple | None:
        """What ``fastpath.run_events`` reads besides the loop's position, or None when this run
        cannot use it: an event log, a policy without a compiled score or with hooks, a reward
        tracker that does more than charge."""
        policy = type(self.policy)
        kind = fastpath.COMPILED_SCORES.get(getattr(self.policy, "compiled_score", None) or "")
        if (not self.fast_path or self.events is not None or kind is None or type(self.reward) is not RewardTracker
                or policy.filter is not Policy.filter or policy.bound is not Policy.bound
                or policy.released is not Policy.released):
            return None
        w, c = self.w, self.cluster
        self._run_events = fastpath.CompiledCall(fastpath.run_events, verify=self.verify_compiled_calls)
        return (kind, np.ascontiguousarray(w.request), w.qos == BEST_EFFORT, c.allocatable[:, 1] * fastpath.MIB,
                np.zeros(c.size), np.empty(4096), np.zeros(5, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1),
                np.zeros(1))

    def _run_fast(self, fast: tuple, ai: int, t_stop: float, next_scan: float) -> tuple[int, float, bool]:
        """Run the compiled loop from arrival ``ai`` until ``t_stop`` or a case it hands back, with the
        autoscaler scans from ``next_scan`` that change nothing; book its counters; resume the Python
        path where it stopped. Returns the next arrival, the next scan and whether a Python step ran
        (the caller then looks at the next event afresh)."""
        kind, request, best_effort, alloc_mem_bytes, scores, waits, counters, walk, pending, scan_at = fast
        w, c, q, prof, r, a = self.w, self.cluster, self.queue, self.world.profiles, self.reward, self.cfg.autoscaler
        if self._fast_stops_at_once(ai, t_stop, next_scan):
            return ai, next_scan, False
        m = self.metrics
        self.heap.reserve(len(waits))
        run = self.running_pods
        run.reserve(len(waits))  # a call binds at most one pod per wait it records
        if len(self._freed) - self._epoch < len(waits):
            self._freed = np.concatenate([self._freed, np.empty(len(self._freed) + len(waits), dtype=np.int32)])
        counters[:] = 0
        waiting = q.classes_waiting_for_resources() if q.by_class else self._no_counts
        walk[0], pending[0], scan_at[0] = self._next_start, self._pending_cpu, next_scan
        t0 = time.perf_counter()
        why, ai, t, pod, node, reasons = self._run_events(
            ai, t_stop, self.arrival_order, self.arrival_time,
            self.heap.t, self.heap.ints, self.heap.meta, self._freed, self._n_freed,
            request, w.gpu_count, w.gpu_milli, best_effort, w.app, self.app_row, w.max_per_node, c.app_count, w.pool,
            self.fit_class, w.profile, w.size_cpu_milli, w.size_mem_mib, w.size_disk_mbps, w.size_net_mbps,
            w.cpu_limit_milli, w.mem_limit_mib, prof.shape, float(prof.step_s), float(self.cfg.usage_scale),
            float(self.cfg.mem_level),
            self.state, self.node, self.remaining, self.started, self.queued_at, self.flagged, self.gen,
            self.pod_usage, self.nonzero, run.pos, run.count, run.slots, run.sources,
            self.crashed, self.crashes, self.last_crash_s, self.breaching,
            q.attempts, q.backoff_until, q.stamp, q._seq, q.where, len(q.pending) > 0,
            self.class_request[waiting], self.class_gpu_count[waiting], self.class_gpu_milli[waiting],
            self.class_pool[waiting], np.empty((1, len(waiting)), dtype=np.int64),
            self.failure_memo, self._memo_epoch, self._memo_t, self._memo_reasons, self.class_request,
            self.class_gpu_count, self.class_gpu_milli, self.class_pool, self.class_app_row, self.class_cap,
            self.class_fits_a_template,
            self.pool_to_cluster, c.pool_of, c.ready, c.provisioned, c.free, c.requested, c.nonzero_requested,
            c.pod_count, c.empty_since, c.allocatable, alloc_mem_bytes, c.gpu_capacity, c.gpu_used, c.usage,
            c.observed, self._safety_cpu_milli, c.memory_pressure_mib, c.pressure_until, self.dirty, self._no_counts,
            self._node_scratch, walk, self._to_find,
            self._typical_arrays, self.frag_cache, self._cpu_cores, self._inv_alloc_cpu, self._prov_f,
            self._prov_count, self._prov_alloc_cpu, r.cfg.overload_util, self._stale_blocks, self._block_sums,
            r.scalars, r.flags, r.rates, r.baseline, r.components, r.rate_w, r.event_w,
            *map(float, self._cost_events()),
            scan_at, float(a.scan_interval_s), float(self._last_scale_up_s), float(a.scale_down_delay_after_add_s),
            float(a.scale_down_utilization_threshold), self._unneeded_since, float(a.scale_down_unneeded_s),
            self._util_scratch, self._ripe_scratch,
            kind, self.rng, scores, pending, waits, counters, float(self.cfg.sla_pending_s))
        self.decision_wall_s += time.perf_counter() - t0
        self._next_start, self._pending_cpu, next_scan = int(walk[0]), float(pending[0]), float(scan_at[0])
        m.arrivals += int(counters[0])
        m.decisions += int(counters[1])
        m.binds += int(counters[2])
        m.pending_waits.extend(waits[: counters[3]].tolist())
        m.pending_violations += int(counters[4])
        if why == fastpath.STOP:
            return ai, next_scan, False
        t, pod, node = float(t), int(pod), int(node)
        self._now = t
        if why == fastpath.FAILED:
            self._arrival_failed(pod, t, int(reasons))
        elif why == fastpath.MEMORY:
            self._memory_changed(np.array([node], dtype=np.int64), t)
            self._drain(t)
        else:  # FREED
            self._capacity_freed(node, t)
        return ai, next_scan, True

    def _fast_stops_at_once(self, ai: int, t_stop: float, next_scan: float) -> bool:
        """Whether ``fastpath.run_events`` would return STOP before doing anything (its first
        checks, made here for the price of a few lookups: a call costs tens of microseconds, and
        most stops of the loop are followed by a Python event). A scan that comes first stops it
        when pods pend; otherwise the loop is called (the scan may be one it runs)."""
        w = self.w
        t_arr = self.arrival_time[ai] if ai < len(self.arrival_order) else math.inf
        t_heap = self.heap.peek_t()
        if next_scan < t_stop and next_scan < t_heap and next_scan <= t_arr:
            return len(self.queue.pending) > 0
        t = min(t_arr, t_heap)
        if t >= t_stop:
            return True
        if t_heap == t:
            return int(self.heap.ints[0, 0]) != _DEPART
        pod = self.arrival_order[ai]
        return bool(w.gpu_count[pod] > 0)

    def _arrival_failed(self, pod: int, t: float, reasons: int) -> None:
        """An arrival whose Filter pass, run by the compiled loop, found no node: it enters the queue
        and its cycle fails, as ``_enqueue``, ``_drain`` and ``schedule`` do it."""
        self.state[pod] = PENDING
        self.queued_at[pod] = t
        self.flagged[pod] = False
        self.queue.add(pod, t)
        self._pending_cpu += self.nonzero[pod, 0]
        if self.queue.pop_active() != pod:
            raise RuntimeError(f"pod {pod} arrived while other pods were in the active queue")
        self.metrics.decisions += 1
        self._remember_failure(int(self.fit_class[pod]), t, reasons)
        self._unschedulable([pod], t, [reasons])
        self._drain(t)

    # --- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        """Run the span; return the metrics (see ``metrics.collector``)."""
        wall0 = time.perf_counter()
        c, cfg = self.cluster, self.cfg
        c.usage[:, :2] = c.overhead * c.provisioned[:, None]
        self._stale_blocks[:] = True
        if self.events:
            for n in np.flatnonzero(c.provisioned):  # the cluster as the run starts
                self._log_node(self.start_s, "node_present", int(n))
        next_tick = self.start_s
        next_scrape = self.start_s
        next_scan = self.start_s if cfg.autoscaler.enabled else math.inf
        ai, n_arr = 0, len(self.arrival_order)
        last_progress = self.start_s
        fast = self._fast_path_args()
        while True:
            t_queue = self.queue.next_event_s()
            if fast is not None:
                t_stop = min(t_queue, next_tick, next_scrape, self.end_s,
                             math.inf if self.measuring else self.measure_s)
                ai, next_scan, resumed = self._run_fast(fast, ai, t_stop, next_scan)
                if resumed:  # the Python path took over where the compiled loop stopped: look again
                    continue
            t_arr = self.arrival_time[ai] if ai < n_arr else math.inf
            t_heap = self.heap.peek_t()
            t = min(t_arr, t_heap, t_queue, next_tick, next_scrape, next_scan)
            if t >= self.end_s:
                break
            if not self.measuring and t >= self.measure_s:
                self._start_measuring()
            self._now = t
            if t_heap == t:
                _, kind, a, b = self.heap.pop()
                if kind == _DEPART:
                    if self.state[a] == RUNNING and self.gen[a] == b:
                        self._depart(a, t)
                elif kind == _READY:
                    self._node_ready(a, t)
                elif kind == _RESTART:
                    if self.state[a] == RUNNING and self.gen[a] == b and self.crashed[a]:
                        self._restart(a, t)
                else:  # the eviction manager's next look at a node it evicted on
                    self._memory_changed(np.array([a]), t)
                continue
            if t_queue == t:
                self.queue.release_backoff(t)
                if self.queue.next_flush_s <= t:
                    self.queue.flush_leftover(t)
                self._drain(t)
                continue
            if next_tick == t:
                self._tick(t)
                next_tick += cfg.tick_s
                if self.progress and t - last_progress >= 3600:
                    self.progress(t - last_progress)
                    last_progress = t
                continue
            if next_scrape == t:
                c.observed[:] = self.pipeline.scrape(self.delivered_usage())
                c.last_scrape_s = t
                # MemoryPressure seen in the node's metrics holds for the transition period too
                c.pressure_until[c.observed[:, 1] >= c.memory_pressure_mib] = t + cfg.kubelet.pressure_transition_s
                next_scrape += cfg.scrape_s
                self._epoch_freed(-1)
                if self.queue.usage_held:  # new node metrics: pods held back by usage may pass now
                    self._metrics_changed(t)
                continue
            if next_scan == t:
                self._autoscale(t)
                next_scan += cfg.autoscaler.scan_interval_s
                continue
            pod = int(self.arrival_order[ai])
            ai += 1
            self.metrics.arrivals += 1
            if self.events:
                self._log_arrival(pod, t)
            self._enqueue(pod, t)
        if self.progress:
            self.progress(self.end_s - last_progress)
        waits = [self.end_s - self.queued_at[p] for p in self.queue.pending]
        result = self.metrics.result(unschedulable=len(self.queue.pending), still_pending_waits=waits)
        self._settle_decision(self.end_s)
        result.update(self.reward.result())
        wall = time.perf_counter() - wall0
        runtime = {
            "wall_s": wall,
            "decisions_per_s": self.metrics.decisions / self.decision_wall_s if self.decision_wall_s else 0.0,
            "sim_days_per_wall_s": (self.end_s - self.start_s) / 86400 / wall if wall else 0.0,
            "warmup_s": self.measure_s - self.start_s,
        }
        return {"metrics": result, "series_hourly": self.metrics.hourly, "runtime": runtime,
                "latency_hist": self.metrics.latency_histogram(),
                "node_util_hourly": self.metrics.node_util_hourly,
                "node_util_slots": [str(self.cluster.names[n]) for n in self._heatmap_nodes],
                "node_util_ceiling": [round(float(x), 4) for x in self._cpu_cores[self._heatmap_nodes]
                                      / self.cluster.allocatable[self._heatmap_nodes, 0]]}


def open_event_log(path: Path | None, detail: bool = False) -> tuple[EventLog | None, TextIO | None]:
    if path is None:
        return None, None
    stream = open(path, "w", encoding="utf-8")
    return EventLog(stream, detail), stream
