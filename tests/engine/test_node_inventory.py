"""The shadow state with a node inventory (the node watch): the API server's nodes and allocatable,
joined by name with the metrics; and the pairing of ReportBinding with the pod watch, each binding
counted once whichever path saw it first."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from td3sched.engine.decision import PodSpec
from td3sched.engine.state import ASSIGN_HORIZON_S, DEFAULT_NIC_MBIT, NodeInventory, ShadowState, binding_key, joined

from tests.engine.conftest import make_service, snapshot


def inventory(names, cpu=4000.0, mem=8192.0) -> NodeInventory:
    n = len(names)
    return NodeInventory(tuple(names), np.tile([cpu, mem, 50.0, 100.0], (n, 1)), np.zeros(n, dtype=np.int64))


def test_the_inventory_makes_the_node_set_and_the_allocatable():
    metrics = snapshot(3)  # node-0 .. node-2, 16 cores, disk and NIC capacities of their own
    inv = inventory(["node-1", "node-2", "node-9"])
    snap = joined(metrics, inv)
    assert snap.names == ("node-1", "node-2", "node-9")  # node-0: metrics of a node the API does not list
    np.testing.assert_array_equal(snap.allocatable, inv.allocatable)
    np.testing.assert_array_equal(snap.capacity_usage[:, :2], inv.allocatable[:, :2])
    np.testing.assert_array_equal(snap.observed[:2], metrics.observed[1:3])
    np.testing.assert_array_equal(snap.capacity_usage[:2, 2:], metrics.capacity_usage[1:3, 2:])
    np.testing.assert_array_equal(snap.scraped_at_s[:2], metrics.scraped_at_s[1:3])
    assert np.isnan(snap.observed[2]).all() and snap.scraped_at_s[2] == -np.inf  # node-9: no metrics, stale
    assert snap.capacity_usage[2, 3] == DEFAULT_NIC_MBIT
    assert joined(metrics, None) is metrics
    alone = joined(None, inv)
    assert alone.names == inv.names and not alone.complete.any()


def test_the_state_follows_the_inventory_and_keeps_bindings_by_node_name():
    state = ShadowState(lambda: 1_000_000.0)
    state.publish(snapshot(3))
    state.report_binding("node-2", np.array([500.0, 256.0]), t=1_000_001.0)
    state.set_inventory(inventory(["node-2", "node-7"]))
    assert state.snapshot.names == ("node-2", "node-7")
    assert set(state.assigned()) == {"node-2"}
    np.testing.assert_array_equal(state.assigned()["node-2"], [500, 256])
    state.publish(snapshot(3))  # a later scrape keeps the inventory's node set
    assert state.snapshot.names == ("node-2", "node-7")
    with pytest.raises(KeyError):
        state.report_binding("node-0", np.zeros(2))  # the API does not list it
    with pytest.raises(ValueError, match="positive CPU and memory"):
        inventory(["x"], cpu=0.0)


def test_a_binding_seen_by_both_paths_counts_once_and_a_new_one_counts_again(actor):
    service, _ = make_service(actor, snapshot(3))
    pod = PodSpec("web", cpu_milli=1000, mem_mib=1024, namespace="shop")
    state = service.engine.state
    assert service.report_binding(pod, "node-1", "d1") is True
    assert service.report_binding(pod, "node-1", source="pod_watch") is False
    np.testing.assert_array_equal(state.assigned()["node-1"], [1000, 1024])
    # the pod bound anew (deleted and created again): the watch reports first this time
    assert service.report_binding(pod, "node-1", source="pod_watch") is True
    assert service.report_binding(pod, "node-1", "d2") is False
    np.testing.assert_array_equal(state.assigned()["node-1"], [2000, 2048])
    # the same name in another namespace, or to another node, is another binding
    assert service.report_binding(PodSpec("web", cpu_milli=1000, mem_mib=1024, namespace="other"), "node-1") is True
    assert service.report_binding(pod, "node-2", source="pod_watch") is True
    assert binding_key("", "web") == binding_key("default", "web")


@settings(max_examples=150, deadline=None)
@given(bindings=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans(), st.booleans()),
                         max_size=30),
       watching=st.booleans(), gap_s=st.floats(0, 2 * ASSIGN_HORIZON_S))
def test_every_binding_counts_once_whichever_paths_report_it(bindings, watching, gap_s):
    """Bindings (pod, node) in order. With a pod watch, the watch reports each and ReportBinding may
    too, before or after it; without one, ReportBinding reports each. The assign cache holds each once."""
    t = [1_000_000.0]
    state = ShadowState(lambda: t[0])
    state.publish(snapshot(3, now=t[0]))
    expected = np.zeros((3, 2))
    counted = 0
    for pod, node, watch_first, grpc_too in bindings:
        if not watching:
            sources = ["report_binding"]
        elif not grpc_too:
            sources = ["pod_watch"]
        else:
            sources = ["pod_watch", "report_binding"] if watch_first else ["report_binding", "pod_watch"]
        for source in sources:
            counted += state.report_binding(f"node-{node}", np.array([100.0, 10.0]), pod=binding_key("ns", f"p{pod}"),
                                            source=source, t=t[0])
        expected[node] += [100, 10]
        t[0] += gap_s / max(len(bindings), 1)
    assert counted == len(bindings)
    held = state.assigned()
    for node in range(3):
        # entries past the horizon are dropped, none is added twice
        assert np.all(held.get(f"node-{node}", np.zeros(2)) <= expected[node] + 1e-9)
        if gap_s == 0:
            np.testing.assert_array_equal(held.get(f"node-{node}", np.zeros(2)), expected[node])
