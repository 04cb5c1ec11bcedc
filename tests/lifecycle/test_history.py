"""The history schema: rows survive a Parquet round trip exactly; another schema version or a missing
column is refused naming the file; the simulator's recording leaves the run unchanged and records what
the policy scored; the engine's decision log converts to the same schema."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from td3sched.lifecycle.history import (CANDIDATE, COLUMNS, SCHEMA, SCHEMA_VERSION, VERSION_KEY, Decisions,
                                        HistoryError, read_history, write_history)
from td3sched.lifecycle.record import record_simulation
from td3sched.policy.base import RELEASE_REASONS
from td3sched.policy.static_weights import weighted_closeness
from td3sched.run import run_simulation
from td3sched.scenario import load_scenario

SPEC = "static-weights:w=0.5/0.3/0.1/0.1:tau=0.4"

maybe_float = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64))
finite = st.floats(-1e9, 1e9, allow_nan=False)


@st.composite
def rows(draw):
    k = draw(st.integers(1, 5))
    cands = []
    for j in range(k):
        stale = draw(st.booleans())
        u = [None] * 4 if stale else [draw(st.floats(0, 2)) for _ in range(4)]
        r = [draw(st.one_of(st.none(), st.floats(0, 2))) for _ in range(2)]
        cands.append({"node": f"n{j}", "u_cpu": u[0], "u_mem": u[1], "u_io": u[2], "u_net": u[3], "stale": stale,
                      "score": draw(maybe_float), "r_cpu": r[0], "r_mem": r[1],
                      "weight": draw(st.one_of(st.none(), st.floats(1, 1e4)))})
    chosen = draw(st.one_of(st.none(), st.integers(0, k - 1)))
    return {
        "source": draw(st.sampled_from(["simulator", "engine", "import"])), "decision_id": draw(st.text(min_size=1)),
        "time_s": draw(finite), "scenario": draw(st.one_of(st.none(), st.text())),
        "seed": draw(st.one_of(st.none(), st.integers(0, 2**62))), "policy": draw(st.one_of(st.none(), st.text())),
        "pod_name": draw(st.text()), "pod_namespace": draw(st.one_of(st.none(), st.text())),
        "workload": draw(st.one_of(st.none(), st.text())), "qos": draw(st.integers(0, 2)),
        "cpu_milli": draw(finite), "mem_mib": draw(finite), "disk_gib": draw(finite), "rdma_pct": draw(finite),
        "gpu_count": draw(st.integers(0, 8)), "gpu_milli": draw(st.integers(0, 1000)),
        "cpu_limit_milli": draw(maybe_float), "mem_limit_mib": draw(maybe_float),
        "observation": draw(st.one_of(st.none(), st.lists(st.floats(width=32, allow_nan=False), min_size=35,
                                                          max_size=35))),
        "candidates": cands, "chosen_node": None if chosen is None else f"n{chosen}", "chosen_index": chosen,
        "model_version": draw(st.one_of(st.none(), st.text(max_size=12))),
        "action": draw(st.one_of(st.none(), st.lists(finite, min_size=5, max_size=5))),
        "weights": draw(st.one_of(st.none(), st.lists(finite, min_size=4, max_size=4))),
        "tau": draw(maybe_float), "wait_s": draw(maybe_float), "outcome_left_s": draw(maybe_float),
        "outcome": draw(st.one_of(st.none(), st.sampled_from(RELEASE_REASONS))),
        "outcome_kills": draw(st.one_of(st.none(), st.integers(0, 2**31 - 1))),
        "outcome_overload_h": draw(maybe_float), "outcome_slo_h": draw(maybe_float),
        "outcome_node_slo_h": draw(maybe_float), "reward": draw(maybe_float),
        "elapsed_s": draw(maybe_float),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(rows(), min_size=1, max_size=6))
def test_rows_survive_the_parquet_round_trip_exactly(tmp_path, batch):
    batch = sorted(batch, key=lambda r: r["time_s"])  # read_history returns time order (stable)
    path = write_history(tmp_path / "h.parquet", batch)
    back = read_history(path).to_pylist()
    # fewer candidates than a writer keeps: all kept, their total recorded
    assert back == [{"schema_version": SCHEMA_VERSION, **r, "candidates_total": len(r["candidates"])} for r in batch]
    assert list(read_history(path).schema.names) == list(COLUMNS)


def _one_row() -> dict:
    return {"source": "engine", "decision_id": "d0", "time_s": 1.0, "scenario": None, "seed": None, "policy": "engine",
            "pod_name": "p", "pod_namespace": "ns", "workload": None, "qos": 1, "cpu_milli": 100.0, "mem_mib": 64.0,
            "disk_gib": 0.0, "rdma_pct": 0.0, "gpu_count": 0, "gpu_milli": 0, "cpu_limit_milli": None,
            "mem_limit_mib": None, "observation": None,
            "candidates": [{"node": "a", "u_cpu": 0.1, "u_mem": 0.2, "u_io": 0.0, "u_net": 0.0, "stale": False,
                            "score": 50.0, "r_cpu": 0.3, "r_mem": 0.4}],
            "chosen_node": "a", "chosen_index": 0, "model_version": None, "action": None, "weights": None,
            "tau": None, "wait_s": 3.0, "outcome_left_s": None, "outcome": None, "outcome_kills": None,
            "outcome_overload_h": 0.5, "outcome_slo_h": 0.25, "outcome_node_slo_h": 0.75, "reward": None,
            "elapsed_s": None}


V4_COLUMNS = ["wait_s", "outcome_overload_h", "outcome_slo_h"]
"""The columns schema version 4 added: an older file lacks them."""
V5_COLUMNS = ["outcome_node_slo_h"]
"""The column schema version 5 added."""


def _read_as_older(row: dict) -> dict:
    """``row`` as a file older than version 6 reads: its candidates' weight and ``candidates_total`` null."""
    return {**row, "candidates": [{**c, "weight": None} for c in row["candidates"]], "candidates_total": None}


