"""Alibaba cluster-trace-v2018 sample loader tests (excerpts adapted from alibaba/clusterdata
cluster-trace-v2018, Alibaba Group, published for research or study purpose)."""

import pytest

from td3sched.trace import TraceError, load_machine_meta, load_machine_usage

USAGE = [
    "m_1932,386700,43,92,,,43.04,33.08,5",
    "m_1932,386640,41,92,,,43.04,33.08,-1",
    "m_1000,10,44,92,1.5,0,43.05,33.08,101",
]


def test_usage_sorted_and_markers(write):
    f = load_machine_usage(write("mu.csv", "\n".join(USAGE) + "\n")).frame
    assert list(f.columns) == ["machine_id", "time_stamp", "cpu_util_percent", "mem_util_percent", "mem_gps",
                               "mkpi", "net_in", "net_out", "disk_io_percent"]
    assert list(f["machine_id"]) == ["m_1000", "m_1932", "m_1932"]
    assert list(f["time_stamp"]) == [10.0, 386640.0, 386700.0]
    assert f["disk_io_percent"].isna().tolist() == [True, True, False]


@pytest.mark.parametrize(
    "row, column, value",
    [("m_1,386,143,92,,,43.04,33.08,5", "cpu_util_percent", "143"),
     ("m_1,386,43,92,,,43.04,33.08,100.5", "disk_io_percent", "100.5"),
     ("m_1,abc,43,92,,,43.04,33.08,5", "time_stamp", "abc")],
)
def test_usage_malformed(write, row, column, value):
    path = write("machine_usage.csv", "\n".join([USAGE[0], row, USAGE[1]]) + "\n")
    with pytest.raises(TraceError) as exc:
        load_machine_usage(path)
    assert (exc.value.line, exc.value.column, exc.value.value) == (2, column, value)  # headerless: row 2 = line 2
    assert str(exc.value).startswith(f"machine_usage.csv line 2, column '{column}': got '{value}'")
    assert len(load_machine_usage(path, lenient=True)) == 2


def test_real_usage(traces):
    t = load_machine_usage()
    f = t.frame
    assert len(f) == 100_002 and f["machine_id"].nunique() == 16
    assert f.groupby("machine_id")["time_stamp"].apply(lambda s: s.is_monotonic_increasing).all()
    d = f["disk_io_percent"]
    assert d.isna().sum() > 0 and d.min() >= 0 and d.max() <= 100


def test_real_meta(traces):
    f = load_machine_meta().frame
    assert len(f) == 17_592 and f["machine_id"].nunique() == 4_034
    assert (f["cpu_num"] == 96).all()
    assert f["failure_domain_2"].isna().sum() > 0
