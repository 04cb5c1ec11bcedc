"""The shadow state from a real Prometheus scraping node_exporter-format metrics: the PromQL, the
instance-to-node mapping and the staleness run for real; the engine keeps serving (stale, then
fresh again) when Prometheus goes away and comes back."""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.engine.decision import PodSpec
from td3sched.engine.prometheus_source import DEFAULT_QUERIES, PrometheusSource
from td3sched.engine.state import ShadowState, Staleness

from tests.engine.conftest import make_service
from tests.engine.prometheus_harness import (NodeExporterStub, PrometheusServer, SimulatedNode, ensure_prometheus,
                                             wait_for)

MIB = 2**20
QUERIES = {name: q.replace("[1m]", "[5s]") for name, q in DEFAULT_QUERIES.items()}
"""The default PromQL with 5-second rate windows (Prometheus scrapes every second here): a rate
is exact once its window is full of samples, which ``_complete`` waits for."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    binary = ensure_prometheus()
    nodes = [SimulatedNode("node-a", 4, 0.50, 16, 0.25), SimulatedNode("node-b", 8, 0.25, 32, 0.5, disk_busy=0.4),
             SimulatedNode("node-c", 2, 0.95, 8, 0.9, net_bytes_per_s=62.5e6)]
    exporter = NodeExporterStub(nodes)
    prom = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{exporter.port}")
    prom.start()
    yield exporter, prom
    prom.stop()
    exporter.stop()


def _complete(source):
    """A snapshot with all three nodes and every metric, once the rate windows are full of samples
    (Prometheus extrapolates a rate over a part-filled window)."""
    try:
        full = source._query_raw("min(count_over_time(up[5s]))") >= 5
        snap = source.snapshot()
    except Exception:  # noqa: BLE001  (not up yet)
        return None
    return snap if full and snap.size == 3 and np.isfinite(snap.observed).all() else None


def test_promql_gives_each_nodes_usage_in_the_simulators_units(cluster):
    exporter, prom = cluster
    state = ShadowState()
    source = PrometheusSource(prom.url, state, QUERIES, interval_s=1.0)
    snap = wait_for(lambda: _complete(source))
    assert snap is not None, "Prometheus never returned all three nodes with every metric"
    assert snap.names == ("node-a", "node-b", "node-c")  # instance "node-a:9100" -> node "node-a"
    np.testing.assert_allclose(snap.allocatable[:, 0], [4000, 8000, 2000])
    np.testing.assert_allclose(snap.observed[:, 0], [2000, 2000, 1900], rtol=0.02)
    np.testing.assert_allclose(snap.allocatable[:, 1], [16 * 1024, 32 * 1024, 8 * 1024])
    np.testing.assert_allclose(snap.observed[:, 1], [4 * 1024, 16 * 1024, 0.9 * 8 * 1024], rtol=1e-6)
    np.testing.assert_allclose(snap.observed[:, 2], [0.1, 0.4, 0.1], rtol=0.02)  # disk busy share
    np.testing.assert_allclose(snap.observed[:, 3], [8, 8, 500], rtol=0.02)  # Mbit/s, lo excluded
    np.testing.assert_allclose(snap.capacity_usage[:, 3], 10_000)  # 1.25e9 bytes/s link
    assert np.all(np.abs(snap.scraped_at_s - snap.taken_at_s) < 30)


def test_the_engine_decides_on_prometheus_metrics_and_the_safety_filter_sees_them(cluster, actor):
    _, prom = cluster
    service, _ = make_service(actor)
    service.engine.state.clock = __import__("time").time
    source = PrometheusSource(prom.url, service.engine.state, QUERIES, interval_s=0.5)
    assert wait_for(lambda: _complete(source))
    source.start()
    try:
        assert wait_for(lambda: service.ready)
        _, d = service.score_nodes(PodSpec("p", cpu_milli=500, mem_mib=512), ["node-a", "node-b", "node-c"])
        assert not d.fallback and not d.stale.any()
        assert list(service.filter(["node-a", "node-b", "node-c"])) == ["node-c"]  # 95% busy
    finally:
        source.stop()


def test_a_node_that_stops_reporting_goes_stale_and_prometheus_restarts_are_survived(cluster, actor, tmp_path):
    exporter, prom = cluster
    import time

    state = ShadowState(time.time, Staleness(max_age_s=4.0, mode="fail-closed"))
    service, _ = make_service(actor)
    service.engine.state = state
    source = PrometheusSource(prom.url, state, QUERIES, interval_s=0.5)
    assert wait_for(lambda: _complete(source))
    assert source.refresh()
    names = ["node-a", "node-b", "node-c"]
    prom.stop()  # Prometheus goes away: refreshes fail, the last snapshot ages into staleness
    assert not source.refresh() and "query" in state.last_error
    failed = wait_for(lambda: service.filter(names) if len(service.filter(names)) == 3 else None, deadline_s=30)
    assert failed and all("s old, over 4 s" in reason for reason in failed.values())
    _, d = service.score_nodes(PodSpec("p", cpu_milli=100), names)
    assert d.fallback_reason == "no_fresh_metrics" and d.excluded.all()
    prom.start()  # and comes back, same data folder
    assert wait_for(lambda: source.refresh() and not service.filter(names[:2]), deadline_s=60)
    _, d = service.score_nodes(PodSpec("p", cpu_milli=100), names)
    assert not d.fallback and not d.stale.any()
