"""import-history on a real control plane: a stock kube-scheduler (no td3-scheduler anywhere) binds pods
to the harness's fake nodes; the history rebuilt from the API server's pods and the real Prometheus
names each pod's node, at its PodScheduled time, with every node's metrics of that moment; the API
server's own audit log gives the same decisions, and the deletions of pods their departures; the
scenario rebuilt from that history on the API server's NodeList replays in the simulator."""

from __future__ import annotations

import datetime

import numpy as np

from td3sched.lifecycle.history import read_history, write_history
from td3sched.lifecycle.importer import import_history, read_pod_list
from td3sched.lifecycle.rebuild import rebuild_scenario
from td3sched.run import run_simulation
from td3sched.scenario import load_scenario
from td3sched.engine.prometheus_source import DEFAULT_QUERIES
from tests.k8s.conftest import NODES
from tests.k8s.test_scheduling_e2e import create_pods, wait_bound

QUERIES = {name: q.replace("[1m]", "[15s]") for name, q in DEFAULT_QUERIES.items()}
"""Rate windows of 15 of the harness's 1 s scrapes. The exporter's counters grow at a constant rate, so a
rate is the same over any window of them, and a scrape that a busy machine runs seconds late leaves no
binding without its metrics (a binding without them is skipped, ``no_metrics``)."""
PLAIN_SCHEDULER = "plain-scheduler"
PLAIN_CONFIG = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": PLAIN_SCHEDULER}]}


def test_history_imported_from_a_real_api_server_and_prometheus(cluster, prometheus, namespace, start_scheduler,
                                                                 tmp_path):
    start_scheduler("stock", PLAIN_CONFIG)
    names = create_pods(cluster, namespace, PLAIN_SCHEDULER, 10)
    bound = wait_bound(cluster, namespace, names)
    pods = read_pod_list(f"{cluster.url}/api/v1/namespaces/{namespace}/pods", cluster.token,
                         ca_file=cluster.cert_dir / "apiserver.crt")
    path, counts = import_history(pods, prometheus.url, tmp_path / "cluster.parquet", step_s=1.0, queries=QUERIES)
    assert counts["bindings"] == 10 and counts["bound"] == 10 and counts["pods_skipped"] == 0
    rows = read_history(path).to_pylist()
    scheduled = {p["metadata"]["name"]: next(c["lastTransitionTime"] for c in p["status"]["conditions"]
                                             if c["type"] == "PodScheduled") for p in pods["items"]}
    nodes = {name: (cores, busy, mem, used) for name, cores, busy, mem, used in NODES}
    for row in rows:
        assert row["chosen_node"] == bound[row["pod_name"]] and row["policy"] == f"cluster:{PLAIN_SCHEDULER}"
        stamp = datetime.datetime.fromisoformat(scheduled[row["pod_name"]].replace("Z", "+00:00")).timestamp()
        assert row["time_s"] == stamp and row["source"] == "import"
        assert sorted(c["node"] for c in row["candidates"]) == sorted(nodes)
        assert row["candidates"][row["chosen_index"]]["node"] == row["chosen_node"]
        # memory needs no rate: each node's u_mem is its exporter's share plus the pods bound there just
        # before (the assign cache) plus this pod, over its memory
        for c in row["candidates"]:
            cores, busy, mem_gib, used = nodes[c["node"]]
            assert c["u_mem"] >= used + row["mem_mib"] / (mem_gib * 1024) - 1e-9
            assert c["u_cpu"] >= busy + row["cpu_milli"] / (cores * 1000) - 0.01  # rate within 1%
    first = min(rows, key=lambda r: int(r["decision_id"].rsplit("-", 1)[1]))  # replayed first: no assign-cache term
    u_mem = np.array([c["u_mem"] for c in first["candidates"]])
    expected = np.array([nodes[c["node"]][3] + first["mem_mib"] / (nodes[c["node"]][2] * 1024)
                         for c in first["candidates"]])
    np.testing.assert_allclose(u_mem, expected, atol=1e-9)
    # the API server's audit log of the same run: the same bindings, to the microsecond
    path2, counts2 = import_history(None, prometheus.url, tmp_path / "audit.parquet", step_s=1.0, queries=QUERIES,
                                    audit_log=cluster.audit_log)
    # the log is the whole test API server's: other tests' bindings are in it too (some of pods whose
    # creation it never saw, e.g. across an API server restart, which the importer skips and counts)
    mine = [r for r in read_history(path2).to_pylist() if r["pod_namespace"] == namespace]
    assert len(mine) == 10 and counts2["bindings"] >= 10, counts2
    by_pod = {r["pod_name"]: r for r in rows}
    for r in mine:
        other = by_pod[r["pod_name"]]
        assert r["chosen_node"] == other["chosen_node"] and 0 <= r["time_s"] - other["time_s"] < 1.5
        assert (r["cpu_milli"], r["mem_mib"], r["qos"]) == (other["cpu_milli"], other["mem_mib"], other["qos"])
        assert sorted(c["node"] for c in r["candidates"]) == sorted(nodes)


def test_a_cluster_history_with_deletions_replays_on_the_scenario_rebuilt_from_it(cluster, prometheus, namespace,
                                                                                  start_scheduler, tmp_path):
    start_scheduler("stock", PLAIN_CONFIG)
    names = create_pods(cluster, namespace, PLAIN_SCHEDULER, 12)
    wait_bound(cluster, namespace, names)
    for name in names[:4]:
        cluster.delete_pod(namespace, name)
    path, counts = import_history(None, prometheus.url, tmp_path / "audit.parquet", step_s=1.0, queries=QUERIES,
                                  audit_log=cluster.audit_log)
    rows = [r for r in read_history(path).to_pylist() if r["pod_namespace"] == namespace]  # this test's pods
    assert sorted(r["pod_name"] for r in rows) == names, counts
    left = {r["pod_name"]: (r["outcome_left_s"], r["outcome"]) for r in rows}
    assert all(left[n][1] == "departure" and left[n][0] > 0 for n in names[:4])
    assert all(left[n] == (None, None) for n in names[4:])
    mine = write_history(tmp_path / "mine.parquet", [{k: v for k, v in r.items() if k != "schema_version"}
                                                     for r in rows])
    nodes = read_pod_list(f"{cluster.url}/api/v1/nodes", cluster.token, ca_file=cluster.cert_dir / "apiserver.crt")
    rebuilt = rebuild_scenario(mine, nodes, tmp_path / "replay", window_s=3600.0)
    assert rebuilt.report["pods"] == 12 and rebuilt.report["pods_without_departure"] == 8
    assert not rebuilt.report["history_nodes_missing_from_node_list"]
    shapes = {(s.cpu_milli, s.mem_mib) for p in load_scenario(rebuilt.scenario).pools(1) for s in p.shapes}
    assert {(cores * 1000.0, mem * 1024.0) for _, cores, _, mem, _ in NODES} <= shapes
    metrics = run_simulation(rebuilt.scenario, "k8s-default", 1, rebuilt.span)["metrics"]
    # every pod is placed (the replay's own dynamics may evict and place one again: the fake nodes' usage
    # is all the known pods', a large share of their requests)
    assert metrics["pods_arrived"] == 12 and metrics["binds"] >= 12 and metrics["unschedulable"] == 0
