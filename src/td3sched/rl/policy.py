"""Policies whose score arguments (weights, tau, ceiling, requests share) are chosen per decision from an observation.

``ActionPolicy`` is ``static-weights`` with its weights and tau (and, in the ceiling action mode, its
hold-back ceiling) set, before each decision, from an action (``rl.actions``) computed on the
observation (``rl.observation``): the placement is the ``static-weights`` score itself, with the same
assign cache. In the ceiling mode the action is taken in the policy's Filter, on the nodes that passed
the simulator's (the safety filter included), and the ceiling is applied by ``static-weights``' own
hold-back (``StaticWeights.hold_back``); a pod with no node left waits, which is still a decision.
Two subclasses:

- the env's hand-off policy (``rl.env``), whose actions come from the agent being trained;
- ``td3`` (``TD3Policy``), a trained actor for the harness: ``td3:runs/NAME`` loads the model folder
  and scores with the deterministic actor (no noise) through ONNX Runtime (``rl.onnx_actor``, the
  normaliser inside the graph): the same inference path as the decision engine. torch is imported
  only when the folder has no ``model.onnx`` yet (it is then exported in memory). A fragmentation
  share is measured with the typical pods of the model's card, as the engine measures it, and the
  card's sibling spread (``sibling_spread``, ``policy.siblings``) is applied to every decision's score.

With a hold (``hold_s`` > 0, a model card's ``action_hold_s``, ``td3sched train --action-hold``) the
action is taken at most once per ``hold_s`` simulated seconds: a decision within ``hold_s`` of the
last one that acted keeps its weights, tau and ceiling without observing. The policy then decides the
scoring for the next ``hold_s`` seconds rather than for one pod, so its action is heard: on tiny one
placement's action explains 8% of the variance of a 30-minute return, the same action held for the 30
minutes 38% (docs/td3.md, *Action hold*).

Node OOM kills of the last 5 minutes are part of the observation: both read the run's count from
``PolicyContext.oom_kills`` (Kubernetes reports OOM kills as events any scheduler can watch).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod

import numpy as np

from td3sched.metrics.fragmentation import typical_for_pools
from td3sched.policy.base import PodRequest
from td3sched.policy.siblings import validate_spread
from td3sched.policy.static_weights import StaticWeights
from td3sched.rl.actions import ScoreArgs, check_action_mode, check_hold, decode
from td3sched.rl.observation import OomWindow, observe
from td3sched.simulator.cluster import Cluster


class ActionPolicy(StaticWeights):
    """static-weights with (weights, tau[, ceiling]) = ``decode(act(observation))`` per decision."""

    name = "action"

    def __init__(self, action_mode: str = "full", hold_s: float = 0.0):
        super().__init__()
        self.action_mode = check_action_mode(action_mode)
        self.hold_s = check_hold(hold_s)
        self._acted_at: float | None = None
        """Simulated time of the last decision that took an action (None: none yet in this run)."""
        self.oom_window = OomWindow()
        self._decided: PodRequest | None = None
        """The pod whose action the Filter took (ceiling mode): its Score uses that action."""
        if self.action_mode == "fragmentation":
            self.score_fragmentation()  # static-weights' blend, with the share each action sets

    def attach(self, context) -> None:
        super().attach(context)
        self.oom_window = OomWindow()
        self._acted_at = None
        self._oom_kills = context.oom_kills

    def oom_kills_total(self, pod: PodRequest) -> int:
        """Node OOM kills since the run started (the simulator's count, as Kubernetes events)."""
        if self._oom_kills is None:
            raise ValueError(f"policy {self.name!r} needs the run's OOM kill count in its PolicyContext")
        return int(self._oom_kills())

    @abstractmethod
    def act(self, obs: np.ndarray) -> np.ndarray:
        """The action (``rl.actions.action_size`` pre-activations) for an observation."""

    def decide(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Observe, act and set the score arguments (unless the held action still holds); the nodes'
        utilisation ``u`` (pod included)."""
        u = self.utilisation(pod, nodes, cluster)  # once: the observation's statistics and the score
        if self.holding(pod.time_s):
            return u
        self._acted_at = pod.time_s
        obs = observe(pod, nodes, cluster, u, self.oom_window.kills(pod.time_s, self.oom_kills_total(pod)))
        self.set_score_args(decode(self.act(obs), self.action_mode))
        return u

    def set_score_args(self, args: ScoreArgs) -> None:
        """Score the next decisions with ``args``: its weights, tau and shares, and its ceiling if it has one."""
        self.weights, self.tau, self.requests, self.balance = args.weights, args.tau, args.requests, args.balance
        self.fragmentation = args.fragmentation
        if args.ceiling is not None:
            self.ceiling = args.ceiling

    def holding(self, t: float) -> bool:
        """Whether a decision at ``t`` keeps the last action (within ``hold_s`` of the one that took it)."""
        return self._acted_at is not None and t - self._acted_at < self.hold_s

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray | None:
        """Ceiling mode: the action, then static-weights' hold-back with its ceiling. Otherwise none."""
        self._held, self._decided = None, None
        if self.action_mode != "ceiling":
            return None
        u = self.decide(pod, nodes, cluster)
        self._decided = pod
        return self.hold_back(pod, nodes, u)

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        if self._decided is pod:  # the Filter took this cycle's action
            self._decided = None
            return super().score(pod, nodes, cluster)
        return self.score_nodes(pod, nodes, cluster, self.decide(pod, nodes, cluster))


class TD3Policy(ActionPolicy):
    """``td3:FOLDER``: a trained TD3 actor (``td3sched train`` writes FOLDER)."""

    name = "td3"
    requires_args = True
    """Needs a model folder: ``td3`` alone is not a runnable spec."""

    def __init__(self, model=None):
        """``model``: an ``rl.onnx_actor.OnnxActor`` (or any object with ``act``, ``action_mode``,
        ``folder`` and ``content_sha256``)."""
        if model is None or isinstance(model, str):
            raise ValueError("td3 needs a trained model folder: td3:runs/NAME (written by td3sched train)")
        super().__init__(model.action_mode, float(getattr(model, "action_hold_s", 0.0)))
        self.spread = validate_spread(getattr(model, "sibling_spread", 0.0))
        """The card's sibling spread: every decision's score takes it (the action does not set it)."""
        self.model = model
        self.folder = model.folder

    def attach(self, context) -> None:
        """As ``ActionPolicy``; a fragmentation share is measured with the typical pods the model's card
        carries (``metrics.fragmentation.typical_for_pools``, by pool name), as the decision engine serves
        it, not with the run's scenario's: the same on the scenario the model was trained on, and what a
        cluster would get on any other."""
        typical = getattr(self.model, "typical_pods", None)
        if self.fgd is not None and typical is not None:
            context = dataclasses.replace(context, typical=typical_for_pools(*typical, context.cluster.pool_names))
        super().attach(context)

    @classmethod
    def from_spec(cls, args: str) -> "TD3Policy":
        from td3sched.rl.onnx_actor import load_actor

        return cls(load_actor(args.strip()))

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.folder}"

    @property
    def fingerprint(self) -> str:
        """The sha256 of the model's files (card and state dict): a retrained model, or an edited
        normaliser or card, in the same folder is another policy."""
        return f"model_content_sha256={self.model.content_sha256}"

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.model.act(obs)
