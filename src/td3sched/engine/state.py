"""The shadow state: what the engine knows of the cluster's nodes, kept current in the background so
that a decision never waits on Prometheus or the API server.

A ``NodeSnapshot`` is one immutable picture of every known node, published whole by a source
(``prometheus_source``, ``simulator_source``) and swapped in atomically: a decision reads one
snapshot from start to end. It carries the arrays the shared scoring code reads from the simulator's
``Cluster`` (``allocatable``, ``capacity_usage``, ``observed``, ``ready``), so that
``policy.features.utilisation`` and ``rl.observation.observe`` run on it unchanged, plus each node's
scrape time (metrics have their own age per node).

The assign cache (``policy.assign_cache``, the simulator's own piece) is fed by ``ReportBinding``:
each bound pod's CPU and memory request is added to its node's observed usage until a scrape of
that node newer than the binding has seen it.

Staleness (``Staleness``): a node's metrics are stale when older than ``max_age_s`` or missing (a
node no source has reported, or a NaN value). Stale nodes get ``mode``'s treatment:
``fail-open`` (default) scores them neutral and lets them pass the safety filter; ``fail-closed``
filters them out.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from td3sched.policy.assign_cache import AssignCache
from td3sched.simulator.cluster import USAGE_COLUMNS

ASSIGN_HORIZON_S = 600.0
"""A binding is forgotten after this long even if no scrape of its node came (a node gone quiet)."""


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
    index: dict[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        n = len(self.names)
        for name, shape in (("allocatable", (n, 4)), ("capacity_usage", (n, len(USAGE_COLUMNS))),
                            ("observed", (n, len(USAGE_COLUMNS))), ("scraped_at_s", (n,))):
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(f"node snapshot {name}: shape {np.shape(getattr(self, name))}, expected {shape}")
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


class NotReady(RuntimeError):
    """No snapshot yet: the engine cannot score (gRPC UNAVAILABLE, HTTP 503)."""


class ShadowState:
    """The current snapshot and the assign cache, safe to read from many request threads."""

    def __init__(self, clock: Callable[[], float] = time.time, staleness: Staleness = Staleness()):
        self.clock = clock
        self.staleness = staleness
        self._snapshot: NodeSnapshot | None = None
        self._lock = threading.Lock()
        self._cache = AssignCache(0, horizon_s=ASSIGN_HORIZON_S)
        self.refreshes = 0
        self.refresh_errors = 0
        self.last_error = ""

    @property
    def snapshot(self) -> NodeSnapshot:
        snap = self._snapshot
        if snap is None:
            raise NotReady("no node metrics yet: the shadow state has not been filled by its source")
        return snap

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    def publish(self, snap: NodeSnapshot) -> None:
        """Swap in a new snapshot; bindings held for nodes that still exist are kept."""
        with self._lock:
            old = self._snapshot
            if old is None or old.names != snap.names:
                cache = AssignCache(snap.size, horizon_s=ASSIGN_HORIZON_S)
                if old is not None:
                    for node, t, estimate in self._cache.entries():
                        new = snap.index.get(old.names[node])
                        if new is not None:
                            cache.add(new, t, estimate)
                self._cache = cache
            self._snapshot = snap
            self.refreshes += 1

    def report_binding(self, node: str, estimate_cpu_mem: np.ndarray, t: float | None = None) -> None:
        """A pod was bound to ``node`` (``KeyError`` for a node the state does not know)."""
        with self._lock:
            snap = self.snapshot
            i = snap.index.get(node)
            if i is None:
                raise KeyError(node)
            self._cache.add(i, self.clock() if t is None else t, np.asarray(estimate_cpu_mem, dtype=float))

    def recent_usage(self, snap: NodeSnapshot) -> np.ndarray:
        """[N, 2] CPU milli and memory MiB of pods bound to each node since its metrics were taken."""
        with self._lock:
            if self._snapshot is not snap and (self._snapshot is None or self._snapshot.names != snap.names):
                return np.zeros((snap.size, 2))
            return self._cache.usage_since_each(snap.scraped_at_s)

    def fresh(self, snap: NodeSnapshot, now: float, nodes: np.ndarray | None = None) -> np.ndarray:
        """bool per node of ``nodes`` (default: all): metrics present (finite) and at most ``max_age_s`` old."""
        if nodes is None:
            return (now - snap.scraped_at_s <= self.staleness.max_age_s) & snap.complete
        return (now - snap.scraped_at_s[nodes] <= self.staleness.max_age_s) & snap.complete[nodes]

    def age_s(self, snap: NodeSnapshot, now: float) -> np.ndarray:
        return now - snap.scraped_at_s
