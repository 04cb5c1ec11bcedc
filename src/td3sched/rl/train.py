"""The training loop (CleanRL's, with Stable-Baselines3's ``learn``): collect one decision, store
it, take one gradient step; log every ``log_every`` steps; checkpoint every ``checkpoint_every``.

A run folder holds

    checkpoint.pt         everything to go on exactly (written atomically, replaced each time)
    model.pt, model.json  the latest model (``rl.model``): ``td3:FOLDER`` runs it in the harness
    tb/                   TensorBoard events: losses/* (losses/saturated: the share of the actor's
                          pre-activations at the bound), charts/SPS, charts/episodic_return

A checkpoint holds the networks, optimisers, replay buffer, normaliser, step counter, the agent's
and torch's RNG states and, for each env copy (``rl.workers``; one unless ``env_workers`` says more),
its draw generator, its running episode (window and seeds) and the actions taken in it so far.
``resume`` restarts each copy's episode and replays those actions, which brings the simulator back to
the same state, so a resumed run takes the same steps as an uninterrupted one (bit for bit on the same
machine and torch build).

The last step of an episode (the window's end, ``truncated``) is stored as not done: its value is
bootstrapped from the last observation, since the cluster would go on.
"""

from __future__ import annotations

import io
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from td3sched.rl.model import write_atomic
from td3sched.rl.td3 import TD3, TD3Config

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 2
RECENT_EPISODES = 10
"""Episode returns kept for the running mean shown while training."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed, with the file and the reason."""


def check_spread_of(spec: str, args, spread: float, what: str) -> None:
    """A ValueError when the static spec ``spec`` (score arguments ``args``) has another sibling spread than
    the run's: the run's spread scores every decision, so a spec's own would be silently ignored."""
    if args is not None and args.spread != spread:
        raise ValueError(f"{what} {spec!r} has a sibling spread of {args.spread:g} and the run {spread:g}: the run's "
                         f"spread scores every decision (--spread {args.spread:g} to train with it)")


@dataclass(frozen=True)
class TrainSettings:
    """What an env and a run are made of, besides the TD3 config."""

    scenario: str = "tiny"
    seed: int = 1
    span: str = "train"
    episode_hours: float = 24.0
    action_mode: str = "full"
    overrides: tuple[str, ...] = ()
    action_hold_s: float = 0.0
    """Simulated seconds an action holds (``rl.policy.ActionPolicy``; 0: an action per decision)."""
    warmup_hours: float = 0.0
    """Hours before each episode's window simulated under ``warmup_score`` (``rl.env``; 0: none)."""
    warmup_score: str | None = None
    """The static-weights spec that places the warm-up's pods."""
    env_workers: int = 1
    """Copies of the env stepped at once, each drawing its own windows (``rl.workers``; 1: the learner's
    env alone). The run depends on it."""
    sibling_spread: float = 0.0
    """The sibling spread every decision's score takes (``policy.siblings``; 0: none): the model's card
    fixes it, so that the engine and the simulator's td3 policy serve the score it was trained with."""

    def __post_init__(self) -> None:
        from td3sched.policy.siblings import validate_spread

        validate_spread(self.sibling_spread)
        if isinstance(self.env_workers, bool) or not isinstance(self.env_workers, int) or self.env_workers < 1:
            raise ValueError(f"env_workers {self.env_workers!r}: expected an integer >= 1 (1: the learner's env alone)")
        if self.warmup_hours or self.warmup_score is not None:
            from td3sched.rl.env import check_warmup

            warmup = check_warmup(self.warmup_hours, self.warmup_score, self.action_mode)
            check_spread_of(self.warmup_score, warmup, self.sibling_spread, "the warm-up score")

    def make_env(self):
        from td3sched.rl.env import ClusterSchedulingEnv

        return ClusterSchedulingEnv(self.scenario, self.span, self.episode_hours, self.action_mode, self.overrides,
                                    action_hold_s=self.action_hold_s, warmup_hours=self.warmup_hours,
                                    warmup_score=self.warmup_score, sibling_spread=self.sibling_spread)

    @classmethod
    def of_env(cls, env, seed: int) -> "TrainSettings":
        """The settings ``env`` was made with, and ``seed``."""
        e = env.unwrapped
        return cls(e.scenario_name, seed, e.span, e.episode_s / 3600.0, e.action_mode, tuple(e.scenario.overrides),
                   e.action_hold_s, e.warmup_s / 3600.0, e.warmup_score, sibling_spread=e.sibling_spread)

    def to_json(self) -> dict:
        return {**asdict(self), "overrides": list(self.overrides)}

    @classmethod
    def from_json(cls, d: dict) -> "TrainSettings":
        return cls(**{**d, "overrides": tuple(d["overrides"])})


