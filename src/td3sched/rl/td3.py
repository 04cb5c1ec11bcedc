"""TD3 (Fujimoto, van Hoof, Meger 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"; sfujim/TD3), over pre-activation actions (``rl.actions``).

The update (``TD3.train_step``) reads top to bottom with the paper's three mechanisms by name:

1. target policy smoothing: clipped Gaussian noise on the target actor's pre-activations;
2. clipped double-Q learning: the target is r + gamma * min(Q1', Q2');
3. delayed policy updates: the actor and all targets move every ``policy_frequency`` steps,
   the targets by Polyak averaging (soft target updates).

``algo="ddpg"`` is the ablation: one critic, no smoothing, no delay.

The small user API follows Stable-Baselines3: ``TD3(...)``, ``learn(env, steps)`` (``rl.train``),
``predict(obs)``, ``save(folder)`` / ``TD3.load(folder)`` (``rl.model``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import optim

from td3sched.rl.actions import LOGIT_LIMIT, SATURATION, action_size, check_action_mode, encode, static_score_args
from td3sched.rl.buffer import BranchBuffer, ReplayBuffer
from td3sched.rl.networks import Actor, Critic
from td3sched.rl.normalizer import ObservationNormalizer
from td3sched.rl.observation import OBSERVATION_SIZE, std_floor

ALGOS = ("td3", "ddpg")
RAW_FREE = math.atanh(0.8)
"""The actor's raw outputs within +-RAW_FREE (pre-activations within 80% of the bound) are not penalised."""


def observation_std_floor(observation_size: int) -> np.ndarray | None:
    """The normaliser's std floors (``rl.observation.STD_FLOORS``) for the package's observation; none
    for another size (an agent on another env)."""
    return std_floor() if observation_size == OBSERVATION_SIZE else None


