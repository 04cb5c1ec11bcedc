"""The discrete-event loop: arrivals, scheduling cycles, departures, usage ticks, scrapes, OOM kills
and the autoscaler, in time order.

At equal times events run in this order: departures, nodes becoming ready, the usage tick, the
metrics scrape, arrivals. Each arrival gets a scheduling cycle at once (kube-scheduler pops new pods
from its active queue); a pod that fits nowhere waits in the pending queue and is retried, in
arrival order, when a pod leaves a node it could use, when a node becomes ready, and at every tick.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

import numpy as np

from td3sched.metrics.collector import MetricsCollector
from td3sched.metrics.fragmentation import TypicalPods, node_fragmentation
from td3sched.policy.base import Policy, PolicyContext, PodRequest
from td3sched.reward import RewardConfig, RewardTracker, overload
from td3sched.simulator.cluster import GPU_MILLI, Cluster, Pool
from td3sched.simulator.config import SimConfig
from td3sched.simulator.filter import choose_gpus, fit_matrix, fits_one, gpu_summary
from td3sched.simulator.metrics_pipeline import MetricsPipeline
from td3sched.simulator.usage import Hindsight, pod_usage
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE, Workload
from td3sched.workload.profiles import UsageProfiles

FUTURE, PENDING, RUNNING, DONE = 0, 1, 2, 3
HEATMAP_NODES = 256
"""Node slots (evenly spaced) whose hourly CPU utilisation a run records for heatmaps."""
_DEPART, _READY = 0, 1


@dataclass(frozen=True)
class World:
    """Everything a run needs besides the policy and the seed."""

    pools: tuple[Pool, ...]
    workload: Workload
    profiles: UsageProfiles
    config: SimConfig
    typical: TypicalPods
    reward: RewardConfig = RewardConfig()


class EventLog:
    """Every event of a run as JSON lines, for audits and independent recomputation."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, t: float, kind: str, **fields) -> None:
        self.stream.write(json.dumps({"t": round(t, 3), "event": kind, **fields}) + "\n")


