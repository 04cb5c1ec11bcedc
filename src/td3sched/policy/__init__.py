"""Scoring policies. Each is one small module with its arguments, defaults and formula.

``make_policy(spec)`` builds one from a spec: a name, optionally followed by ``:`` and arguments
(``static-weights:w=0.4/0.3/0.2/0.1:tau=0.5``; the older ``w=0.4,0.3,0.2,0.1;tau=0.5``
is still read). ``POLICIES`` maps the competitors' names to classes
(``--policies all`` runs these); ``REFERENCE_POLICIES`` maps the hindsight bounds (``oracle``), which
read the run's ground truth, compete with nothing and run only when named.
"""

from td3sched.policy.base import Policy, PolicyContext, PodRequest
from td3sched.policy.best_fit import BestFit
from td3sched.policy.dotprod import DotProduct
from td3sched.policy.fgd import FGD
from td3sched.policy.gpu_clustering import GpuClustering
from td3sched.policy.gpu_packing import GpuPacking
from td3sched.policy.k8s_default import K8sDefault
from td3sched.policy.k8s_default_spread import K8sDefaultSpread
from td3sched.policy.k8s_most_allocated import K8sMostAllocated
from td3sched.policy.koord_load_aware import KoordLoadAware
from td3sched.policy.load_variation_risk_balancing import LoadVariationRiskBalancing
from td3sched.policy.oracle import Oracle
from td3sched.policy.random_choice import RandomChoice
from td3sched.policy.static_weights import StaticWeights
from td3sched.policy.target_load_packing import TargetLoadPacking
from td3sched.rl.policy import TD3Policy  # torch is imported only when a model is loaded

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    K8sDefault, K8sDefaultSpread, StaticWeights, RandomChoice, FGD,
    K8sMostAllocated, TargetLoadPacking, LoadVariationRiskBalancing, KoordLoadAware, TD3Policy,
    DotProduct, GpuClustering, GpuPacking, BestFit,
)}
REFERENCE_POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (Oracle,)}
"""Hindsight bounds: not competitors, never in ``all``."""


def make_policy(spec: str) -> Policy:
    """The policy a spec names; a ValueError names the bad part and the valid choices."""
    name, _, args = spec.partition(":")
    try:
        cls = POLICIES[name] if name in POLICIES else REFERENCE_POLICIES[name]
    except KeyError:
        known = sorted([*POLICIES, *REFERENCE_POLICIES])
        raise ValueError(f"unknown policy {name!r}: expected one of {', '.join(known)}") from None
    if args:
        from_spec = getattr(cls, "from_spec", None)
        if from_spec is None:
            raise ValueError(f"policy {name!r} takes no arguments, got {args!r}")
        return from_spec(args)
    return cls()


__all__ = ["POLICIES", "REFERENCE_POLICIES", "Policy", "PolicyContext", "PodRequest", "make_policy"]
