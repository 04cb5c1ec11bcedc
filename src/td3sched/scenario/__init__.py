"""Scenarios: YAML files naming a cluster and a workload, loaded by name, overridable with --set.

A scenario plus a seed fully determines a run. ``load_scenario("dlrm", ["batch.enabled=false"])``
reads ``td3sched/scenarios/dlrm.yaml``, applies the overrides and validates the result against the
schema (``scenario.schema``: types, ranges and defaults of every section); ``scenario.build(seed)``
makes the ``World`` the simulator runs. A scenario file of one's own is named by its path
(``load_scenario("replay/scenario.yaml")``: a name ending in ``.yaml`` or ``.yml``); a files
workload's relative ``path`` is then relative to the file's folder (``lifecycle.rebuild`` writes
such scenarios from a cluster's scheduling history).
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

import numpy as np
import yaml

from td3sched.metrics.fragmentation import PoolTypicalPods
from td3sched.scenario.schema import SCENARIO_DIR, SIM_SECTIONS, ScenarioError, resolve
from td3sched.simulator.cluster import NodeShape, Pool
from td3sched.simulator.config import SimConfig
from td3sched.reward import RewardConfig
from td3sched.simulator.engine import World
from td3sched.workload.pods import Workload
from td3sched.workload.profiles import UsageProfiles

DAY_S = 86400.0
TYPICAL_SEED = 1
"""Seed of the workload the typical pods are taken from, whatever the run's seed."""
TYPICAL_KMEANS_SEED = 0

POOL_COUNTS = ("count", "max_count", "min_count")


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


@dataclass(frozen=True)
class Scenario:
    name: str
    config: dict
    overrides: tuple[str, ...] = ()

    @property
    def days(self) -> float:
        return float(self.config["days"])

    def span(self, name: str) -> tuple[float, float]:
        """[start_s, end_s) of a named span; ``full`` is the whole scenario. A span past the
        scenario's days, or one its warm-up covers whole, is refused naming the setting."""
        spans = self.config.get("spans", {})
        if name == "full":
            a, b = 0.0, self.days
        elif name not in spans:
            raise ValueError(f"scenario {self.name!r} has no span {name!r}: expected one of "
                             f"{', '.join(['full', *spans])}")
        else:
            a, b = spans[name]
        if b > self.days:
            raise ScenarioError(f"span {name} of scenario {self.name!r} is days [{a:g}, {b:g}), past its days="
                                f"{self.days:g}: use --span full, or set days to at least {b:g}")
        warmup = float(self.config["simulator"]["warmup_days"])
        if max(a, max(0.0, a - warmup) + warmup) >= b:  # as Simulation measures a span
            raise ScenarioError(f"span {name} of scenario {self.name!r} (days [{a:g}, {b:g})) lies within the "
                                f"warm-up of simulator.warmup_days={warmup:g}: nothing would be measured; expected "
                                f"simulator.warmup_days below {b:g}")
        return float(a) * DAY_S, float(b) * DAY_S

    def sim_config(self) -> SimConfig:
        c = self.config
        return SimConfig(**c["simulator"], **{k: cls(**c[k]) for k, cls in SIM_SECTIONS.items()})

    def pools(self, seed: int) -> tuple[Pool, ...]:
        nodes = self.config["nodes"]
        if nodes.get("source") == "openb":
            return (_openb_pool(nodes, seed),)
        pools = []
        for name, spec in nodes["pools"].items():
            shape = NodeShape(**{k: v for k, v in spec.items() if k not in POOL_COUNTS})
            max_count = int(spec.get("max_count", spec["count"]))
            pools.append(Pool(name, (shape,) * max_count, int(spec["count"]), int(spec.get("min_count", 0))))
        return tuple(pools)

    def build(self, seed: int, lenient: bool = False, reports: list | None = None) -> World:
        """The world of this scenario for ``seed`` (workload draws and usage mapping are seeded).
        ``lenient`` skips malformed trace rows, appending each loader's SkipReport to ``reports``."""
        from td3sched.scenario.build import build_workload

        pools = self.pools(seed)
        reference = self.typical_reference()
        own = seed == TYPICAL_SEED and reference.config == self.config  # this build is the reference's
        # another build's typical pods first: its workload is freed before this one is built, so a
        # process never holds two (a dlrm workload is some 10 M pods)
        typical = None if own else _typical_pods(reference, lenient)
        workload, profiles = build_workload(self, pools, seed, lenient, reports)
        if len(workload) == 0:
            raise ValueError(f"scenario {self.name!r}: the workload has no pods"
                             + (" (every trace row was skipped as malformed)" if lenient else ""))
        if own:
            typical = _typical_pods(reference, lenient, lambda: reference._typical_of(pools, workload))
        return World(pools, workload, profiles, self.sim_config(), typical, RewardConfig(**self.config["reward"]))

    def typical_reference(self) -> "Scenario":
        """The scenario the typical pods come from: this one with ``days`` as in its file (a ``days``
        override is dropped), so the fragmentation metric does not change with the run's length."""
        kept = tuple(o for o in self.overrides if o.split("=", 1)[0].strip() != "days")
        if kept == self.overrides or not scenario_file(self.name).is_file():
            return self
        return load_scenario(self.name, kept)

    def typical_window(self) -> tuple[float, float]:
        """[start_s, end_s) of the pods the typical pods come from: the train span, or the first
        2/3 of the scenario when it has none."""
        if "train" in self.config.get("spans", {}):
            return self.span("train")
        return 0.0, self.days * DAY_S * 2 / 3

    def typical_pods(self, lenient: bool = False) -> tuple[tuple[str, ...], PoolTypicalPods]:
        """(pool names in the cluster's order, the typical pods of each pool): what the fragmentation
        metric and FGD measure this scenario's nodes with, whatever the run's seed (computed once per
        process)."""
        names = tuple(p.name for p in self.pools(TYPICAL_SEED))
        return names, _typical_pods(self.typical_reference(), lenient)

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


