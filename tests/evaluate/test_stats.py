"""Means and 95% intervals over seeds, checked against numbers computed by hand and t tables."""

from __future__ import annotations

import math

import pytest

from td3sched.evaluate.stats import paired_difference, summarize, t_cdf, t_quantile

#: t_{0.975, df} from the standard tables.
T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 9: 2.2621572, 29: 2.0452296, 120: 1.9799304}


@pytest.mark.parametrize("df, expected", sorted(T975.items()))
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-6)


def test_t_quantile_tends_to_the_normal_and_inverts_the_cdf():
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)
    assert t_quantile(0.5, 7) == 0.0
    for df in (1, 3, 10):
        for p in (0.6, 0.9, 0.995):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi


def test_t_quantile_agrees_with_scipy_when_available():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 17, 60):
        for p in (0.9, 0.95, 0.975, 0.999):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)


def test_summary_of_five_values_by_hand():
    # mean 3; s^2 = (4+1+0+1+4)/4 = 2.5; se = sqrt(2.5/5) = sqrt(0.5); half = 2.7764451 * 0.7071068
    s = summarize([1, 2, 3, 4, 5])
    assert s.n == 5 and s.mean == 3.0
    assert s.std == pytest.approx(math.sqrt(2.5))
    assert s.half == pytest.approx(2.7764451 * math.sqrt(0.5), abs=1e-6)  # 1.963243
    assert s.low == pytest.approx(3 - 1.963243, abs=1e-6) and s.high == pytest.approx(3 + 1.963243, abs=1e-6)


def test_summary_of_two_values_by_hand():
    # mean 3, s = sqrt(2), se = 1, half = t_{0.975,1} = 12.706
    s = summarize([2.0, 4.0])
    assert (s.n, s.mean) == (2, 3.0)
    assert s.half == pytest.approx(12.7062047, abs=1e-6)


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
    assert s.std == 0.0 and s.half == 0.0


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
