"""trimaran-lvrb (LoadVariationRiskBalancing) and the metrics pipeline's statistics, by hand.

For CPU and memory, with the mean and population standard deviation of the node's scrapes in the
window, as fractions of capacity (allocatable + overhead) times allocatable:
    mu = clip((mean + request) / alloc, 0, 1)
    sigma = clip(margin x clip(std / alloc, 0, 1) ** (1 / sensitivity), 0, 1)
    score = round(min over resources of (1 - (mu + sigma) / 2) x 100)       Go's round
"""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.policy.load_variation_risk_balancing import LoadVariationRiskBalancing, LoadVariationRiskBalancingArgs
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.metrics_pipeline import MetricsPipeline
from td3sched.workload.pods import BURSTABLE

from tests.simulator.worlds import INF, node, pool

# Scrapes (CPU milli, memory MiB) of two nodes, oldest first. n0: 4000m, 8192Mi. n1: 3000m allocatable
# plus 1000m system overhead (capacity 4000m), 8192Mi.
SCRAPES = [
    [(8000, 0), (0, 0)],            # falls out of a 120 s window (4 scrapes of 30 s)
    [(1000, 2048), (2000, 1024)],
    [(3000, 2048), (2000, 3072)],
    [(1000, 2048), (2000, 1024)],
    [(3000, 2048), (2000, 3072)],
]
# Over the last 4: n0 CPU mean 2000, std sqrt((1000^2 + 1000^2 + 1000^2 + 1000^2)/4) = 1000; memory 2048, 0
#                  n1 CPU mean 2000, std 0; memory mean 2048, std sqrt(4 x 1024^2 / 4) = 1024


def _setup(policy):
    c = Cluster([pool("n0", node(cpu=4000, mem=8192), 1), pool("n1", node(cpu=3000, mem=8192, oh_cpu=1000), 1)])
    pipe = MetricsPipeline(c.size, 4, scrape_s=30.0, window_s=60.0)
    policy.attach(PolicyContext(c, 30.0, 60.0, None, pipe))
    for scrape in SCRAPES:
        usage = np.zeros((2, 4))
        usage[:, :2] = scrape
        c.observed[:] = pipe.scrape(usage)
    return policy, c, pipe


def _pod(cpu, mem):
    return PodRequest(0, np.array([cpu, mem, 0.0, 0.0]), 0, 0, BURSTABLE, INF, INF, 200.0)


def test_statistics_of_the_last_window_by_hand():
    _, _, pipe = _setup(LoadVariationRiskBalancing(LoadVariationRiskBalancingArgs(window_s=120)))
    mean, std = pipe.stats(120)
    np.testing.assert_allclose(mean[:, :2], [[2000, 2048], [2000, 2048]])
    np.testing.assert_allclose(std[:, :2], [[1000, 0], [0, 1024]])
    # a 60 s window holds the last 2 scrapes: n0 CPU (1000 + 3000)/2 = 2000, std 1000
    mean, std = pipe.stats(60)
    np.testing.assert_allclose([mean[0, 0], std[0, 0]], [2000, 1000])


def test_scores_by_hand():
    policy, c, _ = _setup(LoadVariationRiskBalancing(LoadVariationRiskBalancingArgs(window_s=120)))
    # pod (1000m, 1024Mi), margin 1, sensitivity 1:
    # n0 CPU: mu = (2000 + 1000)/4000 = 0.75, sigma = 1000/4000 = 0.25 -> risk 0.5 -> 50
    #    mem: mu = (2048 + 1024)/8192 = 0.375, sigma 0 -> risk 0.1875 -> 81.25            min 50 -> 50
    # n1 CPU: mean 2000 of capacity 4000 = 50% of allocatable 3000 = 1500
    #         mu = (1500 + 1000)/3000 = 0.8333, sigma 0 -> risk 0.41667 -> 58.33
    #    mem: mu = 0.375, sigma = 1024/8192 = 0.125 -> risk 0.25 -> 75                   min 58.33 -> 58
    np.testing.assert_array_equal(policy.score(_pod(1000, 1024), np.arange(2), c), [50, 58])
    # pod (4000m, 1024Mi): n0 CPU mu = min(1, 6000/4000) = 1 -> risk (1 + 0.25)/2 = 0.625 -> 37.5 -> 38 (Go)
    #                      n1 CPU mu = min(1, 5500/3000) = 1 -> risk 0.5 -> 50; mem 75 -> 50
    np.testing.assert_array_equal(policy.score(_pod(4000, 1024), np.arange(2), c), [38, 50])


