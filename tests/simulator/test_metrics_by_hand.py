"""Every metric of a run, checked on 1-3 node clusters whose values can be worked out by hand.

Conventions used throughout (engine.py docstring): ticks fall every ``tick_s`` = 60 s from the span
start; at equal times the engine runs departures, nodes becoming ready, the usage tick, the scrape,
then arrivals. So the tick at t = 0 runs *before* the pods arriving at t = 0 and samples an empty
cluster; a span [0, 600) has the 10 ticks 0, 60, ..., 540 of which 9 see the pods.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from td3sched.metrics.collector import LAT_LOG_RATIO
from td3sched.metrics.fragmentation import cluster_fragmentation, node_fragmentation
from td3sched.policy.k8s_default import K8sDefault
from td3sched.simulator.config import Autoscaler, LatencyModel, SimConfig
from td3sched.simulator.engine import PENDING, RUNNING
from td3sched.simulator.metrics_pipeline import MetricsPipeline

from .worlds import P, PreferOrder, config, constant_profiles, node, pool, profiles_from, simulate, \
    typical, world

TICKS_600 = 10          # ticks at 0, 60, ..., 540 in [0, 600)
WITH_PODS_600 = 9       # all but the tick at t = 0
WEEK_S = 7 * 86400
BIN = math.exp(LAT_LOG_RATIO)  # width of one latency histogram bin (x 1.004)


# --- cpu_util / mem_util ---------------------------------------------------------------------------

def test_cpu_and_mem_util_with_usage_scale_mem_level_and_throttling():
    shape = node(cpu=4000, mem=8192, oh_cpu=200, oh_mem=512)  # overhead is not pods' usage
    pods = [
        # CPU: 1.2 x 0.5 x 2000 = 1200, throttled at its limit 1100. Memory: 0.75 x 0.5 x 4096 = 1536.
        P("a", cpu=1000, mem=1024, cpu_limit=1100, size_cpu=2000, size_mem=4096, pool="a"),
        # CPU: 1.2 x 0.5 x 1000 = 600 (no limit). Memory: 0.75 x 0.5 x 2048 = 768.
        P("b", cpu=500, mem=512, size_cpu=1000, size_mem=2048, pool="b"),
    ]
    w = world([pool("a", shape, 1), pool("b", shape, 1)], pods, constant_profiles(cpu=0.5, mem=0.5),
              config(usage_scale=1.2, mem_level=0.75))
    run = simulate(w, end_s=600)
    cpu_per_tick = (1100 + 600) / (4000 + 4000)        # 0.2125
    mem_per_tick = (1536 + 768) / (8192 + 8192)        # 0.140625
    # (profiles are float32, so usage_scale x shape is float32: relative error ~1e-7)
    assert run.metrics["cpu_util"] == pytest.approx(cpu_per_tick * WITH_PODS_600 / TICKS_600, rel=1e-6)
    assert run.metrics["mem_util"] == pytest.approx(mem_per_tick * WITH_PODS_600 / TICKS_600, rel=1e-6)
    # ground truth node usage includes the overhead
    c = run.sim.cluster
    assert c.usage[0, 0] == pytest.approx(200 + 1100)
    assert c.usage[1, 1] == pytest.approx(512 + 768)


def test_hourly_series_average_each_hour_of_ticks():
    # one pod using 1000 of 4000m from t = 0 (after the first tick), two hours of 60 ticks each
    w = world([pool("a", node(cpu=4000), 2)], [P("p", size_cpu=1000)])
    run = simulate(w, end_s=7200)
    hourly = run.result["series_hourly"]
    # hour 1: tick 0 sees nothing, 59 ticks see 1000 / 8000; hour 2: all 60 ticks
    assert hourly["cpu_util"] == [round(59 / 60 * 1000 / 8000, 6), round(1000 / 8000, 6)]
    assert hourly["nodes"] == [2, 2]
    assert run.metrics["cpu_util"] == pytest.approx(119 / 120 * 1000 / 8000)


def test_cpu_util_follows_the_profile_slot():
    # Slot 0 ([0, 300)) CPU shape 0.25, slot 1 ([300, 600)) shape 1.0; one pod of size 2000 on 4000m.
    shape = np.zeros((4, 1, 2))
    shape[0, 0] = [0.25, 1.0]
    w = world([pool("a", node(cpu=4000), 1)], [P("p", size_cpu=2000)], profiles_from(shape))
    run = simulate(w, end_s=600)
    # ticks 60..240 (4 ticks): 500/4000; ticks 300..540 (5 ticks): 2000/4000; tick 0: empty.
    expected = (4 * 500 / 4000 + 5 * 2000 / 4000) / TICKS_600
    assert run.metrics["cpu_util"] == pytest.approx(expected, rel=1e-9)


# --- fragmentation ---------------------------------------------------------------------------------

def test_fragmentation_by_hand():
    shape = node(cpu=4000, mem=8192)
    pods = [P("x", cpu=3000, mem=1024, pool="a"),   # node a free: 1000 CPU, 7168 MiB
            P("y", cpu=1000, mem=7680, pool="b")]   # node b free: 3000 CPU, 512 MiB
    typ = typical([(2000, 1024), (500, 1024), (500, 256)], [0.5, 0.25, 0.25])
    # node a: (2000,1024) does not fit (CPU)                         -> F_a = 1000 x 0.5  = 500
    # node b: (2000,1024) and (500,1024) do not fit (memory)         -> F_b = 3000 x 0.75 = 2250
    per_tick = (500 + 2250) / (4000 + 4000)   # 0.34375
    # the tick at t = 0 sees two empty nodes: every typical pod fits, F = 0
    w = world([pool("a", shape, 1), pool("b", shape, 1)], pods, typ=typ)
    run = simulate(w, end_s=600)
    assert run.metrics["fragmentation"] == pytest.approx(per_tick * WITH_PODS_600 / TICKS_600, rel=1e-12)

    c = run.sim.cluster
    direct = cluster_fragmentation(c.free, c.gpu_free(), c.allocatable[:, 0], typ)
    assert direct == pytest.approx(per_tick, rel=1e-12)


def test_fragmentation_counts_gpu_misfits():
    typ = typical([(1000, 1000, 0, 0, 1, 1000),   # a whole GPU
                   (500, 500, 0, 0, 1, 500),      # half a GPU
                   (1500, 512)], [0.4, 0.4, 0.2])
    free = np.array([[2000, 4096, 10, 10], [1000, 1000, 10, 10]], dtype=float)
    gpu_free = np.array([[300, 300], [1000, 1000]])
    # node 0: no whole GPU free and no GPU with 500 free: unfit 0.4 + 0.4 -> F = 2000 x 0.8 = 1600
    # node 1: both GPU pods fit exactly; (1500, 512) needs 1500 CPU > 1000 -> F = 1000 x 0.2 = 200
    np.testing.assert_allclose(node_fragmentation(free, gpu_free, typ), [1600, 200])
    assert cluster_fragmentation(free, gpu_free, np.array([4000.0, 4000.0]), typ) == pytest.approx(1800 / 8000)


# --- overload_node_frac ----------------------------------------------------------------------------

def test_overload_node_frac():
    shape = node(cpu=1000)
    pods = [P("hot", size_cpu=900, pool="a"),    # 900 > 0.85 x 1000: overloaded
            P("warm", size_cpu=800, pool="b")]   # 800 <= 850
    w = world([pool("a", shape, 1), pool("b", shape, 1)], pods)
    run = simulate(w, end_s=600)
    # 10 ticks x 2 nodes = 20 samples; node a overloaded in the 9 ticks after t = 0
    assert run.metrics["overload_node_frac"] == pytest.approx(9 / 20)


# --- kernel OOM killer, kubelet eviction, CrashLoopBackOff (docs/simulator.md §5) ------------------

def _oom_world(alloc_mem, overhead_mem, pods):
    # memory shape 0.1 in [0, 300), 1.0 in [300, 600): pods fit at bind, the node overflows at t = 300
    shape = np.zeros((4, 1, 2))
    shape[1, 0] = [0.1, 1.0]
    return world([pool("a", node(cpu=8000, mem=alloc_mem, oh_mem=overhead_mem), 1)], pods,
                 profiles_from(shape), config(mem_level=0.5))


def _pod(sim, name):
    return int(np.flatnonzero(sim.w.name == name)[0])


def test_kernel_oom_kills_by_oom_score_and_pods_stay_bound():
    pods = [  # usages at t = 300 (0.5 x 1.0 x size)
        P("g", dur=1000, cpu=100, cpu_limit=100, mem=3000, mem_limit=3000, size_mem=6000),  # 3000, Guaranteed
        P("b1", dur=1000, mem=500, size_mem=5000),    # 2500, Burstable
        P("b2", dur=1000, mem=1500, size_mem=6000),   # 3000, Burstable
        P("be", dur=1000, size_mem=2000),             # 1000, BestEffort
    ]
    # requests 3000 + 500 + 1500 = 5000 <= allocatable 5400; capacity = 5400 + 500 overhead = 5900
    # at t = 300 usage = 500 + 3000 + 2500 + 3000 + 1000 = 10000 > 5900
    # oom_score = floor(usage / 5900 x 1000) + oom_score_adj (pkg/kubelet/qos/policy.go):
    #   g   508 - 997                                   = -489
    #   b1  423 + (1000 - floor(1000 x 500 / 5900) = 916)  = 1339
    #   b2  508 + (1000 - floor(1000 x 1500 / 5900) = 746) = 1254
    #   be  169 + 1000                                  = 1169
    #   kill b1: 7500 > 5900; kill b2: 4500 <= 5900: stop. be survives though BestEffort.
    # the kubelet then sees 4500 < 0.95 x 5900 = 5605: no eviction
    run = simulate(_oom_world(5400, 500, pods), end_s=301)
    kills = run.of("oom_kill")
    assert [(e["t"], e["pod"], e["restart_in"]) for e in kills] == [(300, "b1", 10), (300, "b2", 10)]
    m = run.metrics
    assert m["oom_kills"] == 2 and m["container_oom"] == 0 and m["oom_kills_total"] == 2
    assert m["oom_per_week"] == m["oom_total_per_week"] == pytest.approx(2 * WEEK_S / 301)
    assert m["evictions"] == 0
    assert m["sla_violations"] == 2  # the kills; no latency-sensitive pods, no long waits
    sim = run.sim
    for name in ("b1", "b2"):   # killed in place: bound, requests kept, using nothing, run time unchanged
        i = _pod(sim, name)
        assert sim.state[i] == RUNNING and sim.crashed[i] and sim.node[i] == 0
        assert sim.pod_usage[i, 1] == 0 and sim.remaining[i] == 1000
    assert sim.cluster.usage[0, 1] == pytest.approx(4500)
    np.testing.assert_allclose(sim.cluster.requested[0, 1], 5000)
    assert not run.of("placement")[4:]   # no re-placement


def test_node_oom_stops_as_soon_as_memory_fits_largest_best_effort_first():
    pods = [
        P("g", cpu=100, cpu_limit=100, mem=3000, mem_limit=3000, size_mem=6000),  # 3000
        P("be_small", size_mem=2000),  # 1000
        P("be_big", size_mem=3000),    # 1500
    ]
    # capacity 5000 (no overhead); usage 5500; oom_score be_big 300 + 1000 > be_small 200 + 1000
    # -> kill be_big: 4000 <= 5000 (and 4000 < 0.95 x 5000: no eviction)
    run = simulate(_oom_world(5000, 0, pods), end_s=301)
    assert [e["pod"] for e in run.of("oom_kill")] == ["be_big"]
    assert run.metrics["oom_kills"] == 1


def test_kubelet_evicts_under_memory_pressure_in_rank_memory_pressure_order():
    pods = [  # usages at t = 300 (0.5 x size); usage - request
        P("be1", size_mem=600),                                    # 300, +300 (BestEffort)
        P("b2", mem=100, size_mem=700),                            # 350, +250 (Burstable)
        P("be2", size_mem=400),                                    # 200, +200 (BestEffort)
        P("g", cpu=100, cpu_limit=100, mem=4000, mem_limit=4000, size_mem=8000),  # 4000, 0 (Guaranteed)
        P("b3", mem=5500, size_mem=10280),                         # 5140, -360 (Burstable)
    ]
    # capacity 10000, requests 9600; at 300 usage 9990 <= 10000 (no kernel OOM) but available
    # 10 < 5% x 10000 = 500: MemoryPressure. kubelet order: usage above request first, by that
    # excess (be1 300, b2 250, be2 200), then the others by usage (b3 5140, g 4000):
    #   evict be1: 9690 > 9500; evict b2: 9340 <= 9500: stop. (The kernel would take be2 before b2.)
    run = simulate(_oom_world(10000, 0, pods), end_s=301)
    ev = run.of("eviction")
    assert [(e["t"], e["pod"], e["reason"]) for e in ev] == [(300, "be1", "memory_pressure"),
                                                            (300, "b2", "memory_pressure")]
    m = run.metrics
    assert m["evictions"] == m["evictions_memory"] == 2 and m["oom_kills"] == 0
    sim = run.sim
    # recreated at once: b2 (Burstable) is placed again on the node (the eviction manager looks
    # again only 10 s later); be1 (BestEffort) is kept off by the memory-pressure taint until 600
    assert [e["pod"] for e in run.of("placement") if e["t"] == 300] == ["b2"]
    assert sim.state[_pod(sim, "be1")] == PENDING
    assert sim.cluster.pressure_until[0] == 600
    assert sim.remaining[_pod(sim, "be1")] == math.inf


def test_killed_best_effort_pod_waits_while_the_node_is_under_memory_pressure():
    # alloc 4000 MiB, no overhead, mem_level 1; MemoryPressure below 5% available: above 3800.
    # g (Guaranteed 3000) uses 300, 3000, 3000 in slots [0,300), [300,600), [600,900);
    # be (BestEffort)    uses 100,  850, 1200.
    # At 300: 3850 > 3800 -> the kubelet evicts be (850 above its request 0; g is at its request).
    # be is recreated but the MemoryPressure condition holds for the 5-min transition period, to
    # 600, although the node's memory (a gauge: the last scrape, 3000 from 300 on) is fine: be waits.
    # At 600 it is placed again: 3000 + 1200 = 4200 > 4000 -> the kernel kills be's container
    # (oom_score 300 + 1000 against g's 750 - 997); be stays bound and restarts after 10 s, at 610,
    # crashes again (20 s), at 630 again (40 s); next restart at 670, after the span.
    shape = np.zeros((4, 2, 3))
    shape[1, 0] = [0.1, 0.85, 1.2]
    shape[1, 1] = [0.1, 1.0, 1.0]
    pods = [P("g", cpu=100, cpu_limit=100, mem=3000, mem_limit=3000, size_mem=3000, profile=1),
            P("be", dur=1000, size_mem=1000, profile=0)]
    w = world([pool("a", node(cpu=8000, mem=4000), 1)], pods, profiles_from(shape), config(mem_level=1.0))
    run = simulate(w, end_s=650)
    assert [(e["t"], e["pod"], e["reason"]) for e in run.of("eviction")] == [(300, "be", "memory_pressure")]
    assert [(e["t"], e["pod"]) for e in run.of("placement")][2:] == [(600, "be")]
    assert [(e["t"], e["pod"], e["restart_in"]) for e in run.of("oom_kill")] == \
        [(600, "be", 10), (610, "be", 20), (630, "be", 40)]
    assert [e["t"] for e in run.of("container_restart")] == [610, 630]
    sim = run.sim
    be = _pod(sim, "be")
    assert sim.state[be] == RUNNING and sim.crashed[be]
    assert sim.remaining[be] == pytest.approx(1000 - 300)   # what was left at the eviction
    m = run.metrics
    assert m["unschedulable"] == 0 and m["evictions_memory"] == 1 and m["oom_kills"] == 3
    assert m["pods_arrived"] == 2   # an eviction is not a new arrival
    # waits: g 0, be 0 (first placement) and be's second wait, 600 - 300 = 300 (flagged: > 60 s)
    assert m["sla_pending_too_long"] == 1
    assert m["pending_p99_s"] == pytest.approx(0 + 0.98 * (300 - 0))


# --- container OOM and CrashLoopBackOff --------------------------------------------------------------

def test_crash_loop_back_off_doubles_to_five_minutes():
    # usage 1200 > limit 1000 all the time: killed at the bind (t = 0) and at every restart, which
    # comes after 10, 20, 40, 80, 160, then 300 s (capped): restarts 10, 30, 70, 150, 310, 610, 910, ...
    pods = [P("p", mem=500, mem_limit=1000, size_mem=1200)]
    run = simulate(world([pool("a", node(mem=8192), 1)], pods), end_s=1800)
    ooms = run.of("container_oom")
    assert [e["t"] for e in ooms] == [0, 10, 30, 70, 150, 310, 610, 910, 1210, 1510]
    assert [e["restart_in"] for e in ooms] == [10, 20, 40, 80, 160, 300, 300, 300, 300, 300]
    assert [e["t"] for e in run.of("container_restart")] == [10, 30, 70, 150, 310, 610, 910, 1210, 1510]
    m = run.metrics
    assert m["container_oom"] == 10 and m["oom_kills"] == 0 and m["oom_kills_total"] == 10
    assert m["mem_util"] == 0.0   # never runs
    assert run.sim.crashed[0] and run.sim.state[0] == RUNNING


def test_container_oom_back_off_resets_ten_minutes_after_the_last_crash():
    # memory shape per 300 s slot 0.5, 1.0, 0.5, 0.5, 1.0 -> usage 0.8 x shape x 1500 = 600, 1200,
    # 600, 600, 1200 against a limit of 1000. At 300: killed, restarts at 310, 330, 370, 450 and
    # 610 (back-off 10, 20, 40, 80, 160), each time still above; at 610 (600 in use) it runs.
    # After 1200 it restarts at 1210, 1230, 1270 (each killed again) and 1350, after the span.
    # At 1200: killed; the previous crash was at 450, 750 s > 600 s before (client-go flowcontrol
    # hasExpired: 2 x MaxContainerBackOff): the back-off starts again at 10 s.
    shape = np.zeros((4, 1, 5))
    shape[1, 0] = [0.5, 1.0, 0.5, 0.5, 1.0]
    pods = [P("p", mem=500, mem_limit=1000, size_mem=1500)]
    w = world([pool("a", node(mem=8192), 1)], pods, profiles_from(shape), config(mem_level=0.8))
    run = simulate(w, end_s=1300)
    ooms = run.of("container_oom")
    assert [(e["t"], e["restart_in"]) for e in ooms] == \
        [(300, 10), (310, 20), (330, 40), (370, 80), (450, 160), (1200, 10), (1210, 20), (1230, 40),
         (1270, 80)]
    assert run.metrics["container_oom"] == 9
    assert run.metrics["oom_kills"] == 0  # not a node OOM
    # memory in use at the ticks: 600 at 60..240 (4 ticks), 0 at 300..540 (crashed), 600 at
    # 600..1140 (610 restart: the tick at 600 sees 0, then 660..1140, 9 ticks), 0 from 1200; 22 ticks
    expected = (4 * 600 + 9 * 600) / 8192 / 22
    assert run.metrics["mem_util"] == pytest.approx(expected, rel=1e-6)
    assert run.sim.cluster.usage[0, 1] == 0


def test_container_over_its_limit_at_the_bind_is_killed_at_once():
    pods = [P("p", mem=500, mem_limit=1000, size_mem=1500)]   # 0.8 x 1500 = 1200 > 1000
    w = world([pool("a", node(mem=8192), 1)], pods, cfg=config(mem_level=0.8))
    run = simulate(w, end_s=30)   # bound at t = 0 after the tick; killed, restarts at 10, killed
    assert run.sim.cluster.usage[0, 1] == 0
    assert [e["t"] for e in run.of("container_oom")] == [0, 10]
    assert run.metrics["container_oom"] == 2


# --- latency ---------------------------------------------------------------------------------------

def _latency_run(size_cpu, size_disk, size_net, **lat):
    shape = node(cpu=1000, disk_mbps=100, net_mbps=400)
    pods = [P("svc", ls=True, size_cpu=size_cpu, size_disk=size_disk, size_net=size_net),
            P("batch", size_cpu=0)]  # not latency-sensitive: no samples
    cfg = config(latency=LatencyModel(base_sigma=0.0, **lat))
    return simulate(world([pool("a", shape, 1)], pods, cfg=cfg), end_s=600)


def _in_bin(reported, value):
    """The histogram reports the upper edge of the 0.4%-wide bin holding ``value``."""
    return value * (1 - 1e-12) <= reported <= value * BIN * (1 + 1e-12)


def test_latency_p99_is_base_times_contention_factor():
    # rho: CPU 500/1000 = 0.5, disk 50/100 = 0.5, net 300/400 = 0.75
    # factor = 1 + 0.6 (1/0.5 - 1) + 0.2 (1/0.5 - 1) + 0.2 (1/0.25 - 1) = 1 + 0.6 + 0.2 + 0.6 = 2.4
    run = _latency_run(500, 50, 300)
    m = run.metrics
    assert _in_bin(m["latency_p99_ms"], 40 * 2.4)
    assert _in_bin(m["latency_p50_ms"], 40 * 2.4)
    # 2.4 > slo_factor 2.0 in each of the 9 samples: one breach episode, every sample above the SLO
    assert m["sla_latency_breaches"] == 1
    assert m["latency_breach_frac"] == 1.0
    assert m["sla_violations"] == 1


def test_latency_breach_episodes_over_a_pattern():
    # CPU shape per slot: 0.5, 0.25, 0.5 (x 1000 on a 1000m node): factor 1.6, 1.2, 1.6 with rho_cpu
    # alone; with slo_factor 1.5 the pod breaches in [0, 300), recovers, breaches again in [600, 900)
    shape = np.zeros((4, 1, 3))
    shape[0, 0] = [0.5, 0.25, 0.5]
    pods = [P("svc", ls=True, size_cpu=1000)]
    cfg = config(latency=LatencyModel(base_sigma=0.0, slo_factor=1.5))
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods, profiles_from(shape), cfg), end_s=900)
    m = run.metrics
    # samples: ticks 60..240 (4) at 1.6, 300..540 (5) at 1.2, 600..840 (5) at 1.6: 14 samples
    assert m["sla_latency_breaches"] == 2
    assert m["latency_breach_frac"] == pytest.approx(9 / 14)
    # 9 of 14 samples at 64 ms: the median and the p99 fall in 64 ms's bin
    assert _in_bin(m["latency_p50_ms"], 40 * 1.6) and _in_bin(m["latency_p99_ms"], 40 * 1.6)


def test_latency_p50_reads_the_lower_bin():
    # factor 1 + 0.6 x (1/(1 - 0.5) - 1) = 1.6 at ticks 60..240 (4 samples), then
    # 1 + 0.6 x (1/(1 - 0.25) - 1) = 1.2 at ticks 300..540 (5 samples):
    # 5 of 9 samples at 48 ms -> p50 in 48 ms's bin, p99 in 64 ms's
    shape = np.zeros((4, 1, 2))
    shape[0, 0] = [0.5, 0.25]
    pods = [P("svc", ls=True, size_cpu=1000)]
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods, profiles_from(shape)), end_s=600)
    m = run.metrics
    assert _in_bin(m["latency_p50_ms"], 40 * 1.2) and _in_bin(m["latency_p99_ms"], 40 * 1.6)
    assert m["sla_latency_breaches"] == 0 and m["latency_breach_frac"] == 0.0


def test_latency_rho_is_capped():
    # CPU 2000/1000 -> capped at 0.98: factor = 1 + 0.6 (1/0.02 - 1) = 1 + 0.6 x 49 = 30.4
    run = _latency_run(2000, 0, 0)
    assert _in_bin(run.metrics["latency_p99_ms"], 40 * 30.4)


def test_latency_below_slo_is_not_a_breach_and_no_ls_pod_no_latency():
    # CPU 0.25: factor = 1 + 0.6 (1/0.75 - 1) = 1.2 <= 2
    run = _latency_run(250, 0, 0)
    assert _in_bin(run.metrics["latency_p99_ms"], 40 * 1.2)
    assert run.metrics["sla_latency_breaches"] == 0
    w = world([pool("a", node(), 1)], [P("batch", size_cpu=1000)])
    assert simulate(w).metrics["latency_p99_ms"] == 0.0


# --- pending: SLA, p99, unschedulable --------------------------------------------------------------

def test_pending_sla_violations_once_per_wait():
    one = node(cpu=1000)
    pods = [
        # node a: a runs [0, 200); bp waits from 10, c from 30. The tick at 120 flags both
        # (110 > 60, 90 > 60). bp binds at 200 and c at 300: flagged already, not counted again.
        P("a", t=0, dur=200, cpu=1000, pool="a"),
        P("bp", t=10, dur=100, cpu=1000, pool="a"),
        P("c", t=30, dur=100, cpu=1000, pool="a"),
        # node b: d waits from 25 to 100 (tick 60: 35, not late); 75 > 60 is counted at the bind.
        P("e", t=0, dur=100, cpu=1000, pool="b"),
        P("d", t=25, dur=100, cpu=1000, pool="b"),
        # node c: f waits exactly 60 s (10 -> 70): not more than 60, no violation.
        P("h", t=0, dur=70, cpu=1000, pool="c"),
        P("f", t=10, dur=100, cpu=1000, pool="c"),
    ]
    w = world([pool("a", one, 1), pool("b", one, 1), pool("c", one, 1)], pods)
    run = simulate(w, end_s=600)
    m = run.metrics
    assert m["sla_pending_too_long"] == 3
    assert m["sla_violations"] == 3
    assert m["sla_violations_per_1k_pods"] == pytest.approx(1000 * 3 / 7)
    placed = {e["pod"]: e["t"] for e in run.of("placement")}
    assert placed == {"a": 0, "e": 0, "h": 0, "bp": 200, "c": 300, "d": 100, "f": 70}
    # waits: 0, 0, 0, 190, 270, 75, 60 -> sorted 0 0 0 60 75 190 270; q99 at h = 0.99 x 6 = 5.94
    assert m["pending_p99_s"] == pytest.approx(190 + 0.94 * (270 - 190))
    assert m["unschedulable"] == 0


@pytest.mark.parametrize("autoscale", [False, True])
def test_unschedulable_pod_too_big_for_any_node(autoscale):
    pods = [P("a", cpu=500), P("b", cpu=400), P("big", t=10, cpu=2000)]
    w = world([pool("a", node(cpu=1000), 1, max_count=2)], pods, cfg=config(autoscaler=autoscale))
    run = simulate(w, end_s=600)
    m = run.metrics
    assert m["unschedulable"] == 1
    # waits: 0, 0 and the still-pending 600 - 10 = 590; q99 at h = 0.99 x 2 = 1.98 -> 0 + 0.98 x 590
    assert m["pending_p99_s"] == pytest.approx(0.98 * 590)
    assert m["sla_pending_too_long"] == 1  # flagged at the tick at 120 (110 > 60), once
    # no node can take it, so the autoscaler adds none: 1 node x 10 ticks x 60 s
    assert m["node_hours"] == pytest.approx(10 * 60 / 3600)
    assert run.of("node_added") == []


# --- node_hours and the autoscaler -----------------------------------------------------------------

@pytest.mark.parametrize("enabled,min_count,expected_node_ticks", [
    (False, 0, 20 * 2),           # 20 ticks in [0, 1200) x 2 nodes
    (True, 2, 20 * 2),            # min_count keeps both
    (True, 0, 11 * 2 + 9 * 1),    # the empty node is removed at the tick at 600 (empty since 0,
                                  # 600 s unneeded), after that tick's sample: ticks 0..600 see 2
])
def test_node_hours_and_scale_down_of_an_empty_node(enabled, min_count, expected_node_ticks):
    pods = [P("p", cpu=100)]
    w = world([pool("a", node(cpu=1000), 2, min_count=min_count)], pods, cfg=config(autoscaler=enabled))
    run = simulate(w, end_s=1200)
    assert run.metrics["node_hours"] == pytest.approx(expected_node_ticks * 60 / 3600)
    removed = run.of("node_removed")
    if expected_node_ticks == 31:
        assert len(removed) == 1 and removed[0]["t"] == 600
        assert removed[0]["node"] != run.node_of("p")
    else:
        assert removed == []


def test_span_starting_late_keeps_its_nodes_and_resumes_alive_pods():
    # span [3600, 5100): a (arrived 0, runs 5000 s) is alive at 3600 and enters then with
    # 5000 - 3600 = 1400 s left, so it departs at 5000; b (arrived 100, ran until 1100) is gone.
    # The span's nodes count as new at 3600: the empty one goes at the tick at 3600 + 600 = 4200,
    # not at the first tick (both would look idle since t = 0).
    pods = [P("a", t=0, dur=5000, cpu=500), P("b", t=100, dur=1000, cpu=500)]
    w = world([pool("a", node(cpu=1000), 2)], pods, cfg=config(autoscaler=True))
    run = simulate(w, start_s=3600, end_s=5100)
    assert [(e["t"], e["pod"]) for e in run.of("arrival")] == [(3600, "a")]
    assert run.metrics["pods_arrived"] == 1
    assert [(e["t"], e["pod"]) for e in run.of("departure")] == [(5000, "a")]
    removed = run.of("node_removed")
    assert [e["t"] for e in removed] == [4200] and removed[0]["node"] != run.of("placement")[0]["node"]
    # ticks 3600, 3660, ..., 5040 (25): 2 nodes up to and including 4200 (11 ticks), then 1
    assert run.metrics["node_hours"] == pytest.approx((11 * 2 + 14 * 1) * 60 / 3600)
    assert run.metrics["oom_per_week"] == 0.0


@pytest.mark.parametrize("arrival,added_at", [
    (10, 20),    # scans every 10 s from 0; the scan at 10 runs before the arrival at 10
    (40, 50),    # cluster-autoscaler's --new-pod-scale-up-delay is 0: the next scan asks
])
def test_autoscaler_scale_up_after_threshold_plus_provisioning(arrival, added_at):
    pods = [P("a", cpu=1000), P("b", t=arrival, cpu=1000)]
    w = world([pool("a", node(cpu=1000), 1, max_count=2)], pods, cfg=config(autoscaler=True))
    run = simulate(w, end_s=600)
    added = run.of("node_added")
    assert [(e["t"], e["node"]) for e in added] == [(added_at, "a-0001")]
    ready_at = added_at + 120  # provision_delay_s
    assert [(e["t"], e["node"]) for e in run.of("node_ready")] == [(ready_at, "a-0001")]
    placed_b = [e for e in run.of("placement") if e["pod"] == "b"]
    assert [(e["t"], e["node"]) for e in placed_b] == [(ready_at, "a-0001")]
    # node-hours: the new node counts from the first tick after it was asked for
    ticks = np.arange(0, 600, 60)
    nodes = np.where(ticks > added_at, 2, 1)
    assert run.metrics["node_hours"] == pytest.approx(nodes.sum() * 60 / 3600)
    # the wait ready_at - arrival > 60 s is one violation
    assert run.metrics["sla_pending_too_long"] == 1
    # waits 0 (a) and ready_at - arrival (b): q99 at h = 0.99 x 1
    assert run.metrics["pending_p99_s"] == pytest.approx(0.99 * (ready_at - arrival))


def test_autoscaler_scale_up_estimate_counts_gpus():
    # docs/simulator.md §5: need = ceil(max(max_r(sum of requests_r / allocatable_r), GPU milli
    # requested / GPU milli of a node)); anti-affinity is not in the estimate.
    gpu_node = node(cpu=8000, mem=8192, gpus=2)
    pods = [P("a", cpu=100, gpus=2, gpu_milli=1000)] + \
           [P(f"w{i}", t=10, cpu=100, gpus=2, gpu_milli=1000) for i in range(3)]
    w = world([pool("gpu", gpu_node, 1, max_count=4)], pods, cfg=config(autoscaler=True))
    run = simulate(w, end_s=400)
    # three pods each needing both GPUs of a node: need = max(300 / 8000, 6000 / 2000) = 3 nodes,
    # asked for at the scan at 20 s, ready at 140 s one after another. Each node-ready hint moves as
    # many of the waiting pods as the new node has room for (one: two GPUs each), oldest first.
    assert [(e["t"], e["node"]) for e in run.of("node_added")] == \
        [(20, "gpu-0001"), (20, "gpu-0002"), (20, "gpu-0003")]
    assert [(e["t"], e["pod"], e["node"]) for e in run.of("placement")][1:] == \
        [(140, "w0", "gpu-0001"), (140, "w1", "gpu-0002"), (140, "w2", "gpu-0003")]
    assert run.metrics["unschedulable"] == 0


def _needed(**kw) -> SimConfig:
    return config(autoscaler=Autoscaler(start_nodes="needed", **kw))


def test_needed_start_sizes_each_pool_by_the_scale_up_estimate_of_the_pods_alive():
    # span [3600, 4000): a, b, c and the GPU pod g are alive at 3600 (d left at 1000; e arrives in the
    # span and is not counted). cpu pool, 1000 m nodes: need = max(2500 / 1000, 1500 / 4096) = 2.5 -> 3 of
    # its 5 slots, not its count of 4. gpu pool, 2 GPUs a node: g asks for 2 x 1000 of the 2 x 1000 a node
    # has -> 1 node, though the pool's count is 3. The nodes are ready at the span's start.
    pods = [P("a", cpu=1000, mem=500, dur=10_000, pool="cpu"),
            P("b", t=100, cpu=1000, mem=500, dur=10_000, pool="cpu"),
            P("c", t=200, cpu=500, mem=500, dur=10_000, pool="cpu"), P("d", t=300, cpu=1000, dur=700, pool="cpu"),
            P("e", t=3700, cpu=1000, dur=100, pool="cpu"),
            P("g", t=400, cpu=100, gpus=2, gpu_milli=1000, dur=10_000, pool="gpu")]
    pools = [pool("cpu", node(cpu=1000, mem=4096), 4, max_count=5),
             pool("gpu", node(cpu=8000, gpus=2), 3, max_count=4)]
    run = simulate(world(pools, pods, cfg=_needed()), start_s=3600, end_s=4000)
    assert sorted(e["node"] for e in run.of("node_present")) == ["cpu-0000", "cpu-0001", "cpu-0002", "gpu-0000"]
    assert {e["t"] for e in run.of("node_present")} == {3600}
    assert {e["pod"] for e in run.of("placement") if e["t"] == 3600} == {"a", "b", "c", "g"}
    # the same world as its pools say: 4 + 3 nodes
    pools_start = simulate(world(pools, pods, cfg=config(autoscaler=True)), start_s=3600, end_s=4000)
    assert len(pools_start.of("node_present")) == 7


@pytest.mark.parametrize("min_count,max_count,expected", [(3, 5, 3), (0, 1, 1)])
def test_needed_start_stays_within_the_pools_bounds(min_count, max_count, expected):
    # two 1000 m pods on 1000 m nodes need 2: min_count 3 keeps 3, max_count 1 allows 1 (the other pod
    # waits: the pool is full)
    pods = [P("a", cpu=1000), P("b", cpu=1000)]
    count = min(max(2, min_count), max_count)
    w = world([pool("a", node(cpu=1000), count, max_count=max_count, min_count=min_count)], pods, cfg=_needed())
    run = simulate(w, end_s=300)
    assert len(run.of("node_present")) == expected
    assert len(run.of("placement")) == min(2, expected)


def test_needed_start_leaves_a_fixed_cluster_as_its_pools_say():
    # no autoscaler: the cluster is what the scenario gives, whatever start_nodes says
    cfg = config(autoscaler=Autoscaler(enabled=False, start_nodes="needed"))
    run = simulate(world([pool("a", node(cpu=1000), 4)], [P("a", cpu=100)], cfg=cfg), end_s=60)
    assert len(run.of("node_present")) == 4


def test_needed_start_lets_the_scale_up_add_what_the_estimate_misses():
    # three 600 m pods on 1000 m nodes: the estimate is ceil(1800 / 1000) = 2 nodes, but only one pod fits
    # a node; the third waits, the scan at 10 asks for a node (the scan at 0 ran before the arrivals),
    # ready 120 s later
    pods = [P(f"p{i}", cpu=600) for i in range(3)]
    run = simulate(world([pool("a", node(cpu=1000), 1, max_count=4)], pods, cfg=_needed()), end_s=300)
    assert len(run.of("node_present")) == 2
    assert [(e["t"], e["node"]) for e in run.of("node_added")] == [(10, "a-0002")]
    assert [e["t"] for e in run.of("placement")] == [0, 0, 130]


def test_new_node_overhead_counted_once():
    shape = node(cpu=1000, mem=4096, oh_cpu=100, oh_mem=200)
    pods = [P("a", cpu=1000), P("b", t=10, cpu=1000)]
    cfg = config(autoscaler=Autoscaler(provision_delay_s=90.0))
    run = simulate(world([pool("a", shape, 1, max_count=2)], pods, cfg=cfg), end_s=155)
    # asked for at the scan at 20, ready at 110 (between ticks), b (using nothing) placed on it
    assert [(e["t"], e["pod"]) for e in run.of("placement")][-1] == (110, "b")
    np.testing.assert_allclose(run.sim.cluster.usage[1, :2], [100, 200])


# --- metrics pipeline lag --------------------------------------------------------------------------

def test_metrics_pipeline_window_mean_by_hand():
    pipe = MetricsPipeline(nodes=2, columns=4, scrape_s=30, window_s=60)  # 2 scrapes per window
    u = [np.full((2, 4), v, dtype=float) for v in (10.0, 20.0, 40.0)]
    np.testing.assert_allclose(pipe.scrape(u[0]), u[0])                 # only one scrape so far
    np.testing.assert_allclose(pipe.scrape(u[1]), (u[0] + u[1]) / 2)   # 15
    np.testing.assert_allclose(pipe.scrape(u[2]), (u[1] + u[2]) / 2)   # 30: the first fell out
    pipe.forget(np.array([1]))
    out = pipe.scrape(u[0])
    np.testing.assert_allclose(out[0], (40 + 10) / 2)
    np.testing.assert_allclose(out[1], (0 + 10) / 2)   # node 1's history was dropped
    three = MetricsPipeline(nodes=1, columns=1, scrape_s=30, window_s=90)
    for v in (3.0, 6.0, 9.0):
        last = three.scrape(np.array([[v]]))
    assert last[0, 0] == pytest.approx((3 + 6 + 9) / 3)
    assert three.scrape(np.array([[12.0]]))[0, 0] == pytest.approx((6 + 9 + 12) / 3)


def test_metrics_pipeline_memory_is_a_gauge():
    # the engine's pipeline publishes memory (column 1) as the last scrape, the rest as window means
    pipe = MetricsPipeline(nodes=1, columns=4, scrape_s=30, window_s=60, gauges=(1,))
    pipe.scrape(np.array([[10.0, 100.0, 1.0, 2.0]]))
    out = pipe.scrape(np.array([[20.0, 300.0, 3.0, 4.0]]))
    np.testing.assert_allclose(out, [[15.0, 300.0, 2.0, 3.0]])


class Recorder(K8sDefault):
    """k8s-default that records what the cluster looked like at each scoring."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def score(self, pod, nodes, cluster):
        self.seen.append((pod.time_s, cluster.observed[0, 0], cluster.usage[0, 0]))
        return super().score(pod, nodes, cluster)


