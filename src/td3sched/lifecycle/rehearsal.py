"""``td3sched rehearse``: the learning lifecycle rolled day by day through a scenario, against the model
frozen at its start (the non-stationarity experiment of docs/lifecycle.md).

A registry of its own starts with the model serving. Then for each period (a day by default) of the
span rolled through:

1. **Serve.** The serving model runs the period (seed ``seeds[0]``: the cluster's own world), its
   decisions recorded into the rehearsal's history, as a cluster's engine would log them (the period's,
   not its warm-up's, which are days an earlier period served; at most ``lifecycle.history``'s default
   candidates a decision); the other
   seeds replay the same period as other worlds. The frozen model runs the same period on the same
   seeds: paired runs.
2. **Fine-tune.** ``finetune_on_replay`` from the serving model on the replay of the history's newest
   ``window``: the candidate, registered.
3. **Gate.** ``run_gate`` replays the candidate and the serving model on the history's newest
   ``gate_window`` (``gate_seeds``); the verdict is recorded in the registry and a candidate that
   passes is promoted: it serves the next period.

**References** (``references``, policy specs such as ``k8s-default`` or a static score): each runs the same
period on the same seeds, beside the two models, so that the report says what learning is worth against
a score that needs none (paired by period and seed, as frozen and rolling are).

**Without the lifecycle** (``steps`` 0): no history, fine-tune or gate; the model serves every period as
it came, beside the references: a model against them a day at a time, paired by (day, seed), at a third of
the rehearsal's cost.

Each period's row (both models' metrics per seed, the references', the candidate, the gate's verdict and figures) is
appended to ``rows.jsonl`` once the period is done, and a rerun of the same command goes on after the
last row (nothing done is lost on a crash; a period cut short is run again, from the model that
served it, even when the crash came after its candidate's promotion). Within a period, each run's record
is kept in ``runs/`` the moment it finishes (``processes.run_all``), and the candidate once registered
(``candidates/day-<day>.json``): a period cut short runs again only what it lacks, and the runs are
deterministic, so the row is the one an uninterrupted rehearsal writes. On dlrm a period is hours. ``report`` writes
the per-period table (``report.md``) and the figure of the objective and the case study's metrics
(``rehearsal.png``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.reward import COMPONENTS

ROWS_FILE = "rows.jsonl"
SETTINGS_FILE = "rehearsal.json"
RUNS_DIR = "runs"
"""The records of the runs done, one file a run (``processes.run_all``'s ``keep``)."""
OBJECTIVE = "cost_node_hours"
METRICS = (OBJECTIVE, "cpu_util", "fragmentation", "latency_p99_ms", "oom_kills_total", "overload_node_frac",
           "pending_p99_s", "episode_reward", *(f"cost_{part}" for part in COMPONENTS), "latency_breach_hours")
"""Kept per run: the gate's objective, the case study's four metrics, the gate's other safety metrics, the
objective's parts and the hours above the latency SLO (so the cost can be priced again from the rows)."""
MODELS = ("frozen", "rolling")
"""The two models of a period's runs; the references are keyed by their specs beside them."""
PERIOD_SPAN = "period"
"""Period k is the span ``period<k>`` of its runs."""


@dataclasses.dataclass(frozen=True)
class RehearsalConfig:
    scenario: str = "dlrm-small"
    start_day: float = 14.0
    """First day served (the model was trained before it)."""
    end_day: float = 31.0
    """Day the rehearsal ends at (exclusive)."""
    period_days: float = 1.0
    """One serve, fine-tune and gate round per period."""
    seeds: tuple[int, ...] = (1, 2)
    """Seeds each period is served on by both models (the first one is recorded as the history)."""
    window: str = "7d"
    """The fine-tune's window of the history."""
    steps: int = 600
    """The fine-tune's TD3 steps; 0: no fine-tune, history or gate (the model and the references alone)."""
    learning_rate: float = 1e-4
    """The fine-tune's learning rate."""
    gate_window: str = "1d"
    """The window the gate replays (the newest period, by default)."""
    gate_seeds: tuple[int, ...] = (1, 2, 3)
    margin: float = 0.01
    """The gate's margin (a share of the serving model's cost)."""
    overrides: tuple[str, ...] = ()
    """Scenario settings (--set) for every run."""
    references: tuple[str, ...] = ()
    """Policy specs run on each period's seeds beside the two models (none by default)."""

    def __post_init__(self) -> None:
        from td3sched.lifecycle.finetune import parse_window

        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "gate_seeds", tuple(int(s) for s in self.gate_seeds))
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "references", tuple(self.references))
        if len(set(self.references)) != len(self.references) or set(self.references) & set(MODELS):
            raise ValueError(f"rehearsal references {list(self.references)}: expected distinct policy specs, none "
                             f"named {' or '.join(MODELS)}")
        if not (self.period_days > 0 and self.end_day - self.start_day >= self.period_days):
            raise ValueError(f"rehearsal days {self.start_day!r} to {self.end_day!r} by periods of {self.period_days!r} "
                             "day(s): expected a span of at least one positive period (--days, --period)")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"rehearsal seeds {list(self.seeds)}: expected distinct seeds")
        if not (isinstance(self.steps, int) and (self.steps == 0 or self.steps >= 2)):
            raise ValueError(f"rehearsal steps {self.steps!r}: expected 0 (no fine-tune) or a whole number >= 2")
        parse_window(self.window)
        parse_window(self.gate_window)

    def periods(self) -> list[tuple[float, float]]:
        n = int(math.floor((self.end_day - self.start_day) / self.period_days + 1e-9))
        return [(self.start_day + k * self.period_days, self.start_day + (k + 1) * self.period_days) for k in range(n)]

    def to_json(self) -> dict:
        """The settings a rehearsal's folder keeps (``references`` only when there are any, so that a folder
        written before they existed goes on with the same settings)."""
        data = {**dataclasses.asdict(self), "seeds": list(self.seeds), "gate_seeds": list(self.gate_seeds),
                "overrides": list(self.overrides), "references": list(self.references)}
        if not self.references:
            del data["references"]
        return data

    def check_references(self) -> None:
        """A ValueError naming a reference no policy answers to (before any period runs)."""
        from td3sched.policy import make_policy
        from td3sched.search.best_static import resolve_policy

        for spec in self.references:
            try:
                make_policy(resolve_policy(spec, self.scenario, list(self.overrides))[1])
            except (ValueError, FileNotFoundError) as exc:
                raise ValueError(f"rehearsal reference {spec!r}: {exc}") from None


