"""The shadow state filled from a running simulation instead of Prometheus, so that the engine can
run in the simulator's loop (a digital twin): every ready node of the simulated cluster, its
allocatable, its *observed* usage as the simulator's metrics pipeline last published it (never the
ground truth) and that publication's time, the requests of the pods bound to it (what the API server
knows at once) with what they leave free, GPUs included, and its pool, and the node OOM kills of the last 5 simulated minutes
counted as the td3 policy counts them (``rl.observation.OomWindow``).

The engine's clock is then the simulation's: pass ``clock=source.now`` to the ``ShadowState``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from td3sched.engine.state import Allocation, NodeSnapshot, ShadowState
from td3sched.rl.observation import OomWindow
from td3sched.simulator.cluster import Cluster


class SimulatorSource:
    def __init__(self, cluster: Cluster, state: ShadowState, now: Callable[[], float],
                 oom_kills_total: Callable[[], int] = lambda: 0):
        self.cluster = cluster
        self.state = state
        self.now = now
        self.oom_kills_total = oom_kills_total
        self.oom_window = OomWindow()
        self.pool_names = np.array([p.name for p in cluster.pools], dtype=object)

    def snapshot(self) -> NodeSnapshot:
        c = self.cluster
        ready = np.flatnonzero(c.ready)
        t = self.now()
        return NodeSnapshot(tuple(c.names[ready].tolist()), c.allocatable[ready].copy(), c.capacity_usage[ready].copy(),
                            c.observed[ready].copy(), np.full(len(ready), c.last_scrape_s),
                            oom_kills_recent=float(self.oom_window.kills(t, int(self.oom_kills_total()))), taken_at_s=t,
                            nonzero_requested=c.nonzero_requested[ready].copy(),
                            allocation=Allocation(c.free[ready], c.gpu_capacity[ready] - c.gpu_used[ready],
                                                  self.pool_names[c.pool_of[ready]]))

    def refresh(self) -> bool:
        self.state.publish(self.snapshot())
        return True
