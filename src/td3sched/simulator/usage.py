"""A pod's real usage from its usage profile, and the ground truth given to hindsight policies.

The simulator's usage formula (``pod_usage``), per resource, with ``shape`` the pod's profile row at
a slot (``workload.profiles``):

    cpu  = min(cpu_limit, usage_scale x shape_cpu x size_cpu_milli)    throttled at the limit
    mem  = mem_level x shape_mem x size_mem_mib                        (above its limit the engine
                                                                        OOM-kills the container, which
                                                                        restarts after its back-off)
    disk = shape_disk x size_disk_mbps,  net = shape_net x size_net_mbps

``Hindsight`` reads the same formula over future slots: what a pod *will* use, which no real
scheduler knows. Only hindsight policies (``oracle``, a reference bound) may read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from td3sched.simulator.config import SimConfig
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import UsageProfiles


def pod_usage(w: Workload, cfg: SimConfig, pods, shape: np.ndarray) -> np.ndarray:
    """Usage of ``pods`` (an index or an index array) whose profile shapes are ``shape`` ([4, ...],
    broadcasting against ``pods``): [..., 4] CPU milli (throttled at the limit), memory MiB (before
    the memory limit is enforced), disk MB/s, network Mbit/s."""
    if isinstance(pods, (int, np.integer)) and shape.ndim == 1:  # one pod (every bind): plain floats, same arithmetic
        cpu = min(cfg.usage_scale * shape[0] * w.size_cpu_milli[pods], w.cpu_limit_milli[pods])
        return np.array([cpu, cfg.mem_level * shape[1] * w.size_mem_mib[pods], shape[2] * w.size_disk_mbps[pods],
                         shape[3] * w.size_net_mbps[pods]])
    cpu = np.minimum(cfg.usage_scale * shape[0] * w.size_cpu_milli[pods], w.cpu_limit_milli[pods])
    mem = cfg.mem_level * shape[1] * w.size_mem_mib[pods]
    return np.stack([cpu, mem, shape[2] * w.size_disk_mbps[pods], shape[3] * w.size_net_mbps[pods]], axis=-1)


@dataclass(frozen=True)
class Hindsight:
    """Ground truth of a run that no real scheduler has: every pod's future usage. For hindsight
    policies only (``PolicyContext.hindsight``)."""

    workload: Workload
    profiles: UsageProfiles
    config: SimConfig
    remaining_s: Callable[[int], float]
    """Run time a pod has left if placed now: its duration, less what it ran before an OOM kill
    (``inf``: runs past the end of the scenario)."""

    def slots(self, t0: float, t1: float) -> np.ndarray:
        """The profile slots (wrapped) a pod reads over ``[t0, t1)``: at least the slot of ``t0``."""
        if not (math.isfinite(t0) and math.isfinite(t1)):
            raise ValueError(f"window [{t0}, {t1}): expected finite times")
        step = self.profiles.step_s
        first = int(t0 // step)
        last = max(first, math.ceil(t1 / step) - 1)
        return np.arange(first, last + 1) % self.profiles.slots

    def future_usage(self, pod: int, t0: float, t1: float) -> np.ndarray:
        """[S, 4] usage of ``pod`` in each profile slot over ``[t0, t1)``, as the simulator computes it
        (``pod_usage``: CPU throttled at the limit, memory before the limit is enforced)."""
        shape = self.profiles.shape[:, int(self.workload.profile[pod])][:, self.slots(t0, t1)]
        return pod_usage(self.workload, self.config, int(pod), shape)