def read_rows(out) -> list[dict]:
    path = Path(out) / ROWS_FILE
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a crash is the last one: its period runs again
            if n != len(lines):
                raise ValueError(f"{path}: line {n} is not JSON: expected one period's row a line")
    return rows


def _append_row(out: Path, row: dict) -> None:
    with open(out / ROWS_FILE, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _metrics(record: dict) -> dict:
    return {k: record["metrics"][k] for k in METRICS}


def _serve(job: tuple) -> dict:
    """One of a period's runs, in a worker process or here: ``("record", ...)`` records its decisions into
    the history folder (the serving model on the period's first seed), ``("run", ...)`` only runs."""
    from td3sched.lifecycle.gate import simulate
    from td3sched.lifecycle.record import record_simulation

    kind, scenario, spec, seed, span, overrides, history = job
    if kind == "record":  # the period alone: its warm-up is days an earlier period served
        return record_simulation(scenario, spec, seed, span, history, list(overrides), warmup=False)[0]
    return simulate((scenario, spec, seed, span, overrides))


def rehearse(model, out, config: RehearsalConfig = RehearsalConfig(),
             progress: Callable[[str], None] | None = None, workers: int = 1) -> list[dict]:
    """Roll the lifecycle through ``config``'s periods from the model folder ``model`` into the folder
    ``out`` (see the module's docstring); the rows of every period done. ``workers`` > 1: a period's runs
    and the gate's replays run side by side in that many processes (the same runs: the same rows)."""
    from td3sched.processes import optional_pool

    with optional_pool(workers) as pool:
        return _rehearse(model, out, config, progress, pool)


def _rehearse(model, out, config: RehearsalConfig, progress: Callable[[str], None] | None, pool) -> list[dict]:
    from td3sched.lifecycle.finetune import finetune_on_replay, parse_window
    from td3sched.lifecycle.gate import GateConfig, history_replay, run_gate
    from td3sched.lifecycle.registry import Registry
    from td3sched.processes import run_all
    from td3sched.run import code_version

    say = progress or (lambda line: None)
    config.check_references()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"model": str(model), "config": config.to_json()}
    saved = out / SETTINGS_FILE
    if saved.is_file():
        before = json.loads(saved.read_text())
        if {k: before.get(k) for k in settings} != settings:
            raise ValueError(f"{out} holds a rehearsal of other settings ({saved}): expected the same model and "
                             "settings to go on with it, or a new --out")
    else:
        saved.write_text(json.dumps({**settings, "code_version": code_version()}, indent=2) + "\n")
    registry = Registry(out / "registry")
    frozen = registry.register(model)
    history = out / "history"
    rows = read_rows(out)
    done = {round(r["day"], 9) for r in rows}
    for k, (day, end) in enumerate(config.periods()):
        if round(day, 9) in done:
            continue
        t0 = time.perf_counter()
        serving = serving_after(rows, frozen)
        if registry.serving() != serving:  # the start, or a crash between a promotion and its period's row
            registry.promote(serving, require_gate=False)
        span = f"{PERIOD_SPAN}{k}"  # a span a period: the history's file names differ by it
        period = [*config.overrides, f"spans.{span}=[{day!r},{end!r}]"]
        row: dict = {"day": day, "end_day": end, "serving": serving, "frozen": frozen, "runs": {}}
        # each seed: the serving model (seed 1 recorded into the history), the frozen one (the same run while
        # it serves: the same model on the same world), the references
        policies = {"rolling": f"td3:{registry.folder(serving)}",
                    **({} if serving == frozen else {"frozen": f"td3:{registry.folder(frozen)}"}),
                    **{spec: spec for spec in config.references}}
        keys = [(seed, who) for seed in config.seeds for who in policies]
        records = dict(zip(keys, run_all(_serve, [
            ("record" if config.steps and seed == config.seeds[0] and who == "rolling" else "run", config.scenario,
             policies[who], seed, span, tuple(period), history) for seed, who in keys], pool, keep=out / RUNS_DIR)))
        for seed in config.seeds:
            runs = {"rolling": _metrics(records[seed, "rolling"])}
            runs["frozen"] = _metrics(records[seed, "frozen"]) if "frozen" in policies else runs["rolling"]
            runs.update({spec: _metrics(records[seed, spec]) for spec in config.references})
            row["runs"][str(seed)] = runs
            say(f"day {day:g} seed {seed}: {OBJECTIVE} frozen {runs['frozen'][OBJECTIVE]:.2f}, rolling "
                f"{runs['rolling'][OBJECTIVE]:.2f} (serving {serving})"
                + "".join(f", {spec} {runs[spec][OBJECTIVE]:.2f}" for spec in config.references))
        if config.steps and end < config.end_day - 1e-9:  # the last period's candidate would serve nothing
            candidate, training = _finetuned(out, day, registry, lambda folder: finetune_on_replay(
                history, registry.folder(serving), folder, config.window, config.learning_rate, config.steps,
                seed=int(day * 1000) + 1))
            scenario, recent_span, recent = history_replay(history, parse_window(config.gate_window))
            gate = run_gate(registry.folder(candidate), registry.folder(serving),
                            GateConfig(scenario, recent_span, config.gate_seeds, (*config.overrides, *recent),
                                       config.margin),
                            progress=say, pool=pool, keep=out / RUNS_DIR)
            registry.record_gate(candidate, gate)
            if gate["promote"]:
                registry.promote(candidate)
            o = gate["objective"]
            row.update(candidate=candidate, finetune=training,
                       gate={"promote": gate["promote"], "reasons": gate["reasons"], "current_mean": o["current_mean"],
                             "candidate_mean": o["candidate_mean"], "improvement_low": o["improvement_low"],
                             "improvement_high": o["improvement_high"]})
            say(f"day {day:g}: candidate {candidate} " + ("promoted" if gate["promote"] else
                                                          "refused: " + "; ".join(gate["reasons"])))
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        _append_row(out, row)
        rows.append(row)
    return rows


