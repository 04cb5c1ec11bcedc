"""Fine-tuning: the serving model learns the newest window's choices (agreement rises), the candidate's
card names its parent, the window and the learning rate, and keeps the parent's critics; the CLI
path records history, clones it and fine-tunes into the registry; windows parse or are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.lifecycle.bc import static_model  # noqa: E402
from td3sched.lifecycle.finetune import finetune, newest_window, parse_window  # noqa: E402
from td3sched.lifecycle.history import Decisions, read_history  # noqa: E402
from td3sched.lifecycle.registry import Registry  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402

runner = CliRunner()
SPEC = "static-weights:w=0.5/0.3/0.1/0.1:tau=0.4"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    folder = tmp_path_factory.mktemp("history")
    result = runner.invoke(app, ["simulate", "--policy", SPEC, "--span", "train", "--no-progress",
                                 "--record-history", str(folder)])
    assert result.exit_code == 0 and "recorded " in result.output, result.output
    return folder


@pytest.mark.parametrize("text, seconds", [("7d", 604800), ("12h", 43200), ("30m", 1800), ("3600s", 3600),
                                           ("90", 90), ("1.5h", 5400)])
def test_windows_parse(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "-1h", "7w", "d"])
def test_bad_windows_are_refused_naming_the_value(text):
    with pytest.raises(ValueError, match=rf"--window {text!r}: expected a positive duration"):
        parse_window(text)


def test_the_newest_window_keeps_the_last_decisions(history):
    d = Decisions.from_table(read_history(history))
    w = newest_window(d, 3600.0)
    assert 0 < len(w) < len(d) and w.time_s.min() >= d.time_s.max() - 3600 and len(w) == np.sum(
        d.time_s >= d.time_s.max() - 3600)


def test_finetuning_learns_the_windows_choices_and_names_its_parent(history, tmp_path):
    torch.set_num_threads(1)
    static_model(tmp_path / "parent", [0.25] * 4, 0.6, {"scenario": "tiny", "sibling_spread": 3.0})  # tau 0.6
    parent = load_model(tmp_path / "parent")
    training = finetune(history, tmp_path / "parent", tmp_path / "candidate", window="7d", learning_rate=1e-3,
                        epochs=5)
    # measured: 0.187 before, 0.872 after (one 2-day train span, 5 epochs at 1e-3)
    assert training["initial_train"]["agreement"] < 0.3 and training["train"]["agreement"] > 0.8, training
    assert training["parent"] == parent.content_sha256[:12] and training["window_s"] == 604800
    card = json.loads((tmp_path / "candidate" / "model.json").read_text())
    assert card["training"]["kind"] == "finetune" and card["training"]["learning_rate"] == 1e-3
    assert card["training"]["parent_training"]["kind"] == "static" and card["scenario"] == "tiny"
    assert card["sibling_spread"] == 3.0  # the score's term, not the actor's: the child serves it too
    child = load_model(tmp_path / "candidate")
    for (k, a), b in zip(parent.critic.state_dict().items(), child.critic.state_dict().values()):
        assert torch.equal(a, b), k  # the critics are the parent's
    assert child.normalizer.to_json() == parent.normalizer.to_json()


def test_the_cli_clones_then_finetunes_the_serving_model_into_the_registry(history, tmp_path):
    reg = tmp_path / "registry"
    result = runner.invoke(app, ["bc", "--history", str(history), "--out", str(tmp_path / "bc"), "--epochs", "1"])
    assert result.exit_code == 0 and "top-1 agreement with the history: " in result.output, result.output
    result = runner.invoke(app, ["promote", str(tmp_path / "bc"), "--force", "--registry", str(reg)])
    assert result.exit_code == 0, result.output
    serving = Registry(reg).serving()
    result = runner.invoke(app, ["finetune", "--history", str(history), "--window", "6h", "--lr", "1e-5", "--out",
                                 str(tmp_path / "candidate"), "--registry", str(reg), "--epochs", "1"])
    assert result.exit_code == 0 and f"(parent {serving})" in " ".join(result.output.split()), result.output
    versions = Registry(reg).list()
    assert len(versions) == 2 and Registry(reg).serving() == serving  # a candidate serves nothing before its gate


# --- finetune --method replay: TD3 on the replay of the window ---------------------------------------------

def _held():
    """A shipped held-action model (10-minute holds), trained on dlrm."""
    from td3sched.shipped import SHIPPED_MODELS

    return SHIPPED_MODELS / "td3-dlrm-held"


def test_finetuning_on_the_replay_moves_the_actor_and_keeps_the_cards_episodes(history, tmp_path):
    from td3sched.lifecycle.finetune import finetune_on_replay

    torch.set_num_threads(1)
    parent_folder = _held()
    parent = load_model(parent_folder)
    training = finetune_on_replay(history, parent_folder, tmp_path / "candidate", window="4h", learning_rate=1e-3,
                                  steps=30, seed=3)
    assert training["kind"] == "finetune-replay" and training["parent"] == parent.content_sha256[:12]
    assert training["replay"]["scenario"] == "tiny" and training["replay"]["span"] == "recent"
    assert training["steps"] == 30 and training["window_s"] == 14400
    card = json.loads((tmp_path / "candidate" / "model.json").read_text())
    assert card["action_hold_s"] == parent.card["action_hold_s"] == 600.0  # the episodes the card sets
    assert card["config"]["learning_rate"] == 1e-3 and card["config"]["bc_alpha"] == 2.5
    assert card["config"]["learning_starts"] == 15 and card["config"]["warmup_actor"] is True  # half fill the buffer
    child = load_model(tmp_path / "candidate")
    obs = np.random.default_rng(0).normal(size=(64, child.observation_size)).astype(np.float32)
    with torch.no_grad():
        before = parent.actor(torch.from_numpy(parent.normalizer.normalize(obs)))
        after = child.actor(torch.from_numpy(child.normalizer.normalize(obs)))
    gap = float((before - after).abs().mean())
    assert 0 < gap < 1.0, gap  # it moved, a little


def test_the_cli_finetunes_on_the_replay_and_refuses_a_bad_method(history, tmp_path):
    reg = tmp_path / "registry"
    result = runner.invoke(app, ["finetune", "--history", str(history), "--method", "replay", "--window", "3h",
                                 "--steps", "10", "--model", str(_held()), "--out", str(tmp_path / "cand"),
                                 "--registry", str(reg)])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "10 steps on the replay" in text, result.output
    assert len(Registry(reg).list()) == 1 and Registry(reg).serving() is None
    result = runner.invoke(app, ["finetune", "--history", str(history), "--method", "nosuch", "--model",
                                 str(_held()), "--out", str(tmp_path / "never")])
    assert result.exit_code == 2 and "--method 'nosuch': expected choices or replay" in " ".join(result.output.split())
