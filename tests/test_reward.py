"""The reward (reward.py) on hand-computed cases, alone and through a run."""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.reward import RewardConfig, RewardTracker, decision_reward, overload
from tests.simulator.worlds import P, node, pool, simulate, typical, world


def test_decision_reward_weights_each_term():
    cfg = RewardConfig(alpha=1.0, beta=10.0, gamma=1.0, delta=0.5, sla_norm=10.0)
    r, terms = decision_reward(cfg, fragmentation=0.1, overload_value=0.02, sla_events=5, provisioned_frac=0.8)
    # -(1*0.1 + 10*0.02 + 1*(5/10) + 0.5*0.8) = -(0.1 + 0.2 + 0.5 + 0.4)
    assert r == pytest.approx(-1.2)
    assert terms == pytest.approx((0.1, 0.02, 0.5, 0.8))


def test_sla_term_saturates_at_one():
    r, terms = decision_reward(RewardConfig(alpha=0, beta=0, gamma=2.0, sla_norm=4.0), 0.0, 0.0, 9, 0.0)
    assert terms[2] == 1.0 and r == -2.0


def test_overload_counts_only_provisioned_nodes_above_threshold():
    util = np.array([0.90, 0.50, 1.00, 0.95])
    provisioned = np.array([1.0, 1.0, 1.0, 0.0])
    # (0.05 + 0 + 0.15) / 3 provisioned nodes; the unprovisioned 0.95 does not count
    assert overload(util, provisioned, 0.85) == pytest.approx(0.2 / 3)
    assert overload(util, np.zeros(4), 0.85) == 0.0


def test_tracker_charges_only_events_since_the_previous_decision():
    t = RewardTracker(RewardConfig(alpha=0, beta=0, gamma=1.0, sla_norm=10.0))
    assert t.step(0.0, 0.0, events_so_far=3, provisioned_frac=0.0) == pytest.approx(-0.3)
    assert t.step(0.0, 0.0, events_so_far=3, provisioned_frac=0.0) == 0.0
    assert t.step(0.0, 0.0, events_so_far=4, provisioned_frac=0.0) == pytest.approx(-0.1)
    assert t.result()["episode_reward"] == pytest.approx(-0.4)


@pytest.mark.parametrize("field,value", [("alpha", -1.0), ("beta", float("nan")), ("sla_norm", 0.0),
                                         ("overload_util", 1.5)])
def test_bad_reward_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=rf"(?s){field}.*expected a number"):
        RewardConfig(**{field: value})


def test_episode_reward_of_one_placement_by_hand():
    # One 4000m / 8192 MiB node; the pod requests 3000m and uses 3600m at once (shape 1, scale 1).
    # After the placement: free CPU 1000m, so the typical pod (2000m, 1000 MiB) does not fit:
    #   fragmentation = 1 * 1000 / 4000 = 0.25
    # real CPU utilisation 3600 / 4000 = 0.90 -> overload = (0.90 - 0.85) / 1 node = 0.05
    # no SLA event; delta = 0 by default:
    #   r = -(1 * 0.25 + 10 * 0.05 + 1 * 0) = -0.75
    w = world([pool("p", node(4000, 8192), 1)], [P("a", cpu=3000, mem=1000, size_cpu=3600)],
              typ=typical([(2000, 1000)], [1.0]))
    run = simulate(w, end_s=120)
    assert run.metrics["decisions"] == 1
    assert run.metrics["episode_reward"] == pytest.approx(-0.75)
    assert run.metrics["reward_fragmentation"] == pytest.approx(0.25)
    assert run.metrics["reward_overload"] == pytest.approx(0.05)
