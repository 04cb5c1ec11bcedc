"""A model folder that acts one ``static-weights`` spec whatever it observes (``td3sched static-model``).

The product's best measured score is static on both scenarios (docs/td3.md: ``static-weights:w=1/0/0/0:
tau=0.4:frag=0.25``, the score blended with FGD's), and a static score with a fragmentation share needs
what only a model card carries outside the simulator: the typical pods of each pool. Written as a model,
a static score is served, held, logged, gated, promoted and rolled back by the one path every model
takes (the engine, the td3score plugin, the lifecycle's registry), with nothing special-cased:

    actor(obs) = LOGIT_LIMIT x tanh(b)        b = atanh(encode(spec) / LOGIT_LIMIT), every weight 0

The last layer's weights are zero, so the observation does not reach the output; its bias is the
spec's pre-activations (``rl.actions.encode`` at the box's edge). ``decode`` gives the spec back up to
the action box: a weight of 0 among others comes back as about 5e-5 (the softmax of logits 10 apart),
a share of 0 or 1 as 0.0067 or 0.9933. The action mode is the smallest that expresses the spec (a
ceiling: ``ceiling``; a balance share: ``balance``; a requests share: ``requests``; a fragmentation
share: ``fragmentation``; else ``full``). A sibling spread is no action dimension: the card fixes it
(``sibling_spread``). A spec no mode expresses (a ceiling with a fragmentation
share, say) is refused, naming the spec. The networks are small (``HIDDEN``) and the critics as
initialised: the model is not trained, and its card says so (``training.static_spec``).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from td3sched.rl.actions import LOGIT_LIMIT, encode, static_score_args
from td3sched.rl.model import save_model
from td3sched.rl.observation import OBSERVATION_SIZE
from td3sched.rl.onnx_export import export_onnx
from td3sched.rl.td3 import TD3, TD3Config

HIDDEN = (8, 8)
"""The networks' hidden layers: the observation does not reach the output, so the smallest that the
serving paths (ONNX Runtime, the td3score plugin's actor) take as they take any model's."""
EDGE = 1.0 - 1e-6
"""How near the tanh's bound the bias goes: atanh(1) is infinite."""


def spec_mode(spec: str) -> str:
    """The smallest action mode whose actor can act ``spec`` (a ValueError names a spec of another
    policy, or one that no mode expresses)."""
    args = static_score_args(spec, None)
    wanted = [name for name, used in (("ceiling", args.ceiling is not None), ("balance", bool(args.balance)),
                                      ("requests", bool(args.requests) and not args.balance),
                                      ("fragmentation", bool(args.fragmentation))) if used]
    if len(wanted) > 1:
        raise ValueError(f"static score {spec!r}: {' and '.join(wanted)} together: no action mode has both "
                         "(rl.actions.ACTION_DIMENSIONS)")
    return wanted[0] if wanted else "full"


def write_static_model(spec: str, folder, scenario: str, overrides: tuple[str, ...] = (),
                       action_hold_s: float = 0.0) -> Path:
    """Write a model folder acting ``spec`` (and its ONNX graph); its card names ``scenario`` (with
    ``overrides``), whose typical pods a fragmentation share is scored with and whose best-static
    arguments are the engine's default fallback. Returns the folder."""
    if not (math.isfinite(action_hold_s) and action_hold_s >= 0):
        raise ValueError(f"action_hold_s={action_hold_s!r}: expected seconds >= 0")
    mode = spec_mode(spec)
    target = encode(static_score_args(spec, mode), mode, LOGIT_LIMIT)
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=HIDDEN, buffer_size=1, learning_starts=0), seed=0, action_mode=mode)
    last = agent.actor.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.atanh(torch.clamp(torch.as_tensor(target) / LOGIT_LIMIT, -EDGE, EDGE)))
    folder = Path(folder)
    spread = static_score_args(spec, mode).spread
    save_model(folder, agent, {"scenario": scenario, "overrides": list(overrides), "seed": 0,
                               "training": {"static_spec": spec, "steps": 0},
                               **({"action_hold_s": float(action_hold_s)} if action_hold_s else {}),
                               **({"sibling_spread": spread} if spread else {})})
    export_onnx(folder)
    return folder


__all__ = ["spec_mode", "write_static_model"]
