"""The simulator's physics by hand: CPU contention, latency from contention, pending latency-sensitive
pods in P99, the autoscaler's scale-down drain, and the steady-state start."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simulator.worlds import INF, P, config, constant_profiles, node, pool, simulate, world
from td3sched.simulator.config import Autoscaler, LatencyModel
from td3sched.simulator.contention import cpu_weight, deliver_cpu
from td3sched.simulator.engine import Simulation
from td3sched.policy.k8s_default import K8sDefault


def _contended_world():
    # node a: 4000m allocatable, no overhead. Three pods whose demand (size x shape 1.0) is 7000m:
    #   g  Guaranteed 2000m, limit 2000m, demand 3000m -> the quota cuts it to 2000m (1000m throttled)
    #   b  Burstable 1000m, no limit,      demand 3000m
    #   be BestEffort,                      demand 2000m
    # node b: one pod of 500m demand. Pinned by pools.
    pods = [P("g", cpu=2000, cpu_limit=2000, mem=10, mem_limit=10, size_cpu=3000, pool="a"),
            P("b", cpu=1000, size_cpu=3000, pool="a"),
            P("be", size_cpu=2000, pool="a"),
            P("x", cpu=100, size_cpu=500, pool="b")]
    return world([pool("a", node(cpu=4000), 1), pool("b", node(cpu=4000), 1)], pods)


def test_a_node_delivers_at_most_its_cores_and_the_split_follows_cgroup_weights():
    run = simulate(_contended_world(), end_s=61)
    sim = run.sim
    delivered = sim.delivered_usage()[:, 0]
    # node a: demand after quotas 2000 + 3000 + 2000 = 7000 > 4000: it delivers its 4000
    np.testing.assert_allclose(delivered, [4000, 500])
    np.testing.assert_allclose(sim.cluster.usage[:, 0], [7000, 500])      # the demand is kept apart
    # the split between g, b, be: weights 79, 39, 1 (2000m, 1000m, 0m requests); lambda = 50:
    # g min(2000, 3950) = 2000, b min(3000, 1950) = 1950, be min(2000, 50) = 50
    assert cpu_weight(np.array([2000, 1000, 0])).tolist() == [79, 39, 1]
    running = sim.running[: sim.n_running]
    share = deliver_cpu(sim.node[running], sim.pod_usage[running, 0], sim.cpu_weight[running],
                        np.full(len(running), INF), sim.cluster.allocatable[:, 0])
    by_name = dict(zip(sim.w.name[running].tolist(), share.delivered_milli.tolist()))
    assert by_name == pytest.approx({"g": 2000, "b": 1950, "be": 50, "x": 500})
    m = run.metrics
    # demand 3000 + 3000 + 2000 + 500 = 8500 before quotas; 1000 throttled; 3000 not served
    assert m["cpu_throttled_frac"] == pytest.approx(1000 / 8500)
    assert m["cpu_contention_frac"] == pytest.approx(3000 / 8500)
    # cpu_util counts delivered CPU: (4000 + 500) / 8000 at the tick at 60; the tick at 0 precedes the
    # arrivals at 0 and samples an empty cluster
    assert m["cpu_util"] == pytest.approx((0 + 4500 / 8000) / 2)


def test_latency_grows_with_the_pressure_a_pod_meets_not_with_a_saturated_node():
    # one latency-sensitive pod (base 40 ms, CPU weight 1 only) on a 4000m node with a BestEffort
    # neighbour: the pod (request 2000m, demand 1000m, weight 79) meets pressure
    #   sum_j min(d_j, r_ls x w_j) / C = (1000 + min(3000, 1000/79 x 1)) / 4000
    lat = LatencyModel(base_sigma=0.0, weight_cpu=1.0, weight_disk=0.0, weight_net=0.0)
    pods = [P("ls", cpu=2000, size_cpu=1000, ls=True), P("be", size_cpu=3000)]
    run = simulate(world([pool("a", node(cpu=4000), 1)], pods, cfg=config(latency=lat)), end_s=61)
    rho = (1000 + 1000 / 79) / 4000
    assert run.metrics["latency_p50_ms"] == pytest.approx(40 / (1 - rho), rel=0.005)
    # the node is at demand 4000 / 4000, but the heavy-weight pod is far from the cap (50 x 40 ms)
    assert run.metrics["latency_p99_ms"] < 60


def test_p99_includes_a_pending_latency_sensitive_pod_at_the_cap():
    lat = LatencyModel(base_sigma=0.0, weight_cpu=1.0, weight_disk=0.0, weight_net=0.0, rho_cap=0.98)
    # one LS pod runs idle (latency 40 ms); a second LS pod never fits (pending for the whole run)
    pods = [P("run", cpu=1000, ls=True), P("wait", cpu=9000, ls=True)]
    run = simulate(world([pool("a", node(cpu=4000), 1)], pods, cfg=config(latency=lat)), end_s=61)
    m = run.metrics
    # the tick at 60 (the tick at 0 precedes the arrivals): two samples, 40 ms and the cap 40 / (1 - 0.98) = 2000 ms
    assert m["latency_p50_ms"] == pytest.approx(40, rel=0.005)
    assert m["latency_p99_ms"] == pytest.approx(2000, rel=0.005)
    assert m["latency_breach_frac"] == pytest.approx(0.5)
    assert m["sla_latency_breaches"] == 0      # a pending pod's wait is counted as pending, not here


def test_scale_down_drains_a_half_empty_node_whose_pods_fit_elsewhere():
    # two 1000m nodes: a-0000 holds "big" (600m), a-0001 holds "small" (300m, under 50% requested).
    # small fits beside big on a-0000, so after 10 min unneeded a-0001 is drained and removed.
    pods = [P("big", cpu=600), P("small", t=1, cpu=300)]

    class SecondNodeFirst(K8sDefault):
        def score(self, pod, nodes, cluster):
            return np.where(nodes == 1, 1.0, 0.0) if pod.index == 1 else np.where(nodes == 0, 1.0, 0.0)

    cfg = config(autoscaler=Autoscaler(scale_down_delay_after_add_s=0.0))
    run = simulate(world([pool("a", node(cpu=1000), 2)], pods, cfg=cfg), SecondNodeFirst(), end_s=1200)
    # unneeded from the scan at 0 (a-0001 empty until 1 s, then 30%): ripe at the scan at 600
    assert [(e["t"], e["pod"], e["reason"]) for e in run.of("eviction")] == [(600, "small", "scale_down")]
    assert [(e["t"], e["node"]) for e in run.of("node_removed")] == [(600, "a-0001")]
    assert run.node_of("small") == "a-0000"
    assert run.metrics["evictions"] == 1


def test_no_drain_when_the_pods_fit_nowhere_else():
    pods = [P("big", cpu=800), P("small", t=1, cpu=300)]
    cfg = config(autoscaler=Autoscaler(scale_down_delay_after_add_s=0.0))
    run = simulate(world([pool("a", node(cpu=1000), 2)], pods, cfg=cfg), end_s=1200)
    assert run.of("eviction") == [] and run.of("node_removed") == []


def test_warm_up_counts_only_the_span():
    # pods arrive every 100 s for 1000 s, each runs 250 s; a span [600, 900) with a 600 s warm-up
    pods = [P(f"p{i}", t=100 * i, dur=250, cpu=100, size_cpu=100) for i in range(10)]
    w = world([pool("a", node(cpu=4000), 1)], pods, constant_profiles())
    sim = Simulation(w, K8sDefault(), 0, 600.0, 900.0, warmup_s=600.0)
    m = sim.run()["metrics"]
    # alive at 600: p4 (400-650), p5 (500-750); p6 (600) arrives at the span's start: 3 in all, plus
    # p7 and p8 in the span
    assert m["pods_arrived"] == 5
    assert m["decisions"] == 3     # p6, p7, p8 are scheduled in the span
    # a span at the trace's start gives up its own first seconds
    sim = Simulation(w, K8sDefault(), 0, 0.0, 900.0, warmup_s=600.0)
    assert sim.measure_s == 600.0 and sim.start_s == 0.0
    with pytest.raises(ValueError, match="warm-up"):
        Simulation(w, K8sDefault(), 0, 0.0, 500.0, warmup_s=600.0)


@pytest.mark.slow
def test_a_span_starts_at_steady_state_node_count():
    """dlrm's test span, after the default 3-day warm-up: the node count at the span's start is
    within 5% of the count one day later (before the warm-up, the first hours were a fill burst)."""
    from td3sched.run import run_simulation
    from td3sched.trace.location import traces_dir

    try:
        traces_dir()
    except FileNotFoundError as exc:  # like every test that reads the real traces
        pytest.skip(f"real traces not available ({exc})")
    record = run_simulation("dlrm", "k8s-default", 1, "test", ["spans.test=[21,22.05]", "batch.enabled=false"])
    nodes = record["series_hourly"]["nodes"]
    assert len(nodes) >= 25
    assert abs(nodes[24] - nodes[0]) <= 0.05 * nodes[0]


def test_the_heatmap_records_delivered_cpu_never_above_the_nodes_cores():
    """node_util_hourly is delivered CPU (pods + daemons) over allocatable; a node delivers at most its
    cores, so each value stays within its slot's node_util_ceiling, (allocatable + overhead) / allocatable,
    and a saturated node reaches it."""
    pods = [P("hog", cpu=1000, size_cpu=9000, pool="a"), P("calm", cpu=100, size_cpu=500, pool="b")]
    w = world([pool("a", node(cpu=4000, oh_cpu=400), 1), pool("b", node(cpu=2000, oh_cpu=100), 1)], pods)
    record = simulate(w, end_s=2 * 3600 + 1).result
    assert record["node_util_ceiling"] == pytest.approx([4400 / 4000, 2100 / 2000])
    rows = np.array(record["node_util_hourly"], dtype=float)
    assert rows.shape == (2, 2)
    assert np.all(rows <= np.array(record["node_util_ceiling"]) + 1e-9)
    # the hog's node delivers its 4,400 cores from the first tick after the arrival; the other serves
    # its 500 + 100 of demand
    assert rows[1] == pytest.approx([4400 / 4000, 600 / 2000])
