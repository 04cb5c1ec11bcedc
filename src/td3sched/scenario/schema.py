"""The schema of a scenario: what a scenario file and ``--set`` may say, with types, ranges and units.

A scenario file (``scenarios/NAME.yaml``) is validated against ``ScenarioSpec``; every ``--set
key=value`` is applied to the file's content first, so an override meets the same check as the file.
The simulator's sections are the simulator's own config classes (``LatencyModel``, ``Autoscaler``,
``QueueConfig``, ``Kubelet``, ``RewardConfig``, ``FragmentationConfig`` and ``SimConfig``'s own
fields for ``simulator:``): their defaults, ranges (``td3sched.quantities``) and descriptions (the
field docstrings) are declared once, there. What is declared here is what only a scenario has:
its days and spans, its workload and its nodes.

``resolve`` turns a file's content and the overrides into the validated configuration, or raises
``ScenarioError`` with one line naming the key, the value, where it came from and what is allowed:

    --set latency.rho_cap=1.5: expected a number in (0, 1)
    --set nodes.count=800: unknown key 'count' in nodes; expected one of: pools
"""

from __future__ import annotations

import copy
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, ValidationError,
                      WithJsonSchema, create_model, model_validator)
from pydantic_core import PydanticCustomError

from td3sched.metrics.fragmentation import FragmentationConfig
from td3sched.quantities import (SETTINGS, Allowed, CountOrZero, Flag, Hours, HoursOrZero, Positive, Share, Weight,
                                 allowed, number)
from td3sched.reward import RewardConfig
from td3sched.simulator.cluster import NodeShape
from td3sched.simulator.config import Autoscaler, Kubelet, LatencyModel, SimConfig
from td3sched.simulator.queue import QueueConfig

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
"""The shipped scenario files (NAME.yaml) and the tiny scenario's workload files."""
SIM_SECTIONS = {"latency": LatencyModel, "autoscaler": Autoscaler, "queue": QueueConfig, "kubelet": Kubelet}
"""Sections of a scenario that are fields of ``SimConfig``."""


class ScenarioError(ValueError):
    """A scenario or an override that does not fit the schema; the message is one line."""


class SettingError(ValueError):
    """A rule across fields, raised inside validation; ``key`` is the setting it names, ``also`` the
    others it involves (an override of any of them is named as the cause)."""

    def __init__(self, key: str, text: str, also: tuple[str, ...] = ()):
        super().__init__(text)
        self.key = key
        self.also = also


class Section(BaseModel):
    model_config = ConfigDict(**SETTINGS, frozen=True)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PydanticCustomError("setting", "expected {expected}", {"expected": "non-empty text"})
    return value


Text = Annotated[str, PlainValidator(_text), WithJsonSchema({"type": "string", "minLength": 1}), Allowed("text")]


class DlrmWorkload(Section):
    """Alibaba's DLRM serving instances (cluster-trace-gpu-v2025); needs node pools named cpu and gpu."""

    kind: Literal["dlrm"]
    sample: number(0, 1, lo_open=True) = 1.0
    """Keep this share of the DLRM instances, drawn per seed (1: all of them). With the node pools scaled by
    the same share, a smaller dlrm that loads its pools as dlrm does (the dlrm-small scenario)."""


class OpenbWorkload(Section):
    """A Poisson stream of openb pod shapes (cluster-trace-gpu-v2023) at a target load."""

    kind: Literal["openb"]
    target_load: number(0, 1.5, lo_open=True)
    """Steady-state load of the most demanded resource (CPU, memory or GPU) of the nodes."""
    request_fraction: Share
    """Burstable requests = this x the openb shape."""
    lifetime_cap_h: Positive
    """Pod lifetimes are capped at this many hours."""
    daily_shape: Flag = True
    """Modulate the arrival rate by the Alibaba 2018 mean day."""


class FilesWorkload(Section):
    """A workload saved as files (pods.csv.gz and profiles.npz), as the shipped tiny scenario."""

    kind: Literal["files"]
    path: Text
    """Folder of the files: relative to the scenarios folder (a scenario file elsewhere: to its own folder), or
    absolute."""
    cpu_spread: number(0, 3) = 0.0
    """Per seed, each pod's CPU, disk and network sizes are multiplied by one lognormal draw of mean 1 and this
    sigma: how far pods' usage spreads around the sizes the files hold (0: the files' sizes, whatever the seed)."""
    mem_spread: number(0, 3) = 0.0
    """The same for each pod's memory size, an independent draw."""

    @model_validator(mode="after")
    def _has_files(self) -> "FilesWorkload":
        folder = SCENARIO_DIR / self.path
        missing = [name for name in ("pods.csv.gz", "profiles.npz") if not (folder / name).is_file()]
        if missing:
            raise SettingError("path", f"{folder} has no {' or '.join(missing)}: expected a folder holding "
                                       "pods.csv.gz and profiles.npz")
        return self


