"""kube-scheduler's scheduling queue (simulator/queue.py) on hand-built queues and worlds."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simulator.worlds import P, config, node, pool, profiles_from, simulate, world
from td3sched.policy.k8s_default import K8sDefault
from td3sched.simulator.queue import (ACTIVE, BACKOFF, POLICY, RESOURCES, SHAPE, UNSCHEDULABLE, USAGE,
                                      QueueConfig, SchedulingQueue)


def _queue(n=4, **kw) -> SchedulingQueue:
    return SchedulingQueue(n, QueueConfig(**kw), fit_class=np.arange(n))


def test_backoff_doubles_from_one_second_to_the_ten_second_cap():
    q = _queue()
    assert [q.backoff_s(a) for a in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert q.backoff_s(5000) == 10          # a pod tried thousands of times stays at the cap


def test_a_moved_pod_waits_out_its_backoff_in_the_backoff_queue():
    q = _queue()
    q.add(0, 100.0)
    assert q.pop_active() == 0
    q.failed(0, 100.0, RESOURCES)                 # attempt 1: backoff 1 s, until 101
    assert q.where[0] == UNSCHEDULABLE and q.attempts[0] == 1
    q.move_classes([0], 100.5)                    # an event helps it before the backoff ends
    assert q.where[0] == BACKOFF and q.pop_active() is None
    assert q.next_event_s() == 101.0
    q.release_backoff(101.0)
    assert q.where[0] == ACTIVE and q.pop_active() == 0
    q.failed(0, 101.0, RESOURCES)                 # attempt 2: 2 s, until 103
    q.move_classes([0], 104.0)                    # after the backoff: straight to the active queue
    assert q.where[0] == ACTIVE and q.pop_active() == 0


def test_events_move_only_the_pods_they_could_help():
    q = _queue(3)
    for pod, reason in ((0, RESOURCES), (1, USAGE), (2, SHAPE)):
        q.add(pod, 0.0)
        q.pop_active()
        q.failed(pod, 0.0, reason)
    q.move_usage_held(20.0)                       # a scrape: only the pod held back by usage
    assert q.where.tolist() == [UNSCHEDULABLE, ACTIVE, UNSCHEDULABLE]
    q.move_classes(q.classes_waiting_for_resources(), 20.0)   # a deletion: the resource-bound pod
    assert q.where.tolist() == [ACTIVE, ACTIVE, UNSCHEDULABLE]
    assert q.pop_active() == 0 and q.pop_active() == 1 and q.pop_active() is None


def test_leftover_pods_are_flushed_after_five_minutes():
    q = _queue(1)
    q.add(0, 0.0)
    q.pop_active()
    q.failed(0, 0.0, SHAPE)
    q.flush_leftover(270.0)                        # checked every 30 s: not yet 5 minutes
    assert q.where[0] == UNSCHEDULABLE
    q.flush_leftover(300.0)
    assert q.where[0] == ACTIVE


def test_active_queue_pops_oldest_queue_timestamp_first():
    q = _queue(3)
    q.add(2, 5.0)
    q.add(0, 7.0)
    q.add(1, 5.0)
    assert [q.pop_active() for _ in range(4)] == [1, 2, 0, None]


def test_failed_without_a_reason_is_refused():
    q = _queue(1)
    with pytest.raises(ValueError, match="no reason"):
        q.failed(0, 0.0, 0)


@pytest.mark.parametrize("bad", [{"pod_initial_backoff_s": 0}, {"pod_max_backoff_s": 0.5},
                                 {"max_in_unschedulable_s": float("nan")}])
def test_bad_queue_settings_name_the_setting(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        QueueConfig(**bad)


# --- in the simulator -------------------------------------------------------------------------------

def _failures(sim, name):
    """Scheduling cycles of the pod that found no node (the queue's attempts before a bind)."""
    return int(sim.queue.attempts[int(np.flatnonzero(sim.w.name == name)[0])])


def test_a_pod_too_large_for_every_node_is_attempted_once_then_only_on_a_larger_node_or_the_flush():
    # two 1000m nodes; "big" (3000m) fits no template of its pool; small pods come and go all along
    small = [P(f"s{i}", t=10 * i, dur=15, cpu=100) for i in range(60)]
    pods = [P("big", t=1, cpu=3000)] + small
    run = simulate(world([pool("a", node(cpu=1000), 2)], pods), end_s=599)
    assert run.metrics["unschedulable_by_shape"] == 1
    assert [e["pod"] for e in run.of("unschedulable_by_shape")] == ["big"]
    # attempted at 1 s, and again only at the flush after 5 minutes (checks every 30 s from 1 s: 301)
    assert _failures(run.sim, "big") == 2
    assert run.metrics["decisions"] == run.metrics["binds"] + 2


def test_a_larger_node_becoming_ready_brings_a_shape_held_pod_back():
    big_node = node(cpu=4000)
    pools = [pool("a", node(cpu=1000), 1), pool("b", big_node, 0, max_count=1)]
    pods = [P("big", t=1, cpu=3000)]
    w = world(pools, pods, cfg=config(autoscaler=True))
    run = simulate(w, end_s=400)
    # the autoscaler does not scale up for a pod that fits pool a's shape... it fits pool b's template:
    # asked for at the scan at 10 s, ready at 130 s, the node-ready hint brings the pod back at once
    assert run.metrics["unschedulable_by_shape"] == 0
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(130, "big")]


