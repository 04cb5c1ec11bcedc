"""A scenario rebuilt from a cluster's scheduling history, so that the gate can replay its recent window.

A history from the engine or from ``import-history`` holds what a cluster saw: when each pod was bound,
its requests, limits and QoS, the candidate nodes' observed utilisation at that moment, where it went
and, when known, when it left. The simulator needs more: the nodes' shapes, and every pod's usage over
time. ``rebuild_scenario`` takes the shapes from a v1.NodeList and estimates the usage from the history
itself:

- **pods**: every bound decision (``chosen_node`` set) whose pod is alive in the scenario's span. The
  span is the history's newest ``window`` (the gate's replay, span ``recent``) after a warm-up of at
  most ``warmup_s`` of the history before it; a pod bound before the warm-up and not known to have left
  by then is alive from the start. A pod runs until its ``outcome_left_s``; without one, until the same
  pod (namespace and name) is bound again, else to the end (``inf``).
- **nodes**: the NodeList's nodes (``status.allocatable``, as the engine's node watch reads them),
  grouped by shape into pools of fixed size (``min_count`` = ``count`` = ``max_count``: the cluster had
  those nodes; ``--set`` changes it). A node's disk and network capacity is not in a NodeList: they
  are ``disk_mbps_per_core`` and ``net_mbps_per_core`` x its cores; only the pods' sizes relative to
  them matter, and the sizes are estimated against the same capacities.
- **usage**: one usage-to-request ratio per resource and 5-minute slot, the same for every pod. At each
  decision the candidates' observed usage (``u`` x allocatable, less the deciding pod's request that
  ``u`` includes) is summed over the fresh candidates (each by its ``weight``: a history keeps a sample
  of a large cluster's candidates, ``lifecycle.history``) and divided by the requests of the known pods on
  those nodes at that moment (kube-scheduler's defaults for an empty CPU or memory request, 100m and
  200 MiB); a slot's ratio is the ratio of its sums, slots without a decision take the nearest one's.
  Disk and network have no request: their usage is spread over the pods by CPU request. A pod's usage
  at time t is its request x its slot's ratio (the scenario sets ``usage_scale`` and ``mem_level`` to 1),
  times a draw of the seed:
- **the spread**: pods do not all use the same share of their requests. If each pod's ratio were the
  slot's times a factor of mean 1 and coefficient of variation s, a node's ratio would deviate from the
  decision's by s^2 x the Herfindahl index of its pods' requests; s^2 is estimated as the mean of the
  squared relative deviations over that index, over the window's (node, decision) pairs, for CPU and for
  memory. The scenario's ``workload.cpu_spread`` and ``mem_spread`` hold it as a lognormal sigma: each
  seed draws every pod's factors anew (``scenario.build.spread_usage``), so that a gate's seeds are
  replays of what the history does not say, and not the same run again. Metric noise and unknown pods
  count as spread too: it is an upper estimate.

What it cannot know, and so attributes to the known pods: the usage of pods bound before the history
began, of system daemons, and of each workload apart from the others (every pod shares one ratio and one
daily rhythm). ``rebuild.json`` beside the scenario holds the estimates and every count.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from td3sched.engine.kubernetes_source import node_allocatable
from td3sched.lifecycle.history import HistoryError, U_FIELDS, read_history
from td3sched.policy.base import DEFAULT_MEMORY_REQUEST_MIB, DEFAULT_MILLI_CPU_REQUEST
from td3sched.workload.files import save_workload
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import SHAPE_MAX, UsageProfiles

DAY_S = 86400.0
SLOT_S = 300.0
"""The usage profile's grid: the Bitbrains profiles' 5 minutes."""
DEFAULT_WARMUP_S = DAY_S
DISK_MBPS_PER_CORE = 20.0
NET_MBPS_PER_CORE = 250.0
"""A node's disk (MB/s) and network (Mbit/s) capacity per core, as openb's scenario assumes."""
DEFAULT_DISK_GIB, DEFAULT_RDMA_PCT = 100.0, 100.0
"""A node without ephemeral-storage or RDMA in its allocatable, as the engine's node watch reads it."""
SCENARIO_FILE = "scenario.yaml"
REPORT_FILE = "rebuild.json"
KINDS = ("cpu", "mem", "io", "net")
PEAK_QUANTILE = 0.99
MAX_SPREAD = 1.5
"""The largest lognormal sigma of the pods' spread around the ratio (a coefficient of variation of 2.9)."""


