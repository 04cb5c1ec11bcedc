"""The objective (reward.py) on hand-computed cases, alone and through a run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from td3sched.reward import RewardConfig, RewardTracker, discount, overload
from td3sched.simulator.config import LatencyModel
from tests.simulator.worlds import BE, P, config, node, pool, profiles_from, simulate, typical, world


def test_a_decision_is_charged_its_cost_rate_over_the_time_to_the_next_and_the_events_in_between():
    t = RewardTracker(RewardConfig(), max_nodes=20)
    assert t.settle(0.0, [0, 0, 0]) == 0.0 and t.count == 0     # nothing open yet: only the baseline
    t.open(0.0, [10, 1.0, 0.1, 2.0])                              # N, F x N, overload, pending
    r = t.settle(1800.0, [1, 4, 3.0])
    # half an hour of (1 x 10 + 1 x 1 + 10 x 0.1 + 2 x 2) = 8 node-hours, plus 2 x 1 OOM + 0.25 x 4 breaches;
    # the 3 pod-hours above the SLO cost nothing at the default slo_hour 0
    assert r == pytest.approx(-11.0 / 20)
    res = t.result()
    assert res["cost_node_hours"] == pytest.approx(11.0) and res["episode_reward"] == pytest.approx(-0.55)
    assert [res[f"cost_{k}"] for k in ("nodes", "fragmentation", "overload", "pending", "oom", "slo", "slo_time")] \
        == pytest.approx([5.0, 0.5, 0.5, 2.0, 2.0, 1.0, 0.0])
    # the next decision's events count from this settle on
    t.open(1800.0, [0, 0, 0, 0])
    assert t.settle(3600.0, [1, 5, 3.0]) == pytest.approx(-0.25 / 20)


def test_hours_above_the_slo_are_charged_at_slo_hour_from_the_last_settle_on():
    t = RewardTracker(RewardConfig(slo_hour=0.5), max_nodes=10)
    t.settle(0.0, [0, 0, 2.0])                                    # hours before the first decision are not its
    t.open(0.0, [0, 0, 0, 0])
    assert t.settle(600.0, [0, 0, 6.0]) == pytest.approx(-0.5 * 4.0 / 10)
    assert t.result()["cost_slo_time"] == pytest.approx(2.0) and t.result()["cost_node_hours"] == pytest.approx(2.0)


def test_settle_refuses_a_wrong_number_of_event_counts():
    t = RewardTracker(RewardConfig())
    with pytest.raises(ValueError, match=r"events \[0, 0\].*expected 3 counts"):
        t.settle(0.0, [0, 0])


def test_open_needs_a_baseline_and_bad_settings_are_refused_by_name():
    with pytest.raises(RuntimeError, match="settle"):
        RewardTracker(RewardConfig()).open(0.0, [1, 0, 0, 0])
    with pytest.raises(ValueError, match="max_nodes"):
        RewardTracker(RewardConfig(), max_nodes=0)


@pytest.mark.parametrize("field,value", [("node_hour", -1.0), ("overload", float("nan")), ("slo_breach", -0.5),
                                         ("overload_util", 1.5)])
def test_bad_reward_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=rf"(?s){field}.*expected a number"):
        RewardConfig(**{field: value})


def test_overload_sums_provisioned_nodes_above_the_threshold_in_nodes():
    util = np.array([0.90, 0.50, 1.00, 0.95])
    provisioned = np.array([1.0, 1.0, 1.0, 0.0])
    assert overload(util, provisioned, 0.85) == pytest.approx(0.2)   # 0.05 + 0.15; the unprovisioned 0.95 not
    assert overload(util, np.zeros(4), 0.85) == 0.0


def test_the_discount_is_per_hour_of_elapsed_time():
    assert discount(0.9, 3600.0) == pytest.approx(0.9)
    assert discount(0.9, 1800.0) == pytest.approx(0.9 ** 0.5)
    assert discount(0.9, 0.0) == 1.0


def test_the_cost_of_one_placement_by_hand():
    # One 4000m / 8192 MiB node (the pool's only slot); the pod requests 3000m and uses 3600m at once.
    # From its bind at 0 s to the run's end at 120 s (1/30 h), at the rate after the placement:
    #   nodes 1; stranded: free CPU 1000m fits no typical pod (2000m) -> 1000 / 4000 x 1 node = 0.25;
    #   overload (0.90 - 0.85) x 10 = 0.5; nothing pending.
    w = world([pool("p", node(4000, 8192), 1)], [P("a", cpu=3000, mem=1000, size_cpu=3600)],
              typ=typical([(2000, 1000)], [1.0]))
    m = simulate(w, end_s=120).metrics
    assert m["decisions"] == 1
    assert m["cost_nodes"] == pytest.approx(1 / 30)
    assert m["cost_fragmentation"] == pytest.approx(0.25 / 30)
    assert m["cost_overload"] == pytest.approx(0.5 / 30)
    assert m["cost_pending"] == 0.0
    assert m["cost_node_hours"] == pytest.approx(1.75 / 30)
    assert m["episode_reward"] == pytest.approx(-1.75 / 30)   # one slot: max nodes 1


def test_a_pending_pod_is_priced_by_its_cpu_request_for_as_long_as_it_waits():
    # "big" (5000m) fits no 4000m node and waits the whole run; "a" is placed at 0 s: from then on
    # 5000 / 4000 x 1 node = 1.25 nodes of requests are pending, at 2 per node-hour, for 1/30 h.
    w = world([pool("p", node(4000, 8192), 1)], [P("big", cpu=5000), P("a", cpu=1000)],
              typ=typical([(1, 1)], [1.0]))
    m = simulate(w, end_s=120).metrics
    assert m["cost_pending"] == pytest.approx(2 * 1.25 / 30)


def test_the_return_does_not_depend_on_how_many_decisions_happen():
    # The same cluster cost over time, with one decision or with eleven (BestEffort pods that request
    # and use nothing change no rate): the same cost, split over more decisions.
    base = [P("a", cpu=1000, mem=1000, size_cpu=500)]
    extra = [P(f"be{i}", t=10.0 * i, qos=BE) for i in range(1, 11)]
    one = simulate(world([pool("p", node(), 2)], base), end_s=600).metrics
    many = simulate(world([pool("p", node(), 2)], base + extra), end_s=600).metrics
    assert (one["decisions"], many["decisions"]) == (1, 11)
    assert many["episode_reward"] == pytest.approx(one["episode_reward"], rel=1e-12)
    assert many["cost_node_hours"] == pytest.approx(2 * 600 / 3600 + one["cost_fragmentation"], rel=1e-12)


def test_an_oom_kill_at_a_bind_is_charged_to_that_decision():
    # "a" is placed at 0 s and its container is OOM-killed at once (memory 2 x its limit): the kill
    # belongs to the decision that placed it.
    w = world([pool("p", node(4000, 8192), 1)], [P("a", cpu=1000, mem=100, mem_limit=100, size_mem=200)])
    m = simulate(w, end_s=5).metrics
    assert m["container_oom"] >= 1
    assert m["cost_oom"] == pytest.approx(2.0 * m["container_oom"])


def _breaching_run(slo_hour: float):
    # the pattern of test_metrics_by_hand's breach episodes: a latency-sensitive pod alone on a 1000m node
    # whose CPU goes 0.5, 0.25, 0.5 of it by 300 s slots; with slo_factor 1.5 it is above its SLO in the
    # first and third slots: ticks 60..240 and 600..840, 9 one-minute samples, 2 episodes
    shape = np.zeros((4, 1, 3))
    shape[0, 0] = [0.5, 0.25, 0.5]
    w = world([pool("a", node(cpu=1000), 1)], [P("svc", ls=True, size_cpu=1000)], profiles_from(shape),
              config(latency=LatencyModel(base_sigma=0.0, slo_factor=1.5)))
    return simulate(replace(w, reward=RewardConfig(slo_hour=slo_hour)), end_s=900).metrics


def test_a_run_charges_each_minute_a_pod_spends_above_its_slo_at_slo_hour():
    priced, free = _breaching_run(2.0), _breaching_run(0.0)
    assert priced["sla_latency_breaches"] == free["sla_latency_breaches"] == 2
    assert priced["latency_breach_hours"] == free["latency_breach_hours"] == pytest.approx(9 / 60)  # 9 minutes
    assert priced["cost_slo_time"] == pytest.approx(2.0 * 9 / 60)
    assert free["cost_slo_time"] == 0.0
    assert priced["cost_node_hours"] == pytest.approx(free["cost_node_hours"] + 2.0 * 9 / 60)
    # the same run otherwise: the term prices it, it does not change it
    assert {k: v for k, v in priced.items() if not k.startswith("cost_") and k != "episode_reward"} == \
        {k: v for k, v in free.items() if not k.startswith("cost_") and k != "episode_reward"}
