"""``td3sched offline-rl``: TD3+BC on scheduling history (the offline half of offline-to-online).

Transitions come from a history's rows (``lifecycle.history``), one run at a time (rows of one
source, scenario, seed and policy, in decision order):

    (observation_k, action_k, reward_k, observation_k+1, elapsed_s_k)

- ``action_k``: the row's ``action`` (a td3 policy's pre-activations), else the pre-activations of
  its ``weights`` and ``tau`` (a static-weights policy: ``rl.actions.encode``, the inverse of
  ``rl.actions.decode`` within its bound); a row with neither (k8s-default, imports) has no action in the
  actor's space and gives no transition;
- ``reward_k`` and ``elapsed_s_k``: the row's (``reward.py``, the semi-MDP period): rows without a
  reward (the warm-up, the engine's log) give none;
- the run's last decision has no next observation and gives none (as ``rl.train`` does not store the
  last step of an episode); no transition is terminal.

They fill a TD3 replay buffer, and ``TD3.train_step`` runs with ``TD3Config.bc_alpha`` (TD3+BC,
Fujimoto and Gu 2021: the actor minimises -lambda Q + (pi(s) - a)^2, lambda = alpha / mean |Q|),
from a given model (a behaviour-cloned one, say) or from scratch; the observation normaliser is the
model's, or fitted on the transitions. The online half (TD3 on the simulator with the behaviour weight
decayed) is not done yet (docs/lifecycle.md).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.lifecycle.history import HistoryError, read_history
from td3sched.rl.actions import LOGIT_LIMIT, ScoreArgs, encode
from td3sched.rl.observation import OBSERVATION_SIZE

DEFAULT_ALPHA = 2.5
"""TD3+BC's alpha (the paper's)."""


class Transitions:
    def __init__(self, obs, actions, rewards, next_obs, elapsed_s, counts: dict):
        self.obs, self.actions, self.rewards, self.next_obs, self.elapsed_s = obs, actions, rewards, next_obs, elapsed_s
        self.counts = counts

    def __len__(self) -> int:
        return len(self.rewards)


def transitions_from_history(history, action_mode: str = "full") -> Transitions:
    """The transitions of a history (see the module's docstring), with counts of what was left out."""
    table = read_history(history, ["source", "scenario", "seed", "policy", "decision_id", "time_s", "observation",
                                   "action", "weights", "tau", "reward", "elapsed_s"])
    rows = table.to_pylist()
    runs: dict[tuple, list[dict]] = {}
    for row in rows:
        runs.setdefault((row["source"], row["scenario"], row["seed"], row["policy"]), []).append(row)
    out = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "elapsed_s")}
    counts = {"rows": len(rows), "runs": len(runs), "no_action": 0, "no_reward": 0, "last_of_run": 0}
    for run in runs.values():
        run.sort(key=lambda r: (r["time_s"], _seq(r["decision_id"])))
        for row, following in zip(run, [*run[1:], None]):
            if following is None:
                counts["last_of_run"] += 1
                continue
            if row["reward"] is None or row["observation"] is None or following["observation"] is None:
                counts["no_reward"] += 1
                continue
            if row["action"] is not None:
                action = np.clip(np.asarray(row["action"], dtype=np.float32), -LOGIT_LIMIT, LOGIT_LIMIT)
            elif row["weights"] is not None and row["tau"] is not None:
                action = encode(ScoreArgs(np.asarray(row["weights"], dtype=np.float64), float(row["tau"])), action_mode)
            else:
                counts["no_action"] += 1
                continue
            out["obs"].append(row["observation"])
            out["actions"].append(action)
            out["rewards"].append(row["reward"])
            out["next_obs"].append(following["observation"])
            out["elapsed_s"].append(row["elapsed_s"] or 0.0)
    if not out["rewards"]:
        raise HistoryError(f"history {history}: no transition ({counts}): expected simulator history of a policy "
                           "of the product's score (static-weights, best-static, td3), with rewards")
    return Transitions(np.asarray(out["obs"], dtype=np.float32), np.asarray(out["actions"], dtype=np.float32),
                       np.asarray(out["rewards"], dtype=np.float32), np.asarray(out["next_obs"], dtype=np.float32),
                       np.asarray(out["elapsed_s"], dtype=np.float32), counts)