def test_no_scale_up_for_a_pod_that_fits_no_pool_template():
    pods = [P("huge", t=1, cpu=99000)]
    w = world([pool("a", node(cpu=1000), 1, max_count=3)], pods, cfg=config(autoscaler=True))
    run = simulate(w, end_s=600)
    assert run.of("node_added") == []
    assert run.metrics["unschedulable_by_shape"] == 1


def test_no_scale_up_for_a_pod_a_policy_holds_back():
    class HoldBack(K8sDefault):
        name = "hold-back"

        def filter(self, pod, nodes, cluster):
            return np.zeros(len(nodes), dtype=bool)

    pods = [P("a", t=1, cpu=100)]
    w = world([pool("a", node(cpu=1000), 1, max_count=3)], pods, cfg=config(autoscaler=True))
    run = simulate(w, HoldBack(), end_s=600)
    assert run.of("node_added") == []
    sim = run.sim
    assert sim.queue.reasons[0] == USAGE | POLICY
    # held back by usage: retried at every scrape (30 s) from 30 s to 570 s, besides its first try
    assert _failures(sim, "a") == 1 + len(range(30, 600, 30))


def test_a_departure_retries_only_pods_that_fit_the_freed_node():
    # one 1000m node: "blocker" (800m) leaves at 100; "w700" (700m) fits then, "w900" never fits
    # beside anything, but fits the empty node after "w700" leaves at 200
    pods = [P("blocker", t=0, dur=100, cpu=800), P("w900", t=1, cpu=900), P("w700", t=2, dur=100, cpu=700)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods), end_s=400)
    placed = [(e["t"], e["pod"]) for e in run.of("placement")]
    assert placed == [(0, "blocker"), (100, "w900")]
    # at 100 both fit the freed node: the older queue timestamp (w900, failed at 1 s) goes first and
    # takes it; w700 failed at 2 s, is tried at 100 and fails again
    assert _failures(run.sim, "w900") == 1 and _failures(run.sim, "w700") == 2


def test_a_departure_moves_only_the_pods_the_freed_node_can_take():
    # one 1000m node full with "blocker" (1000m) until 100 s; ten pods of 600m wait, then "s300"
    # (300m). The freed node takes w0 (oldest) and then has 400m: w1..w9 would fail, s300 fits.
    # Only w0 and s300 move and bind; the nine others are not tried again until the 5-minute flush.
    pods = [P("blocker", t=0, dur=100, cpu=1000)] + [P(f"w{i}", t=1 + i, cpu=600) for i in range(10)] \
        + [P("s300", t=20, cpu=300)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods), end_s=250)
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(0, "blocker"), (100, "w0"), (100, "s300")]
    assert run.metrics["decisions"] == 1 + 11 + 2


def test_a_pod_held_back_by_the_safety_filter_tries_again_only_when_a_node_it_fits_cools_down():
    # one 1000m node, observed above 90% CPU until the scrape at 300 (hog's demand drops at 300);
    # "w" (10m) is held back by the safety filter at 100 and tried again only at the scrape at 300,
    # not at the scrapes of 120 .. 270
    shape = np.zeros((4, 2, 2))
    shape[0, 0] = [0.95, 0.0]
    pods = [P("hog", cpu=100, size_cpu=1000, profile=0), P("w", t=100, cpu=10, profile=1)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods, profiles_from(shape)), end_s=400)
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(0, "hog"), (300, "w")]
    assert run.metrics["decisions"] == 1 + 2


