"""koord-loadaware (Koordinator LoadAwareScheduling) against scores worked out by hand.

    estimate_r = round(q_r x factor_r / 100), q = limit if limit > request else request
                 (250m CPU / 200 MiB when neither); factors CPU 85%, memory 70%
    used_r     = observed_r + estimates of pods bound after last_scrape - 60 s + estimate of the pod
    Filter     : round(100 x used_r / alloc_r) <= threshold_r (CPU 65, memory 95), else rejected
    Score      : (least_cpu + least_mem) // 2, least_r = (alloc_r - used_r) x 100 // alloc_r
    rejected nodes are dropped by the policy's filter hook; the pod stays pending if none is left
Memory is in bytes in the policy; MiB x 2^20 cancels in every quotient, so the arithmetic below is in MiB.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.koord_load_aware import KoordLoadAware, LoadAwareArgs, estimate_usage
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BURSTABLE

from tests.simulator.worlds import INF, node, pool

MIB = 1 << 20
SHAPES = [(4000, 8192), (4000, 8192), (8000, 16384)]      # allocatable CPU milli, memory MiB
OBSERVED = [(1000, 2048), (1900, 1000), (2000, 12000)]    # observed CPU milli, memory MiB
LAST_SCRAPE_S = 90.0


def _attached(policy=None, observed=OBSERVED):
    c = Cluster([pool(f"n{i}", node(cpu=cpu, mem=mem), 1) for i, (cpu, mem) in enumerate(SHAPES)])
    c.observed[:, :2] = observed
    c.last_scrape_s = LAST_SCRAPE_S
    policy = policy or KoordLoadAware()
    policy.attach(PolicyContext(c, 30.0, 60.0, None, None))
    return policy, c


def _pod(cpu=1000.0, mem=2000.0, cpu_limit=INF, mem_limit=INF, t=100.0):
    return PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), 0, 0, BURSTABLE, cpu_limit, mem_limit, t)


def test_estimates_of_pods_by_hand():
    args = LoadAwareArgs()
    # (1000m, 2000Mi), no limits: 1000 x 85/100 = 850m; 2000 x 70/100 = 1400Mi
    assert estimate_usage(_pod(), args).tolist() == [850, 1400 * MIB]
    # limits above the requests are used instead: 2000 x 0.85 = 1700m; 4000 x 0.7 = 2800Mi
    assert estimate_usage(_pod(cpu_limit=2000, mem_limit=4000), args).tolist() == [1700, 2800 * MIB]
    # no request, a limit: 300 x 0.85 = 255m. Neither: the defaults 250m / 200Mi, not scaled
    assert estimate_usage(_pod(cpu=0, mem=0, cpu_limit=300), args).tolist() == [255, 200 * MIB]
    # 10m x 0.85 = 8.5 -> 9 (Go's round; NumPy's would give 8)
    assert estimate_usage(_pod(cpu=10), args)[0] == 9


def test_scores_and_filter_by_hand():
    policy, c = _attached()
    # the pod's estimate is (850m, 1400Mi)
    # n0: used (1850, 3448): CPU 46.25% -> 46 <= 65, memory 42.1% -> 42 <= 95: passes
    #     least CPU (4000 - 1850) x 100 // 4000 = 215000 // 4000 = 53
    #     least mem (8192 - 3448) x 100 // 8192 = 474400 // 8192 = 57         -> (53 + 57) // 2 = 55
    # n1: used (2750, 2400): CPU 68.75% -> 69 > 65: rejected by the Filter; its score would be
    #     least CPU (4000 - 2750) x 100 // 4000 = 31, mem (8192 - 2400) x 100 // 8192 = 70 -> 101 // 2 = 50
    # n2: used (2850, 13400): CPU 35.6% -> 36, memory 81.8% -> 82: passes
    #     least CPU (8000 - 2850) x 100 // 8000 = 515000 // 8000 = 64
    #     least mem (16384 - 13400) x 100 // 16384 = 298400 // 16384 = 18     -> (64 + 18) // 2 = 41
    np.testing.assert_array_equal(policy.score(_pod(), np.arange(3), c), [55, 50, 41])
    assert policy.filter(_pod(), np.arange(3), c).tolist() == [True, False, True]


def test_a_pod_bound_since_the_metrics_changes_the_next_score():
    policy, c = _attached()
    nodes = np.array([0, 2])
    assert policy.score(_pod(), nodes, c).tolist() == [55, 41]
    assert policy.filter(_pod(), nodes, c).tolist() == [True, True]
    policy.bound(_pod(t=100.0), 0, c)          # estimate (850m, 1400Mi) on n0, after the scrape at 90
    # n0: used (1000 + 850 + 850, 2048 + 1400 + 1400) = (2700, 4848): CPU 67.5% -> 68 > 65: rejected
    #     score: least CPU 130000 // 4000 = 32, mem (8192 - 4848) x 100 // 8192 = 334400 // 8192 = 40 -> 36
    assert policy.score(_pod(), nodes, c).tolist() == [36, 41]
    assert policy.filter(_pod(), nodes, c).tolist() == [False, True]
    c.last_scrape_s = 120.0                    # 100 > 120 - 60: not yet fully in the metrics, still estimated
    assert policy.filter(_pod(), nodes, c).tolist() == [False, True]
    c.last_scrape_s = 160.0                    # 100 > 160 - 60 is false: in the metrics now
    assert policy.score(_pod(), nodes, c).tolist() == [55, 41]
    assert policy.filter(_pod(), nodes, c).tolist() == [True, True]


def test_threshold_is_on_the_rounded_percentage():
    n0 = np.array([0])
    # observed CPU 1750: used 2600 = 65.0% -> passes; least CPU (4000 - 2600) x 100 // 4000 = 35, mem 57 -> 46
    policy, c = _attached(observed=[(1750, 2048), (0, 0), (0, 0)])
    assert policy.score(_pod(), n0, c).tolist() == [46]
    assert policy.filter(_pod(), n0, c).tolist() == [True]
    # observed CPU 1770: used 2620 = 65.5% -> 66 > 65 -> rejected
    policy, c = _attached(observed=[(1770, 2048), (0, 0), (0, 0)])
    assert policy.filter(_pod(), n0, c).tolist() == [False]
    # threshold 64, observed 1730: used 2580 = 64.5% -> 65 (Go; NumPy's 64 would pass) > 64 -> rejected
    policy, c = _attached(make_policy("koord-loadaware:cpu_threshold=64"), observed=[(1730, 2048), (0, 0), (0, 0)])
    assert policy.filter(_pod(), n0, c).tolist() == [False]
    # threshold 0 turns the CPU check off: n1 (68.75%) is scored
    #     least CPU (4000 - 2750) x 100 // 4000 = 31, mem (8192 - 2400) x 100 // 8192 = 70 -> 101 // 2 = 50
    policy, c = _attached(make_policy("koord-loadaware:cpu_threshold=0"))
    assert policy.score(_pod(), np.array([1]), c).tolist() == [50]


def test_weights_and_factors_from_the_spec():
    policy, c = _attached(make_policy("koord-loadaware:cpu_weight=3:mem_weight=1"))
    # n0: (3 x 53 + 57) // 4 = 216 // 4 = 54; n2: (3 x 64 + 18) // 4 = 210 // 4 = 52
    assert policy.score(_pod(), np.array([0, 2]), c).tolist() == [54, 52]
    policy, c = _attached(make_policy("koord-loadaware:cpu_factor=100:mem_factor=100"))
    assert policy.args == LoadAwareArgs(cpu_factor=100, mem_factor=100)
    # estimate = the request (1000m, 2000Mi): n0 used (2000, 4048): least CPU 50, mem 414400 // 8192 = 50 -> 50
    assert policy.score(_pod(), np.array([0]), c).tolist() == [50]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 8000), st.floats(0, 16384)), min_size=3, max_size=3),
       st.floats(0, 4000), st.floats(0, 8000))
def test_filter_rejects_exactly_the_nodes_over_a_threshold(observed, cpu, mem):
    policy, c = _attached(observed=observed)
    pod = _pod(cpu=cpu, mem=mem)
    scores = policy.score(pod, np.arange(3), c)
    used = c.observed[:, :2] * [1, MIB] + estimate_usage(pod, policy.args)
    alloc = c.allocatable[:, :2] * [1, MIB]
    pct = 100 * used / alloc
    # Go's round of the percentage above the threshold (65, 95), written out: x.5 rounds up here
    rejected = (np.floor(pct + 0.5) > [65, 95]).any(axis=1)
    assert np.all(np.isfinite(scores)) and np.all((scores >= 0) & (scores <= 100))
    assert policy.filter(pod, np.arange(3), c).tolist() == (~rejected).tolist()


@pytest.mark.parametrize("spec, message", [
    ("cpu_threshold=101", "cpu_threshold=101: expected a whole number in [0, 100]"),
    ("mem_threshold=-5", "mem_threshold=-5: expected a whole number in [0, 100]"),
    ("cpu_weight=0", "cpu_weight=0: expected a whole number in [1, 100]"),
    ("mem_factor=0", "mem_factor=0: expected a whole number in [1, 100]"),
    ("cpu_factor=85.5", "cpu_factor='85.5': expected a whole number"),
    ("threshold=65", "unknown argument(s) ['threshold']"),
])
def test_bad_arguments_are_named(spec, message):
    with pytest.raises(ValueError) as err:
        KoordLoadAware.from_spec(spec)
    assert message in str(err.value)
