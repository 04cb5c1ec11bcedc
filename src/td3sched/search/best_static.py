"""``best-static``: the static-weights arguments (weights on the simplex, target utilisation tau)
with the highest episode reward (``reward.py``) on a scenario's train span. ``best-static-seed`` is
the same search with tau fixed at 0, the reference design's idle-weighted score.

Method (successive halving over a grid, within a wall-clock budget):

1. **Windows.** ``max_windows`` windows of ``window_h`` hours inside the train span (fewer when it has
   fewer distinct hourly starts; the ladder then ends at the windows there are). Window k starts
   at the k-th point of the base-2 van der Corput sequence (0, 1/2, 1/4, 3/4, 1/8, ...) across the
   span, floored to the hour, so that every prefix of the list is spread over the span. Default
   ``window_h``: the scenario's ``search.window_h``, else a 24th of the train span, clipped to [1, 6]
   hours. With ``warmup_h`` (default: the scenario's ``search.warmup_h``, 0 unless it says) each window
   starts from the state the candidate reaches after that many hours before it (as ``evaluate`` runs a
   span), and the windows are placed at least that far into the trace; without it a window starts from
   an empty cluster.
2. **Grid.** Weights: every point of the simplex whose coordinates are multiples of ``step``; tau:
   ``tau_values`` (0, 0.2, ..., 1), or only ``tau_fixed``; with ``ceiling_values`` (default none: no
   hold-back) every weights-and-tau point once per hold-back ceiling (``static-weights:...:ceiling=c``,
   "none" for no ceiling; the variant's name then ends in ``-ceiling``); plus one anchor, static-weights' default
   (equal weights at the lowest tau) when the grid lacks it. With ``step = auto`` the grid is the
   finest of steps 0.2, 0.25 and 0.5 whose whole ladder (3), timed by pilot runs of simplex
   vertices, fits the budget.
3. **Ladder** (eta = 3). Rung 0 scores every candidate by its episode reward on window 0. Each later
   rung keeps the best third of the previous one, doubles the windows (1, 2, 4, 8) and scores a
   candidate by its mean episode reward over the rung's windows (evaluations of earlier rungs are
   reused). The ladder ends with the rung that has all windows, or when the cut would leave one
   candidate.
4. **Budget.** A rung starts only if its estimated time (evaluations x mean evaluation time so far /
   workers) fits in what is left, and evaluations stop at the budget in any case. The winner is the
   best candidate of the last complete rung (of the candidates evaluated, if the budget runs out
   inside rung 0). The stored result says which rungs completed.

An evaluation is one ``Simulation`` of the scenario's world (built once per worker process) over
one window, with the search seed for the world and the run. The result is stored in
``<models>/best-static/<scenario>-<variant>-<hash of the settings>.json`` (written atomically; models:
``$TD3SCHED_MODELS``, else ``./models``, see ``td3sched.shipped``): the
winner's weights, tau (and ceiling) and rewards, its windows, the settings (budget included), the ladder, every
candidate's scores, the code version and the wall time. ``resolve_policy`` turns the policy names
``best-static`` / ``best-static-seed`` into the stored ``static-weights:w=...:tau=...``.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FutureTimeout, as_completed
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

STEPS = (0.2, 0.25, 0.5)
"""Grid steps of the simplex, finest first (``auto`` picks the finest that fits the budget)."""
TAU_VALUES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
ETA = 3
MAX_WINDOWS = 8
WINDOW_H_RANGE = (1.0, 6.0)
VARIANTS = {"best-static": None, "best-static-seed": 0.0, "best-static-ceiling": None}
"""Policy name -> tau_fixed of the search it resolves to (None: tau is searched too)."""
CEILING_VALUES = (None, 0.6, 0.7, 0.8, 0.9)
"""The hold-back ceilings ``best-static-ceiling``'s search tries (None: no ceiling)."""
VARIANT_CEILINGS = {"best-static-ceiling": CEILING_VALUES}
"""Policy name -> the ceilings its search tries (the others: none)."""
HOUR_S = 3600.0
ANCHOR_WEIGHTS = (0.25, 0.25, 0.25, 0.25)


