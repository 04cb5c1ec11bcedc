"""TD3+BC on history: the transitions are the run's decisions linked in order, with its rewards (they
sum to the episode reward but for the last decision's), the static policy's action decodes back to
its weights and tau; with a small alpha the actor learns the history's action, with a large one the
critic's term pulls it further away."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.lifecycle.history import read_history  # noqa: E402
from td3sched.lifecycle.offline import transitions_from_history  # noqa: E402
from td3sched.lifecycle.record import record_simulation  # noqa: E402
from td3sched.rl.actions import ScoreArgs, action_to_weights, encode  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402

SPEC = "static-weights:w=0.5/0.3/0.1/0.1:tau=0.4"
runner = CliRunner()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    folder = tmp_path_factory.mktemp("history")
    record, _, _ = record_simulation("tiny", SPEC, 1, "train", folder)
    return folder, record


def test_transitions_link_the_runs_decisions_with_their_rewards(history):
    folder, record = history
    t = transitions_from_history(folder)
    rows = [r for r in read_history(folder).to_pylist()]
    measured = [r for r in rows if r["reward"] is not None]
    assert len(t) == len(measured) - 1 and t.counts["last_of_run"] == 1  # the last decision has no successor
    last = max(measured, key=lambda r: r["time_s"])
    assert math.isclose(float(t.rewards.astype(np.float64).sum()) + last["reward"], record["metrics"]["episode_reward"],
                        rel_tol=1e-5)  # float32 in the buffer
    np.testing.assert_array_equal(t.next_obs[:-1], t.obs[1:])  # one run, in order: each next is the following
    w, tau = action_to_weights(t.actions[0])
    np.testing.assert_allclose(w, [0.5, 0.3, 0.1, 0.1], atol=1e-6)
    assert abs(tau - 0.4) < 1e-6
    # a static row's weights with zeros among them keep their ratio (log weights centred on their mean
    # and clipped to the box turned 0.9/0.1/0/0 into 0.5/0.5/0/0)
    w, tau = action_to_weights(encode(ScoreArgs(np.array([0.9, 0.1, 0.0, 0.0]), 0.5)))
    np.testing.assert_allclose(w, [0.9, 0.1, 0.0, 0.0], atol=1e-3)


def test_td3bc_learns_the_histories_action_by_its_alpha(history, tmp_path):
    torch.set_num_threads(1)
    folder, _ = history
    gaps = {}
    for alpha in (0.1, 10.0):
        result = runner.invoke(app, ["offline-rl", "--history", str(folder), "--out", str(tmp_path / f"m{alpha}"),
                                     "--steps", "400", "--alpha", str(alpha)])
        assert result.exit_code == 0, result.output
        card = json.loads((tmp_path / f"m{alpha}" / "model.json").read_text())
        assert card["training"]["kind"] == "td3+bc" and card["config"]["bc_alpha"] == alpha
        gaps[alpha] = card["training"]["mean_abs_action_gap"]
    t = transitions_from_history(folder)
    fresh = float(np.abs(t.actions).mean())  # a new actor starts near 0
    assert gaps[0.1] < 0.1 * fresh, (gaps, fresh)
    assert gaps[10.0] > gaps[0.1], gaps
    model = load_model(tmp_path / "m0.1")
    w, tau = action_to_weights(model.act(t.obs[0]))
    np.testing.assert_allclose(w, [0.5, 0.3, 0.1, 0.1], atol=0.05)


def test_the_behaviour_term_decays_to_nothing_over_bc_decay_steps():
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.td3 import TD3, TD3Config

    torch.set_num_threads(1)
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16,), batch_size=32, bc_alpha=1.0, bc_decay_steps=10,
                                            policy_frequency=1, learning_starts=0), seed=3)
    rng = np.random.default_rng(0)
    far = np.full(5, 4.5, dtype=np.float32)  # the history's action, far from a new actor's (near 0)
    for _ in range(64):
        agent.buffer.add(rng.normal(size=OBSERVATION_SIZE).astype(np.float32), far, -1.0,
                         rng.normal(size=OBSERVATION_SIZE).astype(np.float32), False, 60.0)
    agent.train_step(0)
    assert agent.actor_loss > 1.0 + 10.0  # |lambda Q| <= alpha = 1, plus the behaviour term (~20)
    agent.train_step(5)
    assert agent.actor_loss > 1.0 + 5.0  # weight 0.5
    agent.train_step(10)
    assert abs(agent.actor_loss) <= 1.0 + 1e-6  # weight 0: -alpha mean(Q) / mean|Q| only


def test_online_after_offline_runs_from_the_offline_model_and_measures_its_return(history, tmp_path):
    from td3sched.lifecycle.offline import offline_td3bc, online_after_offline

    torch.set_num_threads(1)
    folder, _ = history
    offline_td3bc(folder, tmp_path / "offline", 50, alpha=2.5)
    result = online_after_offline(tmp_path / "offline", folder, tmp_path / "online", 40, 20, episode_hours=2.0,
                                  eval_every=20)
    assert [s for s, _ in result["returns"]] == [0, 20, 40] and all(np.isfinite(r) for _, r in result["returns"])
    card = json.loads((tmp_path / "online" / "model.json").read_text())
    assert card["training"]["kind"] == "td3+bc-online" and card["config"]["bc_decay_steps"] == 20


def test_online_after_offline_holds_actions_and_warms_episodes_up_when_told(history, tmp_path):
    from td3sched.lifecycle.offline import offline_td3bc, online_after_offline

    torch.set_num_threads(1)
    folder, _ = history
    offline_td3bc(folder, tmp_path / "offline", 20, alpha=2.5)
    spec = "static-weights:w=1/0/0/0:tau=0.4"
    result = online_after_offline(tmp_path / "offline", folder, tmp_path / "online", 12, 6, episode_hours=2.0,
                                  eval_every=6, action_hold_s=600.0, warmup_hours=1.0, warmup_score=spec,
                                  env_workers=2)
    assert [s for s, _ in result["returns"]] == [0, 6, 12]
    card = json.loads((tmp_path / "online" / "model.json").read_text())
    assert card["action_hold_s"] == 600.0 and card["warmup_hours"] == 1.0 and card["warmup_score"] == spec
    assert card["training"]["env_workers"] == 2
