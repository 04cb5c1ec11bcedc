"""Engines on hand-made node snapshots, with a shipped model served by ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("prometheus_client")

from td3sched.engine.decision import DecisionEngine, ModelSlot  # noqa: E402
from td3sched.engine.service import EngineService  # noqa: E402
from td3sched.engine.state import NodeSnapshot, ShadowState, Staleness  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "td3-dlrm"


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def snapshot(n: int = 8, cpu_util=None, age_s=None, now: float = 1_000_000.0, seed: int = 0) -> NodeSnapshot:
    """``n`` nodes of 16 cores, 64 GiB; CPU utilisation ``cpu_util`` (default: drawn), metrics ``age_s`` old."""
    rng = np.random.default_rng(seed)
    alloc = np.tile([16000.0, 65536.0, 500.0, 100.0], (n, 1))
    cap = np.tile([16000.0, 65536.0, 1000.0, 10000.0], (n, 1))
    util = rng.uniform(0.05, 0.8, size=(n, 4))
    if cpu_util is not None:
        util[:, 0] = cpu_util
    observed = util * cap
    age = np.zeros(n) if age_s is None else np.asarray(age_s, dtype=float)
    return NodeSnapshot(tuple(f"node-{i}" for i in range(n)), alloc, cap, observed, now - age, taken_at_s=now)


@pytest.fixture(scope="session")
def actor():
    return load_actor(MODEL)


def make_service(actor, snap=None, mode="fail-open", max_age_s=60.0, shadow=False, log=None):
    clock = Clock()
    state = ShadowState(clock, Staleness(max_age_s, mode))
    if snap is not None:
        state.publish(snap)
    engine = DecisionEngine(state, ModelSlot(actor), shadow=shadow)
    return EngineService(engine, log=log), clock


def pinned_model(folder, action_mode: str, bias: float, seed: int, outputs=(5,), **card):
    """A small TD3 model of ``action_mode`` whose ``outputs`` (default the sixth) are pinned at ``bias``
    before the tanh (whatever it observes; its other outputs as initialised), saved to ``folder`` with
    ``card``."""
    import torch

    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.td3 import TD3, TD3Config

    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16, 16), buffer_size=10, learning_starts=0), seed=seed,
                action_mode=action_mode)
    with torch.no_grad():
        last = agent.actor.net[-1]
        for i in outputs:
            last.weight[i].zero_()
            last.bias[i] = bias
    agent.save(folder, {"scenario": "tiny", "span": "train", **card})
    return folder
