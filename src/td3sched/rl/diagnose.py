"""What a trained model does, and how much its critic can tell its actions apart.

``inspect_model`` runs the model's deterministic actor over one window of a scenario (the env of
``rl.env``, so the states are the ones the policy itself visits) and reports

    weights_mean, weights_std   the weights [cpu, mem, io, net] chosen, mean and std over decisions
    tau_mean, tau_std           the target utilisation chosen (0 in the seed mode)
    saturated                   share of the actor's pre-activations within 10% of the box bound
                                (|x| > 4.5 of 5): the squashing is flat there, one-hot weights
    q_state_std                 std over the visited states of Q1(s, pi(s)): how much the critic
                                tells states apart
    q_action_std                mean over the states of the std of Q1(s, a) over ``n_actions``
                                uniformly random actions a: how much it tells actions apart
    q_policy_gain               mean of Q1(s, pi(s)) - mean_a Q1(s, a): what the critic thinks the
                                actor gains over a random action
    reward, decisions           the window's summed reward and its number of decisions

When ``q_action_std`` is a small fraction of ``q_state_std`` the actor's gradient (dQ/da) is mostly
noise: the critic has learned which states are bad, not which actions make them so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from td3sched.rl.actions import LOGIT_LIMIT, SATURATION, decode  # noqa: F401 (SATURATION re-exported)
from td3sched.rl.model import LoadedModel



@dataclass(frozen=True)
class Inspection:
    scenario: str
    span: str
    window_h: tuple[float, float]
    decisions: int
    reward: float
    weights_mean: list[float]
    weights_std: list[float]
    tau_mean: float
    tau_std: float
    saturated: float
    q_state_std: float
    q_action_std: float
    q_policy_gain: float
    ceiling_mean: float | None = None
    """The hold-back ceiling's mean and std over the decisions (a ceiling model), else None."""
    ceiling_std: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def inspect_model(model: LoadedModel, scenario: str, span: str = "test", episode_hours: float = 6.0,
                  seed: int = 1, n_actions: int = 64) -> Inspection:
    """Run ``model`` on one ``episode_hours`` window of ``scenario``'s ``span`` drawn by ``seed``."""
    from td3sched.rl.env import ClusterSchedulingEnv

    if n_actions < 2:
        raise ValueError(f"n_actions={n_actions}: expected at least 2 random actions per state")
    env = ClusterSchedulingEnv(scenario, span, episode_hours, model.action_mode)
    try:
        obs, _ = env.reset(seed=seed)
        observations, actions, reward = [], [], 0.0
        while True:
            action = model.act(obs)
            observations.append(obs)
            actions.append(action)
            obs, r, terminated, truncated, _ = env.step_logits(action)
            reward += r
            if terminated or truncated:
                break
        episode = env.episode
    finally:
        env.close()
    pre = np.asarray(actions)
    decoded = [decode(a, model.action_mode) for a in pre]
    weights = np.array([d.weights for d in decoded])
    taus = np.array([d.tau for d in decoded])
    ceilings = np.array([d.ceiling for d in decoded]) if model.action_mode == "ceiling" else None
    columns = pre[:, :4] if model.action_mode == "seed" else pre  # tau's pre-activation is unused in seed mode

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        x = torch.from_numpy(model.normalizer.normalize(np.asarray(observations)))
        q_policy = model.critic.q1(x, torch.from_numpy(pre)).view(-1)
        random_q = torch.stack([
            model.critic.q1(x, (torch.rand(pre.shape, generator=generator) * 2 - 1) * LOGIT_LIMIT).view(-1)
            for _ in range(n_actions)], dim=1)
    return Inspection(
        scenario=scenario, span=span, window_h=(episode.start_s / 3600, episode.end_s / 3600),
        decisions=len(pre), reward=float(reward),
        weights_mean=weights.mean(axis=0).tolist(), weights_std=weights.std(axis=0).tolist(),
        tau_mean=float(taus.mean()), tau_std=float(taus.std()),
        saturated=float(np.mean(np.abs(columns) > SATURATION * LOGIT_LIMIT)),
        q_state_std=float(q_policy.std()), q_action_std=float(random_q.std(dim=1).mean()),
        q_policy_gain=float((q_policy - random_q.mean(dim=1)).mean()),
        ceiling_mean=float(ceilings.mean()) if ceilings is not None else None,
        ceiling_std=float(ceilings.std()) if ceilings is not None else None,
    )
