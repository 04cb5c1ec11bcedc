"""The shadow state: what the engine knows of the cluster's nodes, kept current in the background so
that a decision never waits on Prometheus or the API server.

A ``NodeSnapshot`` is one immutable picture of every known node, published whole by a source
(``prometheus_source``, ``simulator_source``) and swapped in atomically: a decision reads one
snapshot from start to end. It carries the arrays the shared scoring code reads from the simulator's
``Cluster`` (``allocatable``, ``capacity_usage``, ``observed``, ``ready``), so that
``policy.features.utilisation`` and ``rl.observation.observe`` run on it unchanged, plus each node's
scrape time (metrics have their own age per node).

The assign cache (``policy.assign_cache``, the simulator's own piece) is fed by ``ReportBinding``
and by the pod watch (``kubernetes_source``): each bound pod's CPU and memory request is added to its
node's observed usage until a scrape of that node newer than the binding has seen it. A binding
reported by both (the same namespace/name to the same node) counts once.

The node inventory (``NodeInventory``, from the node watch) is the cluster's node set as the API
server lists it, with each node's allocatable, GPUs and pool. Once the state has one, every published
snapshot is the inventory's nodes with their allocatable, joined by name with the metrics source's
observed usage and scrape times (a node without metrics has NaN: stale); without one, the metrics
source's nodes and capacities are used as they come.

The pods' requests per node (``set_requested``, ``add_requested``, from the pod watch) are rows of
``REQUESTED_COLUMNS``: the non-zero CPU and memory requests (``NodeSnapshot.nonzero_requested``) and
the requests themselves, GPUs included. With an inventory they also give each snapshot its
``Allocation``: allocatable minus requests, and the nodes' whole GPUs with the requested ones taken.

The pods' workloads per node (``set_pods``, ``place_pod``, ``remove_pod``): each bound pod's controller
(``PodSpec.owner``), counted per node (``policy.siblings.Siblings``), so that a decision can lower the nodes
that run the pod's siblings (a sibling spread). The pod watch lists and follows them; ``ReportBinding``
counts a binding at once (before the watch sees it), and the watch's report of the same pod on the same
node is the same pod. Without a pod watch the state does not know them (``sibling_counts`` is None).

The pods the engine has answered for and whose binding has not been reported yet (``expect_pod``): as
kube-scheduler assumes a pod on its node before binding it, the state counts such a pod, for at most
``EXPECT_S``, on the nodes its answer ranked first (1/m on each of m tied ones): its requests in their
usage (``recent_usage``) and, with an owner, as a sibling there (``sibling_counts``). Its binding's
report (``report_binding``, ``place_pod``) takes it from there to the node it went to.

Staleness (``Staleness``): a node's metrics are stale when older than ``max_age_s`` or missing (a
node no source has reported, or a NaN value). Stale nodes get ``mode``'s treatment:
``fail-open`` (default) scores them neutral and lets them pass the safety filter; ``fail-closed``
filters them out.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numba import njit

from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import PodRequest
from td3sched.policy.siblings import Siblings
from td3sched.simulator.cluster import USAGE_COLUMNS

ASSIGN_HORIZON_S = 600.0
"""A binding is forgotten after this long even if no scrape of its node came (a node gone quiet)."""
EXPECT_S = 30.0
"""How long a pod the engine scored counts on the nodes its answer ranked first (``expect_pod``) before its
binding is reported: kube-scheduler binds in milliseconds to seconds; a pod still unbound then (it waits
in the queue) stops counting there."""
DEFAULT_NIC_MBIT = 10_000.0
"""NIC capacity of a node whose metrics do not give one (10 Gbit/s, as the Prometheus source)."""


@njit(cache=True, nogil=True)
def fresh_candidates(idx, scraped_at_s, complete, now, max_age_s, out):
    """``ShadowState.fresh`` of candidates ``idx`` (node indices, -1: unknown, never fresh) into ``out``,
    in one pass; returns how many are fresh."""
    count = 0
    for j in range(idx.shape[0]):
        i = idx[j]
        ok = i >= 0 and now - scraped_at_s[i] <= max_age_s and complete[i]
        out[j] = ok
        count += ok
    return count


def binding_key(namespace: str, name: str) -> str:
    """The pod a binding is about, as ``ReportBinding`` and the pod watch both name it (an empty
    namespace is Kubernetes' ``default``)."""
    return f"{namespace or 'default'}/{name}"


REQUESTED_COLUMNS = ("nonzero_cpu_milli", "nonzero_mem_mib", "cpu_milli", "mem_mib", "disk_gib", "rdma_pct", "gpus")
"""What the pods bound to a node request of it, per node: kube-scheduler's non-zero CPU and memory (its
defaults for an empty request), then CPU milli, memory MiB, disk GiB, RDMA % and whole GPUs as asked."""


def requested_row(request: PodRequest) -> np.ndarray:
    """One pod's ``REQUESTED_COLUMNS``."""
    return np.concatenate([request.nonzero_cpu_mem, request.request, [float(request.gpu_count)]])


def _checked_requested_row(row, what: str) -> np.ndarray:
    """``row`` as a copy of ``REQUESTED_COLUMNS`` floats, or a ValueError naming ``what`` and the row."""
    row = np.asarray(row, dtype=float)
    if row.shape != (len(REQUESTED_COLUMNS),) or not np.isfinite(row).all():
        raise ValueError(f"{what}: {row.tolist()}: expected {len(REQUESTED_COLUMNS)} finite numbers "
                         f"({', '.join(REQUESTED_COLUMNS)})")
    return row.copy()


def gpu_layout(gpus: np.ndarray, used: np.ndarray, width: int | None = None) -> np.ndarray:
    """[N, width] (default: max(1, most GPUs)) free milli-GPU per device of nodes with ``gpus`` whole
    GPUs, ``used`` of them requested: the free ones first, then the taken ones, then 0 beyond a node's
    count. A v1.Pod asks whole GPUs, so which devices hold them changes neither the fit nor the
    fragmentation of whole-GPU pods."""
    gpus = np.asarray(gpus, dtype=np.int64)
    free = np.clip(gpus - np.asarray(used, dtype=np.int64), 0, gpus)
    width = max(1, int(gpus.max(initial=0))) if width is None else width
    return np.where(np.arange(width)[None, :] < free[:, None], 1000, 0).astype(np.int64)


@dataclass(frozen=True)
class Allocation:
    """What the pods bound to each node hold of it, as the scheduler books it (requests, not usage), and
    each node's pool: what a model with a fragmentation share scores by (``policy.fgd``). Rows are a
    snapshot's nodes."""

    free: np.ndarray
    """[N, 4] allocatable minus the bound pods' requests: CPU milli, memory MiB, disk GiB, RDMA %
    (``Cluster.free``)."""
    gpu_free: np.ndarray
    """[N, G] free milli-GPU of each of a node's GPUs (0 beyond its GPU count; ``Cluster.gpu_free``)."""
    pool: tuple[str, ...]
    """Each node's pool name ("" when unknown): which typical pods its fragmentation is measured with."""

    def __post_init__(self):
        object.__setattr__(self, "free", np.ascontiguousarray(self.free, dtype=np.float64))
        object.__setattr__(self, "gpu_free", np.ascontiguousarray(self.gpu_free, dtype=np.int64))
        object.__setattr__(self, "pool", tuple(str(p) for p in self.pool))
        n = len(self.pool)
        if self.free.shape != (n, 4) or self.gpu_free.ndim != 2 or len(self.gpu_free) != n:
            raise ValueError(f"node allocation: free {self.free.shape}, gpu_free {self.gpu_free.shape} for {n} pool "
                             f"names: expected [{n}, 4] and [{n}, G]")
        if not np.isfinite(self.free).all() or not ((self.gpu_free >= 0) & (self.gpu_free <= 1000)).all():
            raise ValueError("node allocation: expected finite free resources and free milli-GPU in [0, 1000]")
        names = tuple(dict.fromkeys(self.pool))
        code = {name: k for k, name in enumerate(names)}
        object.__setattr__(self, "pool_names", names)
        """The distinct pool names, in first-seen order."""
        object.__setattr__(self, "pool_code", np.fromiter(map(code.__getitem__, self.pool), dtype=np.int64, count=n))
        """[N] each node's index into ``pool_names``."""


@dataclass(frozen=True)
class NodeSnapshot:
    """Every known node at one moment; arrays indexed like ``names``."""

    names: tuple[str, ...]
    allocatable: np.ndarray
    """[N, 4] CPU milli, memory MiB, disk GiB, RDMA % (``workload.pods.SCALAR_RESOURCES``)."""
    capacity_usage: np.ndarray
    """[N, 4] capacity of each ``USAGE_COLUMNS`` resource (CPU milli, memory MiB, disk and NIC)."""
    observed: np.ndarray
    """[N, 4] observed usage in ``USAGE_COLUMNS`` units; NaN where a metric is missing."""
    scraped_at_s: np.ndarray
    """[N] time of each node's metrics (-inf: never)."""
    oom_kills_recent: float = 0.0
    """Node OOM kills over the last 5 minutes, all nodes together (the observation's field 32)."""
    taken_at_s: float = 0.0
    nonzero_requested: np.ndarray | None = None
    """[N, 2] CPU milli and memory MiB requested by the pods bound to each node (kube-scheduler's
    non-zero defaults for an empty request), as ``Cluster.nonzero_requested``; None when the source
    does not know them (metrics alone). What a model with a requests share scores by."""
    allocation: Allocation | None = None
    """The bound pods' requests and each node's pool (``Allocation``); None when the source does not
    know them. What a model with a fragmentation share scores by."""
    index: dict[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        n = len(self.names)
        if self.allocation is not None and len(self.allocation.pool) != n:
            raise ValueError(f"node snapshot allocation: {len(self.allocation.pool)} nodes, expected {n}")
        for name in ("allocatable", "capacity_usage", "observed", "scraped_at_s"):
            # one array type whatever the source built: the decision's compiled kernels see one signature
            object.__setattr__(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.float64))
        if self.nonzero_requested is not None:
            object.__setattr__(self, "nonzero_requested",
                               np.ascontiguousarray(self.nonzero_requested, dtype=np.float64))
        for name, shape in (("allocatable", (n, 4)), ("capacity_usage", (n, len(USAGE_COLUMNS))),
                            ("observed", (n, len(USAGE_COLUMNS))), ("scraped_at_s", (n,)),
                            ("nonzero_requested", (n, 2))):
            value = getattr(self, name)
            if value is not None and np.shape(value) != shape:
                raise ValueError(f"node snapshot {name}: shape {np.shape(value)}, expected {shape}")
        if self.nonzero_requested is not None and not (np.isfinite(self.nonzero_requested).all()
                                                       and (self.nonzero_requested >= 0).all()):
            raise ValueError("node snapshot nonzero_requested: expected finite non-negative requests")
        if len(set(self.names)) != n:
            raise ValueError("node snapshot: duplicate node names")
        if not np.all(self.capacity_usage > 0) or not np.all(self.allocatable[:, :2] > 0):
            raise ValueError("node snapshot: expected positive capacities (CPU, memory, disk and NIC bandwidth)")
        self.index.update((name, i) for i, name in enumerate(self.names))
        object.__setattr__(self, "complete", np.isfinite(self.observed).all(axis=1))
        # every known node counts as ready (the observation's feasible share); made once, read per decision
        object.__setattr__(self, "ready", np.ones(n, dtype=bool))

    @property
    def size(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Staleness:
    max_age_s: float = 60.0
    mode: str = "fail-open"

    def __post_init__(self):
        if self.mode not in ("fail-open", "fail-closed"):
            raise ValueError(f"staleness mode {self.mode!r}: expected fail-open or fail-closed")
        if not (self.max_age_s > 0 and math.isfinite(self.max_age_s)):
            raise ValueError(f"staleness max_age_s={self.max_age_s!r}: expected a positive number of seconds")


@dataclass(frozen=True)
class NodeInventory:
    """The cluster's nodes as the API server lists them, with what each can hold; indexed like ``names``."""

    names: tuple[str, ...]
    allocatable: np.ndarray
    """[N, 4] CPU milli, memory MiB, disk GiB, RDMA % (as ``NodeSnapshot.allocatable``)."""
    gpus: np.ndarray
    """[N] whole GPUs (``nvidia.com/gpu``); 0 where the node has none."""
    pools: tuple[str, ...] = ()
    """Each node's pool (its pool label's value, "" without one); empty: none known."""

    def __post_init__(self):
        n = len(self.names)
        if np.shape(self.allocatable) != (n, 4) or np.shape(self.gpus) != (n,):
            raise ValueError(f"node inventory: shapes {np.shape(self.allocatable)}, {np.shape(self.gpus)}: "
                             f"expected ({n}, 4) and ({n},)")
        if self.pools and len(self.pools) != n:
            raise ValueError(f"node inventory: {len(self.pools)} pools for {n} nodes")
        if len(set(self.names)) != n:
            raise ValueError("node inventory: duplicate node names")
        if not np.all(self.allocatable[:, :2] > 0):
            raise ValueError("node inventory: expected positive CPU and memory allocatable")


def _requests_of(names, requested: dict[str, np.ndarray]) -> np.ndarray:
    """[N, len(REQUESTED_COLUMNS)] the requests of ``names`` (0 for a node ``requested`` lacks)."""
    out = np.zeros((len(names), len(REQUESTED_COLUMNS)))
    for i, name in enumerate(names):
        held = requested.get(name)
        if held is not None:
            out[i] = held
    return out


def joined(metrics: NodeSnapshot | None, inventory: NodeInventory | None,
           requested: dict[str, np.ndarray] | None = None) -> NodeSnapshot | None:
    """The snapshot a decision reads: the inventory's nodes and allocatable (CPU and memory are also
    the capacities utilisation is taken of), with the metrics' observed usage, scrape times, disk and
    NIC capacities by node name, and the pods' requests per node (``requested``: node -> a row of
    ``REQUESTED_COLUMNS``, a node absent requests nothing; None: not known) with the allocation they
    leave; the metrics (with the non-zero requests, no allocation: the GPUs are not known) without an
    inventory."""
    if inventory is None:
        if metrics is None or requested is None:
            return metrics
        return dataclasses.replace(metrics, nonzero_requested=_requests_of(metrics.names, requested)[:, :2],
                                   index={})
    n = len(inventory.names)
    capacity = np.column_stack([inventory.allocatable[:, 0], inventory.allocatable[:, 1], np.ones(n),
                                np.full(n, DEFAULT_NIC_MBIT)])
    observed = np.full((n, len(USAGE_COLUMNS)), np.nan)
    scraped = np.full(n, -np.inf)
    oom, taken = 0.0, time.time()
    if metrics is not None:
        rows = np.fromiter((metrics.index.get(name, -1) for name in inventory.names), dtype=np.int64, count=n)
        have = rows >= 0
        observed[have] = metrics.observed[rows[have]]
        scraped[have] = metrics.scraped_at_s[rows[have]]
        capacity[have, 2:] = metrics.capacity_usage[rows[have], 2:]
        oom, taken = metrics.oom_kills_recent, metrics.taken_at_s
    requests = allocation = None
    if requested is not None:
        rows = _requests_of(inventory.names, requested)
        requests = rows[:, :2]
        allocation = Allocation(inventory.allocatable - rows[:, 2:6], gpu_layout(inventory.gpus, rows[:, 6]),
                                inventory.pools or ("",) * n)
    return NodeSnapshot(inventory.names, inventory.allocatable.copy(), capacity.reshape(-1, 4),
                        observed.reshape(-1, len(USAGE_COLUMNS)), scraped, oom_kills_recent=oom, taken_at_s=taken,
                        nonzero_requested=requests, allocation=allocation)


class NotReady(RuntimeError):
    """No snapshot yet: the engine cannot score (gRPC UNAVAILABLE, HTTP 503)."""


class ShadowState:
    """The current snapshot and the assign cache, safe to read from many request threads."""

    def __init__(self, clock: Callable[[], float] = time.time, staleness: Staleness = Staleness()):
        self.clock = clock
        self.staleness = staleness
        self._snapshot: NodeSnapshot | None = None
        self._metrics: NodeSnapshot | None = None
        self._inventory: NodeInventory | None = None
        self._requested: dict[str, np.ndarray] | None = None
        """node -> the non-zero requests of the pods bound there (the pod watch), None: not known."""
        self._pods: dict[str, tuple[str, str]] | None = None
        """binding_key -> (owner, node) of the bound pods that have an owner (``set_pods``); None: not known."""
        self._siblings = Siblings()
        """``_pods`` counted per owner and node."""
        self._expected: dict[str, tuple[str, tuple[str, ...], float, tuple[float, float]]] = {}
        """binding_key -> (owner, nodes, until when, [CPU milli, memory MiB]): pods not yet reported bound,
        counted as 1/len(nodes) of a pod on each node the engine ranked first for them (``expect_pod``)."""
        self._expected_of: dict[str, set[str]] = {}
        """owner -> its pods in ``_expected`` (those with an owner)."""
        self._expected_rows = np.zeros((0, 2))
        """[N, 2] the expected pods' summed shares of CPU milli and memory MiB on each node of the served
        snapshot, kept as pods are expected and stop being."""
        self._expected_counts = np.zeros(0, dtype=np.int64)
        """[N] how many expected pods count on each node (a node back at 0 gets its row zeroed, so no
        rounding is left behind)."""
        self._expected_version = 0
        """Counts the changes of ``_expected`` (``recent_usage`` keeps its answer while it holds)."""
        self._lock = threading.Lock()
        self._cache = AssignCache(0, horizon_s=ASSIGN_HORIZON_S)
        self._cache_version = 0
        """Counts the bindings added to the cache and its replacements."""
        self._recent: tuple[NodeSnapshot, tuple[int, int], np.ndarray | None] | None = None
        """``recent_usage``'s last answer: (snapshot, (cache version, expected version), usage), valid while
        they hold."""
        self._recent_bound: tuple[NodeSnapshot, int, np.ndarray | None] | None = None
        """Its bound pods' part: (snapshot, cache version, usage), kept while the expected pods change."""
        self._bound: OrderedDict[str, tuple[str, float, frozenset]] = OrderedDict()
        """binding_key -> (node, time, sources that reported it) of the bindings counted within the
        horizon, oldest first."""
        self.refreshes = 0
        self.refresh_errors = 0
        self.last_error = ""
        self.last_refresh_failed = False
        """Whether the metrics source's last refresh failed (the snapshot is then its last good one)."""

    @property
    def snapshot(self) -> NodeSnapshot:
        snap = self._snapshot
        if snap is None:
            raise NotReady("no node metrics yet: the shadow state has not been filled by its source")
        return snap

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    @property
    def inventory(self) -> NodeInventory | None:
        return self._inventory

    @property
    def metrics(self) -> NodeSnapshot | None:
        """The metrics source's last snapshot as it published it (not joined with the inventory or the
        pods' requests; the assign cache not applied); None before the first."""
        return self._metrics

    def publish(self, snap: NodeSnapshot) -> None:
        """Swap in a metrics source's new snapshot (joined with the node inventory, if any); bindings
        held for nodes that still exist are kept."""
        with self._lock:
            self._metrics = snap
            self._swap(joined(snap, self._inventory, self._requested))
            self.refreshes += 1
            self.last_refresh_failed = False

    def refresh_failed(self, error: str) -> None:
        """The metrics source could not refresh: the last snapshot stays, the error is kept."""
        with self._lock:
            self.refresh_errors += 1
            self.last_error = error
            self.last_refresh_failed = True

    def set_inventory(self, inventory: NodeInventory) -> None:
        """The API server's node set and allocatable (the node watch): from now on the state's nodes."""
        with self._lock:
            self._inventory = inventory
            self._swap(joined(self._metrics, inventory, self._requested))

    def set_requested(self, requested: dict[str, np.ndarray]) -> None:
        """The pods' requests per node, node -> a row of ``REQUESTED_COLUMNS`` (the pod watch's list);
        joined with the node inventory (a snapshot of metrics alone carries the non-zero ones only)."""
        rows = {k: _checked_requested_row(v, f"requested[{k!r}]") for k, v in requested.items()}
        with self._lock:
            self._requested = rows
            self._swap(joined(self._metrics, self._inventory, self._requested))

    def add_requested(self, node: str, delta: np.ndarray) -> None:
        """A pod bound to ``node`` (``delta`` its row of ``REQUESTED_COLUMNS``) or gone from it (minus it),
        after ``set_requested``: the served snapshot's requests and allocation change in place, without a
        new snapshot (a binding costs O(1), not a pass over the nodes); a decision in flight may read
        either value."""
        delta = _checked_requested_row(delta, "a binding's requests")
        with self._lock:
            if self._requested is None:
                return
            held = np.maximum(self._requested.get(node, np.zeros(len(REQUESTED_COLUMNS))) + delta, 0.0)
            self._requested[node] = held
            snap = self._snapshot
            i = snap.index.get(node) if snap is not None and snap.nonzero_requested is not None else None
            if i is None:
                return
            snap.nonzero_requested[i] = held[:2]
            inventory, a = self._inventory, snap.allocation
            if a is not None and inventory is not None and inventory.names[i] == node:
                a.free[i] = inventory.allocatable[i] - held[2:6]
                a.gpu_free[i] = gpu_layout(inventory.gpus[i:i + 1], held[6:7], a.gpu_free.shape[1])[0]

    def set_pods(self, pods: dict[str, tuple[str, str]]) -> None:
        """The bound pods as the pod watch lists them, binding_key -> (owner, node) ("" owner: none): from
        now on the state knows the pods' workloads per node."""
        kept, siblings = {}, Siblings()
        for key, (owner, node) in pods.items():
            if owner:
                kept[key] = (owner, node)
                siblings.add(owner, node)
        with self._lock:
            for key in [k for k in self._expected if k in kept]:  # listed bound: no longer expected
                self._unexpect(key)
            self._pods, self._siblings = kept, siblings

    def place_pod(self, pod: str, owner: str, node: str) -> None:
        """The pod ``pod`` (``binding_key``) of ``owner`` is bound to ``node`` (ReportBinding, the pod
        watch): counted once, however many paths report it; a pod reported on another node moved there."""
        if not owner:
            return
        with self._lock:
            if self._pods is None:
                return
            self._unexpect(pod)
            held = self._pods.get(pod)
            if held == (owner, node):
                return
            if held is not None:
                self._siblings.remove(*held)
            self._pods[pod] = (owner, node)
            self._siblings.add(owner, node)

    def expect_pod(self, pod: str, owner: str, nodes: list[str], estimate_cpu_mem=(0.0, 0.0)) -> None:
        """The engine's answer ranked ``nodes`` first, tied, for the pod ``pod`` (``binding_key``) of
        ``owner`` ("": none) requesting ``estimate_cpu_mem`` (its non-zero CPU milli and memory MiB, as
        ``report_binding`` takes them): until its binding is reported, or for ``EXPECT_S``, count it as
        1/len(nodes) of a pod on each of them (the scheduler picks among tied nodes at random), in their
        usage and, with an owner, among its siblings. kube-scheduler schedules a burst of pods back to back
        and binds each asynchronously, so the next pod is scored before the last one's binding reaches the
        engine; counted where the last one may land, a burst does not pile onto the node that looked
        coolest, and the next replica is kept apart from it. A pod reported bound is left where it is; the
        binding's report counts an expected pod on the node it went to alone."""
        if not nodes:
            return
        try:
            cpu, mem = (float(x) for x in estimate_cpu_mem)
        except (TypeError, ValueError):
            cpu = mem = math.nan
        if not (0.0 <= cpu < math.inf and 0.0 <= mem < math.inf):
            raise ValueError(f"estimate_cpu_mem={estimate_cpu_mem!r}: expected [CPU milli, memory MiB], "
                             "finite and non-negative")
        estimate = (cpu, mem)
        with self._lock:
            if pod in self._bound or (self._pods is not None and pod in self._pods):
                return
            self._unexpect(pod)
            self._expected[pod] = (owner, tuple(nodes), self.clock() + EXPECT_S, estimate)
            if owner:
                self._expected_of.setdefault(owner, set()).add(pod)
            self._add_expected(nodes, cpu / len(nodes), mem / len(nodes), 1)
            self._expected_version += 1

    def expected_pods(self) -> int:
        """How many pods answered are counted where their answer ranked them (``expect_pod``), now."""
        with self._lock:
            self._expire()
            return len(self._expected)

    def unexpect_pod(self, pod: str) -> None:
        """Stop counting the pod ``pod`` (``binding_key``) where an earlier answer expected it: it is being
        scored again (a retry, or the extender's /prioritize after its /filter), and is not its own
        neighbour."""
        with self._lock:
            self._unexpect(pod)

    def _add_expected(self, nodes, cpu: float, mem: float, count: int) -> None:
        """Under ``self._lock``: ``count`` (1 or -1) pod more or less expected on each of ``nodes`` (names),
        with ``cpu`` milli and ``mem`` MiB each, in the served snapshot's rows (a few nodes a pod: scalar
        updates cost less than array calls)."""
        if self._snapshot is None:
            return
        index, counts, rows = self._snapshot.index, self._expected_counts, self._expected_rows
        for node in nodes:
            i = index.get(node)
            if i is None:
                continue
            counts[i] += count
            if counts[i]:
                rows[i, 0] += count * cpu
                rows[i, 1] += count * mem
            else:
                rows[i] = 0.0

    def _unexpect(self, pod: str) -> None:
        """Under ``self._lock``: stop counting the pod ``pod`` where it was expected."""
        expected = self._expected.pop(pod, None)
        if expected is not None:
            self._expected_version += 1
            nodes, (cpu, mem) = expected[1], expected[3]
            self._add_expected(nodes, cpu / len(nodes), mem / len(nodes), -1)
            pods = self._expected_of.get(expected[0])
            if pods is not None:
                pods.discard(pod)
                if not pods:
                    del self._expected_of[expected[0]]

    def remove_pod(self, pod: str) -> None:
        """The pod (``binding_key``) is gone: no longer anybody's sibling."""
        with self._lock:
            held = self._pods.pop(pod, None) if self._pods is not None else None
            self._unexpect(pod)
            if held is not None:
                self._siblings.remove(*held)

    def _expire(self) -> None:
        """Under ``self._lock``: stop counting the expected pods whose binding did not come in time."""
        now = self.clock()
        while self._expected:  # in the order expected, which is the order they expire in
            pod, (_, _, until, _) = next(iter(self._expected.items()))
            if until > now:
                return
            self._unexpect(pod)

    @property
    def knows_pods(self) -> bool:
        """Whether a pod watch has told the state the pods' workloads (``set_pods``)."""
        return self._pods is not None

    def sibling_counts(self, owner: str, nodes: list[str], pod: str | None = None) -> np.ndarray | None:
        """[k] bound pods of ``owner`` on each of ``nodes`` (names), the pod ``pod`` (``binding_key``: the
        one being scored, expected somewhere by an earlier ranking) not counted; None when the state does
        not know the pods (no pod watch)."""
        with self._lock:
            if self._pods is None:
                return None
            self._expire()
            if not owner:
                return np.zeros(len(nodes))
            on = self._siblings.nodes_of(owner)
            counts = np.fromiter((on.get(n, 0) for n in nodes), dtype=np.float64, count=len(nodes)) if on \
                else np.zeros(len(nodes))
            delta: dict[str, float] = {}  # the pod scored is not its own sibling; expected pods count shared
            own = self._pods.get(pod) if pod is not None else None
            if own is not None and own[0] == owner:
                delta[own[1]] = -1.0
            for other in self._expected_of.get(owner, ()):
                if other != pod:
                    where = self._expected[other][1]
                    for node in where:
                        delta[node] = delta.get(node, 0.0) + 1.0 / len(where)
            if delta:
                counts += np.fromiter((delta.get(n, 0.0) for n in nodes), dtype=np.float64, count=len(nodes))
            return counts

    def _swap(self, snap: NodeSnapshot | None) -> None:
        """Under ``self._lock``: serve ``snap``; the assign cache and the expected pods follow the nodes by
        name."""
        old = self._snapshot
        if snap is None:
            return
        renamed = old is None or old.names != snap.names
        if renamed:
            cache = AssignCache(snap.size, horizon_s=ASSIGN_HORIZON_S)
            if old is not None:
                for node, t, estimate in self._cache.entries():
                    new = snap.index.get(old.names[node])
                    if new is not None:
                        cache.add(new, t, estimate)
            self._cache = cache
            self._cache_version += 1
        self._snapshot = snap
        if renamed:
            self._expected_rows, self._expected_counts = np.zeros((snap.size, 2)), np.zeros(snap.size, dtype=np.int64)
            for _, nodes, _, (cpu, mem) in self._expected.values():
                self._add_expected(nodes, cpu / len(nodes), mem / len(nodes), 1)

    def assigned(self) -> dict[str, np.ndarray]:
        """node -> [CPU milli, memory MiB] summed over the bindings the assign cache holds (for a
        metric or a test: what the cache would add to a node whose metrics predate them all)."""
        with self._lock:
            snap = self._snapshot
            if snap is None:
                return {}
            usage = self._cache.usage_since(-np.inf)
            return {snap.names[i]: usage[i] for i in np.flatnonzero(usage.any(axis=1)).tolist()}

    def report_binding(self, node: str, estimate_cpu_mem: np.ndarray, t: float | None = None,
                       pod: str | None = None, source: str = "") -> bool:
        """A pod was bound to ``node`` (``KeyError`` for a node the state does not know, ``NotReady``
        without a snapshot); True when counted. ``pod`` (``binding_key``) and ``source`` (the path
        that saw it: ReportBinding, the pod watch) pair the reports of one binding: a report of a pod
        to the node its last counted binding went to, within the horizon, from a source that has not
        reported that binding yet, is the same binding seen by another path and is not counted again.
        A source reporting a pod again reports a new binding (the pod was bound anew). The pod watch
        sees every binding; a binding only ReportBinding saw, then a new binding of a pod of the same
        name to the same node that only the watch saw, would read as one (ReportBinding carries no
        pod UID)."""
        with self._lock:
            snap = self.snapshot
            i = snap.index.get(node)
            if i is None:
                raise KeyError(node)
            t = self.clock() if t is None else t
            if pod is not None:
                held = self._bound.get(pod)
                if (held is not None and held[0] == node and held[1] >= t - ASSIGN_HORIZON_S
                        and source not in held[2]):
                    self._bound[pod] = (node, held[1], held[2] | {source})
                    return False
                self._bound[pod] = (node, t, frozenset((source,)))
                self._unexpect(pod)
                self._bound.move_to_end(pod)
                while self._bound and next(iter(self._bound.values()))[1] < t - ASSIGN_HORIZON_S:
                    self._bound.popitem(last=False)
            self._cache.add(i, t, np.asarray(estimate_cpu_mem, dtype=float))
            self._cache_version += 1
            return True

    def forget_binding(self, pod: str) -> None:
        """The pod is gone (deleted, or finished): a pod of that name bound later is a new binding.
        Its estimate stays in the assign cache until a scrape sees its node (``policy.assign_cache``)."""
        with self._lock:
            self._bound.pop(pod, None)

    def recent_usage(self, snap: NodeSnapshot) -> np.ndarray | None:
        """[N, 2] CPU milli and memory MiB of pods bound to each node since its metrics were taken, and of
        the pods expected there (``expect_pod``), or None when there are none. The answer is kept until the
        snapshot, the cache or the expected pods change (a binding is added, a pod expected, the nodes
        change), so that decisions between them do not sum again: callers share it and must not modify
        it."""
        with self._lock:
            if self._snapshot is not snap and (self._snapshot is None or self._snapshot.names != snap.names):
                return None
            self._expire()
            version = (self._cache_version, self._expected_version)
            kept = self._recent
            if kept is not None and kept[0] is snap and kept[1] == version:
                return kept[2]
            bound = self._recent_bound
            if bound is None or bound[0] is not snap or bound[1] != self._cache_version:
                bound = (snap, self._cache_version,
                         self._cache.usage_since_each(snap.scraped_at_s) if self._cache.size else None)
                self._recent_bound = bound
            usage = bound[2]
            if self._expected:
                usage = self._expected_rows.copy() if usage is None else usage + self._expected_rows
            self._recent = (snap, version, usage)
            return usage

    def fresh_candidates(self, snap: NodeSnapshot, now: float, idx: np.ndarray) -> tuple[np.ndarray, int]:
        """(bool per candidate, how many): ``fresh`` of candidates by node index, -1 (unknown) never fresh."""
        out = np.empty(idx.shape[0], dtype=np.bool_)
        return out, fresh_candidates(idx, snap.scraped_at_s, snap.complete, now, self.staleness.max_age_s, out)

    def fresh(self, snap: NodeSnapshot, now: float, nodes: np.ndarray | None = None) -> np.ndarray:
        """bool per node of ``nodes`` (default: all): metrics present (finite) and at most ``max_age_s`` old."""
        nodes = np.arange(snap.size) if nodes is None else np.asarray(nodes, dtype=np.int64)
        return self.fresh_candidates(snap, now, nodes)[0]

    def age_s(self, snap: NodeSnapshot, now: float) -> np.ndarray:
        return now - snap.scraped_at_s
