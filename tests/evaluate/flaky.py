"""A runner for the harness tests: like run_simulation, but seed 2 raises (imported by worker processes)."""

from __future__ import annotations


def run(scenario, policy, seed, span, overrides):
    if seed == 2:
        raise RuntimeError(f"injected failure for {policy} seed {seed}")
    from td3sched.run import run_simulation

    return run_simulation(scenario, policy, seed, span, overrides)
