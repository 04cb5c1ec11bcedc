"""The four baseline policies run the tiny scenario end to end with finite metrics."""

from __future__ import annotations

import math

import pytest

from td3sched.policy import POLICIES
from td3sched.run import run_simulation

BASELINES = ["k8s-most-allocated", "trimaran-tlp", "trimaran-lvrb", "koord-loadaware"]


@pytest.mark.parametrize("name", BASELINES)
def test_runs_the_tiny_scenario(name):
    assert name in POLICIES
    record = run_simulation("tiny", name, 1, "test")
    metrics = record["metrics"]
    assert record["policy"] == name and metrics["decisions"] > 0
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    assert numbers and all(math.isfinite(v) for v in numbers.values()), numbers
