"""``static-weights``: the product's score with fixed arguments.

    score_n = w_cpu * f_cpu(n) + w_mem * f_mem(n) + w_io * f_io(n) + w_net * f_net(n)

with f the closeness of each utilisation (pod included) to the target utilisation tau
(``policy.features``), the weights on the simplex. Uses the assign cache: pods bound since the last
scrape are added to observed usage with their requests as the estimate.

**Hold-back ceiling** (optional): a node whose CPU utilisation with the pod on it (the same
estimate: observed, the assign cache, the pod's request) would exceed ``ceiling`` is filtered for
this pod; when no node is left the pod waits in the queue, as behind Koordinator's load-aware
filter. The safety filter (90% observed CPU) stays underneath whatever the ceiling.

**Requests share** (optional, ``req``): CPU and memory utilisation read by requests rather than
usage, or a blend (``features.with_requests``): ``req=1`` with ``w=0.5/0.5/0/0:tau=0`` scores as
kube-scheduler's LeastAllocated. The ceiling reads observed usage whatever the share: it holds back
hot nodes.

**Balance share** (optional, ``bal``): the score blended with the balance of the node's CPU and memory
(``features.balanced``), ``(1 - bal) x score + bal x balance``: ``w=0.5/0.5/0/0:tau=0:req=1:bal=0.5``
scores as kube-scheduler's default (LeastAllocated plus BalancedAllocation, halved) before its rounding.
As BalancedAllocation, the term is left out for a BestEffort pod (``pod_balance``): it requests nothing,
so where it goes does not change how alike the nodes' requests fill.

    score_n = (1 - bal) x sum_r w_r f_r(u'_n) + bal x balanced(u'_n),   u' = with_requests(u, r, req)

(``product_score``, the one implementation the simulator, the engine and behaviour cloning score with.)

**Fragmentation share** (optional, ``frag``): the score blended with FGD's (``policy.fgd``: how little
placing the pod on the node grows the pool's fragmentation for its typical pods, GPUs included), each
scaled to [0, 1] over the pod's candidates since the two are in different units
(``blend_fragmentation``). The product's own terms read CPU, memory, disk IO and network and no GPU;
on dlrm-small FGD is the best baseline for what packing the GPU pods saves, and a blend beats both
(docs/td3.md, *A fragmentation term*). With a share of 0 the score is the product's, bit for bit.

    score_n = (1 - frag) x minmax(score_n) + frag x minmax(fgd_n)

**Sibling spread** (optional, ``spread``): the score lowered on the nodes that already run pods of the
pod's own workload (``policy.siblings``: its replicas peak together), after the fragmentation blend:

    score_n = (score_n + spread / (s_n + 1)) / (1 + spread)        s_n: the pod's siblings running on n

With a spread above 1 a node with no sibling outranks every node with one; 0 (the default) leaves the
score as it is, bit for bit.

**As served** (the simulator's ``served_score_levels``): a front door answers a scheduler whole numbers,
0-100 from ScoreNodes, 0-10 from the extender (``served_scores``), and kube-scheduler breaks their ties at
random; with the setting at 100 or 10 the simulator scores this policy so too.

Spec: ``static-weights:w=0.4/0.3/0.2/0.1:tau=0.5[:ceiling=0.75][:req=0.5][:bal=0.5][:frag=0.25][:spread=3]``.
Defaults: equal weights, tau = 0 (the reference design's idle-weighted score), no ceiling, requests share 0
(usage only), balance share 0 (no balance term), fragmentation share 0 (no FGD term), spread 0 (no
sibling term). The older form
``w=0.4,0.3,0.2,0.1;tau=0.5`` is still read, but its ``;`` ends a shell command unless quoted (see
``parse_args``).
"""

from __future__ import annotations

import math

import numpy as np

from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.features import balanced, closeness, requested_utilisation, utilisation, with_requests
from td3sched.policy.siblings import Siblings, spread_siblings, validate_spread
from td3sched.simulator.cluster import Cluster
from td3sched.workload.pods import BEST_EFFORT

SIMPLEX_TOLERANCE = 1e-6


def validate_weights(weights, tau: float) -> tuple[np.ndarray, float]:
    """Weights on the simplex (each in [0, 1], sum 1) and tau in [0, 1], or a ValueError naming them."""
    w = np.asarray(weights, dtype=float)
    if w.shape != (4,) or not np.all(np.isfinite(w)) or np.any(w < 0) or abs(w.sum() - 1) > SIMPLEX_TOLERANCE:
        raise ValueError(f"weights {np.asarray(weights).tolist()}: expected 4 non-negative numbers "
                         "[w_cpu, w_mem, w_io, w_net] summing to 1")
    if not (np.isfinite(tau) and 0 <= tau <= 1):
        raise ValueError(f"tau={tau!r}: expected a target utilisation in [0, 1]")
    return w, float(tau)


