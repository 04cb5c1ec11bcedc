"""The engine's decision log, written by the real engine service, converts to the history schema:
observation, features, action and the bound node as the engine decided and logged them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")

from td3sched.engine.decision import PodSpec  # noqa: E402
from td3sched.engine.decision_log import DecisionLog  # noqa: E402
from td3sched.lifecycle.engine_log import convert_log  # noqa: E402
from td3sched.lifecycle.history import Decisions, HistoryError, read_history  # noqa: E402

from tests.engine.conftest import make_service, snapshot  # noqa: E402


@pytest.fixture(scope="module")
def actor():
    from td3sched.rl.onnx_actor import load_actor
    from tests.engine.conftest import MODEL

    return load_actor(MODEL)


def test_a_decision_log_becomes_history_with_its_bound_nodes(tmp_path, actor):
    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(6, age_s=[0, 0, 500, 0, 0, 0])
    service, clock = make_service(actor, snap, max_age_s=60, log=log)
    decided = []
    for i in range(5):
        pod = PodSpec(f"web-{i}", namespace="shop", cpu_milli=200 + 100 * i, mem_mib=256)
        decision_id, d = service.score_nodes(pod, list(snap.names))
        decided.append((decision_id, d))
        if i < 3:  # gRPC: the binding names its decision
            service.report_binding(pod, snap.names[i + 3], decision_id)
        elif i == 3:  # the extender path: no decision id, matched by pod
            service.report_binding(pod, "node-1")
        clock.t += 1.0
    log.close()
    path, counts = convert_log(tmp_path / "decisions.jsonl", tmp_path / "history" / "engine.parquet")
    assert counts["decisions"] == 5 and counts["bound"] == 4 and counts["bindings_unmatched"] == 0
    rows = read_history(path.parent).to_pylist()
    assert [r["decision_id"] for r in rows] == [i for i, _ in decided]
    for (decision_id, d), row in zip(decided, rows):
        np.testing.assert_array_equal(np.array(row["observation"], dtype=np.float32), d.observation)
        assert row["model_version"] == actor.version and row["source"] == "engine"
        fresh = [c for c in row["candidates"] if not c["stale"]]
        np.testing.assert_allclose([[c[f] for f in ("u_cpu", "u_mem", "u_io", "u_net")] for c in fresh],
                                   d.utilisation, rtol=0, atol=0)
        assert [c["stale"] for c in row["candidates"]] == [False, False, True, False, False, False]
    assert [r["chosen_node"] for r in rows] == ["node-3", "node-4", "node-5", "node-1", None]
    assert [r["chosen_index"] for r in rows] == [3, 4, 5, 1, None]
    d = Decisions.from_table(read_history(path))
    assert len(d) == 4 and d.dropped == 1 and d.chosen.tolist() == [2, 3, 4, 1]  # indices among fresh candidates


def test_a_missing_log_is_named(tmp_path):
    with pytest.raises(HistoryError, match=r"nope.jsonl: not found"):
        convert_log(tmp_path / "nope.jsonl", tmp_path / "h.parquet")


def test_history_from_log_on_the_command_line(tmp_path, actor):
    from typer.testing import CliRunner

    from td3sched.cli import app

    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(4)
    service, _ = make_service(actor, snap, log=log)
    decision_id, _ = service.score_nodes(PodSpec("web", cpu_milli=100, mem_mib=64), list(snap.names))
    service.report_binding(PodSpec("web", cpu_milli=100, mem_mib=64), "node-2", decision_id)
    log.close()
    result = CliRunner().invoke(app, ["history-from-log", str(tmp_path / "decisions.jsonl"), "--out",
                                      str(tmp_path / "h" / "engine.parquet")])
    assert result.exit_code == 0 and "1 decisions (1 with their bound node" in " ".join(result.output.split())
    assert read_history(tmp_path / "h").column("chosen_node").to_pylist() == ["node-2"]
    bad = CliRunner().invoke(app, ["history-from-log", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x.parquet")])
    assert bad.exit_code == 2 and "missing.jsonl: not found" in " ".join(bad.output.split())
    # --prometheus: a Prometheus that does not answer is named, and nothing is written
    down = CliRunner().invoke(app, ["history-from-log", str(tmp_path / "decisions.jsonl"), "--out",
                                    str(tmp_path / "p" / "engine.parquet"), "--prometheus", "http://127.0.0.1:9"])
    assert down.exit_code == 2 and "http://127.0.0.1:9" in " ".join(down.output.split())
    assert not (tmp_path / "p" / "engine.parquet").exists()


def test_the_pods_of_a_hold_become_rows_with_the_holds_action(tmp_path, actor):
    """The td3score plugin scores a hold's later pods itself and reports their bindings naming the hold's
    decision: each is a row of its own (engine:held, the hold's action, its own pod, time and node; no
    candidates, no observation), even when it arrives before the hold's own pod's binding."""
    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(6, age_s=[0] * 6)
    service, clock = make_service(actor, snap, max_age_s=60, log=log)
    first = PodSpec("web-0", namespace="shop", cpu_milli=300, mem_mib=256)
    hold, d = service.score_nodes(first, list(snap.names))
    later = [PodSpec(f"web-{i}", namespace="shop", cpu_milli=100 * i, mem_mib=128) for i in (1, 2)]
    clock.t += 1.0
    service.report_binding(later[0], "node-2", hold)  # before the hold's own pod's binding
    service.report_binding(first, "node-4", hold)
    clock.t += 1.0
    service.report_binding(later[1], "node-5", hold)
    log.close()
    path, counts = convert_log(tmp_path / "decisions.jsonl", tmp_path / "history" / "engine.parquet")
    assert counts["decisions"] == 1 and counts["bound"] == 1 and counts["held"] == 2
    assert counts["bindings_unmatched"] == 0
    rows = read_history(path.parent).to_pylist()
    assert [r["decision_id"] for r in rows] == [hold, f"{hold}+1", f"{hold}+2"]
    assert [r["policy"] for r in rows] == ["engine", "engine:held", "engine:held"]
    assert [r["pod_name"] for r in rows] == ["web-0", "web-1", "web-2"]
    assert [r["cpu_milli"] for r in rows] == [300.0, 100.0, 200.0]
    assert [r["chosen_node"] for r in rows] == ["node-4", "node-2", "node-5"]
    assert [r["chosen_index"] for r in rows] == [4, None, None]
    assert rows[1]["time_s"] == rows[0]["time_s"] + 1.0 and rows[2]["time_s"] == rows[0]["time_s"] + 2.0
    for r in rows[1:]:
        assert r["candidates"] == [] and r["observation"] is None
        assert r["weights"] == rows[0]["weights"] and r["tau"] == rows[0]["tau"]
        assert r["action"] == rows[0]["action"] and r["model_version"] == actor.version
    assert len(Decisions.from_table(read_history(path))) == 1  # learning reads the decision, not the held rows


def test_a_release_of_the_pod_watch_gives_the_bound_row_its_departure(tmp_path, actor):
    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(3)
    service, clock = make_service(actor, snap, max_age_s=60, log=log)
    pods = [PodSpec(f"job-{i}", namespace="batch", cpu_milli=500, mem_mib=256) for i in range(3)]
    for pod in pods:
        decision_id, _ = service.score_nodes(pod, list(snap.names))
        service.report_binding(pod, "node-1", decision_id)
        clock.t += 10.0
    service.forget_binding("batch", "job-0", "node-1")  # t0 + 30: deleted
    clock.t += 5.0
    service.forget_binding("batch", "job-0", "node-1")  # a second release of it matches no live row
    service.forget_binding("batch", "job-9", "node-2")  # a pod the log never saw bound
    decision_id, _ = service.score_nodes(pods[1], list(snap.names))  # job-1 again, after it left
    service.forget_binding("batch", "job-1", "node-1")
    log.close()
    path, counts = convert_log(tmp_path / "decisions.jsonl", tmp_path / "engine.parquet")
    assert counts["released"] == 2 and counts["releases_unmatched"] == 2
    rows = read_history(path).to_pylist()
    start = rows[0]["time_s"]
    assert [(r["pod_name"], r["outcome_left_s"] and r["outcome_left_s"] - start, r["outcome"]) for r in rows] == [
        ("job-0", 30.0, "departure"), ("job-1", 35.0, "departure"), ("job-2", None, None), ("job-1", None, None)]


def test_the_pod_watchs_kills_reach_the_bound_rows(tmp_path, actor):
    """Kills are known for the rows whose pods the watch saw bound: 0 without a report, the sum of its
    reports, null when a report said unknown; a pod only ReportBinding told of keeps them null."""
    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(3)
    service, clock = make_service(actor, snap, max_age_s=60, log=log)
    pods = [PodSpec(f"web-{i}", namespace="shop", cpu_milli=500, mem_mib=256) for i in range(4)]
    for i, pod in enumerate(pods):
        decision_id, _ = service.score_nodes(pod, list(snap.names))
        service.report_binding(pod, "node-0", decision_id)
        if i < 3:  # web-3: no pod watch saw it
            service.report_binding(pod, "node-0", source="pod_watch")
        clock.t += 10.0
    service.report_kills("shop", "web-0", "node-0", 1)
    clock.t += 1.0
    service.report_kills("shop", "web-0", "node-0", 1)
    service.report_kills("shop", "web-1", "node-0", None)  # restarted twice between two looks
    service.report_kills("shop", "web-3", "node-0", 1)
    service.report_kills("shop", "web-9", "node-0", 1)  # never bound in this log
    log.close()
    path, counts = convert_log(tmp_path / "decisions.jsonl", tmp_path / "engine.parquet")
    assert counts["kills"] == 4 and counts["kills_unmatched"] == 1
    rows = read_history(path).to_pylist()
    assert [(r["pod_name"], r["outcome_kills"]) for r in rows] == [("web-0", 2), ("web-1", None), ("web-2", 0),
                                                                  ("web-3", None)]


def test_the_pod_watchs_creation_times_give_the_bound_rows_their_wait(tmp_path, actor):
    """``wait_s``: from the creation time the pod watch logs with its binding to the decision, whichever of
    the two reports came first; 0 at least; null for a pod only ReportBinding told of."""
    log = DecisionLog(tmp_path / "decisions.jsonl", fsync_interval_s=0.05)
    snap = snapshot(3)
    service, clock = make_service(actor, snap, max_age_s=60, log=log)
    pods = [PodSpec(f"web-{i}", namespace="shop", cpu_milli=500, mem_mib=256) for i in range(4)]
    created = [clock.t + 3.0, clock.t - 7.0, clock.t - 12.5, clock.t]  # web-0: a clock ahead of the engine's
    for i, pod in enumerate(pods):
        decision_id, _ = service.score_nodes(pod, list(snap.names))
        clock.t += 2.0
        if i == 2:  # the pod watch first, then ReportBinding
            service.report_binding(pod, "node-1", source="pod_watch", created_s=created[i] + 20.0 * i)
        service.report_binding(pod, "node-1", decision_id)
        if i < 2:
            service.report_binding(pod, "node-1", source="pod_watch", created_s=created[i] + 20.0 * i)
        clock.t += 18.0
    log.close()
    path, counts = convert_log(tmp_path / "decisions.jsonl", tmp_path / "engine.parquet")
    rows = read_history(path).to_pylist()
    assert [r["chosen_node"] for r in rows] == ["node-1"] * 4
    assert [r["wait_s"] for r in rows] == [0.0, 7.0, 12.5, None]
