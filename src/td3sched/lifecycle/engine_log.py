"""The engine's decision log (``engine.decision_log``, schema 1) as scheduling history.

Each ``decision`` record becomes one row; its chosen node comes from the ``binding`` record that
names the same ``decision_id`` (gRPC ReportBinding carries it), or, for a binding without one (the
HTTP extender path), from the pod's latest decision before the binding that has no binding yet
(pods matched by namespace and name). A decision never bound keeps ``chosen_node`` null (the pod
was bound elsewhere unseen, or not yet): learning skips it. A bound node that was no candidate of
the decision keeps ``chosen_index`` null.

A model that holds its action (``action_hold_s``) is asked once a hold: the td3score plugin scores the
hold's later pods itself and reports their bindings naming the hold's decision. Each such binding (it
names a decision of another pod) becomes a row of its own, ``policy`` ``engine:held``, with the
hold's model version, action, weights and tau, the binding's pod, time and node, and decision id
``<the hold's id>+<n>`` (n = 1, 2, ... within the hold). The engine saw neither its candidates nor its
state: ``candidates`` is empty and ``observation`` null, so behaviour cloning skips these rows; they
say which action placed which pod where.

Columns from the log: time (Unix seconds), pod, observation, action, weights, tau, model version,
candidates (score 0-100 as logged, ``u`` with the pod included, null when stale; ``r`` the requested
utilisation, null when the engine did not know the requests). ``policy`` is
``engine`` (``engine:fallback:<reason>`` for a fallback decision). A ``release`` record (the pod
watch saw the pod deleted or finished, or found it gone on a relist) sets ``outcome_left_s`` of the
pod's latest bound row before it that has none, with ``outcome`` ``departure``; without a pod watch
there is none. ``outcome_kills`` of a row whose pod's binding the pod watch saw is the OOM kills its
``kills`` records reported for that row (the pod's latest bound row before each; 0 without one, null
when a record said unknown), so far for a pod still running; without a pod watch it is null, as are
``reward`` and ``elapsed_s``. ``wait_s`` of a bound row is the time from the pod's creation, which the pod
watch's binding records carry (``created_s``), to the decision; null for a binding only ReportBinding or
the extender told of. The engine does not see its node's overload over the pod's life or its latency:
``outcome_overload_h``, ``outcome_slo_h`` and ``outcome_node_slo_h`` are null; ``convert_log``'s
``outcomes`` (``history-from-log --prometheus``) fills the overload hours from Prometheus' range queries.

A log is the file and its rotated files (``.N`` ... ``.1``, oldest first, then the file): all read.
Records cut by a crash are skipped and counted.
"""

from __future__ import annotations

import math
from pathlib import Path

from td3sched.engine.decision_log import SCHEMA_VERSION as LOG_SCHEMA, read_log
from td3sched.lifecycle.history import HistoryError

LOG_POD_FIELDS = ("name", "cpu_milli", "mem_mib", "disk_gib", "rdma_pct", "gpu_count", "gpu_milli", "qos")