def test_another_schema_version_is_refused_naming_the_file(tmp_path):
    table = pa.Table.from_pylist([{"schema_version": 9, **_one_row()}], schema=SCHEMA)
    path = tmp_path / "v9.parquet"
    pq.write_table(table.replace_schema_metadata({VERSION_KEY: b"9"}), path)
    with pytest.raises(HistoryError, match=rf"v9.parquet: history schema version 9: expected 1 to {SCHEMA_VERSION}"):
        read_history(tmp_path)


def _older(row: dict, version: int, requests: bool = False) -> pa.Table:
    """A file of an older schema version (before 6: its candidates without their weight, no
    ``candidates_total``): its candidates without the requested utilisation, unless ``requests`` (schema
    3 added them)."""
    from td3sched.lifecycle.history import CANDIDATE_V2, CANDIDATE_V5

    old = {**row, "candidates": [{k: v for k, v in c.items() if k != "weight" and (requests or not k.startswith("r_"))}
                                 for c in row["candidates"]]}
    candidate = CANDIDATE_V5 if requests else CANDIDATE_V2
    schema = pa.schema([pa.field("candidates", pa.list_(candidate), nullable=False) if f.name == "candidates" else f
                        for f in SCHEMA if f.name != "candidates_total"])
    table = pa.Table.from_pylist([{"schema_version": version, **old}], schema=schema)
    if version < 4:
        table = table.drop_columns(V4_COLUMNS)
    if version < 5:
        table = table.drop_columns(V5_COLUMNS)
    return table.replace_schema_metadata({VERSION_KEY: str(version).encode()})


def test_a_version_3_file_reads_with_the_pods_life_null(tmp_path):
    """Histories written before the wait and the outcome's overload and SLO hours (schema 3) still read,
    with those columns null; a version 4 file must have them."""
    row = _one_row()
    v3 = _older(row, 3, requests=True)
    pq.write_table(v3, tmp_path / "v3.parquet")
    back = read_history(tmp_path / "v3.parquet").to_pylist()
    assert back == [{"schema_version": 3, **_read_as_older(row), **dict.fromkeys(V4_COLUMNS + V5_COLUMNS)}]
    v4 = v3.replace_schema_metadata({VERSION_KEY: b"4"})
    pq.write_table(v4, tmp_path / "v4.parquet")
    with pytest.raises(HistoryError, match=r"v4.parquet: column 'wait_s' missing"):
        read_history(tmp_path / "v4.parquet")


def test_a_version_4_file_reads_with_the_neighbours_hours_null(tmp_path):
    """Histories written before the hours a pod's neighbours spent above their SLO (schema 4) still read,
    with that column null; a version 5 file must have it."""
    row = _one_row()
    v4 = _older(row, 4, requests=True)
    pq.write_table(v4, tmp_path / "v4.parquet")
    assert read_history(tmp_path / "v4.parquet").to_pylist() == [{"schema_version": 4, **_read_as_older(row),
                                                                  "outcome_node_slo_h": None}]
    pq.write_table(v4.replace_schema_metadata({VERSION_KEY: b"5"}), tmp_path / "v5.parquet")
    with pytest.raises(HistoryError, match=r"v5.parquet: column 'outcome_node_slo_h' missing"):
        read_history(tmp_path / "v5.parquet")


def test_a_version_5_file_reads_as_keeping_every_candidate(tmp_path):
    """Histories written before candidates were sampled (schema 5) still read, each candidate standing for
    itself (its weight null, which reads as 1) and ``candidates_total`` null; a version 6 file must have
    them."""
    row = _one_row()
    v5 = _older(row, 5, requests=True)
    pq.write_table(v5, tmp_path / "v5.parquet")
    assert read_history(tmp_path / "v5.parquet").to_pylist() == [{"schema_version": 5, **_read_as_older(row)}]
    pq.write_table(v5.replace_schema_metadata({VERSION_KEY: b"6"}), tmp_path / "v6.parquet")
    with pytest.raises(HistoryError, match=r"v6.parquet: column 'candidates' is list<.*expected list<.*weight"):
        read_history(tmp_path / "v6.parquet")