# --- settings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSettings:
    """Everything that defines a search; its hash names the stored result."""

    scenario: str
    overrides: tuple[str, ...] = ()
    """``--set key=value`` overrides of the scenario, in order."""
    seed: int = 1
    """Seed of the world and of every evaluation run."""
    tau_fixed: float | None = None
    """Fix tau (0 gives ``best-static-seed``); None searches ``tau_values``."""
    budget_min: float = 30.0
    """Wall-clock budget of the whole search, worker start-up included."""
    step: str = "auto"
    """Simplex grid step: ``auto`` or one of STEPS."""
    tau_values: tuple[float, ...] = TAU_VALUES
    ceiling_values: tuple[float | None, ...] = (None,)
    """Hold-back ceilings searched (``static-weights``' ``ceiling``), None for none; the default searches none."""
    window_h: float | None = None
    """Window length in hours; None: the scenario's ``search.window_h``, else a 24th of the train span,
    clipped to WINDOW_H_RANGE."""
    max_windows: int = MAX_WINDOWS
    warmup_h: float | None = None
    """Each window starts from the state the candidate reaches after this many hours before it (the
    simulator's steady-state start, as ``evaluate`` runs a span); 0: from the trace's state at the
    window's start, an empty cluster; None: the scenario's ``search.warmup_h`` (0 unless it says). With
    a warm-up, windows start at least this long after the trace's beginning."""
    eta: int = ETA
    """Successive-halving factor: each rung keeps the best 1/eta."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(str(o) for o in self.overrides))
        object.__setattr__(self, "budget_min", float(self.budget_min))
        if self.tau_fixed is not None:
            object.__setattr__(self, "tau_fixed", float(self.tau_fixed))
        if self.window_h is not None:
            object.__setattr__(self, "window_h", float(self.window_h))
        if self.warmup_h is not None:
            object.__setattr__(self, "warmup_h", float(self.warmup_h))
            if not (math.isfinite(self.warmup_h) and self.warmup_h >= 0):
                raise ValueError(f"warmup_h={self.warmup_h!r}: expected hours >= 0")
        if not (math.isfinite(self.budget_min) and self.budget_min > 0):
            raise ValueError(f"budget_min={self.budget_min!r}: expected a positive number of minutes")
        if self.step != "auto":
            try:
                step = float(self.step)
            except ValueError:
                step = math.nan
            if not any(math.isclose(step, s) for s in STEPS):
                raise ValueError(f"step={self.step!r}: expected auto or one of {', '.join(f'{s:g}' for s in STEPS)}")
            object.__setattr__(self, "step", f"{step:g}")
        taus = (self.tau_fixed,) if self.tau_fixed is not None else tuple(float(t) for t in self.tau_values)
        if not taus or any(not (math.isfinite(t) and 0 <= t <= 1) for t in taus):
            raise ValueError(f"tau values {list(taus)}: expected at least one target utilisation in [0, 1]")
        object.__setattr__(self, "tau_values", tuple(sorted(set(taus))))
        from td3sched.policy.static_weights import validate_ceiling

        ceilings = tuple(None if c is None else validate_ceiling(c) for c in self.ceiling_values)
        if not ceilings:
            raise ValueError("ceiling values: none: expected at least one ceiling in (0, 1], or none")
        object.__setattr__(self, "ceiling_values",
                           tuple(sorted(set(ceilings), key=lambda c: (c is not None, c or 0.0))))
        if self.window_h is not None and not (math.isfinite(self.window_h) and self.window_h > 0):
            raise ValueError(f"window_h={self.window_h!r}: expected a positive number of hours")
        if self.max_windows < 1:
            raise ValueError(f"max_windows={self.max_windows!r}: expected at least 1")
        if self.eta < 2:
            raise ValueError(f"eta={self.eta!r}: expected at least 2")

    @property
    def variant(self) -> str:
        if self.tau_fixed is None:
            name = "best-static"
        else:
            name = "best-static-seed" if self.tau_fixed == 0 else f"best-static-tau{self.tau_fixed:g}"
        return name if self.ceiling_values == (None,) else f"{name}-ceiling"

    def resolved(self) -> "SearchSettings":
        """With the defaults worked out from the scenario: its ``search`` section, else (the window's
        length) its train span."""
        if self.window_h is not None and self.warmup_h is not None:
            return self
        from td3sched.scenario import load_scenario

        scenario = load_scenario(self.scenario, list(self.overrides))
        search = scenario.config.get("search", {})
        window_h = self.window_h if self.window_h is not None else search.get("window_h")
        if window_h is None:
            start, end = scenario.span("train")
            lo, hi = WINDOW_H_RANGE
            window_h = min(hi, max(lo, (end - start) / HOUR_S / 24))
        warmup_h = self.warmup_h if self.warmup_h is not None else search.get("warmup_h", 0.0)
        return replace(self, window_h=float(window_h), warmup_h=float(warmup_h))

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario, "overrides": list(self.overrides), "seed": self.seed,
            "tau_fixed": self.tau_fixed, "tau_values": list(self.tau_values), "budget_min": self.budget_min,
            "step": self.step, "window_h": self.window_h, "max_windows": self.max_windows, "eta": self.eta,
        } | ({} if self.ceiling_values == (None,) else {"ceiling_values": list(self.ceiling_values)}) | (
            {"warmup_h": self.warmup_h} if self.warmup_h else {})

    def key(self) -> str:
        """Short hash of the (resolved) settings."""
        text = json.dumps(self.resolved().as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def file_name(self) -> str:
        from td3sched.scenario import scenario_slug

        return f"{scenario_slug(self.scenario)}-{self.variant}-{self.key()}.json"


def _match_key(settings: dict) -> dict:
    """Settings compared when resolving a policy name: all but the budget."""
    return {k: v for k, v in settings.items() if k != "budget_min"}


# --- grid, windows, ladder -------------------------------------------------------------------------
def simplex_grid(step: float) -> np.ndarray:
    """[K, 4] every weight vector with coordinates multiples of ``step`` that sum to 1."""
    n = round(1 / step)
    if not math.isclose(n * step, 1.0):
        raise ValueError(f"grid step {step!r}: expected 1/step to be a whole number")
    rows = [(a, b, c, n - a - b - c) for a in range(n + 1) for b in range(n + 1 - a) for c in range(n + 1 - a - b)]
    return np.array(rows, dtype=float) / n


@dataclass(frozen=True)
class Candidate:
    weights: tuple[float, ...]
    tau: float
    ceiling: float | None = None

    @property
    def spec(self) -> str:
        from td3sched.policy.static_weights import static_weights_spec

        return static_weights_spec(self.weights, self.tau, self.ceiling)


def candidates(step: float, tau_values, ceiling_values=(None,)) -> list[Candidate]:
    """The grid, plus the anchor: static-weights' default equal weights at the lowest tau (its default
    tau = 0 whenever tau 0 is searched) and the first ceiling (none, when none is searched), so that the
    winner is never a coarse grid's accident."""
    grid = [Candidate(tuple(float(x) for x in w), float(t), c) for w in simplex_grid(step) for t in tau_values
            for c in ceiling_values]
    anchor = Candidate(ANCHOR_WEIGHTS, float(min(tau_values)), ceiling_values[0])
    return grid if anchor in grid else grid + [anchor]


