"""Model folders: save and reload give the same actions, the td3 policy runs in the harness as in the
env, and a corrupt or mismatched model is refused with the file and what was expected."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from td3sched.policy import make_policy  # noqa: E402
from td3sched.rl.actions import action_to_weights  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv  # noqa: E402
from td3sched.rl.model import CARD_FILE, MODEL_FILE, ModelError, load_model  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.policy import TD3Policy  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402
from td3sched.shipped import MODELS_ENV, SHIPPED_MODELS  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

CONFIG = TD3Config(hidden=(32, 32), batch_size=16, buffer_size=1000, learning_starts=0)


def _saved(tmp_path, config=CONFIG, mode="full", name="m"):
    agent = TD3(OBSERVATION_SIZE, config, seed=7, action_mode=mode)
    rng = np.random.default_rng(1)
    agent.normalizer.update(rng.normal(size=(100, OBSERVATION_SIZE)))
    for step in range(1, 5):
        agent.buffer.add(rng.normal(size=OBSERVATION_SIZE), rng.uniform(-5, 5, agent.action_size), -0.1,
                         rng.normal(size=OBSERVATION_SIZE), False)
        agent.train_step(step)
    folder = tmp_path / name
    agent.save(folder, {"scenario": "tiny", "span": "train", "training": {"steps": 4}})
    return agent, folder


def _observations(n=64):
    return np.random.default_rng(2).normal(size=(n, OBSERVATION_SIZE)).astype(np.float32)


def test_reload_gives_identical_actions_and_a_complete_card(tmp_path):
    agent, folder = _saved(tmp_path)
    model = load_model(folder)
    obs = _observations()
    np.testing.assert_array_equal(model.act(obs), agent.predict(obs))
    np.testing.assert_array_equal(TD3.load(folder).predict(obs), agent.predict(obs))
    card = json.loads((folder / CARD_FILE).read_text())
    assert card["scenario"] == "tiny" and card["seed"] == 7 and card["action_mode"] == "full"
    assert card["config"]["hidden"] == [32, 32] and len(card["observation"]["fields"]) == OBSERVATION_SIZE
    assert card["normalizer"]["count"] == 100 and card["code_version"]
    assert not list(folder.glob(".*tmp"))  # atomic writes leave no temporary file


def test_td3_policy_in_the_harness_places_as_the_env_does(tmp_path):
    """The env is driven by the policy's own actor (ONNX Runtime, as the harness serves it)."""
    _, folder = _saved(tmp_path)
    policy = make_policy(f"td3:{folder}")
    assert isinstance(policy, TD3Policy) and policy.spec == f"td3:{folder}"
    env = ClusterSchedulingEnv("tiny", "test", 3.0)
    obs, _ = env.reset(seed=3)
    while True:
        obs, _, _, truncated, info = env.step_logits(policy.model.act(obs))
        if truncated:
            break
    ep = env.episode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no OOM count in the policy context yet (none happen on tiny)
        record = Simulation(env.world, policy, ep.sim_seed, ep.start_s, ep.end_s).run()
    assert record["metrics"] == info["record"]["metrics"]
    env.close()


def test_a_retrained_model_in_the_same_folder_is_another_policy(tmp_path):
    """Resumed grids compare fingerprints: a stale run of the old model is not reused."""
    _, folder = _saved(tmp_path)
    before = make_policy(f"td3:{folder}").fingerprint
    assert before.startswith("model_content_sha256=")
    agent = TD3(OBSERVATION_SIZE, CONFIG, seed=8)
    agent.save(folder, {"scenario": "tiny", "span": "train", "training": {"steps": 0}})
    after = make_policy(f"td3:{folder}").fingerprint
    assert after != before and make_policy("k8s-default").fingerprint == ""


def test_an_edited_normaliser_is_another_policy(tmp_path):
    """The fingerprint covers the card (normaliser, config) as well as the state dict."""
    _, folder = _saved(tmp_path)
    before = make_policy(f"td3:{folder}").fingerprint
    card = json.loads((folder / CARD_FILE).read_text())
    card["normalizer"]["count"] += 1
    (folder / CARD_FILE).write_text(json.dumps(card))
    assert make_policy(f"td3:{folder}").fingerprint != before
    (folder / "checkpoint.pt").write_bytes(b"training state, not the model")  # other files do not count
    after = make_policy(f"td3:{folder}").fingerprint
    (folder / "checkpoint.pt").write_bytes(b"a later checkpoint")
    assert make_policy(f"td3:{folder}").fingerprint == after


