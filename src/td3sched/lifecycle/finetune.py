"""``td3sched finetune``: the serving model fine-tuned on the newest window of scheduling history.

The model's actor goes on learning by the behaviour-cloning loss (``lifecycle.bc``, its actor stage
alone: no static stage, the model's own normaliser kept) on the decisions of the last ``window`` of the
history (by ``time_s``: from the newest decision back), with a small learning rate. The result is a
candidate model folder whose card names its parent (``training.parent``: the parent's version), the
window, the learning rate and the agreement with the window's decisions before and after; its
critics are the parent's. A candidate serves nothing until the gate passes it (``lifecycle.gate``).

What it learns is to rank the window's chosen nodes first: from a history of the cluster's own
scheduler, of an operator's choices or of a better policy. Learning from the history's rewards is
TD3+BC (``lifecycle.offline``).

``finetune_on_replay`` (``--method replay``) learns from outcomes instead, where the history has none
(the engine's log, an import) or where they are the serving model's own choices (which the
behaviour-cloning loss would only copy): TD3 goes on, from the model with its critics, on the replay
of the window the gate replays (``gate.history_replay``: a simulator history's own scenario, or a
scenario rebuilt from a cluster's history on its nodes), its episodes as the model's card sets them
(hold, warm-up). The model acts with exploration noise from the first step, learning once its buffer
holds a batch of its own transitions; the behaviour term of TD3+BC (alpha ``DEFAULT_REPLAY_ALPHA``)
keeps the actor near the actions it replays, which are its own plus exploration noise: the model moves
a little a day.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.lifecycle.bc import BCConfig, behaviour_clone, save_bc_model
from td3sched.lifecycle.history import Decisions, HistoryError, read_history

UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DEFAULT_WINDOW = "7d"
DEFAULT_LR = 1e-5
DEFAULT_REPLAY_LR = 1e-4
"""Adam's learning rate of ``finetune_on_replay``: a third of training's (3e-4)."""
DEFAULT_REPLAY_STEPS = 600
"""TD3 steps of ``finetune_on_replay``: four days of 10-minute holds, the first ``batch_size`` (at most half)
filling the replay buffer with the model's own actions plus noise before the first gradient step."""
DEFAULT_REPLAY_ALPHA = 2.5
"""TD3+BC's alpha in ``finetune_on_replay`` (the paper's)."""


def parse_window(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``3600s`` (or a bare number of seconds) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"--window {text!r}: expected a positive duration such as 7d, 12h, 30m or 3600s")
    return float(m.group(1)) * UNITS_S[m.group(2) or "s"]


def newest_window(d: Decisions, window_s: float) -> Decisions:
    """The decisions within ``window_s`` of the newest one."""
    keep = d.time_s >= d.time_s.max() - window_s
    return d.subset(keep)


def finetune(history, model, out, window: str = DEFAULT_WINDOW, learning_rate: float = DEFAULT_LR,
             epochs: int = 5, seed: int = 1, validation_share: float = 0.1,
             progress: Callable[[str], None] | None = None) -> dict:
    """Fine-tune the model folder ``model`` on the newest ``window`` of ``history``; write the candidate
    to ``out``; return its card's ``training`` entry."""
    from td3sched.rl.model import load_model

    say = progress or (lambda line: None)
    window_s = parse_window(window)
    parent = load_model(model)
    table = read_history(history)
    d = newest_window(Decisions.from_table(table), window_s)
    if len(d) < 2:
        raise HistoryError(f"history {history}: {len(d)} decision(s) in the newest {window}: expected at least 2")
    say(f"{len(d):,} decisions in the newest {window} (time {d.time_s.min():.0f} to {d.time_s.max():.0f} s); parent "
        f"{parent.content_sha256[:12]}")
    config = BCConfig(epochs=epochs, learning_rate=learning_rate, action_mode=parent.action_mode,
                      validation_share=validation_share, seed=seed)
    actor = parent.actor
    result = behaviour_clone(d, config, actor=actor, normalizer=parent.normalizer, progress=say)
    card = parent.card
    training = {"kind": "finetune", "parent": parent.content_sha256[:12], "history": str(history),
                "window": window, "window_s": window_s, "decisions": len(d),
                "history_time_s": [float(d.time_s.min()), float(d.time_s.max())], "learning_rate": learning_rate,
                "bc_config": config.to_json(), **result.summary(), "parent_training": card.get("training")}
    critic = {k: v for k, v in parent.critic.state_dict().items()}
    save_bc_model(Path(out), result, {"scenario": card.get("scenario"), "overrides": card.get("overrides") or [],
                                      "span": card.get("span"), "episode_hours": card.get("episode_hours"),
                                      "seed": seed, "config": dict(card["config"]), "training": training,
                                      **({"sibling_spread": card["sibling_spread"]} if card.get("sibling_spread")
                                         else {})},  # the score's term, not the actor's: kept
                  critic_state=critic)
    return training