def train_windows(start_s: float, end_s: float, window_s: float, count: int) -> list[tuple[float, float]]:
    """``count`` distinct windows in [start_s, end_s), starts at van der Corput points floored to the hour;
    fewer when the span has fewer distinct hourly starts (a 6-hour window in 12 hours: 7 at most)."""
    room = end_s - start_s - window_s
    if room < 0:
        raise ValueError(f"window of {window_s / HOUR_S:g} h does not fit the train span of "
                         f"{(end_s - start_s) / HOUR_S:g} h: expected a shorter window_h")
    out: list[tuple[float, float]] = []
    for i in itertools.count():
        if len(out) == count or i > 64 * count:
            break
        f, denom, j = 0.0, 1.0, i
        while j:
            denom *= 2
            f += (j & 1) / denom
            j >>= 1
        a = start_s + math.floor(f * room / HOUR_S) * HOUR_S
        if all(a != w[0] for w in out):
            out.append((a, a + window_s))
    return out


def rung_plan(n: int, eta: int, max_windows: int) -> list[tuple[int, int]]:
    """(candidates, windows) of each rung of the full ladder."""
    plan, windows = [], 1
    while True:
        plan.append((n, windows))
        keep = math.ceil(n / eta)
        if windows >= max_windows or keep <= 1:
            return plan
        n, windows = keep, min(2 * windows, max_windows)


def ladder_evaluations(n: int, eta: int, max_windows: int) -> int:
    """Evaluations of the full ladder (earlier windows are reused)."""
    total, prev = 0, 0
    for cands, windows in rung_plan(n, eta, max_windows):
        total += cands * (windows - prev)
        prev = windows
    return total


