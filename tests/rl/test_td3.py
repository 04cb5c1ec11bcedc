"""The TD3 update: clipped double-Q, delayed policy updates, clipped target smoothing noise; the DDPG
ablation; actions always map to weights on the simplex and tau in [0, 1]."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from td3sched.rl import td3 as td3_module  # noqa: E402
from td3sched.rl.actions import LOGIT_LIMIT, action_to_weights  # noqa: E402
from td3sched.rl.networks import squash  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402

OBS = 7
SMALL = dict(hidden=(16, 16), batch_size=8, buffer_size=100, learning_starts=0)


def _agent(**kw) -> TD3:
    agent = TD3(OBS, TD3Config(**{**SMALL, **kw}), seed=3)
    rng = np.random.default_rng(0)
    for _ in range(50):
        agent.buffer.add(rng.normal(size=OBS), rng.uniform(-5, 5, 5), rng.normal(), rng.normal(size=OBS), False)
        agent.normalizer.update(rng.normal(size=OBS))
    return agent


def _constant_q(critic, values):
    """Make each Q network of ``critic`` output a constant."""
    with torch.no_grad():
        for q, value in zip(critic.q_networks, values):
            last = q.net[-1]
            last.weight.zero_()
            last.bias.fill_(value)


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_config_documents_every_field_and_validates():
    source = inspect.getsource(TD3Config)
    body = ast.parse(source).body[0].body
    documented = {stmt.target.id for stmt, nxt in zip(body, body[1:])
                  if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)}
    assert documented == {f.name for f in dataclasses.fields(TD3Config)}
    cfg = TD3Config()
    assert (cfg.gamma, cfg.tau, cfg.batch_size, cfg.learning_rate, cfg.buffer_size, cfg.policy_frequency,
            cfg.policy_noise, cfg.noise_clip) == (0.99, 0.005, 256, 3e-4, 1_000_000, 2, 0.2, 0.5)
    assert cfg.gamma_per_hour is None
    with pytest.raises(ValueError, match="gamma_per_hour=0"):
        TD3Config(gamma_per_hour=0)
    old_card = {k: v for k, v in TD3Config().to_json().items() if k != "gamma_per_hour"}
    assert TD3Config.from_json(old_card).gamma_per_hour is None  # cards written before the semi-MDP
    with pytest.raises(ValueError, match="algo='sac'"):
        TD3Config(algo="sac")
    with pytest.raises(ValueError, match="TD3Config.tau=0"):
        TD3Config(tau=0)
    assert TD3Config.from_json(TD3Config().to_json()) == TD3Config()


def test_target_uses_the_minimum_of_the_two_target_critics():
    agent = _agent(gamma=0.5)
    _constant_q(agent.critic_target, [3.0, -2.0])
    rewards, dones = torch.tensor([1.0, 1.0]), torch.tensor([0.0, 1.0])
    y = agent.target_q(rewards, torch.randn(2, OBS), dones)
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.5 * -2.0, 1.0]))
    _constant_q(agent.critic_target, [-7.0, 4.0])
    y = agent.target_q(rewards, torch.randn(2, OBS), dones)
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.5 * -7.0, 1.0]))


def test_ddpg_has_one_critic_and_no_smoothing():
    agent = _agent(algo="ddpg", gamma=0.5)
    assert len(agent.critic.q_networks) == 1 and agent.policy_frequency == 1
    _constant_q(agent.critic_target, [3.0])
    y = agent.target_q(torch.tensor([1.0]), torch.randn(1, OBS), torch.tensor([0.0]))
    torch.testing.assert_close(y, torch.tensor([2.5]))
    next_obs = torch.randn(5, OBS)
    assert torch.equal(agent.smoothed_target_actions(next_obs), agent.actor_target(next_obs))


@pytest.mark.parametrize("algo, actor_steps", [("td3", {2, 4}), ("ddpg", {1, 2, 3, 4})])
def test_actor_and_targets_move_only_on_delayed_steps(algo, actor_steps):
    agent = _agent(algo=algo)
    for step in (1, 2, 3, 4):
        before = {name: _params(net) for name, net in agent.networks().items()}
        agent.train_step(step)
        after = {name: _params(net) for name, net in agent.networks().items()}
        assert not _same(before["critic"], after["critic"]), "the critics learn every step"
        moved = step in actor_steps
        for name in ("actor", "actor_target", "critic_target"):
            assert _same(before[name], after[name]) != moved, (name, step)


def test_soft_target_update_is_polyak_averaging():
    agent = _agent(tau=0.25)
    target0 = _params(agent.actor_target)
    agent.train_step(2)
    for online, target, old in zip(agent.actor.parameters(), agent.actor_target.parameters(), target0):
        torch.testing.assert_close(target, 0.25 * online + 0.75 * old)


def test_target_smoothing_noise_is_clipped():
    agent = _agent(policy_noise=100.0, noise_clip=0.5)
    with torch.no_grad():
        agent.actor_target.net[-1].weight.zero_()  # target actions 0: far from the box's edges
        agent.actor_target.net[-1].bias.zero_()
    noisy = agent.smoothed_target_actions(torch.randn(1000, OBS))
    assert noisy.abs().max() <= 0.5 and noisy.abs().max() > 0.49  # huge noise, clipped at 0.5
    assert noisy.std() > 0.3


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0, 100), st.floats(0.01, 1e3), st.sampled_from(["full", "seed"]))
def test_actions_map_to_the_simplex_and_tau_in_unit_interval(seed, noise_std, obs_scale, mode):
    torch.manual_seed(seed)
    agent = TD3(OBS, TD3Config(**{**SMALL, "exploration_noise": noise_std}), seed=seed, action_mode=mode)
    obs = np.random.default_rng(seed).normal(0, obs_scale, (16, OBS)).astype(np.float32)
    actions = [agent.explore(o) for o in obs]
    with torch.no_grad():
        actions.append(agent.smoothed_target_actions(torch.from_numpy(obs)).numpy()[0])
    for a in actions:
        assert np.all(np.abs(a) <= LOGIT_LIMIT)
        w, tau = action_to_weights(a, mode)
        assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-9
        assert 0 <= tau <= 1 and (tau == 0 if mode == "seed" else True)
        tw, ttau = squash(torch.from_numpy(a), mode == "seed")
        assert torch.all(tw >= 0) and abs(float(tw.sum()) - 1) < 1e-5 and 0 <= float(ttau) <= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=5, max_size=5))
def test_any_finite_action_maps_to_the_simplex(action):
    w, tau = action_to_weights(action)
    assert np.all(w >= 0) and abs(w.sum() - 1) < 1e-9 and 0 <= tau <= 1


def test_a_bad_action_is_refused():
    with pytest.raises(ValueError, match="expected 5 finite numbers"):
        action_to_weights([0, 0, 0, np.nan, 0])
    with pytest.raises(ValueError, match="expected 5 finite numbers"):
        action_to_weights([0, 0, 0])


def test_train_step_logs_losses_and_q_values_every_log_every_steps():
    agent = _agent(log_every=10)
    assert agent.train_step(3) is None
    logged = agent.train_step(10)
    assert set(logged) == {"qf1_values", "qf2_values", "qf1_loss", "qf2_loss", "qf_loss", "actor_loss", "saturated"}
    assert 0 <= logged["saturated"] <= 1 and agent.saturation_log == [[10, logged["saturated"]]]
    assert all(np.isfinite(v) for v in logged.values())
    assert td3_module.ALGOS == ("td3", "ddpg")


def test_the_semi_mdp_discount_is_per_hour_of_elapsed_time():
    agent = TD3(4, TD3Config(hidden=(8,), gamma_per_hour=0.5), seed=0)
    elapsed = torch.tensor([0.0, 1800.0, 3600.0, 7200.0])
    assert torch.allclose(agent.discounts(elapsed), torch.tensor([1.0, 0.5 ** 0.5, 0.5, 0.25]))
    obs = torch.zeros(4, 4)
    rewards, dones = torch.zeros(4), torch.zeros(4)
    with torch.no_grad():
        torch.manual_seed(0)
        y = agent.target_q(rewards, obs, dones, elapsed)
        torch.manual_seed(0)
        q = torch.min(torch.cat(agent.critic_target(obs, agent.smoothed_target_actions(obs)), dim=1), dim=1).values
    assert torch.allclose(y, agent.discounts(elapsed) * q)
    assert TD3(4, TD3Config(hidden=(8,), gamma=0.9), seed=0).discounts(elapsed) == 0.9  # per step


def test_an_anchored_agent_explores_around_the_static_score_and_starts_learning_from_it():
    """TD3Config.anchor: the warm-up's actions are the static score's pre-activations plus exploration
    noise, and the first gradient step (at learning_starts) begins by fitting the actor and its target
    to them; without an anchor the warm-up is uniform and the actor is left as it is."""
    from td3sched.rl.actions import decode

    spec = "static-weights:w=1/0/0/0:tau=0.4"
    agent = _agent(anchor=spec, learning_starts=50, batch_size=32)
    warm = np.array([agent.warmup_action() for _ in range(2000)])
    np.testing.assert_allclose(warm.mean(axis=0), agent.anchor, atol=0.05)
    np.testing.assert_allclose(warm.std(axis=0), agent.config.exploration_noise, rtol=0.1)
    args = decode(agent.anchor)
    assert args.weights[0] > 0.998 and args.tau == pytest.approx(0.4)

    obs = agent.buffer.obs[: len(agent.buffer)]
    before = agent.predict(obs)
    assert np.abs(before - agent.anchor).max() > 1.0  # a fresh actor is nowhere near it
    agent.train_step(49)  # not the first learning step: no fit
    assert np.isnan(agent.anchor_fit_loss)
    agent.train_step(50)
    assert agent.anchor_fit_loss < 0.05
    np.testing.assert_allclose(agent.predict(obs), np.broadcast_to(agent.anchor, before.shape), atol=0.5)
    with torch.no_grad():
        target = agent.actor_target(torch.from_numpy(agent.normalizer.normalize(obs))).numpy()
    np.testing.assert_allclose(target, np.broadcast_to(agent.anchor, before.shape), atol=0.5)

    plain = _agent(learning_starts=50)
    assert plain.anchor is None
    uniform = np.array([plain.warmup_action() for _ in range(2000)])
    assert uniform.min() < -4.5 and uniform.max() > 4.5 and abs(uniform.mean()) < 0.3


def test_a_bad_anchor_is_refused_by_name():
    with pytest.raises(ValueError, match="expected a static-weights spec"):
        TD3Config(anchor="fgd")
    with pytest.raises(ValueError, match="anchor_fit_steps=0"):
        TD3Config(anchor_fit_steps=0)
    with pytest.raises(ValueError, match="a ceiling needs the action mode 'ceiling'"):
        TD3(OBS, TD3Config(anchor="static-weights:w=1/0/0/0:tau=0.4:ceiling=0.9"), action_mode="full")
    assert TD3Config.from_json({k: v for k, v in TD3Config().to_json().items()
                                if k not in ("anchor", "anchor_fit_steps")}).anchor is None  # older cards


@pytest.mark.parametrize("mode", __import__("td3sched.rl.actions", fromlist=["ACTION_MODES"]).ACTION_MODES)
def test_every_action_mode_is_squashed_for_the_critics_as_decode_reads_it(mode):
    """The critics read an action through torch's squashing (``score_arguments``): for every mode it must
    be ``decode``'s arguments, one number per dimension, so that an action mode cannot be added to
    ``rl.actions`` without it (a fragmentation-mode critic once read five of its six numbers)."""
    from td3sched.rl.actions import action_size, decode
    from td3sched.rl.networks import score_arguments

    raw = np.linspace(-2.0, 2.5, action_size(mode))
    args = decode(raw, mode)
    expected = [*args.weights, args.tau]
    expected += [x for x in (args.ceiling, args.requests or None, args.balance or None, args.fragmentation or None)
                 if x is not None]
    got = score_arguments(torch.tensor(raw, dtype=torch.float64), mode).numpy()
    if mode == "seed":  # the fifth number is unused: tau 0
        assert got[4] == 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    agent = TD3(OBS, TD3Config(**SMALL), seed=1, action_mode=mode)
    q1, q2 = agent.critic(torch.zeros(3, OBS), torch.zeros(3, action_size(mode)))
    assert q1.shape == q2.shape == (3, 1)
