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
                                      "seed": seed, "config": dict(card["config"]), "training": training},
                  critic_state=critic)
    return training


def agreement_gain(training: dict) -> float:
    """Agreement after minus before, on the window's decisions trained on."""
    return float(np.float64(training["train"]["agreement"]) - np.float64(training["initial_train"]["agreement"]))
