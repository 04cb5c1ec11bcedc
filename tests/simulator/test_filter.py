"""Filter rules in a run: node selectors, GPUs, anti-affinity caps, and the pending-queue retry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.simulator.engine import PENDING
from td3sched.simulator.filter import choose_gpus, fit_matrix, fits_one

from .worlds import BE, P, config, node, pool, profiles_from, simulate, workload, world


def test_fit_rules_for_gpu_shares_and_whole_gpus():
    free = np.array([[1000, 1000, 10, 10], [1000, 1000, 10, 10]], dtype=float)
    gpu_free = np.array([[400, 1000, 0], [600, 600, 600]])
    # share 500: node 0 has a GPU with 1000 free, node 1 GPUs with 600 free -> both fit
    # two whole GPUs: node 0 has one entirely free GPU, node 1 none -> neither
    # one whole GPU: node 0 only
    request = np.array([[100, 100, 0, 0]] * 3, dtype=float)
    fits = fit_matrix(free, gpu_free, request, np.array([1, 2, 1]), np.array([500, 1000, 1000]))
    np.testing.assert_array_equal(fits, [[True, False, True], [True, False, False]])
    for m, (count, milli) in enumerate([(1, 500), (2, 1000), (1, 1000)]):
        np.testing.assert_array_equal(fits_one(free, gpu_free, request[m], count, milli), fits[:, m])
    # a share goes to the GPU it fits best (least free room that suffices)
    assert choose_gpus(np.array([1000, 600, 400]), 1, 500).tolist() == [1]
    assert choose_gpus(np.array([1000, 600, 1000]), 2, 1000).tolist() == [0, 2]


def test_gpu_shares_pack_onto_one_gpu_and_leave_whole_gpus_free():
    pods = [P("s1", gpus=1, gpu_milli=500), P("s2", t=1, gpus=1, gpu_milli=500),
            P("w", t=2, gpus=2, gpu_milli=1000), P("w1", t=3, gpus=1, gpu_milli=1000)]
    run = simulate(world([pool("g", node(gpus=2), 1)], pods), end_s=10)
    sim = run.sim
    # s1: both GPUs empty, best fit is the first (GPU 0). s2: GPU 0 has 500 free, GPU 1 1000 -> GPU 0.
    # So GPU 1 stays entirely free: w (two whole GPUs) waits, w1 (one whole GPU) takes GPU 1.
    assert [e["pod"] for e in run.of("placement")] == ["s1", "s2", "w1"]
    assert sim.cluster.gpu_used[0].tolist() == [1000, 1000]
    w1 = int(np.flatnonzero(sim.w.name == "w1")[0])
    assert sim.gpus[w1].tolist() == [1]
    assert run.metrics["unschedulable"] == 1


def test_node_selector_and_anti_affinity_cap():
    pods = [P(f"r{i}", app="web", cap=2, pool="b") for i in range(5)]
    run = simulate(world([pool("a", node(), 2), pool("b", node(), 2)], pods), end_s=10)
    nodes = [e["node"] for e in run.of("placement")]
    # two per node of pool b, the fifth waits
    assert sorted(nodes) == ["b-0000", "b-0000", "b-0001", "b-0001"]
    assert run.metrics["unschedulable"] == 1


def test_anti_affinity_cap_frees_up_when_a_pod_leaves():
    # cap 1 on one node: r1 waits for r0 to leave at 100, then takes its place at once
    pods = [P("r0", dur=100, app="web", cap=1), P("r1", t=10, app="web", cap=1)]
    run = simulate(world([pool("a", node(), 1)], pods), end_s=200)
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(0, "r0"), (100, "r1")]


def test_anti_affinity_cap_counts_every_pod_of_the_app():
    pods = [P("free", app="web", cap=-1), P("capped", t=1, app="web", cap=1)]
    run = simulate(world([pool("a", node(), 1)], pods), end_s=10)
    # Workload.max_per_node: "at most this many pods of the app on one node" -- one is there already
    assert [e["pod"] for e in run.of("placement")] == ["free"]


def test_memory_pressure_on_best_effort_does_not_block_a_burstable_pod():
    # node: 1000m, 4000 MiB. The node is under MemoryPressure throughout (the condition set by hand:
    # a hog really using more than 95% of memory would now be evicted by the kubelet, §5). hog uses
    # 950m CPU in [0, 300), none after: nodes observed above 90% CPU are filtered out until the
    # scrape at 300 brings the window mean down to 475m; pods held back by usage retry at each scrape.
    shape = np.zeros((4, 2, 2))
    shape[0, 0] = [0.95, 0.0]
    pods = [P("hog", cpu=100, mem=100, size_cpu=1000, profile=0),
            P("be", t=100, profile=1),                                     # BestEffort
            P("lim", t=110, cpu_limit=500, mem_limit=100, profile=1)]      # Burstable, no requests
    w = world([pool("a", node(cpu=1000, mem=4000), 1)], pods, profiles_from(shape), config(mem_level=1.0))
    assert w.workload.qos.tolist()[1:] == [BE, 1]

    def pressure(sim):
        sim.cluster.pressure_until[0] = np.inf

    run = simulate(w, end_s=600, prepare=pressure)
    sim = run.sim
    be = int(np.flatnonzero(sim.w.name == "be")[0])
    assert sim.state[be] == PENDING   # the taint keeps it off, rightly
    # lim passes every Filter rule from the scrape at 300 on
    assert [(e["t"], e["pod"]) for e in run.of("placement")][1:] == [(300, "lim")]


def test_retry_does_not_skip_a_pod_whose_cap_differs():
    # as above: the node is observed above 90% CPU until the scrape at 300
    shape = np.zeros((4, 2, 2))
    shape[0, 0] = [0.95, 0.0]
    pods = [P("hog", cpu=100, size_cpu=1000, app="hog", profile=0),
            P("w0", cpu=10, app="web", cap=1, profile=1),          # placed at 0
            P("w1", t=100, cpu=10, app="web", cap=1, profile=1),   # pending: safety, then its cap
            P("w2", t=110, cpu=10, app="web", cap=2, profile=1)]   # pending: safety only
    run = simulate(world([pool("a", node(cpu=1000), 1)], pods, profiles_from(shape)), end_s=600)
    placed = [(e["t"], e["pod"]) for e in run.of("placement")]
    assert placed == [(0, "hog"), (0, "w0"), (300, "w2")]


def test_a_policy_filter_keeps_the_pod_pending_when_it_rejects_every_node():
    from td3sched.policy.k8s_default import K8sDefault

    class RejectNodeZeroUntil300(K8sDefault):
        name = "reject-node-0"

        def filter(self, pod, nodes, cluster):
            return (nodes != 0) | (pod.time_s >= 300)

    w = world([pool("p", node(4000, 8192), 1)], [P("a", t=10, cpu=1000, mem=1000)])
    run = simulate(w, RejectNodeZeroUntil300(), end_s=600)
    # rejected at 10 s and at the ticks of 60..240 s; placed at the tick of 300 s
    assert [(e["t"], e["pod"]) for e in run.of("placement")] == [(300, "a")]
    assert run.metrics["sla_pending_too_long"] == 1


@settings(max_examples=80, deadline=None)
@given(free=st.lists(st.sampled_from([-1e-9, 0.0, 500.0, 1000.0, 4000.0]), min_size=4, max_size=4),
       gpu=st.lists(st.sampled_from([0, 250, 500, 1000]), min_size=2, max_size=2),
       pods=st.lists(st.tuples(st.sampled_from([0.0, 400.0, 1000.0]), st.sampled_from([0.0, 1000.0]),
                               st.sampled_from([(0, 0), (1, 250), (1, 500), (1, 1000), (2, 1000)])),
                     min_size=1, max_size=6))
def test_fits_node_is_filters_rule_for_each_pod(free, gpu, pods):
    """fits_node answers for many pod shapes at once what Filter's fits_one answers for each,
    including a resource a pod does not request on a node whose free value drifted below 0."""
    from td3sched.simulator.filter import fits_node

    request = np.array([[cpu, mem, 0.0, 0.0] for cpu, mem, _ in pods])
    gc = np.array([g[0] for _, _, g in pods])
    gm = np.array([g[1] for _, _, g in pods])
    free, gpu = np.array(free), np.array(gpu)
    want = [bool(fits_one(free[None], gpu[None], request[m], int(gc[m]), int(gm[m]))[0]) for m in range(len(pods))]
    assert fits_node(free, gpu, request, gc, gm).tolist() == want


def test_a_cycle_scores_only_the_nodes_kube_scheduler_finds_and_the_next_starts_where_it_stopped():
    """percentageOfNodesToScore: 300 nodes -> 48% -> a cycle stops filtering at 144 feasible nodes;
    the next cycle's walk starts after the last node the previous one looked at."""
    from td3sched.policy.k8s_default import K8sDefault

    seen: list[list[int]] = []

    class Record(K8sDefault):
        def score(self, pod, nodes, cluster):
            seen.append([int(n) for n in nodes])
            return super().score(pod, nodes, cluster)

    pods = [P(f"p{i}", t=float(i), cpu=100) for i in range(3)]
    run = simulate(world([pool("a", node(), 300)], pods), Record(), end_s=60)
    assert [len(s) for s in seen] == [144, 144, 144]
    assert seen[0] == list(range(0, 144)) and seen[1] == list(range(144, 288))
    assert seen[2] == list(range(288, 300)) + list(range(0, 132))  # round the cluster
    assert len(run.of("placement")) == 3

    # 100 scores every feasible node, every cycle from slot 0
    seen.clear()
    simulate(world([pool("a", node(), 300)], pods, cfg=config(percentage_of_nodes_to_score=100)), Record(), end_s=60)
    assert seen == [list(range(300))] * 3


def test_the_walk_counts_nodes_of_other_pools_and_a_failed_cycle_sees_every_node():
    """Nodes of another pool fail NodeAffinity and count as looked at; a pod that fits nowhere walks
    the whole cluster (and stays pending)."""
    from td3sched.policy.k8s_default import K8sDefault

    seen: list[list[int]] = []

    class Record(K8sDefault):
        def score(self, pod, nodes, cluster):
            seen.append([int(n) for n in nodes])
            return super().score(pod, nodes, cluster)

    pods = [P("big", t=0.0, cpu=99_000, pool="b"), P("x", t=1.0, cpu=100, pool="b"),
            P("y", t=2.0, cpu=100, pool="b")]
    w = world([pool("a", node(), 200), pool("b", node(), 200)], workload(pods, ("a", "b")))
    run = simulate(w, Record(), end_s=60)
    # 400 nodes -> 47% -> 188 to find; "big" fits nowhere (whole walk); "x" walks pool a's 200 slots
    # and 188 of pool b's; "y" starts at slot 388
    assert [len(s) for s in seen] == [188, 188]
    assert seen[0] == list(range(200, 388))
    assert seen[1] == list(range(388, 400)) + list(range(200, 376))
    assert run.node_of("big") is None
