"""Scenarios: YAML files naming a cluster and a workload, loaded by name, overridable with --set.

A scenario plus a seed fully determines a run. ``load_scenario("dlrm", ["batch.enabled=false"])``
reads ``td3sched/scenarios/dlrm.yaml`` over the simulator's defaults, applies the overrides and
validates the result; ``scenario.build(seed)`` makes the ``World`` the simulator runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from td3sched.metrics.fragmentation import PoolTypicalPods
from td3sched.simulator.cluster import NodeShape, Pool
from td3sched.simulator.config import Autoscaler, LatencyModel, SimConfig
from td3sched.simulator.queue import QueueConfig
from td3sched.reward import RewardConfig
from td3sched.simulator.engine import World
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import UsageProfiles

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
DAY_S = 86400.0
TYPICAL_SEED = 1
"""Seed of the workload the typical pods are taken from, whatever the run's seed."""
TYPICAL_KMEANS_SEED = 0

POOL_KEYS = {f.name for f in dataclasses.fields(NodeShape)} | {"count", "max_count", "min_count"}


def _defaults() -> dict[str, Any]:
    sim = {f.name: getattr(SimConfig(), f.name) for f in dataclasses.fields(SimConfig)
           if f.name not in ("latency", "autoscaler", "queue")}
    return {
        "simulator": sim,
        "autoscaler": dataclasses.asdict(Autoscaler()),
        "latency": dataclasses.asdict(LatencyModel()),
        "queue": dataclasses.asdict(QueueConfig()),
        "fragmentation": {"max_shapes": 20},
        "reward": dataclasses.asdict(RewardConfig()),
    }


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def _merge(base: dict, extra: dict, where: str, strict_sections: set[str]) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if where in strict_sections and key not in base:
            raise ValueError(f"unknown setting {where}.{key}: expected one of {', '.join(sorted(base))}")
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, f"{where}.{key}" if where else key, strict_sections)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_override(config: dict, assignment: str) -> None:
    """Apply one ``dotted.key=value`` (value parsed as YAML) in place; unknown keys are refused."""
    if "=" not in assignment:
        raise ValueError(f"override {assignment!r}: expected key=value, e.g. nodes.count=800")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = config
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node.get(part), dict):
            have = ", ".join(sorted(k for k in node)) if isinstance(node, dict) else "nothing"
            raise ValueError(f"override {key!r}: {'.'.join(parts[: i + 1])!r} is not a section; have: {have}")
        node = node[part]
    if parts[-1] not in node:
        raise ValueError(f"override {key!r}: unknown key {parts[-1]!r}; have: {', '.join(sorted(node))}")
    value = yaml.safe_load(raw)
    old = node[parts[-1]]
    if isinstance(old, bool) and not isinstance(value, bool):
        raise ValueError(f"override {key!r}={raw!r}: expected true or false")
    if isinstance(old, (int, float)) and not isinstance(old, bool) and (
            isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"override {key!r}={raw!r}: expected a number")
    node[parts[-1]] = value


@dataclass(frozen=True)
class Scenario:
    name: str
    config: dict
    overrides: tuple[str, ...] = ()

    @property
    def days(self) -> float:
        return float(self.config["days"])

    def span(self, name: str) -> tuple[float, float]:
        """[start_s, end_s) of a named span; ``full`` is the whole scenario."""
        if name == "full":
            return 0.0, self.days * DAY_S
        spans = self.config.get("spans", {})
        if name not in spans:
            raise ValueError(f"scenario {self.name!r} has no span {name!r}: expected one of "
                             f"{', '.join(['full', *spans])}")
        a, b = spans[name]
        return float(a) * DAY_S, float(b) * DAY_S

    def sim_config(self) -> SimConfig:
        c = self.config
        return SimConfig(**c["simulator"], latency=LatencyModel(**c["latency"]),
                         autoscaler=Autoscaler(**c["autoscaler"]), queue=QueueConfig(**c["queue"]))

    def pools(self, seed: int) -> tuple[Pool, ...]:
        nodes = self.config["nodes"]
        if nodes.get("source") == "openb":
            return (_openb_pool(nodes, seed),)
        pools = []
        for name, spec in nodes["pools"].items():
            unknown = set(spec) - POOL_KEYS
            if unknown:
                raise ValueError(f"pool {name!r}: unknown keys {sorted(unknown)}; expected {sorted(POOL_KEYS)}")
            shape = NodeShape(**{k: v for k, v in spec.items() if k not in ("count", "max_count", "min_count")})
            max_count = int(spec.get("max_count", spec["count"]))
            pools.append(Pool(name, (shape,) * max_count, int(spec["count"]), int(spec.get("min_count", 0))))
        return tuple(pools)

    def build(self, seed: int, lenient: bool = False, reports: list | None = None) -> World:
        """The world of this scenario for ``seed`` (workload draws and usage mapping are seeded).
        ``lenient`` skips malformed trace rows, appending each loader's SkipReport to ``reports``."""
        from td3sched.scenario.build import build_workload

        pools = self.pools(seed)
        workload, profiles = build_workload(self, pools, seed, lenient, reports)
        reference = self.typical_reference()
        if seed == TYPICAL_SEED and reference.config == self.config:  # this build is the reference's
            typical = _typical_pods(reference, lenient, lambda: reference._typical_of(pools, workload))
        else:
            typical = _typical_pods(reference, lenient)
        return World(pools, workload, profiles, self.sim_config(), typical, RewardConfig(**self.config["reward"]))

    def typical_reference(self) -> "Scenario":
        """The scenario the typical pods come from: this one with ``days`` as in its file (a ``days``
        override is dropped), so the fragmentation metric does not change with the run's length."""
        kept = tuple(o for o in self.overrides if o.split("=", 1)[0].strip() != "days")
        if kept == self.overrides or not (SCENARIO_DIR / f"{self.name}.yaml").is_file():
            return self
        return load_scenario(self.name, kept)

    def typical_window(self) -> tuple[float, float]:
        """[start_s, end_s) of the pods the typical pods come from: the train span, or the first
        2/3 of the scenario when it has none."""
        if "train" in self.config.get("spans", {}):
            return self.span("train")
        return 0.0, self.days * DAY_S * 2 / 3

    def _typical_of(self, pools: tuple[Pool, ...], workload: Workload) -> PoolTypicalPods:
        start, end = self.typical_window()
        return PoolTypicalPods.from_workload(workload, [p.name for p in pools], start, end,
                                             int(self.config["fragmentation"]["max_shapes"]), TYPICAL_KMEANS_SEED)


