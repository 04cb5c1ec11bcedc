"""Means and 95% intervals over seeds, checked against numbers computed by hand and t tables; the
bootstrap interval of a metric that cannot be negative never reaches below zero."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.evaluate.stats import paired_difference, summarize, t_quantile

#: t_{0.975, df} from the standard tables.
T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 9: 2.2621572, 29: 2.0452296, 120: 1.9799304}


@pytest.mark.parametrize("df, expected", sorted(T975.items()))
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-6)


def test_bad_quantile_arguments_are_named():
    with pytest.raises(ValueError, match="p=1.5"):
        t_quantile(1.5, 3)
    with pytest.raises(ValueError, match="degrees of freedom 0"):
        t_quantile(0.9, 0)


def test_summary_of_five_values_by_hand():
    # mean 3; s^2 = (4+1+0+1+4)/4 = 2.5; se = sqrt(2.5/5) = sqrt(0.5); half = 2.7764451 * 0.7071068
    s = summarize([1, 2, 3, 4, 5])
    assert s.n == 5 and s.mean == 3.0 and s.method == "t"
    assert s.std == pytest.approx(math.sqrt(2.5))
    assert s.half == pytest.approx(2.7764451 * math.sqrt(0.5), abs=1e-6)  # 1.963243
    assert s.low == pytest.approx(3 - 1.963243, abs=1e-6) and s.high == pytest.approx(3 + 1.963243, abs=1e-6)


def test_summary_of_two_values_by_hand():
    # mean 3, s = sqrt(2), se = 1, half = t_{0.975,1} = 12.706
    s = summarize([2.0, 4.0])
    assert (s.n, s.mean) == (2, 3.0)
    assert s.half == pytest.approx(12.7062047, abs=1e-6)


def test_a_skewed_latency_gets_no_negative_lower_bound():
    """Three seeds at ~100 ms and one at 2 s: the t interval of the mean reaches below 0 ms; the
    bootstrap interval of a metric bounded at 0 stays within the values."""
    xs = [95.0, 102.0, 110.0, 2000.0]
    t = summarize(xs)
    assert t.low < 0  # what the report used to print
    b = summarize(xs, lower_bound=0.0)
    assert b.method == "bootstrap" and b.half is None and b.mean == t.mean
    assert min(xs) <= b.low < b.mean < b.high <= max(xs)
    assert summarize(xs, lower_bound=0.0) == b  # a fixed generator: the same report twice


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=12))
def test_a_bounded_metric_interval_stays_within_its_range(xs):
    s = summarize(xs, lower_bound=0.0)
    assert s.low is not None and 0.0 <= s.low <= s.high
    assert min(xs) - 1e-9 * max(1.0, max(xs)) <= s.low and s.high <= max(xs) + 1e-9 * max(1.0, max(xs))


def test_one_seed_has_a_mean_and_no_interval():
    s = summarize([0.42])
    assert (s.n, s.mean, s.std, s.half, s.low, s.high) == (1, 0.42, None, None, None, None)
    assert not s.defined and s.excludes_zero() is None


def test_no_values_and_non_numbers_are_handled():
    assert summarize([]).mean is None and summarize([]).n == 0
    s = summarize([1.0, None, "x", float("nan"), True, 3.0])
    assert s.n == 2 and s.mean == 2.0


def test_equal_values_give_a_zero_interval_not_rounding_noise():
    s = summarize([202.2] * 3 + [202.20000000000002])
    assert s.std == 0.0 and s.half == 0.0 and s.low == s.high == s.mean
    assert summarize([0.0] * 4, lower_bound=0.0).low == 0.0


def test_paired_difference_uses_common_seeds_only():
    base = {1: 10.0, 2: 12.0, 3: 11.0}
    other = {1: 12.0, 2: 14.5, 3: 14.0, 4: 99.0}
    d = paired_difference(base, other)  # diffs 2, 2.5, 3: mean 2.5, s 0.5
    assert d.n == 3 and d.mean == pytest.approx(2.5)
    assert d.half == pytest.approx(4.3026527 * 0.5 / math.sqrt(3), abs=1e-6)  # 1.242
    assert d.excludes_zero() is True
    wide = paired_difference(base, {1: 11.0, 2: 14.0, 3: 14.0})  # diffs 1, 2, 3: half 2.484 > mean 2
    assert wide.excludes_zero() is False
    assert paired_difference({1: 1.0}, {1: 2.0}).half is None
    assert np.isfinite(d.low) and d.low == pytest.approx(d.mean - d.half)
