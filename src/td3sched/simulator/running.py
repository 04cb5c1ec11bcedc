"""The running pods, with the columns a tick and a usage refresh read kept beside each one.

A tick walks every running pod (about 20,000 on dlrm) and reads each one's node, usage profile,
size, ``cpu.weight``, latency class, base latency, CPU usage and whether its container is crashed;
the 5-minute usage refresh reads its sizes and limits. Read through the per-pod arrays (9.8 million
pods on dlrm), every one of those reads is a cache and TLB miss; read from arrays kept in the
running pods' own order (slots), they are sequential. A pod's slot columns are copied when it
starts running and move with it when another pod's departure fills the gap (the set keeps its
slots dense: removal swaps the last slot into the hole). All are constant while the pod runs but
its CPU usage and crash state, which the simulation copies again whenever it changes them
(``RunningPods.sync``, and ``kernels.refresh_pod_usage``).

``RunningPods`` holds the arrays; ``add_running`` and ``remove_running`` are the two compiled
moves, called by both the Python event path (``engine.Simulation``) and the compiled one
(``fastpath.run_events``). The slot arrays grow by doubling (``reserve``), so memory follows the
number of pods running at once, not the workload's size.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SIZE_CPU, CPU_LIMIT, SIZE_MEM, MEM_LIMIT, SIZE_DISK, SIZE_NET = range(6)
"""Rows of ``RunningPods.size``: the workload's ``size_cpu_milli``, ``cpu_limit_milli``,
``size_mem_mib``, ``mem_limit_mib``, ``size_disk_mbps`` and ``size_net_mbps`` of the slot's pod."""
SIZE_COLUMNS = ("size_cpu_milli", "cpu_limit_milli", "size_mem_mib", "mem_limit_mib", "size_disk_mbps",
                "size_net_mbps")


class RunningPods:
    """The running pods in ``pods[:n]`` (slots, any order) and ``pos[pod]`` each one's slot (-1: not
    running), with per-slot copies of the pod columns a tick and a usage refresh read (``node``,
    ``profile``, ``weight``, ``size`` [6, slots] by the row constants, ``base_ms``,
    ``latency_sensitive``, ``cpu``, ``crashed``) and a per-slot scratch (``pressure``, written by
    ``kernels.tick_cpu``).

    The copies come from the workload ``w`` (``profile``, ``app``, ``latency_sensitive`` and
    ``SIZE_COLUMNS``), the pods' ``cpu_weight``, ``base_ms`` per app, and the simulation's
    ``pod_usage[:, 0]`` and ``crashed``, which it keeps writing (``sync``)."""

    SLOT_COLUMNS = ("pods", "node", "profile", "weight", "size", "base_ms", "latency_sensitive", "cpu", "crashed",
                    "pressure")

    def __init__(self, w, cpu_weight: np.ndarray, base_ms: np.ndarray, pod_usage: np.ndarray, crashed: np.ndarray,
                 capacity: int = 1024):
        n_pods = len(w.profile)
        sizes = tuple(np.asarray(getattr(w, name), dtype=np.float64) for name in SIZE_COLUMNS)
        for name, a in (("cpu_weight", cpu_weight), ("app", w.app), ("latency_sensitive", w.latency_sensitive),
                        ("pod_usage", pod_usage), ("crashed", crashed), *zip(SIZE_COLUMNS, sizes)):
            if len(a) != n_pods:
                raise ValueError(f"RunningPods: {name} has {len(a)} pods, profile {n_pods}: expected one per pod")
        self.sources = (w.profile, cpu_weight, sizes, w.app, np.asarray(base_ms, dtype=np.float64),
                        w.latency_sensitive, pod_usage, crashed)
        self._pod_usage, self._crashed = pod_usage, crashed  # what ``sync`` copies
        self.pos = np.full(n_pods, -1, dtype=np.int64)
        self.count = np.zeros(1, dtype=np.int64)
        capacity = max(int(capacity), 1)
        self.pods = np.empty(capacity, dtype=np.int64)
        self.node = np.empty(capacity, dtype=np.int64)
        self.profile = np.empty(capacity, dtype=w.profile.dtype)
        self.weight = np.empty(capacity, dtype=cpu_weight.dtype)
        self.size = np.empty((len(SIZE_COLUMNS), capacity), dtype=np.float64)
        self.base_ms = np.empty(capacity, dtype=np.float64)
        self.latency_sensitive = np.empty(capacity, dtype=np.bool_)
        self.cpu = np.empty(capacity, dtype=np.float64)
        self.crashed = np.empty(capacity, dtype=np.bool_)
        self.pressure = np.zeros(capacity, dtype=np.float64)

    @property
    def n(self) -> int:
        return int(self.count[0])

    @property
    def capacity(self) -> int:
        return len(self.pods)

    @property
    def slots(self) -> tuple[np.ndarray, ...]:
        """The slot arrays in ``add_running``'s order (pods, node, profile, weight, size, base_ms,
        latency_sensitive, cpu, crashed)."""
        return (self.pods, self.node, self.profile, self.weight, self.size, self.base_ms, self.latency_sensitive,
                self.cpu, self.crashed)

    def reserve(self, more: int) -> None:
        """Room for ``more`` pods beyond those running (doubling), before a caller that cannot grow
        the arrays (the compiled loop) adds them."""
        need = self.n + int(more)
        if need <= self.capacity:
            return
        capacity = self.capacity
        while capacity < need:
            capacity *= 2
        n = self.n
        for name in self.SLOT_COLUMNS:
            old = getattr(self, name)
            new = np.zeros(old.shape[:-1] + (capacity,), dtype=old.dtype)
            new[..., :n] = old[..., :n]
            setattr(self, name, new)

    def add(self, pod: int, node: int) -> None:
        self.reserve(1)
        add_running(pod, node, self.pos, self.count, *self.slots, *self.sources)

    def remove(self, pod: int) -> None:
        remove_running(pod, self.pos, self.count, *self.slots)

    def sync(self, pod: int) -> None:
        """A pod's CPU usage or crash state changed: copy them into its slot, if it has one (a pod
        whose container is killed as it is bound gets them when it is added)."""
        s = self.pos[pod]
        if s >= 0:
            self.cpu[s] = self._pod_usage[pod, 0]
            self.crashed[s] = self._crashed[pod]