def choose_step(eval_s: float, remaining_s: float, workers: int, tau_values, eta: int, max_windows: int,
                ceiling_values=(None,)) -> float:
    """The finest step whose full ladder is estimated to fit ``remaining_s``; else the coarsest."""
    for step in STEPS:
        n = len(candidates(step, tau_values, ceiling_values))
        if math.ceil(ladder_evaluations(n, eta, max_windows) / workers) * eval_s <= remaining_s:
            return step
    return STEPS[-1]


# --- evaluation ------------------------------------------------------------------------------------
_WORLD = None
_SEED = 0


def _init_worker(scenario: str, overrides: tuple[str, ...], seed: int) -> None:
    """Build the scenario's world once per process."""
    global _WORLD, _SEED
    from td3sched.scenario import load_scenario

    _WORLD = load_scenario(scenario, list(overrides)).build(seed)
    _SEED = seed


def _evaluate(spec: str, start_s: float, end_s: float, warmup_s: float = 0.0) -> dict:
    from td3sched.policy import make_policy
    from td3sched.simulator.engine import Simulation

    t0 = time.perf_counter()
    metrics = Simulation(_WORLD, make_policy(spec), _SEED, start_s, end_s, warmup_s=warmup_s).run()["metrics"]
    return {"reward": float(metrics["episode_reward"]), "decisions": int(metrics["decisions"]),
            "wall_s": time.perf_counter() - t0}


Job = tuple[Candidate, int]
"""A candidate on window index i."""


class Evaluator:
    """Runs jobs in ``workers`` spawned processes (each builds the world once), or in this process."""

    def __init__(self, settings: SearchSettings, windows: list[tuple[float, float]], workers: int):
        self.windows = windows
        self.warmup_s = settings.warmup_h * HOUR_S
        self.workers = workers
        args = (settings.scenario, settings.overrides, settings.seed)
        if workers > 1:
            self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_init_worker, initargs=args)
        else:
            self.pool = None
            _init_worker(*args)

    def run(self, jobs: list[Job], deadline: float, done: Callable[[Job, dict], None]) -> bool:
        """Evaluate ``jobs``; False if the deadline (time.monotonic) came first."""
        if self.pool is None:
            for job in jobs:
                if time.monotonic() >= deadline:
                    return False
                done(job, _evaluate(job[0].spec, *self.windows[job[1]], self.warmup_s))
            return True
        futures = {self.pool.submit(_evaluate, job[0].spec, *self.windows[job[1]], self.warmup_s): job for job in jobs}
        try:
            timeout = None if math.isinf(deadline) else max(0.0, deadline - time.monotonic())
            for fut in as_completed(futures, timeout=timeout):
                done(futures[fut], fut.result())
        except FutureTimeout:
            for fut in futures:
                fut.cancel()
            return False
        return True

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


