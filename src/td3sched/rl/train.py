"""The training loop (CleanRL's, with Stable-Baselines3's ``learn``): collect one decision, store
it, take one gradient step; log every ``log_every`` steps; checkpoint every ``checkpoint_every``.

A run folder holds

    checkpoint.pt         everything to go on exactly (written atomically, replaced each time)
    model.pt, model.json  the latest model (``rl.model``): ``td3:FOLDER`` runs it in the harness
    tb/                   TensorBoard events: losses/* (losses/saturated: the share of the actor's
                          pre-activations at the bound), charts/SPS, charts/episodic_return

A checkpoint holds the networks, optimisers, replay buffer, normaliser, step counter, the agent's
and torch's RNG states, the env's draw generator, the running episode (its window and seeds) and
the actions taken in it so far. ``resume`` restarts that episode and replays those actions, which
brings the simulator back to the same state, so a resumed run takes the same steps as an
uninterrupted one (bit for bit on the same machine and torch build).

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
CHECKPOINT_FORMAT = 1
RECENT_EPISODES = 10
"""Episode returns kept for the running mean shown while training."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed, with the file and the reason."""


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

    def __post_init__(self) -> None:
        if self.warmup_hours or self.warmup_score is not None:
            from td3sched.rl.env import check_warmup

            check_warmup(self.warmup_hours, self.warmup_score, self.action_mode)

    def make_env(self):
        from td3sched.rl.env import ClusterSchedulingEnv

        return ClusterSchedulingEnv(self.scenario, self.span, self.episode_hours, self.action_mode, self.overrides,
                                    action_hold_s=self.action_hold_s, warmup_hours=self.warmup_hours,
                                    warmup_score=self.warmup_score)

    @classmethod
    def of_env(cls, env, seed: int) -> "TrainSettings":
        """The settings ``env`` was made with, and ``seed``."""
        e = env.unwrapped
        return cls(e.scenario_name, seed, e.span, e.episode_s / 3600.0, e.action_mode, tuple(e.scenario.overrides),
                   e.action_hold_s, e.warmup_s / 3600.0, e.warmup_score)

    def to_json(self) -> dict:
        return {**asdict(self), "overrides": list(self.overrides)}

    @classmethod
    def from_json(cls, d: dict) -> "TrainSettings":
        return cls(**{**d, "overrides": tuple(d["overrides"])})


@dataclass
class LoopState:
    """Where the loop is: the next step, the current observation and episode."""

    global_step: int = 0
    obs: np.ndarray | None = None
    episode_actions: list[np.ndarray] = field(default_factory=list)
    episode_reward: float = 0.0
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
          callback: Callable[[int, TD3], None] | None = None, branch_workers: int = 2) -> LearnResult:
    """Train ``agent`` on ``env`` until ``total_steps`` steps. With ``out``: TensorBoard logs, a
    checkpoint every ``checkpoint_every`` steps and at the end, and the model at each checkpoint.
    ``resume`` goes on from ``out``'s checkpoint. ``on_log`` receives the logged values.
    ``callback(steps_done, agent)`` runs after every step, once its transition is stored, its gradient
    step taken and its checkpoint written, with the steps done so far (1 after the first); it may read
    the agent (e.g. evaluate it on another env) but must not change it or step ``env``.
    ``branch_workers``: simulator processes running counterfactual branches at once
    (``TD3Config.branch_every``; the results do not depend on it).
    ``settings`` (recorded in checkpoints and the model card) default to the env's, with the agent's
    seed; the first episode is drawn with ``settings.seed``."""
    cfg = agent.config
    out = Path(out) if out is not None else None
    settings = settings or TrainSettings.of_env(env, agent.seed)
    if agent.action_mode != env.unwrapped.action_mode:
        raise ValueError(f"the agent's action mode {agent.action_mode!r} differs from the env's "
                         f"{env.unwrapped.action_mode!r}")
    if resume:
        if out is None:
            raise ValueError("resume needs the run folder (out) holding the checkpoint")
        loop = resume_from(out / CHECKPOINT_FILE, agent, env, settings)
    else:
        loop = LoopState()
        loop.obs, _ = env.reset(seed=settings.seed)
    writer = None
    if out is not None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=loop.global_step if resume else None)
        if not resume:
            writer.add_text("config", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in {**settings.to_json(), **cfg.to_json()}.items()))

    first_step, started = loop.global_step, time.perf_counter()
    obs, saved_at = loop.obs, None
    try:
        for global_step in range(loop.global_step, total_steps):
            # Act: the warm-up's action (uniformly random, or the anchor's plus noise), then the actor plus
            # exploration noise.
            agent.normalizer.update(obs)
            warming = global_step < cfg.learning_starts and not cfg.warmup_actor
            action = agent.warmup_action() if warming else agent.explore(obs)
            if cfg.branch_every and global_step >= cfg.learning_starts and global_step % cfg.branch_every == 0:
                branch(agent, env, obs, action, branch_workers)
            next_obs, reward, terminated, truncated, info = env.step_logits(action)
            if not truncated:  # a truncated step has no next decision to bootstrap from: not stored
                agent.buffer.add(obs, action, reward, next_obs, terminated, info.get("elapsed_s", 0.0))
            loop.episode_actions.append(action)
            loop.episode_reward += reward
            obs = next_obs
            if terminated or truncated:
                loop.episodes += 1
                loop.recent_returns = (loop.recent_returns + [loop.episode_reward])[-RECENT_EPISODES:]
                if writer:
                    writer.add_scalar("charts/episodic_return", loop.episode_reward, global_step)
                    writer.add_scalar("charts/episodic_length", len(loop.episode_actions), global_step)
                loop.episode_actions, loop.episode_reward = [], 0.0
                obs, _ = env.reset()

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
                            "episode_reward": np.mean(loop.recent_returns) if loop.recent_returns else float("nan"),
                            **logged})

            loop.global_step, loop.obs = global_step + 1, obs
            if out is not None and checkpoint_every and loop.global_step % checkpoint_every == 0:
                save_checkpoint(out, agent, env, loop, settings, loop.wall_s + time.perf_counter() - started)
                saved_at = loop.global_step
            if callback:
                callback(loop.global_step, agent)
    finally:
        if writer:
            writer.close()
    wall_s = loop.wall_s + time.perf_counter() - started
    if out is not None and saved_at != loop.global_step:
        save_checkpoint(out, agent, env, loop, settings, wall_s)
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


