"""Faults while pods are being scheduled on the real control plane (td3-scheduler, the TD3Score
plugin): the engine restarted, the model hot-reloaded, Prometheus gone. Every pod is bound exactly
once; nothing is lost."""

from __future__ import annotations

import shutil
import threading
import time

from tests.engine.prometheus_harness import NodeExporterStub, PrometheusServer, SimulatedNode, ensure_prometheus
from tests.k8s.conftest import NODES
from tests.k8s.control_plane import MODEL, REPO, Engine, extender_config, plugin_config, wait_rates_settled
from tests.k8s.test_scheduling_e2e import EXTENDER_SCHEDULER, HOT_NODE, PLUGIN_SCHEDULER, wait_bound


def create_pods_paced(cluster, namespace: str, n: int, every_s: float, during=None,
                      scheduler: str = PLUGIN_SCHEDULER) -> list[str]:
    """``n`` pods, one every ``every_s``; ``during(i)`` runs before pod i (the fault's moment)."""
    names = []
    for i in range(n):
        if during is not None:
            during(i)
        name = f"pod-{i:03d}"
        cluster.create_pod(namespace, name, scheduler, cpu=f"{50 + 7 * i}m", memory=f"{32 + 5 * i}Mi")
        names.append(name)
        time.sleep(every_s)
    return names


def bound_once(cluster, namespace: str, engine: Engine, names: list[str]) -> dict[str, str]:
    """Every pod bound, and the engine told of each binding at most once (no pod bound twice)."""
    bound = wait_bound(cluster, namespace, names)
    reported = [r["pod"]["name"] for r in engine.records() if r["kind"] == "binding" and r["pod"]["namespace"] == namespace]
    assert len(reported) == len(set(reported)), "a pod was reported bound twice"
    for r in engine.records():
        if r["kind"] == "binding" and r["pod"]["namespace"] == namespace:
            assert r["node"] == bound[r["pod"]["name"]]
    return bound


def test_engine_restart_while_pods_are_scheduled(cluster, engine, prometheus, namespace, start_scheduler):
    scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prometheus))
    restarted = threading.Event()

    def fault(i):
        if i == 10:
            engine.stop()       # SIGTERM: drains, the port closes; pods 10.. meet a dead engine
        if i == 20:
            engine.start()      # the same ports
            restarted.set()
    names = create_pods_paced(cluster, namespace, 50, 0.1, fault)  # 3 s of pods after the restart
    assert restarted.is_set()
    bound_once(cluster, namespace, engine, names)
    assert scheduler.metric("td3score_fallbacks_total", reason="unavailable") >= 1, "no pod met the stopped engine"
    # pods 0-9 had the engine's answer; after the restart the plugin reconnects within its 1 s backoff cap
    assert scheduler.metric("td3score_decisions_total", source="engine") > 10


def test_extender_engine_restart_while_pods_are_scheduled(cluster, engine, namespace, start_scheduler):
    """The stock scheduler with the engine as its extender: while the engine is down the extender is
    ignored (and its safety filter with it); before and after, /filter and /prioritize decide."""
    start_scheduler("extender", extender_config(f"http://127.0.0.1:{engine.http_port}"))

    def fault(i):
        if i == 8:
            engine.stop()
        if i == 16:
            engine.start()
    names = create_pods_paced(cluster, namespace, 30, 0.1, fault, scheduler=EXTENDER_SCHEDULER)
    bound = wait_bound(cluster, namespace, names)
    decided = {r["pod"]["name"] for r in engine.records() if r["kind"] == "decision" and r["pod"]["namespace"] == namespace}
    assert {f"pod-{i:03d}" for i in range(8)} <= decided, "the extender decided nothing before the stop"
    assert any(int(n[4:]) >= 16 for n in decided), "the extender decided nothing after the restart"
    assert all(bound[n] != HOT_NODE for n in decided), "a pod the extender filtered went to the hot node"


def test_model_hot_reload_while_pods_are_scheduled(cluster, prometheus, processes, namespace, start_scheduler,
                                                   tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    engine = Engine(tmp_path / "engine", prometheus, processes, model=str(model), reload_interval_s=0.2)
    try:
        engine.wait_fresh([n[0] for n in NODES])
        scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prometheus))

        def fault(i):
            if i == 15:  # another shipped model, file by file, as a deploy would write it
                for name in ("model.pt", "model.onnx", "model.json"):
                    shutil.copy2(REPO / "models" / "td3-dlrm-seed" / name, model / name)
        names = create_pods_paced(cluster, namespace, 40, 0.1, fault)
        bound_once(cluster, namespace, engine, names)
        versions = [r["model_version"] for r in engine.records()
                    if r["kind"] == "decision" and r["pod"]["namespace"] == namespace]
        assert len(set(versions)) == 2 and versions[0] != versions[-1], f"model versions seen: {sorted(set(versions))}"
        # a reload is a CPU spike on the engine: a call may miss the 15 ms deadline, never fail otherwise
        other = scheduler.metric("td3score_fallbacks_total") - scheduler.metric("td3score_fallbacks_total", reason="timeout")
        assert other == 0, "the reload made the engine fail a call"
    finally:
        engine.stop()


def test_prometheus_down_pods_still_schedule(cluster, processes, namespace, start_scheduler, tmp_path):
    """Its own Prometheus, stopped: the plugin's and the engine's metrics go stale (3 s here); Filter
    lets every node through (fail-open), the engine answers neutral scores, and every pod is bound."""
    exporter = NodeExporterStub([SimulatedNode(name, cores, busy, mem, used) for name, cores, busy, mem, used in NODES])
    prom = PrometheusServer(ensure_prometheus(), tmp_path, f"127.0.0.1:{exporter.port}")
    prom.start()
    try:
        wait_rates_settled(prom, exporter.nodes)
        engine = Engine(tmp_path / "engine", prom, processes, staleness={"max_age_s": 3})
        engine.wait_fresh([n[0] for n in NODES])
        scheduler = start_scheduler("plugin", plugin_config(f"127.0.0.1:{engine.grpc_port}", prom,
                                                            metricsMaxAgeSeconds=3))
        prom.stop()
        time.sleep(4)
        names = create_pods_paced(cluster, namespace, 12, 0.05)
        bound_once(cluster, namespace, engine, names)
        assert scheduler.metric("td3score_node_metrics_refreshes_total", result="error") >= 1
        reasons = {r["fallback_reason"] for r in engine.records()
                   if r["kind"] == "decision" and r["pod"]["namespace"] == namespace}
        assert reasons == {"no_fresh_metrics"}, reasons
        engine.stop()
    finally:
        prom.stop()
        exporter.stop()
