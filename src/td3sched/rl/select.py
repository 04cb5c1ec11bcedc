"""Model selection on held-out days: each checkpoint's actor replayed on a validation span, the best kept.

One TD3 training run is not a result: the same command with another seed can end far from where the
first one did (docs/td3.md, *A fragmentation term*). Stable-Baselines3's ``EvalCallback`` keeps the
best model an evaluation env has seen; this module does that with the simulator: at every checkpoint
(and at the last step, and for a run warm-started at a static score, ``TD3Config.anchor``, right after
the actor is fitted to it) the actor is written as a candidate model and run by the harness
(``run.run_simulation``, the path ``evaluate`` measures) on a span of days the training never drew
its episodes from, for the same seeds each time (paired: the same workload and world per seed). The
candidate with the lowest mean objective is the run's selected model.

A run folder trained with a selection span holds, beside ``train``'s files::

    candidates/step-N/   each candidate model (model.pt, model.json; the card's training.selection
                         holds its validation figures)
    best -> candidates/step-N
                         the selected candidate (a symlink, replaced atomically): ``td3:FOLDER/best``
    selection.json       the settings and every candidate's figures (written atomically after each)

The objective is the cost in node-hours (``reward.py``: lower is better); a scenario whose reward
prices no cost ranks by the episode reward (higher is better). A resumed run reads ``selection.json``
back (its settings must match) and first validates the checkpoint's model if the interruption came
between the checkpoint and its validation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from td3sched.processes import spawn_pool, stop_pool
from td3sched.rl.card import write_atomic

SELECTION_FILE = "selection.json"
CANDIDATES = "candidates"
BEST = "best"
OBJECTIVES = (("cost_node_hours", 1.0), ("episode_reward", -1.0))
"""The metric a candidate is ranked by, the first a record has, and its sign (lower is better)."""
REPORTED = ("latency_p99_ms", "oom_kills_total", "overload_node_frac", "pending_p99_s")
"""Safety metrics kept beside the objective, per candidate, for the record (not for the choice)."""


class SelectionError(ValueError):
    """A selection that cannot run or go on, naming the setting and what was expected."""


@dataclass(frozen=True)
class SelectionConfig:
    span: str
    """The validation span: a span of the training scenario (e.g. ``--set spans.validation=[18,21]``)
    that does not overlap the span the episodes are drawn from."""
    seeds: tuple[int, ...] = (1, 2)
    """Seeds each candidate is run with (the same for every candidate: paired)."""
    workers: int = 2
    """Simulations at once (processes); training waits while they run. The result does not depend on it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise SelectionError(f"selection seeds {list(self.seeds)}: expected distinct seeds >= 0, at least one")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise SelectionError(f"selection workers {self.workers!r}: expected an integer >= 1")

    def to_json(self) -> dict:
        return {"span": self.span, "seeds": list(self.seeds)}