def log_files(path) -> list[Path]:
    """The log's rotated files, oldest first, then the log itself."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"decision log {path}: not found: expected the engine's decision_log.path")
    rotated = []
    i = 1
    while path.with_name(f"{path.name}.{i}").is_file():
        rotated.append(path.with_name(f"{path.name}.{i}"))
        i += 1
    return [*reversed(rotated), path]


def _pod(record: dict, where: str) -> dict:
    pod = record.get("pod")
    if not isinstance(pod, dict) or any(k not in pod for k in LOG_POD_FIELDS):
        raise HistoryError(f"{where}: decision {record.get('decision_id')!r}: pod {pod!r}: expected an object with "
                           f"{', '.join(LOG_POD_FIELDS)}")
    return pod


def decisions_from_log(path) -> tuple[list[dict], dict]:
    """(history rows, counts) of a decision log: counts of decisions, bindings matched, held pods' rows,
    bindings with no decision, and lines skipped (cut or unparseable)."""
    records, skipped = [], 0
    for file in log_files(path):
        recs, bad = read_log(file)
        records += [(file, r) for r in recs]
        skipped += bad
    rows: list[dict] = []
    by_id: dict[str, dict] = {}
    unbound_by_pod: dict[tuple, list[dict]] = {}
    counts = {"decisions": 0, "bound": 0, "held": 0, "bindings_unmatched": 0, "released": 0,
              "releases_unmatched": 0, "kills": 0, "kills_unmatched": 0, "lines_skipped": skipped, "other": 0}
    bound_by_pod: dict[tuple, list[dict]] = {}
    held_rows: dict[str, int] = {}
    watched: set[tuple] = set()  # pods whose binding the pod watch saw: their kills are known
    kills: dict[str, int | None] = {}  # decision id -> OOM kills the watch reported (None: unknown)
    for file, r in records:
        where = str(file)
        if r.get("schema") != LOG_SCHEMA:
            raise HistoryError(f"{where}: record seq {r.get('seq')}: log schema {r.get('schema')!r}: expected {LOG_SCHEMA}")
        kind = r.get("kind")
        if kind == "decision":
            pod = _pod(r, where)
            cands = []
            for c in r.get("candidates") or []:
                u = c.get("u")
                fresh = (not c.get("stale")) and isinstance(u, list) and len(u) == 4 and None not in u
                req = c.get("r")
                known = fresh and isinstance(req, list) and len(req) == 2 and None not in req
                cands.append({"node": str(c["node"]), "u_cpu": u[0] if fresh else None, "u_mem": u[1] if fresh else None,
                              "u_io": u[2] if fresh else None, "u_net": u[3] if fresh else None,
                              "stale": not fresh, "score": None if c.get("score") is None else float(c["score"]),
                              "r_cpu": req[0] if known else None, "r_mem": req[1] if known else None})
            reason = r.get("fallback_reason") or ""
            row = {
                "source": "engine", "decision_id": str(r["decision_id"]), "time_s": float(r["time_s"]),
                "scenario": None, "seed": None, "policy": f"engine:fallback:{reason}" if reason else "engine",
                **_pod_columns(pod), "workload": None, "observation": r.get("observation"), "candidates": cands, "chosen_node": None, "chosen_index": None,
                "model_version": r.get("model_version") or None, "action": r.get("action"), "weights": r.get("weights"),
                "tau": r.get("tau"), "wait_s": None, "outcome_left_s": None, "outcome": None,
                "outcome_kills": None, "outcome_overload_h": None, "outcome_slo_h": None,
                "outcome_node_slo_h": None, "reward": None, "elapsed_s": None,
            }
            if row["observation"] is not None and None in row["observation"]:
                row["observation"] = None  # a non-finite value was logged as null: no usable observation
            rows.append(row)
            by_id[row["decision_id"]] = row
            unbound_by_pod.setdefault((row["pod_namespace"], row["pod_name"]), []).append(row)
            counts["decisions"] += 1
        elif kind == "binding":
            row = by_id.get(r.get("decision_id") or "")
            pod = r.get("pod") or {}
            if r.get("source") == "pod_watch":
                watched.add((pod.get("namespace"), pod.get("name")))
            if row is not None and (row["pod_namespace"], row["pod_name"]) != (pod.get("namespace"), pod.get("name")):
                rows.append(_held_row(row, r, pod, where, held_rows))
                _set_wait(rows[-1], r)
                bound_by_pod.setdefault((rows[-1]["pod_namespace"], rows[-1]["pod_name"]), []).append(rows[-1])
                counts["held"] += 1
                continue
            if row is None or row["chosen_node"] is not None:
                waiting = [x for x in unbound_by_pod.get((pod.get("namespace"), pod.get("name")), [])
                           if x["chosen_node"] is None and x["time_s"] <= float(r.get("time_s", 0.0))]
                row = waiting[-1] if waiting else None
            if row is None:
                # the second report of a binding (the pod watch's after ReportBinding's): its creation time
                # still belongs to the row the first one bound
                bound = [x for x in bound_by_pod.get((pod.get("namespace"), pod.get("name")), [])
                         if x["chosen_node"] == str(r.get("node")) and x["time_s"] <= float(r.get("time_s", 0.0))]
                if bound and bound[-1]["wait_s"] is None:
                    _set_wait(bound[-1], r)
                counts["bindings_unmatched"] += 1
                continue
            node = str(r["node"])
            row["chosen_node"] = node
            _set_wait(row, r)
            names = [c["node"] for c in row["candidates"]]
            row["chosen_index"] = names.index(node) if node in names else None
            bound_by_pod.setdefault((row["pod_namespace"], row["pod_name"]), []).append(row)
            counts["bound"] += 1
        elif kind in ("release", "kills"):
            # the pod's latest bound row before the record that it has not left
            pod = r.get("pod") or {}
            t = float(r.get("time_s", 0.0))
            live = [x for x in bound_by_pod.get((pod.get("namespace"), pod.get("name")), [])
                    if x["outcome_left_s"] is None and x["time_s"] <= t]
            if not live:
                counts["releases_unmatched" if kind == "release" else "kills_unmatched"] += 1
                continue
            row = live[-1]
            if kind == "release":
                row.update(outcome_left_s=t, outcome="departure")
                counts["released"] += 1
            else:
                n, held = r.get("kills"), kills.get(row["decision_id"], 0)
                known = isinstance(n, int) and not isinstance(n, bool) and n >= 0 and held is not None
                kills[row["decision_id"]] = held + n if known else None
                counts["kills"] += 1
        else:
            counts["other"] += 1
    for row in rows:
        if row["chosen_node"] is not None and (row["pod_namespace"], row["pod_name"]) in watched:
            row["outcome_kills"] = kills.get(row["decision_id"], 0)
    return rows, counts


def _set_wait(row: dict, binding: dict) -> None:
    """The row's ``wait_s``: from the pod's creation (a binding the pod watch logged carries it) to the
    row's decision, 0 at least (clocks of two machines)."""
    created = binding.get("created_s")
    if isinstance(created, (int, float)) and not isinstance(created, bool) and math.isfinite(created):
        row["wait_s"] = max(float(row["time_s"]) - float(created), 0.0)


