"""Cluster state, one NumPy array per field over all node slots.

Node slots are allocated up front for every pool's maximum size; a slot is *provisioned* while the
autoscaler has the node. Everything a scheduling cycle reads is a vector over nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic.dataclasses import dataclass as pydantic_dataclass

from td3sched.quantities import SETTINGS, CountOrZero, Positive, Weight

from td3sched.workload.pods import SCALAR_RESOURCES

#: Ground-truth usage columns of ``Cluster.usage`` and ``Cluster.observed``.
USAGE_COLUMNS = ("cpu_milli", "mem_mib", "disk_mbps", "net_mbps")
GPU_MILLI = 1000
MEMORY_EVICTION_AVAILABLE = 0.05
"""kubelet eviction-hard ``memory.available<5%``: below 5% available the node is under MemoryPressure."""


@pydantic_dataclass(frozen=True, config=SETTINGS)
class NodeShape:
    """Allocatable resources of one node (what the kubelet reports) and its system overhead."""

    cpu_milli: Positive
    """Allocatable CPU, in milli-cores."""
    mem_mib: Positive
    """Allocatable memory, in MiB."""
    gpus: CountOrZero
    """GPUs on the node."""
    disk_gib: Positive
    """Local disk, in GiB."""
    rdma_pct: Positive
    """RDMA bandwidth, in percent of one NIC (200: two NICs)."""
    disk_mbps: Positive
    """Disk bandwidth, in MB/s."""
    net_mbps: Positive
    """Network bandwidth, in Mbit/s."""
    overhead_cpu_milli: Weight = 0.0
    """CPU the system uses beyond the pods, in milli-cores."""
    overhead_mem_mib: Weight = 0.0
    """Memory the system uses beyond the pods, in MiB."""


@dataclass(frozen=True)
class Pool:
    """A node pool: ``count`` nodes at the start, the autoscaler keeps it in [min_count, max_count]."""

    name: str
    shapes: tuple[NodeShape, ...]
    """One shape per node slot (len = max_count); a homogeneous pool repeats one shape."""
    count: int
    min_count: int = 0

    @property
    def max_count(self) -> int:
        return len(self.shapes)

    def __post_init__(self) -> None:
        if not 0 <= self.min_count <= self.count <= self.max_count:
            raise ValueError(
                f"pool {self.name!r}: expected 0 <= min_count ({self.min_count}) <= count ({self.count}) "
                f"<= max_count ({self.max_count})"
            )


class Cluster:
    """Node arrays. Index ``n`` is a node slot; ``pool_slice[k]`` is pool k's contiguous range."""

    def __init__(self, pools: list[Pool]):
        if not pools:
            raise ValueError("a cluster needs at least one node pool")
        self.pool_names = tuple(p.name for p in pools)
        self.pools = tuple(pools)
        shapes = [s for p in pools for s in p.shapes]
        n = len(shapes)
        self.size = n
        self.pool_of = np.concatenate([np.full(p.max_count, k, dtype=np.int16) for k, p in enumerate(pools)])
        starts = np.cumsum([0] + [p.max_count for p in pools])
        self.pool_slice = tuple(slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:]))
        self.names = np.array([f"{p.name}-{i:04d}" for p in pools for i in range(p.max_count)])

        self.allocatable = np.array(
            [[s.cpu_milli, s.mem_mib, s.disk_gib, s.rdma_pct] for s in shapes], dtype=np.float64
        ).reshape(n, len(SCALAR_RESOURCES))
        self.bandwidth = np.array([[s.disk_mbps, s.net_mbps] for s in shapes], dtype=np.float64).reshape(n, 2)
        self.capacity_usage = np.column_stack([self.allocatable[:, 0], self.allocatable[:, 1], self.bandwidth])
        """[N, 4] capacity of each USAGE_COLUMNS resource: CPU, memory, disk and NIC bandwidth."""
        self.overhead = np.array([[s.overhead_cpu_milli, s.overhead_mem_mib] for s in shapes]).reshape(n, 2)
        self.max_gpus = max([s.gpus for s in shapes] + [1])
        gpu_count = np.array([s.gpus for s in shapes], dtype=np.int64)
        self.gpu_capacity = np.where(np.arange(self.max_gpus)[None, :] < gpu_count[:, None], GPU_MILLI, 0)
        self.gpu_used = np.zeros((n, self.max_gpus), dtype=np.int64)

        self.requested = np.zeros_like(self.allocatable)
        self.free = self.allocatable.copy()
        """allocatable - requested, kept in step with ``requested``."""
        self.nonzero_requested = np.zeros((n, 2))
        """CPU and memory requests with kube-scheduler's non-zero defaults for empty requests."""
        self.pod_count = np.zeros(n, dtype=np.int64)
        self.app_count = np.zeros((0, n), dtype=np.int64)
        """[capped apps, N]: pods per node of each app with an anti-affinity cap (the simulation sizes it
        and maps apps to rows: ``Simulation.app_row``)."""

        self.usage = np.zeros((n, len(USAGE_COLUMNS)))
        """Ground truth node usage: pods' usage plus system overhead (provisioned nodes)."""
        self.observed = np.zeros((n, len(USAGE_COLUMNS)))
        """What the metrics pipeline last published (lagged); policies read only this."""
        self.last_scrape_s = -np.inf
        """When ``observed`` was last published."""

        self.memory_pressure_mib = (self.allocatable[:, 1] + self.overhead[:, 1]) * (1 - MEMORY_EVICTION_AVAILABLE)
        """Observed memory use at which the kubelet reports MemoryPressure (BestEffort pods are then
        kept off the node by the node.kubernetes.io/memory-pressure taint)."""
        self.pressure_until = np.full(n, -np.inf)
        """The MemoryPressure condition holds while ``t < pressure_until``: set to ``t`` + the
        pressure transition period (5 min) whenever the kubelet (real memory) or the metrics (observed
        memory) see less than 5% available."""
        self.provisioned = np.zeros(n, dtype=bool)
        self.ready = np.zeros(n, dtype=bool)
        """Provisioned and past the provisioning delay: schedulable."""
        self.ready_at = np.full(n, np.inf)
        self.empty_since = np.full(n, np.inf)
        for p, sl in zip(pools, self.pool_slice):
            first = np.arange(sl.start, sl.start + p.count)
            self.provisioned[first] = True
            self.ready[first] = True
            self.ready_at[first] = 0.0
            self.empty_since[first] = 0.0

    def gpu_free(self) -> np.ndarray:
        return self.gpu_capacity - self.gpu_used

    def provisioned_count(self, pool: int) -> int:
        return int(self.provisioned[self.pool_slice[pool]].sum())