def finetune_on_replay(history, model, out, window: str = DEFAULT_WINDOW, learning_rate: float = DEFAULT_REPLAY_LR,
                       steps: int = DEFAULT_REPLAY_STEPS, alpha: float = DEFAULT_REPLAY_ALPHA, seed: int = 1,
                       node_list: dict | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """TD3 from the model folder ``model`` on the replay of the newest ``window`` of ``history`` for
    ``steps`` steps (see the module's docstring); write the candidate to ``out``; return its card's
    ``training`` entry. A cluster's history is rebuilt on the nodes of ``node_list`` (a v1.NodeList)."""
    import dataclasses
    import tempfile

    from td3sched.lifecycle.gate import history_replay
    from td3sched.rl.card import card_sibling_spread
    from td3sched.rl.model import load_model
    from td3sched.rl.td3 import TD3
    from td3sched.rl.train import TrainSettings, learn

    say = progress or (lambda line: None)
    if not (isinstance(steps, int) and steps >= 2):
        raise ValueError(f"steps={steps!r}: expected a whole number >= 2 (half at most fill the buffer)")
    if not learning_rate > 0:
        raise ValueError(f"learning rate {learning_rate!r}: expected a positive number")
    window_s = parse_window(window)
    parent = load_model(model)
    card = parent.card
    agent = TD3.load(model)
    # The buffer starts empty: the model acts (with noise) for a batch's worth of steps before it learns,
    # or its first gradient steps would fit the critics to a handful of transitions sampled over and over.
    starts = min(agent.config.batch_size, steps // 2)
    agent.config = dataclasses.replace(agent.config, learning_rate=learning_rate, learning_starts=starts,
                                       warmup_actor=True, anchor=None, bc_alpha=alpha, bc_decay_steps=None)
    for optimizer in (agent.actor_optimizer, agent.critic_optimizer):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
    agent.seed, agent.rng = seed, np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="td3sched-replay-") as rebuilt:
        scenario, span, overrides = history_replay(history, window_s, node_list, Path(rebuilt), progress=say)
        hours = min(float(card.get("episode_hours") or 24.0), window_s / 3600.0)
        settings = TrainSettings(scenario=scenario, seed=seed, span=span, episode_hours=hours,
                                 action_mode=agent.action_mode, overrides=tuple(overrides),
                                 action_hold_s=float(card.get("action_hold_s") or 0.0),
                                 warmup_hours=float(card.get("warmup_hours") or 0.0),
                                 warmup_score=card.get("warmup_score"), sibling_spread=card_sibling_spread(card))
        say(f"TD3 on the replay of the newest {window} ({scenario}, {' '.join(overrides) or span}), {hours:g} h "
            f"episodes, {steps:,} steps at {learning_rate:g}, alpha {alpha:g}; parent {parent.content_sha256[:12]}")
        env = settings.make_env()
        try:
            result = learn(agent, env, steps, settings=settings, on_log=lambda row: say(
                f"step {row['step']:,}/{steps:,}: episodes {row['episodes']}, return {row['episode_reward']:.4f}"))
        finally:
            env.close()
    training = {"kind": "finetune-replay", "parent": parent.content_sha256[:12], "history": str(history),
                "window": window, "window_s": window_s, "replay": {"scenario": scenario, "span": span,
                                                                  "overrides": list(overrides)},
                "steps": steps, "learning_rate": learning_rate, "alpha": alpha, "episodes": result.episodes,
                "recent_returns": [float(r) for r in result.recent_returns], "wall_s": round(result.wall_s, 1),
                "parent_training": card.get("training")}
    kept = {k: card[k] for k in ("action_hold_s", "warmup_hours", "warmup_score", "sibling_spread")
            if card.get(k) is not None}
    agent.save(Path(out), {"scenario": card.get("scenario"), "overrides": card.get("overrides") or [],
                           "span": card.get("span"), "episode_hours": card.get("episode_hours"), "seed": seed,
                           **kept, "training": training})
    return training


def agreement_gain(training: dict) -> float:
    """Agreement after minus before, on the window's decisions trained on."""
    return float(np.float64(training["train"]["agreement"]) - np.float64(training["initial_train"]["agreement"]))