SCENARIO_SUFFIXES = (".yaml", ".yml")


def scenario_file(name: str) -> Path:
    """The file of scenario ``name``: a shipped one (``scenarios/NAME.yaml``), or a path ending in .yaml/.yml."""
    return Path(name) if str(name).endswith(SCENARIO_SUFFIXES) else SCENARIO_DIR / f"{name}.yaml"


def scenario_slug(name: str) -> str:
    """``name`` as part of a file name: a shipped scenario's name itself; a scenario file's folder and stem
    (``replay/scenario.yaml`` -> ``replay-scenario``), characters other than letters, digits, ``-``, ``_``
    and ``.`` replaced by ``_``."""
    if not str(name).endswith(SCENARIO_SUFFIXES):
        return str(name)
    path = Path(name)
    text = f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def load_scenario(name: str, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Scenario ``name`` (a shipped scenario, or the path of a scenario file) with ``key=value``
    overrides applied."""
    path = scenario_file(name)
    if not path.is_file():
        if path.parent != SCENARIO_DIR:
            raise ValueError(f"scenario file {name}: not found: expected a scenario file (.yaml), or one of the "
                             f"shipped scenarios {', '.join(scenario_names())}")
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(scenario_names())}, or the path "
                         "of a scenario file (.yaml)")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario file {path.name} is not valid YAML: {exc}") from exc
    workload = raw.get("workload") if isinstance(raw, dict) else None
    if (path.parent != SCENARIO_DIR and isinstance(workload, dict) and workload.get("kind") == "files"
            and isinstance(workload.get("path"), str) and not Path(workload["path"]).is_absolute()):
        raw = {**raw, "workload": {**workload, "path": str((path.parent / workload["path"]).resolve())}}
    config = resolve(raw, tuple(overrides), source=f"scenario file {path.name}")
    return Scenario(name, config, tuple(overrides))

__all__ = ["Scenario", "ScenarioError", "load_scenario", "scenario_names", "scenario_slug", "Workload", "UsageProfiles"]
