"""The overestimation study: how far each algorithm's critic is from the return it predicts, over
training (Fujimoto, van Hoof, Meger 2018, Fig. 1; the reason the reference case study chose TD3
over DDPG).

For each algorithm (td3, ddpg) and seed, one agent trains on the settings' env (``rl.train.learn``).
Every ``eval_every`` steps a ``learn`` callback runs one evaluation episode with the deterministic
actor (``agent.predict``) on a separate env of the same settings, always on the same window: it is
drawn once, by ``EVAL_SEED`` (which also selects its world, a workload none of the training seeds
draws), so every evaluation point of both algorithms and every seed sees the same episode. At each
visited state s_t of that episode it compares

    the Q estimate       Q1(s_t, pi(s_t))           the first critic (TD3's Q1, DDPG's only one),
                                                    called once on the whole episode at its end;
    the Monte-Carlo      G_t = sum_k gamma^k r_{t+k} over the rest of the episode;
    return
    the bias             Q1(s_t, pi(s_t)) - G_t     positive: overestimation.

Episodes are truncated windows (the cluster would go on), so G_t misses the value after the
window's end. Only states with at least H steps left count, H the smallest horizon with
gamma^H < ``TAIL_WEIGHT`` (0.01; H = 459 for gamma = 0.99): the missing tail then weighs less than
1% of a state's value. An evaluation point reports the mean Q estimate, the mean G_t and their
difference over those ``n_states`` states.

    overestimation.csv   algo, seed, step, q_estimate, mc_return, bias, n_states (one row per point)
    overestimation.png   Q estimate (solid) and MC return (dashed) per algorithm over training steps,
                         mean over seeds with the min-max band; the bias below
    README.md            the command, the settings and the finding, computed from the CSV
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from td3sched.rl.td3 import ALGOS, TD3, TD3Config
from td3sched.rl.train import TrainSettings, learn

TAIL_WEIGHT = 0.01
"""A state counts when gamma^(steps left) is below this: the truncated tail's weight in G_t."""
EVAL_SEED = 100
"""Draws the evaluation window and selects its world (apart from the training seeds 1..N)."""
CSV_FILE = "overestimation.csv"
FIGURE_FILE = "overestimation.png"
REPORT_FILE = "README.md"
COLUMNS = ("algo", "seed", "step", "q_estimate", "mc_return", "bias", "n_states")


def horizon(gamma: float, tail_weight: float = TAIL_WEIGHT) -> int:
    """The smallest H >= 1 with gamma^H < ``tail_weight``."""
    if not 0 <= gamma < 1:
        raise ValueError(f"gamma={gamma!r}: expected a discount in [0, 1) (with 1 no tail ever fades)")
    if gamma == 0:
        return 1
    h = max(1, math.ceil(math.log(tail_weight) / math.log(gamma)))
    while gamma**h >= tail_weight:  # ceil lands on the boundary when the ratio is a whole number
        h += 1
    return h


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = sum_k gamma^k r_{t+k} to the end of the list, for every t: G_t = r_t + gamma G_{t+1}."""
    rewards = np.asarray(rewards, dtype=np.float64)
    returns = np.empty_like(rewards)
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + gamma * g
        returns[t] = g
    return returns


def q_estimates(agent: TD3, observations: np.ndarray) -> np.ndarray:
    """Q1(s, pi(s)) of the agent's first critic for a batch of raw observations [n, size]."""
    with torch.no_grad():
        x = torch.from_numpy(agent.normalizer.normalize(observations))
        return agent.critic.q1(x, agent.actor(x)).view(-1).double().numpy()


@dataclass(frozen=True)
class Measurement:
    q_estimate: float
    mc_return: float
    n_states: int

    @property
    def bias(self) -> float:
        return self.q_estimate - self.mc_return


