"""A scenario rebuilt from a cluster's scheduling history (lifecycle.rebuild) and the gate's replay of it.

The fidelity test records a tiny run, strips its history to what a cluster's import holds (no
scenario, observation, reward, workload or policy; source ``import``), rebuilds a scenario from it on
the run's nodes, replays the same policy there and compares the cluster's usage with the recorded
run's. The hand-made history checks the estimate and the pods' lifetimes exactly.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from td3sched.lifecycle.gate import GateConfig, history_replay, run_gate
from td3sched.lifecycle.history import HistoryError, read_history, write_history
from td3sched.lifecycle.rebuild import node_shapes, read_node_list, rebuild_scenario
from td3sched.run import run_simulation
from td3sched.scenario import load_scenario

FIXED = ["nodes.pools.cpu.count=20", "nodes.pools.cpu.min_count=20", "nodes.pools.gpu.count=6",
         "nodes.pools.gpu.min_count=6"]
"""tiny with every node slot provisioned and no autoscaling: the rebuilt cluster's nodes are fixed too."""
CLUSTER_ONLY = {"scenario": None, "seed": None, "policy": "cluster:default-scheduler", "workload": None,
                "observation": None, "model_version": None, "action": None, "weights": None, "tau": None,
                "outcome": None, "outcome_kills": None, "outcome_slo_h": None, "outcome_node_slo_h": None,
                "reward": None, "elapsed_s": None, "source": "import"}
"""What an imported history lacks of a simulator's: only times, pods, candidates, choices, departures and the
nodes' overload hours stay."""


def node_list_of(scenario) -> dict:
    """A v1.NodeList of the scenario's node slots, named as the simulator names them."""
    items = []
    for pool in scenario.pools(1):
        for i, s in enumerate(pool.shapes):
            alloc = {"cpu": f"{int(s.cpu_milli)}m", "memory": f"{int(s.mem_mib)}Mi",
                     "ephemeral-storage": f"{int(s.disk_gib)}Gi", "koordinator.sh/rdma": str(int(s.rdma_pct))}
            if s.gpus:
                alloc["nvidia.com/gpu"] = str(s.gpus)
            items.append({"metadata": {"name": f"{pool.name}-{i:04d}"}, "status": {"allocatable": alloc}})
    return {"kind": "NodeList", "apiVersion": "v1", "items": items}


@pytest.fixture(scope="module")
def cluster_history(tmp_path_factory):
    """(the recorded run's metrics, an import-like history of it, its node list)."""
    folder = tmp_path_factory.mktemp("rebuild")
    from td3sched.lifecycle.record import record_simulation

    record, path, _ = record_simulation("tiny", "k8s-default", 1, "test", folder / "sim", list(FIXED))
    rows = [{**row, **CLUSTER_ONLY} for row in read_history(path).to_pylist()]
    for row in rows:
        row.pop("schema_version", None)
    history = write_history(folder / "cluster" / "import.parquet", rows)
    return record["metrics"], history, node_list_of(load_scenario("tiny", FIXED))


def test_a_replay_of_a_rebuilt_cluster_history_has_the_recorded_runs_load(cluster_history, tmp_path):
    metrics, history, nodes = cluster_history
    rebuilt = rebuild_scenario(history, nodes, tmp_path / "replay", window_s=6 * 3600)
    assert rebuilt.report["nodes"] == 26 and not rebuilt.report["history_nodes_missing_from_node_list"]
    replay = run_simulation(rebuilt.scenario, "k8s-default", 1, rebuilt.span)["metrics"]
    # the same pods arrive in the window; the usage is an estimate (one ratio for every pod, node
    # overheads attributed to the pods): within 15% of the recorded run's (measured: +12% CPU, +8% memory)
    assert abs(replay["pods_arrived"] - metrics["pods_arrived"]) <= 0.03 * metrics["pods_arrived"]
    assert abs(replay["binds"] - metrics["binds"]) <= 0.05 * metrics["binds"]
    for key in ("cpu_util", "mem_util"):
        assert replay[key] == pytest.approx(metrics[key], rel=0.15), key
    assert replay["node_hours"] == pytest.approx(metrics["node_hours"])


def test_a_rebuilt_scenario_reproduces_the_observations_it_was_built_from(cluster_history, tmp_path):
    from td3sched.lifecycle.record import record_simulation

    _, history, nodes = cluster_history
    first = rebuild_scenario(history, nodes, tmp_path / "replay", window_s=6 * 3600)
    # the replay's own history, without the spread, rebuilt again on its nodes: the same estimates
    no_spread = ["workload.cpu_spread=0", "workload.mem_spread=0"]
    _, path, _ = record_simulation(first.scenario, "k8s-default", 1, first.span, tmp_path / "again", no_spread)
    assert path.parent == tmp_path / "again" and path.name.startswith("replay-scenario-recent-seed1-")
    second = rebuild_scenario(path, node_list_of(load_scenario(first.scenario)), tmp_path / "replay2",
                              window_s=6 * 3600)
    for key, value in first.report["ratio_mean"].items():
        assert second.report["ratio_mean"][key] == pytest.approx(value, rel=0.01), key  # measured: within 0.1%
    # every pod of that world uses the same share of its requests: no spread is estimated
    assert first.report["spread"]["cpu_sigma"] > 0.3 and second.report["spread"]["cpu_sigma"] < 0.05


