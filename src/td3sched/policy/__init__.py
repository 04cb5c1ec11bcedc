"""Scoring policies. Each is one small module with its arguments, defaults and formula.

``make_policy(name)`` builds one by name; ``POLICIES`` lists the names.
"""

from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.k8s_default import K8sDefault

POLICIES = {K8sDefault.name: K8sDefault}


def make_policy(name: str) -> Policy:
    """The policy called ``name``; a ValueError names the valid choices."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}: expected one of {', '.join(sorted(POLICIES))}") from None
    return cls()


__all__ = ["POLICIES", "Policy", "PodRequest", "make_policy"]