def weighted_closeness(u: np.ndarray, weights: np.ndarray, tau: float) -> np.ndarray:
    """The score of nodes of utilisation ``u`` [k, 4]: sum_r w_r * closeness(u_r, tau), in [0, 1]."""
    return closeness(u, tau) @ weights


def rounded_scores(scores: np.ndarray, levels: int) -> np.ndarray:
    """Scores in [0, 1] as the whole numbers 0..``levels`` a front door answers a scheduler (100 for
    ScoreNodes, kube-scheduler's MaxNodeScore; 10 for the extender, MaxExtenderPriority), rounded half
    to even; as floats."""
    return np.rint(levels * np.asarray(scores, dtype=np.float64))


BEST_ALONE_LEVELS = frozenset({10})
"""The levels whose front door answers the best nodes alone at the top (``served_scores``): the extender's
0-10, where rounding would tie the best node with every node within a tenth of its score."""


def served_scores(scores: np.ndarray, levels: int, eligible: np.ndarray | None = None) -> np.ndarray:
    """Scores in [0, 1] as a front door answers them: ``rounded_scores``, and at ``BEST_ALONE_LEVELS`` the
    nodes of the best score (among the ``eligible`` ones, default all) alone at the top level: any other
    node that rounds to it is answered a level below, and a best score that rounds to 0 is answered 1.
    kube-scheduler then picks among the nodes tied exactly, as it would among exact scores; as floats."""
    q = rounded_scores(scores, levels)
    if levels in BEST_ALONE_LEVELS and len(q):
        s = np.asarray(scores, dtype=np.float64)
        if eligible is not None:
            s = np.where(eligible, s, -np.inf)
        best = s == s.max()
        if np.isfinite(s.max()):
            top = max(q[best].max(), 1.0)
            np.minimum(q, top - 1.0, out=q)
            q[best] = top
    return q


def pod_balance(balance: float, qos: int) -> float:
    """The balance share a pod of QoS class ``qos`` is scored with: 0 for a BestEffort pod (as
    kube-scheduler's BalancedAllocation skips one), ``balance`` otherwise."""
    return 0.0 if qos == BEST_EFFORT else balance


def product_score(u: np.ndarray, r: np.ndarray | None, weights: np.ndarray, tau: float, requests: float = 0.0,
                  balance: float = 0.0) -> np.ndarray:
    """The product's score [k] of nodes of utilisation ``u`` [k, 4] and requested utilisation ``r`` [k, 2]
    (pod included; None when ``requests`` is 0): ``u' = with_requests(u, r, requests)``, then
    ``(1 - balance) x weighted_closeness(u', weights, tau) + balance x balanced(u')``. With both shares 0
    it is ``weighted_closeness(u, weights, tau)`` itself, bit for bit."""
    if requests:
        u = with_requests(u, r, requests)
    s = weighted_closeness(u, weights, tau)
    if balance:
        s = (1.0 - balance) * s + balance * balanced(u)
    return s


def minmax(scores: np.ndarray) -> np.ndarray:
    """``scores`` scaled to [0, 1] over one pod's candidates (all 0 when they are equal)."""
    scores = np.asarray(scores, dtype=np.float64)
    if not len(scores):
        return scores
    low = scores.min()
    span = scores.max() - low
    return (scores - low) / span if span > 0 else np.zeros_like(scores)


def blend_fragmentation(scores: np.ndarray, gradient: np.ndarray, share: float) -> np.ndarray:
    """``(1 - share) x minmax(scores) + share x minmax(gradient)``: the product's score of one pod's
    candidates blended with FGD's (``gradient``, higher: fragmentation grows less). Scaling keeps each
    one's order and ties, so a share of 1 ranks as FGD does; a share of 0 returns ``scores`` unscaled."""
    if share == 0:
        return scores
    return (1.0 - share) * minmax(scores) + share * minmax(gradient)


ARG_SEPARATOR = ":"
"""Between a spec's ``key=value`` arguments: ``name:k=v:k=v``. Like ``/`` between the items of a list
value, it is no shell metacharacter and no ``--policies`` separator (``,``), so a spec is typed
unquoted and pasted as printed."""
LIST_SEPARATOR = "/"
OLD_SEPARATORS = (";", ",")
"""Read for compatibility: ``k=v;k=v`` and ``w=a,b,c,d``."""