class _Bar:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, title: str):
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(f"[bold]{title}[/bold] {{task.description}}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task("starting workers", total=None)

    def plan(self, more: int, description: str) -> None:
        if self.bar:
            t = self.bar.tasks[0]
            self.bar.update(self.task, total=(t.total or 0) + more, description=description)

    def advance(self, description: str | None = None) -> None:
        if self.bar:
            self.bar.advance(self.task)
            if description:
                self.bar.update(self.task, description=description)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


# --- the search ------------------------------------------------------------------------------------
@dataclass
class _Ladder:
    results: dict[tuple[str, int], dict] = field(default_factory=dict)
    rungs: list[dict] = field(default_factory=list)

    def mean(self, cand: Candidate, windows: int) -> float:
        return float(np.mean([self.results[(cand.spec, i)]["reward"] for i in range(windows)]))

    def eval_s(self) -> float:
        return float(np.mean([r["wall_s"] for r in self.results.values()]))


def search(settings: SearchSettings, workers: int = 2, progress: bool = False,
           models_dir: Path | None = None) -> tuple[dict, Path]:
    """Run the search, store the winner; return the stored result and its path."""
    from td3sched.run import code_version
    from td3sched.scenario import load_scenario

    wall0 = time.monotonic()
    deadline = wall0 + settings.budget_min * 60
    settings = settings.resolved()
    scenario = load_scenario(settings.scenario, list(settings.overrides))
    span = scenario.span("train")
    start_s, end_s = span
    if settings.warmup_h:  # a window starts after a whole warm-up of its own
        start_s = max(start_s, settings.warmup_h * HOUR_S)
        if start_s >= end_s:
            raise ValueError(f"warmup_h={settings.warmup_h:g}: the train span ends at {end_s / HOUR_S:g} h, "
                             "before a warm-up that long: expected a shorter warm-up")
    windows = train_windows(start_s, end_s, settings.window_h * HOUR_S, settings.max_windows)
    n_windows = len(windows)  # fewer than max_windows when the span has fewer distinct hourly starts
    workers = max(1, workers)
    ladder = _Ladder()
    bar = _Bar(progress, f"{settings.scenario} {settings.variant}")

    def done(job: Job, outcome: dict) -> None:
        ladder.results[(job[0].spec, job[1])] = outcome
        bar.advance()

    evaluator = None
    stopped = "ladder complete"
    try:
        evaluator = Evaluator(settings, windows, workers)
        # Grid: a fixed step, or the finest whose ladder fits the budget as timed by pilot runs.
        if settings.step == "auto":
            pilots = [Candidate(tuple(float(i == k) for i in range(4)), settings.tau_values[0],
                                settings.ceiling_values[0])
                      for k in range(min(workers, 4))]  # simplex vertices: in every grid, so reused in rung 0
            bar.plan(len(pilots), "pilot runs (timing the grid)")
            evaluator.run([(c, 0) for c in pilots], math.inf, done)
            step = choose_step(ladder.eval_s(), deadline - time.monotonic(), workers, settings.tau_values,
                               settings.eta, n_windows, settings.ceiling_values)
        else:
            step = float(settings.step)
        grid = candidates(step, settings.tau_values, settings.ceiling_values)
        order = np.random.default_rng([settings.seed, 97]).permutation(len(grid))
        survivors = [grid[i] for i in order]  # a seeded order: a budget cut in rung 0 leaves a spread sample
        plan = rung_plan(len(grid), settings.eta, n_windows)
        ranked: list[Candidate] = []
        for r, (n, k) in enumerate(plan):
            survivors = survivors[:n] if r == 0 else ranked[:n]
            jobs = [(c, i) for c in survivors for i in range(k) if (c.spec, i) not in ladder.results]
            if r > 0 and ladder.results:
                estimate = math.ceil(len(jobs) / workers) * ladder.eval_s()
                if estimate > deadline - time.monotonic():
                    stopped = f"budget: rung {r} ({len(jobs)} evaluations, about {estimate:.0f} s) did not fit"
                    break
            bar.plan(len(jobs), f"rung {r}: {n} candidates x {k} window(s)")
            complete = evaluator.run(jobs, deadline, done)
            scored = [c for c in survivors if all((c.spec, i) in ladder.results for i in range(k))]
            if not complete and r > 0:
                ladder.rungs.append({"rung": r, "candidates": n, "windows": k, "complete": False})
                stopped = f"budget: ran out during rung {r}"
                break
            ranked = sorted(scored, key=lambda c: -ladder.mean(c, k))
            ladder.rungs.append({"rung": r, "candidates": n, "windows": k, "complete": complete,
                                 "evaluated": len(scored), "best": ranked[0].spec if ranked else None,
                                 "best_reward": ladder.mean(ranked[0], k) if ranked else None})
            if not complete:
                stopped = f"budget: ran out during rung 0 ({len(scored)} of {n} candidates evaluated)"
                break
        if not ranked:
            raise RuntimeError(f"search {settings.file_name()}: no candidate was evaluated within "
                               f"{settings.budget_min:g} min: expected a larger budget_min")
    finally:
        if evaluator is not None:
            evaluator.close()
        bar.close()

    last = next(r for r in reversed(ladder.rungs) if r.get("best"))
    k = last["windows"]
    winner = ranked[0]
    result = {
        "scenario": settings.scenario,
        "variant": settings.variant,
        "policy": winner.spec,
        "weights": list(winner.weights),
        "tau": winner.tau,
        **({} if winner.ceiling is None else {"ceiling": winner.ceiling}),
        "reward": ladder.mean(winner, k),
        "reward_per_window": [ladder.results[(winner.spec, i)]["reward"] for i in range(k)],
        "windows": [{"start_s": a, "end_s": b} for a, b in windows[:k]],
        "settings": settings.as_dict(),
        "search": {
            "method": "successive halving over a simplex x tau grid (see search/best_static.py)",
            "step": step, "grid_size": len(grid), "train_span": {"start_s": span[0], "end_s": span[1]},
            "windows_all": [{"start_s": a, "end_s": b} for a, b in windows],
            "rungs": ladder.rungs, "stopped": stopped, "evaluations": len(ladder.results),
            "evaluation_wall_s_mean": ladder.eval_s(), "workers": workers,
        },
        "candidates": _leaderboard(ladder, grid),
        "code_version": code_version(),
        "wall_s": time.monotonic() - wall0,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = store(result, settings, models_dir)
    return result, path


def _leaderboard(ladder: _Ladder, grid: list[Candidate]) -> list[dict]:
    """Every evaluated candidate with its mean reward over the most windows it was scored on."""
    rows = []
    for c in grid:
        k = 0
        while (c.spec, k) in ladder.results:
            k += 1
        if k:
            rows.append({"policy": c.spec, "windows": k, "reward": ladder.mean(c, k)})
    return sorted(rows, key=lambda r: (-r["windows"], -r["reward"]))


def store(result: dict, settings: SearchSettings, models_dir: Path | None = None) -> Path:
    """Write ``result`` atomically under ``models_dir`` (default: the user's models folder's
    best-static/, ``td3sched.shipped``)."""
    from td3sched.shipped import BEST_STATIC, user_models_dir

    folder = Path(models_dir) if models_dir is not None else user_models_dir() / BEST_STATIC
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / settings.file_name()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


# --- resolving the policy names ----------------------------------------------------------------------
def load_result(name: str, scenario_name: str, overrides, models_dir: Path | None = None) -> tuple[dict, Path]:
    """The stored result of ``name`` (best-static or best-static-seed) for a scenario and its
    overrides under the default search settings. Searched in ``models_dir``, by default in the user's
    then the shipped best-static folders: the user's folder wins, then the largest budget, then the newest."""
    from td3sched.scenario import scenario_slug
    from td3sched.shipped import best_static_dirs

    folders = [Path(models_dir)] if models_dir is not None else best_static_dirs()
    want = SearchSettings(scenario_name, tuple(overrides or ()), tau_fixed=VARIANTS[name],
                          ceiling_values=VARIANT_CEILINGS.get(name, (None,))).resolved()
    found: list[tuple[int, float, str, dict, Path]] = []  # (folder rank: the user's first, budget, time, ...)
    for rank, folder in enumerate(folders):
        for path in sorted(folder.glob(f"{glob.escape(scenario_slug(scenario_name))}-{want.variant}-*.json")):
            try:
                result = json.loads(path.read_text())
                settings = result["settings"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"stored search result {path}: unreadable ({exc}): expected the JSON written by "
                                 "`td3sched search-static`") from None
            if _match_key(settings) == _match_key(want.as_dict()):
                found.append((-rank, float(settings["budget_min"]), str(result.get("written_at", "")), result, path))
    if not found:
        sets = "".join(f" --set {o}" for o in want.overrides)
        tau = " --tau-fixed 0" if want.tau_fixed == 0 else ""
        if want.ceiling_values != (None,):
            tau += " --ceiling-values " + ",".join("none" if c is None else f"{c:g}" for c in want.ceiling_values)
        where = ", ".join(map(str, folders)) or "no best-static folder"
        raise ValueError(f"no stored {name} result for scenario {scenario_name!r}"
                         f"{' with overrides ' + str(list(want.overrides)) if want.overrides else ''} and the default "
                         f"search settings in {where}: run `td3sched search-static --scenario {scenario_name}"
                         f"{sets}{tau}` first")
    *_, result, path = max(found, key=lambda f: f[:3])
    return result, path


def resolve_policy(spec: str, scenario_name: str, overrides=None, models_dir: Path | None = None) -> tuple[str, str]:
    """(label, concrete spec): ``best-static`` / ``best-static-seed`` become the stored
    ``static-weights:w=...:tau=...`` for the scenario and overrides; any other spec passes through."""
    name, sep, args = spec.partition(":")
    if name not in VARIANTS:
        return spec, spec
    if sep:
        raise ValueError(f"policy {name!r} takes no arguments (it is read from the stored search result), "
                         f"got {args!r}")
    result, path = load_result(name, scenario_name, overrides, models_dir)
    from td3sched.policy import make_policy

    try:
        make_policy(result["policy"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"stored search result {path}: bad policy ({exc})") from None
    return name, result["policy"]
