"""Training: a resumed run is the uninterrupted run, the model it writes reloads to the same actions,
a short run on tiny beats random actions, and the ``train`` command."""

from __future__ import annotations

import time

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.rl.env import episode_return  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402
from td3sched.rl.train import CHECKPOINT_FILE, CheckpointError, TrainSettings, read_checkpoint, train  # noqa: E402

SETTINGS = TrainSettings("tiny", seed=3, episode_hours=2.0)
SMALL = TD3Config(hidden=(32, 32), batch_size=32, buffer_size=5000, learning_starts=60, log_every=25)


def _observations():
    return np.random.default_rng(9).normal(size=(32, OBSERVATION_SIZE)).astype(np.float32)


def test_checkpoint_resume_and_reload_give_identical_actions(tmp_path):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    train(straight, 300, SETTINGS, SMALL, checkpoint_every=100)
    # interrupted after 170 steps (mid-episode, between two checkpoints), then resumed to 300
    train(broken, 170, SETTINGS, SMALL, checkpoint_every=100)
    assert read_checkpoint(broken / CHECKPOINT_FILE)["loop"]["global_step"] == 170
    train(broken, 300, SETTINGS, SMALL, checkpoint_every=100, resume=True)

    a, b = read_checkpoint(straight / CHECKPOINT_FILE), read_checkpoint(broken / CHECKPOINT_FILE)
    for name in ("actor", "actor_target", "critic", "critic_target"):
        for key, value in a["agent"][name].items():
            assert torch.equal(value, b["agent"][name][key]), (name, key)
    for key, value in a["agent"]["buffer"].items():
        assert (torch.equal(value, b["agent"]["buffer"][key]) if isinstance(value, torch.Tensor)
                else value == b["agent"]["buffer"][key]), key
    assert a["agent"]["normalizer"] == b["agent"]["normalizer"] and a["envs"] == b["envs"]
    assert a["loop"]["episodes"] == b["loop"]["episodes"] > 0
    assert a["loop"]["recent_returns"] == b["loop"]["recent_returns"]

    obs = _observations()
    actions = load_model(straight).act(obs)
    np.testing.assert_array_equal(load_model(broken).act(obs), actions)
    np.testing.assert_array_equal(TD3.load(broken).predict(obs), actions)


def test_resume_refuses_other_settings(tmp_path):
    train(tmp_path, 70, SETTINGS, SMALL)
    with pytest.raises(CheckpointError, match="settings differ"):
        train(tmp_path, 100, TrainSettings("tiny", seed=4, episode_hours=2.0), SMALL, resume=True)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        train(tmp_path / "empty", 100, SETTINGS, SMALL, resume=True)


def test_a_short_training_run_beats_random_actions():
    """3,000 steps on tiny (6-hour windows of the train span), then the deterministic actor and
    uniformly random actions on the same 12 windows and tie-breaking seeds. A short run needs a short
    horizon (gamma 0.9) and small, fast networks; with the defaults it takes ~10,000 steps."""
    started = time.perf_counter()
    settings = TrainSettings("tiny", seed=1, episode_hours=6.0)
    config = TD3Config(hidden=(64, 64), batch_size=64, learning_rate=1e-3, gamma=0.9, learning_starts=500,
                       buffer_size=3000)
    env = settings.make_env()
    agent = TD3(OBSERVATION_SIZE, config, seed=1)
    agent.learn(env, 3000)

    env.reset(seed=100)  # evaluation windows: drawn apart from the training draws
    windows = []
    for _ in range(12):
        windows.append(dict(env.state_dict()["episode"]))
        env.reset()
    rng = np.random.default_rng(0)
    learned = [episode_return(env, w, agent.predict) for w in windows]
    random = [episode_return(env, w, lambda _: rng.uniform(-5, 5, 5).astype(np.float32)) for w in windows]
    env.close()
    print(f"learned {np.round(learned, 1)} random {np.round(random, 1)} in {time.perf_counter() - started:.0f} s")
    # better than random on the same windows, by more than twice the paired differences' standard
    # error (most of a window's cost is its node-hours, which a placement moves little)
    diff = np.array(learned) - np.array(random)
    assert diff.mean() > 2 * diff.std(ddof=1) / np.sqrt(len(diff))


runner = CliRunner()


