"""``td3sched/ClusterScheduling-v0``: the simulator as a Gymnasium environment, one step per decision.

    env = gymnasium.make("td3sched/ClusterScheduling-v0", scenario="tiny", episode_hours=6)
    obs, info = env.reset(seed=1)                       # builds the world of seed 1 (once), draws a window
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

(``td3sched.envs`` registers the id: through the ``gymnasium.envs`` entry point with Gymnasium 0.29,
otherwise ``gymnasium.make("td3sched.envs:td3sched/ClusterScheduling-v0")`` imports it on the way.)

**Observation**: ``rl.observation`` (35 values, the same whatever the node count). **Action**: 5
numbers (6 with ``action_mode="ceiling"`` or ``"requests"``, 7 with ``"balance"``) in the conventional [-1, 1] box; times ``LOGIT_LIMIT`` (5)
they are the pre-activations that ``rl.actions`` maps to weights on the simplex (softmax), a target
utilisation tau (sigmoid; fixed at 0 with ``action_mode="seed"``) and, in the ceiling mode, the
hold-back ceiling (a pod with no node under it waits: still a step, ``rl.policy``), in the requests mode
the requests share, in the balance mode that and the balance share. ``step_logits`` takes the pre-activations themselves: td3sched's own
TD3 acts, explores and stores transitions in those units (its noise scales and the shipped models'
critics are in them), so its training is unchanged by the box. The placement is the
``static-weights`` score with those arguments (``rl.policy.ActionPolicy``). **Reward**: what the
simulator charged that decision (``reward.py``: the cluster's cost rate after it, integrated until
the next decision, and the events in between), so the step rewards of an episode sum to the run's
``episode_reward``. **Episode**: a window of ``episode_hours`` (the whole span if shorter) at a
random start within the scenario's span, with a random tie-breaking seed, both drawn from the env's
seed. **Warm-up** (``warmup_hours`` > 0 with ``warmup_score``, a ``static-weights`` spec): the
simulation starts that many hours before the window and places the warm-up's pods with that static
score, without steps or rewards, so that the first step sees the cluster that score leaves (as
``evaluate`` starts a span: docs/simulator.md, Steady-state start) instead of an empty one that
mostly measures the fill. Windows are then drawn to start a whole warm-up into the span where it is
long enough. **Action hold** (``action_hold_s`` > 0): a step's action holds for every decision within that
many simulated seconds of the step's own (``rl.policy.ActionPolicy``); the step's reward is what all
of them were charged, and the next observation is the first decision after the hold. ``info["elapsed_s"]`` is the simulated time the step's transition took (to the next decision,
or to the window's end): a semi-MDP learner discounts by it. It ends with the window: ``truncated``
is True on its last step (the cluster would go on), whose observation repeats the last decision's
(there is no next decision, so a learner should not bootstrap from it); ``info["record"]`` is then the run's record.
**Sibling spread** (``sibling_spread`` > 0): every decision's score, the warm-up's too, is lowered on the
nodes that run the pod's siblings (``policy.siblings``); the action does not set it, the model's card
fixes it. **Placing a pod by hand** (``step_logits(..., node=i)``, ``branches(..., nodes=...)``): the step's pod
(its first, with a hold) goes to the pending decision's feasible node ``i`` (an index into the nodes
``pending_utilisation`` describes) whatever the score ranks first; the action still sets the score
for the decisions after it. Diagnostics for a per-node scorer's head-room (benchmarks/rollout_headroom.py);
not in the ceiling mode, whose Filter may leave fewer nodes than it observed.

**Inverted control.** The simulator's loop calls ``policy.score(pod, nodes, cluster)``; the agent
wants to call ``step(action)``. The simulation runs in a worker thread and the two sides hand control
to each other through two ``queue.Queue(maxsize=1)``: ``score`` puts the observation (and the
reward of the previous decision) on ``to_env`` and blocks on ``to_sim`` for the action; ``step`` puts
the action on ``to_sim`` and blocks on ``to_env`` for the next decision or the end of the run.
Exactly one side runs at any time, so a run is as deterministic as a plain one. ``reset`` and
``close`` abandon a running episode: the worker receives a stop token instead of an action, unwinds
out of the simulator and is joined.
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np

from td3sched.envs import ENV_ID  # noqa: F401 (registers it; re-exported)
from td3sched.policy.base import PodRequest
from td3sched.policy.siblings import validate_spread
from td3sched.reward import StepRewardTracker
from td3sched.rl import counterfactual
from td3sched.rl.actions import (LOGIT_LIMIT, ScoreArgs, action_size, check_action_mode, check_hold, decode,
                                 reads_requests, static_score_args)
from td3sched.rl.counterfactual import Branch, BranchRequest, BranchState, fork_branches
from td3sched.rl.observation import OBSERVATION_SIZE
from td3sched.rl.policy import ActionPolicy
from td3sched.scenario import load_scenario
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.engine import Simulation, World

DEFAULT_WORLD_SEED = 1
"""World seed when ``reset`` was never given one."""
MAX_EMPTY_WINDOWS = 20
"""Windows without a single decision drawn in a row before ``reset`` gives up."""


@dataclass(frozen=True)
class Episode:
    """One episode: the world's seed, the simulated window and the run's tie-breaking seed."""

    world_seed: int
    start_s: float
    end_s: float
    sim_seed: int


def check_warmup(hours: float, score: str | None, action_mode: str) -> ScoreArgs | None:
    """The score arguments of an episode's warm-up (None: no warm-up), or a ValueError naming what is
    wrong: hours must be a number >= 0, and a warm-up needs both hours > 0 and a static-weights spec
    that the action mode can express (``rl.actions.static_score_args``)."""
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not (math.isfinite(hours) and hours >= 0):
        raise ValueError(f"warm-up hours {hours!r}: expected a number of simulated hours >= 0 (0: none)")
    if (hours > 0) != (score is not None):
        raise ValueError(f"warm-up of {hours!r} h with the score {score!r}: a warm-up needs both, hours > 0 and the "
                         "static-weights spec that places its pods (or neither)")
    return static_score_args(score, action_mode) if score is not None else None


class _Abandoned(BaseException):
    """Raised inside the worker to unwind the simulator when the env abandons the episode."""


_STOP = object()


@dataclass(frozen=True)
class _Scores:
    """A question about the pending decision (``pending_scores``): what ``action`` scores its nodes."""

    action: np.ndarray


@dataclass(frozen=True)
class _Placed:
    """An action whose decision's pod goes to feasible node ``node`` (``step_logits(..., node=)``)."""

    action: np.ndarray
    node: int