def test_the_gate_replays_a_cluster_history_on_the_scenario_rebuilt_from_it(cluster_history, tmp_path):
    _, history, nodes = cluster_history
    with pytest.raises(HistoryError, match=r"comes from import.*--nodes"):
        history_replay(history, 6 * 3600.0)
    scenario, span, overrides = history_replay(history, 6 * 3600.0, nodes, tmp_path / "replay")
    assert (scenario, span, overrides) == (str(tmp_path / "replay" / "scenario.yaml"), "recent", [])
    config = GateConfig(scenario=scenario, span=span, seeds=(1, 2))
    # packing to 95% on the replayed cluster costs latency (measured: P99 3.5 s against 98 ms): refused
    result = run_gate("static-weights:w=0.25/0.25/0.25/0.25:tau=0.95", "static-weights:w=0.5/0.25/0/0.25:tau=0",
                      config)
    assert result["config"]["scenario"] == scenario and set(result["runs"]["current"]) == {"1", "2"}
    assert not result["promote"] and any(r.startswith("latency_p99_ms is worse") for r in result["reasons"])
    # the seeds replay different draws of the pods' usage (the spread), not the same run twice
    o = result["objective"]
    assert o["improvement_low"] < o["improvement_high"]
    runs = result["runs"]["current"]
    assert runs["1"] != runs["2"]


def _cand(node: str, used_cpu: float, used_mem: float, pod_cpu: float, pod_mem: float, stale: bool = False) -> dict:
    cap_cpu, cap_mem = 10_000.0, 10_240.0
    if stale:
        return {"node": node, "u_cpu": None, "u_mem": None, "u_io": None, "u_net": None, "stale": True, "score": None}
    return {"node": node, "u_cpu": (used_cpu + pod_cpu) / cap_cpu, "u_mem": (used_mem + pod_mem) / cap_mem,
            "u_io": 0.01, "u_net": 0.02, "stale": False, "score": None}


def _decision(i: int, t: float, pod: str, cpu: float, node: str, requested: dict, left=None, stale=False) -> dict:
    """A decision whose candidates' observed usage is half their known pods' CPU requests and a quarter
    of their memory requests."""
    cands = [_cand(n, 0.5 * r[0], 0.25 * r[1], cpu, cpu, stale) for n, r in sorted(requested.items())]
    return {"source": "import", "decision_id": f"d{i}", "time_s": t, "scenario": None, "seed": None, "policy": None,
            "pod_name": pod, "pod_namespace": "shop", "workload": None, "qos": 1, "cpu_milli": cpu, "mem_mib": cpu,
            "disk_gib": 0.0, "rdma_pct": 0.0, "gpu_count": 0, "gpu_milli": 0, "cpu_limit_milli": None,
            "mem_limit_mib": None, "observation": None, "candidates": cands, "chosen_node": node,
            "chosen_index": [c["node"] for c in cands].index(node), "model_version": None, "action": None,
            "weights": None, "tau": None, "outcome_left_s": left, "outcome": None if left is None else "departure",
            "outcome_kills": None, "outcome_overload_h": None, "outcome_slo_h": None, "outcome_node_slo_h": None,
            "wait_s": None, "reward": None,
            "elapsed_s": None}


NODES = {"kind": "NodeList", "items": [{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "10",
                                                                                         "memory": "10Gi"}}}
                                       for n in ("n1", "n2")]}