def test_train_command_trains_resumes_and_writes_a_usable_model(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--scenario", "tiny", "--steps", "60", "--episode-hours", "2", "--learning-starts", "30",
            "--checkpoint-every", "40", "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "60 steps" in result.output and (out / "model.pt").exists() and list((out / "tb").iterdir())
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "pass --resume" in again.output
    resumed = runner.invoke(app, ["train", "--steps", "80", "--out", str(out), "--resume", "--no-progress"])
    assert resumed.exit_code == 0, resumed.output
    assert read_checkpoint(out / CHECKPOINT_FILE)["loop"]["global_step"] == 80
    clash = runner.invoke(app, ["train", "--steps", "90", "--out", str(out), "--resume", "--algo", "ddpg"])
    assert clash.exit_code == 2 and "'algo': ('ddpg', 'td3')" in " ".join(clash.output.split())
    sim = runner.invoke(app, ["simulate", "--scenario", "tiny", "--span", "test", "--policy", f"td3:{out}",
                              "--no-progress"])
    assert sim.exit_code == 0, sim.output
    assert "episode_reward" in sim.output


def test_train_command_prints_progress_lines_where_no_bar_can_show(tmp_path, monkeypatch):
    """Into a log file or a pipe a progress bar shows nothing: the command prints a plain line instead, at
    the first log and then at most every progress.EVERY_S seconds."""
    import re

    import td3sched.progress as progress

    args = ["train", "--scenario", "tiny", "--steps", "250", "--episode-hours", "1", "--learning-starts", "20"]
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    every = runner.invoke(app, args + ["--out", str(tmp_path / "every")])
    assert every.exit_code == 0, every.output
    lines = re.findall(r"train: ([\d,]+)/250 steps \(\d+%\), \d+ s elapsed.*?, [\d.,]+ steps/s, ep reward", every.output)
    assert lines == ["1", "101", "201"], every.output  # a log every TD3Config.log_every (100) steps
    monkeypatch.setattr(progress, "EVERY_S", 3600.0)
    throttled = runner.invoke(app, args + ["--out", str(tmp_path / "throttled")])
    assert throttled.exit_code == 0 and throttled.output.count("/250 steps (") == 1, throttled.output
    quiet = runner.invoke(app, args + ["--out", str(tmp_path / "quiet"), "--no-progress"])
    assert quiet.exit_code == 0 and "/250 steps (" not in quiet.output


def test_train_command_chooses_the_action_design_and_records_the_share_at_the_bound(tmp_path):
    out = tmp_path / "ceiling"
    result = runner.invoke(app, ["train", "--scenario", "tiny", "--steps", "120", "--episode-hours", "2",
                                 "--learning-starts", "30", "--action", "weights+tau+ceiling", "--preactivation-penalty",
                                 "1", "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "action weights+tau+ceiling" in " ".join(result.output.split())
    import json

    card = json.loads((out / "model.json").read_text())
    assert card["action_mode"] == "ceiling" and card["action_dimensions"][-1] == "ceiling"
    assert card["config"]["preactivation_penalty"] == 1.0
    saturation = card["training"]["preactivation_saturation"]
    assert saturation["threshold"] == 0.9 and saturation["steps_share"] == [[100, saturation["last"]]]
    assert 0 <= saturation["last"] <= 1
    bad = runner.invoke(app, ["train", "--steps", "10", "--out", str(tmp_path / "bad"), "--action", "tau"])
    assert bad.exit_code == 2 and "--action: action 'tau': expected one of weights, weights+tau" in " ".join(
        bad.output.split())


def test_a_checkpoint_from_before_the_penalty_field_resumes(tmp_path):
    """Config fields and settings added later (TD3Config's LATER_FIELDS, TrainSettings' defaults) read with
    the value the run was trained with."""
    train(tmp_path, 70, SETTINGS, SMALL, checkpoint_every=70)
    path = tmp_path / CHECKPOINT_FILE
    state = read_checkpoint(path)
    del state["config"]["preactivation_penalty"], state["config"]["gamma_per_hour"]
    del state["settings"]["warmup_hours"], state["settings"]["warmup_score"], state["settings"]["action_hold_s"]
    torch.save(state, path)
    assert train(tmp_path, 80, SETTINGS, SMALL, resume=True).steps == 80
    with pytest.raises(CheckpointError, match="config differ"):
        train(tmp_path, 90, SETTINGS, TD3Config(**{**SMALL.to_json(), "preactivation_penalty": 1.0}), resume=True)


def test_train_command_holds_actions_and_the_card_says_so(tmp_path):
    import json

    out = tmp_path / "held"
    args = ["train", "--scenario", "tiny", "--steps", "40", "--episode-hours", "2", "--learning-starts", "20",
            "--action-hold", "600", "--gamma-per-hour", "0.5", "--checkpoint-every", "20", "--out", str(out),
            "--no-progress"]
    result = runner.invoke(app, args[:4] + ["30"] + args[5:])
    assert result.exit_code == 0, result.output
    assert "held 600 s" in " ".join(result.output.split())
    card = json.loads((out / "model.json").read_text())
    assert card["action_hold_s"] == 600.0 and card["config"]["gamma_per_hour"] == 0.5
    assert card["training"]["steps"] == 30 and card["training"]["episodes"] >= 2  # 2 h windows of 10-minute steps
    clash = runner.invoke(app, args + ["--resume"] + ["--action-hold", "60"])
    assert clash.exit_code == 2 and "'action_hold_s': (60.0, 600.0)" in " ".join(clash.output.split())
    resumed = runner.invoke(app, args + ["--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "model.json").read_text())["action_hold_s"] == 600.0
    bad = runner.invoke(app, ["train", "--steps", "10", "--out", str(tmp_path / "bad"), "--action-hold", "-5"])
    assert bad.exit_code == 2 and "--action-hold: action hold -5.0: expected a finite number" in " ".join(
        bad.output.split())


def test_train_command_warms_episodes_up_and_starts_from_a_static_score(tmp_path):
    """--warmup-h/--warmup-score start each episode from the cluster the static score leaves; --anchor
    starts the actor from that score; the card records both, and a resume must not change them."""
    import json

    out = tmp_path / "warm"
    score = "static-weights:w=1/0/0/0:tau=0.4"
    args = ["train", "--scenario", "tiny", "--steps", "40", "--episode-hours", "1", "--learning-starts", "20",
            "--action-hold", "600", "--warmup-h", "2", "--warmup-score", score, "--anchor", score,
            "--bc-alpha", "2.5", "--bc-decay-steps", "100", "--checkpoint-every", "20", "--out", str(out),
            "--no-progress"]
    result = runner.invoke(app, args[:4] + ["30"] + args[5:])
    assert result.exit_code == 0, result.output
    card = json.loads((out / "model.json").read_text())
    assert (card["warmup_hours"], card["warmup_score"]) == (2.0, score)
    assert (card["config"]["anchor"], card["config"]["bc_alpha"], card["config"]["bc_decay_steps"]) == (score, 2.5, 100)
    clash = runner.invoke(app, args + ["--resume", "--anchor", "static-weights:w=0/1/0/0:tau=0.4"])
    assert clash.exit_code == 2 and "'anchor'" in clash.output
    resumed = runner.invoke(app, args + ["--resume"])
    assert resumed.exit_code == 0, resumed.output
    for bad, message in ((["--warmup-h", "2"], "a warm-up needs both"),
                         (["--anchor", "fgd"], "--anchor: static score 'fgd': expected a static-weights spec"),
                         (["--warmup-h", "2", "--warmup-score", score + ":ceiling=0.9"],
                          "a ceiling needs the action mode 'ceiling'")):
        refused = runner.invoke(app, ["train", "--steps", "10", "--out", str(tmp_path / "bad"), *bad])
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), refused.output


@pytest.mark.parametrize("warmup_actor", [True, False])
def test_warmup_actor_fills_the_buffer_with_the_actors_actions(warmup_actor):
    """A fine-tune's warm-up (TD3Config.warmup_actor) acts as the model does; the default one at random."""
    import dataclasses

    from td3sched.lifecycle.bc import set_constant
    from td3sched.rl.train import learn

    config = dataclasses.replace(SMALL, learning_starts=40, exploration_noise=0.0, warmup_actor=warmup_actor)
    agent = TD3(OBSERVATION_SIZE, config, 3, SETTINGS.action_mode)
    constant = np.linspace(-1.0, 1.0, agent.action_size).astype(np.float32)
    set_constant(agent.actor, constant)
    env = SETTINGS.make_env()
    try:
        learn(agent, env, 30, settings=SETTINGS)  # within the warm-up: no gradient step yet
    finally:
        env.close()
    actions = agent.buffer.actions[: agent.buffer.size]
    assert agent.buffer.size >= 25
    if warmup_actor:
        np.testing.assert_allclose(actions, np.broadcast_to(constant, actions.shape), atol=1e-5)
    else:
        assert np.abs(actions - constant).max() > 1.0


def test_train_command_fixes_a_sibling_spread_in_the_card_and_the_td3_policy_scores_with_it(tmp_path):
    """--spread: every decision's score (the warm-up's too) takes the sibling spread and the card fixes it,
    so the td3 policy and the engine serve what was trained; a spec with another spread is refused."""
    import json

    from td3sched.policy import make_policy

    out = tmp_path / "spread"
    score = "static-weights:w=1/0/0/0:tau=0.4:spread=3"
    args = ["train", "--scenario", "tiny", "--steps", "30", "--episode-hours", "1", "--learning-starts", "20",
            "--action-hold", "600", "--warmup-h", "2", "--warmup-score", score, "--anchor", score, "--spread", "3",
            "--checkpoint-every", "0", "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "model.json").read_text())["sibling_spread"] == 3.0
    assert make_policy(f"td3:{out}").spread == 3.0
    from td3sched.rl.env import ClusterSchedulingEnv

    env = ClusterSchedulingEnv("tiny", episode_hours=1, sibling_spread=3.0)
    try:
        env.reset(seed=1)
        env.step(env.action_space.sample())
        assert env._policy.spread == 3.0 and env._policy.counts_releases and len(env._policy.siblings) > 0
    finally:
        env.close()
    for bad, message in ((["--spread", "0", "--anchor", score], "the anchor 'static-weights:w=1/0/0/0:tau=0.4:spread=3' "
                                                                 "has a sibling spread of 3 and the run 0"),
                         (["--warmup-h", "1", "--warmup-score", score], "the warm-up score"),
                         (["--spread", "-1"], "spread=-1.0: expected a sibling spread")):
        refused = runner.invoke(app, ["train", "--steps", "10", "--out", str(tmp_path / "bad"), *bad])
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), refused.output
