"""Pods shaped like Alibaba's openb cluster (cluster-trace-gpu-v2023, FGD, USENIX ATC'23; published
by Alibaba for research or study purposes): the shape table, the batch stream of the mixed ``dlrm``
scenario, and the full ``openb`` stream.

QoS mapping (openb's ``qos`` column -> Kubernetes):
- ``LS`` and ``Guaranteed`` -> Guaranteed, latency-sensitive, limits = requests = the openb shape;
- ``Burstable`` -> Burstable: requests = ``request_fraction`` x shape, limits = shape;
- ``BE`` -> BestEffort: no CPU or memory request or limit (GPUs, an extended resource, are still
  requested); the pod still *uses* CPU and memory as its openb shape says.
In the batch stream (CPU-only pods) ``LS`` pods become Burstable: batch is not serving traffic.
Lifetimes are ``deletion - creation``, clipped to [60 s, ``lifetime_cap_s``].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from td3sched.trace.openb import load_openb_pods
from td3sched.workload.pods import BEST_EFFORT, BURSTABLE, GUARANTEED, PodNames, Workload
from td3sched.workload.stream import poisson_stream

MIN_LIFETIME_S = 60.0


@dataclass(frozen=True)
class ShapeTable:
    """openb pod rows: usage size, GPUs, QoS and lifetime."""

    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    gpu_count: np.ndarray
    gpu_milli: np.ndarray
    qos_label: np.ndarray
    lifetime_s: np.ndarray

    @classmethod
    def from_trace(cls, lifetime_cap_s: float, cpu_only: bool = False, frame=None) -> "ShapeTable":
        f = load_openb_pods().frame if frame is None else frame
        if cpu_only:
            f = f[f["num_gpu"] == 0]
        life = (f["deletion_s"] - f["creation_s"]).to_numpy(dtype=float)
        return cls(
            cpu_milli=f["cpu_milli"].to_numpy(dtype=float),
            mem_mib=f["mem_mib"].to_numpy(dtype=float),
            gpu_count=f["num_gpu"].to_numpy().astype(np.int64),
            gpu_milli=f["gpu_milli"].to_numpy().astype(np.int64),
            qos_label=f["qos"].to_numpy(dtype=str),
            lifetime_s=np.clip(np.nan_to_num(life, nan=MIN_LIFETIME_S), MIN_LIFETIME_S, lifetime_cap_s),
        )


def shape_workload(table: ShapeTable, rows: np.ndarray, arrival_s: np.ndarray, duration_s: np.ndarray, *,
                   rng: np.random.Generator, n_profiles: int, pool: str | None, prefix: str,
                   request_fraction: float, ls_as_burstable: bool, node_disk_mbps_per_core: float,
                   node_net_mbps_per_core: float) -> Workload:
    """Pods copying ``rows`` of the table, with the QoS mapping of this module's docstring."""
    if not 0 < request_fraction <= 1:
        raise ValueError(f"request_fraction={request_fraction!r}: expected a value in (0, 1]")
    n = len(rows)
    # every column is a function of the table's row: computed per row of the table, then gathered
    cpu, mem = table.cpu_milli, table.mem_mib
    label = table.qos_label
    best_effort = label == "BE"
    guaranteed = np.isin(label, ["Guaranteed"] if ls_as_burstable else ["LS", "Guaranteed"])
    qos = np.where(best_effort, BEST_EFFORT, np.where(guaranteed, GUARANTEED, BURSTABLE)).astype(np.int8)
    frac = np.where(qos == GUARANTEED, 1.0, request_fraction)
    request = np.zeros((len(cpu), 4))
    request[:, 0] = np.where(best_effort, 0.0, np.ceil(cpu * frac))  # Kubernetes quantities are whole milli/MiB
    request[:, 1] = np.where(best_effort, 0.0, np.ceil(mem * frac))
    cores = cpu / 1000.0
    return Workload(
        name=PodNames.numbered(prefix, n),
        arrival_s=arrival_s,
        duration_s=duration_s,
        request=request[rows],
        cpu_limit_milli=np.where(best_effort, np.inf, cpu)[rows],
        mem_limit_mib=np.where(best_effort, np.inf, mem)[rows],
        gpu_count=table.gpu_count[rows],
        gpu_milli=table.gpu_milli[rows],
        qos=qos[rows],
        latency_sensitive=(guaranteed & (label == "LS"))[rows],
        app=rows.astype(np.int32),
        app_names=tuple(f"{prefix}app-{i}" for i in range(len(table.cpu_milli))),
        max_per_node=np.full(n, -1, dtype=np.int32),
        pool=np.full(n, 0 if pool else -1, dtype=np.int16),
        pool_names=(pool,) if pool else (),
        size_cpu_milli=cpu[rows],
        size_mem_mib=mem[rows],
        size_disk_mbps=(cores * node_disk_mbps_per_core)[rows],
        size_net_mbps=(cores * node_net_mbps_per_core)[rows],
        profile=rng.integers(n_profiles, size=n).astype(np.int32),
    )


def stream_rate(table: ShapeTable, capacity: dict[str, float], target_load: float) -> tuple[float, str]:
    """Arrivals per second at which the most demanded resource (CPU, memory or GPU, by usage size)
    is ``target_load`` of ``capacity`` in steady state (Little's law); returns (rate, resource)."""
    demand = {
        "cpu_milli": float((table.cpu_milli * table.lifetime_s).mean()),
        "mem_mib": float((table.mem_mib * table.lifetime_s).mean()),
        "gpu_milli": float((table.gpu_count * table.gpu_milli * table.lifetime_s).mean()),
    }
    rates = {r: target_load * capacity[r] / d for r, d in demand.items() if d > 0 and capacity.get(r, 0) > 0}
    resource = min(rates, key=rates.get)
    return rates[resource], resource


def openb_stream(table: ShapeTable, *, rate_per_s: float, duration_s: float, seed: int, n_profiles: int,
                 pool: str | None, prefix: str, request_fraction: float, ls_as_burstable: bool,
                 modulation: np.ndarray | None, node_disk_mbps_per_core: float,
                 node_net_mbps_per_core: float) -> Workload:
    rng = np.random.default_rng([seed, 23])
    rows, arrival, life = poisson_stream(rng, rate_per_s, duration_s, table.lifetime_s, modulation=modulation)
    return shape_workload(table, rows, arrival, life, rng=rng, n_profiles=n_profiles, pool=pool, prefix=prefix,
                          request_fraction=request_fraction, ls_as_burstable=ls_as_burstable,
                          node_disk_mbps_per_core=node_disk_mbps_per_core,
                          node_net_mbps_per_core=node_net_mbps_per_core)
