"""The TD3 decision policy: per pod, an actor chooses the weights and target utilisation of the
``static-weights`` score from a fixed-size observation of the feasible nodes.

    observation.py  what the actor sees of a decision (35 values, any node count)
    actions.py      action (5 pre-activations) -> weights on the simplex and tau
    policy.py       ActionPolicy (static-weights with per-decision arguments) and the td3 policy
    env.py          td3sched/ClusterScheduling-v0: the simulator as a Gymnasium env (one step per decision)
    networks.py     actor and twin critics
    buffer.py       replay buffer
    normalizer.py   running mean / std of observations
    td3.py          TD3Config and the TD3 update (Fujimoto et al. 2018)
    train.py        the training loop: checkpoints, resume, TensorBoard
    model.py        a trained model: torch state dict + JSON model card, validated on load
    card.py         a model folder's files, card and content hash, read without torch
    onnx_export.py  the actor with its normaliser as an ONNX graph (td3sched export-onnx; needs torch)
    onnx_actor.py   that graph served by ONNX Runtime: the td3 policy's and the engine's inference

torch and gymnasium come with ``pip install 'td3sched[rl]'``; ``policy.py``, ``observation.py``,
``actions.py``, ``card.py`` and ``onnx_actor.py`` load without them.
"""

# td3sched.policy registers TD3Policy (rl/policy.py), which imports td3sched.policy's modules: load
# the policy package first, so that importing td3sched.rl.policy directly never meets a half-made one.
import td3sched.policy  # noqa: F401,E402