@dataclass(frozen=True)
class Rebuilt:
    folder: Path
    """Holds ``scenario.yaml``, the workload's files and ``rebuild.json``."""
    report: dict

    @property
    def scenario(self) -> str:
        """The scenario's name for ``load_scenario`` and every ``--scenario``: its file's path."""
        return str(self.folder / SCENARIO_FILE)

    @property
    def span(self) -> str:
        return "recent"


def read_node_list(source, where: str | None = None) -> dict:
    """A v1.NodeList (``kubectl get nodes -o json``) from a file."""
    where = where or str(source)
    try:
        nodes = json.loads(Path(source).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HistoryError(f"node list {where}: not found: expected `kubectl get nodes -o json` output") from None
    except json.JSONDecodeError as exc:
        raise HistoryError(f"node list {where}: not JSON ({exc})") from None
    if not isinstance(nodes, dict) or not isinstance(nodes.get("items"), list):
        raise HistoryError(f"node list {where}: expected a v1.NodeList (an object with items)")
    return nodes


def node_shapes(node_list: dict) -> dict[str, tuple[float, float, int, float, float]]:
    """node -> (CPU milli, memory MiB, GPUs, disk GiB, RDMA %) of every node with CPU and memory."""
    out = {}
    for node in node_list["items"]:
        try:
            read = node_allocatable(node, DEFAULT_DISK_GIB, DEFAULT_RDMA_PCT)
        except ValueError as exc:
            raise HistoryError(f"node list: {exc}") from None
        if read is not None:
            name, alloc, gpus, _ = read
            out[name] = (float(alloc[0]), float(alloc[1]), int(gpus), float(alloc[2]), float(alloc[3]))
    if not out:
        raise HistoryError("node list: no node with CPU and memory in status.allocatable (or capacity)")
    return out


def _pools(shapes: dict[str, tuple], disk_per_core: float, net_per_core: float) -> dict[str, dict]:
    """The nodes grouped by shape, as a scenario's ``nodes.pools`` (fixed size)."""
    groups: dict[tuple, int] = {}
    for shape in shapes.values():
        groups[shape] = groups.get(shape, 0) + 1
    pools = {}
    for (cpu, mem, gpus, disk, rdma), count in sorted(groups.items()):
        name = f"c{cpu / 1000:g}-m{mem / 1024:.0f}g" + (f"-gpu{gpus}" if gpus else "")
        name = re.sub(r"[^A-Za-z0-9_-]", "_", name)
        while name in pools:
            name += "x"
        pools[name] = {"count": count, "max_count": count, "min_count": count, "cpu_milli": cpu, "mem_mib": mem,
                       "gpus": gpus, "disk_gib": disk, "rdma_pct": rdma,
                       "disk_mbps": disk_per_core * cpu / 1000, "net_mbps": net_per_core * cpu / 1000,
                       "overhead_cpu_milli": 0.0, "overhead_mem_mib": 0.0}
    return pools


def _nonzero(cpu: np.ndarray, mem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (np.where(cpu > 0, cpu, DEFAULT_MILLI_CPU_REQUEST), np.where(mem > 0, mem, DEFAULT_MEMORY_REQUEST_MIB))


def _fill_nearest(x: np.ndarray) -> np.ndarray:
    """NaN slots take the nearest slot's value (the earlier one on a tie)."""
    ok = np.flatnonzero(~np.isnan(x))
    idx = np.arange(len(x))
    pos = np.clip(np.searchsorted(ok, idx), 1, len(ok) - 1) if len(ok) > 1 else np.zeros(len(x), dtype=int)
    if len(ok) > 1:
        left, right = ok[pos - 1], ok[pos]
        pick = np.where(idx - left <= right - idx, left, right)
    else:
        pick = np.full(len(x), ok[0])
    return x[pick]


def rebuild_scenario(history, node_list: dict, out, window_s: float, warmup_s: float = DEFAULT_WARMUP_S,
                     disk_mbps_per_core: float = DISK_MBPS_PER_CORE, net_mbps_per_core: float = NET_MBPS_PER_CORE,
                     progress: Callable[[str], None] | None = None) -> Rebuilt:
    """Write the scenario of ``history``'s newest ``window_s`` (after at most ``warmup_s`` of warm-up) on
    the nodes of ``node_list`` to the folder ``out`` (replaced whole once complete)."""
    say = progress or (lambda line: None)
    if not window_s > 0 or not warmup_s >= 0:
        raise ValueError(f"window_s={window_s!r}, warmup_s={warmup_s!r}: expected a window > 0 and a warm-up >= 0")
    table = read_history(history)
    if table.num_rows == 0:
        raise HistoryError(f"history {history}: no decision to rebuild a scenario from")
    shapes = node_shapes(node_list)
    col = lambda name: table.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
    time_s = col("time_s").astype(np.float64)
    t_end = float(time_s.max())
    window_start = max(float(time_s.min()), t_end - window_s)
    t0 = max(float(time_s.min()), window_start - warmup_s)
    end = math.floor(t_end - t0) + 1.0  # the scenario's length: the first whole second after the last decision

    node = table.column("chosen_node").to_pylist()
    bound = np.array([n is not None for n in node])
    names = [f"{ns or ''}/{p}" for ns, p in zip(table.column("pod_namespace").to_pylist(),
                                                  table.column("pod_name").to_pylist())]
    left = table.column("outcome_left_s").combine_chunks().fill_null(np.nan).to_numpy().astype(np.float64)
    # a pod whose departure is unknown left when the same pod was bound again
    inferred = 0
    last_at: dict[str, int] = {}
    for i in np.flatnonzero(bound):
        j = last_at.get(names[i])
        if j is not None and np.isnan(left[j]):
            left[j] = time_s[i]
            inferred += 1
        last_at[names[i]] = i
    cpu, mem = _nonzero(col("cpu_milli").astype(np.float64), col("mem_mib").astype(np.float64))

    # --- usage-to-request ratios, per decision, from the candidates' observed usage ----------------------
    node_index = {n: k for k, n in enumerate(sorted(shapes))}
    capacity = np.array([[shapes[n][0], shapes[n][1], disk_mbps_per_core * shapes[n][0] / 1000,
                          net_mbps_per_core * shapes[n][0] / 1000] for n in sorted(shapes)])
    missing_nodes: set[str] = set()
    cands = table.column("candidates").combine_chunks()
    offs = cands.offsets.to_numpy().astype(np.int64)
    offs = offs - offs[0]
    flat = cands.flatten()
    # a production history holds millions of candidates: names to indices in Arrow, no Python object each
    known = pa.array(sorted(shapes), pa.string())
    cand_node = pc.index_in(flat.field("node"), value_set=known).fill_null(-1).to_numpy().astype(np.int64)
    missing_nodes.update(pc.unique(pc.filter(flat.field("node"), pa.array(cand_node < 0))).to_pylist())
    u = np.column_stack([flat.field(f).to_numpy(zero_copy_only=False).astype(np.float64) for f in U_FIELDS]) \
        if len(flat) else np.zeros((0, 4))
    stale = flat.field("stale").to_numpy(zero_copy_only=False).astype(bool) if len(flat) else np.zeros(0, bool)
    weight = flat.field("weight").fill_null(1.0).to_numpy(zero_copy_only=False).astype(np.float64) \
        if len(flat) else np.zeros(0)
    usable = (cand_node >= 0) & ~stale & ~np.isnan(u).any(axis=1)
    chosen_idx = np.array([node_index.get(n, -1) if n is not None else -1 for n in node], dtype=np.int64)
    missing_nodes.update(n for n, k in zip(node, chosen_idx) if n is not None and k < 0)

    events = sorted([(time_s[i], 1, i) for i in np.flatnonzero(bound & (chosen_idx >= 0))]
                    + [(left[i], -1, i) for i in np.flatnonzero(bound & (chosen_idx >= 0) & ~np.isnan(left))])
    requested = np.zeros((len(shapes), 2))  # known pods' CPU and memory requests per node
    squares = np.zeros((len(shapes), 2))  # ... and the sums of their squares
    spread_sum, spread_n, pairs = np.zeros(2), 0.0, 0  # pairs: the (node, decision) pairs read
    sums = np.full((table.num_rows, 6), np.nan)  # per decision: used CPU, memory, disk, network; requested CPU, memory
    e = 0
    for i in range(table.num_rows):
        while e < len(events) and events[e][0] < time_s[i]:
            _, sign, j = events[e]
            requested[chosen_idx[j]] += sign * np.array([cpu[j], mem[j]])
            squares[chosen_idx[j]] += sign * np.array([cpu[j], mem[j]]) ** 2
            e += 1
        a, b = offs[i], offs[i + 1]
        keep = usable[a:b]
        if not keep.any():
            continue
        k = cand_node[a:b][keep]
        w = weight[a:b][keep]
        used = u[a:b][keep] * capacity[k]
        used[:, 0] -= cpu[i]  # u counts the deciding pod at its request
        used[:, 1] -= mem[i]
        sums[i, :4] = w @ used
        sums[i, 4:] = w @ requested[k]
        if time_s[i] >= window_start and np.all(sums[i, 4:] > 0) and np.all(sums[i, :2] > 0):
            # each node's ratio against the decision's: with pods' own ratios spread by s around it, a
            # node's deviates by s^2 x its requests' Herfindahl index
            r = requested[k]
            has = np.all(r > 0.5, axis=1)
            if has.any():
                node_ratio = used[has, :2] / r[has]
                mean_ratio = sums[i, :2] / sums[i, 4:]
                herfindahl = squares[k][has] / r[has] ** 2
                spread_sum += w[has] @ ((node_ratio / mean_ratio - 1.0) ** 2 / herfindahl)
                spread_n += float(w[has].sum())
                pairs += int(has.sum())
    ok = ~np.isnan(sums[:, 0]) & (sums[:, 4] > 0) & (sums[:, 5] > 0)
    if not ok[time_s >= window_start].any():
        raise HistoryError(f"history {history}: no decision of the window has fresh candidates of the node list with "
                           "known pods on them: the pods' usage cannot be estimated")

    slots = int(math.ceil(end / SLOT_S))
    slot_of = np.clip(((time_s - t0) // SLOT_S).astype(np.int64), 0, slots - 1)
    per_slot = np.zeros((slots, 6))
    np.add.at(per_slot, slot_of[ok & (time_s >= t0)], sums[ok & (time_s >= t0)])
    have = per_slot[:, 4] > 0
    ratio = np.full((slots, 4), np.nan)
    ratio[have, 0] = per_slot[have, 0] / per_slot[have, 4]  # CPU used per CPU requested
    ratio[have, 1] = per_slot[have, 1] / per_slot[have, 5]
    ratio[have, 2] = per_slot[have, 2] / per_slot[have, 4]  # disk MB/s per milli-CPU requested
    ratio[have, 3] = per_slot[have, 3] / per_slot[have, 4]
    ratio = np.maximum(np.column_stack([_fill_nearest(ratio[:, k]) for k in range(4)]), 0.0)
    peak = np.maximum(np.quantile(ratio, PEAK_QUANTILE, axis=0), 1e-12)
    limit = np.array([SHAPE_MAX[k] for k in ("cpu", "mem", "disk", "net")])
    shape = np.clip(ratio / peak, 0.0, limit).T[:, None, :].astype(np.float32)  # [4, 1, slots]
    profiles = UsageProfiles(SLOT_S, shape, ("history-ratio",))

    # --- the pods alive in the scenario --------------------------------------------------------------------
    alive = bound & (time_s < t0 + end) & (np.isnan(left) | (left > t0))
    rows = np.flatnonzero(alive)
    arrival = np.maximum(time_s[rows] - t0, 0.0)
    duration = np.where(np.isnan(left[rows]), np.inf, left[rows] - np.maximum(time_s[rows], t0))
    order = np.argsort(arrival, kind="stable")
    rows, arrival, duration = rows[order], arrival[order], duration[order]
    unique_names, seen = [], {}
    for i in rows:  # a pod bound twice (re-created) appears twice
        k = seen.get(names[i], 0)
        seen[names[i]] = k + 1
        unique_names.append(names[i] if k == 0 else f"{names[i]}#{k}")
    qos = col("qos").astype(np.int8)[rows]
    workload_col = table.column("workload").to_pylist()
    ns_col = table.column("pod_namespace").to_pylist()
    apps = [workload_col[i] or ns_col[i] or "default" for i in rows]
    app_names, app_idx = np.unique(np.array(apps, dtype=object).astype(str), return_inverse=True)
    limit_of = lambda name: table.column(name).combine_chunks().fill_null(np.inf).to_numpy().astype(np.float64)[rows]  # noqa: E731
    request = np.column_stack([col(r).astype(np.float64)[rows] for r in ("cpu_milli", "mem_mib", "disk_gib",
                                                                         "rdma_pct")])
    workload = Workload(
        name=np.array(unique_names, dtype=object).astype(str), arrival_s=arrival, duration_s=duration,
        request=request, cpu_limit_milli=limit_of("cpu_limit_milli"), mem_limit_mib=limit_of("mem_limit_mib"),
        gpu_count=col("gpu_count").astype(np.int64)[rows], gpu_milli=col("gpu_milli").astype(np.int64)[rows],
        qos=qos, latency_sensitive=qos != 2, app=app_idx.astype(np.int32), app_names=tuple(app_names),
        max_per_node=np.full(len(rows), -1, dtype=np.int32), pool=np.full(len(rows), -1, dtype=np.int16),
        pool_names=(), size_cpu_milli=cpu[rows] * peak[0], size_mem_mib=mem[rows] * peak[1],
        size_disk_mbps=cpu[rows] * peak[2], size_net_mbps=cpu[rows] * peak[3], profile=np.zeros(len(rows), np.int32))
    if len(workload) == 0:
        raise HistoryError(f"history {history}: no bound pod is alive in its newest window")
    # the pods' spread around one ratio, as a lognormal sigma of that coefficient of variation
    cv = np.sqrt(spread_sum / spread_n) if spread_n else np.zeros(2)
    sigma = np.minimum(np.sqrt(np.log1p(cv ** 2)), MAX_SPREAD)

    warmup_days = (window_start - t0) / DAY_S
    days = end / DAY_S
    report = {
        "history": str(history), "rebuilt": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "time_s": {"start": t0, "window_start": window_start, "end": t0 + end},
        "window_s": window_s, "warmup_s": window_start - t0, "decisions": int(table.num_rows),
        "pods": len(workload), "pods_alive_at_start": int((arrival == 0).sum()),
        "pods_without_departure": int(np.isinf(duration).sum()), "departures_inferred_from_rebinding": inferred,
        "decisions_estimating_usage": int(ok.sum()), "nodes": len(shapes),
        "history_nodes_missing_from_node_list": sorted(missing_nodes),
        "ratio_mean": {"cpu_used_per_requested": float(ratio[:, 0].mean()),
                       "mem_used_per_requested": float(ratio[:, 1].mean()),
                       "disk_mbps_per_requested_cpu_milli": float(ratio[:, 2].mean()),
                       "net_mbps_per_requested_cpu_milli": float(ratio[:, 3].mean())},
        "spread": {"cpu_cv": float(cv[0]), "mem_cv": float(cv[1]), "cpu_sigma": float(sigma[0]),
                   "mem_sigma": float(sigma[1]), "node_samples": pairs},
        "disk_mbps_per_core": disk_mbps_per_core, "net_mbps_per_core": net_mbps_per_core,
    }
    scenario = {
        "name": "rebuilt", "description": f"rebuilt from the scheduling history {history}",
        "days": days, "spans": {"recent": [warmup_days, days]},
        "workload": {"kind": "files", "path": ".", "cpu_spread": round(float(sigma[0]), 4),
                     "mem_spread": round(float(sigma[1]), 4)},
        "nodes": {"pools": _pools(shapes, disk_mbps_per_core, net_mbps_per_core)},
        "simulator": {"warmup_days": warmup_days, "usage_scale": 1.0, "mem_level": 1.0},
    }
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_workload(tmp, workload, profiles, "Rebuilt from a scheduling history: the cluster's own pods, no trace.\n")
    header = "# Rebuilt from a scheduling history (td3sched rebuild-scenario); rebuild.json holds the estimates.\n"
    (tmp / SCENARIO_FILE).write_text(header + yaml.safe_dump(scenario, sort_keys=False))
    (tmp / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    if out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}.old")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    say(f"{len(workload):,} pods ({report['pods_alive_at_start']:,} alive at the start, "
        f"{report['pods_without_departure']:,} without a known departure) on {len(shapes):,} nodes; "
        f"{window_start - t0:.0f} s of warm-up, then {t0 + end - window_start:.0f} s; CPU used per requested "
        f"{report['ratio_mean']['cpu_used_per_requested']:.3f}, memory {report['ratio_mean']['mem_used_per_requested']:.3f}")
    return Rebuilt(out, report)