def _held_row(hold: dict, binding: dict, pod: dict, where: str, held_rows: dict[str, int]) -> dict:
    """The row of a pod scored with a held action: the hold's action, the binding's pod, time and node."""
    if any(k not in pod for k in LOG_POD_FIELDS):
        raise HistoryError(f"{where}: binding record seq {binding.get('seq')}: pod {pod!r}: expected an object with "
                           f"{', '.join(LOG_POD_FIELDS)}")
    n = held_rows[hold["decision_id"]] = held_rows.get(hold["decision_id"], 0) + 1
    return {**hold, **_pod_columns(pod), "decision_id": f"{hold['decision_id']}+{n}",
            "time_s": float(binding.get("time_s", hold["time_s"])), "policy": "engine:held", "observation": None,
            "candidates": [], "chosen_node": str(binding["node"]), "chosen_index": None}


def _pod_columns(pod: dict) -> dict:
    """The history's pod columns of a logged pod record."""
    return {"pod_name": str(pod["name"]), "pod_namespace": pod.get("namespace"), "qos": int(pod["qos"]),
            "cpu_milli": float(pod["cpu_milli"]), "mem_mib": float(pod["mem_mib"]),
            "disk_gib": float(pod["disk_gib"]), "rdma_pct": float(pod["rdma_pct"]),
            "gpu_count": int(pod["gpu_count"]), "gpu_milli": int(pod["gpu_milli"]),
            "cpu_limit_milli": pod.get("cpu_limit_milli"), "mem_limit_mib": pod.get("mem_limit_mib")}


def convert_log(log_path, out_path, outcomes=None, candidates: int | None = None) -> tuple[Path, dict]:
    """Write the history of a decision log to the Parquet file ``out_path``, each decision with at most
    ``candidates`` of its candidates (``history.HistoryWriter``; None: the default): (the file, counts). ``outcomes``:
    called with the rows before they are written, to fill what the log lacks (``history-from-log
    --prometheus``: the overload hours, ``importer.overload_from_prometheus``); what it returns is counted as
    ``outcomes_known``."""
    from td3sched.lifecycle.history import DEFAULT_CANDIDATES, check_candidates, write_history

    candidates = check_candidates(DEFAULT_CANDIDATES if candidates is None else candidates)
    rows, counts = decisions_from_log(log_path)
    if not rows:
        raise HistoryError(f"decision log {log_path}: no decision record in it ({counts})")
    if outcomes is not None:
        counts["outcomes_known"] = outcomes(rows)
    return write_history(out_path, rows, candidates), counts
