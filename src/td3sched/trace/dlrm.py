"""Alibaba GPU-disaggregated DLRM serving trace (cluster-trace-gpu-v2025).

Attribution: Alibaba Group, alibaba/clusterdata, ``cluster-trace-gpu-v2025/`` (commit 7a6c496e4f4b),
published "for research or study purpose" (alibaba/clusterdata README). Acknowledge the paper:
L. Yang, Y. Wang, Y. Yu, Q. Weng et al., "GPU-Disaggregated Serving for Deep Learning Recommendation
Models at Scale", USENIX NSDI 2025. Any excerpt the project ships must carry this attribution.

The file ``alibaba-gpu-v2025/disaggregated_DLRM_trace.csv`` holds 23,871 inference instances of 156
apps over 31 days: 16,591 arrivals; instances with an empty creation time were alive at trace start,
instances with an empty deletion time were alive at the end. CPU in vCPU, memory and disk in GiB,
RDMA in % of one NIC.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .location import traces_dir
from .table import Column, TraceTable, check_rows, finish, read_table

__all__ = ["DLRM_FILE", "DlrmTrace", "load_dlrm"]

DLRM_FILE = "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv"

ROLES = frozenset({"CN", "HN"})

_COLUMNS = [
    Column("instance_sn", "str"),
    Column("role", "str", choices=ROLES),
    Column("app_name", "str"),
    Column("cpu_request", "float", nonnegative=True),
    Column("cpu_limit", "float", nonnegative=True),
    Column("gpu_request", "int", nonnegative=True),
    Column("gpu_limit", "int", nonnegative=True),
    Column("rdma_request", "float", lower=0, upper=100),
    Column("rdma_limit", "float", lower=0, upper=100),
    Column("memory_request", "float", nonnegative=True),
    Column("memory_limit", "float", nonnegative=True),
    Column("disk_request", "float", nonnegative=True),
    Column("disk_limit", "float", nonnegative=True),
    Column("max_instance_per_node", "int", lower=-1),
    Column("creation_time", "float", nonnegative=True, nullable=True),
    Column("scheduled_time", "float", nonnegative=True, nullable=True),
    Column("deletion_time", "float", nonnegative=True, nullable=True),
]

_RENAME = {
    "cpu_request": "cpu_milli_request",
    "cpu_limit": "cpu_milli_limit",
    "rdma_request": "rdma_pct_request",
    "rdma_limit": "rdma_pct_limit",
    "memory_request": "mem_mib_request",
    "memory_limit": "mem_mib_limit",
    "disk_request": "disk_gib_request",
    "disk_limit": "disk_gib_limit",
    "creation_time": "creation_s",
    "scheduled_time": "scheduled_s",
    "deletion_time": "deletion_s",
}

_PAIRS = ["cpu", "gpu", "rdma", "memory", "disk"]


@dataclass(frozen=True, eq=False)
class DlrmTrace(TraceTable):
    """The DLRM instance stream.

    ``frame`` columns (one row per instance, file order):
        instance_sn, role ("CN" | "HN"), app_name (str);
        cpu_milli_request, cpu_milli_limit (int64, vCPU * 1000);
        gpu_request, gpu_limit (int64, whole GPUs);
        rdma_pct_request, rdma_pct_limit (float64, % of one RDMA NIC, 0..100);
        mem_mib_request, mem_mib_limit (int64, GiB * 1024);
        disk_gib_request, disk_gib_limit (float64, GiB);
        max_instance_per_node (int64; per-app anti-affinity cap, -1 = no cap);
        creation_s, scheduled_s, deletion_s (float64 seconds from trace start; NaN creation/schedule
        = already running at trace start, NaN deletion = still alive at trace end).
    """


def load_dlrm(path: str | Path | None = None, *, lenient: bool = False) -> DlrmTrace:
    """Load and validate the DLRM trace (default: the shared copy under ``traces_dir()``).

    Checks: every column present; numbers numeric and non-negative (RDMA within 0..100); GPU counts
    integral; role CN or HN; max_instance_per_node -1 or >= 1; each limit >= its request; deletion >=
    creation when both are present. Strict by default (TraceError on the first bad row);
    ``lenient=True`` drops bad rows and counts them in ``.skipped``.
    """
    path = Path(path) if path is not None else traces_dir() / DLRM_FILE
    frame, report = read_table(path, _COLUMNS, lenient=lenient)
    frame = check_rows(frame, frame["max_instance_per_node"] == 0, report, column="max_instance_per_node",
                       expected="-1 (no cap) or an integer >= 1", reason="max_instance_per_node of 0",
                       lenient=lenient)
    for res in _PAIRS:
        req, lim = f"{res}_request", f"{res}_limit"
        frame = check_rows(frame, frame[lim] < frame[req], report, column=lim,
                           expected=f"a value >= {req}", reason=f"{lim} below {req}", lenient=lenient)
    frame = check_rows(frame, frame["deletion_time"] < frame["creation_time"], report,
                       column="deletion_time", expected="a time >= creation_time",
                       reason="deletion before creation", lenient=lenient)
    for res in ("cpu",):
        for suffix in ("request", "limit"):
            frame[f"{res}_{suffix}"] = (frame[f"{res}_{suffix}"] * 1000).round().astype("int64")
    for suffix in ("request", "limit"):
        frame[f"memory_{suffix}"] = (frame[f"memory_{suffix}"] * 1024).round().astype("int64")
    return DlrmTrace(frame=finish(frame, _RENAME), skipped=report, path=path)