def test_inspect_model_given_a_file_asks_for_the_folder(tmp_path):
    from typer.testing import CliRunner

    from td3sched.cli import app

    _, folder = _saved(tmp_path)
    result = CliRunner().invoke(app, ["inspect-model", str(folder / MODEL_FILE)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "is a file: expected the model's folder" in text and "not found" not in text


def test_td3_needs_a_model_folder(tmp_path):
    with pytest.raises(ValueError, match="td3 needs a trained model folder"):
        make_policy("td3")
    with pytest.raises(ModelError, match="not found"):
        make_policy(f"td3:{tmp_path / 'nothing'}")


def _rewrite_card(folder, **changes):
    card = json.loads((folder / CARD_FILE).read_text())
    card.update(changes)
    (folder / CARD_FILE).write_text(json.dumps(card))


def _replace_state(folder, state):
    import hashlib
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    (folder / MODEL_FILE).write_bytes(buf.getvalue())
    _rewrite_card(folder, model_sha256=hashlib.sha256(buf.getvalue()).hexdigest())


def test_a_corrupt_model_file_is_refused(tmp_path):
    _, folder = _saved(tmp_path)
    data = (folder / MODEL_FILE).read_bytes()
    (folder / MODEL_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=rf"{MODEL_FILE}: sha256 .* differs from the card's"):
        load_model(folder)
    # the same truncated bytes with a card that matches them: torch cannot read them
    import hashlib
    _rewrite_card(folder, model_sha256=hashlib.sha256(data[: len(data) // 2]).hexdigest())
    with pytest.raises(ModelError, match=rf"{MODEL_FILE}: not a readable torch state dict"):
        load_model(folder)


def test_a_pickled_object_is_not_loaded(tmp_path):
    _, folder = _saved(tmp_path)
    _replace_state(folder, {"actor.net.0.weight": np.zeros(3)})  # a non-tensor object: weights_only refuses
    with pytest.raises(ModelError, match="not a readable torch state dict"):
        load_model(folder)


def test_wrong_shapes_and_keys_are_refused(tmp_path):
    _, folder = _saved(tmp_path)
    state = torch.load(folder / MODEL_FILE, weights_only=True)
    bad = dict(state)
    bad["actor.net.0.weight"] = torch.zeros(32, 10)
    _replace_state(folder, bad)
    with pytest.raises(ModelError, match=r"actor\.net\.0\.weight \(32, 10\) \(expected \(32, 35\)\)"):
        load_model(folder)
    missing = {k: v for k, v in state.items() if not k.startswith("critic.q_networks.1")}
    _replace_state(folder, missing)
    with pytest.raises(ModelError, match=r"missing \['critic\.q_networks\.1"):
        load_model(folder)


def test_a_card_that_disagrees_with_the_model_is_refused(tmp_path):
    _, folder = _saved(tmp_path)
    card = json.loads((folder / CARD_FILE).read_text())
    _rewrite_card(folder, config={**card["config"], "algo": "ddpg"})  # one critic expected, the file has two
    with pytest.raises(ModelError, match="unexpected \\['critic.q_networks.1"):
        load_model(folder)
    _rewrite_card(folder, config={**card["config"], "hidden": [64, 64]})
    with pytest.raises(ModelError, match="tensor shapes do not match the card's config"):
        load_model(folder)
    _rewrite_card(folder, config={**card["config"], "gamma": 2.0})
    with pytest.raises(ModelError, match=rf"{CARD_FILE}: TD3Config.gamma=2.0"):
        load_model(folder)
    _rewrite_card(folder, config=card["config"], observation={"fields": ["x"] * OBSERVATION_SIZE})
    with pytest.raises(ModelError, match="observation layout"):
        load_model(folder)
    _rewrite_card(folder, observation=card["observation"], normalizer={**card["normalizer"], "mean": [0.0]})
    with pytest.raises(ModelError, match="normaliser mean: 1 values, expected 35"):
        load_model(folder)
    (folder / CARD_FILE).write_text("{not json")
    with pytest.raises(ModelError, match=f"{CARD_FILE}: not a JSON model card"):
        load_model(folder)
    (folder / CARD_FILE).write_text(json.dumps({k: v for k, v in card.items() if k != "code_version"}))
    with pytest.raises(ModelError, match=r"missing keys \['code_version'\]"):
        load_model(folder)


SHIPPED = sorted(SHIPPED_MODELS.glob("td3-*"))


@pytest.mark.parametrize("folder", SHIPPED, ids=[f.name for f in SHIPPED])
def test_shipped_models_load_and_their_cards_match_their_names(folder):
    """models/td3-<scenario>[-seed|-held]: trained on <scenario>'s train span, tau fixed at 0 for -seed,
    an action held for a period (the card's action_hold_s) for -held."""
    model = load_model(folder)
    card = model.card
    scenario, _, suffix = folder.name.removeprefix("td3-").partition("-")
    held = suffix == "held"
    assert card["scenario"] == scenario and card["span"] == "train" and card["config"]["algo"] == "td3"
    assert model.action_mode == ("full" if held or not suffix else suffix) and card["training"]["steps"] > 0
    assert (model.action_hold_s > 0) == held
    weights, tau = action_to_weights(model.act(_observations(1))[0], model.action_mode)
    assert abs(weights.sum() - 1.0) < 1e-9 and (tau == 0.0) == (model.action_mode == "seed")


def test_the_demo_model_is_shipped():
    """make demo runs td3:models/td3-dlrm."""
    assert "td3-dlrm" in [f.name for f in SHIPPED]


def test_a_shipped_model_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    """Outside a checkout, td3:td3-dlrm and td3:models/td3-dlrm name the model shipped in the package;
    a folder of that name in the user's models folder ($TD3SCHED_MODELS) comes first."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(MODELS_ENV, raising=False)
    for name in ("td3-dlrm", "models/td3-dlrm"):
        assert Path(load_model(name).folder) == SHIPPED_MODELS / "td3-dlrm"
    own = tmp_path / "mine"
    shutil.copytree(SHIPPED_MODELS / "td3-dlrm-seed", own / "td3-dlrm")
    monkeypatch.setenv(MODELS_ENV, str(own))
    assert Path(load_model("td3-dlrm").folder) == own / "td3-dlrm"
    with pytest.raises(ModelError, match="td3-openb-seed"):  # a name found nowhere lists the shipped ones
        load_model("td3-nothing")


def test_the_td3_policy_finds_a_shipped_model_by_name_from_any_folder(tmp_path, monkeypatch):
    """--policy td3:td3-dlrm (README, docs) from a folder without models/: the served actor, as load_model."""
    from td3sched.policy import make_policy

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(MODELS_ENV, raising=False)
    for name in ("td3-dlrm", "models/td3-dlrm"):
        assert Path(make_policy(f"td3:{name}").folder) == SHIPPED_MODELS / "td3-dlrm"


@pytest.mark.parametrize("mode", ["full", "seed", "ceiling"])
def test_inspect_model_reports_the_actions_taken_and_the_critics_spread(tmp_path, mode):
    from td3sched.rl.diagnose import inspect_model

    _, folder = _saved(tmp_path, mode=mode)
    model = load_model(folder)
    result = inspect_model(model, "tiny", "test", 2.0, seed=3, n_actions=8)
    env = ClusterSchedulingEnv("tiny", "test", 2.0, mode)
    obs, _ = env.reset(seed=3)
    taken, reward, observed = [], 0.0, []
    while True:
        observed.append(obs)
        taken.append(action_to_weights(model.act(obs), mode))
        obs, r, _, truncated, _ = env.step_logits(model.act(obs))
        reward += r
        if truncated:
            break
    env.close()
    assert result.decisions == len(taken) and result.reward == pytest.approx(reward)
    np.testing.assert_allclose(result.weights_mean, np.mean([w for w, _ in taken], axis=0))
    assert result.tau_mean == pytest.approx(np.mean([t for _, t in taken])) and (result.tau_mean == 0) == (mode == "seed")
    assert 0 <= result.saturated <= 1 and result.q_state_std >= 0 and result.q_action_std > 0
    if mode == "ceiling":
        from td3sched.rl.actions import decode

        ceilings = [decode(model.act(o), mode).ceiling for o in observed]
        assert result.ceiling_mean == pytest.approx(np.mean(ceilings)) and 0.5 < result.ceiling_mean < 1
    else:
        assert result.ceiling_mean is None
    with pytest.raises(ValueError, match="n_actions=1"):
        inspect_model(model, "tiny", "test", 2.0, n_actions=1)


def test_inspect_model_command(tmp_path):
    from typer.testing import CliRunner

    from td3sched.cli import app

    _, folder = _saved(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["inspect-model", str(folder), "--episode-hours", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["decisions"] > 0
    table = runner.invoke(app, ["inspect-model", str(folder), "--episode-hours", "2"])
    assert table.exit_code == 0 and "weights [cpu, mem, io, net] mean" in table.output
    (folder / MODEL_FILE).write_bytes(b"not a model")
    broken = runner.invoke(app, ["inspect-model", str(folder)])
    assert broken.exit_code == 2 and "error" in broken.output
