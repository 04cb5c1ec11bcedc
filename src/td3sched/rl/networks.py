"""The TD3 networks (Fujimoto et al. 2018): a deterministic actor and twin Q critics, MLPs with ReLU.

The actor outputs pre-activations, bounded to the action box by ``LOGIT_LIMIT * tanh``: 4 weight
logits, 1 tau pre-activation and, in the ceiling mode, 1 ceiling pre-activation (``rl.actions``).
Exploration and target-smoothing noise are added to these; only ``squash`` (softmax for the weights,
sigmoid for tau and the ceiling; ``rl.actions.decode`` in NumPy) turns them into score arguments.
The critics read the observation and the squashed action: the score arguments (weights, tau,
ceiling) themselves, on which the placement depends directly (in the seed mode tau reads 0).

``Actor.raw`` is the MLP's output before the tanh: the actor's pre-activation penalty
(``TD3Config.preactivation_penalty``) is on it.
"""

from __future__ import annotations

import torch
from torch import nn

from td3sched.rl.actions import ACTION_SIZE, CEILING_RANGE, LOGIT_LIMIT, REQUESTS_MODES, action_size, check_action_mode


def mlp(inputs: int, hidden: tuple[int, ...], outputs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(inputs, width), nn.ReLU(inplace=True)]  # in place: no copy of the activations
        inputs = width
    layers.append(nn.Linear(inputs, outputs))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """observation -> pre-activations [4 weight logits, tau pre-activation (, ceiling pre-activation)]
    in the action box."""

    def __init__(self, observation_size: int, hidden: tuple[int, ...] = (256, 256), action_size: int = ACTION_SIZE):
        super().__init__()
        self.net = mlp(observation_size, hidden, action_size)

    def raw(self, obs: torch.Tensor) -> torch.Tensor:
        """The MLP's output, before the bounding tanh."""
        return self.net(obs)

    def bound(self, raw: torch.Tensor) -> torch.Tensor:
        """Pre-activations in the action box from ``raw``."""
        return LOGIT_LIMIT * torch.tanh(raw)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.bound(self.net(obs))


def squash(pre_activations: torch.Tensor, seed_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [..., 4] = softmax of the logits, tau [...] = sigmoid, or 0 in the seed mode)."""
    weights = torch.softmax(pre_activations[..., :4], dim=-1)
    tau = torch.sigmoid(pre_activations[..., 4])
    return weights, torch.zeros_like(tau) if seed_mode else tau


def score_arguments(pre_activations: torch.Tensor, mode: str) -> torch.Tensor:
    """[..., action_size(mode)]: weights, tau and, in the ceiling mode, the ceiling, in the requests mode
    the requests share, in the balance mode the requests and balance shares, in the fragmentation mode the
    fragmentation share (``rl.actions.decode``)."""
    weights, tau = squash(pre_activations, mode == "seed")
    parts = [weights, tau.unsqueeze(-1)]
    if mode == "ceiling":
        lo, hi = CEILING_RANGE
        parts.append((lo + (hi - lo) * torch.sigmoid(pre_activations[..., 5])).unsqueeze(-1))
    elif mode in REQUESTS_MODES or mode == "fragmentation":  # shares: sigmoids
        parts.append(torch.sigmoid(pre_activations[..., 5:]))
    return torch.cat(parts, dim=-1)


class QNetwork(nn.Module):
    """(observation, squashed action [weights, tau (, ceiling)]) -> Q."""

    def __init__(self, observation_size: int, hidden: tuple[int, ...] = (256, 256), action_size: int = ACTION_SIZE):
        super().__init__()
        self.net = mlp(observation_size + action_size, hidden, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1))


class Critic(nn.Module):
    """``n_critics`` independent Q networks (2 for TD3's clipped double-Q, 1 for DDPG) of an
    observation and a pre-activation action, which each reads squashed."""

    def __init__(self, observation_size: int, hidden: tuple[int, ...] = (256, 256), n_critics: int = 2,
                 action_mode: str = "full"):
        super().__init__()
        self.action_mode = check_action_mode(action_mode)
        self.q_networks = nn.ModuleList(QNetwork(observation_size, hidden, action_size(action_mode))
                                        for _ in range(n_critics))

    def squashed(self, action: torch.Tensor) -> torch.Tensor:
        return score_arguments(action, self.action_mode)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        score_args = self.squashed(action)
        return tuple(q(obs, score_args) for q in self.q_networks)

    def q1(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The first Q network alone: the actor's objective."""
        return self.q_networks[0](obs, self.squashed(action))
