"""The learned hold-back ceiling (action mode ``ceiling``, ``--action weights+tau+ceiling``): decoding,
the model card's declared dimensions, the policy applying static-weights' own hold-back, a trained
model saved, reloaded, exported to ONNX and run in the harness; the actor's pre-activation penalty
and the OOM feature's normaliser floor."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.policy.static_weights import StaticWeights  # noqa: E402
from td3sched.rl.actions import (  # noqa: E402
    ACTION_DIMENSIONS, CEILING_RANGE, LOGIT_LIMIT, action_mode_of, action_size, card_action_dimensions, decode)
from td3sched.rl.card import CARD_FILE, ModelError  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402
from td3sched.rl.networks import Actor, score_arguments  # noqa: E402
from td3sched.rl.normalizer import ObservationNormalizer  # noqa: E402
from td3sched.rl.observation import OBSERVATION_FIELDS, OBSERVATION_SIZE, STD_FLOORS  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.rl.policy import ActionPolicy  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

SMALL = TD3Config(hidden=(32, 32), batch_size=16, buffer_size=1000, learning_starts=0)


def test_the_designs_name_the_modes_and_their_widths():
    assert [action_mode_of(d) for d in ("weights", "weights+tau", "weights+tau+ceiling")] == ["seed", "full", "ceiling"]
    assert [action_size(m) for m in ("seed", "full", "ceiling")] == [5, 5, 6]
    assert action_mode_of("full") == "full"
    with pytest.raises(ValueError, match=r"action 'tau': expected one of weights, weights\+tau"):
        action_mode_of("tau")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-8, 8), min_size=6, max_size=6))
def test_a_ceiling_action_decodes_to_weights_tau_and_a_ceiling_in_range(raw):
    args = decode(raw, "ceiling")
    assert abs(args.weights.sum() - 1) < 1e-12 and 0 < args.tau < 1
    assert CEILING_RANGE[0] < args.ceiling < CEILING_RANGE[1]
    full = decode(raw[:5], "full")  # the first five numbers mean what they mean in the full mode
    assert np.array_equal(full.weights, args.weights) and full.tau == args.tau and full.ceiling is None
    # torch's squashing (what the critics read) is the same function
    t = score_arguments(torch.tensor(np.clip([raw], -LOGIT_LIMIT, LOGIT_LIMIT), dtype=torch.float64), "ceiling")[0]
    np.testing.assert_allclose(t.numpy(), [*args.weights, args.tau, args.ceiling], rtol=1e-12)


def test_the_ceiling_grows_with_its_pre_activation_and_a_wrong_width_is_named():
    ceilings = [decode([0, 0, 0, 0, 0, x], "ceiling").ceiling for x in (-5, -1, 0, 1, 5)]
    assert ceilings == sorted(ceilings) and ceilings[2] == pytest.approx(sum(CEILING_RANGE) / 2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"expected 6 finite numbers \(w_cpu, .*, tau, ceiling; action mode 'ceiling'\)"):
        decode([0, 0, 0, 0, 0], "ceiling")


class _Constant(ActionPolicy):
    """An ActionPolicy whose actor always answers ``action``."""

    name = "constant"

    def __init__(self, action, mode):
        super().__init__(mode)
        self.action = np.asarray(action, dtype=np.float32)
        self.calls = 0

    def act(self, obs):
        self.calls += 1
        return self.action


@pytest.fixture(scope="module")
def world():
    return load_scenario("tiny").build(1)


def _run(world, policy, hours=4.0):
    start, _ = load_scenario("tiny").span("test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Simulation(world, policy, 1, start, start + hours * 3600).run()["metrics"]


def test_the_learned_ceiling_is_static_weights_hold_back_with_that_ceiling(world):
    """A ceiling-mode policy that always takes one action runs exactly as static-weights with the
    weights, tau and ceiling that action stands for: the same filter, the same scores, the same run;
    and at a ceiling this low it does hold pods back (the actor is asked more often than pods bind)."""
    action = [1.0, -0.5, 0.2, 0.0, -2.0, -LOGIT_LIMIT]
    args = decode(action, "ceiling")
    learned = _Constant(action, "ceiling")
    got = _run(world, learned)
    expected = _run(world, StaticWeights(args.weights, args.tau, args.ceiling))
    assert got == expected
    assert got["decisions"] > got["binds"]
    # the actor is asked once per cycle that reaches the policy: held-back cycles included
    assert got["binds"] < learned.calls <= got["decisions"]


def test_the_learned_fragmentation_share_is_static_weights_blend_with_that_share(world):
    """A fragmentation-mode policy that always takes one action runs exactly as static-weights with the
    weights, tau and fragmentation share that action stands for; the share changes the run."""
    action = [1.0, -0.5, 0.2, 0.0, -0.4, 0.3]
    args = decode(action, "fragmentation")
    got = _run(world, _Constant(action, "fragmentation"), hours=2.0)
    assert got == _run(world, StaticWeights(args.weights, args.tau, fragmentation=args.fragmentation), hours=2.0)
    assert got != _run(world, StaticWeights(args.weights, args.tau), hours=2.0)


def test_the_full_and_seed_modes_hold_nothing_back(world):
    for mode in ("full", "seed"):
        got = _run(world, _Constant([0.3, 0.1, -0.2, 0.0, 1.0], mode), hours=2.0)
        assert got["decisions"] == got["binds"]


def test_the_env_in_the_ceiling_mode_steps_through_held_back_decisions():
    env = ClusterSchedulingEnv("tiny", "test", 2.0, action_mode="ceiling")
    assert env.action_space.shape == (6,)
    obs, _ = env.reset(seed=1)
    steps, total = 0, 0.0
    while True:
        obs, reward, _, truncated, info = env.step_logits(np.array([0, 0, 0, 0, 0, -LOGIT_LIMIT], dtype=np.float32))
        steps += 1
        total += reward
        assert info["ceiling"] == pytest.approx(decode([0] * 5 + [-LOGIT_LIMIT], "ceiling").ceiling)
        if truncated:
            break
    record = info["record"]["metrics"]
    assert record["decisions"] >= steps > record["binds"]
    assert total == pytest.approx(record["episode_reward"], abs=1e-9)
    env.close()


def _saved(tmp_path, mode="ceiling", config=SMALL):
    agent = TD3(OBSERVATION_SIZE, config, seed=5, action_mode=mode)
    rng = np.random.default_rng(1)
    agent.normalizer.update(rng.normal(size=(100, OBSERVATION_SIZE)))
    for step in range(1, 6):
        agent.buffer.add(rng.normal(size=OBSERVATION_SIZE), rng.uniform(-5, 5, action_size(mode)), -0.1,
                         rng.normal(size=OBSERVATION_SIZE), False)
        agent.train_step(step)
    folder = tmp_path / mode
    agent.save(folder, {"scenario": "tiny", "span": "train", "training": {"steps": 5}})
    return agent, folder


def test_a_ceiling_model_declares_its_dimensions_reloads_exports_and_runs(tmp_path, world):
    agent, folder = _saved(tmp_path)
    card = json.loads((folder / CARD_FILE).read_text())
    assert card["action_mode"] == "ceiling" and card["action_dimensions"] == list(ACTION_DIMENSIONS["ceiling"])
    model = load_model(folder)
    obs = np.random.default_rng(3).normal(size=(16, OBSERVATION_SIZE)).astype(np.float32)
    assert model.act(obs).shape == (16, 6)
    np.testing.assert_array_equal(model.act(obs), agent.predict(obs))
    actor = load_actor(folder)  # exported in memory, parity-checked against torch
    assert actor.action_size == 6 and actor.dimensions == ACTION_DIMENSIONS["ceiling"]
    np.testing.assert_allclose(actor.act(obs), agent.predict(obs), atol=1e-5)
    from td3sched.policy import make_policy

    metrics = _run(world, make_policy(f"td3:{folder}"), hours=2.0)
    assert metrics["decisions"] >= metrics["binds"] > 0


def test_a_card_whose_dimensions_disagree_with_its_mode_is_refused(tmp_path):
    _, folder = _saved(tmp_path)
    card = json.loads((folder / CARD_FILE).read_text())
    card["action_dimensions"] = list(ACTION_DIMENSIONS["full"])
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelError, match=r"action_dimensions .*'tau'\]: expected .*'ceiling'\] for action mode 'ceiling'"):
        load_model(folder)
    with pytest.raises(ModelError, match="action_dimensions"):
        load_actor(folder)


def test_a_card_without_declared_dimensions_reads_as_its_mode():
    assert card_action_dimensions({"action_mode": "seed"}) == ACTION_DIMENSIONS["seed"]
    assert card_action_dimensions({"action_mode": "full"}) == ("w_cpu", "w_mem", "w_io", "w_net", "tau")


def _saturation_after(penalty: float, steps: int = 300) -> float:
    """Share of saturated pre-activations after ``steps`` actor updates against a critic whose Q grows
    without bound in every pre-activation (the flat-critic failure: nothing holds the actor back)."""
    torch.manual_seed(0)
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(32, 32), batch_size=32, buffer_size=1000, learning_starts=0,
                                            policy_frequency=1, preactivation_penalty=penalty), seed=2)
    rng = np.random.default_rng(0)
    for _ in range(64):
        agent.buffer.add(rng.normal(size=OBSERVATION_SIZE), rng.uniform(-5, 5, 5), 0.0,
                         rng.normal(size=OBSERVATION_SIZE), False)
    agent.critic.q1 = lambda obs, action: 0.05 * action.sum(dim=-1, keepdim=True)  # the actor's Q: dQ/da = 0.05
    for step in range(steps):
        agent.train_step(step)
    obs = torch.from_numpy(agent.normalizer.normalize(rng.normal(size=(256, OBSERVATION_SIZE))))
    return agent.saturation(obs)


def test_the_preactivation_penalty_keeps_the_actor_off_the_bound():
    assert _saturation_after(0.0) > 0.9
    assert _saturation_after(1.0) < 0.1  # on observations it never trained on


def test_the_preactivation_penalty_is_free_inside_80_percent_of_the_bound():
    """Inside the free zone the actor's update is the plain TD3 update, bit for bit."""
    a, b = _agent_pair()
    for agent in (a, b):
        torch.manual_seed(11)  # target smoothing draws from torch's generator
        for step in range(1, 4):
            agent.train_step(step)
    for (name, x), (_, y) in zip(a.actor.named_parameters(), b.actor.named_parameters()):
        assert torch.equal(x, y), name


