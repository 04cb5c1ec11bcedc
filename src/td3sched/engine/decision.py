"""One decision: a pod and its candidate nodes -> the action and a score per node.

The same code as the simulator's ``td3`` policy (``rl.policy.ActionPolicy.score``), imported, not
copied:

    u        = policy.features.utilisation(pod, fresh candidates, snapshot, assign-cache usage)
    obs      = rl.observation.observe(pod, fresh candidates, snapshot, u, OOM kills of 5 min)
    action   = the served actor (rl.onnx_actor) on obs
    w, tau, ceiling, rho, b = rl.actions.decode(action, the card's action mode)   ceiling: None unless the
                                                                            card declares that dimension; rho
                                                                            (requests share) and b (balance
                                                                            share) 0 unless it does
    score_n  = policy.static_weights.product_score(u_n, requested utilisation_n, w, tau, rho,
                                                   pod_balance(b, pod's QoS))                    in [0, 1]
    held_n   = not policy.static_weights.within_ceiling(u_n, ceiling)         score 0, and /filter fails n

**Hold-back ceiling** (a model whose card declares the ``ceiling`` dimension, ``rl.actions``): a
candidate whose CPU utilisation with the pod would exceed the action's ceiling is held back for this
pod, by the same rule as ``static-weights``' and the simulator's ``td3`` policy. ``filter(candidates,
pod)`` (the extender's /filter) fails those nodes with the reason, so a pod with none left waits, as in
the simulator; ``decide`` (ScoreNodes, /prioritize) scores them 0 and marks them ``held_back`` (a Score
plugin cannot filter; ScoreNodes also marks them ``excluded``). In shadow mode nothing is held back.

**Requests share** (a card declaring the ``requests`` dimension): the score reads CPU and memory by
the pods' requests to the share the action gives, from the snapshot's ``nonzero_requested`` (the pod
watch of the Kubernetes source, or the simulator's). A snapshot without them (metrics alone) cannot
serve such a model: the decision falls back (``no_requests``). The td3score plugin's own scoring of a
held action reads usage only, so such an action is never handed to it (``action_valid_s`` 0).

**Balance share** (a card declaring the ``balance`` dimension, which reads requests too): the score is
blended with how alike each candidate's CPU and memory fill (``policy.features.balanced``); the plugin's
own score has no such term, so such an action is not handed to it either.

**Fragmentation share** (a card declaring the ``frag`` dimension, action mode ``fragmentation``): the
score is blended with FGD's, as ``static-weights``' ``frag`` blends it (``blend_fragmentation``): how
little placing the pod grows its node's fragmentation (``policy.fgd.fragmentation_decrease``), measured
with the typical pods of the node's pool that the card carries (``typical_pods``, written by ``td3sched
train``) over the snapshot's ``allocation`` (what the bound pods' requests leave free, GPUs included,
and each node's pool; a pool the card does not name has no typical pods, so its nodes' fragmentation is
0). A snapshot without an allocation cannot serve such a model: the decision falls back
(``no_allocation``). Nor can the plugin's own score, so such an action is not handed to it. A card
without typical pods is refused at load, naming the model.

**Sibling spread** (a card's ``sibling_spread``, or the fallback's ``spread``): the score is lowered on the
candidates that run the pod's siblings, the bound pods of its controller (``PodSpec.owner``), as
``static-weights``' ``spread`` lowers it (``policy.siblings.spread_siblings``), after the fragmentation blend.
The state knows the pods' controllers from its pod watch (``ShadowState.sibling_counts``); without one a
model with a spread falls back (``no_pods``), and the fallback's own spread is left out. The td3score
plugin's scoring of a held action has no such term, so such an action is not handed to it (its in-process
inference of such a model has the term, counting the siblings over its NodeInfo pods).

Candidates with stale or missing metrics (``state.Staleness``) are left out of the observation and
get ``NEUTRAL_SCORE`` (fail-open) or are excluded (fail-closed). The safety filter
(``simulator.filter.safety_ok``) removes nodes whose observed CPU is above the threshold.

Fallback: when the actor cannot give a usable action the decision uses the configured fallback
arguments (default: the best-static weights and tau of the model's scenario; with a fragmentation
share and its typical pods, the static score blended with FGD's as above, when the snapshot has the
allocation, else the static score alone), and says why:

    no_model          no model loaded
    model_error       the actor raised
    nan               the action has a NaN or an infinity
    out_of_range      an action value lies outside [-LOGIT_LIMIT, LOGIT_LIMIT] (beyond rounding)
    no_fresh_metrics  no candidate has fresh metrics: nothing to observe
    no_requests       the model scores by requests and the state does not know them (no pod watch)
    no_allocation     the model has a fragmentation share and the state does not know the nodes'
                      allocation (what the bound pods' requests leave free, and the nodes' pools)
    no_pods           the model has a sibling spread and the state does not know the bound pods'
                      controllers (no pod watch)

**Action hold** (a card's ``action_hold_s`` > 0, ``rl.policy.ActionPolicy``): the actor is asked at most
once per hold, on the engine's clock; a decision within the hold of the last action the model took
uses that action (``Decision.action_held``), as the simulator's ``td3`` policy does. A fallback takes
no hold, and a reload starts afresh. Each decision says how long its action keeps holding
(``Decision.action_valid_s``, ScoreNodes' ``action_valid_s``), so that the td3score plugin can score
the pods of the hold itself, without a call per pod.

The model is held in a ``ModelSlot``: a reload validates the new model, then swaps the reference; a
decision reads the slot once, so a decision in flight finishes on the model it started with.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from itertools import repeat
from dataclasses import dataclass, field

import numpy as np

from td3sched.metrics.fragmentation import PoolTypicalPods, typical_for_pools
from td3sched.policy.base import PodRequest
from td3sched.policy.fgd import fragmentation_decrease
from td3sched.policy.features import requested_utilisation, utilisation
from td3sched.policy.siblings import spread_siblings, validate_spread
from td3sched.policy.static_weights import (blend_fragmentation, pod_balance, product_score, rounded_scores,
                                           served_scores, validate_fragmentation, validate_weights, within_ceiling)
from td3sched.rl.actions import LOGIT_LIMIT, ScoreArgs, decode, reads_requests
from td3sched.rl.observation import OBSERVATION_SIZE, observe
from td3sched.simulator.filter import safety_ok
from td3sched.engine.state import Allocation, NodeSnapshot, NotReady, ShadowState, binding_key

NEUTRAL_SCORE = 0.5
"""Score in [0, 1] of a candidate with stale or missing metrics under fail-open (50 of 100)."""
RANGE_SLACK = 1e-4
"""An action beyond LOGIT_LIMIT by more than this is out of range (the actor's tanh cannot reach it)."""
FALLBACK_REASONS = ("no_model", "model_error", "nan", "out_of_range", "no_fresh_metrics", "no_requests",
                    "no_allocation", "no_pods")
QOS_NAMES = ("Guaranteed", "Burstable", "BestEffort")
"""QoS classes, indexed like ``PodRequest.qos`` (workload.pods)."""


@dataclass(frozen=True)
class PodSpec:
    """What the engine needs of a pod; requests in the simulator's units."""

    name: str
    cpu_milli: float = 0.0
    mem_mib: float = 0.0
    disk_gib: float = 0.0
    rdma_pct: float = 0.0
    gpu_count: int = 0
    gpu_milli: int = 0
    qos: int = 1
    """Index into QOS_NAMES."""
    cpu_limit_milli: float = math.inf
    """inf: no limit (as the simulator's workloads)."""
    mem_limit_mib: float = math.inf
    namespace: str = ""
    owner: str = ""
    """The pod's controller (``namespace/Kind/name`` of its controlling owner reference), whose other pods
    are its siblings (``policy.siblings``); "": a pod of its own."""

    def __post_init__(self):
        if not isinstance(self.owner, str):
            raise ValueError(f"pod.owner={self.owner!r}: expected the controller's namespace/kind/name, or \"\"")
        for key in ("cpu_milli", "mem_mib", "disk_gib", "rdma_pct", "cpu_limit_milli", "mem_limit_mib"):
            value = getattr(self, key)
            limit = key.endswith("_limit_milli") or key.endswith("_limit_mib")  # inf: no limit
            if not (isinstance(value, (int, float)) and (math.isfinite(value) or (limit and value == math.inf))
                    and value >= 0):
                raise ValueError(f"pod.{key}={value!r}: expected a finite non-negative number"
                                 + (" (or inf: no limit)" if limit else ""))
        if not (isinstance(self.qos, int) and 0 <= self.qos < len(QOS_NAMES)):
            raise ValueError(f"pod.qos={self.qos!r}: expected one of {', '.join(QOS_NAMES)}")
        if self.gpu_count < 0 or not 0 <= self.gpu_milli <= 1000:
            raise ValueError(f"pod.gpu_count={self.gpu_count!r}, gpu_milli={self.gpu_milli!r}: expected a count "
                             "and milli-GPUs in [0, 1000]")

    def request(self, time_s: float) -> PodRequest:
        return PodRequest(-1, np.array([self.cpu_milli, self.mem_mib, self.disk_gib, self.rdma_pct]),
                          self.gpu_count, self.gpu_milli, self.qos, self.cpu_limit_milli, self.mem_limit_mib, time_s,
                          self.owner or None)


def quantize(scores: np.ndarray, max_score: int) -> np.ndarray:
    """Scores in [0, 1] as the integers 0..``max_score`` a front door answers
    (``policy.static_weights.rounded_scores``: 100 for ScoreNodes, 10 for the extender)."""
    return rounded_scores(scores, max_score).astype(np.int64)


@dataclass
class Decision:
    """The answer for one pod."""

    candidates: list[str]
    scores: np.ndarray
    """[k] in [0, 1], candidates' order (0 for excluded ones)."""
    excluded: np.ndarray
    """[k] bool: fail-closed staleness removed the node."""
    stale: np.ndarray
    """[k] bool: metrics stale or missing."""
    weights: np.ndarray
    tau: float
    pre_activations: np.ndarray | None
    """The actor's output (``action_size`` values), None for a fallback without one."""
    model_version: str
    fallback_reason: str = ""
    observation: np.ndarray | None = None
    utilisation: np.ndarray | None = None
    """[fresh, 4] of the fresh candidates (for the decision log)."""
    time_s: float = 0.0
    advisory: bool = False
    ceiling: float | None = None
    """The action's hold-back ceiling (None: the model declares none, or a fallback)."""
    requests: float = 0.0
    """The action's requests share (0: the model declares none, or a fallback)."""
    balance: float = 0.0
    """The action's balance share (0: the model declares none, or a fallback)."""
    fragmentation: float = 0.0
    """The action's fragmentation share (0: the model declares none, or a fallback)."""
    spread: float = 0.0
    """The sibling spread the scores took (0: none, or the state does not know the pods)."""
    requested: np.ndarray | None = None
    """[fresh, 2] requested CPU and memory utilisation of the fresh candidates, pod included (for the
    decision log); None when the snapshot does not know the requests."""
    held_back: np.ndarray | None = None
    """[k] bool: above the ceiling with the pod (score 0); None without a ceiling."""
    action_held: bool = False
    """The action is an earlier decision's, still holding (the card's ``action_hold_s``)."""
    action_valid_s: float = 0.0
    """Seconds the action keeps holding after this decision, on the engine's clock: until then every pod
    gets it, so a scheduler may score with it itself. 0: no hold, a fallback, shadow mode, or
    fail-closed staleness (whose exclusions a scheduler's own fail-open scoring would not repeat)."""

    @property
    def fallback(self) -> bool:
        return bool(self.fallback_reason)

    def scores_0_100(self) -> list[int]:
        return quantize(self.scores, 100).tolist()

    @property
    def eligible(self) -> np.ndarray:
        """[k] bool: the candidates the pod may go to (neither excluded nor held back)."""
        eligible = ~np.asarray(self.excluded, dtype=bool)
        if self.held_back is not None:
            eligible &= ~np.asarray(self.held_back, dtype=bool)
        return eligible

    def answer(self, max_score: int) -> np.ndarray:
        """[k] the integers 0..``max_score`` a front door answers (``policy.static_weights.served_scores``:
        rounded; at the extender's 0-10 the best eligible candidates alone at the top)."""
        return served_scores(self.scores, max_score, self.eligible).astype(np.int64)


def check_servable(actor) -> None:
    """A ValueError naming the model when its card declares what the engine needs more to serve: a
    fragmentation share without the typical pods it is measured with."""
    if "frag" in getattr(actor, "dimensions", ()) and getattr(actor, "typical_pods", None) is None:
        raise ValueError(f"model {actor.folder}: declares the action dimension 'frag' but its card has no "
                         "typical_pods (the training scenario's typical pods per pool, which the share is scored "
                         "with): retrain it with this version of td3sched train, which writes them")


class FragmentationMeasure:
    """A served model's fragmentation measure: the card's typical pods for the snapshot's pools by name,
    none for a pool the card does not name (those nodes' fragmentation is 0): ``typical_for_pools``, the
    rule the simulator's td3 policy measures the model by too."""

    def __init__(self, pool_names: tuple[str, ...], typical: PoolTypicalPods):
        self.card = (tuple(pool_names), typical)
        self._pools: tuple[tuple[str, ...], PoolTypicalPods] = ((), PoolTypicalPods(()))
        """(the snapshot's distinct pool names, their typical pods) of the last decision: the pools change
        only with the node inventory, so the sets (and their compiled arrays) are made once for them."""

    def for_pools(self, pool_names: tuple[str, ...]) -> PoolTypicalPods:
        names, typical = self._pools  # read once: another thread may replace it
        if names != pool_names:
            typical = typical_for_pools(*self.card, pool_names)
            self._pools = (pool_names, typical)
        return typical

    def decrease(self, request: PodRequest, nodes: np.ndarray, allocation: Allocation) -> np.ndarray:
        """[k] how much placing the pod on each of ``nodes`` (snapshot rows) lowers its fragmentation."""
        typical = self.for_pools(allocation.pool_names)
        pool = allocation.pool_code[nodes]
        free, gpu_free = allocation.free[nodes], allocation.gpu_free[nodes]
        before = typical.node_fragmentation(free, gpu_free, pool)
        return fragmentation_decrease(typical, request, free, gpu_free, pool, before)


def fragmentation_measure(actor) -> FragmentationMeasure | None:
    """The measure a served model's fragmentation share is scored with (None: it has no such share)."""
    typical = getattr(actor, "typical_pods", None)
    if typical is None or "frag" not in getattr(actor, "dimensions", ()):
        return None
    return FragmentationMeasure(*typical)


class ModelSlot:
    """The served actor, swapped atomically on reload."""

    def __init__(self, actor=None):
        if actor is not None:
            check_servable(actor)
        self.served = (actor, fragmentation_measure(actor))
        """(the served actor, its fragmentation measure or None), replaced whole: a decision reads both at once."""
        self._lock = threading.Lock()

    @property
    def actor(self):
        return self.served[0]

    @actor.setter
    def actor(self, actor) -> None:
        self.served = (actor, fragmentation_measure(actor))

    @property
    def version(self) -> str:
        actor = self.actor
        return actor.version if actor is not None else "none"

    def swap(self, actor) -> None:
        """Validate ``actor`` on a neutral observation, then serve it (a ValueError leaves the old one)."""
        check_servable(actor)
        probe = actor.act(np.zeros(OBSERVATION_SIZE, dtype=np.float32))
        if probe.shape != (actor.action_size,) or not np.all(np.isfinite(probe)):
            raise ValueError(f"model {actor.folder}: gives {probe.tolist()} on a zero observation: expected "
                             f"{actor.action_size} finite numbers")
        served = (actor, fragmentation_measure(actor))
        with self._lock:
            self.served = served


@dataclass
class DecisionEngine:
    state: ShadowState
    models: ModelSlot
    fallback_weights: np.ndarray = field(default_factory=lambda: np.full(4, 0.25))
    fallback_tau: float = 0.0
    safety_cpu_util: float = 0.90
    shadow: bool = False
    """Decide and log, but answers are advisory (ScoreNodes) or neutral (the extender)."""
    fallback_fragmentation: float = 0.0
    """The fallback's fragmentation share: its static score blended with FGD's, measured with
    ``fallback_measure`` (when the snapshot has the nodes' allocation; without it, the static score)."""
    fallback_measure: FragmentationMeasure | None = None
    fallback_spread: float = 0.0
    """The fallback's sibling spread (``policy.siblings``), applied when the state knows the pods."""

    _held: tuple | None = field(default=None, init=False, repr=False)
    """(model version, time, pre-activations) of the last action a holding model took."""

    def __post_init__(self):
        self.fallback_weights, self.fallback_tau = validate_weights(self.fallback_weights, self.fallback_tau)
        self.fallback_fragmentation = validate_fragmentation(self.fallback_fragmentation)
        self.fallback_spread = validate_spread(self.fallback_spread)
        if self.fallback_fragmentation and self.fallback_measure is None:
            raise ValueError(f"fallback fragmentation share {self.fallback_fragmentation:g}: expected the typical "
                             "pods it is measured with (fallback_measure)")

    def _holding(self, hold: float, version: str, now: float) -> tuple | None:
        """(version, time taken, action) of the action still held at ``now`` under a hold of ``hold``
        seconds, or None: ask the actor."""
        held = self._held  # read once: another thread may replace it
        if hold and held is not None and held[0] == version and 0.0 <= now - held[1] < hold:
            return held
        return None

    def _action(self, actor, obs: np.ndarray) -> tuple[np.ndarray | None, str]:
        if actor is None:
            return None, "no_model"
        try:
            action = np.asarray(actor.act(obs), dtype=np.float64)
        except Exception:  # noqa: BLE001  (any failure of the model falls back; the reason is counted)
            return None, "model_error"
        if action.shape != (actor.action_size,):
            return None, "model_error"
        values = action.tolist()  # a handful of numbers: checked as Python floats, cheaper than numpy calls
        if not all(map(math.isfinite, values)):
            return action, "nan"
        if max(map(abs, values)) > LOGIT_LIMIT + RANGE_SLACK:
            return action, "out_of_range"
        return action, ""

    def decide(self, pod: PodSpec, candidates: list[str] | None = None) -> Decision:
        """Score ``candidates`` (every known node when None; names, str) for ``pod``. ``NotReady``
        without a snapshot; ``ValueError`` naming the field on bad input."""
        snap = self.state.snapshot
        now = self.state.clock()
        names = list(snap.names) if candidates is None else list(candidates)
        if not names:
            raise ValueError("candidates: empty: expected at least one node name")
        unique = set(names)
        if len(unique) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:5]
            raise ValueError(f"candidates: duplicate node names {dup}")
        if "" in unique:
            raise ValueError("candidates: expected non-empty node names")
        idx = np.fromiter(map(snap.index.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        fresh, n_fresh = self.state.fresh_candidates(snap, now, idx)
        stale = ~fresh
        scores = np.full(len(names), NEUTRAL_SCORE)
        if self.state.staleness.mode == "fail-closed":
            excluded = stale
            scores[excluded] = 0.0
        else:
            excluded = np.zeros(len(names), dtype=bool)
        actor, measure = self.models.served
        version = actor.version if actor is not None else "none"
        if not n_fresh:
            return Decision(names, scores, excluded, stale, self.fallback_weights, self.fallback_tau, None, version,
                            "no_fresh_metrics", time_s=now, advisory=self.shadow)
        every = n_fresh == len(names)  # the usual case: no mask to apply
        nodes = idx if every else idx[fresh]
        request = pod.request(now)
        u = utilisation(request, nodes, snap, self.state.recent_usage(snap))
        obs = observe(request, nodes, snap, u, snap.oom_kills_recent)
        hold = getattr(actor, "action_hold_s", 0.0) if actor is not None else 0.0
        holding = self._holding(hold, version, now)
        held_action = holding is not None
        if held_action:
            _, taken_at, action = holding
            reason = ""
        else:
            action, reason = self._action(actor, obs)
            taken_at = now
        by_requests = not reason and reads_requests(actor.action_mode)
        if by_requests and snap.nonzero_requested is None:
            reason, by_requests = "no_requests", False
        by_fragmentation = not reason and measure is not None
        if by_fragmentation and snap.allocation is None:
            reason, by_fragmentation = "no_allocation", False
        model_spread = getattr(actor, "sibling_spread", 0.0) if actor is not None else 0.0
        by_siblings = not reason and model_spread > 0
        if by_siblings and not self.state.knows_pods:
            reason, by_siblings = "no_pods", False
        if hold and not reason and not held_action:
            self._held = (version, now, action)
        valid_s = 0.0
        if (hold and not reason and not by_requests and not by_fragmentation and not by_siblings and not self.shadow
                and self.state.staleness.mode != "fail-closed"):
            valid_s = hold - (now - taken_at)
        if reason:  # the static score, blended with FGD's when the fallback has a share and the allocation is known
            blend_by = self.fallback_measure if snap.allocation is not None else None
            args = ScoreArgs(self.fallback_weights, self.fallback_tau,
                             fragmentation=self.fallback_fragmentation if blend_by is not None else 0.0)
            spread = self.fallback_spread
        else:
            blend_by = measure if by_fragmentation else None
            args = decode(action, actor.action_mode)
            spread = model_spread
        r = requested_utilisation(request, nodes, snap) if snap.nonzero_requested is not None else None
        fresh_scores = product_score(u, r, args.weights, args.tau, args.requests, pod_balance(args.balance, request.qos))
        if blend_by is not None and args.fragmentation:
            fresh_scores = blend_fragmentation(fresh_scores, blend_by.decrease(request, nodes, snap.allocation),
                                               args.fragmentation)
        siblings = None  # the pod's siblings on each fresh candidate; None: no spread, or no pod watch to count them
        if spread:
            siblings = self.state.sibling_counts(pod.owner, names if every else [n for n, f in zip(names, fresh) if f],
                                                 binding_key(pod.namespace, pod.name))
        if siblings is None:
            spread = 0.0
        else:
            fresh_scores = spread_siblings(fresh_scores, siblings, spread)
        held = None
        if args.ceiling is not None:
            over = ~within_ceiling(u, args.ceiling)
            fresh_scores[over] = 0.0
            held = np.zeros(len(names), dtype=bool)
            held[fresh] = over
        if every:
            scores = fresh_scores
        else:
            scores[fresh] = fresh_scores
        return Decision(names, scores, excluded, stale, args.weights, args.tau, action, version, reason, obs, u, now,
                        advisory=self.shadow, ceiling=args.ceiling, held_back=held, action_held=held_action,
                        action_valid_s=valid_s, requests=args.requests, balance=args.balance, requested=r,
                        fragmentation=args.fragmentation, spread=spread)

    def warm_up(self) -> None:
        """Decide and filter on a two-node cluster of its own, before and after a binding, so that every
        compiled kernel of the decision path is loaded (compiled, on a first run) before the first
        request rather than during it. Reads the served model; touches nothing the engine serves."""
        state = ShadowState(lambda: 0.0, self.state.staleness)
        capacity = np.array([[64000.0, 262144.0, 1.0, 25000.0]] * 2)
        state.publish(NodeSnapshot(("warm-up-a", "warm-up-b"), np.array([[64000.0, 262144.0, 1000.0, 100.0]] * 2),
                                   capacity, 0.3 * capacity, np.zeros(2)))
        probe = dataclasses.replace(self, state=state)
        pod = PodSpec("warm-up", cpu_milli=100.0, mem_mib=128.0)
        for bound in (False, True):
            if bound:
                state.report_binding("warm-up-a", pod.request(0.0).nonzero_cpu_mem, t=0.0)
            probe.decide(pod, ["warm-up-a", "warm-up-b"])
            probe.filter(["warm-up-a", "warm-up-b"], pod)
        for measure in (self.models.served[1], self.fallback_measure):
            if measure is not None:  # the fragmentation kernel, on two nodes of no pool the measure knows
                measure.decrease(pod.request(0.0), np.arange(2), Allocation(capacity, np.zeros((2, 1)), ("", "")))

    def serves_ceiling(self) -> bool:
        """Whether the served model's card declares the hold-back ceiling."""
        actor = self.models.actor
        return actor is not None and "ceiling" in getattr(actor, "dimensions", ())

    def filter(self, candidates: list[str], pod: PodSpec | None = None) -> tuple[dict[str, str], Decision | None]:
        """(failed nodes -> reason, the decision taken for ``pod`` or None). Failed: the safety filter
        (observed CPU over the threshold, corrected by nothing: what the node reports), stale or
        unknown nodes under fail-closed and, for a ``pod`` when the served model declares a hold-back
        ceiling (and the engine is not in shadow mode), the nodes the action holds back: the
        decision is taken on the nodes that passed the rest, as the simulator's td3 policy takes it
        in its Filter."""
        snap = self.state.snapshot
        now = self.state.clock()
        failed: dict[str, str] = {}
        idx = np.fromiter(map(snap.index.get, candidates, repeat(-1)), dtype=np.int64, count=len(candidates))
        known = idx >= 0
        fresh, _ = self.state.fresh_candidates(snap, now, idx)  # unknown nodes are never fresh
        k = idx[fresh]
        hot = np.zeros(len(candidates), dtype=bool)
        if len(k):
            hot[fresh] = ~safety_ok(snap.observed[k, 0], snap.allocatable[k, 0], self.safety_cpu_util)
        closed = self.state.staleness.mode == "fail-closed"
        for j in np.flatnonzero(hot | (~fresh if closed else False)).tolist():  # the failed ones only
            name = candidates[j]
            if hot[j]:
                i = idx[j]
                failed[name] = (f"safety filter: observed CPU {100 * snap.observed[i, 0] / snap.allocatable[i, 0]:.0f}% "
                                f"of allocatable is above {100 * self.safety_cpu_util:.0f}%")
            elif closed and not known[j]:
                failed[name] = "no metrics for this node (staleness: fail-closed)"
            elif closed and not fresh[j]:
                age = now - snap.scraped_at_s[idx[j]]
                failed[name] = (f"metrics {age:.0f} s old, over {self.state.staleness.max_age_s:g} s "
                                "(staleness: fail-closed)" if math.isfinite(age) else
                                "metrics missing (staleness: fail-closed)")
        if pod is None or self.shadow or not self.serves_ceiling():
            return failed, None
        passing = [n for n in candidates if n not in failed]
        if not passing:
            return failed, None
        d = self.decide(pod, passing)
        if d.held_back is not None and d.held_back.any():
            fresh_u = np.full(len(passing), np.nan)
            fresh_u[~d.stale] = d.utilisation[:, 0]
            for j in np.flatnonzero(d.held_back).tolist():
                failed[passing[j]] = (f"hold-back ceiling: CPU {100 * fresh_u[j]:.0f}% of allocatable with the pod "
                                      f"would exceed the model's ceiling of {100 * d.ceiling:.0f}% for this pod")
        return failed, d


__all__ = ["Decision", "DecisionEngine", "ModelSlot", "NodeSnapshot", "NotReady", "PodSpec", "FALLBACK_REASONS",
           "quantize"]
