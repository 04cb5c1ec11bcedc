"""The learning lifecycle: scheduling history, behaviour cloning, TD3+BC offline to online, fine-tuning,
the gate, the model registry with promotion and rollback (docs/lifecycle.md).

It sits above the layers it uses (``rl/``, ``simulator/``, ``evaluate/``, ``run.py``); nothing below
imports it.
"""
