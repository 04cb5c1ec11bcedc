"""The action of one decision and the score arguments it stands for.

An action is 5 numbers in [-LOGIT_LIMIT, LOGIT_LIMIT] (the env's ``Box``): pre-activations, so that
exploration and target-smoothing noise are added before the squashing.

    [w_cpu, w_mem, w_io, w_net] = softmax(action[0:4])     weights on the simplex
    tau                         = sigmoid(action[4])        target utilisation in (0, 1)

``action_mode="seed"`` (the reference design) ignores ``action[4]`` and fixes tau = 0: the score is
then the weighted idle fractions. The weights and tau go to the ``static-weights`` score unchanged.
"""

from __future__ import annotations

import math

import numpy as np

ACTION_SIZE = 5
LOGIT_LIMIT = 5.0
"""Bound of every pre-activation: softmax weights can still reach a 1 : e^10 ratio and tau lies in
[0.0067, 0.9933]."""
ACTION_MODES = ("full", "seed")
ACTION_SIZES = {"full": ACTION_SIZE, "seed": ACTION_SIZE}
"""Numbers an actor of each mode outputs (the seed mode's actor outputs a tau pre-activation too,
which the decoding ignores): a served model's output width is checked against its card's mode."""


def check_action_mode(mode: str) -> str:
    if mode not in ACTION_MODES:
        raise ValueError(f"action mode {mode!r}: expected one of {', '.join(ACTION_MODES)}")
    return mode


def action_size(mode: str) -> int:
    """The action width of an actor trained in ``mode``."""
    return ACTION_SIZES[check_action_mode(mode)]


def action_to_weights(action, mode: str = "full") -> tuple[np.ndarray, float]:
    """(weights [4] on the simplex, tau in [0, 1]) of an action; out-of-box values are clipped."""
    a = np.asarray(action, dtype=np.float64)
    if a.shape != (action_size(mode),) or not np.all(np.isfinite(a)):
        raise ValueError(f"action {np.asarray(action).tolist()}: expected {action_size(mode)} finite numbers "
                         "(4 weight logits, 1 tau pre-activation)")
    a = np.clip(a, -LOGIT_LIMIT, LOGIT_LIMIT)
    e = np.exp(a[:4] - a[:4].max())
    weights = e / e.sum()
    tau = 0.0 if mode == "seed" else 1.0 / (1.0 + math.exp(-a[4]))
    return weights, tau
