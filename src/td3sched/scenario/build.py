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
        return _files(scenario, seed)
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
    dlrm = dlrm_workload(cpu.shapes[0], gpu.shapes[0], profiles.count, seed, frame=trace.frame)
    sample = float(scenario.config["workload"].get("sample", 1.0))
    if sample < 1.0:
        dlrm = dlrm.select(np.random.default_rng([seed, 43]).uniform(size=len(dlrm)) < sample)
    parts = [dlrm]
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


def _files(scenario, seed: int):
    from td3sched.workload.files import load_workload

    from td3sched.scenario.schema import SCENARIO_DIR

    spec = scenario.config["workload"]
    workload, profiles = load_workload(SCENARIO_DIR / spec["path"])
    sim = scenario.config["simulator"]
    return spread_usage(workload, float(spec.get("cpu_spread", 0.0)), float(spec.get("mem_spread", 0.0)), seed,
                        float(sim.get("usage_scale", 1.13)), float(sim.get("mem_level", 0.71)), profiles,
                        scenario.days * DAY_S), profiles


def _spread(size: np.ndarray, factor: np.ndarray, cap: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``size`` x ``factor``, each at most ``cap`` (or its own size, if larger), the uncapped ones scaled
    so that the ``weight``-ed total stays ``size``'s."""
    cap = np.maximum(cap, size)
    total = (size * weight).sum()
    out = np.minimum(size * factor, cap)
    for _ in range(50):
        free = out < cap
        short = total - (out * weight).sum()
        if short <= 1e-9 * total or not free.any():
            break
        out[free] *= 1.0 + short / (out[free] * weight[free]).sum()
        out = np.minimum(out, cap)
    return out


def spread_usage(w: Workload, cpu_sigma: float, mem_sigma: float, seed: int, usage_scale: float = 1.0,
                 mem_level: float = 1.0, profiles: UsageProfiles | None = None, horizon_s: float = np.inf) -> Workload:
    """``w`` with each pod's CPU, disk and network sizes times one lognormal draw of mean 1 and sigma
    ``cpu_sigma``, and its memory size times another of ``mem_sigma`` (seeded: the same seed, the same
    draws). The spread stands for what is not known about each pod; what is known holds: a draw never
    takes a pod past its limit at its profile's peak (CPU limit / ``usage_scale``, memory limit /
    ``mem_level``, over the largest value of its ``profiles`` shape) unless its size already was, and the
    other pods' draws are scaled so that every size's total over time (x the pod's run time before
    ``horizon_s``) is the workload's. Both sigmas 0: ``w``."""
    import dataclasses

    if cpu_sigma == 0 and mem_sigma == 0:
        return w
    rng = np.random.default_rng([seed, 43])
    m_cpu = np.exp(cpu_sigma * rng.standard_normal(len(w)) - cpu_sigma ** 2 / 2)
    m_mem = np.exp(mem_sigma * rng.standard_normal(len(w)) - mem_sigma ** 2 / 2)
    peak = (np.ones((2, len(w))) if profiles is None else
            np.maximum(profiles.shape[:2].max(axis=2)[:, w.profile].astype(np.float64), 1e-9))
    run_s = np.maximum(np.minimum(w.arrival_s + w.duration_s, horizon_s) - w.arrival_s, 0.0)
    run_s = run_s if np.isfinite(run_s).all() and run_s.sum() > 0 else np.ones(len(w))
    cpu = _spread(w.size_cpu_milli, m_cpu, w.cpu_limit_milli / (usage_scale * peak[0]), run_s)
    m_cpu = np.divide(cpu, w.size_cpu_milli, out=np.ones(len(w)), where=w.size_cpu_milli > 0)
    sizes = {"size_cpu_milli": cpu, "size_disk_mbps": w.size_disk_mbps * m_cpu,
             "size_net_mbps": w.size_net_mbps * m_cpu,
             "size_mem_mib": _spread(w.size_mem_mib, m_mem, w.mem_limit_mib / (mem_level * peak[1]), run_s)}
    for name, new in sizes.items():
        new.setflags(write=getattr(w, name).flags.writeable)  # the compiled kernels are typed on it, as loaded
    return dataclasses.replace(w, **sizes)