@dataclass
class LoopState:
    """Where the loop is: the next step, and per env copy its current observation and episode."""

    global_step: int = 0
    obs: list[np.ndarray] = field(default_factory=list)
    episode_actions: list[list[np.ndarray]] = field(default_factory=list)
    episode_reward: list[float] = field(default_factory=list)
    episodes: int = 0
    recent_returns: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    """Training wall time before this process started (resumed runs)."""


@dataclass
class LearnResult:
    steps: int
    episodes: int
    wall_s: float
    sps: float
    recent_returns: list[float]


def learn(agent: TD3, env, total_steps: int, *, out: Path | None = None, checkpoint_every: int = 0,
          resume: bool = False, settings: TrainSettings | None = None,
          on_log: Callable[[dict], None] | None = None,
          callback: Callable[[int, TD3], None] | None = None, branch_workers: int = 2,
          ray_address: str | None = None, on_resume: Callable[[int, TD3], None] | None = None) -> LearnResult:
    """Train ``agent`` on ``env`` until ``total_steps`` steps. With ``out``: TensorBoard logs, a
    checkpoint every ``checkpoint_every`` steps and at the end, and the model at each checkpoint.
    ``resume`` goes on from ``out``'s checkpoint. ``on_log`` receives the logged values.
    ``callback(steps_done, agent)`` runs after every step, once its transition is stored, its gradient
    step taken and its checkpoint written, with the steps done so far (1 after the first); it may read
    the agent (e.g. evaluate it on another env) but must not change it or step ``env``.
    ``branch_workers``: simulator processes running counterfactual branches at once
    (``TD3Config.branch_every``; the results do not depend on it).
    ``settings`` (recorded in checkpoints and the model card) default to the env's, with the agent's
    seed; the first episode is drawn with ``settings.seed``. With ``settings.env_workers`` N > 1, ``env``
    is copy 0 of N stepped at once (``rl.workers``): each iteration takes N steps, so ``total_steps``
    and ``checkpoint_every`` must be multiples of N. ``ray_address`` (None: local processes) runs copies
    1..N-1 as Ray actors (``ray_session``: "local" starts a local instance); the run is the same.
    ``on_resume(steps_done, agent)`` runs once a resumed run has its checkpoint loaded and its env copies
    back at their step, before the first new step (``rl.select`` validates a checkpoint it missed)."""
    cfg = agent.config
    out = Path(out) if out is not None else None
    settings = settings or TrainSettings.of_env(env, agent.seed)
    n = settings.env_workers
    if agent.action_mode != env.unwrapped.action_mode:
        raise ValueError(f"the agent's action mode {agent.action_mode!r} differs from the env's "
                         f"{env.unwrapped.action_mode!r}")
    if n > 1 and (total_steps % n or checkpoint_every % n):
        raise ValueError(f"steps {total_steps} and checkpoint every {checkpoint_every}: expected multiples of the "
                         f"{n} env workers (each iteration steps every copy once)")
    if n > 1 and cfg.branch_every:
        raise ValueError(f"counterfactual branches (branch_every {cfg.branch_every}) fork the learner's own env: "
                         f"expected 1 env worker, not {n}")
    if resume and out is None:
        raise ValueError("resume needs the run folder (out) holding the checkpoint")
    if ray_address is not None and n < 2:
        raise ValueError(f"Ray runs env copies 1..N-1 as actors: expected 2 env workers or more, not {n}")
    from td3sched.rl.workers import LocalCopy, remote_copies

    copies: list = [LocalCopy(env)]
    with remote_copies(ray_address, n - 1) as make_copy:
        try:
            for i in range(1, n):
                copies.append(make_copy(settings, i))
            remote = copies[1:]
            for worker in remote:  # started together, they build their worlds at once
                worker.wait_ready()
            if resume:
                loop = resume_from(out / CHECKPOINT_FILE, agent, copies, settings)
                if on_resume:
                    on_resume(loop.global_step, agent)
            else:
                pending = [w.start_reset(settings.seed, w.index) for w in remote]  # their worlds build meanwhile
                first = [env.reset(seed=settings.seed)[0]] + [answer() for answer in pending]
                loop = LoopState(obs=first, episode_actions=[[] for _ in copies], episode_reward=[0.0] * n)
            return _loop(agent, env, copies, loop, total_steps, out, checkpoint_every, resume, settings, on_log,
                         callback, branch_workers)
        finally:
            for copy in copies:
                copy.close()


