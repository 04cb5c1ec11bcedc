"""The promotion gate: a candidate model replayed against the serving one in the simulator, same
scenario span, same seeds (the same workload and world per seed: paired runs).

The candidate passes only when, over the seeds,

1. **objective**: the cost (``cost_node_hours``, reward.py: lower is better) improves: the mean of the
   paired improvements (current - candidate, per seed) is at least ``margin`` x the current's mean
   cost, and the 95% t interval of that mean (``evaluate.stats.paired_difference``) lies above zero;
2. **safety**: no safety metric is worse:
      oom_kills_total     the candidate's total over the seeds is not above the current's (no tolerance)
      overload_node_frac, latency_p99_ms, pending_p99_s
                          the candidate's mean is not above the current's mean x (1 + safety_tolerance)
                          + the metric's noise floor (``SAFETY_FLOOR``: 0.001 of node samples overloaded,
                          1 ms of P99 latency, 1 s of P99 pending time), so that a metric near zero is not
                          "worse" by one sample

Every number, the per-seed records and the reasons for a refusal are in the gate's result (written to
the version's ``gate.json`` in the registry). With fewer than 2 seeds there is no interval: refused.

The replay runs a scenario span: the one given (default: tiny's test span), or the **recent window of
a history** (``history_replay``): for a history recorded in the simulator, its scenario from the newest
``window`` before its last decision to that decision, as a span ``recent`` (``--set
spans.recent=[a,b]``, in days); for a history of the engine or of a cluster (``import-history``), which
names no scenario, a scenario rebuilt from the history itself on the cluster's nodes
(``lifecycle.rebuild``), its span ``recent``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable

from td3sched.evaluate.stats import paired_difference

OBJECTIVE = "cost_node_hours"
SAFETY_METRICS = ("oom_kills_total", "overload_node_frac", "latency_p99_ms", "pending_p99_s")
TOTAL_METRICS = ("oom_kills_total",)
SAFETY_FLOOR = {"overload_node_frac": 1e-3, "latency_p99_ms": 1.0, "pending_p99_s": 1.0}
"""Absolute slack of each mean-compared safety metric, added to the relative tolerance."""
"""Safety metrics compared by their total over the seeds, with no tolerance."""


@dataclass(frozen=True)
class GateConfig:
    scenario: str = "tiny"
    """Scenario the candidate and the current model are replayed on."""
    span: str = "test"
    """Its span: the test span by default (never the one a model was trained on)."""
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    """Seeds, each run by both (paired)."""
    overrides: tuple[str, ...] = ()
    """Scenario settings (--set)."""
    margin: float = 0.01
    """The mean improvement must be at least this share of the current model's mean cost (1%)."""
    safety_tolerance: float = 0.02
    """A safety metric's mean may exceed the current's by this share at most (not OOM kills)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "overrides", tuple(self.overrides))
        if len(set(self.seeds)) != len(self.seeds) or not self.seeds:
            raise ValueError(f"gate seeds {list(self.seeds)}: expected distinct seeds")
        if not 0 <= self.margin < 1:
            raise ValueError(f"gate margin={self.margin!r}: expected a share of the cost in [0, 1)")
        if not 0 <= self.safety_tolerance < 1:
            raise ValueError(f"gate safety_tolerance={self.safety_tolerance!r}: expected a share in [0, 1)")

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "span": self.span, "seeds": list(self.seeds),
                "overrides": list(self.overrides), "margin": self.margin, "safety_tolerance": self.safety_tolerance}


def decide(current: dict[int, dict], candidate: dict[int, dict], config: GateConfig) -> dict:
    """The gate's verdict from each seed's metrics (``run["metrics"]``) of the current policy and the
    candidate: ``promote``, ``reasons`` (why not), the objective's figures and each safety metric's."""
    seeds = sorted(set(current) & set(candidate))
    reasons = []
    cur_cost = {s: float(current[s][OBJECTIVE]) for s in seeds}
    cand_cost = {s: float(candidate[s][OBJECTIVE]) for s in seeds}
    improvement = paired_difference(cand_cost, cur_cost)  # current - candidate: > 0 is better
    mean_cost = sum(cur_cost.values()) / len(seeds) if seeds else float("nan")
    needed = config.margin * mean_cost
    objective = {"metric": OBJECTIVE, "current_mean": mean_cost,
                 "candidate_mean": sum(cand_cost.values()) / len(seeds) if seeds else None,
                 "improvement_mean": improvement.mean, "improvement_low": improvement.low,
                 "improvement_high": improvement.high, "margin_needed": needed, "seeds": len(seeds)}
    if len(seeds) < 2:
        reasons.append(f"{len(seeds)} paired seed(s): expected at least 2 for an interval")
    else:
        if improvement.mean < needed:
            reasons.append(f"{OBJECTIVE} improves by {improvement.mean:.4g} on average: expected at least the "
                           f"margin {needed:.4g} ({config.margin:.1%} of {mean_cost:.4g})")
        if improvement.low is None or improvement.low <= 0:
            reasons.append(f"{OBJECTIVE} improvement's 95% interval [{improvement.low:.4g}, {improvement.high:.4g}] "
                           "does not lie above zero")
    safety = {}
    for metric in SAFETY_METRICS:
        cur = [float(current[s][metric]) for s in seeds]
        cand = [float(candidate[s][metric]) for s in seeds]
        if metric in TOTAL_METRICS:
            a, b = sum(cur), sum(cand)
            worse = b > a
            rule = "total over the seeds not above the current's"
        else:
            a, b = sum(cur) / max(len(cur), 1), sum(cand) / max(len(cand), 1)
            worse = b > a * (1 + config.safety_tolerance) + SAFETY_FLOOR[metric]
            rule = f"mean not above the current's by more than {config.safety_tolerance:.0%} + {SAFETY_FLOOR[metric]:g}"
        safety[metric] = {"current": a, "candidate": b, "worse": worse, "rule": rule}
        if worse:
            reasons.append(f"{metric} is worse: {b:.4g} against {a:.4g} ({rule})")
    return {"promote": not reasons, "reasons": reasons, "objective": objective, "safety": safety}


RECENT_SPAN = "recent"


def recent_span(history, window_s: float) -> tuple[str, list[str]]:
    """(scenario, overrides) that replay the newest ``window_s`` of a simulator history as the span
    ``recent``; a ``HistoryError`` when the history names no single scenario."""
    import math

    import numpy as np

    from td3sched.lifecycle.history import HistoryError, read_history

    table = read_history(history, ["scenario"])
    scenarios = sorted({s for s in table.column("scenario").to_pylist() if s})
    if len(scenarios) != 1 or table.column("scenario").null_count:
        raise HistoryError(f"history {history}: scenarios {scenarios} (and {table.column('scenario').null_count} "
                           "decisions without one): expected the decisions of one simulated scenario to replay its "
                           "recent window (a cluster's history cannot be replayed yet)")
    last = float(np.max(table.column("time_s").to_numpy()))
    start_day = max(0.0, last - window_s) / 86400.0
    end_day = (math.floor(last) + 1.0) / 86400.0  # the first whole second after the last decision
    return scenarios[0], [f"spans.{RECENT_SPAN}=[{start_day!r},{end_day!r}]"]


def history_replay(history, window_s: float, node_list: dict | None = None, out=None,
                   progress: Callable[[str], None] | None = None) -> tuple[str, str, list[str]]:
    """(scenario, span, overrides) that replay the newest ``window_s`` of ``history``: a simulator
    history's own scenario (``recent_span``); any other history rebuilt into the folder ``out`` on the
    nodes of ``node_list`` (a v1.NodeList; ``lifecycle.rebuild``)."""
    from td3sched.lifecycle.history import HistoryError, read_history
    from td3sched.lifecycle.rebuild import rebuild_scenario

    sources = set(read_history(history, ["source"]).column("source").to_pylist())
    if sources == {"simulator"}:
        scenario, overrides = recent_span(history, window_s)
        return scenario, RECENT_SPAN, overrides
    if node_list is None or out is None:
        raise HistoryError(f"history {history} comes from {', '.join(sorted(sources))}: its window is replayed on a "
                           "scenario rebuilt from it, on the cluster's nodes: expected a node list (--nodes, the "
                           "output of `kubectl get nodes -o json`)")
    rebuilt = rebuild_scenario(history, node_list, out, window_s, progress=progress)
    return rebuilt.scenario, rebuilt.span, []


def _spec(model) -> str:
    """A policy spec: a model folder becomes ``td3:FOLDER``; a spec (``k8s-default``, ``td3:...``) stays."""
    from pathlib import Path

    text = str(model)
    return f"td3:{text}" if Path(text).is_dir() else text


def simulate(job: tuple) -> dict:
    """``run_simulation(scenario, spec, seed, span, overrides)`` of a job tuple: a replay run in a worker
    process (``processes.run_all``) or here."""
    from td3sched.run import run_simulation

    scenario, spec, seed, span, overrides = job
    return run_simulation(scenario, spec, seed, span, list(overrides))


def run_gate(candidate, current, config: GateConfig = GateConfig(),
             progress: Callable[[str], None] | None = None, pool=None, keep=None) -> dict:
    """Replay ``candidate`` and ``current`` (model folders, or any policy spec for the current one) on
    the gate's seeds and decide (``decide``); the result holds the settings and every seed's metrics.
    ``pool``: a process pool the replays run in side by side (the same runs, the same verdict).
    ``keep``: a folder each replay's record is kept in as it finishes, and read back from when the gate
    is run again (``processes.run_all``: a rehearsal's gate, interrupted, goes on)."""
    from td3sched.processes import run_all

    say = progress or (lambda line: None)
    specs = {"candidate": _spec(candidate), "current": _spec(current)}
    runs: dict[str, dict[int, dict]] = {"candidate": {}, "current": {}}
    fingerprints = {}
    order = [(seed, who) for seed in config.seeds for who in ("current", "candidate")]

    def done(i: int, record: dict) -> None:
        seed, who = order[i]
        say(f"seed {seed} {who}: {OBJECTIVE} {record['metrics'][OBJECTIVE]:.4f}, "
            f"wall {record['runtime']['wall_s']:.1f} s")

    records = run_all(simulate, [(config.scenario, specs[who], seed, config.span, tuple(config.overrides))
                                 for seed, who in order], pool, done, keep)
    for (seed, who), record in zip(order, records):
        runs[who][seed] = {k: record["metrics"][k] for k in (OBJECTIVE, *SAFETY_METRICS)}
        fingerprints[who] = record["policy_fingerprint"]
    verdict = decide(runs["current"], runs["candidate"], config)
    return {**verdict, "config": config.to_json(), "candidate": specs["candidate"], "current": specs["current"],
            "fingerprints": fingerprints, "runs": {who: {str(s): m for s, m in r.items()} for who, r in runs.items()},
            "gated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