class EvaluationEpisode:
    """The study's fixed evaluation episode, on its own env (the training env is never touched)."""

    def __init__(self, settings: TrainSettings, gamma: float, eval_seed: int = EVAL_SEED):
        self.env = settings.make_env()
        self.env.reset(seed=eval_seed)
        self.window = dict(self.env.state_dict()["episode"])
        self.gamma = gamma
        self.horizon = horizon(gamma)
        _, rewards = self.run(lambda obs: np.zeros(self.env.action_space.shape, np.float32))
        self.check_length(len(rewards))  # fail before any training, not at the first evaluation

    def run(self, act: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(observations s_t [T, size], rewards r_t [T]) of the window under ``act``."""
        obs, _ = self.env.reset(options={"episode": self.window})
        observations, rewards = [], []
        while True:
            observations.append(obs)
            obs, reward, terminated, truncated, _ = self.env.step_logits(act(obs))
            rewards.append(reward)
            if terminated or truncated:
                return np.array(observations, dtype=np.float32), np.array(rewards, dtype=np.float64)

    def check_length(self, steps: int) -> None:
        if steps < self.horizon:
            w = self.window
            raise ValueError(
                f"the evaluation window {w['start_s'] / 3600:g}-{w['end_s'] / 3600:g} h (world seed "
                f"{w['world_seed']}) holds {steps} decisions, fewer than the horizon H={self.horizon} that "
                f"gamma={self.gamma:g} needs (gamma^H < {TAIL_WEIGHT:g}): choose longer --episode-hours")

    def measure(self, agent: TD3) -> Measurement:
        """Run the deterministic actor through the window; the means over the states with at least H
        steps left of Q1(s_t, pi(s_t)) and of G_t."""
        observations, rewards = self.run(agent.predict)
        self.check_length(len(rewards))
        counted = len(rewards) - self.horizon + 1  # t = 0 .. T - H: T - t >= H steps left
        q = q_estimates(agent, observations[:counted])
        g = discounted_returns(rewards, self.gamma)[:counted]
        return Measurement(float(q.mean()), float(g.mean()), counted)

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class StudySettings:
    scenario: str = "tiny"
    """Scenario of the training and evaluation envs."""
    span: str = "train"
    """Span whose windows are the training episodes and the evaluation episode."""
    episode_hours: float = 12.0
    """Training and evaluation windows; the evaluation one must hold more than H decisions."""
    steps: int = 25_000
    """Training steps per (algorithm, seed)."""
    eval_every: int = 2_500
    """Training steps between two evaluation episodes."""
    seeds: tuple[int, ...] = (1, 2)
    """Training seeds: the world, the training windows, the networks and the noise of each run."""
    config: TD3Config = TD3Config(learning_starts=2_000)
    """Hyper-parameters of every run (its ``algo`` is each algorithm's in turn): TD3Config's defaults but
    a shorter warm-up, to fit the short runs."""
    algos: tuple[str, ...] = ALGOS
    """Algorithms compared, each with every seed."""
    eval_seed: int = EVAL_SEED
    """Draws the evaluation window (and selects its world)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "algos", tuple(self.algos))
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"steps={self.steps!r}: expected a whole number >= 1")
        if not (isinstance(self.eval_every, int) and 1 <= self.eval_every <= self.steps):
            raise ValueError(f"eval_every={self.eval_every!r}: expected a whole number in 1..steps ({self.steps})")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds={self.seeds!r}: expected at least one seed, none repeated")
        unknown = [a for a in self.algos if a not in ALGOS]
        if not self.algos or unknown:
            raise ValueError(f"algos={self.algos!r}: expected some of {', '.join(ALGOS)}")

    def agent_config(self, algo: str) -> TD3Config:
        return dataclasses.replace(self.config, algo=algo)

    def train_settings(self, seed: int) -> TrainSettings:
        return TrainSettings(self.scenario, seed, self.span, self.episode_hours)

    def eval_steps(self) -> list[int]:
        """The training steps after which an evaluation episode runs (the last step always)."""
        return sorted(set(range(self.eval_every, self.steps + 1, self.eval_every)) | {self.steps})

    def command(self, out: Path) -> str:
        """The CLI command of these settings (``out`` relative to the working folder when inside it)."""
        out = Path(out)
        if out.is_absolute():
            try:
                out = out.relative_to(Path.cwd())
            except ValueError:
                out = Path(out.name)
        seeds = f"--seeds {len(self.seeds)}" if self.seeds == tuple(range(1, len(self.seeds) + 1)) else \
            f"(seeds {', '.join(map(str, self.seeds))})"
        command = (f"td3sched overestimation --scenario {self.scenario} --steps {self.steps} --eval-every "
                   f"{self.eval_every} {seeds} --episode-hours {self.episode_hours:g} --learning-starts "
                   f"{self.config.learning_starts} --out {out.as_posix()}")
        other = {k: v for k, v in self.config_changes().items() if k != "learning_starts"}
        return command + (f"  (and, not a CLI option, TD3Config {other})" if other else "")

    def config_changes(self) -> dict:
        """The config's fields that differ from TD3Config's defaults (besides algo)."""
        default = TD3Config().to_json()
        return {k: v for k, v in self.config.to_json().items() if k != "algo" and v != default[k]}