def check_held_out(scenario, train_span: str, validation_span: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two spans' [start, end) in days; a SelectionError when the validation span overlaps the
    span the episodes are drawn from (the selection would measure days the policy trained on)."""
    day = 86400.0
    t0, t1 = (x / day for x in scenario.span(train_span))
    v0, v1 = (x / day for x in scenario.span(validation_span))
    if v0 < t1 and t0 < v1:
        raise SelectionError(f"--select-span {validation_span} (days [{v0:g}, {v1:g})) overlaps the training span "
                             f"{train_span} (days [{t0:g}, {t1:g})): expected days the episodes are never drawn from, "
                             f"e.g. --set spans.fit=[{t0:g},{max(t0, v0 - 1):g}] --span fit")
    return (t0, t1), (v0, v1)


def objective_of(metrics: dict) -> tuple[str, float]:
    """(name, value to minimise) of a run's metrics."""
    for name, sign in OBJECTIVES:
        if name in metrics:
            return name, sign * float(metrics[name])
    raise SelectionError(f"a validation run's metrics hold none of {[n for n, _ in OBJECTIVES]}")


def _validate_one(scenario: str, overrides: list[str], span: str, spec: str, seed: int) -> dict:
    from td3sched.run import run_simulation

    record = run_simulation(scenario, spec, seed, span, overrides)
    return {"metrics": record["metrics"], "wall_s": record["runtime"]["wall_s"], "code_version": record["code_version"]}


class Selector:
    """Validates candidates of a training run in ``out`` and keeps the best (module docstring).
    ``__call__(step, agent)`` is ``learn``'s callback: it validates at ``first`` (the warm start of an
    anchored run, so that a run which learns nothing better keeps it), at every ``every`` steps and at
    ``last``. ``say`` receives one line per validated candidate."""

    def __init__(self, out: Path, config: SelectionConfig, settings, every: int, last: int,
                 say: Callable[[str], None] | None = None, first: int | None = None):
        self.out, self.config, self.settings = Path(out), config, settings
        self.every, self.last, self.first = every, last, first
        self.say = say or (lambda line: None)
        self.table: list[dict] = []
        path = self.out / SELECTION_FILE
        if path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            saved = json.loads(path.read_text())
            have, table = saved["selection"], list(saved["candidates"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SelectionError(f"{path}: not a readable selection record ({exc})") from None
        if have != self.config.to_json():
            raise SelectionError(f"{path}: selected with {have}, this run with {self.config.to_json()}: expected the "
                                 "same --select-span and --select-seeds (or another --out)")
        self.table = table

    @property
    def best(self) -> dict | None:
        return min(self.table, key=lambda c: (c["objective"], c["step"])) if self.table else None

    def __call__(self, step: int, agent) -> None:
        if step in (self.first, self.last) or (self.every and step % self.every == 0):
            self.validate(step, agent)

    def catch_up(self, step: int, agent) -> None:
        """On resume: validate the checkpoint's actor if the table lacks its step (a checkpoint is written
        where a candidate is validated, so only an interruption between the two leaves one out)."""
        if step and all(c["step"] != step for c in self.table):
            self.validate(step, agent)

    def validate(self, step: int, agent) -> dict:
        """Write ``agent`` as candidate ``step``, run it on the validation span's seeds, record it, and
        point ``best`` at it if it is the best so far."""
        folder = self.out / CANDIDATES / f"step-{step}"
        card = {**self.settings.to_json(), "training": {"steps": step, "algo": agent.config.algo}}
        agent.save(folder, card)
        s = self.settings
        args = [(s.scenario, list(s.overrides), self.config.span, f"td3:{folder}", seed) for seed in self.config.seeds]
        workers = min(self.config.workers, len(args))
        if workers == 1:
            runs = [_validate_one(*a) for a in args]
        else:
            pool = spawn_pool(workers)
            try:
                runs = list(pool.map(_validate_one, *zip(*args)))
            except BaseException:  # an interrupt or a failed run: stop the others now
                stop_pool(pool)
                raise
            pool.shutdown(wait=True)
        name, _ = objective_of(runs[0]["metrics"])
        values = [objective_of(r["metrics"])[1] for r in runs]
        entry = {"step": step, "metric": name, "objective": sum(values) / len(values),
                 "per_seed": {str(seed): r["metrics"][name] for seed, r in zip(self.config.seeds, runs)},
                 **{m: sum(float(r["metrics"][m]) for r in runs) / len(runs) for m in REPORTED
                    if all(m in r["metrics"] for r in runs)},
                 "wall_s": round(sum(r["wall_s"] for r in runs), 1), "code_version": runs[0]["code_version"]}
        self.table = [c for c in self.table if c["step"] != step] + [entry]
        best = self.best
        # the card says how the candidate did; the best symlink then the record, each atomically
        agent.save(folder, {**card, "training": {**card["training"], "selection": {
            **self.config.to_json(), **{k: entry[k] for k in ("metric", "objective", "per_seed")}}}})
        if best["step"] == step:
            _point(self.out / BEST, Path(CANDIDATES) / f"step-{step}")
        self._write()
        shown = -entry["objective"] if name == "episode_reward" else entry["objective"]
        self.say(f"step {step:,}: validation {name} {shown:,.1f} over seeds "
                 f"{', '.join(map(str, self.config.seeds))} ({self.config.span}); best: step {best['step']:,}")
        return entry

    def _write(self) -> None:
        best = self.best
        record = {"selection": self.config.to_json(), "train_span": self.settings.span,
                  "best": None if best is None else {"step": best["step"], "folder": f"{CANDIDATES}/step-{best['step']}"},
                  "candidates": sorted(self.table, key=lambda c: c["step"])}
        write_atomic(self.out / SELECTION_FILE, (json.dumps(record, indent=2) + "\n").encode())


def _point(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target`` (relative), replacing any old one atomically."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, link)
