"""The action of one decision and the score arguments it stands for.

An action is ``action_size(mode)`` numbers in [-LOGIT_LIMIT, LOGIT_LIMIT] (the env's ``Box``):
pre-activations, so that exploration and target-smoothing noise are added before the squashing.

    [w_cpu, w_mem, w_io, w_net] = softmax(action[0:4])                       weights on the simplex
    tau                         = sigmoid(action[4])                          target utilisation in (0, 1)
    ceiling                     = lo + (hi - lo) * sigmoid(action[5])         hold-back ceiling (mode "ceiling")
    requests share              = sigmoid(action[5])                          (modes "requests", "balance")
    balance share               = sigmoid(action[6])                          (mode "balance")
    fragmentation share         = sigmoid(action[5])                          (mode "fragmentation")

The action designs (``td3sched train --action``), each an action mode recorded in the model card:

    design                         mode      dimensions the actor outputs
    weights                        seed      w_cpu, w_mem, w_io, w_net, unused   tau fixed at 0 (the reference design)
    weights+tau                    full      w_cpu, w_mem, w_io, w_net, tau      (the default)
    weights+tau+ceiling            ceiling   w_cpu, w_mem, w_io, w_net, tau, ceiling
    weights+tau+requests           requests  w_cpu, w_mem, w_io, w_net, tau, requests
    weights+tau+requests+balance   balance   w_cpu, w_mem, w_io, w_net, tau, requests, balance
    weights+tau+frag               fragmentation  w_cpu, w_mem, w_io, w_net, tau, frag

The seed mode's actor outputs a fifth number which the decoding ignores (the shipped seed models do).
The ceiling is ``static-weights``' hold-back ceiling (``policy.static_weights``): nodes whose CPU
utilisation with the pod would exceed it are filtered for the pod, and with none left the pod waits.
Its range ``CEILING_RANGE`` is [0.5, 1.5]: the ceiling counts the pod's request on top of the node's
observed usage, so 1 still holds back pods that fit by requests where usage runs above them (on
one dlrm test window a ceiling of 0.997 cost a tenth of the static best's reward, docs/td3.md), the top of the
box (1.493) holds practically nothing back, and below half a node the hold-back would only leave
capacity idle. The requests share (``policy.features.with_requests``) blends the CPU and memory the score
reads between observed usage (0) and requests (1): kube-scheduler scores requests, so a policy cloned
from its history needs it (docs/lifecycle.md). The balance share (``policy.static_weights.product_score``)
blends the score with how alike the node's CPU and memory fill, kube-scheduler's BalancedAllocation: with
both shares the product's score can say what kube-scheduler's default scoring says. The fragmentation share
(``policy.static_weights.blend_fragmentation``) blends the score with fgd's, which reads each pool's
typical pods and the nodes' GPUs: the simulator's policies can score with it, the decision engine cannot
(its shadow state has neither), so it refuses a model that declares it. The model card declares the dimensions
(``card_action_dimensions``); cards written before it are read as their mode's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from td3sched.policy.static_weights import MAX_CEILING

ACTION_SIZE = 5
"""Width of the weights-and-tau action (modes full and seed): the shipped models' actors."""
LOGIT_LIMIT = 5.0
"""Bound of every pre-activation: softmax weights can still reach a 1 : e^10 ratio and tau lies in
[0.0067, 0.9933]."""
SATURATION = 0.9
"""A pre-activation counts as saturated (at the bound) beyond this fraction of LOGIT_LIMIT: there the
tanh's slope is under 0.19 and exploration noise barely moves the squashed action."""
CEILING_RANGE = (0.5, MAX_CEILING)
"""The ceiling a pre-activation of -inf and +inf stands for: in the box, [0.507, 1.493]."""
WEIGHT_DIMENSIONS = ("w_cpu", "w_mem", "w_io", "w_net")
ACTION_DIMENSIONS: dict[str, tuple[str, ...]] = {
    "full": (*WEIGHT_DIMENSIONS, "tau"),
    "seed": (*WEIGHT_DIMENSIONS, "unused"),
    "ceiling": (*WEIGHT_DIMENSIONS, "tau", "ceiling"),
    "requests": (*WEIGHT_DIMENSIONS, "tau", "requests"),
    "balance": (*WEIGHT_DIMENSIONS, "tau", "requests", "balance"),
    "fragmentation": (*WEIGHT_DIMENSIONS, "tau", "frag"),
}
"""The numbers an actor of each mode outputs, in order: a served model's output width and its card's
declared dimensions are checked against them."""
ACTION_MODES = tuple(ACTION_DIMENSIONS)
ACTION_DESIGNS = {"weights": "seed", "weights+tau": "full", "weights+tau+ceiling": "ceiling",
                  "weights+tau+requests": "requests", "weights+tau+requests+balance": "balance",
                  "weights+tau+frag": "fragmentation"}