def save_checkpoint(out: Path, agent: TD3, env, loop: LoopState, settings: TrainSettings, wall_s: float) -> None:
    """Write the checkpoint, then the model (each atomically)."""
    actions = np.array(loop.episode_actions, dtype=np.float32).reshape(-1, agent.buffer.actions.shape[1])
    state = {
        "format": CHECKPOINT_FORMAT,
        "settings": settings.to_json(),
        "config": agent.config.to_json(),
        "agent": agent.state_dict(),
        "env": env.unwrapped.state_dict(),
        "episode_actions": torch.from_numpy(actions),
        "loop": {"global_step": loop.global_step, "obs": torch.from_numpy(np.asarray(loop.obs, dtype=np.float32)),
                 "episode_reward": loop.episode_reward, "episodes": loop.episodes,
                 "recent_returns": list(loop.recent_returns), "wall_s": wall_s},
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    write_atomic(out / CHECKPOINT_FILE, buf.getvalue())
    agent.save(out, {**settings.to_json(), "training": {
        "steps": loop.global_step, "episodes": loop.episodes, "wall_s": wall_s,
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
    """The checkpoint at ``path``, read with ``weights_only=True``; a CheckpointError otherwise."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint to resume from") from None
    except Exception as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a td3sched checkpoint of format {CHECKPOINT_FORMAT}")
    return state


def resume_from(path: Path, agent: TD3, env, settings: TrainSettings) -> LoopState:
    """Load the checkpoint into ``agent``, bring ``env`` back to its step; the loop's state."""
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
    obs = env.unwrapped.restore(state["env"])
    actions = state["episode_actions"].numpy()
    for action in actions:  # replay the episode so far: the simulator is deterministic
        obs, _, terminated, truncated, _ = env.step_logits(action)
        if terminated or truncated:
            break
    saved = loop_state["obs"].numpy()
    if not np.array_equal(obs, saved):
        raise CheckpointError(f"{path}: replaying the running episode's {len(actions)} actions did not reach the "
                              "saved observation: the code or the scenario changed since the checkpoint")
    return LoopState(int(loop_state["global_step"]), saved, list(actions), float(loop_state["episode_reward"]),
                     int(loop_state["episodes"]), [float(r) for r in loop_state["recent_returns"]],
                     float(loop_state["wall_s"]))


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
          resume: bool = False, on_log: Callable[[dict], None] | None = None, branch_workers: int = 2) -> LearnResult:
    """Build the env and the agent of ``settings`` and ``config``, then ``learn`` into run folder ``out``."""
    from td3sched.rl.observation import OBSERVATION_SIZE

    env = settings.make_env()
    try:
        agent = TD3(OBSERVATION_SIZE, config, settings.seed, settings.action_mode)
        return learn(agent, env, total_steps, out=out, checkpoint_every=checkpoint_every, resume=resume,
                     settings=settings, on_log=on_log, branch_workers=branch_workers)
    finally:
        env.close()