class Batch(Section):
    """The batch stream mixed into a dlrm workload: openb CPU-only pods on the cpu pool."""

    enabled: Flag = False
    """Add the batch stream."""
    share: number(0, 1, lo_open=True, hi_open=True)
    """Steady-state CPU size of the stream as a share of the cpu pool's allocatable CPU."""
    request_fraction: Share
    """Burstable requests = this x the openb shape, limits = the shape."""
    lifetime_cap_h: Positive
    """Pod lifetimes are capped at this many hours."""


_COUNTS = {
    "count": (CountOrZero, Field(description="Nodes at the start.")),
    "max_count": (CountOrZero | None, Field(None, description="Node slots the autoscaler may fill "
                                                              "(default: count).")),
    "min_count": (CountOrZero, Field(0, description="Nodes the autoscaler keeps at least.")),
}


def _pool_counts(pool):
    top = pool.count if pool.max_count is None else pool.max_count
    if not pool.min_count <= pool.count <= top:
        raise SettingError("count", f"expected min_count ({pool.min_count}) <= count ({pool.count}) <= max_count "
                                    f"({top})", also=("min_count", "max_count"))
    return pool


PoolSpec = create_model(
    "PoolSpec", __base__=Section, __doc__="A homogeneous node pool: its node counts and one node's shape.",
    __validators__={"_counts": model_validator(mode="after")(_pool_counts)}, **_COUNTS,
    **{name: (info.annotation, info) for name, info in NodeShape.__pydantic_fields__.items()})


class PooledNodes(Section):
    """Node pools declared in the file, each of one node shape."""

    pools: dict[str, PoolSpec] = Field(min_length=1)
    """Pool name -> pool."""


class OpenbNodes(Section):
    """The nodes of Alibaba's openb cluster (openb_node_list_all_node.csv), with documented assumptions
    for what the list does not give."""

    source: Literal["openb"]
    count: CountOrZero | None = None
    """Nodes: fewer than the list, a seeded sample; more, seeded draws with replacement (default: the list)."""
    disk_gib: Positive
    """Local disk of every node, in GiB."""
    rdma_pct: Positive
    """RDMA bandwidth, in percent of one NIC."""
    disk_mbps_per_core: Positive
    """Disk bandwidth per CPU core, in MB/s."""
    net_mbps_per_core: Positive
    """Network bandwidth per CPU core, in Mbit/s."""
    overhead_cpu_milli: Weight
    """CPU the system uses beyond the pods, in milli-cores."""
    overhead_mem_mib: Weight
    """Memory the system uses beyond the pods, in MiB."""


def _nodes_kind(value: Any) -> str:
    source = value.get("source") if isinstance(value, dict) else getattr(value, "source", None)
    return "pools" if source is None else "source"


Workload = Annotated[Union[DlrmWorkload, OpenbWorkload, FilesWorkload], Field(discriminator="kind")]
Nodes = Annotated[Union[Annotated[PooledNodes, Tag("pools")], Annotated[OpenbNodes, Tag("source")]],
                  Discriminator(_nodes_kind)]


def _span(value: Any) -> tuple[float, float]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and x == x for x in value)
    if not ok or not 0 <= value[0] < value[1]:
        raise PydanticCustomError("setting", "expected {expected}",
                                  {"expected": "[first day, end day] with 0 <= first < end, e.g. [0, 21]"})
    return float(value[0]), float(value[1])


Span = Annotated[tuple[float, float], PlainValidator(_span),
                 WithJsonSchema({"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2,
                                 "maxItems": 2}), Allowed("[first day, end day]")]

class StaticSearch(Section):
    """How `td3sched search-static` builds its evaluation windows for this scenario when its command line
    does not say (docs/policies.md). A scenario whose placements take effect over long pod lives needs
    windows that start from a warmed-up cluster, as `evaluate` starts a span."""

    window_h: Hours | None = None
    """Length of an evaluation window, in hours; null: a 24th of the train span, within 1 to 6 hours."""
    warmup_h: HoursOrZero = 0.0
    """Each window starts from the state the candidate reaches after this many hours under itself; 0:
    from the trace's state at the window's start (an empty cluster)."""


_NESTED = set(SIM_SECTIONS)
SimulatorSection = create_model(
    "SimulatorSection", __base__=Section, __doc__=SimConfig.__doc__ or "The simulator's own constants.",
    **{name: (info.annotation, info) for name, info in SimConfig.__pydantic_fields__.items() if name not in _NESTED})