def _finetuned(out: Path, day: float, registry, finetune: Callable[[Path], dict]) -> tuple[str, dict]:
    """(version, training summary) of the period's candidate: the one registered before a crash, else
    ``finetune(folder)`` into ``candidates/day-<day>/`` (a folder left by a crash mid-training is
    trained again, from the same seed), registered and noted in ``candidates/day-<day>.json``."""
    import shutil

    from td3sched.lifecycle.registry import RegistryError
    from td3sched.outputs import write_json_atomic

    folder = out / "candidates" / f"day-{day:g}"
    note = folder.with_name(f"{folder.name}.json")
    if note.is_file():
        kept = json.loads(note.read_text())
        try:
            registry.folder(kept["candidate"])
            return kept["candidate"], kept["finetune"]
        except RegistryError:
            pass  # noted, not registered (a registry restored from before): trained again
    if folder.exists():
        shutil.rmtree(folder)
    training = finetune(folder)
    candidate = registry.register(folder)
    summary = {"episodes": training["episodes"], "wall_s": training["wall_s"]}
    write_json_atomic(note, {"candidate": candidate, "finetune": summary})
    return candidate, summary


def serving_after(rows: list[dict], frozen: str) -> str:
    """The version that serves after the periods of ``rows``: the last candidate promoted, else the
    last period's serving one, else the frozen model."""
    if not rows:
        return frozen
    last = rows[-1]
    return last["candidate"] if last.get("gate", {}).get("promote") else last["serving"]