def _seq(decision_id: str) -> int:
    tail = str(decision_id).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def offline_td3bc(history, out, steps: int, alpha: float = DEFAULT_ALPHA, init=None, seed: int = 1,
                  gamma_per_hour: float | None = None, action_mode: str = "full",
                  progress: Callable[[str], None] | None = None) -> dict:
    """TD3+BC on the history's transitions for ``steps`` gradient steps, from the model folder ``init``
    (or a new agent); writes the model to ``out`` and returns its card's ``training`` entry."""
    import dataclasses

    from td3sched.rl.td3 import TD3, TD3Config

    say = progress or (lambda line: None)
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps={steps!r}: expected a whole number >= 1")
    if init is not None:
        agent = TD3.load(init)
        agent.config = dataclasses.replace(agent.config, bc_alpha=alpha, learning_starts=0)
        agent.seed = seed
        agent.rng = np.random.default_rng(seed)
        parent = dict(agent_card(init))
    else:
        agent = TD3(OBSERVATION_SIZE, TD3Config(bc_alpha=alpha, learning_starts=0, gamma_per_hour=gamma_per_hour),
                    seed, action_mode)
        parent = {}
    data = transitions_from_history(history, agent.action_mode)
    if init is None:
        agent.normalizer.update(data.obs)
    capacity = max(len(data), 1)
    from td3sched.rl.buffer import ReplayBuffer

    agent._buffer = ReplayBuffer(capacity, OBSERVATION_SIZE, data.actions.shape[1])
    for i in range(len(data)):
        agent.buffer.add(data.obs[i], data.actions[i], float(data.rewards[i]), data.next_obs[i], False,
                         float(data.elapsed_s[i]))
    say(f"{len(data):,} transitions ({data.counts}); TD3+BC alpha {alpha}, {steps:,} steps")
    t0 = time.perf_counter()
    logged = {}
    for step in range(1, steps + 1):
        got = agent.train_step(step)
        if got is not None:
            logged = got
        if step % max(steps // 10, 1) == 0 or step == steps:
            sps = step / max(time.perf_counter() - t0, 1e-9)
            say(f"step {step:,}/{steps:,}: critic loss {logged.get('qf_loss', math.nan):.4g}, actor loss "
                f"{agent.actor_loss:.4g}, Q1 {logged.get('qf1_values', math.nan):.4g}, {sps:,.0f} steps/s")
    behaviour_gap = float(np.abs(agent.predict(data.obs) - data.actions).mean())
    training = {"kind": "td3+bc", "history": str(history), "transitions": len(data), "counts": data.counts,
                "steps": steps, "alpha": alpha, "parent": parent.get("version"),
                "mean_abs_action_gap": behaviour_gap, "wall_s": round(time.perf_counter() - t0, 1),
                "last_losses": {k: float(v) for k, v in logged.items()}}
    scenarios = {s for s in read_history(history, ["scenario"]).column("scenario").to_pylist() if s}
    agent.save(Path(out), {"scenario": scenarios.pop() if len(scenarios) == 1 else parent.get("scenario"),
                           "overrides": [], "span": None, "episode_hours": None, "seed": seed, "training": training})
    return training


def agent_card(folder) -> dict:
    """The version and scenario of a model folder."""
    from td3sched.rl.card import folder_content_sha256

    card, content = folder_content_sha256(Path(folder))
    return {"version": content[:12], "scenario": card.get("scenario")}


def online_after_offline(model, history, out, steps: int, decay_steps: int | None, scenario: str = "tiny",
                         episode_hours: float = 12.0, eval_every: int = 500, eval_episode: dict | None = None,
                         seed: int = 1, action_hold_s: float = 0.0, warmup_hours: float = 0.0,
                         warmup_score: str | None = None, env_workers: int = 1,
                         progress: Callable[[str], None] | None = None) -> dict:
    """Online TD3 on the simulator from an offline TD3+BC model (``offline_td3bc``'s): the replay buffer
    starts with the history's transitions, the behaviour term's weight decays linearly to 0 over
    ``decay_steps`` (None: it is dropped at once, the naive switch), ``learning_starts`` is 0 (the
    model acts from the first step). Every ``eval_every`` steps (and at step 0) the deterministic actor's
    return on one fixed window (``eval_episode``, default: world 2, the span's first ``episode_hours``) is
    measured; the returns are in the result, with the model written to ``out``. ``action_hold_s``,
    ``warmup_hours`` and ``warmup_score``: the online episodes' (and the evaluation's) action hold and
    warm-up, as ``rl.train.TrainSettings`` (the history's transitions stay one a decision: a semi-MDP
    step of any length, discounted by its elapsed time). ``env_workers``: env copies stepped at once
    (``rl.workers``; ``steps`` a multiple of it)."""
    import dataclasses

    from td3sched.rl.env import ClusterSchedulingEnv, episode_return
    from td3sched.rl.td3 import TD3
    from td3sched.rl.train import TrainSettings, learn

    say = progress or (lambda line: None)
    agent = TD3.load(model)
    alpha = agent.config.bc_alpha if agent.config.bc_alpha is not None else DEFAULT_ALPHA
    agent.config = dataclasses.replace(agent.config, learning_starts=0, bc_alpha=alpha if decay_steps else None,
                                       bc_decay_steps=decay_steps)
    agent.seed, agent.rng = seed, np.random.default_rng(seed)
    data = transitions_from_history(history, agent.action_mode)
    for i in range(len(data)):
        agent.buffer.add(data.obs[i], data.actions[i], float(data.rewards[i]), data.next_obs[i], False,
                         float(data.elapsed_s[i]))
    settings = TrainSettings(scenario=scenario, seed=seed, span="train", episode_hours=episode_hours,
                             action_mode=agent.action_mode, action_hold_s=action_hold_s, warmup_hours=warmup_hours,
                             warmup_score=warmup_score, env_workers=env_workers)
    env = settings.make_env()
    eval_env = ClusterSchedulingEnv(scenario, "train", episode_hours, agent.action_mode, action_hold_s=action_hold_s,
                                    warmup_hours=warmup_hours, warmup_score=warmup_score)
    if eval_episode is None:
        start = eval_env.span_s[0]
        eval_episode = {"world_seed": 2, "start_s": start, "end_s": start + eval_env.episode_s, "sim_seed": 7}
    returns = [(0, episode_return(eval_env, eval_episode, agent.predict))]
    say(f"step 0: evaluation return {returns[-1][1]:.4f} ({len(data):,} history transitions in the buffer)")

    def evaluate(done: int, a) -> None:
        if done % eval_every == 0:
            returns.append((done, episode_return(eval_env, eval_episode, a.predict)))
            say(f"step {done:,}: evaluation return {returns[-1][1]:.4f}")

    result = learn(agent, env, steps, settings=settings, callback=evaluate)
    agent.save(Path(out), {**settings.to_json(), "training": {
        "kind": "td3+bc-online", "parent": agent_card(model)["version"], "steps": steps, "decay_steps": decay_steps,
        "env_workers": env_workers,
        "history_transitions": len(data), "evaluation_returns": returns, "eval_episode": eval_episode}})
    env.close()
    eval_env.close()
    return {"returns": returns, "episodes": result.episodes}