"""``td3sched train --action`` names -> action mode (the mode names are accepted too)."""
DEFAULT_ACTION_DESIGN = "weights+tau"
ACTION_SIZES = {mode: len(dims) for mode, dims in ACTION_DIMENSIONS.items()}
REQUESTS_MODES = frozenset(mode for mode, dims in ACTION_DIMENSIONS.items() if "requests" in dims)
"""The modes whose actors declare a requests share (at ``action[5]``)."""


def reads_requests(mode: str) -> bool:
    """Whether an actor of action mode ``mode`` scores by the pods' requests (declares a requests share)."""
    return check_action_mode(mode) in REQUESTS_MODES


def check_action_mode(mode: str) -> str:
    if mode not in ACTION_MODES:
        raise ValueError(f"action mode {mode!r}: expected one of {', '.join(ACTION_MODES)}")
    return mode


def action_mode_of(name: str) -> str:
    """The action mode of a design name (``weights+tau``) or of a mode name (``full``)."""
    if name in ACTION_DESIGNS:
        return ACTION_DESIGNS[name]
    if name in ACTION_MODES:
        return name
    raise ValueError(f"action {name!r}: expected one of {', '.join(ACTION_DESIGNS)} (or the modes "
                     f"{', '.join(ACTION_MODES)})")


def design_of(mode: str) -> str:
    """The design name of an action mode."""
    return next(d for d, m in ACTION_DESIGNS.items() if m == check_action_mode(mode))


def action_size(mode: str) -> int:
    """The action width of an actor trained in ``mode``."""
    return ACTION_SIZES[check_action_mode(mode)]


def card_action_dimensions(card: dict) -> tuple[str, ...]:
    """The action dimensions a model card declares (``action_dimensions``), checked against its mode;
    a card written before the key existed declares its mode's. ValueError names a mismatch."""
    mode = check_action_mode(card["action_mode"])
    declared = card.get("action_dimensions")
    if declared is None:
        return ACTION_DIMENSIONS[mode]
    if not isinstance(declared, list) or tuple(declared) != ACTION_DIMENSIONS[mode]:
        raise ValueError(f"action_dimensions {declared!r}: expected {list(ACTION_DIMENSIONS[mode])} for action "
                         f"mode {mode!r}")
    return ACTION_DIMENSIONS[mode]


def check_hold(hold_s) -> float:
    """An action hold (``rl.policy.ActionPolicy``) as a float, or a ValueError naming it: a finite number
    of simulated seconds >= 0 (0: an action per decision)."""
    try:
        value = float(hold_s)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(hold_s, bool) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"action hold {hold_s!r}: expected a finite number of simulated seconds >= 0 (0: an action "
                         "per decision)")
    return value


def card_action_hold(card: dict) -> float:
    """The seconds a model card's action holds (``action_hold_s``; a card written before the key
    existed: 0, an action per decision). ValueError names a bad value."""
    hold = card.get("action_hold_s")
    return 0.0 if hold is None else check_hold(hold)


@dataclass(frozen=True)
class ScoreArgs:
    """What an action stands for: the score's weights and tau, the hold-back ceiling (None: none), the
    requests share (0: usage only), the balance share (0: no balance term), the fragmentation share
    (0: no fgd term) and the sibling spread (0: no sibling term; ``policy.siblings``). The spread is no
    action dimension: a model card fixes it (``sibling_spread``), ``decode`` gives 0."""

    weights: np.ndarray
    tau: float
    ceiling: float | None = None
    requests: float = 0.0
    balance: float = 0.0
    fragmentation: float = 0.0
    spread: float = 0.0


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def ceiling_of(pre_activation: float) -> float:
    """The ceiling a pre-activation stands for (``CEILING_RANGE``)."""
    lo, hi = CEILING_RANGE
    return lo + (hi - lo) * _sigmoid(pre_activation)


def decode(action, mode: str = "full") -> ScoreArgs:
    """The score arguments of an action; out-of-box values are clipped.

    A handful of numbers, so the arithmetic is on Python floats (the C library's ``exp``), not on
    NumPy arrays, whose per-call overhead is ten times the arithmetic here; it runs once per
    decision in the simulator's td3 policy and in the engine alike."""
    size = action_size(mode)
    a = np.asarray(action, dtype=np.float64)
    values = a.tolist()
    if a.shape != (size,) or not all(map(math.isfinite, values)):
        raise ValueError(f"action {np.asarray(action).tolist()}: expected {size} finite numbers "
                         f"({', '.join(ACTION_DIMENSIONS[mode])}; action mode {mode!r})")
    values = [min(max(v, -LOGIT_LIMIT), LOGIT_LIMIT) for v in values]
    top = max(values[:4])
    e = [math.exp(v - top) for v in values[:4]]
    total = sum(e)
    weights = np.array([x / total for x in e])
    tau = 0.0 if mode == "seed" else _sigmoid(values[4])
    return ScoreArgs(weights, tau, ceiling_of(values[5]) if mode == "ceiling" else None,
                     _sigmoid(values[5]) if mode in REQUESTS_MODES else 0.0,
                     _sigmoid(values[6]) if mode == "balance" else 0.0,
                     _sigmoid(values[5]) if mode == "fragmentation" else 0.0)


