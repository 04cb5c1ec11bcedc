"""Replay buffer: a ring of transitions (obs, action, reward, next_obs, done, elapsed seconds) in
NumPy arrays.

Observations are stored raw (float32) and normalised when sampled, with the normaliser of the time
(as Stable-Baselines3 does with VecNormalize). Sampling draws indices from the caller's Generator, so
a run's samples are reproducible from its seed and survive a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    dones: np.ndarray
    elapsed: np.ndarray
    """Simulated seconds each transition took (the semi-MDP discount reads them)."""


class ReplayBuffer:
    FIELDS = ("obs", "actions", "rewards", "next_obs", "dones", "elapsed")

    def __init__(self, capacity: int, observation_size: int, action_size: int):
        if capacity < 1:
            raise ValueError(f"replay buffer capacity={capacity!r}: expected at least 1 transition")
        self.capacity = int(capacity)
        self.obs = np.zeros((capacity, observation_size), dtype=np.float32)
        self.actions = np.zeros((capacity, action_size), dtype=np.float32)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.next_obs = np.zeros((capacity, observation_size), dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.elapsed = np.zeros(capacity, dtype=np.float32)
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward: float, next_obs, done: bool, elapsed_s: float = 0.0) -> None:
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.next_obs[i] = next_obs
        self.dones[i] = float(done)
        self.elapsed[i] = elapsed_s
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=batch_size)
        return Batch(*(getattr(self, f)[idx] for f in self.FIELDS))

    def state_dict(self) -> dict:
        """The filled part (arrays), the write position and the size."""
        return {"pos": self.pos, "size": self.size, **{f: getattr(self, f)[: self.size].copy() for f in self.FIELDS}}

    def load_state_dict(self, state: dict) -> None:
        size = int(state["size"])
        if "elapsed" in self.FIELDS and "elapsed" not in state:  # a checkpoint from before the semi-MDP: no elapsed times recorded
            state = {**state, "elapsed": np.zeros(size, dtype=np.float32)}
        if size > self.capacity:
            raise ValueError(f"replay buffer state holds {size} transitions: expected at most {self.capacity}")
        for f in self.FIELDS:
            value = np.asarray(state[f])
            if value.shape[0] != size or value.shape[1:] != getattr(self, f).shape[1:]:
                raise ValueError(f"replay buffer state {f} has shape {value.shape}: expected "
                                 f"{(size,) + getattr(self, f).shape[1:]}")
            getattr(self, f)[:size] = value
        self.pos, self.size = int(state["pos"]), size


@dataclass
class BranchBatch:
    obs: np.ndarray
    """[B, observation]"""
    actions: np.ndarray
    """[B, K, action]: the K actions each state was branched with."""
    returns: np.ndarray
    """[B, K]: each branch's discounted return over the horizon (``rl.counterfactual``)."""


class BranchBuffer(ReplayBuffer):
    """A ring of counterfactual branches: per forked state its observation, the K actions compared and
    their returns under common random numbers (``rl.counterfactual``). The critic learns the
    differences between a state's returns from it (``TD3Config.branch_every``)."""

    FIELDS = ("obs", "actions", "returns")

    def __init__(self, capacity: int, observation_size: int, branches: int, action_size: int):
        if capacity < 1 or branches < 2:
            raise ValueError(f"branch buffer capacity={capacity!r}, branches={branches!r}: expected at least 1 "
                             "state and 2 branches")
        self.capacity = int(capacity)
        self.obs = np.zeros((capacity, observation_size), dtype=np.float32)
        self.actions = np.zeros((capacity, branches, action_size), dtype=np.float32)
        self.returns = np.zeros((capacity, branches), dtype=np.float32)
        self.pos = 0
        self.size = 0

    def add(self, obs, actions, returns) -> None:  # type: ignore[override]
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = actions
        self.returns[i] = returns
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> BranchBatch:  # type: ignore[override]
        if self.size == 0:
            raise ValueError("cannot sample from an empty branch buffer")
        idx = rng.integers(0, self.size, size=batch_size)
        return BranchBatch(*(getattr(self, f)[idx] for f in self.FIELDS))