def _loop(agent: TD3, env, copies: list, loop: LoopState, total_steps: int, out: Path | None, checkpoint_every: int,
          resume: bool, settings: TrainSettings, on_log, callback, branch_workers: int) -> LearnResult:
    """``learn``'s loop over its env copies, from ``loop``."""
    cfg, n = agent.config, len(copies)
    writer = None
    if out is not None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=loop.global_step if resume else None)
        if not resume:
            writer.add_text("config", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in {**settings.to_json(), **cfg.to_json()}.items()))

    first_step, started = loop.global_step, time.perf_counter()
    saved_at = None
    try:
        while loop.global_step < total_steps:
            step0 = loop.global_step
            # Act, copy by copy: the warm-up's action (uniformly random, or the anchor's plus noise), then the
            # actor plus exploration noise.
            actions = []
            for k in range(n):
                agent.normalizer.update(loop.obs[k])
                warming = step0 + k < cfg.learning_starts and not cfg.warmup_actor
                action = agent.warmup_action() if warming else agent.explore(loop.obs[k])
                if cfg.branch_every and step0 >= cfg.learning_starts and step0 % cfg.branch_every == 0:
                    branch(agent, env, loop.obs[k], action, branch_workers)  # one copy (learn checks)
                actions.append(action)
            for copy, action in reversed(list(zip(copies, actions))):  # the remote copies first: they run
                copy.send_step(action)                                 # while the learner's own steps
            results = [copy.receive_step() for copy in copies]

            for k, (action, (next_obs, reward, terminated, truncated, elapsed_s, first)) in enumerate(
                    zip(actions, results)):
                global_step = step0 + k
                if not truncated:  # a truncated step has no next decision to bootstrap from: not stored
                    agent.buffer.add(loop.obs[k], action, reward, next_obs, terminated, elapsed_s)
                loop.episode_actions[k].append(action)
                loop.episode_reward[k] += reward
                loop.obs[k] = next_obs
                if terminated or truncated:
                    loop.episodes += 1
                    loop.recent_returns = (loop.recent_returns + [loop.episode_reward[k]])[-RECENT_EPISODES:]
                    if writer:
                        writer.add_scalar("charts/episodic_return", loop.episode_reward[k], global_step)
                        writer.add_scalar("charts/episodic_length", len(loop.episode_actions[k]), global_step)
                    loop.episode_actions[k], loop.episode_reward[k] = [], 0.0
                    loop.obs[k] = first

                # Learn: one gradient step per environment step after the warm-up.
                logged = agent.train_step(global_step) if global_step >= cfg.learning_starts else None
                if global_step % cfg.log_every == 0:
                    sps = (global_step + 1 - first_step) / (time.perf_counter() - started)
                    logged = {**(logged or {}), "SPS": sps}
                    if writer:
                        for key, value in logged.items():
                            writer.add_scalar(("charts/" if key == "SPS" else "losses/") + key, value, global_step)
                    if on_log:
                        on_log({"step": global_step + 1, "episodes": loop.episodes,
                                "episode_reward": np.mean(loop.recent_returns) if loop.recent_returns
                                else float("nan"), **logged})

                loop.global_step = global_step + 1
                if (k == n - 1 and out is not None and checkpoint_every
                        and loop.global_step % checkpoint_every == 0):
                    save_checkpoint(out, agent, copies, loop, settings, loop.wall_s + time.perf_counter() - started)
                    saved_at = loop.global_step
                if callback:
                    callback(loop.global_step, agent)
    finally:
        if writer:
            writer.close()
    wall_s = loop.wall_s + time.perf_counter() - started
    if out is not None and saved_at != loop.global_step:
        save_checkpoint(out, agent, copies, loop, settings, wall_s)
    steps_run = loop.global_step - first_step
    return LearnResult(loop.global_step, loop.episodes, wall_s,
                       steps_run / max(time.perf_counter() - started, 1e-9), list(loop.recent_returns))


