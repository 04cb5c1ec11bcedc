"""DLRM loader tests.

The excerpts below are adapted from alibaba/clusterdata cluster-trace-gpu-v2025
(disaggregated_DLRM_trace.csv, Alibaba Group, published for research or study purpose; Yang et al.,
NSDI 2025).
"""

import numpy as np
import pytest

from td3sched.trace import TraceError, load_dlrm

HEADER = ("instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,"
          "memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,"
          "scheduled_time,deletion_time")
ROWS = [
    "instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,",
    "instance_13574,CN,app_130,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,1435629.0,1435629.0,1435760.0",
    "instance_7185,HN,app_0,12,12,1,1,25,25,120.0,120.0,680.0,800.0,8,100.0,101.0,",
]


def excerpt(rows=ROWS, header=HEADER):
    return "\n".join([header, *rows]) + "\n"


def with_cell(row: str, column: str, value: str) -> str:
    cells = row.split(",")
    cells[HEADER.split(",").index(column)] = value
    return ",".join(cells)


def test_canonical_columns_and_units(write):
    t = load_dlrm(write("dlrm.csv", excerpt()))
    f = t.frame
    assert list(f.columns) == [
        "instance_sn", "role", "app_name", "cpu_milli_request", "cpu_milli_limit", "gpu_request",
        "gpu_limit", "rdma_pct_request", "rdma_pct_limit", "mem_mib_request", "mem_mib_limit",
        "disk_gib_request", "disk_gib_limit", "max_instance_per_node", "creation_s", "scheduled_s",
        "deletion_s"]
    assert list(f["cpu_milli_request"]) == [12000, 64000, 12000]
    assert list(f["mem_mib_limit"]) == [120 * 1024, 320 * 1024, 120 * 1024]
    assert f["cpu_milli_request"].dtype == np.int64 and f["mem_mib_request"].dtype == np.int64
    assert list(f["max_instance_per_node"]) == [8, -1, 8]
    assert np.isnan(f["creation_s"].iloc[0]) and np.isnan(f["deletion_s"].iloc[2])
    assert f["deletion_s"].iloc[1] == 1435760.0
    assert t.skipped.count == 0 and t.path.name == "dlrm.csv"
    assert list(f.index) == [0, 1, 2]


def test_missing_column(write):
    header = HEADER.replace(",cpu_limit", "")
    rows = [",".join(c for i, c in enumerate(r.split(",")) if i != 4) for r in ROWS]
    with pytest.raises(TraceError) as exc:
        load_dlrm(write("dlrm.csv", excerpt(rows, header)))
    err = exc.value
    assert (err.path.name, err.line, err.column) == ("dlrm.csv", 1, "cpu_limit")
    assert str(err).startswith("dlrm.csv line 1, column 'cpu_limit': got columns 'instance_sn', 'role'")


@pytest.mark.parametrize(
    "column, value, reason, message",
    [
        ("cpu_request", "abc", "non-numeric cpu_request",
         "dlrm.csv line 3, column 'cpu_request': got 'abc', expected a non-negative number"),
        ("memory_request", "-8.0", "negative memory_request",
         "dlrm.csv line 3, column 'memory_request': got '-8', expected a non-negative number"),
        ("deletion_time", "1435000.0", "deletion before creation",
         "dlrm.csv line 3, column 'deletion_time': got '1435000', expected a time >= creation_time"),
        ("disk_limit", "200", "disk_limit below disk_request",
         "dlrm.csv line 3, column 'disk_limit': got '200', expected a value >= disk_request"),
        ("role", "XN", "unexpected role",
         "dlrm.csv line 3, column 'role': got 'XN', expected one of 'CN', 'HN'"),
        ("max_instance_per_node", "0", "max_instance_per_node of 0",
         "dlrm.csv line 3, column 'max_instance_per_node': got '0', expected -1 (no cap) or an integer >= 1"),
        ("gpu_request", "", "missing gpu_request",
         "dlrm.csv line 3, column 'gpu_request': got '', expected a non-negative integer"),
    ],
)
def test_malformed_strict_and_lenient(write, column, value, reason, message):
    rows = [ROWS[0], with_cell(ROWS[1], column, value), ROWS[2]]
    path = write("dlrm.csv", excerpt(rows))
    with pytest.raises(TraceError) as exc:
        load_dlrm(path)
    assert str(exc.value) == message
    assert exc.value.line == 3 and exc.value.column == column
    t = load_dlrm(path, lenient=True)
    assert list(t.frame["instance_sn"]) == ["instance_0", "instance_7185"]
    assert t.skipped.skipped == {reason: 1} and t.skipped.total_rows == 3
    assert t.skipped.summary() == f"skipped 1 of 3 rows of dlrm.csv: 1 {reason}"


def test_lenient_counts_several_reasons(write):
    rows = [
        ROWS[0],
        with_cell(ROWS[1], "cpu_request", "abc"),
        with_cell(ROWS[1], "deletion_time", "5.0"),
        with_cell(ROWS[1], "cpu_request", "x"),
        ROWS[2],
    ]
    t = load_dlrm(write("dlrm.csv", excerpt(rows)), lenient=True)
    assert len(t.frame) == 2
    assert t.skipped.skipped == {"non-numeric cpu_request": 2, "deletion before creation": 1}
    assert t.skipped.summary() == (
        "skipped 3 of 5 rows of dlrm.csv: 2 non-numeric cpu_request, 1 deletion before creation")


def test_real_trace(traces):
    t = load_dlrm()
    f = t.frame
    assert len(f) == 23_871 and t.skipped.count == 0
    assert f["creation_s"].isna().sum() > 0
    assert f["creation_s"].notna().sum() == 16_591  # arrivals during the 31 days
    assert f["deletion_s"].isna().sum() > 0
    assert f["role"].value_counts().to_dict() == {"CN": 16_485, "HN": 7_386}
    assert f["app_name"].nunique() == 156
    assert (f["cpu_milli_limit"] >= f["cpu_milli_request"]).all()
    assert set(f["max_instance_per_node"].unique()) >= {-1}
    assert f["creation_s"].max() < 31 * 86_400