def _agent_pair():
    """Two agents, penalty 0 and the default, whose actors start with raw outputs well inside the zone."""
    agents = []
    for penalty in (0.0, 1.0):
        agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16, 16), batch_size=16, buffer_size=100, learning_starts=0,
                                                policy_frequency=1, preactivation_penalty=penalty), seed=6)
        with torch.no_grad():
            agent.actor.net[-1].weight.mul_(0.01)
        rng = np.random.default_rng(0)
        for _ in range(32):
            agent.buffer.add(rng.normal(size=OBSERVATION_SIZE), rng.uniform(-5, 5, 5), -0.1,
                             rng.normal(size=OBSERVATION_SIZE), False)
        agents.append(agent)
    return agents


def test_the_oom_feature_reads_one_kill_and_a_hundred_apart():
    """The running std of a feature that is almost always 0 is tiny: unfloored, one kill and a hundred
    both hit the clip; with the floor they stay apart, and a normaliser saved without one reads back
    without one (the shipped models)."""
    i = OBSERVATION_FIELDS.index("oom_kills_5min_log1p")
    obs = np.zeros((1000, OBSERVATION_SIZE))
    obs[0, i] = np.log1p(1)
    floors = np.zeros(OBSERVATION_SIZE)
    floors[i] = STD_FLOORS["oom_kills_5min_log1p"]
    plain, floored = ObservationNormalizer(OBSERVATION_SIZE), ObservationNormalizer(OBSERVATION_SIZE, min_std=floors)
    plain.update(obs)
    floored.update(obs)
    one, hundred = np.zeros(OBSERVATION_SIZE), np.zeros(OBSERVATION_SIZE)
    one[i], hundred[i] = np.log1p(1), np.log1p(100)
    assert plain.normalize(one)[i] == plain.normalize(hundred)[i] == plain.clip
    assert 0 < floored.normalize(one)[i] < floored.normalize(hundred)[i] < floored.clip
    back = ObservationNormalizer.from_json(json.loads(json.dumps(floored.to_json())), OBSERVATION_SIZE)
    np.testing.assert_array_equal(back.normalize(hundred), floored.normalize(hundred))
    assert "min_std" not in plain.to_json()
    assert ObservationNormalizer.from_json(plain.to_json(), OBSERVATION_SIZE).min_std is None
    with pytest.raises(ValueError, match="min_std: 3 values, expected 35"):
        ObservationNormalizer.from_json({**floored.to_json(), "min_std": [0.0] * 3}, OBSERVATION_SIZE)
    assert TD3(OBSERVATION_SIZE, SMALL).normalizer.min_std[i] == STD_FLOORS["oom_kills_5min_log1p"]


def test_the_actor_width_follows_the_mode():
    assert Actor(OBSERVATION_SIZE, (8,), 6)(torch.zeros(1, OBSERVATION_SIZE)).shape == (1, 6)