class ScenarioSpec(Section):
    """A scenario: a cluster, a workload, the span names, and the simulator's settings."""

    name: Text
    """The scenario's name (the file's name without .yaml)."""
    description: str = ""
    """One line for `td3sched scenarios`."""
    days: Positive
    """Length of the scenario, in days."""
    spans: dict[str, Span] = Field(default_factory=dict)
    """Named spans, [first day, end day) from the start; `full` is always the whole scenario."""
    workload: Workload
    """Where the pods come from."""
    batch: Batch | None = None
    """The batch stream of a dlrm workload."""
    nodes: Nodes
    """The cluster's nodes."""
    simulator: SimulatorSection = Field(default_factory=SimulatorSection)
    """The simulator's constants (ticks, calibration, thresholds)."""
    latency: LatencyModel = Field(default_factory=LatencyModel)
    """The latency model of latency-sensitive pods."""
    autoscaler: Autoscaler = Field(default_factory=Autoscaler)
    """cluster-autoscaler's settings."""
    queue: QueueConfig = Field(default_factory=QueueConfig)
    """kube-scheduler's scheduling queue settings."""
    kubelet: Kubelet = Field(default_factory=Kubelet)
    """The kubelet's restart back-off and eviction settings."""
    fragmentation: FragmentationConfig = Field(default_factory=FragmentationConfig)
    """The fragmentation metric's typical pods."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """The reward's weights."""
    search: StaticSearch = Field(default_factory=StaticSearch)
    """The static-weights search's default windows."""

    @model_validator(mode="after")
    def _consistent(self) -> "ScenarioSpec":
        if "full" in self.spans:
            raise SettingError("spans.full", "'full' is the whole scenario; name the span otherwise")
        if self.workload.kind == "dlrm":
            have = set(self.nodes.pools) if isinstance(self.nodes, PooledNodes) else set()
            if not {"cpu", "gpu"} <= have:
                raise SettingError("nodes", f"a dlrm workload needs node pools named cpu and gpu; have: "
                                            f"{', '.join(sorted(have)) or 'none'}")
        try:
            self.sim_config()
        except ValidationError as exc:
            raise SettingError("simulator", exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self

    def sim_config(self) -> SimConfig:
        return SimConfig(**dict(self.simulator), **{k: getattr(self, k) for k in SIM_SECTIONS})


# --- overrides and errors ------------------------------------------------------------------------------

def parse_override(assignment: str) -> tuple[list[str], Any, str]:
    """``dotted.key=value`` -> (key parts, value parsed as YAML, raw value)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment}: expected key=value, e.g. latency.slo_factor=3")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(p.strip() for p in parts):
        raise ScenarioError(f"--set {assignment}: expected a dotted key such as latency.slo_factor")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        reason = str(exc).splitlines()[0]
        raise ScenarioError(f"--set {assignment}: the value is not valid YAML ({reason})") from None
    return [p.strip() for p in parts], value, raw


def apply_override(config: dict, assignment: str) -> None:
    """Set one ``dotted.key=value`` in the raw ``config`` (sections are made as needed); the schema
    checks the result."""
    parts, value, _ = parse_override(assignment)
    node = config
    for i, part in enumerate(parts[:-1]):
        if part not in node or node[part] is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ScenarioError(f"--set {assignment}: {'.'.join(parts[: i + 1])} is {_show(node[part])}, "
                                "not a section")
        node = node[part]
    node[parts[-1]] = value


def resolve(raw: dict, overrides: tuple[str, ...] | list[str] = (), source: str = "scenario") -> dict:
    """The validated configuration of a scenario file's content ``raw`` with ``overrides`` applied
    (every key and section, defaults filled in); ScenarioError names the first bad setting."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: expected key: value pairs, got {_show(raw)}")
    config = copy.deepcopy(raw)
    for assignment in overrides:
        apply_override(config, assignment)
    try:
        spec = ScenarioSpec.model_validate(config)
    except ValidationError as exc:
        raise ScenarioError(describe(exc, config, overrides, source)) from None
    return spec.model_dump(exclude_none=True)