@dataclass(frozen=True)
class Point:
    """One evaluation point: a row of the CSV."""

    algo: str
    seed: int
    step: int
    q_estimate: float
    mc_return: float
    bias: float
    n_states: int


@dataclass
class StudyResult:
    points: list[Point]
    window: dict
    horizon: int
    gamma: float
    wall_s: float
    run_wall_s: dict[tuple[str, int], float] = field(default_factory=dict)


def run_study(settings: StudySettings, out: Path, *, on_log: Callable[[dict], None] | None = None,
              on_point: Callable[[Point], None] | None = None) -> StudyResult:
    """Train and evaluate every (algorithm, seed) in turn; the CSV is rewritten after each point (so a
    stopped study keeps what it measured), the figure and the report at the end. ``on_log`` receives
    ``learn``'s logged values with ``algo``, ``seed`` and ``done`` (steps over the whole study)."""
    from td3sched.rl.observation import OBSERVATION_SIZE

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    gammas = {settings.agent_config(a).gamma for a in settings.algos}
    if len(gammas) != 1:
        raise ValueError(f"the algorithms' configs use different discounts {sorted(gammas)}: one MC return needs one")
    gamma = gammas.pop()
    started = time.perf_counter()
    episode = EvaluationEpisode(settings.train_settings(settings.seeds[0]), gamma, settings.eval_seed)
    points: list[Point] = []
    run_wall_s: dict[tuple[str, int], float] = {}
    wanted = set(settings.eval_steps())
    try:
        for i, (algo, seed) in enumerate((a, s) for a in settings.algos for s in settings.seeds):
            offset = i * settings.steps

            def evaluate(step: int, agent: TD3, algo=algo, seed=seed) -> None:
                if step in wanted:
                    m = episode.measure(agent)
                    point = Point(algo, seed, step, m.q_estimate, m.mc_return, m.bias, m.n_states)
                    points.append(point)
                    write_csv(points, out / CSV_FILE)
                    if on_point:
                        on_point(point)

            def log(d: dict, algo=algo, seed=seed, offset=offset) -> None:
                if on_log:
                    on_log({**d, "algo": algo, "seed": seed, "done": offset + d["step"]})

            train_settings = settings.train_settings(seed)
            env = train_settings.make_env()
            run_started = time.perf_counter()
            try:
                agent = TD3(OBSERVATION_SIZE, settings.agent_config(algo), seed, train_settings.action_mode)
                learn(agent, env, settings.steps, settings=train_settings, on_log=log, callback=evaluate)
            finally:
                env.close()
            run_wall_s[(algo, seed)] = time.perf_counter() - run_started
    finally:
        episode.close()
    result = StudyResult(points, episode.window, episode.horizon, gamma, time.perf_counter() - started, run_wall_s)
    write_figure(read_csv(out / CSV_FILE), out / FIGURE_FILE, figure_title(settings))
    write_report(out, settings, result)
    return result