def test_waiting_in_with_limits_takes_each_class_first_pods_backoff_over_first():
    q = SchedulingQueue(6, QueueConfig(), fit_class=np.array([0, 0, 0, 0, 1, 1]))
    for pod, t in ((0, 0.0), (1, 1.0), (4, 1.0), (2, 2.0), (5, 3.0), (3, 9.5)):
        q.add(pod, t)
        q.pop_active()
        q.failed(pod, t, RESOURCES)               # first attempt: backoff 1 s
    # at 10.0 pod 3's backoff (until 10.5) runs: it comes after every pod whose backoff is over
    assert q.waiting_in([0, 1], 10.0).tolist() == [0, 1, 4, 2, 5, 3]
    assert q.waiting_in([0, 1], 10.0, limits=[2, 1]).tolist() == [0, 1, 4]
    assert q.waiting_in([0], 10.0, limits=[4]).tolist() == [0, 1, 2, 3]
    q.add(1, 11.0)                                 # pod 1 leaves and fails again at 11: behind pod 3
    q.pop_active()
    q.failed(1, 11.0, RESOURCES)
    assert q.waiting_in([0], 20.0, limits=[3]).tolist() == [0, 2, 3]


def test_a_freed_node_moves_only_as_many_pods_of_a_class_as_it_holds():
    # ten 400m pods wait behind a 1000m blocker: the freed node holds two of them, and only those two
    # are tried again (the eight others wait for the 5-minute flush)
    pods = [P("blocker", t=0, dur=100, cpu=1000)] + [P(f"w{i}", t=1 + i, cpu=400) for i in range(10)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods), end_s=250)
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(0, "blocker"), (100, "w0"), (100, "w1")]
    assert run.metrics["decisions"] == 1 + 10 + 2


def test_a_freed_gpu_node_moves_as_many_gpu_shares_as_its_gpus_hold():
    # a node of two GPUs, both taken whole by "blocker" until 100; six pods of half a GPU wait: the
    # freed GPUs hold four of them
    pods = [P("blocker", t=0, dur=100, cpu=100, gpus=2, gpu_milli=1000)] + \
        [P(f"h{i}", t=1 + i, cpu=100, gpus=1, gpu_milli=500) for i in range(6)]
    run = simulate(world([pool("g", node(cpu=8000, gpus=2), 1)], pods), end_s=250)
    assert [e["pod"] for e in run.of("placement")] == ["blocker", "h0", "h1", "h2", "h3"]
    assert run.metrics["decisions"] == 1 + 6 + 4


def test_a_node_cooling_down_moves_only_as_many_held_pods_as_it_holds():
    # ten 400m pods are held back by the safety filter (the node is observed above 90% CPU until the
    # scrape at 300); when it cools down it holds two of them beside "hog" (100m requested): two move
    # and bind, the eight others are not tried again before their 5-minute flush
    shape = np.zeros((4, 2, 2))
    shape[0, 0] = [0.95, 0.0]
    pods = [P("hog", cpu=100, size_cpu=1000, profile=0)] + \
        [P(f"w{i}", t=100 + i, cpu=400, profile=1) for i in range(10)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods, profiles_from(shape)), end_s=390)
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(0, "hog"), (300, "w0"), (300, "w1")]
    assert run.metrics["decisions"] == 1 + 10 + 2


@pytest.mark.parametrize("limit", [1, 3, 7, 60])
def test_waiting_in_with_a_limit_is_the_head_of_the_full_order_for_long_classes_too(limit):
    rng = np.random.default_rng(limit)
    n = 60
    q = SchedulingQueue(n, QueueConfig(), fit_class=np.zeros(n, dtype=np.int64))
    t = 0.0
    for pod in rng.permutation(n):
        t += float(rng.choice([0.0, 0.5, 3.0]))
        q.add(int(pod), t)
        q.pop_active()
        for _ in range(int(rng.integers(1, 5))):     # 1 to 4 failures: backoffs of 1 to 8 s
            q.failed(int(pod), t, RESOURCES)
    for now in (t, t + 2.0, t + 9.0):
        assert q.waiting_in([0], now, limits=[limit]).tolist() == q.waiting_in([0], now).tolist()[:limit]
