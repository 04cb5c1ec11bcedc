"""Alibaba "openb" GPU cluster: pod list and node list (cluster-trace-gpu-v2023).

Attribution: Alibaba Group, alibaba/clusterdata, ``cluster-trace-gpu-v2023/csv/`` (commit
7a6c496e4f4b), published "for research or study purpose" (alibaba/clusterdata README). Acknowledge the
paper: Q. Weng, L. Yang, Y. Yu, W. Wang, X. Tang, G. Yang, L. Zhang, "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023. Any excerpt
the project ships must carry this attribution.

``openb_pod_list_default.csv``: 8,152 pods (requests only, no usage; QoS LS 4,647, BE 3,398, Burstable
100, Guaranteed 7; 1,088 CPU-only). The timeline is sparse, so use it as a distribution of shapes and
durations rather than as an arrival stream. ``openb_node_list_all_node.csv``: 1,523 nodes of the same
cluster (``openb_node_list_gpu_node.csv`` is its 1,213-node GPU subset; pass it as ``path``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .location import traces_dir
from .table import Column, TraceTable, check_rows, finish, read_table

__all__ = [
    "OPENB_PODS_FILE",
    "OPENB_NODES_FILE",
    "OPENB_GPU_NODES_FILE",
    "OpenbPods",
    "OpenbNodes",
    "load_openb_pods",
    "load_openb_nodes",
]

OPENB_PODS_FILE = "alibaba-gpu-v2023/openb_pod_list_default.csv"
OPENB_NODES_FILE = "alibaba-gpu-v2023/openb_node_list_all_node.csv"
OPENB_GPU_NODES_FILE = "alibaba-gpu-v2023/openb_node_list_gpu_node.csv"

QOS = frozenset({"LS", "BE", "Burstable", "Guaranteed"})
PHASES = frozenset({"Succeeded", "Running", "Pending", "Failed"})

_POD_COLUMNS = [
    Column("name", "str"),
    Column("cpu_milli", "int", nonnegative=True),
    Column("memory_mib", "int", nonnegative=True),
    Column("num_gpu", "int", nonnegative=True),
    Column("gpu_milli", "int", lower=0, upper=1000),
    Column("gpu_spec", "str", nullable=True),
    Column("qos", "str", choices=QOS),
    Column("pod_phase", "str", choices=PHASES),
    Column("creation_time", "float", nonnegative=True),
    Column("deletion_time", "float", nonnegative=True),
    Column("scheduled_time", "float", nonnegative=True, nullable=True),
]

_NODE_COLUMNS = [
    Column("sn", "str"),
    Column("cpu_milli", "int", lower=1),
    Column("memory_mib", "int", lower=1),
    Column("gpu", "int", nonnegative=True),
    Column("model", "str", nullable=True),
]


@dataclass(frozen=True, eq=False)
class OpenbPods(TraceTable):
    """openb pods. ``frame`` columns:
    name (str), cpu_milli, mem_mib, num_gpu (int64), gpu_milli (int64, 0..1000: the share of each
    GPU, below 1000 only for GPU-sharing pods), gpu_spec (str, allowed GPU models joined by "|", NaN =
    any), qos ("LS" | "BE" | "Burstable" | "Guaranteed"), phase (Succeeded | Running | Pending |
    Failed), creation_s, deletion_s, scheduled_s (float64 seconds; scheduled_s is NaN for the 897
    Pending pods).
    """


@dataclass(frozen=True, eq=False)
class OpenbNodes(TraceTable):
    """openb nodes. ``frame`` columns: sn (str), cpu_milli, mem_mib (int64, > 0), gpu (int64, >= 0),
    model (str GPU model, NaN on the CPU-only nodes)."""


def load_openb_pods(path: str | Path | None = None, *, lenient: bool = False) -> OpenbPods:
    """Load and validate the openb pod list (default: ``openb_pod_list_default.csv``).

    Checks: columns present; requests non-negative integers (gpu_milli within 0..1000); qos and
    pod_phase from the known sets; times non-negative; deletion >= creation.
    """
    path = Path(path) if path is not None else traces_dir() / OPENB_PODS_FILE
    frame, report = read_table(path, _POD_COLUMNS, lenient=lenient)
    frame = check_rows(frame, frame["deletion_time"] < frame["creation_time"], report,
                       column="deletion_time", expected="a time >= creation_time",
                       reason="deletion before creation", lenient=lenient)
    rename = {"memory_mib": "mem_mib", "pod_phase": "phase", "creation_time": "creation_s",
              "deletion_time": "deletion_s", "scheduled_time": "scheduled_s"}
    return OpenbPods(frame=finish(frame, rename), skipped=report, path=path)


def load_openb_nodes(path: str | Path | None = None, *, lenient: bool = False) -> OpenbNodes:
    """Load and validate an openb node list (default: ``openb_node_list_all_node.csv``).

    Checks: columns present; cpu_milli and memory_mib positive integers; gpu a non-negative integer.
    """
    path = Path(path) if path is not None else traces_dir() / OPENB_NODES_FILE
    frame, report = read_table(path, _NODE_COLUMNS, lenient=lenient)
    return OpenbNodes(frame=finish(frame, {"memory_mib": "mem_mib"}), skipped=report, path=path)