_TYPICAL: dict[tuple[str, bool], PoolTypicalPods] = {}
"""Typical pods per (reference scenario's config, lenient), computed once per process."""


def _typical_pods(reference: Scenario, lenient: bool,
                  compute: Callable[[], PoolTypicalPods] | None = None) -> PoolTypicalPods:
    """The typical pods of ``reference`` (its own days), from its workload built with TYPICAL_SEED;
    ``compute`` gives them from a workload already built that way."""
    key = (json.dumps(reference.config, sort_keys=True, default=str), lenient)
    if key not in _TYPICAL:
        if compute is None:
            from td3sched.scenario.build import build_workload

            def compute() -> PoolTypicalPods:
                pools = reference.pools(TYPICAL_SEED)
                workload, _ = build_workload(reference, pools, TYPICAL_SEED, lenient, [])
                return reference._typical_of(pools, workload)
        if len(_TYPICAL) >= 8:
            _TYPICAL.clear()
        _TYPICAL[key] = compute()
    return _TYPICAL[key]


def _openb_pool(nodes: dict, seed: int) -> Pool:
    from td3sched.trace.openb import load_openb_nodes

    f = load_openb_nodes().frame
    count = int(nodes.get("count", len(f)))
    if count <= 0:
        raise ValueError(f"nodes.count={count}: expected a positive node count")
    rng = np.random.default_rng([seed, 31])
    if count != len(f):
        rows = rng.choice(len(f), size=count, replace=count > len(f))
        f = f.iloc[np.sort(rows)]
    shapes = tuple(
        NodeShape(cpu_milli=float(r.cpu_milli), mem_mib=float(r.mem_mib), gpus=int(r.gpu),
                  disk_gib=float(nodes["disk_gib"]), rdma_pct=float(nodes["rdma_pct"]),
                  disk_mbps=float(nodes["disk_mbps_per_core"]) * r.cpu_milli / 1000,
                  net_mbps=float(nodes["net_mbps_per_core"]) * r.cpu_milli / 1000,
                  overhead_cpu_milli=float(nodes["overhead_cpu_milli"]),
                  overhead_mem_mib=float(nodes["overhead_mem_mib"]))
        for r in f.itertuples()
    )
    return Pool("openb", shapes, count, count)


def load_scenario(name: str, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Scenario ``name`` from the scenarios folder with ``key=value`` overrides applied."""
    path = SCENARIO_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(scenario_names())}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"scenario file {path.name} is not valid YAML: {exc}") from exc
    for key in ("name", "days", "workload", "nodes"):
        if key not in raw:
            raise ValueError(f"scenario file {path.name}: missing key {key!r}")
    config = _merge(_defaults(), raw, "", {"simulator", "autoscaler", "latency", "queue", "fragmentation", "reward"})
    for assignment in overrides:
        apply_override(config, assignment)
    scenario = Scenario(name, config, tuple(overrides))
    scenario.sim_config()  # validate now, before anything runs
    RewardConfig(**config["reward"])
    return scenario


__all__ = ["Scenario", "load_scenario", "scenario_names", "Workload", "UsageProfiles"]
