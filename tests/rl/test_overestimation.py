"""The overestimation study: the MC return and the Q estimate it reports are the ones of the evaluation
episode, recomputed here directly; the learn callback fires after every step and changes nothing; the
study writes its CSV, figure and README from what it measured."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.overestimation import (  # noqa: E402
    COLUMNS, CSV_FILE, FIGURE_FILE, REPORT_FILE, EvaluationEpisode, Point, StudySettings, discounted_returns,
    findings, horizon, read_csv, run_study)
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402
from td3sched.rl.train import TrainSettings, learn  # noqa: E402

SETTINGS = TrainSettings("tiny", seed=3, episode_hours=2.0)
SMALL = TD3Config(hidden=(32, 32), batch_size=32, buffer_size=5000, learning_starts=60, log_every=25, gamma=0.9)
"""gamma 0.9: H = 44, so a 2-hour window of tiny (~100 decisions) has states that count."""


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=1, max_size=40), st.floats(0, 0.999))
def test_discounted_returns_are_the_direct_sums(rewards, gamma):
    direct = [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(len(rewards))]
    np.testing.assert_allclose(discounted_returns(np.array(rewards), gamma), direct, rtol=1e-9, atol=1e-9)


@given(st.floats(0.01, 0.9999))
def test_the_horizon_is_the_first_whose_tail_weighs_under_one_percent(gamma):
    h = horizon(gamma)
    assert gamma**h < 0.01 and (h == 1 or gamma ** (h - 1) >= 0.01)


def test_horizon_of_the_default_discount_and_bad_discounts():
    assert horizon(0.99) == 459 and horizon(0.9) == 44 and horizon(0.0) == 1
    with pytest.raises(ValueError, match="gamma=1"):
        horizon(1.0)


def _trained_agent(steps: int = 200) -> TD3:
    env = SETTINGS.make_env()
    agent = TD3(OBSERVATION_SIZE, SMALL, seed=3)
    learn(agent, env, steps)
    env.close()
    return agent


def test_measure_is_the_first_critic_on_the_actors_action_and_the_discounted_return():
    agent = _trained_agent()
    episode = EvaluationEpisode(SETTINGS, SMALL.gamma)
    measured = episode.measure(agent)
    episode.close()

    # replay the same window on a fresh env, recording what the actor sees and earns
    env = SETTINGS.make_env()
    obs, _ = env.reset(options={"episode": episode.window})
    observations, rewards = [], []
    while True:
        observations.append(obs)
        obs, reward, terminated, truncated, _ = env.step_logits(agent.predict(obs))
        rewards.append(reward)
        if terminated or truncated:
            break
    env.close()
    steps, h = len(rewards), horizon(SMALL.gamma)
    counted = steps - h + 1
    assert measured.n_states == counted > 0
    mc = [sum(SMALL.gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(counted)]
    assert measured.mc_return == pytest.approx(np.mean(mc), rel=1e-9)
    with torch.no_grad():
        x = torch.from_numpy(agent.normalizer.normalize(np.array(observations[:counted])))
        actions = torch.from_numpy(agent.predict(np.array(observations[:counted])))
        q1 = agent.critic(x, actions)[0].view(-1).numpy()  # TD3: the first of the two critics
        q2 = agent.critic(x, actions)[1].view(-1).numpy()
    assert measured.q_estimate == pytest.approx(float(q1.mean()), rel=1e-5)
    assert not np.allclose(q1, q2)  # so Q1 was really told apart from Q2
    assert measured.bias == pytest.approx(measured.q_estimate - measured.mc_return)


def test_an_evaluation_window_shorter_than_the_horizon_is_refused_before_training():
    with pytest.raises(ValueError, match=r"fewer than the horizon H=459.*--episode-hours"):
        EvaluationEpisode(SETTINGS, 0.99)


def test_the_callback_fires_after_every_step_and_an_evaluating_callback_changes_no_weight():
    seen: list[int] = []
    episode = EvaluationEpisode(SETTINGS, SMALL.gamma)

    def evaluate(step: int, agent: TD3) -> None:
        seen.append(step)
        if step % 50 == 0:
            episode.measure(agent)

    agents = []
    for callback in (evaluate, None):
        env = SETTINGS.make_env()
        agent = TD3(OBSERVATION_SIZE, SMALL, seed=3)
        learn(agent, env, 150, callback=callback)
        env.close()
        agents.append(agent)
    episode.close()
    assert seen == list(range(1, 151))
    for name, net in agents[0].networks().items():
        for key, value in net.state_dict().items():
            assert torch.equal(value, agents[1].networks()[name].state_dict()[key]), (name, key)


def test_the_study_writes_one_row_per_evaluation_point_the_figure_and_the_report(tmp_path):
    study = StudySettings("tiny", episode_hours=2.0, steps=200, eval_every=80, seeds=(1,), config=SMALL)
    points = []
    result = run_study(study, tmp_path, on_point=points.append)

    with open(tmp_path / CSV_FILE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    assert [(r["algo"], int(r["step"])) for r in rows] == [(a, s) for a in ("td3", "ddpg") for s in (80, 160, 200)]
    assert read_csv(tmp_path / CSV_FILE) == points == result.points
    for r in rows:
        assert float(r["bias"]) == pytest.approx(float(r["q_estimate"]) - float(r["mc_return"]))
        assert int(r["n_states"]) > 0 and math.isfinite(float(r["q_estimate"]))
    assert len({r["mc_return"] for r in rows}) > 1  # the actor changed between points
    assert (tmp_path / FIGURE_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / REPORT_FILE).read_text()
    final_ddpg = next(f for f in findings(points) if f.algo == "ddpg")
    assert f"{final_ddpg.final_bias:.3g}" in report or f"{final_ddpg.final_bias:,.1f}" in report
    assert "td3sched overestimation --scenario tiny --steps 200 --eval-every 80 --seeds 1" in report
    assert str(tmp_path) not in report


def test_findings_take_the_last_point_over_seeds_and_the_mean_over_all_points():
    def point(algo, seed, step, bias):
        return Point(algo, seed, step, bias - 10.0, -10.0, bias, 5)

    points = [point("td3", 1, 10, 1.0), point("td3", 1, 20, 3.0), point("td3", 2, 10, 2.0), point("td3", 2, 20, 5.0),
              point("ddpg", 1, 10, 7.0), point("ddpg", 1, 20, 9.0)]
    td3, ddpg = findings(points)
    assert (td3.algo, td3.final_step, td3.final_bias, td3.final_bias_min, td3.final_bias_max) == ("td3", 20, 4.0, 3.0,
                                                                                                  5.0)
    assert td3.average_bias == pytest.approx(11.0 / 4) and td3.points == 4
    assert (ddpg.final_bias, ddpg.average_bias, ddpg.final_mc_return) == (9.0, 8.0, -10.0)


def test_overestimation_command_refuses_a_window_too_short_for_the_horizon(tmp_path):
    result = CliRunner().invoke(app, ["overestimation", "--steps", "100", "--eval-every", "50", "--episode-hours",
                                      "2", "--out", str(tmp_path), "--no-progress"])
    assert result.exit_code == 2 and "--episode-hours" in result.output
    assert not (tmp_path / CSV_FILE).exists()