def test_a_version_1_file_reads_with_the_later_columns_null(tmp_path):
    """Histories written before the outcome columns (schema 1) still read; those columns are null, and
    so are the candidates' requested utilisation (added in schema 3)."""
    row = {**_one_row(), "outcome_left_s": 5.0}
    v1 = _older(row, 1).drop_columns(["outcome", "outcome_kills"])
    pq.write_table(v1, tmp_path / "v1.parquet")
    back = read_history(tmp_path).to_pylist()
    expected = {**_read_as_older(row), **dict.fromkeys(V4_COLUMNS + V5_COLUMNS)}
    expected["candidates"] = [{**c, "r_cpu": None, "r_mem": None} for c in expected["candidates"]]
    assert back == [{"schema_version": 1, **expected}]
    assert back[0]["outcome"] is None and back[0]["outcome_kills"] is None
    d = Decisions.from_table(read_history(tmp_path).set_column(
        COLUMNS.index("observation"), "observation", pa.array([[0.0] * 35], pa.list_(pa.float32()))))
    assert np.isnan(d.r).all()
    with pytest.raises(HistoryError, match=r"lack their requested utilisation \(r_cpu, r_mem\)"):
        d.require_requests()
    # a version 2 file must have them
    v2 = _older(row, 2).drop_columns(["outcome_kills"])
    pq.write_table(v2, tmp_path / "v2.parquet")
    with pytest.raises(HistoryError, match=r"v2.parquet: column 'outcome_kills' missing"):
        read_history(tmp_path / "v2.parquet")


def test_a_version_2_file_reads_its_candidates_with_null_requests(tmp_path):
    row = _one_row()
    pq.write_table(_older(row, 2), tmp_path / "v2.parquet")
    back = read_history(tmp_path / "v2.parquet").to_pylist()
    assert back[0]["candidates"] == [{**c, "r_cpu": None, "r_mem": None, "weight": None} for c in row["candidates"]]
    # a version 3 file must have them
    pq.write_table(_older(row, 3), tmp_path / "v3.parquet")
    with pytest.raises(HistoryError, match=r"v3.parquet: column 'candidates' is list<.*expected list<"):
        read_history(tmp_path / "v3.parquet")


def test_a_missing_column_is_refused_naming_it(tmp_path):
    table = pa.Table.from_pylist([{"schema_version": 3, **_one_row()}], schema=SCHEMA).drop_columns(["chosen_node"])
    pq.write_table(table, tmp_path / "cut.parquet")
    with pytest.raises(HistoryError, match=r"cut.parquet: column 'chosen_node' missing"):
        read_history(tmp_path / "cut.parquet")


def test_a_chosen_index_that_names_another_node_is_refused(tmp_path):
    row = {**_one_row(), "chosen_node": "b"}
    with pytest.raises(HistoryError, match=r"chosen_index 0 does not name chosen_node 'b'"):
        write_history(tmp_path / "bad.parquet", [row])
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_the_simulators_recording_changes_nothing_and_records_what_was_scored(tmp_path):
    plain = run_simulation("tiny", SPEC, 1, "test")
    record, path, n = record_simulation("tiny", SPEC, 1, "test", tmp_path)
    assert record["metrics"] == plain["metrics"]  # the run is the wrapped policy's, bit for bit
    table = read_history(tmp_path)
    assert table.num_rows == n > 100 and path.parent == tmp_path
    w, tau = np.array([0.5, 0.3, 0.1, 0.1]), 0.4
    for row in table.to_pylist():
        u = np.array([[c[f] for f in ("u_cpu", "u_mem", "u_io", "u_net")] for c in row["candidates"]])
        scores = np.array([c["score"] for c in row["candidates"]])
        np.testing.assert_array_equal(scores, weighted_closeness(u, w, tau))  # the features the policy scored
        assert row["weights"] == w.tolist() and row["tau"] == tau and row["policy"] == SPEC
        assert scores[row["chosen_index"]] == scores.max()  # ties broken at random among the best
        assert len(row["observation"]) == 35 and row["candidates"][row["chosen_index"]]["node"] == row["chosen_node"]
        assert row["outcome_left_s"] is None or row["outcome_left_s"] >= row["time_s"]
    d = Decisions.from_table(table)
    assert len(d) == n and d.dropped == 0 and d.offsets[-1] == len(d.u)
    # the rewards are the run's: the measured decisions' sum to its episode reward (no cycle is held
    # back by static-weights without a ceiling), the warm-up's are null
    rewards = [r["reward"] for r in table.to_pylist() if r["reward"] is not None]
    assert 100 < len(rewards) < n and math.isclose(sum(rewards), record["metrics"]["episode_reward"], rel_tol=1e-9)
    measured = [r for r in table.to_pylist() if r["reward"] is not None]
    assert all(r["elapsed_s"] >= 0 for r in measured)
    assert max(r["time_s"] + r["elapsed_s"] for r in measured) == record["span"]["end_s"]


