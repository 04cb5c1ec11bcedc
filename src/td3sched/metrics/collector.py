"""Accumulates a run's metrics tick by tick; ``result()`` gives the exact definitions' values.

Definitions (docs/simulator.md, section Metrics), all over the evaluation span's ticks:
- cpu_util / mem_util: sum of running pods' real usage (CPU delivered: a node serves at most its
  cores) / sum of allocatable of provisioned nodes, averaged over ticks;
- cpu_contention_frac: CPU demand (after limits) that nodes could not serve / pods' CPU demand;
  cpu_throttled_frac: demand cut by CPU limits (CFS quota) / pods' CPU demand; both summed over ticks;
- batch_cpu_share: CPU demand (after limits) of pods that are not latency-sensitive / all pods';
- fragmentation: ``metrics.fragmentation.cluster_fragmentation``, averaged over ticks;
- latency_p99_ms: 99th percentile over all (latency-sensitive pod, tick) samples, read from a
  log-spaced histogram (bins 0.4% wide);
- oom_kills: kernel OOM kills on a node out of memory (node level); oom_per_week: those per 7
  simulated days; oom_kills_total: oom_kills + container_oom (what node_vmstat_oom_kill counts),
  oom_total_per_week: those per 7 simulated days;
- overload_node_frac: share of (provisioned node, tick) samples with real CPU usage > 85%;
- sla_violations: node OOM kills + latency SLO breaches + pods pending longer than 60 s; a breach
  is an episode: a latency-sensitive pod whose latency goes above its SLO (it counts again only
  after coming back under); also per 1,000 pods that arrived in the span. latency_breach_frac is
  the share of latency samples above the SLO, latency_breach_hours the hours latency-sensitive pods
  spent above it (those samples, a tick each: what the objective's ``slo_hour`` prices);
- container_oom: containers killed for memory above their limit (each restarts in place after the
  kubelet's CrashLoopBackOff delay);
- pending_p99_s: 99th percentile of time from entering the queue to placement (pods still pending
  at the end count with their wait so far); unschedulable: pods still pending at the end;
- node_hours: provisioned node-hours;
- decisions: scheduling cycles (attempts, failed ones included); binds: placements; evictions: pods
  evicted (drained off nodes the autoscaler removes, or by the kubelet under memory pressure:
  evictions_memory); unschedulable_by_shape: pods that fit no node template
  of any pool they may use (reported once each).
"""

from __future__ import annotations

import math

import numpy as np

DECISIONS_AND_BINDS = (
    "decisions counts scheduling cycles, binds the pods placed: a pod that fits no node stays in the "
    "scheduling queue and is tried again (after its backoff, or when room comes back), and each try is "
    "one more decision, so decisions - binds are the cycles that placed nothing")
"""What the two counts are, for every table that shows them."""

LAT_MIN_MS = 0.1
LAT_BINS = 4000
LAT_LOG_RATIO = math.log(1e7) / LAT_BINS  # 0.1 ms .. 1e6 ms


