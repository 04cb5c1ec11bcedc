"""Whole-datacenter load shapes (DataCenter-Traces-Datasets, CC BY 4.0).

Attribution: "DataCenter-Traces-Datasets", alejandrofdez-us/DataCenter-Traces-Datasets (commit
003bb8e7), Zenodo doi:10.5281/zenodo.14564847, licensed CC BY 4.0; processed from Alibaba
cluster-trace-v2018 (alibaba/clusterdata, published "for research or study purpose"). Any
excerpt the project ships must carry this attribution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import TraceError
from .location import traces_dir
from .table import Column, read_table

__all__ = ["ALIBABA_AGGREGATE_FILE", "AGGREGATE_STEP_S", "daily_shape"]

ALIBABA_AGGREGATE_FILE = "datacenter-aggregates/machine_usage_days_1_to_8_grouped_300_seconds.csv"
AGGREGATE_STEP_S = 300
_DAY_S = 86_400
_SLOTS_PER_DAY = _DAY_S // AGGREGATE_STEP_S  # 288


def daily_shape(column: str = "cpu_util_percent", path: str | Path | None = None, bins: int = 288) -> np.ndarray:
    """The mean day of one datacenter-wide utilisation column, normalised to average 1.0.

    The file (``machine_usage_days_1_to_8_grouped_300_seconds.csv``: Alibaba 2018 datacenter means
    of cpu_util_percent, mem_util_percent, net_in, net_out, disk_io_percent) has no timestamp
    column: row ``i`` is taken to be the 300 s bin starting at day 1 00:00 + ``i * 300`` s, i.e. rows
    are consecutive 5-minute bins. It holds 2,243 rows, 61 short of 8 full days (2,304), so the last
    day is partial and the later bins of the day average 7 days instead of 8.

    Each row goes to its bin of day (``(i * 300 mod 86400) * bins // 86400``); the shape is the mean
    of the rows in each bin, divided by the mean over bins. ``bins`` must divide 288 (288 = 5-minute
    bins, 96 = 15-minute, 24 = hourly).

    Returns:
        float64 array of length ``bins`` with mean 1.0.

    Raises:
        TraceError: the column is missing, a value is non-numeric, missing or negative, or the column
            averages to zero.
        ValueError: ``bins`` does not divide 288.
    """
    if bins < 1 or _SLOTS_PER_DAY % bins:
        raise ValueError(f"daily_shape: bins must divide {_SLOTS_PER_DAY}, got {bins}")
    path = Path(path) if path is not None else traces_dir() / ALIBABA_AGGREGATE_FILE
    frame, _ = read_table(path, [Column(column, "float", nonnegative=True)])
    values = frame[column].to_numpy(dtype=np.float64)
    if len(values) == 0:
        raise TraceError(path, 2, column, "", "at least one row", got="no rows")
    slot_of_day = np.arange(len(values)) % _SLOTS_PER_DAY
    bin_of_day = slot_of_day * bins // _SLOTS_PER_DAY
    counts = np.bincount(bin_of_day, minlength=bins)
    if (counts == 0).any():
        raise TraceError(path, None, column, len(values), f"at least {_SLOTS_PER_DAY} rows (one day)",
                         got=f"{len(values)} rows")
    shape = np.bincount(bin_of_day, weights=values, minlength=bins) / counts
    mean = shape.mean()
    if not mean > 0:
        raise TraceError(path, None, column, mean, "a column with a positive mean", got="a mean of 0")
    return shape / mean
