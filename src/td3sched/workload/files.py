"""A workload and its usage profiles saved as files (the shipped ``tiny`` scenario).

``pods.csv.gz`` holds one row per pod with every ``Workload`` field (app and pool by name);
``profiles.npz`` the usage shapes the pods index. Loading validates both and names the bad value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from td3sched.workload.pods import SCALAR_RESOURCES, Workload
from td3sched.workload.profiles import UsageProfiles

def save_workload(folder: Path, workload: Workload, profiles: UsageProfiles, header: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    w = workload
    frame = pd.DataFrame({
        "name": w.name.tolist(), "arrival_s": w.arrival_s, "duration_s": w.duration_s,
        **{f"request_{r}": w.request[:, j] for j, r in enumerate(SCALAR_RESOURCES)},
        "cpu_limit_milli": w.cpu_limit_milli, "mem_limit_mib": w.mem_limit_mib,
        "gpu_count": w.gpu_count, "gpu_milli": w.gpu_milli, "qos": w.qos,
        "latency_sensitive": w.latency_sensitive.astype(int),
        "app": np.array(w.app_names, dtype=object)[w.app],
        "max_per_node": w.max_per_node,
        "pool": np.where(w.pool >= 0, np.array(list(w.pool_names) + [""], dtype=object)[w.pool], ""),
        "size_cpu_milli": w.size_cpu_milli, "size_mem_mib": w.size_mem_mib,
        "size_disk_mbps": w.size_disk_mbps, "size_net_mbps": w.size_net_mbps, "profile": w.profile,
    })
    (folder / "ATTRIBUTION.md").write_text(header)
    for col in UNBOUNDED:
        frame[col] = frame[col].where(np.isfinite(frame[col]), None)
    frame.to_csv(folder / "pods.csv.gz", index=False, float_format="%.6g")
    profiles.save(folder / "profiles.npz")


UNBOUNDED = ("duration_s", "cpu_limit_milli", "mem_limit_mib")


def _schema():
    from td3sched.trace.table import Column

    nonneg = dict(kind="float", nonnegative=True)
    unbounded = dict(kind="float", nonnegative=True, nullable=True)  # empty = inf (no end, no limit)
    cols = [Column("name", "str"), Column("arrival_s", **nonneg), Column("duration_s", **unbounded)]
    cols += [Column(f"request_{r}", **nonneg) for r in SCALAR_RESOURCES]
    cols += [Column("cpu_limit_milli", **unbounded), Column("mem_limit_mib", **unbounded),
             Column("gpu_count", "int", nonnegative=True), Column("gpu_milli", "int", lower=0, upper=1000),
             Column("qos", "int", lower=0, upper=2), Column("latency_sensitive", "int", lower=0, upper=1),
             Column("app", "str"), Column("max_per_node", "int", lower=-1), Column("pool", "str", nullable=True),
             Column("size_cpu_milli", **nonneg), Column("size_mem_mib", **nonneg),
             Column("size_disk_mbps", **nonneg), Column("size_net_mbps", **nonneg),
             Column("profile", "int", nonnegative=True)]
    return cols


def load_workload(folder: Path) -> tuple[Workload, UsageProfiles]:
    """Read a saved workload; a bad cell raises TraceError naming the file, line, column and value."""
    from td3sched.trace.errors import TraceError
    from td3sched.trace.table import read_table

    path = folder / "pods.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"workload file {path} is missing")
    frame, _ = read_table(path, _schema())
    lines = frame.index.to_numpy()
    frame = frame.reset_index(drop=True)
    frame["pool"] = frame["pool"].fillna("")
    for col in UNBOUNDED:
        frame[col] = frame[col].fillna(np.inf)
    profiles = UsageProfiles.load(folder / "profiles.npz")
    prof = frame["profile"].to_numpy()
    if len(prof) and (prof.min() < 0 or prof.max() >= profiles.count):
        row = int(np.flatnonzero((prof < 0) | (prof >= profiles.count))[0])
        raise TraceError(path, int(lines[row]), "profile", str(prof[row]), f"a profile row in [0, {profiles.count})")
    apps, app_idx = np.unique(frame["app"].astype(str).to_numpy(), return_inverse=True)
    pool_labels = frame["pool"].astype(str).to_numpy()
    pools = tuple(sorted(set(pool_labels) - {""}))
    pool_idx = np.array([pools.index(p) if p else -1 for p in pool_labels], dtype=np.int16)
    workload = Workload(
        name=frame["name"].astype(str).to_numpy(),
        arrival_s=frame["arrival_s"].to_numpy(float),
        duration_s=frame["duration_s"].to_numpy(float),
        request=frame[[f"request_{r}" for r in SCALAR_RESOURCES]].to_numpy(float),
        cpu_limit_milli=frame["cpu_limit_milli"].to_numpy(float),
        mem_limit_mib=frame["mem_limit_mib"].to_numpy(float),
        gpu_count=frame["gpu_count"].to_numpy().astype(np.int64),
        gpu_milli=frame["gpu_milli"].to_numpy().astype(np.int64),
        qos=frame["qos"].to_numpy().astype(np.int8),
        latency_sensitive=frame["latency_sensitive"].to_numpy().astype(bool),
        app=app_idx.astype(np.int32), app_names=tuple(apps),
        max_per_node=frame["max_per_node"].to_numpy().astype(np.int32),
        pool=pool_idx, pool_names=pools,
        size_cpu_milli=frame["size_cpu_milli"].to_numpy(float),
        size_mem_mib=frame["size_mem_mib"].to_numpy(float),
        size_disk_mbps=frame["size_disk_mbps"].to_numpy(float),
        size_net_mbps=frame["size_net_mbps"].to_numpy(float),
        profile=prof.astype(np.int32),
    )
    return workload, profiles


COLUMNS = tuple(c.name for c in _schema())
"""The columns of ``pods.csv.gz``, in order."""