def test_the_usage_ratio_and_the_pods_lifetimes_are_read_from_the_history(tmp_path):
    # a (1000m) on n1; b (2000m) on n2, left at 400; a again on n2 at 100 (so the first a left then); c on n1
    rows = [_decision(0, 0.0, "a", 1000, "n1", {"n1": (0, 0), "n2": (0, 0)}),
            _decision(1, 50.0, "b", 2000, "n2", {"n1": (1000, 1000), "n2": (0, 0)}, left=400.0),
            _decision(2, 100.0, "a", 1000, "n2", {"n1": (1000, 1000), "n2": (2000, 2000)}),
            _decision(3, 150.0, "c", 500, "n1", {"n1": (0, 0), "n2": (3000, 3000)})]
    history = write_history(tmp_path / "h.parquet", rows)
    rebuilt = rebuild_scenario(history, NODES, tmp_path / "out", window_s=86400.0)
    ratio = rebuilt.report["ratio_mean"]
    assert ratio["cpu_used_per_requested"] == pytest.approx(0.5, abs=1e-12)
    assert ratio["mem_used_per_requested"] == pytest.approx(0.25, abs=1e-12)
    assert rebuilt.report["departures_inferred_from_rebinding"] == 1 and rebuilt.report["warmup_s"] == 0
    pods = pd.read_csv(tmp_path / "out" / "pods.csv.gz").set_index("name")
    assert pods["arrival_s"].to_dict() == {"shop/a": 0.0, "shop/b": 50.0, "shop/a#1": 100.0, "shop/c": 150.0}
    assert pods["duration_s"].iloc[:2].tolist() == [100.0, 350.0] and pods["duration_s"].iloc[2:].isna().all()
    np.testing.assert_allclose(pods["size_cpu_milli"], 0.5 * pods["request_cpu_milli"])
    np.testing.assert_allclose(pods["size_mem_mib"], 0.25 * pods["request_mem_mib"])
    world = load_scenario(rebuilt.scenario).build(1)
    assert [p.count for p in world.pools] == [2] and world.config.usage_scale == 1.0
    only_n1 = {"items": NODES["items"][:1]}  # a node of the history the NodeList no longer has
    assert rebuild_scenario(history, only_n1, tmp_path / "out1", window_s=86400.0).report[
        "history_nodes_missing_from_node_list"] == ["n2"]
    np.testing.assert_array_equal(world.profiles.shape[:2, 0, :], 1.0)  # one slot, at its peak


def test_a_history_it_cannot_estimate_or_a_node_list_without_nodes_is_refused(tmp_path):
    stale = [_decision(0, 0.0, "a", 1000, "n1", {"n1": (0, 0)}),
             _decision(1, 10.0, "b", 1000, "n1", {"n1": (1000, 1000)}, stale=True)]
    history = write_history(tmp_path / "h.parquet", stale)
    with pytest.raises(HistoryError, match="usage cannot be estimated"):
        rebuild_scenario(history, NODES, tmp_path / "out", window_s=3600.0)
    assert not (tmp_path / "out").exists()
    with pytest.raises(HistoryError, match="no node with CPU and memory"):
        node_shapes({"items": [{"metadata": {"name": "n1"}, "status": {}}]})
    (tmp_path / "nodes.json").write_text(json.dumps({"kind": "Node"}))
    with pytest.raises(HistoryError, match=r"expected a v1.NodeList"):
        read_node_list(tmp_path / "nodes.json")


def test_a_scenario_file_is_loaded_by_its_path_with_its_workload_beside_it(tmp_path):
    from td3sched.scenario.schema import SCENARIO_DIR

    (tmp_path / "tiny.yaml").write_text((SCENARIO_DIR / "tiny.yaml").read_text())
    with pytest.raises(ValueError, match=r"has no pods.csv.gz or profiles.npz"):
        load_scenario(str(tmp_path / "tiny.yaml"))
    (tmp_path / "tiny").symlink_to(SCENARIO_DIR / "tiny")
    assert load_scenario(str(tmp_path / "tiny.yaml")).config == {
        **load_scenario("tiny").config,
        "workload": {**load_scenario("tiny").config["workload"], "path": str((tmp_path / "tiny").resolve())}}
    with pytest.raises(ValueError, match=r"scenario file .*missing.yaml: not found"):
        load_scenario(str(tmp_path / "missing.yaml"))


def test_the_spread_varies_pods_by_seed_within_their_limits_and_keeps_the_total():
    from td3sched.scenario.build import spread_usage

    w = load_scenario("tiny").build(1).workload
    horizon = 86400.0
    run_s = np.maximum(np.minimum(w.arrival_s + w.duration_s, horizon) - w.arrival_s, 0.0)
    a, b = (spread_usage(w, 0.8, 0.6, seed, 1.13, 0.71, None, horizon) for seed in (1, 2))
    again = spread_usage(w, 0.8, 0.6, 1, 1.13, 0.71, None, horizon)
    assert np.array_equal(a.size_cpu_milli, again.size_cpu_milli)  # seeded
    assert not np.allclose(a.size_cpu_milli, b.size_cpu_milli) and not np.allclose(a.size_mem_mib, b.size_mem_mib)
    for s in (a, b):
        for size, base in ((s.size_cpu_milli, w.size_cpu_milli), (s.size_mem_mib, w.size_mem_mib)):
            assert (size * run_s).sum() == pytest.approx((base * run_s).sum(), rel=1e-6)
        cap = np.maximum(w.mem_limit_mib / 0.71, w.size_mem_mib)
        assert np.all(s.size_mem_mib <= cap * (1 + 1e-12))
        assert np.all(s.size_cpu_milli <= np.maximum(w.cpu_limit_milli / 1.13, w.size_cpu_milli) * (1 + 1e-12))
        np.testing.assert_allclose(s.size_disk_mbps * w.size_cpu_milli, w.size_disk_mbps * s.size_cpu_milli)
    assert spread_usage(w, 0.0, 0.0, 1) is w