def mean_by_day(rows: list[dict], who: str, metric: str) -> np.ndarray:
    return np.array([np.mean([r["runs"][s][who][metric] for s in r["runs"]]) for r in rows])


def cost_by_run(rows: list[dict], who: str) -> dict:
    """(day, seed) -> the objective of ``who``'s run (a model, "frozen" or "rolling", or a reference's spec)."""
    return {(r["day"], s): r["runs"][s][who][OBJECTIVE] for r in rows for s in r["runs"]}


def report(out, rows: list[dict] | None = None) -> tuple[Path, Path]:
    """Write ``report.md`` (a row per period, the totals) and ``rehearsal.png`` into ``out``."""
    from td3sched.evaluate.stats import paired_difference

    out = Path(out)
    rows = read_rows(out) if rows is None else rows
    if not rows:
        raise ValueError(f"{out}: no period done yet: expected {ROWS_FILE} with at least one row")
    settings = json.loads((out / SETTINGS_FILE).read_text())
    references = settings["config"].get("references", [])
    lines = [f"# Lifecycle rehearsal: {settings['config']['scenario']}, days {rows[0]['day']:g} to "
             f"{rows[-1]['end_day']:g}", "",
             f"Code version: `{settings.get('code_version')}`.", "",
             f"Frozen model: version `{rows[0]['frozen']}` (its content's hash, as the registry names it); settings: "
             f"`{json.dumps(settings['config'])}`.", "",
             "Means over the seeds. Cost: node-hours of the objective (lower is better).", "",
             "| day | serving | cost frozen | cost rolling | " + "".join(f"cost {spec} | " for spec in references)
             + "cpu_util frozen / rolling | fragmentation frozen / rolling | P99 ms frozen / rolling | OOM frozen / "
             "rolling | gate |",
             "| ---: | --- | ---: | ---: | " + "---: | " * len(references) + "---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        def pair(metric: str, fmt: str) -> str:
            f, g = (mean_by_day([r], who, metric)[0] for who in ("frozen", "rolling"))
            return f"{f:{fmt}} / {g:{fmt}}"
        gate = r.get("gate")
        verdict = "-" if gate is None else ("promoted" if gate["promote"] else "refused") + (
            "" if gate["improvement_low"] is None else
            f" [{gate['improvement_low']:.1f}, {gate['improvement_high']:.1f}]")
        lines.append(f"| {r['day']:g} | {r['serving']} | {mean_by_day([r], 'frozen', OBJECTIVE)[0]:.1f} | "
                     f"{mean_by_day([r], 'rolling', OBJECTIVE)[0]:.1f} | "
                     + "".join(f"{mean_by_day([r], spec, OBJECTIVE)[0]:.1f} | " for spec in references)
                     + f"{pair('cpu_util', '.4f')} | "
                     f"{pair('fragmentation', '.4f')} | {pair('latency_p99_ms', '.1f')} | "
                     f"{pair('oom_kills_total', '.1f')} | {verdict} |")
    lines += ["", "Over the periods and seeds: the cost and the OOM kills summed, the other metrics' means:", "",
              "| policy | cost | cpu_util | fragmentation | P99 ms | OOM kills | overload | hours above the SLO |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    served = MODELS if any(r["serving"] != r["frozen"] for r in rows) else ("frozen",)  # else the same runs
    for who in (*served, *references):
        runs = [r["runs"][s][who] for r in rows for s in r["runs"]]
        kept = all("latency_breach_hours" in m for m in runs)  # not in rows written before the rows kept it
        hours = f"{sum(m['latency_breach_hours'] for m in runs):,.1f}" if kept else "-"
        lines.append(f"| {who if who in MODELS else f'`{who}`'} | {sum(m[OBJECTIVE] for m in runs):,.1f} | "
                     f"{np.mean([m['cpu_util'] for m in runs]):.4f} | "
                     f"{np.mean([m['fragmentation'] for m in runs]):.4f} | "
                     f"{np.mean([m['latency_p99_ms'] for m in runs]):.1f} | "
                     f"{sum(m['oom_kills_total'] for m in runs):,.0f} | "
                     f"{np.mean([m['overload_node_frac'] for m in runs]):.4f} | {hours} |")
    frozen, rolling = cost_by_run(rows, "frozen"), cost_by_run(rows, "rolling")
    diff = paired_difference(rolling, frozen)  # frozen - rolling: saved
    promoted = sum(1 for r in rows if r.get("gate", {}).get("promote"))
    gated = sum(1 for r in rows if r.get("gate"))
    if references:
        lines += ["", "Against the references, per (period, seed) (negative: the model costs less):", ""]
    for spec in references:
        ref = cost_by_run(rows, spec)
        to_frozen, to_rolling = paired_difference(ref, frozen), paired_difference(ref, rolling)
        lines.append(f"- `{spec}`: total {sum(ref.values()):.1f}; frozen - it {to_frozen.mean:+.2f} "
                     f"{_interval(to_frozen)}, rolling - it {to_rolling.mean:+.2f} {_interval(to_rolling)}.")
    if settings["config"]["steps"] == 0:
        lines += ["", f"No fine-tune (steps 0): the model served every period as it came; {len(frozen)} (period, seed) "
                  "pairs."]
    else:
        lines += ["", f"Total cost: frozen {sum(frozen.values()):.1f}, rolling {sum(rolling.values()):.1f}; per "
                  f"(period, seed), rolling saves {diff.mean:.2f} on average, 95% interval " + _interval(diff)
                  + f" ({len(frozen)} pairs). Candidates promoted: {promoted} of {gated}."]
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    png = out / "rehearsal.png"
    _figure(rows, png, references)
    return md, png


def _interval(d) -> str:
    """A paired difference's 95% interval, ``[low, high]`` (``none`` without one: a single pair)."""
    return "none" if d.low is None else f"[{d.low:.2f}, {d.high:.2f}]"


def _figure(rows: list[dict], path: Path, references=()) -> None:
    from td3sched.evaluate.plots import _figure as figure, _save

    panels = ((OBJECTIVE, "cost (node-hours)"), ("cpu_util", "CPU utilisation"), ("fragmentation", "fragmentation"),
              ("latency_p99_ms", "P99 latency (ms)"), ("oom_kills_total", "OOM kills"))
    fig = figure(9.0, 9.0)
    axes = fig.subplots(len(panels), 1, sharex=True)
    days = np.array([r["day"] for r in rows])
    for ax, (metric, label) in zip(axes, panels):
        for who, colour in (("frozen", "#888888"), ("rolling", "#1f77b4")):
            ax.plot(days, mean_by_day(rows, who, metric), marker="o", ms=3, color=colour, label=who)
        for spec in references:
            ax.plot(days, mean_by_day(rows, spec, metric), ls="--", lw=1.0, label=spec)
        promoted = [r["end_day"] for r in rows if r.get("gate", {}).get("promote")]
        for d in promoted:
            ax.axvline(d, color="#2ca02c", lw=0.8, ls=":")
        ax.set_ylabel(label)
    axes[0].legend(loc="best", fontsize=8)
    axes[0].set_title("frozen model vs daily fine-tuning and gating (dotted: a promotion serves from there)")
    axes[-1].set_xlabel("day of the scenario")
    _save(fig, path)
