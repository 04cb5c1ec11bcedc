"""The served actor: ``td3sched export-onnx`` writes a graph that ONNX Runtime runs within float32
rounding (``PARITY_TOLERANCE``) of the exact actor, as torch does, on observations recorded from
real decisions; a graph of another model is refused; the td3
policy and the engine serve it without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.rl.actions import action_size  # noqa: E402
from td3sched.rl.card import ONNX_FILE, ModelError  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.rl.onnx_export import PARITY_TOLERANCE, exact_preactivations, export_onnx  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.parent for p in (REPO / "models").glob("*/model.json"))


@pytest.fixture(scope="module")
def recorded_observations() -> np.ndarray:
    """Observations of every decision of a 3-hour tiny window, driven by the shipped td3-dlrm."""
    actor = load_actor(REPO / "models" / "td3-dlrm")
    env = ClusterSchedulingEnv("tiny", "test", 3.0)
    obs, _ = env.reset(seed=5)
    seen = [obs]
    while True:
        obs, _, _, truncated, _ = env.step(actor.act(obs))
        seen.append(obs)
        if truncated:
            break
    env.close()
    return np.array(seen, dtype=np.float32)


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: p.name)
def test_shipped_graphs_match_torch_on_recorded_observations(folder, recorded_observations):
    assert len(recorded_observations) > 50
    assert (folder / ONNX_FILE).is_file(), f"{folder.name}: shipped without {ONNX_FILE}"
    model, actor = load_model(folder), load_actor(folder)
    exact = exact_preactivations(model, recorded_observations)
    with torch.no_grad():
        trained = model.actor(torch.from_numpy(model.normalizer.normalize(recorded_observations))).numpy()
    batch = actor.act(recorded_observations)
    assert batch.shape == exact.shape == (len(recorded_observations), action_size(model.action_mode))
    # both float32 evaluations, the served one and the trained one, are the exact actor up to rounding
    assert np.abs(batch - exact).max() <= PARITY_TOLERANCE
    assert np.abs(trained - exact).max() <= PARITY_TOLERANCE
    assert np.abs(batch - exact).max() > 0, "the served graph is float32: an exact match means the reference is not exact"
    # one decision at a time gives ONNX Runtime's batch answers exactly
    one_by_one = np.array([actor.act(o) for o in recorded_observations])
    np.testing.assert_array_equal(one_by_one, batch)


def _train_tiny_model(folder: Path, seed: int, mode: str = "full", **card) -> None:
    config = TD3Config(hidden=(16, 16), batch_size=8, buffer_size=100, learning_starts=0)
    agent = TD3(OBSERVATION_SIZE, config, seed=seed, action_mode=mode)
    agent.normalizer.update(np.random.default_rng(seed).normal(size=(50, OBSERVATION_SIZE)))
    agent.save(folder, {"scenario": "tiny", "span": "train", "training": {"steps": 0}, **card})


def test_export_onnx_command_writes_the_graph_the_policy_serves(tmp_path):
    from typer.testing import CliRunner

    from td3sched.cli import app
    from td3sched.policy import make_policy

    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3, mode="seed")
    result = CliRunner().invoke(app, ["export-onnx", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / ONNX_FILE).is_file()
    policy = make_policy(f"td3:{folder}")
    assert policy.model.action_mode == "seed" and policy.model.action_size == action_size("seed")
    obs = np.random.default_rng(0).normal(size=(8, OBSERVATION_SIZE)).astype(np.float32)
    np.testing.assert_allclose(policy.model.act(obs), load_model(folder).act(obs), atol=PARITY_TOLERANCE)


def test_a_graph_exported_from_another_model_is_refused(tmp_path):
    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3)
    export_onnx(folder)
    _train_tiny_model(folder, seed=4)  # retrained in place: model.onnx is now stale
    with pytest.raises(ModelError, match="exported from model .* run td3sched export-onnx"):
        load_actor(folder)


def test_a_folder_without_a_graph_is_exported_in_memory(tmp_path):
    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3)
    actor = load_actor(folder)
    assert not (folder / ONNX_FILE).exists()
    assert actor.version == load_model(folder).content_sha256[:12]


def test_a_garbage_graph_is_refused_by_name(tmp_path):
    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3)
    (folder / ONNX_FILE).write_bytes(b"not a graph")
    with pytest.raises(ModelError, match=f"{ONNX_FILE}: not a loadable ONNX graph"):
        load_actor(folder)


def test_the_td3_policy_serves_without_torch():
    """A process where importing torch fails still runs a td3 decision from a shipped model."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np\n"
        "from td3sched.policy import make_policy\n"
        f"p = make_policy('td3:{SHIPPED[0]}')\n"
        "a = p.model.act(np.zeros(35, dtype=np.float32))\n"
        "assert a.shape == (p.model.action_size,) and np.isfinite(a).all()\n"
        "assert 'onnxruntime' in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_shipped_models_act_as_before_the_action_designs():
    """tests/rl/fixtures/shipped_actions.json holds the shipped models' pre-activations (torch and ONNX
    Runtime) on 32 fixed observations, written by the code of commit 3c83d79, before the ceiling
    action, the action dimensions in the card and the normaliser's floors: today's code must give
    the same numbers for the cards written before them, up to float32 rounding (the fixture's
    ONNX Runtime and torch releases summed in another order than today's may)."""
    import json
    from pathlib import Path

    recorded = json.loads((Path(__file__).parent / "fixtures" / "shipped_actions.json").read_text())
    obs = np.array(recorded["observations"], dtype=np.float32)
    for name, expected in recorded["models"].items():
        model = load_model(name)
        assert model.normalizer.min_std is None and "action_dimensions" not in model.card
        with torch.no_grad():
            got = model.actor(torch.from_numpy(model.normalizer.normalize(obs))).numpy()
        np.testing.assert_allclose(got, expected["torch"], rtol=0, atol=PARITY_TOLERANCE, err_msg=name)
        np.testing.assert_allclose(load_actor(name).act(obs), expected["onnx"], rtol=0, atol=PARITY_TOLERANCE,
                                   err_msg=name)


def test_a_model_whose_card_declares_a_hold_acts_once_per_hold(tmp_path):
    """The card's action_hold_s is how the td3 policy acts: its run is the env's episode with that hold
    and the same actor, and another run than acting at every decision."""
    from td3sched.policy import make_policy
    from td3sched.simulator.engine import Simulation

    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3, action_hold_s=900)
    actor = load_actor(folder)
    assert actor.action_hold_s == 900.0 and load_model(folder).action_hold_s == 900.0
    policy = make_policy(f"td3:{folder}")
    assert policy.hold_s == 900.0
    runs = {}
    for hold in (900.0, 0.0):
        env = ClusterSchedulingEnv("tiny", "train", 2.0, "full", action_hold_s=hold)
        obs, _ = env.reset(seed=2)
        while True:
            obs, _, _, truncated, info = env.step_logits(actor.act(obs))
            if truncated:
                break
        runs[hold] = info["record"]["metrics"]
        ep, world = env.episode, env.world
        env.close()
    record = Simulation(world, policy, ep.sim_seed, ep.start_s, ep.end_s).run()
    assert record["metrics"] == runs[900.0]
    assert runs[0.0] != runs[900.0]


def test_a_card_with_a_bad_hold_is_refused_by_name(tmp_path):
    folder = tmp_path / "m"
    _train_tiny_model(folder, seed=3, action_hold_s=-3)
    with pytest.raises(ModelError, match="action hold -3: expected a finite number"):
        load_actor(folder)