@njit(cache=True, nogil=True)
def add_running(pod, node, pos, count, pods, slot_node, slot_profile, slot_weight, slot_size, slot_base_ms, slot_ls,
                slot_cpu, slot_crashed, profile, cpu_weight, sizes, app, base_ms, latency_sensitive, pod_usage,
                crashed):
    """``pod`` starts running on ``node``: it takes the next slot, with its columns. The caller has
    made room (``RunningPods.reserve``)."""
    s = count[0]
    pods[s] = pod
    pos[pod] = s
    slot_node[s] = node
    slot_profile[s] = profile[pod]
    slot_weight[s] = cpu_weight[pod]
    for r in range(len(sizes)):
        slot_size[r, s] = sizes[r][pod]
    slot_base_ms[s] = base_ms[app[pod]]
    slot_ls[s] = latency_sensitive[pod]
    slot_cpu[s] = pod_usage[pod, 0]
    slot_crashed[s] = crashed[pod]
    count[0] = s + 1


@njit(cache=True, nogil=True)
def remove_running(pod, pos, count, pods, slot_node, slot_profile, slot_weight, slot_size, slot_base_ms, slot_ls,
                   slot_cpu, slot_crashed):
    """``pod`` stops running: the last slot moves into its slot, columns and all."""
    s, last = pos[pod], count[0] - 1
    moved = pods[last]
    pods[s] = moved
    pos[moved] = s
    slot_node[s] = slot_node[last]
    slot_profile[s] = slot_profile[last]
    slot_weight[s] = slot_weight[last]
    for r in range(slot_size.shape[0]):
        slot_size[r, s] = slot_size[r, last]
    slot_base_ms[s] = slot_base_ms[last]
    slot_ls[s] = slot_ls[last]
    slot_cpu[s] = slot_cpu[last]
    slot_crashed[s] = slot_crashed[last]
    pos[pod] = -1
    count[0] = last