ANCHOR_BOUND = 0.8 * LOGIT_LIMIT
"""How far ``encode`` goes: 80% of the box, where the actor's penalty on its pre-activations starts
(``TD3Config.preactivation_penalty``) and exploration noise still moves the squashed action. A weight of
1 among zeros encodes to 0.9990 (e^8 : 1)."""


def static_score_args(spec: str, mode: str | None = "full") -> ScoreArgs:
    """The score arguments of a ``static-weights`` spec, for an actor of action mode ``mode`` (None:
    the spec alone is checked); a ValueError names a spec of another policy, or a ceiling, tau, requests
    share, balance share or fragmentation share the mode cannot express."""
    from td3sched.policy.static_weights import StaticWeights

    name, _, args = spec.partition(":")
    if name != StaticWeights.name:
        raise ValueError(f"static score {spec!r}: expected a static-weights spec, e.g. static-weights:w=1/0/0/0:tau=0.4")
    policy = StaticWeights.from_spec(args)
    args = ScoreArgs(np.asarray(policy.weights, dtype=np.float64), float(policy.tau), policy.ceiling,
                     policy.requests, policy.balance, policy.fragmentation, policy.spread)
    if mode is None:
        return args
    mode = check_action_mode(mode)
    if policy.ceiling is not None and mode != "ceiling":
        raise ValueError(f"static score {spec!r}: a ceiling needs the action mode 'ceiling' (weights+tau+ceiling), "
                         f"this one is {mode!r}")
    if policy.tau and mode == "seed":
        raise ValueError(f"static score {spec!r}: the action mode 'seed' (weights) fixes tau at 0")
    if policy.requests and not reads_requests(mode):
        raise ValueError(f"static score {spec!r}: a requests share needs the action mode 'requests' "
                         f"(weights+tau+requests) or 'balance', this one is {mode!r}")
    if policy.balance and mode != "balance":
        raise ValueError(f"static score {spec!r}: a balance share needs the action mode 'balance' "
                         f"(weights+tau+requests+balance), this one is {mode!r}")
    if policy.fragmentation and mode != "fragmentation":
        raise ValueError(f"static score {spec!r}: a fragmentation share needs the action mode 'fragmentation' "
                         f"(weights+tau+frag), this one is {mode!r}")
    return args


def _logit(p: float, bound: float) -> float:
    p = min(max(p, 1e-12), 1.0 - 1e-12)
    return min(max(math.log(p / (1.0 - p)), -bound), bound)


def encode(args: ScoreArgs, mode: str = "full", bound: float = ANCHOR_BOUND) -> np.ndarray:
    """Pre-activations (float32) that ``decode`` maps back to ``args`` as nearly as ``bound`` allows:
    the weights' logs centred between the largest and the smallest, a smallest more than ``2 x bound``
    below the largest (a weight of 0) counting as that far, and clipped there; tau's and the ceiling's
    logits clipped to ``[-bound, bound]`` (a ceiling without one in the ceiling mode: the top of the box),
    the requests, balance and fragmentation shares' likewise in the modes that have them.
    Weights within ``e^(2 x bound)`` of each other come back exactly, and near the middle of the box, where
    an actor reaches them easily."""
    mode = check_action_mode(mode)
    logs = [math.log(w) if w > 0 else -math.inf for w in np.asarray(args.weights, dtype=np.float64).tolist()]
    top = max(logs)
    middle = (top + max(min(logs), top - 2 * bound)) / 2
    out = [max(x - middle, -bound) for x in logs]
    out.append(0.0 if mode == "seed" else _logit(args.tau, bound))
    if mode == "ceiling":
        lo, hi = CEILING_RANGE
        out.append(bound if args.ceiling is None else _logit((args.ceiling - lo) / (hi - lo), bound))
    elif reads_requests(mode):
        out.append(_logit(args.requests, bound))
        if mode == "balance":
            out.append(_logit(args.balance, bound))
    elif mode == "fragmentation":
        out.append(_logit(args.fragmentation, bound))
    return np.array(out, dtype=np.float32)


def action_to_weights(action, mode: str = "full") -> tuple[np.ndarray, float]:
    """(weights [4] on the simplex, tau in [0, 1]) of an action; out-of-box values are clipped."""
    args = decode(action, mode)
    return args.weights, args.tau