class Simulation:
    """One run of one policy over ``[start_s, end_s)`` of a world."""

    def __init__(self, world: World, policy: Policy, seed: int, start_s: float, end_s: float,
                 events: EventLog | None = None, progress: Callable[[float], None] | None = None):
        if not end_s > start_s:
            raise ValueError(f"span [{start_s}, {end_s}) is empty: expected end_s > start_s")
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
        self.pipeline = MetricsPipeline(c.size, 4, self.cfg.scrape_s, self.cfg.window_s)
        c.empty_since[c.provisioned] = self.start_s  # the span's first nodes are new, not idle since t=0

        p = len(w)
        self.state = np.full(p, FUTURE, dtype=np.int8)
        self.node = np.full(p, -1, dtype=np.int64)
        self.gpus: list[np.ndarray | None] = [None] * p
        self.remaining = w.duration_s.astype(np.float64).copy()
        self.started = np.full(p, np.nan)
        self.queued_at = np.full(p, np.nan)
        self.flagged = np.zeros(p, dtype=bool)
        self.over_limit = np.zeros(p, dtype=bool)
        """Memory above its limit at the last tick (one container OOM per crossing)."""
        self.breaching = np.zeros(p, dtype=bool)
        """Latency above its SLO at the last tick (one SLA violation per breach episode)."""
        self.gen = np.zeros(p, dtype=np.int64)
        self.pod_usage = np.zeros((p, 4))
        self.nonzero = np.column_stack([
            np.where(w.request[:, 0] > 0, w.request[:, 0], 100.0),
            np.where(w.request[:, 1] > 0, w.request[:, 1], 200.0),
        ])
        self.app_capped = np.zeros(len(w.app_names), dtype=bool)
        """Apps with an anti-affinity cap on any pod: every pod of such an app counts against it."""
        self.app_capped[w.app[w.max_per_node > 0]] = True
        self.pending: list[int] = []
        self.running = np.empty(p, dtype=np.int64)
        """Running pods in running[:n_running], any order; run_pos[pod] is a pod's slot in it."""
        self.run_pos = np.full(p, -1, dtype=np.int64)
        self.n_running = 0
        self.heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0

        lat = self.cfg.latency
        lat_rng = np.random.default_rng([seed, 7])
        self.base_ms = lat.base_median_ms * np.exp(lat.base_sigma * lat_rng.standard_normal(len(w.app_names)))
        self.ls_index = np.flatnonzero(w.latency_sensitive)

        # Pods alive when the span starts enter at start_s with what is left of their run time.
        alive = (w.arrival_s < self.start_s) & (w.arrival_s + w.duration_s > self.start_s)
        self.remaining[alive] = w.arrival_s[alive] + w.duration_s[alive] - self.start_s
        in_span = (w.arrival_s >= self.start_s) & (w.arrival_s < self.end_s)
        self.arrival_order = np.flatnonzero(alive | in_span)
        self.arrival_time = np.maximum(w.arrival_s[self.arrival_order], self.start_s)
        self.metrics = MetricsCollector(self.end_s - self.start_s, self.cfg.tick_s)
        policy.attach(PolicyContext(c, self.cfg.scrape_s, self.cfg.window_s, world.typical, self.pipeline,
                                    oom_kills=lambda: self.metrics.oom_kills,
                                    hindsight=Hindsight(w, world.profiles, self.cfg, lambda pod: self.remaining[pod])))
        self.frag_cache = np.zeros(c.size)
        self.dirty = np.ones(c.size, dtype=bool)
        self.decision_wall_s = 0.0
        self.reward = RewardTracker(world.reward)
        self._max_nodes = float(c.size)
        self._frag_memo: dict[bytes, float] = {}
        self._inv_alloc_cpu = 1.0 / c.allocatable[:, 0]
        self._provisioned_changed()
        self._heatmap_nodes = np.unique(np.linspace(0, c.size - 1, min(c.size, HEATMAP_NODES)).astype(np.int64))
        self._slot, self._slot_shape = -1, np.empty((4, 0))
        self._usage_slot = -1
        self._safety_cpu_milli = self.cfg.safety_cpu_util * self.cluster.allocatable[:, 0]
        self._mem_capacity = self.cluster.allocatable[:, 1] + self.cluster.overhead[:, 1]
        lat = self.cfg.latency
        self._lat_weights = np.array([lat.weight_cpu, lat.weight_disk, lat.weight_net])
        self._lat_capacity = np.ascontiguousarray(self.cluster.capacity_usage[:, [0, 2, 3]])

    # --- pod usage -------------------------------------------------------------------------------
    def _usage_of(self, pods, t: float) -> np.ndarray:
        """Real usage of a pod ([4]) or pods ([k, 4]) now: CPU milli (throttled at the limit), memory
        MiB, disk MB/s, network Mbit/s."""
        w, prof = self.w, self.world.profiles
        slot = prof.slot(t)
        if slot != self._slot:  # one contiguous [4, V] copy per profile slot
            self._slot, self._slot_shape = slot, np.ascontiguousarray(prof.shape[:, :, slot])
        return pod_usage(w, self.cfg, pods, self._slot_shape[:, w.profile[pods]])

    # --- scheduling cycle ------------------------------------------------------------------------
    def feasible(self, pod: int) -> np.ndarray:
        """Indices of the nodes that pass Filter for ``pod``."""
        w, c = self.w, self.cluster
        k = self.pool_to_cluster[w.pool[pod]]
        sl = c.pool_slice[k] if k >= 0 else slice(0, c.size)
        gpu_free = c.gpu_capacity[sl] - c.gpu_used[sl] if w.gpu_count[pod] else c.gpu_used[sl]
        ok = c.ready[sl] & fits_one(c.free[sl], gpu_free, w.request[pod], int(w.gpu_count[pod]),
                                    int(w.gpu_milli[pod]))
        cap = w.max_per_node[pod]
        if cap > 0:
            counts = c.app_count.get(int(w.app[pod]))
            if counts is not None:
                ok &= counts[sl] < cap
        ok &= c.observed[sl, 0] <= self._safety_cpu_milli[sl]
        if w.qos[pod] == BEST_EFFORT:  # node.kubernetes.io/memory-pressure taint
            ok &= c.observed[sl, 1] < c.memory_pressure_mib[sl]
        return np.flatnonzero(ok) + sl.start

    def pod_request(self, pod: int, t: float) -> PodRequest:
        w = self.w
        return PodRequest(pod, w.request[pod], int(w.gpu_count[pod]), int(w.gpu_milli[pod]), int(w.qos[pod]),
                          float(w.cpu_limit_milli[pod]), float(w.mem_limit_mib[pod]), t)

    def schedule(self, pod: int, t: float) -> bool:
        """One scheduling cycle: Filter, Score, Select (ties at random), Bind."""
        t0 = time.perf_counter()
        nodes = self.feasible(pod)
        self.metrics.decisions += 1
        req = self.pod_request(pod, t) if len(nodes) else None
        if req is not None:
            keep = self.policy.filter(req, nodes, self.cluster)
            if keep is not None:
                nodes = nodes[keep]
        if len(nodes) == 0:
            self.decision_wall_s += time.perf_counter() - t0
            return False
        scores = np.asarray(self.policy.score(req, nodes, self.cluster), dtype=np.float64)
        top = scores.max() if scores.shape == nodes.shape else np.nan
        if not np.isfinite(top):  # NaN propagates through max
            raise ValueError(f"policy {self.policy.name!r} returned scores of shape {scores.shape} with "
                             f"maximum {top} for {len(nodes)} nodes: expected finite scores, one per node")
        best = np.flatnonzero(scores == top)
        choice = best[0] if len(best) == 1 else best[self.rng.integers(len(best))]
        node = int(nodes[choice])
        self._bind(pod, node, t)
        self.policy.bound(req, node, self.cluster)
        self._reward_step()
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
            g = choose_gpus(c.gpu_capacity[node] - c.gpu_used[node], int(w.gpu_count[pod]), int(w.gpu_milli[pod]))
            c.gpu_used[node, g] += int(w.gpu_milli[pod])
            self.gpus[pod] = g
        if self.app_capped[w.app[pod]]:
            app = int(w.app[pod])
            if app not in c.app_count:
                c.app_count[app] = np.zeros(c.size, dtype=np.int64)
            c.app_count[app][node] += 1
        usage = self._usage_of(pod, t)
        if usage[1] > w.mem_limit_mib[pod]:
            usage = self._limit_memory(np.array([pod]), usage[None, :], t)[0]
        self.pod_usage[pod] = usage
        c.usage[node] += usage
        self.dirty[node] = True
        self.state[pod] = RUNNING
        self.node[pod] = node
        self.running[self.n_running] = pod
        self.run_pos[pod] = self.n_running
        self.n_running += 1
        self.started[pod] = t
        wait = t - self.queued_at[pod]
        self.metrics.pending_waits.append(wait)
        if wait > self.cfg.sla_pending_s and not self.flagged[pod]:
            self.metrics.pending_violations += 1
        if math.isfinite(self.remaining[pod]):
            self._push(t + self.remaining[pod], _DEPART, pod, int(self.gen[pod]))

    def _release(self, pod: int, t: float) -> int:
        """Take a running pod off its node; returns the node."""
        w, c = self.w, self.cluster
        node = int(self.node[pod])
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
        if self.app_capped[w.app[pod]]:
            c.app_count[int(w.app[pod])][node] -= 1
        c.usage[node] -= self.pod_usage[pod]
        self.pod_usage[pod] = 0.0
        self.over_limit[pod] = False
        self.breaching[pod] = False
        self.dirty[node] = True
        self.node[pod] = -1
        self.gen[pod] += 1
        slot, last = self.run_pos[pod], self.running[self.n_running - 1]
        self.running[slot] = last
        self.run_pos[last] = slot
        self.run_pos[pod] = -1
        self.n_running -= 1
        return node

    def _push(self, t: float, kind: int, a: int, b: int) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, kind, self._seq, a, b))

    def _enqueue(self, pod: int, t: float) -> None:
        self.state[pod] = PENDING
        self.queued_at[pod] = t
        self.flagged[pod] = False
        bisect.insort(self.pending, pod)

    def _retry(self, t: float, node: int | None = None) -> None:
        """Retry pending pods in arrival order: those that fit ``node``, or all that fit anywhere
        (a vectorised pre-check of resources and GPUs; Filter decides)."""
        if not self.pending:
            return
        pend = np.array(self.pending, dtype=np.int64)
        c, w = self.cluster, self.w
        if node is not None:
            if not c.ready[node]:
                return
            gpu_free = (c.gpu_capacity[node] - c.gpu_used[node])[None]
            pool = self.pool_to_cluster[w.pool[pend]]
            ok = fit_matrix(c.free[node][None], gpu_free, w.request[pend], w.gpu_count[pend], w.gpu_milli[pend])[0]
            ok &= (pool < 0) | (pool == c.pool_of[node])
        else:
            ready = np.flatnonzero(c.ready)
            if len(ready) == 0:
                return
            # the best of each resource over ready nodes: a necessary condition for fitting one
            largest, whole = gpu_summary(c.gpu_capacity[ready] - c.gpu_used[ready])
            best_gpu = np.array([[largest.max(), whole.max()]])
            best = np.column_stack([c.free[ready].max(axis=0)[None], best_gpu])
            ok = fit_matrix(best[:, :4], np.array([[best_gpu[0, 0]] + [GPU_MILLI] * int(best_gpu[0, 1])]),
                            w.request[pend], w.gpu_count[pend], w.gpu_milli[pend])[0]
        cand = pend[ok]
        if len(cand) == 0:
            return
        # Pods alike in everything Filter reads form one class; a class that failed stays infeasible
        # for the rest of this pass (the cluster only fills up during it).
        capped = self.app_capped[w.app[cand]]
        keys = np.column_stack([w.request[cand], w.gpu_count[cand], w.gpu_milli[cand], w.pool[cand],
                                np.where(capped, w.app[cand], -1), w.max_per_node[cand],
                                w.qos[cand] == BEST_EFFORT])
        _, cls = np.unique(keys, axis=0, return_inverse=True)
        failed = np.zeros(int(cls.max()) + 1, dtype=bool)
        for pod, k in zip(cand.tolist(), cls.ravel().tolist()):
            if failed[k]:
                continue
            if self.schedule(pod, t):
                self.pending.remove(pod)
            else:
                failed[k] = True

    # --- departures, kills, ticks --------------------------------------------------------------------
    def _depart(self, pod: int, t: float) -> None:
        node = self._release(pod, t)
        self.state[pod] = DONE
        if self.events:
            self.events.write(t, "departure", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]))
        self._retry(t, node)

    def _kill(self, pod: int, t: float) -> None:
        node = self._release(pod, t)
        self.remaining[pod] = max(self.remaining[pod] - (t - self.started[pod]), 0.0)
        self.metrics.oom_kills += 1
        if self.events:
            self.events.write(t, "oom_kill", pod=str(self.w.name[pod]), node=str(self.cluster.names[node]))
        self._enqueue(pod, t)

    def _tick(self, t: float) -> None:
        c, cfg = self.cluster, self.cfg
        slot = int(t // self.world.profiles.step_s)
        if slot != self._usage_slot:  # profiles are step-wise: usage only moves when the slot does
            self._usage_slot = slot
            self._refresh_usage(t)
        # Node OOM: real memory above capacity (allocatable + system overhead).
        hot = np.flatnonzero(c.usage[:, 1] > self._mem_capacity)
        if len(hot):
            running = self.running[: self.n_running].copy()
            nodes_of = self.node[running]
            for node in hot:
                self._oom_node(int(node), running[nodes_of == node], t)
        self._sample(t)
        if cfg.autoscaler.enabled:
            self._autoscale(t)
        # pods pending too long: one violation per wait
        if self.pending:
            pend = np.array(self.pending, dtype=np.int64)
            late = pend[(t - self.queued_at[pend] > cfg.sla_pending_s) & ~self.flagged[pend]]
            self.flagged[late] = True
            self.metrics.pending_violations += len(late)
        self._retry(t)

    def _refresh_usage(self, t: float) -> None:
        """Re-read every running pod's usage from its profile and rebuild node usage from it."""
        c = self.cluster
        running = self.running[: self.n_running].copy()
        usage = self._limit_memory(running, self._usage_of(running, t), t)
        self.pod_usage[running] = usage
        nodes_of = self.node[running]
        node_usage = np.zeros((c.size, 4))
        for j in range(4):
            node_usage[:, j] = np.bincount(nodes_of, weights=usage[:, j], minlength=c.size)
        node_usage[:, :2] += c.overhead * c.provisioned[:, None]
        c.usage[:] = node_usage

    def _limit_memory(self, pods: np.ndarray, usage: np.ndarray, t: float) -> np.ndarray:
        """Memory above a container's limit OOM-kills the container, which restarts in place at the
        limit; one container OOM is counted each time a pod crosses its limit."""
        w = self.w
        over = usage[:, 1] > w.mem_limit_mib[pods]
        crossed = over & ~self.over_limit[pods]
        self.over_limit[pods] = over
        if over.any():
            self.metrics.container_ooms += int(crossed.sum())
            usage[over, 1] = w.mem_limit_mib[pods[over]]
            if self.events:
                for pod in pods[crossed]:
                    self.events.write(t, "container_oom", pod=str(w.name[pod]))
        return usage

    def _oom_node(self, node: int, pods: np.ndarray, t: float) -> None:
        """Kill ``pods`` of ``node`` in the kernel's order until its memory fits: BestEffort first,
        then Burstable by usage above request, Guaranteed last; largest usage first within a class."""
        w, c = self.w, self.cluster
        mem = self.pod_usage[pods, 1]
        excess = mem - w.request[pods, 1]
        rank = np.where(w.qos[pods] == BEST_EFFORT, 0, np.where(w.qos[pods] == BURSTABLE, 1, 2))
        key = np.where(rank == 1, -excess, -mem)
        order = np.lexsort((pods, key, rank))
        capacity = c.allocatable[node, 1] + c.overhead[node, 1]
        for pod in pods[order]:
            if c.usage[node, 1] <= capacity:
                break
            self._kill(int(pod), t)

    def _refresh_fragmentation(self) -> None:
        """Recompute F_n of the nodes whose free resources changed since the last call. F_n depends
        only on a node's free resources, so values are memoised by that state (exact)."""
        if not self.dirty.any():
            return
        c = self.cluster
        d = np.flatnonzero(self.dirty)
        self.dirty[d] = False
        if len(d) > 8:
            self.frag_cache[d] = node_fragmentation(c.free[d], c.gpu_capacity[d] - c.gpu_used[d], self.world.typical)
            return
        if len(self._frag_memo) > 200_000:
            self._frag_memo.clear()
        for n in d:
            gpu_free = c.gpu_capacity[n] - c.gpu_used[n]
            key = c.free[n].tobytes() + gpu_free.tobytes()
            value = self._frag_memo.get(key)
            if value is None:
                value = float(node_fragmentation(c.free[n][None], gpu_free[None], self.world.typical)[0])
                self._frag_memo[key] = value
            self.frag_cache[n] = value

    def _provisioned_changed(self) -> None:
        c = self.cluster
        self._prov_f = c.provisioned.astype(np.float64)
        self._prov_alloc_cpu = float(self._prov_f @ c.allocatable[:, 0])
        self._prov_count = float(self._prov_f.sum())

    def cluster_fragmentation(self) -> float:
        """The fragmentation metric of the cluster now (provisioned nodes)."""
        self._refresh_fragmentation()
        return float(self.frag_cache @ self._prov_f / self._prov_alloc_cpu) if self._prov_alloc_cpu > 0 else 0.0

    def _reward_step(self) -> None:
        """r_t of the decision just made (reward.py), from the ground truth."""
        m = self.metrics
        events = m.oom_kills + m.slo_breaches + m.pending_violations
        load = overload(self.cluster.usage[:, 0] * self._inv_alloc_cpu, self._prov_f, self.reward.cfg.overload_util)
        self.reward.step(self.cluster_fragmentation(), load, events, self._prov_count / self._max_nodes)

    def _sample(self, t: float) -> None:
        c, w, cfg = self.cluster, self.w, self.cfg
        prov = c.provisioned.astype(np.float64)
        self._refresh_fragmentation()
        alloc = prov @ c.allocatable
        pods_cpu, pods_mem = prov @ c.usage[:, :2] - prov @ c.overhead
        frag = float(self.frag_cache @ prov / alloc[0]) if alloc[0] > 0 else 0.0
        overloaded = int(prov @ (c.usage[:, 0] > cfg.overload_util * c.allocatable[:, 0]))

        lat = cfg.latency
        ls = self.ls_index[self.state[self.ls_index] == RUNNING]
        if len(ls):
            rho = np.minimum(c.usage[:, [0, 2, 3]] / self._lat_capacity, lat.rho_cap)
            factor = 1.0 + ((1.0 / (1.0 - rho) - 1.0) @ self._lat_weights)
            pod_factor = factor[self.node[ls]]
            latency = self.base_ms[w.app[ls]] * pod_factor
            above = pod_factor > lat.slo_factor
            breach_samples = int(above.sum())
            breaches = int((above & ~self.breaching[ls]).sum())
            self.breaching[ls] = above
        else:
            latency, breaches, breach_samples = np.empty(0), 0, 0
        sample = self._heatmap_nodes
        node_util = np.where(c.provisioned[sample], c.usage[sample, 0] / c.allocatable[sample, 0], np.nan)
        self.metrics.tick(pods_cpu=float(pods_cpu), pods_mem=float(pods_mem), alloc_cpu=float(alloc[0]),
                          alloc_mem=float(alloc[1]), fragmentation=frag, nodes=int(prov.sum()),
                          overloaded=overloaded, latency_ms=latency, breaches=breaches,
                          breach_samples=breach_samples, node_util=node_util)

    def _autoscale(self, t: float) -> None:
        c, w, a = self.cluster, self.w, self.cfg.autoscaler
        # Scale down: nodes empty for scale_down_unneeded_s, never below a pool's min_count.
        idle = c.provisioned & c.ready & (c.pod_count == 0) & (t - c.empty_since >= a.scale_down_unneeded_s)
        for k, (pool, sl) in enumerate(zip(c.pools, c.pool_slice)):
            cand = np.flatnonzero(idle[sl]) + sl.start
            room = c.provisioned_count(k) - pool.min_count
            if len(cand) and room > 0:
                gone = cand[::-1][:room]  # highest slots first, so pools stay packed at the front
                c.provisioned[gone] = False
                self._provisioned_changed()
                c.ready[gone] = False
                c.ready_at[gone] = np.inf
                c.empty_since[gone] = np.inf
                c.usage[gone] = 0.0
                c.observed[gone] = 0.0
                self.pipeline.forget(gone)
                self.dirty[gone] = True
                if self.events:
                    for n in gone:
                        self.events.write(t, "node_removed", node=str(c.names[n]))
        if not self.pending:
            return
        # Scale up: pods pending long enough that fit an empty node of their pool.
        pend = np.array(self.pending, dtype=np.int64)
        pend = pend[t - self.queued_at[pend] >= a.pending_threshold_s]
        if len(pend) == 0:
            return
        for k, (pool, sl) in enumerate(zip(c.pools, c.pool_slice)):
            pools = self.pool_to_cluster[w.pool[pend]]
            mine = pend[(pools == k) | (pools < 0)]
            free_slots = np.flatnonzero(~c.provisioned[sl]) + sl.start
            if len(mine) == 0 or len(free_slots) == 0:
                continue
            shape = c.allocatable[free_slots[0]]
            gpu_cap = c.gpu_capacity[free_slots[0]][None, :]
            mine = mine[fit_matrix(shape[None, :], gpu_cap, w.request[mine], w.gpu_count[mine], w.gpu_milli[mine])[0]]
            if len(mine) == 0:
                continue
            need = int(np.ceil((w.request[mine].sum(axis=0) / shape).max()))
            inflight = int((c.provisioned[sl] & ~c.ready[sl]).sum())
            add = free_slots[: max(0, min(need - inflight, len(free_slots)))]
            if len(add) == 0:
                continue
            c.provisioned[add] = True
            self._provisioned_changed()
            c.ready_at[add] = t + a.provision_delay_s
            c.usage[add, :2] = c.overhead[add]  # system daemons run from boot
            for n in add:
                self._push(t + a.provision_delay_s, _READY, int(n), 0)
                if self.events:
                    self.events.write(t, "node_added", node=str(c.names[n]))
            pend = pend[~np.isin(pend, mine)]
            if len(pend) == 0:
                break

    def _node_ready(self, node: int, t: float) -> None:
        c = self.cluster
        if not c.provisioned[node] or c.ready[node]:
            return
        c.ready[node] = True
        c.empty_since[node] = t
        self.dirty[node] = True
        if self.events:
            self.events.write(t, "node_ready", node=str(c.names[node]))
        self._retry(t)

    # --- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict:
        """Run the span; return the metrics (see ``metrics.collector``)."""
        wall0 = time.perf_counter()
        c, cfg = self.cluster, self.cfg
        c.usage[:, :2] = c.overhead * c.provisioned[:, None]
        next_tick = self.start_s
        next_scrape = self.start_s
        ai, n_arr = 0, len(self.arrival_order)
        last_progress = self.start_s
        while True:
            t_arr = self.arrival_time[ai] if ai < n_arr else math.inf
            t_heap = self.heap[0][0] if self.heap else math.inf
            t = min(t_arr, t_heap, next_tick, next_scrape)
            if t >= self.end_s:
                break
            if t_heap == t:
                _, kind, _, a, b = heapq.heappop(self.heap)
                if kind == _DEPART:
                    if self.state[a] == RUNNING and self.gen[a] == b:
                        self._depart(a, t)
                else:
                    self._node_ready(a, t)
                continue
            if next_tick == t:
                self._tick(t)
                next_tick += cfg.tick_s
                if self.progress and t - last_progress >= 3600:
                    self.progress(t - last_progress)
                    last_progress = t
                continue
            if next_scrape == t:
                c.observed[:] = self.pipeline.scrape(c.usage)
                c.last_scrape_s = t
                next_scrape += cfg.scrape_s
                continue
            pod = int(self.arrival_order[ai])
            ai += 1
            self.metrics.arrivals += 1
            if self.events:
                self.events.write(t, "arrival", pod=str(self.w.name[pod]))
            self.queued_at[pod] = t
            if not self.schedule(pod, t):
                self._enqueue(pod, t)
        if self.progress:
            self.progress(self.end_s - last_progress)
        waits = [self.end_s - self.queued_at[p] for p in self.pending]
        result = self.metrics.result(unschedulable=len(self.pending), still_pending_waits=waits)
        result.update(self.reward.result())
        wall = time.perf_counter() - wall0
        runtime = {
            "wall_s": wall,
            "decisions_per_s": self.metrics.decisions / self.decision_wall_s if self.decision_wall_s else 0.0,
            "sim_days_per_wall_s": (self.end_s - self.start_s) / 86400 / wall if wall else 0.0,
        }
        return {"metrics": result, "series_hourly": self.metrics.hourly, "runtime": runtime,
                "latency_hist": self.metrics.latency_histogram(),
                "node_util_hourly": self.metrics.node_util_hourly,
                "node_util_slots": [str(self.cluster.names[n]) for n in self._heatmap_nodes]}


def open_event_log(path: Path | None) -> tuple[EventLog | None, TextIO | None]:
    if path is None:
        return None, None
    stream = open(path, "w", encoding="utf-8")
    return EventLog(stream), stream
