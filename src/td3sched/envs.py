"""The Gymnasium registration of td3sched's environment, light enough to run on ``import gymnasium``.

pyproject declares ``register_envs`` under the ``gymnasium.envs`` entry point: Gymnasium 0.29 calls it
while it is being imported, so ``gym.make("td3sched/ClusterScheduling-v0")`` needs no import of
td3sched. Gymnasium 1.0 dropped entry-point plugins and has no other hook: there the bare id raises
``NamespaceNotFound`` until this module is imported; name the module in the id, which imports it on
the way: ``gym.make("td3sched.envs:td3sched/ClusterScheduling-v0")`` (any Gymnasium from 0.29 on).
The env itself is ``td3sched.rl.env.ClusterSchedulingEnv``.
"""

from __future__ import annotations

ENV_ID = "td3sched/ClusterScheduling-v0"
ENTRY_POINT = "td3sched.rl.env:ClusterSchedulingEnv"


def register_envs() -> None:
    """Register ENV_ID with Gymnasium, once."""
    # the registration module, not ``gymnasium`` itself: Gymnasium 0.29 calls this from inside its own
    # ``import gymnasium``, when the package has no ``registry`` attribute yet
    from gymnasium.envs.registration import register, registry

    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point=ENTRY_POINT)


register_envs()
