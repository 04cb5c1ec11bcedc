"""Build a scenario's workload: trace -> pods (+ batch stream) -> usage profiles."""

from __future__ import annotations


import numpy as np

from td3sched.simulator.cluster import Pool
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import UsageProfiles

HOUR_S = 3600.0
DAY_S = 86400.0


def _pool(pools: tuple[Pool, ...], name: str) -> Pool:
    for p in pools:
        if p.name == name:
            return p
    raise ValueError(f"the workload needs a node pool named {name!r}; the scenario has "
                     f"{', '.join(p.name for p in pools)}")


def build_workload(scenario, pools: tuple[Pool, ...], seed: int, lenient: bool = False,
                   reports: list | None = None) -> tuple[Workload, UsageProfiles]:
    """The scenario's workload and usage profiles. With ``lenient``, malformed trace rows are skipped
    and each loader's SkipReport is appended to ``reports``; otherwise the first one raises."""
    kind = scenario.config["workload"].get("kind")
    reports = [] if reports is None else reports
    if kind == "dlrm":
        return _dlrm(scenario, pools, seed, lenient, reports)
    if kind == "openb":
        return _openb(scenario, pools, seed, lenient, reports)
    if kind == "files":
        return _files(scenario)
    raise ValueError(f"scenario {scenario.name!r}: unknown workload kind {kind!r}: expected dlrm, openb or files")


def batch_stream(batch: dict, cpu_pool: Pool, days: float, seed: int, n_profiles: int, lenient: bool = False,
                 reports: list | None = None) -> Workload:
    """The mixed-deployment batch stream: openb CPU-only pods, Poisson, sized so its steady-state
    CPU size is ``share`` of the CPU pool's allocatable CPU."""
    from td3sched.trace.openb import load_openb_pods
    from td3sched.workload.openb import ShapeTable, openb_stream

    share = float(batch["share"])
    if not 0 < share < 1:
        raise ValueError(f"batch.share={share!r}: expected a share of the CPU pool in (0, 1)")
    trace = load_openb_pods(lenient=lenient)
    if reports is not None:
        reports.append(trace.skipped)
    table = ShapeTable.from_trace(float(batch["lifetime_cap_h"]) * HOUR_S, cpu_only=True, frame=trace.frame)
    shape = cpu_pool.shapes[0]
    pool_cpu = cpu_pool.count * shape.cpu_milli
    rate = share * pool_cpu / float((table.cpu_milli * table.lifetime_s).mean())
    cores = shape.cpu_milli / 1000
    return openb_stream(table, rate_per_s=rate, duration_s=days * DAY_S, seed=seed, n_profiles=n_profiles,
                        pool=cpu_pool.name, prefix="batch-", request_fraction=float(batch["request_fraction"]),
                        ls_as_burstable=True, modulation=None,
                        node_disk_mbps_per_core=shape.disk_mbps / cores, node_net_mbps_per_core=shape.net_mbps / cores)


def _dlrm(scenario, pools, seed, lenient, reports):
    from td3sched.trace.dlrm import load_dlrm
    from td3sched.workload.dlrm import dlrm_workload

    profiles = UsageProfiles.from_bitbrains()
    cpu, gpu = _pool(pools, "cpu"), _pool(pools, "gpu")
    trace = load_dlrm(lenient=lenient)
    reports.append(trace.skipped)
    parts = [dlrm_workload(cpu.shapes[0], gpu.shapes[0], profiles.count, seed, frame=trace.frame)]
    batch = scenario.config.get("batch", {})
    if batch.get("enabled", False):
        parts.append(batch_stream(batch, cpu, scenario.days, seed, profiles.count, lenient, reports))
    return Workload.concat(parts), profiles


def _openb(scenario, pools, seed, lenient, reports):
    from td3sched.trace.aggregates import daily_shape
    from td3sched.trace.openb import load_openb_pods
    from td3sched.workload.openb import ShapeTable, openb_stream, stream_rate

    spec = scenario.config["workload"]
    profiles = UsageProfiles.from_bitbrains()
    pool = pools[0]
    trace = load_openb_pods(lenient=lenient)
    reports.append(trace.skipped)
    table = ShapeTable.from_trace(float(spec["lifetime_cap_h"]) * HOUR_S, frame=trace.frame)
    capacity = {
        "cpu_milli": sum(s.cpu_milli for s in pool.shapes),
        "mem_mib": sum(s.mem_mib for s in pool.shapes),
        "gpu_milli": 1000.0 * sum(s.gpus for s in pool.shapes),
    }
    target = float(spec["target_load"])
    if not 0 < target <= 1.5:
        raise ValueError(f"workload.target_load={target!r}: expected a load in (0, 1.5]")
    rate, _ = stream_rate(table, capacity, target)
    modulation = daily_shape() if spec.get("daily_shape", True) else None
    total_cores = capacity["cpu_milli"] / 1000
    w = openb_stream(table, rate_per_s=rate, duration_s=scenario.days * DAY_S, seed=seed, n_profiles=profiles.count,
                     pool=None, prefix="openb-", request_fraction=float(spec["request_fraction"]),
                     ls_as_burstable=False, modulation=modulation,
                     node_disk_mbps_per_core=sum(s.disk_mbps for s in pool.shapes) / total_cores,
                     node_net_mbps_per_core=sum(s.net_mbps for s in pool.shapes) / total_cores)
    return w, profiles


def _files(scenario):
    from td3sched.workload.files import load_workload

    from td3sched.scenario.schema import SCENARIO_DIR

    folder = SCENARIO_DIR / scenario.config["workload"]["path"]
    return load_workload(folder)
