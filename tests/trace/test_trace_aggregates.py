import numpy as np
import pytest

from td3sched.trace import TraceError, daily_shape


def test_synthetic_two_days(write):
    day = np.arange(288, dtype=float) + 1.0
    values = np.concatenate([day, 3 * day])  # mean day = 2 * day
    path = write("agg.csv", "cpu_util_percent,other\n" + "".join(f"{v},1\n" for v in values))
    shape = daily_shape(path=path)
    assert shape.dtype == np.float64 and shape.shape == (288,)
    np.testing.assert_allclose(shape, day / day.mean())
    hourly = daily_shape(path=path, bins=24)
    np.testing.assert_allclose(hourly, day.reshape(24, 12).mean(1) / day.mean())
    with pytest.raises(ValueError):
        daily_shape(path=path, bins=100)
    with pytest.raises(TraceError, match="column 'mem_util_percent'"):
        daily_shape("mem_util_percent", path=path)


def test_bad_value(write):
    path = write("agg.csv", "cpu_util_percent\n1\n-2\n")
    with pytest.raises(TraceError, match=r"agg.csv line 3, column 'cpu_util_percent': got '-2'"):
        daily_shape(path=path)


def test_real(traces):
    for column in ("cpu_util_percent", "mem_util_percent", "net_in", "net_out", "disk_io_percent"):
        shape = daily_shape(column)
        assert shape.shape == (288,) and shape.dtype == np.float64
        assert shape.mean() == pytest.approx(1.0)
        assert (shape > 0).all()
    cpu = daily_shape()
    assert 1.2 < cpu.max() / cpu.min() < 3  # a visible but moderate diurnal swing