def test_margin_and_sensitivity_from_the_spec():
    policy = make_policy("trimaran-lvrb:margin=2:sensitivity=2:window_s=120")
    assert policy.args == LoadVariationRiskBalancingArgs(margin=2.0, sensitivity=2.0, window_s=120.0)
    policy, c, _ = _setup(policy)
    # n0 CPU: sigma = 2 x sqrt(0.25) = 1 -> risk (0.75 + 1)/2 = 0.875 -> 12.5; mem 81.25 -> 12.5 -> 13 (Go; NumPy 12)
    # n1 CPU: 58.33; mem: sigma = 2 x sqrt(0.125) = 0.70711 -> risk (0.375 + 0.70711)/2 = 0.54105 -> 45.89 -> 46
    np.testing.assert_array_equal(policy.score(_pod(1000, 1024), np.arange(2), c), [13, 46])


def test_default_window_is_the_load_watchers_15_minutes():
    assert LoadVariationRiskBalancingArgs().window_s == 900
    policy, _, pipe = _setup(LoadVariationRiskBalancing())
    assert len(pipe.retained) == 900 // 30
    # fewer scrapes than the window so far: all 5. n0 CPU: mean (8000 + 1000 + 3000 + 1000 + 3000)/5 = 3200
    mean, _ = pipe.stats(900)
    assert mean[0, 0] == pytest.approx(3200)


def test_stats_keep_scrape_and_forget_as_they_were():
    plain = MetricsPipeline(2, 1, 30.0, 60.0)
    tracked = MetricsPipeline(2, 1, 30.0, 60.0)
    tracked.retain(90)
    with pytest.raises(ValueError, match=r"retain\(120\)"):
        tracked.stats(120)
    mean, std = tracked.stats(90)                                   # no scrape yet: zeros
    assert mean.tolist() == [[0], [0]] and std.tolist() == [[0], [0]]
    for v in (10.0, 20.0, 60.0):
        u = np.array([[v], [2 * v]])
        np.testing.assert_array_equal(tracked.scrape(u), plain.scrape(u))
    mean, std = tracked.stats(90)
    # node 0: 10, 20, 60 -> mean 30, std sqrt((400 + 100 + 900)/3) = sqrt(466.67) = 21.602
    assert mean[0, 0] == pytest.approx(30) and std[0, 0] == pytest.approx((1400 / 3) ** 0.5)
    tracked.forget(np.array([1]))
    plain.forget(np.array([1]))
    mean, std = tracked.stats(90)
    assert mean[1, 0] == 0 and std[1, 0] == 0                       # a removed node's history is zeros
    np.testing.assert_array_equal(tracked.scrape(np.array([[0.0], [5.0]])), plain.scrape(np.array([[0.0], [5.0]])))
    # node 1 now: 0, 0, 5 -> mean 5/3
    assert tracked.stats(90)[0][1, 0] == pytest.approx(5 / 3)


def test_retain_grows_and_keeps_the_scrapes_already_held():
    pipe = MetricsPipeline(1, 1, 30.0, 30.0)
    pipe.retain(60)                                                 # 2 scrapes
    for v in (1.0, 2.0, 3.0):
        pipe.scrape(np.array([[v]]))
    pipe.retain(120)                                                # 4 scrapes: keeps 2 and 3
    pipe.scrape(np.array([[7.0]]))
    assert pipe.stats(120)[0][0, 0] == pytest.approx((2 + 3 + 7) / 3)


@pytest.mark.parametrize("spec, message", [
    ("margin=-1", "margin=-1.0: expected a number >= 0"),
    ("sensitivity=0", "sensitivity=0.0: expected a number > 0"),
    ("window_s=0", "window_s=0.0: expected a positive number of seconds"),
    ("window_s=inf", "window_s=inf: expected a positive number of seconds"),
    ("margin=one", "margin='one': expected a number"),
    ("risk=1", "unknown argument(s) ['risk']"),
])
def test_bad_arguments_are_named(spec, message):
    with pytest.raises(ValueError) as err:
        LoadVariationRiskBalancing.from_spec(spec)
    assert message in str(err.value)