def parse_args(args: str) -> dict[str, str]:
    """``k=v:k=v`` (or the older ``k=v;k=v``) -> dict; a ValueError names a malformed part."""
    out = {}
    for part in filter(None, (p.strip() for p in args.replace(OLD_SEPARATORS[0], ARG_SEPARATOR).split(ARG_SEPARATOR))):
        if "=" not in part:
            raise ValueError(f"policy argument {part!r}: expected key=value")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def parse_list(value: str) -> list[str]:
    """``a/b/c`` (or the older ``a,b,c``) -> items."""
    return value.replace(OLD_SEPARATORS[1], LIST_SEPARATOR).split(LIST_SEPARATOR)


MAX_CEILING = 1.5
"""The highest ceiling: CPU utilisation with the pod at one and a half times the node's allocatable.
A ceiling counts the pod's request on top of the node's observed usage (and the assign cache), so a
ceiling of 1 still holds back pods that fit by requests wherever usage runs above the requests;
at 1.5 practically nothing is held back."""


def validate_ceiling(ceiling) -> float | None:
    """None (no hold-back), or a CPU utilisation in (0, ``MAX_CEILING``], or a ValueError naming it."""
    if ceiling is None:
        return None
    c = float(ceiling)
    if not (math.isfinite(c) and 0 < c <= MAX_CEILING):
        raise ValueError(f"ceiling={ceiling!r}: expected a CPU utilisation in (0, {MAX_CEILING:g}]")
    return c


def within_ceiling(u: np.ndarray, ceiling: float) -> np.ndarray:
    """[k] bool: the nodes of utilisation ``u`` [k, 4] (pod included) whose CPU stays within the
    hold-back ``ceiling``. The one rule behind ``static-weights``' ceiling, the TD3 policy's learned
    one and the decision engine's."""
    return u[:, 0] <= ceiling


def _share(value, key: str, expected: str) -> float:
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = math.nan
    if isinstance(value, bool) or not (math.isfinite(share) and 0 <= share <= 1):
        raise ValueError(f"{key}={value!r}: expected {expected}")
    return share


def validate_requests(share) -> float:
    """A requests share in [0, 1] (``features.with_requests``) as a float, or a ValueError naming it."""
    return _share(share, "req", "a requests share in [0, 1] (0: usage only, 1: requests only)")


def validate_balance(share) -> float:
    """A balance share in [0, 1] (``product_score``) as a float, or a ValueError naming it."""
    return _share(share, "bal", "a balance share in [0, 1] (0: no balance term, 1: balance only)")


def validate_fragmentation(share) -> float:
    """A fragmentation share in [0, 1] (``blend_fragmentation``) as a float, or a ValueError naming it."""
    return _share(share, "frag", "a fragmentation share in [0, 1] (0: no FGD term, 1: FGD's order only)")


def static_weights_spec(weights, tau: float, ceiling: float | None = None, requests: float = 0.0,
                        balance: float = 0.0, fragmentation: float = 0.0, spread: float = 0.0) -> str:
    """The canonical spec, safe to paste into a shell unquoted: ``static-weights:w=a/b/c/d:tau=t``
    (``:ceiling=c`` when there is one, ``:req=r``, ``:bal=b``, ``:frag=f`` and ``:spread=s`` when those
    are not 0). Twelve significant digits: the weights read back still sum to 1 within ``SIMPLEX_TOLERANCE``."""
    spec = (f"static-weights{ARG_SEPARATOR}w={LIST_SEPARATOR.join(f'{x:.12g}' for x in weights)}"
            f"{ARG_SEPARATOR}tau={tau:.12g}")
    if ceiling is not None:
        spec += f"{ARG_SEPARATOR}ceiling={ceiling:.12g}"
    if requests != 0:
        spec += f"{ARG_SEPARATOR}req={requests:.12g}"
    if balance != 0:
        spec += f"{ARG_SEPARATOR}bal={balance:.12g}"
    if fragmentation != 0:
        spec += f"{ARG_SEPARATOR}frag={fragmentation:.12g}"
    return spec if spread == 0 else f"{spec}{ARG_SEPARATOR}spread={spread:.12g}"