@dataclass(frozen=True)
class TD3Config:
    algo: str = "td3"
    """td3, or ddpg: one critic, no target policy smoothing, no delay (the actor moves every step)."""
    gamma: float = 0.99
    """Discount factor per step (used when ``gamma_per_hour`` is None)."""
    gamma_per_hour: float | None = None
    """Semi-MDP discount: a transition that took dt simulated seconds is discounted by
    gamma_per_hour ** (dt / 3600) (``reward.discount``), so the horizon is in time, not in decisions
    (Decima). None: ``gamma`` per step."""
    tau: float = 0.005
    """Polyak coefficient of the soft target updates: target <- tau * online + (1 - tau) * target."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_rate: float = 3e-4
    """Adam's learning rate, actor and critics."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 10_000
    """Steps of uniformly random actions (warm-up) before the first gradient step."""
    policy_frequency: int = 2
    """Delayed policy updates: the actor and the targets move every this many critic updates."""
    exploration_noise: float = 0.5
    """Standard deviation of the Gaussian noise on the actor's pre-activations while collecting
    (logit units: 0.1 of the action bound, as sfujim/TD3's 0.1 x max_action)."""
    policy_noise: float = 0.2
    """Target policy smoothing: standard deviation of the noise on the target actor's pre-activations.
    sfujim/TD3 uses 0.2 x max_action, which would be 1.0 here (the bound is LOGIT_LIMIT = 5); that
    scaling is an open ablation (docs/td3.md), so the default stays where the shipped models were
    trained."""
    noise_clip: float = 0.5
    """Target policy smoothing: the noise is clipped to [-noise_clip, noise_clip] (sfujim: 0.5 x
    max_action, 2.5 here)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic (ReLU)."""
    preactivation_penalty: float = 0.0
    """Exploration that survives (``--preactivation-penalty``): the actor's loss adds this x
    sum_j max(0, |raw_j| - RAW_FREE)^2 (mean over the batch), raw the actor's output before its
    bounding tanh (``Actor.raw``). Free inside 80% of the box (RAW_FREE = atanh(0.8)), so it never
    fights the critic there (the critic's slopes on the semi-MDP reward in cluster-hours are small,
    and a penalty on every pre-activation pins the actor where it started), and quadratic beyond,
    which keeps the pre-activations off the bound, where the tanh's slope and the exploration
    noise's effect on the squashed action vanish. At 1.0 a critic slope dQ/da of 0.1 per unit of
    pre-activation holds a pre-activation under 83% of the bound. Default 0 (none), as the shipped
    models were trained: in the short run of tests/rl/test_train.py, 1.0 took the share at the bound
    from 43-50% to under 10% but the gain over random actions from 0.21 (standard error 0.08) to
    0.08 (0.08); the action ablation on tiny (docs/td3.md) measures both on the same budget."""
    log_every: int = 100
    """Steps between two logs of losses, Q values and steps per second."""
    bc_alpha: float | None = None
    """TD3+BC (Fujimoto and Gu 2021, offline RL): the actor minimises
    -lambda * Q1(s, pi(s)) + (pi(s) - a)^2 with lambda = bc_alpha / mean |Q1(s, pi(s))|, a the replayed
    action (pre-activations). None: plain TD3 (no behaviour term). The paper's value is 2.5."""
    bc_decay_steps: int | None = None
    """With bc_alpha, online after offline: the behaviour term's weight falls linearly from 1 at step 0
    to 0 at this step (then plain TD3's actor objective, with the Q term still scaled by lambda). None:
    the weight stays 1."""
    anchor: str | None = None
    """Warm start from a static score (a ``static-weights`` spec, e.g. the scenario's best static): the
    warm-up's ``learning_starts`` steps take its action (``rl.actions.encode``) plus exploration noise
    instead of uniformly random actions, and the first gradient step begins by fitting the actor (and
    its target) to that action on the warm-up's observations (``anchor_fit_steps`` Adam steps), so
    that learning starts from the static score and its neighbourhood rather than from a random actor.
    With ``bc_alpha`` the behaviour term then keeps the actor near the replayed actions (those of the
    warm-up, then its own) while ``bc_decay_steps`` lets it go. None: uniform warm-up, random actor."""
    anchor_fit_steps: int = 1000
    """Adam steps (learning rate 1e-3, ``batch_size`` observations) of the actor's fit to the anchor."""
    warmup_actor: bool = False
    """The warm-up's ``learning_starts`` steps take the actor's action plus exploration noise (as after
    it) instead of random or anchored ones: a fine-tune of a trained model fills its replay buffer with
    the model's own behaviour before its first gradient step (``lifecycle.finetune``)."""
    branch_every: int = 0
    """Counterfactual branches (``rl.counterfactual``): every this many steps after the warm-up the
    pending decision is forked ``branch_actions`` times, each branch followed for
    ``branch_horizon_s`` simulated seconds with the current deterministic actor, all with the same
    random numbers; the critic then also learns, on a batch of ``branch_batch`` such states, the
    differences between a state's branch returns (the action's effect without the cluster's noise):
    ``branch_weight`` x mean_k ((Q(s, a_k) - mean_j Q(s, a_j)) - (G_k - mean_j G_j))^2 per critic.
    0: off (plain TD3, to the bit)."""
    branch_actions: int = 4
    """Actions per branched state: the one taken and branch_actions - 1 around the actor's."""
    branch_noise: float = 1.5
    """Standard deviation of the noise on the actor's pre-activations for the other branches."""
    branch_horizon_s: float = 1800.0
    """Simulated seconds each branch runs (to the first decision at or after it)."""
    branch_weight: float = 1.0
    """Weight of the branch-difference loss beside each critic's TD loss."""
    branch_batch: int = 64
    """Branched states per gradient step."""
    branch_imitation: float = 0.0
    """Policy improvement by rollouts: the actor's loss adds this x mean ||pi(s) - a*(s)||^2 over a
    batch of branched states whose branches differ, a*(s) the action of the state's best branch
    (common random numbers make that comparison exact over the horizon). 0: off. The Q term is in
    cluster-hours (~1e-3 a decision) and this one in pre-activation units: at 1 the actor follows the
    best branches and the critic's gradient only breaks ties."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.algo not in ALGOS:
            raise ValueError(f"algo={self.algo!r}: expected one of {', '.join(ALGOS)}")
        checks = [("gamma", 0 <= self.gamma <= 1, "a discount in [0, 1]"),
                  ("gamma_per_hour", self.gamma_per_hour is None or 0 < self.gamma_per_hour <= 1,
                   "a discount per hour in (0, 1], or None"),
                  ("tau", 0 < self.tau <= 1, "a Polyak coefficient in (0, 1]"),
                  ("learning_rate", self.learning_rate > 0, "a positive number"),
                  ("exploration_noise", self.exploration_noise >= 0, "a non-negative standard deviation"),
                  ("policy_noise", self.policy_noise >= 0, "a non-negative standard deviation"),
                  ("noise_clip", self.noise_clip >= 0, "a non-negative bound"),
                  ("preactivation_penalty", self.preactivation_penalty >= 0, "a non-negative coefficient")]
        for name in ("batch_size", "buffer_size", "policy_frequency", "log_every"):
            checks.append((name, isinstance(getattr(self, name), int) and getattr(self, name) >= 1,
                           "a whole number >= 1"))
        checks.append(("branch_every", isinstance(self.branch_every, int) and self.branch_every >= 0,
                       "a whole number of steps >= 0 (0: off)"))
        checks.append(("branch_actions", isinstance(self.branch_actions, int) and 2 <= self.branch_actions <= 64,
                       "a whole number of actions in [2, 64]"))
        checks.append(("branch_noise", self.branch_noise > 0, "a positive standard deviation"))
        checks.append(("branch_horizon_s", self.branch_horizon_s > 0, "a positive number of simulated seconds"))
        checks.append(("branch_weight", self.branch_weight >= 0, "a weight >= 0"))
        checks.append(("branch_imitation", self.branch_imitation >= 0, "a weight >= 0 (0: off)"))
        checks.append(("branch_batch", isinstance(self.branch_batch, int) and self.branch_batch >= 1,
                       "a whole number >= 1"))
        checks.append(("anchor_fit_steps", isinstance(self.anchor_fit_steps, int) and self.anchor_fit_steps >= 1,
                       "a whole number of steps >= 1"))
        checks.append(("learning_starts", isinstance(self.learning_starts, int) and self.learning_starts >= 0,
                       "a whole number >= 0"))
        checks.append(("warmup_actor", isinstance(self.warmup_actor, bool), "true or false"))
        checks.append(("hidden", len(self.hidden) >= 1 and min(self.hidden) >= 1, "positive layer widths"))
        checks.append(("bc_alpha", self.bc_alpha is None or self.bc_alpha >= 0, "a weight >= 0, or None (plain TD3)"))
        checks.append(("bc_decay_steps", self.bc_decay_steps is None or (isinstance(self.bc_decay_steps, int)
                                                                        and self.bc_decay_steps >= 1),
                       "a whole number of steps >= 1, or None"))
        if self.anchor is not None:  # the spec itself; TD3 checks it against its action mode
            static_score_args(self.anchor, None)
        for name, ok, expected in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"TD3Config.{name}={value!r}: expected {expected}")

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "hidden": list(self.hidden)}

    @classmethod
    def from_json(cls, d: dict) -> "TD3Config":
        """A ValueError names unknown or missing fields."""
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - set(d) - set(LATER_FIELDS)
        if set(d) - names or missing:
            raise ValueError(f"TD3 config: unknown fields {sorted(set(d) - names)}, missing {sorted(missing)}")
        return cls(**{**{k: v for k, v in LATER_FIELDS.items() if k not in d}, **d})


LATER_FIELDS = {"gamma_per_hour": None, "preactivation_penalty": 0.0, "bc_alpha": None, "bc_decay_steps": None,
                "branch_every": 0, "branch_actions": 4, "branch_noise": 1.5, "branch_horizon_s": 1800.0,
                "branch_weight": 1.0, "branch_batch": 64, "branch_imitation": 0.0, "anchor": None,
                "anchor_fit_steps": 1000, "warmup_actor": False}
"""Fields added after models were shipped, with the value that reproduces those models' training."""


