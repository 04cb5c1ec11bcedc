"""Counterfactual branches: what a simulator allows and a cluster does not.

At a pending decision the simulation is forked (``os.fork``: the child is a copy-on-write image of
the whole run, its generators included), once per action to compare. Each child takes its action
for that decision, then acts with a fixed ``continuation`` (the current deterministic actor, or the
same action held), and stops at the first decision at or after ``horizon_s`` simulated seconds (or
at the episode's end). It sends back the rewards it was charged (``reward.py``: decision k's cost
settled at decision k+1) and the times they were settled, then exits. A branch may also put the
forked decision's pod on a node of its own choosing (``nodes``), which no weights and tau may rank
first: what a per-node scorer could do. Every child starts from the
same state with the same random numbers, so two branches differ by their first action and what it
caused, nothing else (common random numbers): the difference of two branches' returns is the
action's effect without the cluster's noise, which a return from the replay buffer buries (the audit
measured one placement at 0.72% of the return's variance on tiny). ``reseed`` gives every child of a
request the same fresh tie-breaking generator instead, for a replicate whose common noise differs.

The parent is the env's simulator thread (``rl.env``), which forks, runs up to ``workers`` children
at a time and waits for them while the agent's thread is blocked on the answer; the children never
touch the env's queues and always leave by ``os._exit``. They use no torch: ``numpy_actor`` copies
the actor's weights into a NumPy forward pass before the fork (torch's thread pools do not survive
a fork).
"""

from __future__ import annotations

import os
import pickle
import select
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from td3sched.rl.actions import LOGIT_LIMIT

Continuation = Callable[[np.ndarray], np.ndarray]
"""Observation -> pre-activations, for the decisions after a branch's first."""

MAX_BRANCHES = 64
"""Branches one request may ask for."""


@dataclass(frozen=True)
class BranchRequest:
    """Fork the pending decision once per row of ``actions`` (pre-activations); continue each branch
    with ``continuation`` (None: hold the branch's first action) for ``horizon_s`` simulated seconds.
    ``nodes`` (None: none) forces branch i's first placement onto the pending decision's feasible node
    ``nodes[i]`` (an index into them; -1: the score's own choice)."""

    actions: np.ndarray
    horizon_s: float
    continuation: Continuation | None = None
    workers: int = 2
    reseed: int | None = None
    nodes: tuple[int, ...] | None = None

    def __post_init__(self):
        a = np.asarray(self.actions, dtype=np.float32)
        if a.ndim != 2 or not 1 <= len(a) <= MAX_BRANCHES or not np.isfinite(a).all():
            raise ValueError(f"actions of shape {a.shape}: expected 1 to {MAX_BRANCHES} finite rows of "
                             "pre-activations")
        if not (np.isfinite(self.horizon_s) and self.horizon_s > 0):
            raise ValueError(f"horizon_s={self.horizon_s!r}: expected a positive number of simulated seconds")
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise ValueError(f"workers={self.workers!r}: expected an integer >= 1")
        object.__setattr__(self, "actions", np.clip(a, -LOGIT_LIMIT, LOGIT_LIMIT))
        if self.nodes is not None:
            nodes = tuple(self.nodes)
            if len(nodes) != len(a) or not all(isinstance(n, (int, np.integer)) and n >= -1 for n in nodes):
                raise ValueError(f"nodes {self.nodes!r}: expected one index >= -1 per row of actions ({len(a)})")
            object.__setattr__(self, "nodes", tuple(int(n) for n in nodes))


@dataclass(frozen=True)
class Branch:
    """One branch's charges: ``rewards[i]`` is decision i's (0: the forked decision's own),
    settled at ``times_s[i]``; ``start_s`` is the forked decision's time."""

    start_s: float
    rewards: np.ndarray
    times_s: np.ndarray

    def discounted(self, gamma: float = 1.0, gamma_per_hour: float | None = None) -> float:
        """The branch's return: per decision ``gamma`` ** i, or with ``gamma_per_hour`` the semi-MDP
        discount of each reward's decision time (as ``TD3.discounts``)."""
        if len(self.rewards) == 0:
            return 0.0
        if gamma_per_hour is None:
            factors = gamma ** np.arange(len(self.rewards))
        else:
            opened = np.concatenate([[self.start_s], self.times_s[:-1]])
            factors = gamma_per_hour ** ((opened - self.start_s) / 3600.0)
        return float(np.dot(factors, self.rewards))