def test_a_k8s_default_history_records_its_own_scores_and_the_product_features(tmp_path):
    _, _, n = record_simulation("tiny", "k8s-default", 1, "test", tmp_path)
    table = read_history(tmp_path)
    row = table.slice(0, 1).to_pylist()[0]
    assert row["weights"] is None and row["tau"] is None and row["policy"] == "k8s-default"
    assert all(0 <= c["score"] <= 200 and not math.isnan(c["u_cpu"]) for c in row["candidates"])
    # the requested utilisation is what kube-scheduler's LeastAllocated reads: a node requested more
    # scores lower, so a decision's best LeastAllocated node is the one of the least requests
    d = Decisions.from_table(table)
    d.require_requests()
    assert np.all(d.r > 0)
    for row in table.slice(0, 50).to_pylist():
        cands = row["candidates"]
        least = min(range(len(cands)), key=lambda j: cands[j]["r_cpu"] + cands[j]["r_mem"])
        most = max(range(len(cands)), key=lambda j: cands[j]["r_cpu"] + cands[j]["r_mem"])
        if cands[most]["r_cpu"] > cands[least]["r_cpu"] + 0.05 and cands[most]["r_mem"] > cands[least]["r_mem"] + 0.05:
            assert cands[least]["score"] > cands[most]["score"]


def test_a_recorded_run_frees_its_world(tmp_path):
    """The recorder holds the world's pod names, not the world: only reference counting frees it."""
    import gc

    from td3sched.simulator.engine import Simulation, World

    def alive() -> tuple[int, int]:
        # type(), not isinstance(): isinstance asks a dead weak proxy among the objects for its class
        types = [type(o) for o in gc.get_objects()]
        return sum(issubclass(t, Simulation) for t in types), sum(issubclass(t, World) for t in types)

    gc.collect()
    before = alive()
    gc.disable()
    try:
        record_simulation("tiny", SPEC, 1, "test", tmp_path)
        after = alive()
    finally:
        gc.enable()
    assert after == before


def _decisions_by_rows(table):
    """The plain reading of Decisions (one Python object per candidate): the vectorised one must agree."""
    obs, us, rs, ss, offsets, chosen, times, dropped = [], [], [], [], [0], [], [], 0
    for row in table.to_pylist():
        i, cands = row["chosen_index"], row["candidates"]
        if row["observation"] is None or i is None or cands[i]["stale"] or cands[i]["u_cpu"] is None:
            dropped += 1
            continue
        fresh = [not c["stale"] and c["u_cpu"] is not None for c in cands]
        obs.append(row["observation"])
        us.extend([c[f] for f in ("u_cpu", "u_mem", "u_io", "u_net")] for c, ok in zip(cands, fresh) if ok)
        rs.extend([math.nan if c[f] is None else c[f] for f in ("r_cpu", "r_mem")] for c, ok in zip(cands, fresh) if ok)
        ss.extend(math.nan if c["score"] is None or row["source"] == "import" else c["score"]
                  for c, ok in zip(cands, fresh) if ok)
        chosen.append(sum(fresh[:i]))
        offsets.append(offsets[-1] + sum(fresh))
        times.append(row["time_s"])
    return (np.asarray(obs, dtype=np.float32).reshape(-1, 35), np.asarray(us, dtype=np.float64).reshape(-1, 4),
            np.asarray(rs, dtype=np.float64).reshape(-1, 2), np.asarray(ss, dtype=np.float64), np.asarray(offsets),
            np.asarray(chosen),
            np.asarray(times), dropped)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(rows(), min_size=1, max_size=8))
def test_the_vectorised_reading_of_decisions_is_the_plain_one(tmp_path, batch):
    for row in batch:  # stale candidates carry no features; the chosen one sometimes is stale
        for c in row["candidates"]:
            if c["u_cpu"] is None:
                c["stale"] = True
    table = read_history(write_history(tmp_path / "h.parquet", batch))
    obs, u, r, scores, offsets, chosen, times, dropped = _decisions_by_rows(table)
    if len(chosen) == 0:
        with pytest.raises(HistoryError, match="none to learn from"):
            Decisions.from_table(table)
        return
    d = Decisions.from_table(table)
    np.testing.assert_array_equal(d.obs, obs)
    np.testing.assert_array_equal(d.u, u)
    np.testing.assert_array_equal(d.r, r)
    np.testing.assert_array_equal(d.scores, scores)
    sub = np.arange(len(d))[::2]
    part = d.subset(sub)
    assert part.u.shape[0] == part.r.shape[0] == part.offsets[-1]
    np.testing.assert_array_equal(part.r, np.concatenate([d.r[d.offsets[i]:d.offsets[i + 1]] for i in sub]))
    np.testing.assert_array_equal(part.scores, np.concatenate([d.scores[d.offsets[i]:d.offsets[i + 1]] for i in sub]))
    assert d.offsets.tolist() == offsets.tolist() and d.chosen.tolist() == chosen.tolist()
    assert d.time_s.tolist() == times.tolist() and d.dropped == dropped


