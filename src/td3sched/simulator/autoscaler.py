"""cluster-autoscaler in the simulator: scale-up for pods no ready node fits, scale-down of unneeded
nodes by drain (docs/simulator.md §5, "Autoscaler", with the cluster-autoscaler flag behind each
constant in ``simulator.config.Autoscaler``).

``ClusterAutoscaler`` is a part of ``engine.Simulation``: it reads the simulation's cluster, queue
and workload, and acts through its ``_node_requested``, ``_evict``, ``_drain`` and
``_provisioned_changed``.
"""

from __future__ import annotations

import numpy as np

from td3sched.simulator.cluster import GPU_MILLI
from td3sched.simulator.filter import choose_gpus, fits_one
from td3sched.simulator.kernels import requested_utilisation, unneeded_nodes
from td3sched.simulator.queue import RESOURCES


class ClusterAutoscaler:
    """One scan every ``autoscaler.scan_interval_s``: ``_autoscale``."""

    def _autoscale(self, t: float) -> None:
        """One cluster-autoscaler scan: scale up for pods that fit no ready node but fit a pool's
        node template, then scale down unneeded nodes (empty ones in bulk, one drain at most)."""
        if self._scale_up(t):
            self._last_scale_up_s = t
        if t - self._last_scale_up_s >= self.cfg.autoscaler.scale_down_delay_after_add_s:
            self._scale_down(t)

    def _scale_up(self, t: float) -> bool:
        c, a, q = self.cluster, self.cfg.autoscaler, self.queue
        if not q.pending:
            return False
        pend = np.fromiter(q.pending, dtype=np.int64, count=len(q.pending))
        # only pods the scheduler found no node for by resources alone: not held back by a policy or
        # the safety filter (some node fits them), not unschedulable by shape, waited long enough
        pend = pend[(q.reasons[pend] == RESOURCES) & (q.attempts[pend] > 0)
                    & (t - self.queued_at[pend] >= a.new_pod_scale_up_delay_s)]
        added = False
        for k, sl in enumerate(c.pool_slice):
            if len(pend) == 0:
                break
            mine = self._pool_pods(k, pend)
            free_slots = np.flatnonzero(~c.provisioned[sl]) + sl.start
            if len(mine) == 0 or len(free_slots) == 0:
                continue
            inflight = int((c.provisioned[sl] & ~c.ready[sl]).sum())
            add = free_slots[: max(0, min(self._nodes_needed(free_slots[0], mine) - inflight, len(free_slots)))]
            pend = pend[~np.isin(pend, mine)]
            if len(add) == 0:
                continue
            added = True
            c.provisioned[add] = True
            self._provisioned_changed()
            c.ready_at[add] = t + a.provision_delay_s
            c.usage[add, :2] = c.overhead[add]  # system daemons run from boot
            for n in add:
                self._node_requested(int(n), t + a.provision_delay_s)
                if self.events:
                    self._log_node(t, "node_added", int(n))
        return added

    def _pool_pods(self, k: int, pods: np.ndarray) -> np.ndarray:
        """The pods of ``pods`` that pool ``k``'s node template fits and that select the pool or none."""
        cls = self.fit_class[pods]
        return pods[self.template_fits[k, cls] & ((self.class_pool[cls] == k) | (self.class_pool[cls] < 0))]

    def _nodes_needed(self, slot: int, pods: np.ndarray) -> int:
        """cluster-autoscaler's estimate of the nodes of slot ``slot``'s shape that ``pods`` need: the
        largest of their requests' sums over the node's allocatable, GPUs included, rounded up."""
        c, w = self.cluster, self.w
        need = float((w.request[pods].sum(axis=0) / c.allocatable[slot]).max()) if len(pods) else 0.0
        gpus = int((c.gpu_capacity[slot] > 0).sum())
        if gpus:
            need = max(need, float((w.gpu_count[pods] * w.gpu_milli[pods]).sum()) / (gpus * GPU_MILLI))
        return int(np.ceil(need))

    def _start_nodes(self, alive: np.ndarray) -> None:
        """``autoscaler.start_nodes: needed``: start each pool with the nodes that the pods ``alive`` (a
        mask: those the run starts with) need by the scale-up estimate, within [min_count, max_count],
        ready from the start; pods counted for one pool are not counted again. The scale-up provisions
        for whatever they leave pending, as for any pod."""
        c = self.cluster
        pods = np.flatnonzero(alive)
        for k, (pool, sl) in enumerate(zip(c.pools, c.pool_slice)):
            mine = self._pool_pods(k, pods)
            pods = pods[~np.isin(pods, mine)]
            count = min(max(self._nodes_needed(sl.start, mine), pool.min_count), pool.max_count)
            on = np.arange(sl.stop - sl.start) < count
            c.provisioned[sl] = on
            c.ready[sl] = on
            c.ready_at[sl] = np.where(on, self.start_s, np.inf)
            c.empty_since[sl] = np.where(on, self.start_s, np.inf)

    def _requested_utilisation(self) -> np.ndarray:
        """cluster-autoscaler's node utilisation: max of requested CPU and memory over allocatable;
        GPU nodes by requested GPUs alone (simulator/cluster/utilization/info.go)."""
        c = self.cluster
        return requested_utilisation(c.requested, c.allocatable, c.gpu_capacity, c.gpu_used, np.empty(c.size))

    def _scale_down(self, t: float) -> None:
        c, a = self.cluster, self.cfg.autoscaler
        ripe = self._ripe_scratch
        if not unneeded_nodes(c.requested, c.allocatable, c.gpu_capacity, c.gpu_used, c.provisioned, c.ready,
                              a.scale_down_utilization_threshold, self._unneeded_since, t, a.scale_down_unneeded_s,
                              self._util_scratch, ripe):
            return
        room = np.array([c.provisioned_count(k) - p.min_count for k, p in enumerate(c.pools)])
        empty = np.flatnonzero(ripe & (c.pod_count == 0))[::-1][: a.max_empty_bulk_delete]  # highest slots first
        gone = []
        for n in empty:
            if room[c.pool_of[n]] > 0:
                room[c.pool_of[n]] -= 1
                gone.append(int(n))
        self._remove_nodes(np.array(gone, dtype=np.int64), t)
        busy = np.flatnonzero(ripe & (c.pod_count > 0))
        busy = busy[room[c.pool_of[busy]] > 0]
        if len(busy) == 0:
            return
        util = self._requested_utilisation()[busy]
        for n in busy[np.argsort(util, kind="stable")][: a.scale_down_non_empty_candidates]:
            run = self.running_pods
            pods = run.pods[: run.n][run.node[: run.n] == n]
            if self._fit_elsewhere(int(n), pods):
                for pod in pods:
                    self._evict(int(pod), t)
                self._remove_nodes(np.array([n]), t)
                self._drain(t)
                return

    def _fit_elsewhere(self, node: int, pods: np.ndarray) -> bool:
        """Would every pod of ``node`` fit some other ready node (resources, GPUs, pool and
        anti-affinity; first fit, largest CPU request first, on a scratch copy of free resources)?"""
        c, w = self.cluster, self.w
        free = c.free.copy()
        gpu_free = c.gpu_capacity - c.gpu_used
        ready = c.ready.copy()
        ready[node] = False
        for pod in pods[np.argsort(-w.request[pods, 0], kind="stable")]:
            k = self.pool_to_cluster[w.pool[pod]]
            ok = ready & fits_one(free, gpu_free, w.request[pod], int(w.gpu_count[pod]), int(w.gpu_milli[pod]))
            if k >= 0:
                ok &= c.pool_of == k
            cap = w.max_per_node[pod]
            if cap > 0:
                ok &= c.app_count[self.app_row[w.app[pod]]] < cap
            where = np.flatnonzero(ok)
            if len(where) == 0:
                return False
            target = int(where[0])
            free[target] -= w.request[pod]
            if w.gpu_count[pod]:
                g = choose_gpus(gpu_free[target], int(w.gpu_count[pod]), int(w.gpu_milli[pod]))
                gpu_free[target, g] -= int(w.gpu_milli[pod])
        return True

    def _remove_nodes(self, gone: np.ndarray, t: float) -> None:
        if len(gone) == 0:
            return
        c = self.cluster
        c.provisioned[gone] = False
        self._provisioned_changed()
        c.ready[gone] = False
        c.ready_at[gone] = np.inf
        c.empty_since[gone] = np.inf
        c.usage[gone] = 0.0
        c.observed[gone] = 0.0
        c.pressure_until[gone] = -np.inf
        self._next_evict_s[gone] = -np.inf
        self._unneeded_since[gone] = np.inf
        self.pipeline.forget(gone)
        self.dirty[gone] = True
        if self.events:
            for n in gone:
                self.events.write(t, "node_removed", node=str(c.names[n]))