def test_pod_placed_between_scrapes_is_invisible_until_the_next_scrape():
    pods = [P("a", t=40, size_cpu=1000)] + [P(f"probe{t}", t=t) for t in (35, 50, 70, 100)]
    rec = Recorder()
    run = simulate(world([pool("a", node(cpu=4000, oh_cpu=100), 1)], pods), policy=rec, end_s=120)
    seen = {t: (obs, real) for t, obs, real in rec.seen}
    # scrapes (every 30 s, after the tick at equal times): s0 = s30 = 100 (overhead), s60 = s90 = 1100
    assert seen[35] == pytest.approx((100, 100))
    assert seen[50] == pytest.approx((100, 1100))               # placed at 40: real usage, not observed
    assert seen[70] == pytest.approx(((100 + 1100) / 2, 1100))  # window of s30 and s60
    assert seen[100] == pytest.approx((1100, 1100))             # window of s60 and s90
    assert run.metrics["pods_arrived"] == 5


# --- safety filter ---------------------------------------------------------------------------------

def test_safety_filter_keeps_pods_off_a_node_observed_above_90_percent():
    shape = node(cpu=1000)
    pods = [P("hog", cpu=100, size_cpu=950, pool="a"),    # real CPU 950 = 95% of node a
            P("early", t=45), P("late", t=75),
            P("pinned", t=80, pool="a")]
    prefer_a = PreferOrder([0, 1])   # the policy always wants node a
    run = simulate(world([pool("a", shape, 1), pool("b", shape, 1)], pods), policy=prefer_a, end_s=100)
    placed = {e["pod"]: e["node"] for e in run.of("placement")}
    # at 45 node a is observed at (0 + 950) / 2 = 475 <= 900: chosen
    assert placed["early"] == "a-0000"
    # at 75 it is observed at (950 + 950) / 2 = 950 > 900: removed whatever the policy says
    assert placed["late"] == "b-0000"
    # a pod that may only use node a waits
    assert "pinned" not in placed
    assert run.metrics["unschedulable"] == 1