@dataclass
class BranchState:
    """A child's side: where it stops and what it was charged so far."""

    until_s: float
    start_s: float
    continuation: Continuation | None
    first: np.ndarray
    fd: int
    reseed: int | None = None
    node: int | None = None
    """The feasible node the forked decision's pod goes to (None: the score's choice)."""
    rewards: list[float] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)

    def act(self, obs: np.ndarray, t: float, reward: float) -> np.ndarray:
        """The action at a later decision of the branch (exits the process at the horizon)."""
        self.rewards.append(reward)
        self.times_s.append(t)
        if t >= self.until_s:
            self.finish()
        if self.continuation is None:
            return self.first
        return np.clip(np.asarray(self.continuation(obs), dtype=np.float32), -LOGIT_LIMIT, LOGIT_LIMIT)

    def finish(self, last_reward: float | None = None, end_s: float | None = None, error: str | None = None):
        """Send the charges (or the error) to the parent and leave the process."""
        if last_reward is not None:
            self.rewards.append(last_reward)
            self.times_s.append(end_s)
        payload = ("error", error) if error else ("ok", Branch(self.start_s, np.array(self.rewards),
                                                               np.array(self.times_s)))
        code = 0
        try:
            data = pickle.dumps(payload)
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)


def fork_branches(request: BranchRequest, start_s: float,
                  enter_child: Callable[[BranchState], None]) -> list[Branch] | np.ndarray:
    """Fork one child per action. In a child, ``enter_child`` installs its state and this returns
    the child's first action (the caller hands it to the simulator); in the parent it returns the
    branches in the order of ``request.actions`` once every child has answered."""
    results: list[Branch | None] = [None] * len(request.actions)
    running: dict[int, tuple[int, int, bytearray]] = {}  # read fd -> (index, pid, bytes)
    pending = list(range(len(request.actions)))
    errors: list[str] = []
    while pending or running:
        while pending and len(running) < request.workers:
            i = pending.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: it never returns to the parent's code below
                try:
                    os.close(r)
                    for fd, _ in running.items():
                        os.close(fd)
                    first = request.actions[i]
                    node = request.nodes[i] if request.nodes is not None and request.nodes[i] >= 0 else None
                    enter_child(BranchState(start_s + request.horizon_s, start_s, request.continuation, first, w,
                                            request.reseed, node))
                    return first
                except BaseException:
                    os._exit(1)
            os.close(w)
            running[r] = (i, pid, bytearray())
        ready, _, _ = select.select(list(running), [], [])
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk:
                running[fd][2].extend(chunk)
                continue
            i, pid, data = running.pop(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            try:
                kind, value = pickle.loads(bytes(data))
            except Exception:
                errors.append(f"branch {i}: the child exited ({os.waitstatus_to_exitcode(status)}) without "
                              "an answer")
                continue
            if kind == "error":
                errors.append(f"branch {i}: {value}")
            else:
                results[i] = value
    if errors:
        raise RuntimeError("counterfactual branches failed: " + "; ".join(errors))
    return results


def child_error(exc: BaseException) -> str:
    """``exc`` in one line for the parent: its type, message and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def numpy_actor(agent) -> Continuation:
    """The agent's deterministic actor as a NumPy forward pass (its normaliser is NumPy already): a
    continuation a forked child can run without torch. Equal to ``agent.predict`` up to float32
    rounding. The weights are copied now; the normaliser is read when called (in a child, as it was
    at the fork)."""
    weights = [(m.weight.detach().numpy().astype(np.float32).T.copy(), m.bias.detach().numpy().astype(np.float32))
               for m in agent.actor.net if hasattr(m, "weight")]
    normalizer = agent.normalizer

    def act(obs: np.ndarray) -> np.ndarray:
        x = np.asarray(normalizer.normalize(obs), dtype=np.float32)
        for j, (w, b) in enumerate(weights):
            x = x @ w + b
            if j < len(weights) - 1:
                np.maximum(x, 0.0, out=x)
        return (LOGIT_LIMIT * np.tanh(x)).astype(np.float32)

    return act
