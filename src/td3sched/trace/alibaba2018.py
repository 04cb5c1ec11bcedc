"""Alibaba cluster-trace-v2018 (partial sample): machine usage and machine meta.

Attribution: Alibaba Group, alibaba/clusterdata ``cluster-trace-v2018/`` (schema.txt), published
"for research or study purpose" (alibaba/clusterdata README); the sampled rows come from
gohsyi/cluster_optimization (commit d147f574, ``data/``). Any excerpt the project ships must carry
this attribution.

``machine_usage.csv`` (100,002 rows, no header): per-machine CPU, memory, memory bandwidth, cache
misses, network and disk-IO utilisation of 16 co-located production machines over 8 days (~60 s
samples; rows are not time-sorted in the file). ``machine_meta.csv`` (17,592 rows, no header):
capacity and status events of 4,034 machines. Column names come from schema.txt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .location import traces_dir
from .table import Column, TraceTable, check_rows, finish, read_table

__all__ = [
    "MACHINE_USAGE_FILE",
    "MACHINE_META_FILE",
    "MACHINE_USAGE_NAMES",
    "MACHINE_META_NAMES",
    "MachineUsage",
    "MachineMeta",
    "load_machine_usage",
    "load_machine_meta",
]

MACHINE_USAGE_FILE = "alibaba-v2018-sample/machine_usage.csv"
MACHINE_META_FILE = "alibaba-v2018-sample/machine_meta.csv"

MACHINE_USAGE_NAMES = (
    "machine_id", "time_stamp", "cpu_util_percent", "mem_util_percent", "mem_gps", "mkpi",
    "net_in", "net_out", "disk_io_percent",
)
MACHINE_META_NAMES = (
    "machine_id", "time_stamp", "failure_domain_1", "failure_domain_2", "cpu_num", "mem_size", "status",
)

_USAGE_COLUMNS = [
    Column("machine_id", "str"),
    Column("time_stamp", "float", nonnegative=True),
    Column("cpu_util_percent", "float", lower=0, upper=100),
    Column("mem_util_percent", "float", lower=0, upper=100),
    Column("mem_gps", "float", lower=0, upper=100, nullable=True),
    Column("mkpi", "float", nonnegative=True, nullable=True),
    Column("net_in", "float", lower=0, upper=100),
    Column("net_out", "float", lower=0, upper=100),
    # -1 and 101 are the trace's markers for a bad reading (schema.txt); they become NaN below.
    Column("disk_io_percent", "float", lower=-1, upper=101),
]

_META_COLUMNS = [
    Column("machine_id", "str"),
    Column("time_stamp", "float", nonnegative=True),
    Column("failure_domain_1", "str"),
    Column("failure_domain_2", "str", nullable=True),
    Column("cpu_num", "int", lower=1),
    Column("mem_size", "float", lower=0, upper=100),
    Column("status", "str"),
]


@dataclass(frozen=True, eq=False)
class MachineUsage(TraceTable):
    """Machine usage samples, sorted by machine_id then time_stamp. ``frame`` columns:
    machine_id (str), time_stamp (float64 s from trace start), cpu_util_percent, mem_util_percent
    (0..100), mem_gps (normalised memory bandwidth 0..100, mostly NaN), mkpi (cache misses per
    thousand instructions, mostly NaN), net_in, net_out (normalised 0..100), disk_io_percent (0..100;
    NaN where the trace wrote its bad-value markers -1 or 101)."""


@dataclass(frozen=True, eq=False)
class MachineMeta(TraceTable):
    """Machine capacity/status events, in file order. ``frame`` columns: machine_id (str),
    time_stamp (float64 s), failure_domain_1, failure_domain_2 (str labels; the second may be NaN),
    cpu_num (int64 cores), mem_size (float64, normalised 0..100), status (str, e.g. "USING")."""


def load_machine_usage(path: str | Path | None = None, *, lenient: bool = False) -> MachineUsage:
    """Load and validate ``machine_usage.csv`` (headerless), sorted by machine then time.

    Utilisations must lie in 0..100; disk_io_percent in 0..100 or exactly -1 / 101 (set to NaN).
    """
    path = Path(path) if path is not None else traces_dir() / MACHINE_USAGE_FILE
    frame, report = read_table(path, _USAGE_COLUMNS, header=False, names=MACHINE_USAGE_NAMES,
                               lenient=lenient)
    disk = frame["disk_io_percent"]
    marker = disk.isin([-1.0, 101.0])
    frame = check_rows(frame, ((disk < 0) | (disk > 100)) & ~marker, report, column="disk_io_percent",
                       expected="a number in [0, 100] or a bad-value marker -1 / 101",
                       reason="disk_io_percent out of range", lenient=lenient)
    frame["disk_io_percent"] = frame["disk_io_percent"].mask(frame["disk_io_percent"].isin([-1.0, 101.0]),
                                                             np.nan)
    frame = frame.sort_values(["machine_id", "time_stamp"], kind="stable")
    return MachineUsage(frame=finish(frame), skipped=report, path=path)


def load_machine_meta(path: str | Path | None = None, *, lenient: bool = False) -> MachineMeta:
    """Load and validate ``machine_meta.csv`` (headerless), in file order."""
    path = Path(path) if path is not None else traces_dir() / MACHINE_META_FILE
    frame, report = read_table(path, _META_COLUMNS, header=False, names=MACHINE_META_NAMES,
                               lenient=lenient)
    return MachineMeta(frame=finish(frame), skipped=report, path=path)