def test_outcomes_are_the_event_logs_releases_and_kills(tmp_path):
    """Each recorded placement's outcome (how the pod left, its container's kills and the ticks its node
    spent over the objective's overload threshold while it was there) and its wait are what the run's
    event log says happened: from the pod's arrival (or its eviction) to the placement, and from the
    placement to the pod's release. Memory at 0.9 of the pods' size kills containers; tiny's autoscaler
    drains nodes; CPU at twice the profiles' overloads nodes."""
    events = tmp_path / "events.jsonl"
    _, _, n = record_simulation("tiny", SPEC, 1, "test", tmp_path / "h",
                                overrides=["simulator.mem_level=0.9", "simulator.usage_scale=2.0"],
                                events_path=events, events_detail=True)
    tick_h = 60.0 / 3600.0  # tiny's tick
    episodes = {}  # (pod, placement time) -> [node, outcome, kills, overloaded ticks, wait]
    current, early, queued, alloc = {}, {}, {}, {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        kind = e["event"]
        if "allocatable" in e:
            alloc[e["index"]] = (e["node"], e["allocatable"][0])
        elif kind == "tick":
            hot = {alloc[i][0] for i, cpu in zip(e["nodes"], e["cpu_milli"]) if cpu > 0.85 * alloc[i][1]}
            for episode in current.values():
                episode[3] += episode[0] in hot
        elif kind == "arrival":
            queued[e["pod"]] = e["t"]
        elif kind == "placement":
            t, k = early.pop(e["pod"], (e["t"], 0))
            wait = e["t"] - queued[e["pod"]] if e["pod"] in queued else None
            current[e["pod"]] = episodes[e["pod"], e["t"]] = [e["node"], None, k if t == e["t"] else 0, 0, wait]
        elif kind in ("container_oom", "oom_kill") and e["pod"] in current:
            current[e["pod"]][2] += 1
        elif kind == "container_oom":  # killed by its bind (over its limit at once): logged before the placement
            early[e["pod"]] = (e["t"], early.get(e["pod"], (e["t"], 0))[1] + 1)
        elif kind in ("departure", "eviction") and e["pod"] in current:
            current.pop(e["pod"])[1] = "departure" if kind == "departure" else f"evicted:{e['reason']}"
            if kind == "eviction":  # its controller recreates it at once: it waits from now
                queued[e["pod"]] = e["t"]
    # the log starts with the measured span; the recorder also records the warm-up's placements
    rows = [r for r in read_history(tmp_path / "h").to_pylist() if (r["pod_name"], round(r["time_s"], 3)) in episodes]
    assert len(rows) > n / 2
    matched = 0
    for row in rows:
        node, outcome, kills, hot, wait = episodes[row["pod_name"], round(row["time_s"], 3)]
        assert row["chosen_node"] == node and row["outcome"] == outcome
        if wait is not None:
            assert row["wait_s"] == pytest.approx(wait, abs=2e-3)  # the log's times are rounded to the millisecond
        # a pod still on its node when the run ended has no release, and its counts so far
        assert row["outcome_kills"] == kills and row["outcome_overload_h"] == pytest.approx(hot * tick_h)
        assert row["outcome_slo_h"] >= 0.0
        if outcome is None:
            assert row["outcome_left_s"] is None
        else:
            assert row["outcome_left_s"] >= row["time_s"]
            matched += 1
    outcomes = {r["outcome"] for r in rows}
    assert matched > 100 and {"departure", "evicted:scale_down"} <= outcomes
    assert sum(r["outcome_kills"] or 0 for r in rows) > 10  # not vacuous: kills were attributed
    assert sum(r["outcome_overload_h"] or 0 for r in rows) > 10 * tick_h  # ... and overloaded ticks


def test_a_pods_wait_is_the_event_logs_time_from_its_arrival_to_its_placement(tmp_path):
    """``wait_s``: from the pod's arrival to the placement, in a cluster that starts with 6 nodes and
    scales up (pods wait for the new nodes) with no warm-up (the event log has every arrival)."""
    events = tmp_path / "events.jsonl"
    record_simulation("tiny", SPEC, 1, "test", tmp_path / "h", events_path=events,
                      overrides=["nodes.pools.cpu.count=4", "nodes.pools.gpu.count=2", "simulator.warmup_days=0"])
    arrived, waits = {}, {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e["event"] in ("arrival", "eviction"):  # an evicted pod is recreated at once and waits from then
            arrived[e["pod"]] = e["t"]
        elif e["event"] == "placement":
            waits[e["pod"], e["t"]] = e["t"] - arrived[e["pod"]]
    rows = read_history(tmp_path / "h").to_pylist()
    assert len(rows) == len(waits)
    for row in rows:
        assert row["wait_s"] == pytest.approx(waits[row["pod_name"], round(row["time_s"], 3)], abs=2e-3)
    assert sum(r["wait_s"] > 60 for r in rows) > 10  # not vacuous: pods waited for nodes


def test_a_pods_hours_above_its_slo_are_its_own_and_add_up_to_at_most_the_runs(tmp_path):
    """``outcome_slo_h``: latency-sensitive pods only, never more than the time the pod was on its node,
    and summed over every placement, the run's own hours above the SLO but those of pods waiting to be
    scheduled (served at the cap, on no node); CPU at twice the profiles' drives latency over the
    SLO. Without a warm-up every placement is the measured span's."""
    record, _, _ = record_simulation("tiny", SPEC, 1, "test", tmp_path / "h", overrides=["simulator.usage_scale=2.0",
                                                                                       "simulator.warmup_days=0"])
    rows = read_history(tmp_path / "h").to_pylist()
    world = load_scenario("tiny").build(1).workload
    ls = dict(zip(world.name, world.latency_sensitive))
    above = [r for r in rows if r["outcome_slo_h"] > 0]
    assert above and all(ls[r["pod_name"]] for r in above)
    end_s = record["span"]["end_s"]
    for r in rows:
        left = r["outcome_left_s"] if r["outcome_left_s"] is not None else end_s
        assert r["outcome_slo_h"] <= (left - r["time_s"]) / 3600.0 + 1 / 60
    total = sum(r["outcome_slo_h"] for r in rows)
    assert 0 < total <= record["metrics"]["latency_breach_hours"] + 1e-9


def test_a_pods_share_of_its_nodes_tail_holds_its_own_hours_and_at_most_the_nodes(tmp_path):
    """``outcome_node_slo_h``: the hours the latency-sensitive pods on the pod's node spent above their SLO
    while it was there: at least its own, at most what every latency-sensitive pod the node ever held
    spent there, and not only latency-sensitive pods'."""
    record_simulation("tiny", SPEC, 1, "test", tmp_path / "h", overrides=["simulator.usage_scale=2.0",
                                                                        "simulator.warmup_days=0"])
    rows = read_history(tmp_path / "h").to_pylist()
    ls = dict(zip(*(lambda w: (w.name, w.latency_sensitive))(load_scenario("tiny").build(1).workload)))
    node_total: dict[str, float] = {}
    for r in rows:
        node_total[r["chosen_node"]] = node_total.get(r["chosen_node"], 0.0) + r["outcome_slo_h"]
    for r in rows:
        assert r["outcome_slo_h"] - 1e-9 <= r["outcome_node_slo_h"] <= node_total[r["chosen_node"]] + 1e-9
    neighbours = [r for r in rows if not ls[r["pod_name"]] and r["outcome_node_slo_h"] > 0]
    assert neighbours  # not vacuous: pods that are not latency-sensitive shared hot nodes
    assert any(r["outcome_node_slo_h"] > r["outcome_slo_h"] + 1e-9 for r in rows if ls[r["pod_name"]])


def test_some_columns_read_as_the_whole_history_orders_them(tmp_path):
    rows = [{**_one_row(), "decision_id": f"d{i}", "time_s": t, "pod_name": f"p{i}"} for i, t in enumerate([3.0, 1.0, 2.0])]
    write_history(tmp_path / "a.parquet", rows[:2])
    write_history(tmp_path / "b.parquet", rows[2:])
    whole = read_history(tmp_path)
    some = read_history(tmp_path, ["pod_name", "source"])
    assert some.schema.names == ["pod_name", "source", "time_s"]
    assert some.to_pylist() == whole.select(["pod_name", "source", "time_s"]).to_pylist()
    assert some.column("pod_name").to_pylist() == ["p1", "p2", "p0"]
    with pytest.raises(ValueError, match=r"history columns \['nosuch'\]: expected some of schema_version"):
        read_history(tmp_path, ["nosuch"])


def test_a_writer_writes_a_row_group_once_it_holds_enough_candidates(tmp_path):
    """Rows of many candidates (a decision over thousands of nodes) are written in groups bounded by
    their candidates, not only by their number, so the writer's buffer stays small; the file reads the
    same."""
    from td3sched.lifecycle.history import HistoryWriter

    row = _one_row()
    wide = {**row, "candidates": [{**row["candidates"][0], "node": f"n{j}"} for j in range(100)], "chosen_node": "n0"}
    writer = HistoryWriter(tmp_path / "h.parquet", rows_per_group=1000, candidates_per_group=250)
    for i in range(7):
        writer.append({**wide, "decision_id": f"d{i}", "time_s": float(i)})
    writer.close()
    assert pq.ParquetFile(tmp_path / "h.parquet").metadata.num_row_groups == 3  # 3 rows (300 candidates) a group
    back = read_history(tmp_path / "h.parquet").to_pylist()
    assert [r["decision_id"] for r in back] == [f"d{i}" for i in range(7)] and len(back[0]["candidates"]) == 100


def test_the_recorder_holds_candidates_as_arrays_and_writes_them_as_records(tmp_path):
    """A row waits for its pod to leave; its candidates wait as arrays (``CandidateArrays``), made into
    the schema's records only when written: the same records, with their weights."""
    from td3sched.lifecycle.history import CandidateArrays

    names = np.array(["a", "b", "c"], dtype=object)
    arrays = CandidateArrays(names, np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.0, 0.1, 0.0, 0.1]]),
                             np.array([0.9, 0.1, 0.5]), np.array([[0.2, 0.3], [0.4, 0.5], [0.1, 0.1]]))
    assert [c["weight"] for c in arrays.rows()] == [None, None, None]  # all kept: each stands for itself
    kept = arrays.take(np.array([0, 2]), np.array([1.0, 2.0]))
    assert kept.rows() == [
        {"node": "a", "u_cpu": 0.1, "u_mem": 0.2, "u_io": 0.3, "u_net": 0.4, "stale": False, "score": 0.9,
         "r_cpu": 0.2, "r_mem": 0.3, "weight": 1.0},
        {"node": "c", "u_cpu": 0.0, "u_mem": 0.1, "u_io": 0.0, "u_net": 0.1, "stale": False, "score": 0.5,
         "r_cpu": 0.1, "r_mem": 0.1, "weight": 2.0}]
    assert all(type(v) in (str, float, bool) for c in kept.rows() for v in c.values())
    write_history(tmp_path / "h.parquet", [{**_one_row(), "candidates": arrays, "chosen_index": 1, "chosen_node": "b"}])
    back = read_history(tmp_path / "h.parquet").to_pylist()[0]
    assert [c["node"] for c in back["candidates"]] == ["a", "b", "c"] and back["candidates_total"] == 3

