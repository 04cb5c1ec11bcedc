"""The DLRM serving stream (Alibaba cluster-trace-gpu-v2025, NSDI'25; published by Alibaba for
research or study purposes) as a workload.

Every instance is latency-sensitive and Guaranteed (limits equal requests). CN instances select
the CPU pool, HN instances the GPU pool. NaN creation = alive at the trace start (arrival 0),
NaN deletion = alive at the end (duration inf). ``disk_request`` is storage capacity (GiB) and
``rdma_request`` a share of one NIC: both are hard-fit. Usage sizes are the requests; a pod's disk
bandwidth at its profile's peak is its share of the node's disk capacity times the node's disk
bandwidth, its network bandwidth its RDMA share of one NIC. Replicas of one app follow the same
Bitbrains VM (seeded): a service's replicas see the same load.
"""

from __future__ import annotations

import numpy as np

from td3sched.simulator.cluster import NodeShape
from td3sched.trace.dlrm import load_dlrm
from td3sched.workload.pods import GUARANTEED, Workload


def dlrm_workload(cpu_node: NodeShape, gpu_node: NodeShape, n_profiles: int, seed: int,
                  frame=None) -> Workload:
    f = load_dlrm().frame if frame is None else frame
    arrival = f["creation_s"].fillna(0.0).to_numpy(dtype=float)
    end = f["deletion_s"].fillna(np.inf).to_numpy(dtype=float)
    order = np.argsort(arrival, kind="stable")
    f = f.iloc[order].reset_index(drop=True)
    arrival, end = arrival[order], end[order]
    n = len(f)
    is_gpu = (f["role"] == "HN").to_numpy()
    request = np.column_stack([
        f["cpu_milli_request"], f["mem_mib_request"], f["disk_gib_request"], f["rdma_pct_request"]
    ]).astype(float)
    apps, app_idx = np.unique(f["app_name"].to_numpy(dtype=str), return_inverse=True)
    rng = np.random.default_rng([seed, 11])
    app_vm = rng.integers(n_profiles, size=len(apps))
    node_disk = np.where(is_gpu, gpu_node.disk_gib, cpu_node.disk_gib)
    node_disk_bw = np.where(is_gpu, gpu_node.disk_mbps, cpu_node.disk_mbps)
    nic_mbps = np.where(is_gpu, gpu_node.net_mbps / (gpu_node.rdma_pct / 100), cpu_node.net_mbps / (cpu_node.rdma_pct / 100))
    return Workload(
        name=f["instance_sn"].to_numpy(dtype=str),
        arrival_s=arrival,
        duration_s=np.maximum(end - arrival, 0.0),
        request=request,
        cpu_limit_milli=f["cpu_milli_limit"].to_numpy(dtype=float),
        mem_limit_mib=f["mem_mib_limit"].to_numpy(dtype=float),
        gpu_count=f["gpu_request"].to_numpy().astype(np.int64),
        gpu_milli=np.where(f["gpu_request"].to_numpy() > 0, 1000, 0).astype(np.int64),
        qos=np.full(n, GUARANTEED, dtype=np.int8),
        latency_sensitive=np.ones(n, dtype=bool),
        app=app_idx.astype(np.int32),
        app_names=tuple(apps),
        max_per_node=f["max_instance_per_node"].to_numpy().astype(np.int32),
        pool=is_gpu.astype(np.int16),
        pool_names=("cpu", "gpu"),
        size_cpu_milli=request[:, 0].copy(),
        size_mem_mib=request[:, 1].copy(),
        size_disk_mbps=request[:, 2] / node_disk * node_disk_bw,
        size_net_mbps=request[:, 3] / 100 * nic_mbps,
        profile=app_vm[app_idx].astype(np.int32),
    )
