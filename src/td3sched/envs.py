"""The Gymnasium registration of td3sched's environment, light enough to run on ``import gymnasium``.

pyproject declares ``register_envs`` under the ``gymnasium.envs`` entry point: Gymnasium 0.29 calls it
when it is imported, so ``gym.make("td3sched/ClusterScheduling-v0")`` needs no import of td3sched.
Gymnasium 1.0 dropped entry-point plugins; there, name the module in the id, which imports it and so
registers the env: ``gym.make("td3sched.envs:td3sched/ClusterScheduling-v0")`` (or import
``td3sched.envs`` first). The env itself is ``td3sched.rl.env.ClusterSchedulingEnv``.
"""

from __future__ import annotations

ENV_ID = "td3sched/ClusterScheduling-v0"
ENTRY_POINT = "td3sched.rl.env:ClusterSchedulingEnv"


def register_envs() -> None:
    """Register ENV_ID with Gymnasium, once."""
    import gymnasium as gym

    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=ENTRY_POINT)


register_envs()