def test_candidates_held_as_arrays_are_written_as_the_records_they_stand_for(tmp_path):
    """A writer builds the candidates column of a recorder's rows from their arrays whole: the file
    reads back as the same rows written as records (an unknown score, float32 utilisation, kept whole
    and sampled rows), and a group that mixes both kinds of rows writes them alike."""
    from td3sched.lifecycle.history import CandidateArrays

    rng = np.random.default_rng(5)
    rows = []
    for i in range(6):
        k = int(rng.integers(1, 9))
        scores = rng.random(k)
        scores[0] = np.nan
        arrays = CandidateArrays(np.array([f"node-{j}" for j in range(k)]), rng.random((k, 4)).astype(np.float32),
                                 scores, rng.random((k, 2)))
        if i % 2:
            arrays = arrays.take(np.arange(k), rng.random(k) + 1.0)
        rows.append({**_one_row(), "decision_id": f"d{i}", "time_s": float(i), "candidates": arrays,
                     "chosen_index": k - 1, "chosen_node": f"node-{k - 1}"})
    as_records = [{**row, "candidates": row["candidates"].rows()} for row in rows]
    for name, written in (("arrays", rows), ("records", as_records), ("mixed", [*rows[:3], *as_records[3:]])):
        write_history(tmp_path / f"{name}.parquet", written)
    back = {name: read_history(tmp_path / f"{name}.parquet") for name in ("arrays", "records", "mixed")}
    assert back["arrays"].schema == back["records"].schema
    text = {name: repr(table.to_pylist()) for name, table in back.items()}  # NaN scores compare as text
    assert text["arrays"] == text["records"] == text["mixed"]
    assert back["arrays"].to_pylist()[1]["candidates"][0]["weight"] is not None
    assert back["arrays"].to_pylist()[0]["candidates"][0]["weight"] is None


