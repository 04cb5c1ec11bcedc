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

from td3sched.rl.actions import (LOGIT_LIMIT, SATURATION, action_size, decode,  # noqa: F401 (SATURATION re-exported)
                                 reads_requests)
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


@dataclass(frozen=True)
class BranchStudy:
    """How much one decision's action moves the return, measured by counterfactual branches
    (``rl.counterfactual``): ``states`` decisions of one window, each forked into ``actions``
    uniformly random actions, twice (the second replicate with a fresh tie-breaking generator), each
    branch continued for ``horizon_s`` with the same continuation."""

    scenario: str
    span: str
    window_h: tuple[float, float]
    horizon_s: float
    states: int
    actions: int
    continuation: str
    actions_drawn: str
    """How the branches' actions were drawn."""
    return_std: float
    """Std of the branch returns pooled over states and actions: what a critic regressing on returns
    sees."""
    action_rms: float
    """Root mean square of the action's effect within a state (the part of the centred returns both
    replicates agree on)."""
    noise_rms: float
    """Root mean square of the centred returns' part the second replicate does not reproduce."""
    action_share_returns: float
    """action_rms^2 / return_std^2: the action's share of the pooled returns' variance (the audit's
    measure; the rest is the state's value and noise)."""
    action_share_differences: float
    """The action's share of the variance of the centred returns, the branch loss's target."""
    critic_corr: float | None = None
    """With a model: correlation of its Q1(s, a_k) - mean_j Q1(s, a_j) with the centred returns."""
    critic_action_rms: float | None = None
    """With a model: root mean square of its centred Q1 (against action_rms: the scale it hears)."""

    def to_json(self) -> dict:
        return asdict(self)


def spread_action(mode: str) -> np.ndarray:
    """A study's continuation without a model: equal weights, tau at its lowest (spread), a ceiling of 1
    and shares at their lowest (usage, no balance term) in the modes that have them."""
    action = np.zeros(action_size(mode), dtype=np.float32)
    action[4] = -LOGIT_LIMIT
    if reads_requests(mode):
        action[5:] = -LOGIT_LIMIT
    return action


def branch_study(model: LoadedModel | None, scenario: str, span: str = "test", episode_hours: float = 6.0,
                 seed: int = 1, states: int = 40, actions: int = 6, horizon_s: float = 1800.0, every: int = 5,
                 action_mode: str = "full", workers: int = 2, overrides: tuple[str, ...] = (),
                 around_actor: float | None = None, hold: bool = False, action_hold_s: float = 0.0) -> BranchStudy:
    """Walk one window with ``model``'s deterministic actor (or the spread continuation without one)
    and branch every ``every``-th decision until ``states`` are studied or the window ends. The
    branches' actions are uniformly random, or with ``around_actor`` the actor's plus Gaussian noise
    of that standard deviation (as training branches them, ``TD3Config.branch_noise``). With ``hold``
    each branch keeps its action for every decision of its horizon (an action held for ``horizon_s``,
    ``--action-hold``) instead of handing over to the continuation after the first. The env holds
    every action for the model's ``action_hold_s`` (without a model: ``action_hold_s``), as the
    model was trained and acts."""
    from td3sched.rl.counterfactual import numpy_actor
    from td3sched.rl.env import ClusterSchedulingEnv

    if actions < 2 or states < 1 or every < 1:
        raise ValueError(f"actions={actions}, states={states}, every={every}: expected at least 2 actions per "
                         "state, 1 state and a positive spacing")
    mode = model.action_mode if model is not None else action_mode
    size = action_size(mode)
    if model is not None:
        act = numpy_actor(model)
        name = f"the model's actor ({model.folder})"
    else:
        fixed = spread_action(mode)
        act, name = (lambda obs: fixed), "equal weights, tau 0 (no model)"
    rng = np.random.default_rng([seed, 17])
    env = ClusterSchedulingEnv(scenario, span, episode_hours, mode, overrides,
                               action_hold_s=model.action_hold_s if model is not None else action_hold_s)
    if env.action_hold_s:
        name += f", every action held {env.action_hold_s:g} s"
    observations, tried, first, second = [], [], [], []
    try:
        obs, _ = env.reset(seed=seed)
        step = 0
        while len(observations) < states:
            if step % every == 0:
                if around_actor is None:
                    candidates = rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, (actions, size)).astype(np.float32)
                else:
                    candidates = np.clip(act(obs) + rng.normal(0.0, around_actor, (actions, size)),
                                         -LOGIT_LIMIT, LOGIT_LIMIT).astype(np.float32)
                after = None if hold else act
                a = env.branches(candidates, horizon_s, after, workers=workers)
                b = env.branches(candidates, horizon_s, after, workers=workers, reseed=int(rng.integers(2**31)))
                observations.append(obs)
                tried.append(candidates)
                first.append([x.discounted() for x in a])
                second.append([x.discounted() for x in b])
            obs, _, terminated, truncated, _ = env.step_logits(act(obs))
            step += 1
            if terminated or truncated:
                break
        episode = env.episode
    finally:
        env.close()
    if not observations:
        raise ValueError(f"{scenario}/{span}: the window held no decision to branch")
    g1, g2 = np.array(first), np.array(second)
    d1, d2 = g1 - g1.mean(axis=1, keepdims=True), g2 - g2.mean(axis=1, keepdims=True)
    signal = max(float(np.mean(d1 * d2)), 0.0)
    spread = float(np.mean((d1 ** 2 + d2 ** 2) / 2))
    pooled = float(g1.var())
    critic_corr = critic_rms = None
    if model is not None:
        k = g1.shape[1]
        with torch.no_grad():
            x = torch.from_numpy(model.normalizer.normalize(np.asarray(observations))).repeat_interleave(k, dim=0)
            q = model.critic.q1(x, torch.from_numpy(np.concatenate(tried))).view(-1, k).numpy().astype(np.float64)
        qc = q - q.mean(axis=1, keepdims=True)
        denom = float(np.linalg.norm(qc) * np.linalg.norm(d1))
        critic_corr = float(np.sum(qc * d1) / denom) if denom > 0 else float("nan")
        critic_rms = float(np.sqrt(np.mean(qc ** 2)))
    return BranchStudy(
        scenario=scenario, span=span, window_h=(episode.start_s / 3600, episode.end_s / 3600), horizon_s=horizon_s,
        states=len(observations), actions=actions,
        continuation=f"each branch's action held for {horizon_s:g} s" if hold else name,
        actions_drawn="uniform" if around_actor is None else f"actor + N(0, {around_actor:g})",
        return_std=float(np.sqrt(pooled)), action_rms=float(np.sqrt(signal)),
        noise_rms=float(np.sqrt(max(spread - signal, 0.0))),
        action_share_returns=signal / pooled if pooled > 0 else float("nan"),
        action_share_differences=signal / spread if spread > 0 else float("nan"),
        critic_corr=critic_corr, critic_action_rms=critic_rms)