class MetricsCollector:
    def __init__(self, span_s: float, tick_s: float):
        self.span_s = span_s
        self.tick_s = tick_s
        self.ticks = 0
        self.cpu_util_sum = 0.0
        self.mem_util_sum = 0.0
        self.frag_sum = 0.0
        self.node_samples = 0
        self.overloaded_samples = 0
        self.node_hours = 0.0
        self.lat_hist = np.zeros(LAT_BINS + 1, dtype=np.int64)
        self.lat_samples = 0
        self.slo_breaches = 0
        self.breach_samples = 0
        self.oom_kills = 0
        self.container_ooms = 0
        self.pending_violations = 0
        self.pending_waits: list[float] = []
        self.arrivals = 0
        self.decisions = 0
        self.cpu_demand_sum = 0.0
        self.cpu_unserved_sum = 0.0
        self.cpu_throttled_sum = 0.0
        self.batch_demand_sum = 0.0
        self.pods_demand_sum = 0.0
        self.binds = 0
        self.evictions = 0
        self.evictions_memory = 0
        self.unschedulable_by_shape = 0
        self.hourly: dict[str, list[float]] = {"cpu_util": [], "nodes": [], "fragmentation": []}
        self._hour_acc = np.zeros(3)
        self._hour_n = 0
        self.node_util_hourly: list[list[float]] = []
        """Hourly mean CPU utilisation of a fixed sample of node slots (NaN while unprovisioned)."""
        self._node_acc: np.ndarray | None = None

    def tick(self, *, pods_cpu: float, pods_mem: float, alloc_cpu: float, alloc_mem: float,
             fragmentation: float, nodes: int, overloaded: int, latency_ms: np.ndarray, breaches: int,
             breach_samples: int = 0, node_util: np.ndarray | None = None, cpu_demand: float = 0.0,
             cpu_unserved: float = 0.0, cpu_throttled: float = 0.0, batch_demand: float = 0.0,
             pods_demand: float = 0.0) -> None:
        cpu_util = pods_cpu / alloc_cpu if alloc_cpu > 0 else 0.0
        self.ticks += 1
        self.cpu_demand_sum += cpu_demand
        self.cpu_unserved_sum += cpu_unserved
        self.cpu_throttled_sum += cpu_throttled
        self.batch_demand_sum += batch_demand
        self.pods_demand_sum += pods_demand
        self.cpu_util_sum += cpu_util
        self.mem_util_sum += pods_mem / alloc_mem if alloc_mem > 0 else 0.0
        self.frag_sum += fragmentation
        self.node_samples += nodes
        self.overloaded_samples += overloaded
        self.node_hours += nodes * self.tick_s / 3600.0
        if len(latency_ms):
            idx = np.floor(np.log(np.maximum(latency_ms, LAT_MIN_MS) / LAT_MIN_MS) / LAT_LOG_RATIO)
            self.lat_hist += np.bincount(np.minimum(idx.astype(np.int64), LAT_BINS), minlength=LAT_BINS + 1)
            self.lat_samples += len(latency_ms)
        self.slo_breaches += breaches
        self.breach_samples += breach_samples
        self._hour_acc += (cpu_util, nodes, fragmentation)
        if node_util is not None:
            self._node_acc = node_util.copy() if self._node_acc is None else self._node_acc + node_util
        self._hour_n += 1
        if self._hour_n * self.tick_s >= 3600:
            for key, v in zip(self.hourly, self._hour_acc / self._hour_n):
                self.hourly[key].append(round(float(v), 6))
            if self._node_acc is not None:
                mean = self._node_acc / self._hour_n
                self.node_util_hourly.append([None if np.isnan(v) else round(float(v), 3) for v in mean])
                self._node_acc = None
            self._hour_acc[:] = 0
            self._hour_n = 0

    def latency_histogram(self) -> list[list[float]]:
        """Non-empty latency bins as [upper edge ms, count] pairs (for CDF plots)."""
        nz = np.flatnonzero(self.lat_hist)
        return [[round(LAT_MIN_MS * math.exp((b + 1) * LAT_LOG_RATIO), 4), int(self.lat_hist[b])] for b in nz]

    @property
    def breach_hours(self) -> float:
        """Hours latency-sensitive pods spent above their SLO so far: the samples above it, a tick each."""
        return self.breach_samples * self.tick_s / 3600.0

    def latency_quantile(self, q: float) -> float:
        if self.lat_samples == 0:
            return 0.0
        cum = np.cumsum(self.lat_hist)
        b = int(np.searchsorted(cum, q * self.lat_samples))
        return LAT_MIN_MS * math.exp((b + 1) * LAT_LOG_RATIO)  # the bin's upper edge

    def result(self, unschedulable: int, still_pending_waits: list[float]) -> dict[str, float]:
        waits = np.array(self.pending_waits + still_pending_waits)
        t = max(self.ticks, 1)
        violations = self.oom_kills + self.slo_breaches + self.pending_violations
        return {
            "cpu_util": self.cpu_util_sum / t,
            "mem_util": self.mem_util_sum / t,
            "cpu_contention_frac": self.cpu_unserved_sum / self.cpu_demand_sum if self.cpu_demand_sum else 0.0,
            "batch_cpu_share": self.batch_demand_sum / self.pods_demand_sum if self.pods_demand_sum else 0.0,
            "cpu_throttled_frac": self.cpu_throttled_sum / self.cpu_demand_sum if self.cpu_demand_sum else 0.0,
            "fragmentation": self.frag_sum / t,
            "latency_p99_ms": self.latency_quantile(0.99),
            "latency_p50_ms": self.latency_quantile(0.50),
            "oom_per_week": self.oom_kills * 7 * 86400 / self.span_s,
            "oom_kills": self.oom_kills,
            "container_oom": self.container_ooms,
            "oom_kills_total": self.oom_kills + self.container_ooms,
            "oom_total_per_week": (self.oom_kills + self.container_ooms) * 7 * 86400 / self.span_s,
            "overload_node_frac": self.overloaded_samples / max(self.node_samples, 1),
            "sla_violations": violations,
            "sla_violations_per_1k_pods": 1000.0 * violations / max(self.arrivals, 1),
            "sla_latency_breaches": self.slo_breaches,
            "latency_breach_frac": self.breach_samples / max(self.lat_samples, 1),
            "latency_breach_hours": self.breach_hours,
            "sla_pending_too_long": self.pending_violations,
            "pending_p99_s": float(np.quantile(waits, 0.99)) if len(waits) else 0.0,
            "unschedulable": unschedulable,
            "node_hours": self.node_hours,
            "pods_arrived": self.arrivals,
            "decisions": self.decisions,
            "binds": self.binds,
            "attempts_per_pod": self.decisions / max(self.arrivals, 1),
            "evictions": self.evictions,
            "evictions_memory": self.evictions_memory,
            "unschedulable_by_shape": self.unschedulable_by_shape,
        }