def test_a_sample_keeps_the_chosen_node_the_best_scored_and_a_weighted_uniform_rest():
    from td3sched.lifecycle.history import sample_candidates

    rng = np.random.default_rng(7)
    scores = rng.random(1000)
    scores[[3, 500]] = np.nan  # unknown scores are never among the best
    chosen = int(np.argsort(scores[:900])[10])  # a poorly scored choice: kept all the same
    idx, weight = sample_candidates(scores, chosen, 100, np.random.default_rng(1))
    assert len(idx) == 100 and np.all(np.diff(idx) > 0)
    others = np.setdiff1d(np.flatnonzero(~np.isnan(scores)), [chosen])
    best = others[np.argsort(-scores[others])[:50]]
    sure = np.concatenate([[chosen], best])
    assert set(sure) <= set(idx.tolist())
    assert np.all(weight[np.isin(idx, sure)] == 1.0)
    rest = weight[~np.isin(idx, sure)]
    assert len(rest) == 49 and np.all(rest == (1000 - 51) / 49)
    assert weight.sum() == pytest.approx(1000)  # the weights stand for every candidate once
    again = sample_candidates(scores, chosen, 100, np.random.default_rng(1))
    np.testing.assert_array_equal(again[0], idx)
    assert sample_candidates(scores, chosen, 1000, np.random.default_rng(1)) is None  # no more than kept: all
    assert sample_candidates(scores, chosen, 0, np.random.default_rng(1)) is None  # 0: all
    # no chosen node, no scores: a uniform sample, each standing for ten
    idx, weight = sample_candidates(np.full(1000, np.nan), None, 100, np.random.default_rng(2))
    assert len(idx) == 100 and np.all(weight == 10.0)
    # the fewest kept, 2: the chosen one and one drawn from all the rest, standing for them
    idx, weight = sample_candidates(scores, chosen, 2, np.random.default_rng(3))
    assert chosen in idx and sorted(weight.tolist()) == [1.0, 999.0]


def test_a_weighted_sum_over_the_kept_candidates_estimates_the_sum_over_all_without_bias():
    """What rebuild's usage sums and BC's sampled softmax rely on: over many draws, the weighted sum of
    a quantity over the kept candidates averages to its sum over all of them (here a quantity that
    correlates with the score, the hard case for a sample that keeps the best)."""
    from td3sched.lifecycle.history import sample_candidates

    rng = np.random.default_rng(3)
    scores = rng.random(800)
    x = np.exp(3 * scores) + rng.random(800)
    sums = []
    for k in range(400):
        idx, weight = sample_candidates(scores, 5, 60, np.random.default_rng(k))
        sums.append(weight @ x[idx])
    sums = np.array(sums)
    assert abs(sums.mean() - x.sum()) < 4 * sums.std() / np.sqrt(len(sums)), (sums.mean(), x.sum())
    assert sums.std() > 0  # a sample, not the whole