# --- files ---------------------------------------------------------------------------------------------
def write_csv(points: list[Point], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        for p in points:
            writer.writerow([p.algo, p.seed, p.step, repr(p.q_estimate), repr(p.mc_return), repr(p.bias), p.n_states])
    tmp.replace(path)


def read_csv(path: Path) -> list[Point]:
    """The points of a study CSV; a ValueError names the file and what is missing."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {list(COLUMNS)}")
        return [Point(r["algo"], int(r["seed"]), int(r["step"]), float(r["q_estimate"]), float(r["mc_return"]),
                      float(r["bias"]), int(r["n_states"])) for r in reader]


def _curves(points: list[Point], algo: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values [seeds, steps]) of one algorithm, at the steps every seed reached."""
    seeds = sorted({p.seed for p in points if p.algo == algo})
    by_seed = {s: {p.step: getattr(p, column) for p in points if p.algo == algo and p.seed == s} for s in seeds}
    steps = np.array(sorted(set.intersection(*(set(v) for v in by_seed.values()))), dtype=np.int64)
    return steps, np.array([[by_seed[s][int(t)] for t in steps] for s in seeds], dtype=np.float64)


def figure_title(settings: StudySettings) -> str:
    return (f"Q estimate vs Monte-Carlo return: {settings.scenario}/{settings.span}, {settings.episode_hours:g} h "
            f"windows, {settings.steps:,} steps, {len(settings.seeds)} seed{'s' if len(settings.seeds) > 1 else ''}")


def write_figure(points: list[Point], path: Path, title: str) -> None:
    """Values over training steps (top; solid: Q estimate, dashed: MC return) and the bias (bottom),
    one colour per algorithm: the mean over seeds, with the min-max band when there are several."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 6.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    algos = [a for a in ALGOS if any(p.algo == a for p in points)]
    for i, algo in enumerate(algos):
        colour = f"C{i}"
        for ax, column, style, label in ((top, "q_estimate", "-", "Q estimate"),
                                         (top, "mc_return", "--", "MC return"),
                                         (bottom, "bias", "-", "bias")):
            steps, values = _curves(points, algo, column)
            ax.plot(steps, values.mean(axis=0), style, color=colour, marker="o", markersize=3,
                    label=f"{algo.upper()} {label}")
            if len(values) > 1:
                ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=colour, alpha=0.15, linewidth=0)
    seeds = len({p.seed for p in points})
    band = f"mean over {seeds} seeds, shaded: min-max" if seeds > 1 else "one seed"
    top.set_ylabel("value of the evaluation states (mean)")
    top.set_title(f"{title}\n({band})", fontsize=10)
    top.legend(fontsize=8, ncol=2)
    bottom.axhline(0.0, color="black", linewidth=0.8)
    bottom.set_ylabel("bias: Q estimate - MC return")
    bottom.set_xlabel("training steps (scheduling decisions)")
    bottom.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})


@dataclass(frozen=True)
class Finding:
    """One algorithm's bias: at the last evaluation point (mean, min, max over seeds) and averaged
    over all its evaluation points and seeds; with the MC return to compare it with."""

    algo: str
    final_step: int
    final_bias: float
    final_bias_min: float
    final_bias_max: float
    final_mc_return: float
    average_bias: float
    average_mc_return: float
    points: int


def findings(points: list[Point]) -> list[Finding]:
    out = []
    for algo in [a for a in ALGOS if any(p.algo == a for p in points)]:
        steps, bias = _curves(points, algo, "bias")
        _, mc = _curves(points, algo, "mc_return")
        out.append(Finding(algo, int(steps[-1]), float(bias[:, -1].mean()), float(bias[:, -1].min()),
                           float(bias[:, -1].max()), float(mc[:, -1].mean()), float(bias.mean()), float(mc.mean()),
                           bias.size))
    return out


def _num(x: float) -> str:
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}"


def _share(bias: float, value: float) -> str:
    """``bias`` as a signed percentage of ``|value|``."""
    return f"{100 * bias / abs(value):+.0f}%" if value else "n/a"


def finding_text(found: list[Finding]) -> str:
    """The finding in words, from the numbers alone."""
    lines = []
    for f in found:
        side = "above" if f.final_bias > 0 else "below"
        lines.append(f"- {f.algo.upper()}: at step {f.final_step:,} the Q estimate is {_num(abs(f.final_bias))} "
                     f"{side} the MC return ({_share(f.final_bias, f.final_mc_return)} of |return|); "
                     f"over all evaluation points the bias averages {_num(f.average_bias)} "
                     f"({_share(f.average_bias, f.average_mc_return)}).")
    by = {f.algo: f for f in found}
    if "td3" in by and "ddpg" in by:
        td3, ddpg = by["td3"], by["ddpg"]
        for when, a, b in (("final", td3.final_bias, ddpg.final_bias),
                           ("average", td3.average_bias, ddpg.average_bias)):
            lines.append(f"- {when.capitalize()} bias, DDPG minus TD3: {b - a:+,.1f}: DDPG's is "
                         f"{'higher' if b > a else 'lower' if b < a else 'equal'} ({_num(b)} vs {_num(a)}).")
    return "\n".join(lines)


def write_report(out: Path, settings: StudySettings, result: StudyResult) -> Path:
    """README.md of the study folder: command, settings, the bias table and the finding (from the CSV)."""
    from td3sched.run import code_version

    found = findings(read_csv(out / CSV_FILE))
    w = result.window
    config, changes = settings.config, settings.config_changes()
    runs = ", ".join(f"{a} seed {s} {t / 60:.1f} min" for (a, s), t in result.run_wall_s.items())
    n_states = sorted({p.n_states for p in result.points})
    rows = [
        ("scenario / span", f"`{settings.scenario}` / `{settings.span}`, {settings.episode_hours:g} h windows "
                            "(training and evaluation)"),
        ("algorithms", ", ".join(settings.algos)),
        ("seeds", ", ".join(map(str, settings.seeds)) + " (world, windows, networks and noise of the training)"),
        ("training steps", f"{settings.steps:,} per algorithm and seed"),
        ("evaluation", f"every {settings.eval_every:,} steps: one episode of the deterministic actor on the window "
                       f"{w['start_s'] / 3600:.2f}-{w['end_s'] / 3600:.2f} h of world seed {w['world_seed']} "
                       f"(tie-breaking seed {w['sim_seed']}), drawn by seed {settings.eval_seed}, the same for "
                       "every point, algorithm and seed"),
        ("counted states", f"those with at least H = {result.horizon} steps left (gamma^H < {TAIL_WEIGHT:g}); "
                           f"{', '.join(map(str, n_states))} per episode"),
        ("hyper-parameters", f"TD3Config defaults (gamma {config.gamma:g}, tau {config.tau:g}, batch "
                             f"{config.batch_size}, learning rate {config.learning_rate:g}, hidden "
                             f"{'-'.join(map(str, config.hidden))}, exploration noise {config.exploration_noise:g}, "
                             f"policy noise {config.policy_noise:g}, clip {config.noise_clip:g}, delay "
                             f"{config.policy_frequency}) except "
                             + (", ".join(f"{k} {v}" for k, v in changes.items()) or "none")
                             + (f" (learning_starts: default {TD3Config().learning_starts:,}, shortened to fit the "
                                "short runs)" if "learning_starts" in changes else "")),
        ("wall time", f"{result.wall_s / 60:.1f} min, {torch.get_num_threads()} torch thread(s) ({runs})"),
        ("code version", f"`{code_version()}`"),
    ]
    table = ["| algorithm | final bias (mean over seeds) | final bias min / max | final MC return | "
             "average bias | average MC return | points |", "|---|---:|---:|---:|---:|---:|---:|"]
    for f in found:
        table.append(f"| {f.algo} | {_num(f.final_bias)} | {_num(f.final_bias_min)} / {_num(f.final_bias_max)} | "
                     f"{_num(f.final_mc_return)} | {_num(f.average_bias)} | {_num(f.average_mc_return)} | "
                     f"{f.points} |")
    text = "\n".join([
        "# Overestimation: TD3 vs DDPG",
        "",
        "The critic's estimate Q1(s, pi(s)) against the discounted Monte-Carlo return of the deterministic "
        "actor from the same states, over training (Fujimoto et al. 2018, Fig. 1). Bias = Q estimate - MC "
        "return, averaged over the counted states of the evaluation episode: positive is overestimation. "
        "Rewards are negative costs, so returns are negative and a freshly initialised critic (Q near 0) starts "
        "above them. Mechanism: `td3sched.rl.overestimation`.",
        "",
        "```",
        settings.command(out),
        "```",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
        "",
        f"![Q estimate and MC return over training]({FIGURE_FILE})",
        "",
        "## Finding",
        "",
        "Computed from `overestimation.csv` (final: the last evaluation point; average: over every evaluation "
        "point and seed).",
        "",
        *table,
        "",
        finding_text(found),
        "",
    ])
    path = out / REPORT_FILE
    path.write_text(text)
    return path