def _show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(t: Any) -> Any:
    while typing.get_origin(t) is Annotated:
        t = typing.get_args(t)[0]
    if typing.get_origin(t) in (Union, types.UnionType):
        members = [m for m in typing.get_args(t) if m is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return t


def _fields(t: Any) -> dict | None:
    return getattr(t, "__pydantic_fields__", None)


def _variant(t: Any, tag: str) -> Any:
    for m in typing.get_args(t):
        meta = typing.get_args(m)[1:] if typing.get_origin(m) is Annotated else ()
        if any(isinstance(x, Tag) and x.tag == tag for x in meta):
            return _unwrap(m)
        fields = _fields(_unwrap(m)) or {}
        kind = fields.get("kind")
        if kind is not None and tag in typing.get_args(kind.annotation):
            return _unwrap(m)
    return None


def _walk(loc: tuple) -> tuple[list[str], Any]:
    """The printed key of an error location (union tags dropped) and the type found there."""
    t, key = ScenarioSpec, []
    for part in loc:
        t = _unwrap(t)
        fields = _fields(t)
        if typing.get_origin(t) in (Union, types.UnionType):
            t = _variant(t, str(part))
            continue
        if fields is not None:
            key.append(str(part))
            t = fields[part].annotation if part in fields else None
        elif typing.get_origin(t) is dict:
            key.append(str(part))
            t = typing.get_args(t)[1]
        else:
            key.append(str(part))
            t = None
    return key, _unwrap(t)


def describe(exc: ValidationError, config: dict, overrides, source: str) -> str:
    """One line for the first error of ``exc``: where it came from, the key, the value, what is allowed."""
    errors = exc.errors()
    e = errors[0]
    kind = e["type"]
    loc = tuple(e["loc"])
    key, _ = _walk(loc)
    value = e.get("input")
    shown = True  # the line shows key=value
    related: list[str] = []  # other settings a rule across fields involves
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        _, parent = _walk(loc[:-1])
        allowed = ", ".join(_fields(parent) or ()) or "nothing"
        text = f"unknown key {key[-1]!r} in {'.'.join(key[:-1]) or 'a scenario'}; expected one of: {allowed}"
        shown = False
    elif kind in ("missing", "missing_argument"):
        text, shown = "required, missing", False
    elif kind == "union_tag_invalid":
        key.append(e["ctx"]["discriminator"].strip("'"))
        value = e["ctx"]["tag"]
        text = f"expected one of {e['ctx']['expected_tags']}"
    elif kind == "union_tag_not_found":
        text, shown = f"missing its {e['ctx']['discriminator']}", False
    elif kind == "value_error" and isinstance(e.get("ctx", {}).get("error"), SettingError):
        err = e["ctx"]["error"]
        related = [".".join(key + k.split(".")) for k in err.also]
        key = key + err.key.split(".")
        text, shown = str(err), False
    elif kind == "value_error":
        text, shown = e["msg"].removeprefix("Value error, "), False
    elif kind in ("dict_type", "model_type", "dataclass_type", "model_attributes_type"):
        text = "expected a section of key: value pairs"
    elif kind == "literal_error":
        text = f"expected {e['ctx']['expected']}"
    else:
        text = e["msg"].removeprefix("Value error, ")
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    dotted = ".".join(key)
    if shown:
        line = f"{dotted}={_show(value)}: {text}"
    else:
        line = text if kind in ("extra_forbidden", "unexpected_keyword_argument") or not dotted else f"{dotted}: {text}"
    for assignment in reversed(list(overrides)):
        set_key = ".".join(p.strip() for p in assignment.split("=", 1)[0].split("."))
        if dotted == set_key and shown:
            return f"--set {assignment}: {text}"  # the override shows the key and the value
        if any(k == set_key or k.startswith(set_key + ".") or set_key.startswith(k + ".") for k in [dotted, *related]):
            return f"--set {assignment}: {line}"
    return f"{source}: {line}"


# --- the resolved scenario, for people ----------------------------------------------------------------

def _first_sentence(text: str | None) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def to_yaml(config: dict) -> str:
    """A resolved configuration as YAML, each setting followed by the first sentence of its description."""
    lines: list[str] = []

    def emit(node: dict, t: Any, indent: int) -> None:
        t = _unwrap(t)
        if typing.get_origin(t) in (Union, types.UnionType):
            t = _variant(t, node.get("kind") or _nodes_kind(node))
        fields = _fields(t)
        for key, value in node.items():
            if fields is not None:
                info = fields.get(key)
                child, doc = (info.annotation, _first_sentence(info.description)) if info else (None, "")
                if info is not None and allowed(info.metadata):
                    doc = f"({allowed(info.metadata)}) {doc}".strip()
            elif typing.get_origin(t) is dict:
                child, doc = typing.get_args(t)[1], ""
            else:
                child, doc = None, ""
            pad = "  " * indent
            if isinstance(value, dict):
                lines.append(f"{pad}{key}:" + (f"  # {doc}" if doc else ""))
                emit(value, child, indent + 1)
            else:
                shown = yaml.safe_dump(list(value) if isinstance(value, tuple) else value,
                                       default_flow_style=True, width=10**6).strip().removesuffix("\n...")
                shown = shown.removesuffix("...").strip()
                lines.append(f"{pad}{key}: {shown}" + (f"  # {doc}" if doc else ""))

    emit(config, ScenarioSpec, 0)
    return "\n".join(lines) + "\n"
