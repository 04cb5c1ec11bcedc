"""trimaran-tlp (TargetLoadPacking) against scores worked out by hand.

    predicted(pod) = CPU limit, else round(request x 1.5), else 1000m
    U = 100 x (observed CPU + predicted(pod) + predicted CPU of pods bound after last_scrape - 60 s) / capacity
    score = round(60 x U / 40 + 40)       if U <= 40
            round(40 x (100 - U) / 60)    if 40 < U <= 100
            0                             if U > 100
with capacity = allocatable + system overhead and Go's round (halves away from zero).
"""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.target_load_packing import TargetLoadPacking, TargetLoadPackingArgs, predicted_cpu_milli
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.metrics_pipeline import MetricsPipeline
from td3sched.workload.pods import BURSTABLE

from tests.simulator.worlds import INF, P, node, pool, simulate, world

# Three nodes of capacity 4000m: n1 reports 200m of its 4000m as system overhead (allocatable 3800).
#   observed CPU (system daemons included): n0 400, n1 2200, n2 3900
NODES = [node(cpu=4000), node(cpu=3800, oh_cpu=200), node(cpu=4000)]
OBSERVED_CPU = [400, 2200, 3900]
LAST_SCRAPE_S = 90.0


def _attached(policy=None):
    c = Cluster([pool(f"n{i}", shape, 1) for i, shape in enumerate(NODES)])
    c.observed[:, 0] = OBSERVED_CPU
    c.last_scrape_s = LAST_SCRAPE_S
    policy = policy or TargetLoadPacking()
    policy.attach(PolicyContext(c, 30.0, 60.0, None, MetricsPipeline(c.size, 4, 30.0, 60.0)))
    return policy, c


def _pod(cpu=0.0, limit=INF, t=100.0):
    return PodRequest(0, np.array([cpu, 0.0, 0.0, 0.0]), 0, 0, BURSTABLE, limit, INF, t)


def test_predicted_cpu_of_a_pod():
    args = TargetLoadPackingArgs()
    assert predicted_cpu_milli(_pod(cpu=500, limit=200), args) == 200      # the limit wins
    assert predicted_cpu_milli(_pod(cpu=1000), args) == 1500               # 1000 x 1.5
    assert predicted_cpu_milli(_pod(cpu=335), args) == 503                 # 502.5 -> 503 (Go), not 502
    assert predicted_cpu_milli(_pod(), args) == 1000                       # the default


def test_scores_by_hand():
    policy, c = _attached()
    nodes = np.arange(3)
    # a pod with a 200m limit (predicted 200):
    #   n0: U = 100 x (400 + 200)/4000 = 15    -> round(60 x 15/40 + 40) = round(62.5) = 63 (Go; NumPy gives 62)
    #   n1: U = 100 x (2200 + 200)/4000 = 60   -> round(40 x 40/60) = round(26.67) = 27
    #   n2: U = 100 x (3900 + 200)/4000 = 102.5 -> 0
    np.testing.assert_array_equal(policy.score(_pod(limit=200), nodes, c), [63, 27, 0])
    # a pod with neither request nor limit (predicted 1000):
    #   n0: U = 100 x 1400/4000 = 35  -> round(60 x 35/40 + 40) = round(92.5) = 93
    #   n1: U = 100 x 3200/4000 = 80  -> round(40 x 20/60) = round(13.33) = 13
    #   n2: U = 100 x 4900/4000 = 122.5 -> 0
    np.testing.assert_array_equal(policy.score(_pod(), nodes, c), [93, 13, 0])
    # a pod requesting 1000m (predicted 1500):
    #   n0: U = 100 x 1900/4000 = 47.5 -> round(40 x 52.5/60) = round(35) = 35
    #   n1: U = 100 x 3700/4000 = 92.5 -> round(40 x 7.5/60) = round(5) = 5
    np.testing.assert_array_equal(policy.score(_pod(cpu=1000), nodes[:2], c), [35, 5])


