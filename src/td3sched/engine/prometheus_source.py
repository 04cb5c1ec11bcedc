"""Node metrics from a real Prometheus over its HTTP API (``/api/v1/query``), PromQL over
node_exporter metrics, refreshed in a background thread: a decision never waits for Prometheus.

Each query returns one value per ``instance`` (the mapping to node names: ``node_label`` when set,
else the instance with its ``:port`` removed, through the optional ``node_names`` table):

    cpu_cores          CPUs of the node
    cpu_busy_cores     CPUs busy: sum over CPUs of 1 - the idle rate
    mem_total_bytes    MemTotal
    mem_available_bytes MemAvailable
    disk_busy          share of time the busiest disk is doing IO (io_time rate), 0-1
    net_bytes_per_s    bytes received + sent per second, all devices but lo
    net_speed_bytes    link speed of the fastest device (bytes/s)
    sample_time_s      timestamp of the node's newest MemAvailable sample: the metrics' age
    oom_kills_5m       (one value for the cluster) node OOM kills over 5 minutes

The snapshot (``state.NodeSnapshot``) takes CPU in milli-cores, memory in MiB, disk busy as a share of
a capacity of 1 and network in Mbit/s of the link speed. A node missing from a query has NaN for that
resource (a stale node for ``state.Staleness``). A refresh that fails keeps the last snapshot; its
age grows until the staleness policy applies.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import numpy as np

from td3sched.engine.state import NodeSnapshot, ShadowState

MIB = 2.0**20
DEFAULT_QUERIES: dict[str, str] = {
    "cpu_cores": 'count by (instance) (node_cpu_seconds_total{mode="idle"})',
    "cpu_busy_cores": 'sum by (instance) (1 - rate(node_cpu_seconds_total{mode="idle"}[1m]))',
    "mem_total_bytes": "max by (instance) (node_memory_MemTotal_bytes)",
    "mem_available_bytes": "max by (instance) (node_memory_MemAvailable_bytes)",
    "disk_busy": "max by (instance) (rate(node_disk_io_time_seconds_total[1m]))",
    "net_bytes_per_s": ('sum by (instance) (rate(node_network_receive_bytes_total{device!="lo"}[1m]) '
                        '+ rate(node_network_transmit_bytes_total{device!="lo"}[1m]))'),
    "net_speed_bytes": 'max by (instance) (node_network_speed_bytes{device!="lo"})',
    "sample_time_s": "max by (instance) (timestamp(node_memory_MemAvailable_bytes))",
    "oom_kills_5m": "sum(increase(node_vmstat_oom_kill[5m]))",
}


class PrometheusError(RuntimeError):
    """A query that failed: the query's name, the URL and what came back."""


def api_result(url: str, endpoint: str, params: dict, timeout_s: float, what: str) -> list:
    """``data.result`` of a Prometheus HTTP API call (``/api/v1/<endpoint>``); a PrometheusError
    names ``what``, the server and the fault (unreachable, not JSON, or an error status)."""
    full = f"{url.rstrip('/')}/api/v1/{endpoint}?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise PrometheusError(f"{what} at {url}: {exc}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{what}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]["result"]


@dataclass
class PrometheusSource:
    url: str
    state: ShadowState
    queries: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_QUERIES))
    interval_s: float = 15.0
    timeout_s: float = 5.0
    node_label: str = ""
    """Label naming the node (e.g. ``node`` from a relabelling); empty: the instance without its port."""
    node_names: dict[str, str] = field(default_factory=dict)
    """instance (or ``node_label`` value) -> node name, for the names that differ."""
    disk_gib: float = 100.0
    """Allocatable ephemeral storage assumed for every node (not in node_exporter's metrics)."""
    rdma_pct: float = 100.0
    on_refresh: object = None
    """Called with (ok: bool) after each refresh (the engine's metrics count them)."""

    def __post_init__(self):
        missing = sorted(set(DEFAULT_QUERIES) - set(self.queries))
        if missing:
            raise ValueError(f"prometheus.queries: missing {missing}")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _get(self, name: str, query: str) -> list:
        return api_result(self.url, "query", {"query": query}, self.timeout_s, f"query {name}")

    def _query_raw(self, query: str) -> float:
        """The first value of an ad-hoc query (NaN when empty)."""
        result = self._get("ad hoc", query)
        return float(result[0]["value"][1]) if result else math.nan

    def _query(self, name: str) -> dict[str, float] | float:
        result = self._get(name, self.queries[name])
        if name == "oom_kills_5m":
            return float(result[0]["value"][1]) if result else 0.0
        return {self.node_of(series["metric"]): float(series["value"][1]) for series in result
                if self.node_of(series["metric"])}

    def node_of(self, labels: dict) -> str:
        """The node a series belongs to: ``node_label``'s value, else the instance without its port,
        through ``node_names``; "" when neither is there."""
        key = labels.get(self.node_label) if self.node_label else re.sub(r":\d+$", "", labels.get("instance", ""))
        return self.node_names.get(key, key) if key else ""

    def snapshot(self) -> NodeSnapshot:
        """One refresh: every query, joined by node (``PrometheusError`` on a failed query)."""
        values = {name: self._query(name) for name in self.queries}
        return snapshot_from_values(values, self.disk_gib, self.rdma_pct, time.time())

    def refresh(self) -> bool:
        """Publish a new snapshot; on failure keep the old one and record the error."""
        try:
            snap = self.snapshot()
            if snap.size == 0:
                raise PrometheusError(f"no node metrics at {self.url} (query cpu_cores returned no series)")
            self.state.publish(snap)
            ok = True
        except (PrometheusError, KeyError, ValueError, IndexError) as exc:
            self.state.refresh_failed(str(exc))
            ok = False
        if self.on_refresh is not None:
            self.on_refresh(ok)
        return ok

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="prometheus-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def snapshot_from_values(values: dict, disk_gib: float, rdma_pct: float, taken_at_s: float) -> NodeSnapshot:
    """The snapshot of one value per node of every query (``oom_kills_5m``: one for the cluster), in the
    units of the module's docstring: the engine's refresh and ``lifecycle.importer``'s replay of past
    metrics (Prometheus range queries) both build it here."""
    names = tuple(sorted(set(values["cpu_cores"]) & set(values["mem_total_bytes"])))

    def col(name: str) -> np.ndarray:
        return np.array([values[name].get(n, math.nan) for n in names], dtype=float)

    cores, mem_total = col("cpu_cores"), col("mem_total_bytes")
    speed = col("net_speed_bytes")
    speed_mbit = np.where(np.isfinite(speed) & (speed > 0), speed * 8 / 1e6, 10_000.0)  # no speed: 10 Gbit/s
    allocatable = np.column_stack([cores * 1000, mem_total / MIB, np.full(len(names), disk_gib),
                                   np.full(len(names), rdma_pct)])
    capacity = np.column_stack([cores * 1000, mem_total / MIB, np.ones(len(names)), speed_mbit])
    observed = np.column_stack([col("cpu_busy_cores") * 1000, (mem_total - col("mem_available_bytes")) / MIB,
                                col("disk_busy"), col("net_bytes_per_s") * 8 / 1e6])
    scraped = col("sample_time_s")
    scraped = np.where(np.isfinite(scraped), scraped, -np.inf)
    return NodeSnapshot(names, allocatable.reshape(-1, 4), capacity.reshape(-1, 4), observed.reshape(-1, 4),
                        scraped, oom_kills_recent=float(values["oom_kills_5m"]), taken_at_s=taken_at_s)