def soft_update(online: torch.nn.Module, target: torch.nn.Module, tau: float) -> None:
    """Polyak averaging, target <- (1 - tau) * target + tau * online, on all tensors at once."""
    with torch.no_grad():
        targets = list(target.parameters())
        torch._foreach_mul_(targets, 1.0 - tau)
        torch._foreach_add_(targets, list(online.parameters()), alpha=tau)


class TD3:
    def __init__(self, observation_size: int, config: TD3Config = TD3Config(), seed: int = 0,
                 action_mode: str = "full"):
        self.config = config
        self.observation_size = observation_size
        self.action_mode = check_action_mode(action_mode)
        self.action_size = action_size(action_mode)
        self.seed = seed
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        """Exploration noise, warm-up actions and replay sampling."""
        td3 = config.algo == "td3"
        self.n_critics = 2 if td3 else 1
        self.policy_noise = config.policy_noise if td3 else 0.0
        self.noise_clip = config.noise_clip if td3 else 0.0
        self.policy_frequency = config.policy_frequency if td3 else 1

        self.anchor = encode(static_score_args(config.anchor, action_mode), action_mode) \
            if config.anchor is not None else None
        """The warm start's action (pre-activations), or None (``TD3Config.anchor``)."""
        self.actor = Actor(observation_size, config.hidden, self.action_size)
        self.actor_target = Actor(observation_size, config.hidden, self.action_size)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.critic = Critic(observation_size, config.hidden, self.n_critics, action_mode)
        self.critic_target = Critic(observation_size, config.hidden, self.n_critics, action_mode)
        self.critic_target.load_state_dict(self.critic.state_dict())
        # The for-loop Adam: fused=True is ~5% faster per gradient step but equal only up to rounding,
        # and the shipped models are reproduced bit for bit by their training command.
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=config.learning_rate)
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.normalizer = ObservationNormalizer(observation_size, min_std=observation_std_floor(observation_size))
        self._buffer: ReplayBuffer | None = None
        self._branch_buffer: BranchBuffer | None = None
        self.actor_loss = float("nan")
        self.anchor_fit_loss = float("nan")
        """The actor's last squared error to the anchor when it was fitted (``fit_actor_to_anchor``)."""
        self.saturation_log: list[list[float]] = []
        """[step, share of the actor's pre-activations beyond SATURATION of the bound on the logged
        replay batch] at every log after the warm-up: whether exploration survives training."""

    @property
    def buffer(self) -> ReplayBuffer:
        """The replay buffer, allocated on first use (a loaded model for inference needs none)."""
        if self._buffer is None:
            self._buffer = ReplayBuffer(self.config.buffer_size, self.observation_size, self.action_size)
        return self._buffer

    @property
    def branch_buffer(self) -> BranchBuffer:
        """The counterfactual branches, allocated on first use."""
        if self._branch_buffer is None:
            self._branch_buffer = BranchBuffer(max(1, self.config.buffer_size // 10), self.observation_size,
                                               self.config.branch_actions, self.action_size)
        return self._branch_buffer

    def branch_actions(self, obs: np.ndarray, taken: np.ndarray) -> np.ndarray:
        """The actions a state is branched with: the one taken, then the actor's plus branch noise."""
        k = self.config.branch_actions
        noise = self.rng.normal(0.0, self.config.branch_noise, (k - 1, self.action_size))
        others = np.clip(self.predict(obs) + noise, -LOGIT_LIMIT, LOGIT_LIMIT)
        return np.vstack([np.asarray(taken, dtype=np.float32)[None, :], others]).astype(np.float32)

    # --- acting -----------------------------------------------------------------------------------
    def predict(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action (pre-activations, float32) for one raw observation or a batch."""
        with torch.no_grad():
            x = torch.from_numpy(self.normalizer.normalize(obs))
            return self.actor(x).numpy()

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The actor's action plus Gaussian exploration noise, clipped to the action box."""
        noise = self.rng.normal(0.0, self.config.exploration_noise, self.action_size)
        return np.clip(self.predict(obs) + noise, -LOGIT_LIMIT, LOGIT_LIMIT).astype(np.float32)

    def random_action(self) -> np.ndarray:
        """A uniformly random action."""
        return self.rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, self.action_size).astype(np.float32)

    def warmup_action(self) -> np.ndarray:
        """An action of the warm-up steps: uniformly random, or the anchor plus exploration noise."""
        if self.anchor is None:
            return self.random_action()
        noise = self.rng.normal(0.0, self.config.exploration_noise, self.action_size)
        return np.clip(self.anchor + noise, -LOGIT_LIMIT, LOGIT_LIMIT).astype(np.float32)

    def fit_actor_to_anchor(self) -> float:
        """Fit the actor to output the anchor on the replay buffer's observations, copy it to its
        target; the last batch's mean squared error (pre-activation units)."""
        cfg = self.config
        optimizer = optim.Adam(self.actor.parameters(), lr=1e-3)
        target = torch.from_numpy(self.anchor).expand(cfg.batch_size, -1)
        loss = torch.zeros(())
        for _ in range(cfg.anchor_fit_steps):
            obs = torch.from_numpy(self.normalizer.normalize(self.buffer.sample(cfg.batch_size, self.rng).obs))
            loss = F.mse_loss(self.actor(obs), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        self.actor_target.load_state_dict(self.actor.state_dict())
        return float(loss.item())

    # --- learning -----------------------------------------------------------------------------------
    def smoothed_target_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        """Target policy smoothing: a'(s') = clip(actor_target(s') + clip(N(0, sigma), -c, c))."""
        actions = self.actor_target(next_obs)
        noise = (torch.randn_like(actions) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
        return (actions + noise).clamp(-LOGIT_LIMIT, LOGIT_LIMIT)

    def discounts(self, elapsed_s: torch.Tensor) -> torch.Tensor | float:
        """Per transition: gamma_per_hour ** (elapsed / 1 h) (semi-MDP), or gamma per step."""
        per_hour = self.config.gamma_per_hour
        return self.config.gamma if per_hour is None else torch.pow(per_hour, elapsed_s.double() / 3600.0).float()

    def target_q(self, rewards: torch.Tensor, next_obs: torch.Tensor, dones: torch.Tensor,
                 elapsed_s: torch.Tensor | None = None) -> torch.Tensor:
        """Clipped double-Q: y = r + discount * (1 - done) * min_i Q_i'(s', a'(s')) (one critic for DDPG)."""
        with torch.no_grad():
            next_actions = self.smoothed_target_actions(next_obs)
            next_q_values = torch.cat(self.critic_target(next_obs, next_actions), dim=1)
            min_next_q = torch.min(next_q_values, dim=1).values
            discount = self.discounts(elapsed_s if elapsed_s is not None else torch.zeros_like(rewards))
            return rewards + discount * (1.0 - dones) * min_next_q

    def train_step(self, global_step: int) -> dict[str, float] | None:
        """One gradient step on a replay batch; the logged values every ``log_every`` steps."""
        cfg = self.config
        if self.anchor is not None and global_step == cfg.learning_starts:  # the warm start: learning begins there
            self.anchor_fit_loss = self.fit_actor_to_anchor()
        data = self.buffer.sample(cfg.batch_size, self.rng)
        obs = torch.from_numpy(self.normalizer.normalize(data.obs))
        next_obs = torch.from_numpy(self.normalizer.normalize(data.next_obs))
        actions = torch.from_numpy(data.actions)
        rewards, dones = torch.from_numpy(data.rewards), torch.from_numpy(data.dones)

        # Critics: regress every Q network on the clipped double-Q target.
        target = self.target_q(rewards, next_obs, dones, torch.from_numpy(data.elapsed))
        q_values = [q.view(-1) for q in self.critic(obs, actions)]
        q_losses = [F.mse_loss(q, target) for q in q_values]
        critic_loss = sum(q_losses)
        branch = self.branch_loss() if cfg.branch_every and self._branch_buffer is not None \
            and len(self._branch_buffer) else None
        if branch is not None:
            critic_loss = critic_loss + cfg.branch_weight * branch[0]
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        # Delayed policy updates: the actor, then the soft target updates, every policy_frequency steps.
        # The actor's loss: -Q1(s, pi(s)), plus the pre-activation penalty that keeps pi off the bound.
        if global_step % self.policy_frequency == 0:
            raw = self.actor.raw(obs)
            pi = self.actor.bound(raw)
            q = self.critic.q1(obs, pi)
            if cfg.bc_alpha is None:
                actor_loss = -q.mean()
            else:  # TD3+BC: the Q term scaled to the behaviour term, which keeps pi near the data's actions
                lam = cfg.bc_alpha / q.abs().mean().detach().clamp_min(1e-8)
                bc_weight = 1.0 if cfg.bc_decay_steps is None else max(0.0, 1.0 - global_step / cfg.bc_decay_steps)
                actor_loss = -lam * q.mean() + bc_weight * F.mse_loss(pi, actions)
            if cfg.branch_imitation and self._branch_buffer is not None and len(self._branch_buffer):
                actor_loss = actor_loss + cfg.branch_imitation * self.branch_imitation_loss()
            if cfg.preactivation_penalty:
                beyond = (raw.abs() - RAW_FREE).clamp(min=0.0)
                actor_loss = actor_loss + cfg.preactivation_penalty * beyond.square().sum(dim=-1).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward(inputs=list(self.actor.parameters()))  # none for the critic's weights
            self.actor_optimizer.step()
            soft_update(self.actor, self.actor_target, cfg.tau)
            soft_update(self.critic, self.critic_target, cfg.tau)
            self.actor_loss = actor_loss.item()

        if global_step % cfg.log_every:
            return None
        logged = {f"qf{i + 1}_values": q.mean().item() for i, q in enumerate(q_values)}
        logged.update({f"qf{i + 1}_loss": loss.item() for i, loss in enumerate(q_losses)})
        logged.update(qf_loss=critic_loss.item() / len(q_losses), actor_loss=self.actor_loss)
        logged["saturated"] = self.saturation(obs)
        if branch is not None:
            logged.update(branch_loss=branch[0].item(), branch_corr=branch[1])
        self.saturation_log.append([global_step, logged["saturated"]])
        return logged

    def branch_loss(self) -> tuple[torch.Tensor, float]:
        """The critics' loss on a batch of branched states: each state's Q values centred over its K
        actions against its branch returns centred the same way (the state's value cancels in both);
        and the correlation of the two for Q1 (1: the critic ranks a state's actions as the branches
        did)."""
        data = self.branch_buffer.sample(self.config.branch_batch, self.rng)
        b, k, a = data.actions.shape
        obs = torch.from_numpy(self.normalizer.normalize(data.obs)).repeat_interleave(k, dim=0)
        actions = torch.from_numpy(data.actions.reshape(b * k, a))
        returns = torch.from_numpy(data.returns)
        target = returns - returns.mean(dim=1, keepdim=True)
        loss, centred_q1 = 0.0, None
        for q in self.critic(obs, actions):
            q = q.view(b, k)
            centred = q - q.mean(dim=1, keepdim=True)
            centred_q1 = centred if centred_q1 is None else centred_q1
            loss = loss + F.mse_loss(centred, target)
        with torch.no_grad():
            x, y = centred_q1.flatten(), target.flatten()
            denom = (x.norm() * y.norm()).item()
            corr = float((x @ y).item() / denom) if denom > 0 else float("nan")
        return loss, corr

    def branch_imitation_loss(self) -> torch.Tensor:
        """Mean squared distance of the actor's action to each sampled state's best branch action, over
        the states whose branches differ (a tie teaches nothing)."""
        data = self.branch_buffer.sample(self.config.branch_batch, self.rng)
        differ = data.returns.max(axis=1) > data.returns.min(axis=1)
        if not differ.any():
            return torch.zeros(())
        best = data.actions[np.arange(len(data.returns)), data.returns.argmax(axis=1)][differ]
        pi = self.actor(torch.from_numpy(self.normalizer.normalize(data.obs[differ])))
        return F.mse_loss(pi, torch.from_numpy(best))

    def saturation(self, obs: torch.Tensor) -> float:
        """Share of the actor's pre-activations on ``obs`` (normalised) beyond SATURATION of the bound."""
        with torch.no_grad():
            return float((self.actor(obs).abs() > SATURATION * LOGIT_LIMIT).float().mean())

    def learn(self, env, total_steps: int, **kwargs):
        """Train on ``env`` for ``total_steps`` steps (``rl.train.learn`` names the options)."""
        from td3sched.rl.train import learn

        return learn(self, env, total_steps, **kwargs)

    # --- state ----------------------------------------------------------------------------------------
    def networks(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor, "actor_target": self.actor_target, "critic": self.critic,
                "critic_target": self.critic_target}

    def state_dict(self) -> dict:
        """Everything training needs to go on exactly: networks, optimisers, buffer, normaliser, RNGs.
        Tensors and JSON-ready values only (a ``torch.load(..., weights_only=True)`` reads it)."""
        buffer = self.buffer.state_dict()
        return {
            **{name: net.state_dict() for name, net in self.networks().items()},
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "buffer": {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in buffer.items()},
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": self.rng.bit_generator.state,
            "normalizer": self.normalizer.to_json(),
            "actor_loss": self.actor_loss,
            "saturation_log": [list(x) for x in self.saturation_log],
            **({"branch_buffer": {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                                  for k, v in self._branch_buffer.state_dict().items()}}
               if self._branch_buffer is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        for name, net in self.networks().items():
            net.load_state_dict(state[name])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.buffer.load_state_dict({k: v.numpy() if isinstance(v, torch.Tensor) else v
                                     for k, v in state["buffer"].items()})
        torch.set_rng_state(state["torch_rng"])
        self.rng.bit_generator.state = state["numpy_rng"]
        self.normalizer = ObservationNormalizer.from_json(state["normalizer"], self.observation_size)
        self.actor_loss = float(state["actor_loss"])
        self.saturation_log = [[int(a), float(b)] for a, b in state.get("saturation_log", [])]
        if "branch_buffer" in state:
            self.branch_buffer.load_state_dict({k: v.numpy() if isinstance(v, torch.Tensor) else v
                                                for k, v in state["branch_buffer"].items()})

    def save(self, folder, card: dict | None = None) -> None:
        """Write the model (actor and critics, normaliser, config) to ``folder`` (``rl.model``)."""
        from td3sched.rl.model import save_model

        save_model(folder, self, card or {})

    @classmethod
    def load(cls, folder) -> "TD3":
        """A TD3 from a model folder (targets start as copies; optimisers and buffer start fresh)."""
        from td3sched.rl.model import load_model

        model = load_model(folder)
        agent = cls(model.observation_size, model.config, int(model.card.get("seed", 0)), model.action_mode)
        agent.actor.load_state_dict(model.actor.state_dict())
        agent.actor_target.load_state_dict(model.actor.state_dict())
        agent.critic.load_state_dict(model.critic.state_dict())
        agent.critic_target.load_state_dict(model.critic.state_dict())
        agent.normalizer = model.normalizer
        return agent