def branch(agent: TD3, env, obs: np.ndarray, action: np.ndarray, workers: int) -> None:
    """Branch the pending decision (``rl.counterfactual``) with the action about to be taken and the
    agent's others, continuing each with the current actor; store the state's returns."""
    from td3sched.rl.counterfactual import numpy_actor

    cfg = agent.config
    actions = agent.branch_actions(obs, action)
    branches = env.unwrapped.branches(actions, cfg.branch_horizon_s, numpy_actor(agent), workers=workers)
    agent.branch_buffer.add(obs, actions, [b.discounted(cfg.gamma, cfg.gamma_per_hour) for b in branches])


def save_checkpoint(out: Path, agent: TD3, copies: list, loop: LoopState, settings: TrainSettings,
                    wall_s: float) -> None:
    """Write the checkpoint, then the model (each atomically). ``copies``: the env copies (``rl.workers``)."""
    width = agent.buffer.actions.shape[1]
    state = {
        "format": CHECKPOINT_FORMAT,
        "settings": settings.to_json(),
        "config": agent.config.to_json(),
        "agent": agent.state_dict(),
        "envs": [copy.state_dict() for copy in copies],
        "episode_actions": [torch.from_numpy(np.array(a, dtype=np.float32).reshape(-1, width))
                            for a in loop.episode_actions],
        "loop": {"global_step": loop.global_step,
                 "obs": torch.from_numpy(np.asarray(loop.obs, dtype=np.float32)),
                 "episode_reward": list(loop.episode_reward), "episodes": loop.episodes,
                 "recent_returns": list(loop.recent_returns), "wall_s": wall_s},
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(out / CHECKPOINT_FILE, buf.getvalue())
    agent.save(out, {**settings.to_json(), "training": {
        "steps": loop.global_step, "episodes": loop.episodes, "wall_s": wall_s, "env_workers": settings.env_workers,
        "algo": agent.config.algo, "recent_returns": list(loop.recent_returns),
        "preactivation_saturation": saturation_summary(agent.saturation_log)}})


def saturation_summary(log: list[list[float]], points: int = 50) -> dict:
    """The share of saturated pre-activations over training (``TD3.saturation_log``), for the model
    card: the threshold, the last share and at most ``points`` evenly spaced [step, share] pairs."""
    from td3sched.rl.actions import SATURATION

    picked = [log[i] for i in np.unique(np.linspace(0, len(log) - 1, min(points, len(log))).round().astype(int))] \
        if log else []
    return {"threshold": SATURATION, "last": log[-1][1] if log else None,
            "steps_share": [[int(a), round(float(b), 4)] for a, b in picked]}


def read_checkpoint(path: Path) -> dict:
    """The checkpoint at ``path``, read with ``weights_only=True``, in the current format (a format-1
    checkpoint, written before env copies, holds one copy); a CheckpointError otherwise."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    except Exception as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") not in (1, CHECKPOINT_FORMAT):
        raise CheckpointError(f"{path}: not a td3sched checkpoint of format 1 or {CHECKPOINT_FORMAT}")
    if state["format"] == 1:
        loop = state["loop"]
        state = {**state, "format": CHECKPOINT_FORMAT, "envs": [state.pop("env")],
                 "episode_actions": [state["episode_actions"]],
                 "loop": {**loop, "obs": loop["obs"][None], "episode_reward": [loop["episode_reward"]]}}
    return state


def resume_from(path: Path, agent: TD3, copies: list, settings: TrainSettings) -> LoopState:
    """Load the checkpoint into ``agent``, bring each env copy back to its step; the loop's state."""
    state = read_checkpoint(path)
    try:  # a checkpoint written before a config field existed reads with the value it was trained with
        have_config = TD3Config.from_json(state["config"]).to_json()
        have_settings = TrainSettings.from_json(state["settings"]).to_json()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: config or settings unreadable ({exc})") from None
    for name, have, want in (("settings", have_settings, settings.to_json()),
                             ("config", have_config, agent.config.to_json())):
        diff = {k: (have.get(k), want.get(k)) for k in set(have) | set(want) if have.get(k) != want.get(k)}
        if diff:
            raise CheckpointError(f"{path}: {name} differ from this run's (checkpoint, now): {diff}")
    agent.load_state_dict(state["agent"])
    loop_state = state["loop"]
    saved = loop_state["obs"].numpy()
    actions = [a.numpy() for a in state["episode_actions"]]
    if len(state["envs"]) != len(copies):
        raise CheckpointError(f"{path}: {len(state['envs'])} env copies: expected {len(copies)}")
    pending = [copy.start_replay(env_state, copy_actions)  # the simulator is deterministic
               for copy, env_state, copy_actions in zip(copies, state["envs"], actions)]
    for copy, answer, copy_actions, copy_obs in zip(copies, pending, actions, saved):
        obs = answer()
        if not np.array_equal(obs, copy_obs):
            raise CheckpointError(f"{path}: replaying env copy {copy.index}'s running episode ({len(copy_actions)} "
                                  "actions) did not reach the saved observation: the code or the scenario changed "
                                  "since the checkpoint")
    return LoopState(int(loop_state["global_step"]), list(saved), [list(a) for a in actions],
                     [float(r) for r in loop_state["episode_reward"]], int(loop_state["episodes"]),
                     [float(r) for r in loop_state["recent_returns"]], float(loop_state["wall_s"]))


def checkpoint_settings(out: Path) -> tuple[TrainSettings, TD3Config, int]:
    """(settings, config, steps done) of the checkpoint in run folder ``out``."""
    path = Path(out) / CHECKPOINT_FILE
    state = read_checkpoint(path)
    try:
        return (TrainSettings.from_json(state["settings"]), TD3Config.from_json(state["config"]),
                int(state["loop"]["global_step"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: settings or config unreadable ({exc})") from None


def train(out: Path, total_steps: int, settings: TrainSettings, config: TD3Config, *, checkpoint_every: int = 0,
          resume: bool = False, on_log: Callable[[dict], None] | None = None, branch_workers: int = 2,
          ray_address: str | None = None, selection=None, say: Callable[[str], None] | None = None) -> LearnResult:
    """Build the env and the agent of ``settings`` and ``config``, then ``learn`` into run folder ``out``.
    ``selection`` (an ``rl.select.SelectionConfig``): validate every checkpoint's actor on held-out days
    and keep the best as ``out/best`` (``rl.select``); ``say`` receives a line per validated candidate."""
    from td3sched.rl.observation import OBSERVATION_SIZE

    selector = None
    if selection is not None:
        from td3sched.rl.select import Selector, check_held_out
        from td3sched.scenario import load_scenario

        if not checkpoint_every:
            raise ValueError("a selection span validates each checkpoint: expected checkpoint_every > 0")
        check_held_out(load_scenario(settings.scenario, list(settings.overrides)), settings.span, selection.span)
        # a warm-started actor is a candidate once fitted to its anchor (the first gradient step's start)
        warm_start = config.learning_starts + 1 if config.anchor is not None else None
        selector = Selector(out, selection, settings, checkpoint_every, total_steps, say, first=warm_start)
    env = settings.make_env()
    try:
        agent = TD3(OBSERVATION_SIZE, config, settings.seed, settings.action_mode)
        return learn(agent, env, total_steps, out=out, checkpoint_every=checkpoint_every, resume=resume,
                     settings=settings, on_log=on_log, branch_workers=branch_workers, ray_address=ray_address,
                     callback=selector, on_resume=selector.catch_up if selector else None)
    finally:
        env.close()
