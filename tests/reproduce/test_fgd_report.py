"""The reproduction's comparison table: medians over seeds, differences, and the seed-range test."""

from __future__ import annotations

import pandas as pd
import pytest

from td3sched.reproduce.fgd_report import comparison, markdown_table, seeds_from


def _curves(policy, values_at_100):
    return pd.DataFrame([dict(policy=policy, seed=s, arrived_pct=100, unallocated_pct=v, frag_amount_pct=v,
                              frag_ratio_pct=v) for s, v in enumerate(values_at_100)])


def test_comparison_takes_medians_and_checks_their_range():
    ours = _curves("FGD", [4.0, 5.0, 9.0])                 # median 5.0
    theirs = _curves("FGD", [4.6, 4.7, 4.8, 4.9])          # median 4.75, range 4.6-4.9
    t = comparison(ours, theirs, points=(100,))
    row = t[t.metric == "unallocated_pct"].iloc[0]
    assert (row.ours, row.theirs, row["diff"]) == pytest.approx((5.0, 4.75, 0.25))
    assert not row.in_their_range and row.within_1pt
    assert "5.00 (4.75, +0.25) *" in markdown_table(t, "unallocated_pct", points=(100,))


def test_seeds_from_text():
    assert seeds_from("42-44") == (42, 43, 44)
    assert seeds_from("42,50") == (42, 50)
    with pytest.raises(ValueError, match="expected a range"):
        seeds_from("forty")