def test_score_jumps_from_100_at_the_target_to_the_target_just_above_it():
    policy, c = _attached()
    n0 = np.array([0])
    # request 800 -> predicted 1200: U = 100 x (400 + 1200)/4000 = 40 = T -> round(60 x 40/40 + 40) = 100
    assert policy.score(_pod(cpu=800), n0, c).tolist() == [100]
    # request 801 -> round(1201.5) = 1202: U = 100 x 1602/4000 = 40.05 -> round(40 x 59.95/60) = round(39.97) = 40
    assert policy.score(_pod(cpu=801), n0, c).tolist() == [40]


def test_a_pod_bound_after_the_last_scrape_counts_until_60_s_after_the_scrape_that_saw_it():
    policy, c = _attached()
    n0 = np.array([0])
    pod = _pod(limit=200)
    assert policy.score(pod, n0, c).tolist() == [63]                 # U = 15, as above
    policy.bound(_pod(t=100.0), 0, c)                                # predicted 1000, bound after the scrape at 90
    # n0: U = 100 x (400 + 200 + 1000)/4000 = 40 -> 100
    assert policy.score(pod, n0, c).tolist() == [100]
    c.last_scrape_s = 120.0                                          # 100 > 120 - 60: still counted
    assert policy.score(pod, n0, c).tolist() == [100]
    c.last_scrape_s = 160.0                                          # 100 > 160 - 60 is false: in the metrics now
    assert policy.score(pod, n0, c).tolist() == [63]


def test_the_rule_is_strictly_within_60_s_before_the_window_end():
    policy, c = _attached()
    n0 = np.array([0])
    policy.bound(_pod(t=30.0), 0, c)                                 # 90 - 30 = 60: not within, not counted
    assert policy.score(_pod(limit=200), n0, c).tolist() == [63]
    policy.bound(_pod(t=31.0), 0, c)                                 # 90 - 31 = 59 < 60: counted
    assert policy.score(_pod(limit=200), n0, c).tolist() == [100]


def test_the_simulator_spreads_a_burst_between_scrapes():
    # two empty 4000m nodes; p then q (1000m requests, predicted 1500 each) arrive between the scrapes
    # at 0 and 30. p: U = 100 x 1500/4000 = 37.5 on both -> round(60 x 37.5/40 + 40) = round(96.25) = 96,
    # a tie. q on p's node: U = 100 x 3000/4000 = 75 -> round(40 x 25/60) = round(16.67) = 17; on the
    # other node 96 again: q goes there (without the assign cache it would be a tie).
    w = world([pool("a", node(cpu=4000), 2)], [P("p", t=10, cpu=1000), P("q", t=11, cpu=1000)])
    for seed in range(4):
        run = simulate(w, policy=TargetLoadPacking(), seed=seed, end_s=20)
        placed = {e["pod"]: e for e in run.of("placement")}
        assert placed["p"]["score"] == 96 and placed["q"]["score"] == 96
        assert placed["q"]["node"] != placed["p"]["node"]


def test_spec_arguments_and_their_validation():
    policy = make_policy("trimaran-tlp:target_pct=70:multiplier=2:default_cpu_milli=2000")
    assert policy.args == TargetLoadPackingArgs(target_pct=70, multiplier=2.0, default_cpu_milli=2000)
    policy, c = _attached(policy)
    # T = 70, predicted 2000 (default): n0 U = 100 x 2400/4000 = 60 -> round(30 x 60/70 + 70) = round(95.71) = 96
    #                                   n1 U = 100 x 4200/4000 = 105 -> 0
    np.testing.assert_array_equal(policy.score(_pod(), np.array([0, 1]), c), [96, 0])


@pytest.mark.parametrize("spec, message", [
    ("target_pct=0", "target_pct=0: expected a whole percentage in [1, 100]"),
    ("target_pct=101", "target_pct=101: expected a whole percentage in [1, 100]"),
    ("target_pct=40.5", "target_pct='40.5': expected a whole number"),
    ("multiplier=0", "multiplier=0.0: expected a number > 0"),
    ("multiplier=nan", "multiplier=nan: expected a number > 0"),
    ("default_cpu_milli=-1", "default_cpu_milli=-1: expected a whole number of milli-CPU >= 0"),
    ("target=40", "unknown argument(s) ['target']"),
])
def test_bad_arguments_are_named(spec, message):
    with pytest.raises(ValueError) as err:
        TargetLoadPacking.from_spec(spec)
    assert message in str(err.value)