class _HandOffPolicy(ActionPolicy):
    """The env's side of the hand-off, running in the worker thread inside ``Simulation.run``."""

    name = "env"

    def __init__(self, action_mode: str, to_env: queue.Queue, to_sim: queue.Queue, hold_s: float = 0.0,
                 warmup: ScoreArgs | None = None):
        super().__init__(action_mode, hold_s)
        self.to_env, self.to_sim = to_env, to_sim
        self.warmup = warmup
        """The static score of the episode's warm-up (None: the episode has none)."""
        self.sim: Simulation | None = None
        self.decision: tuple[float, int] = (0.0, 0)
        self.branch: BranchState | None = None
        """Set in a forked child only (``rl.counterfactual``)."""
        self.utilisation_seen: np.ndarray | None = None
        """The pending decision's [k, 4] utilisations of the feasible nodes, pod included."""
        self.forced_node: int | None = None
        """The feasible node the next Score puts its pod on, whatever the score (None: the score's)."""
        self.pod_index: int | None = None
        """The pending decision's pod (its index in the world's workload)."""
        self.pending: tuple[PodRequest, np.ndarray, Cluster] | None = None
        """The pending decision's pod, feasible nodes and cluster (``pending_scores``)."""

    def decide(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        if self.warmup is not None and not self.sim.measuring:  # the warm-up's static score: no step
            self.set_score_args(self.warmup)
            if self.action_mode == "ceiling":  # the Filter's hold-back; none without a ceiling
                self.ceiling = math.inf if self.warmup.ceiling is None else self.warmup.ceiling
            self.oom_window.kills(pod.time_s, self.oom_kills_total(pod))  # the first steps see its kills
            return self.utilisation(pod, nodes, cluster)
        self.decision = (pod.time_s, len(nodes))
        self.pod_index = pod.index
        self.pending = (pod, nodes, cluster)
        self.utilisation_seen = None
        return super().decide(pod, nodes, cluster)

    def utilisation(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        u = super().utilisation(pod, nodes, cluster)
        self.utilisation_seen = u
        return u

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        scores = super().score(pod, nodes, cluster)
        if self.forced_node is None:
            return scores
        node, self.forced_node = self.forced_node, None
        if not 0 <= node < len(nodes):  # checked by the env against the decision's count before
            raise ValueError(f"node {node}: expected an index into the decision's {len(nodes)} feasible nodes")
        forced = np.zeros(len(nodes))
        forced[node] = 1.0
        return forced

    def act(self, obs: np.ndarray) -> np.ndarray:
        tracker = self.sim.reward
        previous = tracker.take() if tracker.count else None
        if self.branch is not None:  # a forked child (rl.counterfactual): no agent on the other side
            return self.branch.act(obs, self.decision[0], 0.0 if previous is None else previous)
        self.to_env.put(("decision", obs, previous, self.decision))
        while True:
            action = self.to_sim.get()
            if action is _STOP:
                raise _Abandoned
            if isinstance(action, _Placed):
                self.forced_node = action.node
                return action.action
            if isinstance(action, _Scores):  # a question: the decision still waits for its action
                try:
                    self.to_env.put(("scores", self.pending_scores(action.action), None, None))
                except Exception as exc:  # handed to the agent, who asked
                    self.to_env.put(("scores-error", exc, None, None))
                continue
            if not isinstance(action, BranchRequest):
                return action
            try:
                answer = fork_branches(action, self.decision[0], self._enter_branch)
            except Exception as exc:  # handed to the agent, who asked; the decision still waits
                self.to_env.put(("branch-error", exc, None, None))
                continue
            if self.branch is not None:  # this is the child: its first action goes to the simulator
                return answer
            self.to_env.put(("branches", answer, None, None))

    def pending_scores(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pending decision's scores of its feasible nodes under ``action`` (pre-activations), and its
        pod's siblings on each. The action's score arguments stay set: the decision's own action sets them
        again before its Score."""
        pod, nodes, cluster = self.pending
        self.set_score_args(decode(action, self.action_mode))
        siblings = self.siblings.counts(pod.app, nodes) if self.spread else np.zeros(len(nodes))
        return self.score_nodes(pod, nodes, cluster, self.utilisation_seen), np.asarray(siblings, dtype=np.float64)

    def _enter_branch(self, state: BranchState) -> None:
        self.branch = state
        self.forced_node = state.node
        if state.reseed is not None:
            self.sim.rng = np.random.default_rng(state.reseed)


def _work(sim: Simulation, to_env: queue.Queue) -> None:
    policy = sim.policy
    try:
        record = sim.run()
    except _Abandoned:
        return
    except BaseException as exc:  # handed to the env, which raises it in step/reset
        if policy.branch is not None:
            policy.branch.finish(error=counterfactual.child_error(exc))
        to_env.put(("error", exc, None, None))
        return
    if policy.branch is not None:  # a child that reached the episode's end before its horizon
        policy.branch.finish(sim.reward.take() if sim.reward.count else 0.0, sim.end_s)
    to_env.put(("end", record, sim.reward.take() if sim.reward.count else None, None))


class ClusterSchedulingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, scenario: str = "tiny", span: str = "train", episode_hours: float = 24.0,
                 action_mode: str = "full", overrides: tuple[str, ...] | list[str] = (), lenient: bool = False,
                 action_hold_s: float = 0.0, warmup_hours: float = 0.0, warmup_score: str | None = None,
                 sibling_spread: float = 0.0):
        if not (np.isfinite(episode_hours) and episode_hours > 0):
            raise ValueError(f"episode_hours={episode_hours!r}: expected a positive number of hours")
        self._warmup_args = check_warmup(warmup_hours, warmup_score, action_mode)
        self.warmup_s = float(warmup_hours) * 3600.0
        self.warmup_score = warmup_score
        self.action_hold_s = check_hold(action_hold_s)
        self.sibling_spread = validate_spread(sibling_spread)
        self.scenario_name = scenario
        self.scenario = load_scenario(scenario, list(overrides))
        self.span = span
        self.span_s = self.scenario.span(span)
        self.episode_s = min(float(episode_hours) * 3600.0, self.span_s[1] - self.span_s[0])
        self.action_mode = check_action_mode(action_mode)
        self.lenient = lenient
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBSERVATION_SIZE,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_size(self.action_mode),), np.float32)
        """Scaled by LOGIT_LIMIT into the pre-activations (``step``); ``step_logits`` takes those."""
        self.world: World | None = None
        self.world_seed: int | None = None
        self.episode: Episode | None = None
        self._worker: threading.Thread | None = None
        self._policy: _HandOffPolicy | None = None
        self._to_env: queue.Queue = queue.Queue(maxsize=1)
        self._to_sim: queue.Queue = queue.Queue(maxsize=1)
        self._running = False
        self._obs: np.ndarray | None = None
        self._decision_t = 0.0
        """Simulated time of the decision the next step answers (``info["elapsed_s"]`` runs from it)."""
        self._steps = 0
        self._return = 0.0
        self.max_nodes: float | None = None
        """The running episode's reward scale: each step's reward is -cost / max_nodes, its cost in
        node-hours (``reward.py``); None before the first episode."""

    @property
    def decision_time_s(self) -> float:
        """Simulated time of the pending decision, which the next ``step`` answers."""
        return self._decision_t

    # --- Gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode. ``seed`` seeds the window draws and selects the world (built once per
        seed); ``options={"episode": {...}}`` replays a given ``Episode`` instead of drawing one, and
        ``options={"stream": i}`` (with ``seed``) draws the windows from the i-th child of the seed's
        sequence instead of the seed's own (the env copies of ``rl.workers``; 0: the seed's own)."""
        self._abandon()
        super().reset(seed=seed)
        stream = (options or {}).get("stream", 0)
        if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, (int, np.integer)) or stream < 0:
            raise ValueError(f"stream {stream!r}: expected an integer >= 0 (0: the seed's own draws)")
        if stream and seed is None:
            raise ValueError(f"stream {stream!r} without a seed: a copy's stream is a child of the seed's sequence")
        if stream:
            self._np_random = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(int(stream),))))
        if options and "episode" in options:
            episode = Episode(**options["episode"])
            obs = self._start(episode)
            if obs is None:
                raise ValueError(f"episode {episode}: the window holds no scheduling decision")
        else:
            world_seed = seed if seed is not None else (self.world_seed if self.world_seed is not None
                                                        else DEFAULT_WORLD_SEED)
            for _ in range(MAX_EMPTY_WINDOWS):
                obs = self._start(self._draw(int(world_seed)))
                if obs is not None:
                    break
            else:
                raise ValueError(f"{self.scenario_name}/{self.span}: {MAX_EMPTY_WINDOWS} windows of "
                                 f"{self.episode_s / 3600:g} h in a row held no scheduling decision")
        return obs, {"episode_window": asdict(self.episode)}

    def step(self, action):
        """One decision with ``action`` in the action space [-1, 1]^A: the pre-activations are
        ``LOGIT_LIMIT * action`` (values outside the box are clipped, like the pre-activations)."""
        return self.step_logits(LOGIT_LIMIT * np.asarray(action, dtype=np.float64))

    def step_logits(self, logits, node: int | None = None):
        """One decision with the A pre-activations in [-LOGIT_LIMIT, LOGIT_LIMIT] (``rl.actions``): the
        units of td3sched's TD3 actor, noise and replay buffer. ``node``: put the pod on that feasible
        node instead of the score's first (*Placing a pod by hand*)."""
        action = logits
        if not self._running:
            raise RuntimeError("step() without a running episode: call reset() first")
        action = np.asarray(action, dtype=np.float32).reshape(-1)
        args = decode(action, self.action_mode)  # validates before the hand-off
        if node is not None:
            self._to_sim.put(_Placed(action.copy(), self._check_node(node)))
        else:
            self._to_sim.put(action.copy())
        kind, payload, reward, decision = self._to_env.get()
        self._steps += 1
        if kind == "error":
            self._finish()
            raise RuntimeError(f"the simulation of {self.episode} failed: {payload}") from payload
        self._return += reward
        info = {"weights": args.weights, "tau": args.tau}
        if args.ceiling is not None:
            info["ceiling"] = args.ceiling
        if reads_requests(self.action_mode):
            info["requests"] = args.requests
        if self.action_mode == "balance":
            info["balance"] = args.balance
        if kind == "end":
            self._finish()
            info.update(record=payload, episode={"r": self._return, "l": self._steps},
                        elapsed_s=self.episode.end_s - self._decision_t)
            return self._obs, reward, False, True, info
        self._obs = payload
        info.update(time_s=decision[0], feasible=decision[1], elapsed_s=decision[0] - self._decision_t)
        self._decision_t = decision[0]
        return payload, reward, False, False, info

    def branches(self, actions, horizon_s: float, continuation=None, workers: int = 2,
                 reseed: int | None = None, nodes=None) -> list[Branch]:
        """Counterfactual branches of the pending decision (``rl.counterfactual``): the simulation is
        forked once per row of ``actions`` (pre-activations), each branch takes its action, then
        ``continuation(obs)`` (None: the same action) until ``horizon_s`` simulated seconds later or
        the episode's end; their charges, in the order of ``actions``. ``nodes`` (one per row; -1: the
        score's choice) places the branch's first pod by hand (*Placing a pod by hand*). The episode
        itself is untouched: the next ``step`` answers the same decision."""
        if not self._running:
            raise RuntimeError("branches() without a pending decision: call reset() first")
        if nodes is not None:
            nodes = tuple(self._check_node(n, allow_default=True) for n in nodes)
        request = BranchRequest(np.asarray(actions, dtype=np.float32), float(horizon_s), continuation, workers, reseed,
                                nodes)
        if request.actions.shape[1] != self.action_space.shape[0]:
            raise ValueError(f"actions of shape {request.actions.shape}: expected rows of "
                             f"{self.action_space.shape[0]} pre-activations")
        for a in request.actions:
            decode(a, self.action_mode)
        self._to_sim.put(request)
        kind, payload, _, _ = self._to_env.get()
        if kind == "branch-error":
            raise RuntimeError(f"counterfactual branches at {self._decision_t:g} s of {self.episode}: {payload}") \
                from payload
        return payload

    def _check_node(self, node, allow_default: bool = False) -> int:
        """``node`` as an index into the pending decision's feasible nodes, or a ValueError naming it."""
        if self.action_mode == "ceiling":
            raise ValueError("placing a pod by hand is not supported in the ceiling action mode: its Filter may "
                             "leave fewer nodes than the decision observed")
        k = self._policy.decision[1]
        low = -1 if allow_default else 0
        if isinstance(node, (bool, np.bool_)) or not isinstance(node, (int, np.integer)) or not low <= node < k:
            raise ValueError(f"node {node!r}: expected an index into the pending decision's {k} feasible nodes"
                             + (" (or -1: the score's choice)" if allow_default else ""))
        return int(node)

    def pending_utilisation(self) -> np.ndarray:
        """A copy of the pending decision's [k, 4] utilisations (CPU, memory, disk IO, network) of its
        feasible nodes, pod included: what the score of any action ranks (diagnostics)."""
        if not self._running or self._policy.utilisation_seen is None:
            raise RuntimeError("pending_utilisation() without a pending decision: call reset() first")
        return np.array(self._policy.utilisation_seen, dtype=np.float64)

    def pending_scores(self, logits) -> tuple[np.ndarray, np.ndarray]:
        """What the action of pre-activations ``logits`` would score each of the pending decision's
        feasible nodes (in ``pending_utilisation``'s order; the sibling spread included), and how many of
        the pending pod's siblings each runs (zeros without a spread, which alone counts them). The
        decision still waits for its ``step`` (diagnostics: benchmarks/node_scorer.py)."""
        if not self._running or self._policy.pending is None or self._policy.utilisation_seen is None:
            raise RuntimeError("pending_scores() without a pending decision: call reset() first")
        action = np.asarray(logits, dtype=np.float32).reshape(-1)
        decode(action, self.action_mode)  # validates before the hand-off
        self._to_sim.put(_Scores(action.copy()))
        kind, payload, _, _ = self._to_env.get()
        if kind == "scores-error":
            raise RuntimeError(f"scoring the pending decision at {self._decision_t:g} s of {self.episode}: {payload}") \
                from payload
        return payload

    def pending_pod(self) -> int:
        """The pending decision's pod: its index in ``world.workload`` (diagnostics)."""
        if not self._running or self._policy.pod_index is None:
            raise RuntimeError("pending_pod() without a pending decision: call reset() first")
        return int(self._policy.pod_index)

    def close(self) -> None:
        self._abandon()
        super().close()

    def __del__(self):
        try:
            self._abandon()
        except Exception:
            pass

    # --- state for checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The running episode and the draw generator's state (JSON-ready)."""
        return {"episode": asdict(self.episode) if self.episode else None,
                "np_random": self.np_random.bit_generator.state}

    def restore(self, state: dict) -> np.ndarray:
        """Restart ``state``'s episode from its first decision and restore the draw generator (the
        caller replays the episode's actions to reach where the state was taken)."""
        obs, _ = self.reset(options={"episode": state["episode"]})
        rng = np.random.Generator(getattr(np.random, state["np_random"]["bit_generator"])())
        rng.bit_generator.state = state["np_random"]
        self._np_random = rng
        return obs

    # --- the worker --------------------------------------------------------------------------------
    def _world_for(self, seed: int) -> World:
        if self.world is None or self.world_seed != seed:
            self.world = None  # let the old world go before building the next
            self.world = self.scenario.build(seed, lenient=self.lenient)
            self.world_seed = seed
        return self.world

    def _draw(self, world_seed: int) -> Episode:
        a, b = self.span_s
        lo = min(max(a, self.warmup_s), max(a, b - self.episode_s))  # a whole warm-up before the window if it can
        room = int(b - lo - self.episode_s)
        start = lo + (int(self.np_random.integers(0, room + 1)) if room > 0 else 0)
        return Episode(world_seed, float(start), float(start + self.episode_s),
                       int(self.np_random.integers(0, 2**31 - 1)))

    def _start(self, episode: Episode) -> np.ndarray | None:
        """Start the worker on ``episode``; the first observation, or None if no decision came."""
        world = self._world_for(episode.world_seed)
        policy = _HandOffPolicy(self.action_mode, self._to_env, self._to_sim, self.action_hold_s, self._warmup_args)
        policy.spread = self.sibling_spread  # the card's: every decision's score, the warm-up's too
        self._policy = policy
        sim = Simulation(world, policy, episode.sim_seed, episode.start_s, episode.end_s, warmup_s=self.warmup_s)
        sim.reward = StepRewardTracker(world.reward, sim._max_nodes)
        self.max_nodes = sim.reward.max_nodes
        policy.sim = sim
        self.episode = episode
        self._steps, self._return = 0, 0.0
        self._worker = threading.Thread(target=_work, args=(sim, self._to_env), daemon=True,
                                        name=f"td3sched-env-{episode.start_s:g}")
        self._running = True
        self._worker.start()
        kind, payload, _, decision = self._to_env.get()
        if kind == "decision":
            self._obs = payload
            self._decision_t = decision[0]
            return payload
        self._finish()
        if kind == "error":
            raise RuntimeError(f"the simulation of {episode} failed: {payload}") from payload
        return None

    def _finish(self) -> None:
        self._worker.join()
        self._worker = None
        self._running = False
        # The finished simulation and its policy point at each other: a reference cycle holding the whole
        # run (gigabytes of arrays on dlrm), which the cyclic collector, counting objects and not bytes,
        # can leave for many episodes (a dlrm training grew by a gigabyte an episode until it was killed
        # at 24 GB). Breaking it frees the run as the episode ends.
        if self._policy is not None and self._policy.sim is not None:
            self._policy.sim.policy = None
            self._policy.sim = None

    def _abandon(self) -> None:
        if self._worker is None:
            return
        if self._running:
            self._to_sim.put(_STOP)
        self._finish()



def episode_return(env: ClusterSchedulingEnv, episode: dict, act) -> float:
    """The return of ``episode`` (an ``Episode`` as a dict) replayed on ``env``, with the
    pre-activations ``act(obs)`` chooses at each decision."""
    obs, _ = env.reset(options={"episode": episode})
    total = 0.0
    while True:
        obs, reward, terminated, truncated, _ = env.step_logits(act(obs))
        total += reward
        if terminated or truncated:
            return total