def test_a_writer_keeps_at_most_its_candidates_and_the_file_is_the_same_each_time(tmp_path):
    rng = np.random.default_rng(0)
    cands = [{"node": f"n{j}", "u_cpu": float(rng.random()), "u_mem": 0.5, "u_io": 0.0, "u_net": 0.0, "stale": False,
              "score": float(rng.random()), "r_cpu": 0.1, "r_mem": 0.1} for j in range(1000)]
    row = {**_one_row(), "candidates": cands, "chosen_index": 777, "chosen_node": "n777"}
    write_history(tmp_path / "a.parquet", [row, {**row, "decision_id": "d1"}])
    back = read_history(tmp_path / "a.parquet").to_pylist()
    for r in back:
        assert len(r["candidates"]) == 100 and r["candidates_total"] == 1000
        assert r["candidates"][r["chosen_index"]]["node"] == "n777"
        assert sum(c["weight"] for c in r["candidates"]) == pytest.approx(1000)
    # drawn from the decision's id: two decisions keep different samples, a decision the same one each time
    assert [c["node"] for c in back[0]["candidates"]] != [c["node"] for c in back[1]["candidates"]]
    write_history(tmp_path / "b.parquet", [row])
    assert read_history(tmp_path / "b.parquet").to_pylist()[0] == back[0]
    write_history(tmp_path / "all.parquet", [row], candidates=0)
    assert len(read_history(tmp_path / "all.parquet").to_pylist()[0]["candidates"]) == 1000
    for bad in (1, -1, 2.5, True):
        with pytest.raises(ValueError, match=rf"candidates kept per decision {bad!r}: expected 0 \(all\) or a whole"):
            write_history(tmp_path / "bad.parquet", [row], candidates=bad)


def test_a_recording_with_few_candidates_keeps_a_sample_of_the_full_recordings(tmp_path):
    """The same run recorded whole and with at most 4 candidates a decision: the same decisions, each
    keeping its chosen node and a subset of the whole recording's candidates with the same features."""
    full_record, _, n = record_simulation("tiny", SPEC, 1, "test", tmp_path / "full", candidates=0)
    few_record, _, m = record_simulation("tiny", SPEC, 1, "test", tmp_path / "few", candidates=4)
    assert few_record["metrics"] == full_record["metrics"] and m == n
    full, few = read_history(tmp_path / "full").to_pylist(), read_history(tmp_path / "few").to_pylist()
    sampled = 0
    for a, b in zip(full, few):
        assert a["decision_id"] == b["decision_id"] and b["candidates_total"] == len(a["candidates"])
        assert b["chosen_node"] == a["chosen_node"] and b["candidates"][b["chosen_index"]]["node"] == b["chosen_node"]
        whole = {c["node"]: c for c in a["candidates"]}
        assert len(b["candidates"]) == min(4, len(whole))
        for c in b["candidates"]:
            assert {k: v for k, v in c.items() if k != "weight"} == {k: v for k, v in whole[c["node"]].items()
                                                                     if k != "weight"}
        sampled += len(whole) > 4
    assert sampled > n // 2  # tiny's decisions have some 13 candidates: most were sampled


def test_the_cli_keeps_the_candidates_asked_for_and_refuses_a_bad_count(tmp_path):
    from typer.testing import CliRunner

    from td3sched.cli import HISTORY_CANDIDATES_HELP, app
    from td3sched.lifecycle.history import DEFAULT_CANDIDATES

    assert f"Default {DEFAULT_CANDIDATES}," in HISTORY_CANDIDATES_HELP  # the help says the writer's default
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", "--policy", SPEC, "--no-progress", "--record-history", str(tmp_path / "h"),
                                 "--history-candidates", "3"])
    assert result.exit_code == 0, result.output
    table = read_history(tmp_path / "h")
    assert max(len(c) for c in table.column("candidates").to_pylist()) == 3
    assert max(table.column("candidates_total").to_pylist()) > 3
    result = runner.invoke(app, ["simulate", "--policy", SPEC, "--no-progress", "--record-history", str(tmp_path / "b"),
                                 "--history-candidates", "1"])
    assert result.exit_code != 0 and "candidates kept per decision 1: expected 0 (all) or a whole number >= 2" in \
        " ".join(result.output.split()), result.output


def test_a_recording_without_the_warm_up_keeps_the_measured_decisions_alone(tmp_path):
    _, _, n = record_simulation("tiny", SPEC, 1, "test", tmp_path / "all")
    record, _, m = record_simulation("tiny", SPEC, 1, "test", tmp_path / "measured", warmup=False)
    every = read_history(tmp_path / "all").to_pylist()
    measured = read_history(tmp_path / "measured").to_pylist()
    start = record["span"]["measured_from_s"]
    assert 0 < m < n and m == len(measured) == sum(r["time_s"] >= start for r in every)
    strip = ("decision_id",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in measured] == \
        [{k: v for k, v in r.items() if k not in strip} for r in every if r["time_s"] >= start]