class StaticWeights(Policy):
    name = "static-weights"

    def __init__(self, weights=(0.25, 0.25, 0.25, 0.25), tau: float = 0.0, ceiling: float | None = None,
                 requests: float = 0.0, balance: float = 0.0, fragmentation: float = 0.0, spread: float = 0.0):
        self.weights, self.tau = validate_weights(weights, tau)
        self.ceiling = validate_ceiling(ceiling)
        self.requests = validate_requests(requests)
        self.balance = validate_balance(balance)
        self.fragmentation = validate_fragmentation(fragmentation)
        self.spread = validate_spread(spread)
        self.siblings = Siblings()
        """The running pods of each workload per node, for the sibling spread (kept only with one)."""
        self.fgd = None
        """FGD's score, for the fragmentation share (None without one: ``score_fragmentation``)."""
        if self.fragmentation:
            self.score_fragmentation()
        self.cache: AssignCache | None = None
        self.levels = 0
        """The whole-number scale the scores reach the scheduler on (``PolicyContext.score_levels``; 0: unrounded)."""
        self._held: tuple | None = None
        """(pod, nodes kept, their utilisation) of the cycle the ceiling just filtered, for Score."""

    def score_fragmentation(self) -> None:
        """Keep FGD's score beside this one, for a fragmentation share (attached with the policy)."""
        from td3sched.policy.fgd import FGD  # fgd reads this module's spec syntax (policy.spec)

        self.fgd = FGD()

    @classmethod
    def from_spec(cls, args: str) -> "StaticWeights":
        kw = parse_args(args)
        unknown = set(kw) - {"w", "tau", "ceiling", "req", "bal", "frag", "spread"}
        if unknown:
            raise ValueError(f"static-weights: unknown argument(s) {sorted(unknown)}: expected w, tau, ceiling, req, "
                             "bal, frag and spread")
        try:
            weights = [float(x) for x in parse_list(kw["w"])] if "w" in kw else (0.25,) * 4
            tau = float(kw.get("tau", 0.0))
            ceiling = float(kw["ceiling"]) if "ceiling" in kw else None
            requests = float(kw.get("req", 0.0))
            balance = float(kw.get("bal", 0.0))
            fragmentation = float(kw.get("frag", 0.0))
            spread = float(kw.get("spread", 0.0))
        except ValueError:
            raise ValueError(f"static-weights:{args}: expected w=a/b/c/d:tau=x:ceiling=c:req=r:bal=b:frag=f:spread=s "
                             "with numbers") from None
        return cls(weights, tau, ceiling, requests, balance, fragmentation, spread)

    @property
    def spec(self) -> str:
        return static_weights_spec(self.weights, self.tau, self.ceiling, self.requests, self.balance,
                                   self.fragmentation, self.spread)

    def attach(self, context) -> None:
        super().attach(context)
        self.cache = AssignCache(context.cluster.size, horizon_s=context.window_s + context.scrape_s)
        self.levels = context.score_levels
        self.siblings = Siblings()
        if self.fgd is not None:
            self.fgd.attach(context)

    def utilisation(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """[k, 4] utilisation of the feasible ``nodes`` with the pod on them, observed usage corrected
        by the assign cache (``features.utilisation``)."""
        recent = self.cache.usage_since(cluster.last_scrape_s) if self.cache else None
        return utilisation(pod, nodes, cluster, recent)

    def score_nodes(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster, u: np.ndarray) -> np.ndarray:
        """Scores of ``nodes`` of utilisation ``u`` (``utilisation``): ``product_score`` with this policy's
        weights, tau and shares (the balance share as ``pod_balance`` gives it for the pod), blended with
        FGD's by the fragmentation share, lowered where the pod's siblings run by the spread, rounded as
        served when the run says so (``levels``)."""
        r = requested_utilisation(pod, nodes, cluster) if self.requests else None
        s = product_score(u, r, self.weights, self.tau, self.requests, pod_balance(self.balance, pod.qos))
        if self.fgd is not None and self.fragmentation:
            s = blend_fragmentation(s, self.fgd.score(pod, nodes, cluster), self.fragmentation)
        if self.spread:
            s = spread_siblings(s, self.siblings.counts(pod.app, nodes), self.spread)
        return served_scores(s, self.levels) if self.levels else s

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray | None:
        """The hold-back ceiling: keep the nodes whose CPU utilisation with the pod stays within it."""
        self._held = None
        if self.ceiling is None:
            return None
        return self.hold_back(pod, nodes, self.utilisation(pod, nodes, cluster))

    def hold_back(self, pod: PodRequest, nodes: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The ceiling's mask of ``nodes`` (utilisation ``u``, pod included); the kept nodes' ``u`` is
        remembered for this cycle's Score."""
        keep = within_ceiling(u, self.ceiling)
        self._held = (pod, nodes[keep], u[keep])
        return keep

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        held, self._held = self._held, None
        if held is not None and held[0] is pod and np.array_equal(held[1], nodes):
            return self.score_nodes(pod, nodes, cluster, held[2])  # what Filter computed, this cycle
        return self.score_nodes(pod, nodes, cluster, self.utilisation(pod, nodes, cluster))

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        if self.cache is not None:
            self.cache.add(node, pod.time_s, pod.nonzero_cpu_mem)
        if self.spread:
            self.siblings.add(pod.app, node)

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        if self.spread:
            self.siblings.remove(pod.app, node)

    @property
    def counts_releases(self) -> bool:
        """Told of releases only with a sibling spread, which counts each node's running pods."""
        return bool(self.spread)
