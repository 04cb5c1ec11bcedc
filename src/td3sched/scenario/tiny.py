"""Regenerate the shipped ``tiny`` scenario from the production traces (``td3sched build-tiny``).

tiny is a one-day miniature of ``dlrm``: a CPU pool and a GPU pool of the dlrm node shapes, DLRM
instances alive in that day sampled so that peak requests load the pools about as dlrm does, and
the mixed batch stream. It ships in the repository so the demo and fast tests need no traces.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from td3sched.scenario import load_scenario
from td3sched.scenario.build import DAY_S, batch_stream
from td3sched.workload.dlrm import dlrm_workload
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import UsageProfiles

ATTRIBUTION = """# tiny scenario: data attribution

Built by `td3sched build-tiny` from public production traces:
- Alibaba cluster-trace-gpu-v2025 (DLRM serving instances, NSDI'25) and cluster-trace-gpu-v2023
  (openb pod shapes, FGD, USENIX ATC'23), alibaba/clusterdata, published for research or study purposes.
- Bitbrains GWA-T-12 Rnd per-VM usage (Shen, van Beek, Iosup, CCGrid 2015). We acknowledge
  Bitbrains IT Services Inc. for the data.
"""

MAX_PODS = 2000


def build_tiny(out: Path, seed: int = 1) -> Workload:
    tiny = load_scenario("tiny")
    pools = {p.name: p for p in tiny.pools(seed)}
    cpu, gpu = pools["cpu"], pools["gpu"]
    profiles = UsageProfiles.from_bitbrains()
    full = dlrm_workload(cpu.shapes[0], gpu.shapes[0], profiles.count, seed)
    end = tiny.days * DAY_S
    rng = np.random.default_rng([seed, 41])
    alive = full.arrival_s < end
    # Keep a share of instances so peak requests per pool load tiny's pools like dlrm's.
    share_cpu = cpu.count * cpu.shapes[0].cpu_milli * 0.85 / 392_176_000  # dlrm's peak CN requested CPU
    share_gpu = gpu.count * gpu.shapes[0].gpus * 0.85 / 3367  # dlrm's peak requested GPUs
    keep = rng.uniform(size=len(full)) < np.where(full.pool == 1, share_gpu, share_cpu)
    dlrm = full.select(alive & keep)
    batch = batch_stream(tiny.config["batch"], cpu, tiny.days, seed, profiles.count)
    workload = Workload.concat([dlrm, batch])
    if len(workload) > MAX_PODS:
        workload = workload.select(np.arange(len(workload)) < MAX_PODS)
    used = np.unique(workload.profile)
    slots = int(np.ceil(end / profiles.step_s))
    sub = profiles.subset(used, slice(0, slots))
    remap = np.zeros(profiles.count, dtype=np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    workload = dataclasses.replace(workload, profile=remap[workload.profile])
    from td3sched.workload.files import save_workload

    save_workload(out, workload, sub, ATTRIBUTION)
    return workload
