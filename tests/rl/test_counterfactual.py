"""Counterfactual branches: a forked branch is charged exactly what the episode itself is charged for
the same actions, branching leaves the episode untouched, failures reach the caller, and the critic
learns a state's action differences from them (``rl.counterfactual``, ``TD3Config.branch_every``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from td3sched.rl.counterfactual import Branch, BranchRequest, numpy_actor  # noqa: E402
from td3sched.rl.diagnose import branch_study  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.td3 import TD3, TD3Config  # noqa: E402
from td3sched.rl.train import CHECKPOINT_FILE, TrainSettings, read_checkpoint, train  # noqa: E402

SETTINGS = TrainSettings("tiny", seed=3, episode_hours=2.0)
SMALL = TD3Config(hidden=(32, 32), batch_size=32, buffer_size=5000, learning_starts=60, log_every=25,
                  branch_every=15, branch_batch=8, branch_horizon_s=600.0)


def _walk(env, actions, n):
    rewards, times = [], []
    for i in range(n):
        _, r, terminated, truncated, info = env.step_logits(actions[i % len(actions)])
        rewards.append(r)
        times.append(info.get("time_s"))
        if terminated or truncated:
            break
    return rewards, times


@pytest.fixture()
def env():
    e = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    e.reset(seed=5)
    yield e
    e.close()


def test_a_branch_is_charged_what_the_episode_is_charged_for_the_same_actions(env):
    rng = np.random.default_rng(1)
    _walk(env, rng.uniform(-5, 5, (7, 5)).astype(np.float32), 40)  # somewhere inside the window
    held = rng.uniform(-5, 5, (3, 5)).astype(np.float32)
    branches = env.branches(held, 900.0, workers=2)
    assert len(branches) == 3 and all(len(b.rewards) >= 2 for b in branches)
    # the episode itself, holding the first branch's action: the same charges, decision by decision
    rewards, times = _walk(env, held[:1], len(branches[0].rewards))
    first = branches[0]
    np.testing.assert_array_equal(first.rewards[: len(rewards)], rewards)
    np.testing.assert_array_equal(first.times_s[: len(times) - 1], times[: len(first.times_s) - 1])
    assert first.times_s[-1] >= first.start_s + 900.0 or np.isclose(first.times_s[-1], env.episode.end_s)
    assert not np.allclose([b.discounted() for b in branches], branches[0].discounted())  # actions matter


def test_branching_leaves_the_episode_untouched():
    rng = np.random.default_rng(2)
    actions = rng.uniform(-5, 5, (60, 5)).astype(np.float32)
    plain = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    branched = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    try:
        plain.reset(seed=7)
        branched.reset(seed=7)
        expected, _ = _walk(plain, actions, 60)
        got = []
        for i in range(60):
            if i % 20 == 5:
                branched.branches(actions[i:i + 2], 300.0, continuation=lambda obs: actions[0])
            got += _walk(branched, actions[i:i + 1], 1)[0]
        assert got == expected
    finally:
        plain.close()
        branched.close()


def test_reseed_gives_every_branch_one_other_generator(env):
    _walk(env, np.zeros((1, 5), np.float32), 30)
    a = np.random.default_rng(3).uniform(-5, 5, (2, 5)).astype(np.float32)
    twice = [env.branches(a, 600.0, reseed=11) for _ in range(2)]
    for x, y in zip(*twice):  # the same fresh generator: the same charges
        np.testing.assert_array_equal(x.rewards, y.rewards)


def test_bad_requests_and_failed_branches_name_the_problem(env):
    with pytest.raises(ValueError, match="expected rows of 5"):
        env.branches(np.zeros((2, 4)), 600.0)
    with pytest.raises(ValueError, match="horizon_s=0"):
        env.branches(np.zeros((2, 5)), 0.0)
    with pytest.raises(ValueError, match="finite rows"):
        BranchRequest(np.full((2, 5), np.nan), 60.0)

    def broken(obs):
        raise KeyError("no such node")

    with pytest.raises(RuntimeError, match="branch 0: .*no such node"):
        env.branches(np.zeros((2, 5), np.float32), 3600.0, continuation=broken)
    _, reward, _, _, _ = env.step_logits(np.zeros(5, np.float32))  # the decision still waits, and goes on
    assert np.isfinite(reward)
    idle = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    with pytest.raises(RuntimeError, match="without a pending decision"):
        idle.branches(np.zeros((2, 5)), 60.0)


def test_discounting_per_decision_and_per_hour():
    b = Branch(100.0, np.array([-1.0, -2.0, -4.0]), np.array([100.0, 3700.0, 7300.0]))
    assert b.discounted() == -7.0
    assert b.discounted(0.5) == pytest.approx(-1.0 - 1.0 - 1.0)
    # decision i opened at times [100, 100, 3700]: hours 0, 0, 1 after the fork
    assert b.discounted(gamma_per_hour=0.5) == pytest.approx(-1.0 - 2.0 - 2.0)


def test_the_numpy_actor_is_the_agents():
    agent = TD3(OBSERVATION_SIZE, TD3Config(hidden=(16, 16)), seed=4)
    obs = np.random.default_rng(4).normal(size=(8, OBSERVATION_SIZE)).astype(np.float32)
    agent.normalizer.update(obs * 3 + 1)
    np.testing.assert_allclose(numpy_actor(agent)(obs), agent.predict(obs), atol=1e-5)


def test_the_branch_loss_teaches_the_critic_a_states_action_differences():
    cfg = TD3Config(hidden=(32, 32), branch_every=1, branch_actions=4, branch_batch=32, learning_rate=1e-3)
    agent = TD3(OBSERVATION_SIZE, cfg, seed=5)
    rng = np.random.default_rng(5)
    for _ in range(200):  # the return is the state's value plus an effect of the CPU weight (softmax)
        obs = rng.normal(size=OBSERVATION_SIZE).astype(np.float32)
        actions = rng.uniform(-5, 5, (4, 5)).astype(np.float32)
        w_cpu = np.exp(actions[:, 0]) / np.exp(actions[:, :4]).sum(axis=1)
        agent.branch_buffer.add(obs, actions, 100.0 * obs[0] + 0.1 * w_cpu)
    before = agent.branch_loss()[1]
    for _ in range(500):
        loss, _ = agent.branch_loss()
        agent.critic_optimizer.zero_grad()
        loss.backward()
        agent.critic_optimizer.step()
    after = agent.branch_loss()[1]
    assert after > 0.9 and after > before + 0.3, (before, after)


def test_training_with_branches_resumes_exactly(tmp_path):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    train(straight, 150, SETTINGS, SMALL, checkpoint_every=100)
    train(broken, 110, SETTINGS, SMALL, checkpoint_every=100)
    train(broken, 150, SETTINGS, SMALL, checkpoint_every=100, resume=True)
    a, b = read_checkpoint(straight / CHECKPOINT_FILE), read_checkpoint(broken / CHECKPOINT_FILE)
    branches = a["agent"]["branch_buffer"]
    assert branches["size"] == len(range(60, 150, 15))  # every 15th step after the 60-step warm-up
    for key, value in branches.items():
        assert (torch.equal(value, b["agent"]["branch_buffer"][key]) if isinstance(value, torch.Tensor)
                else value == b["agent"]["branch_buffer"][key]), key
    for key, value in a["agent"]["critic"].items():
        assert torch.equal(value, b["agent"]["critic"][key]), key
    returns = branches["returns"].numpy()
    assert np.isfinite(returns).all() and (returns <= 0).all() and returns.std(axis=1).max() > 0
    assert load_model(straight).config.branch_every == 15


def test_config_refuses_bad_branch_settings():
    with pytest.raises(ValueError, match="branch_actions=1"):
        TD3Config(branch_actions=1)
    with pytest.raises(ValueError, match="branch_horizon_s=-1"):
        TD3Config(branch_horizon_s=-1.0)


def test_branch_study_separates_the_action_from_the_state():
    study = branch_study(None, "tiny", span="train", episode_hours=2.0, states=4, actions=3, horizon_s=1800.0,
                         every=10)
    assert study.states == 4 and study.actions == 3
    assert 0 < study.action_share_returns <= study.action_share_differences <= 1.0
    assert study.action_rms > 0 and study.return_std > study.action_rms


def test_branch_imitation_pulls_the_actor_to_each_states_best_branch():
    cfg = TD3Config(hidden=(32, 32), branch_every=1, branch_actions=3, branch_batch=32, branch_imitation=1.0,
                    learning_rate=1e-3)
    agent = TD3(OBSERVATION_SIZE, cfg, seed=6)
    rng = np.random.default_rng(6)
    best = np.array([3.0, -3.0, 0.0, 0.0, 2.0], np.float32)
    for i in range(100):
        obs = rng.normal(size=OBSERVATION_SIZE).astype(np.float32)
        actions = np.vstack([rng.uniform(-5, 5, (2, 5)), best]).astype(np.float32)[rng.permutation(3)]
        returns = -np.abs(actions - best).sum(axis=1)  # the best branch is `best`, wherever it sits
        agent.branch_buffer.add(obs, actions, returns if i % 10 else np.zeros(3))  # every 10th: a tie
    obs = torch.from_numpy(agent.normalizer.normalize(rng.normal(size=(16, OBSERVATION_SIZE)).astype(np.float32)))
    def distance():
        with torch.no_grad():
            return float((agent.actor(obs) - torch.from_numpy(best)).abs().mean())

    start = distance()
    for _ in range(300):
        loss = agent.branch_imitation_loss()
        agent.actor_optimizer.zero_grad()
        loss.backward()
        agent.actor_optimizer.step()
    end = distance()
    assert end < 0.5 < 2.0 < start, (start, end)
    with pytest.raises(ValueError, match="branch_imitation=-1"):
        TD3Config(branch_imitation=-1.0)


def test_pending_utilisation_is_what_the_action_ranks(env):
    _walk(env, np.zeros((1, 5), np.float32), 10)
    u = env.pending_utilisation()
    assert u.ndim == 2 and u.shape[1] == 4 and len(u) >= 1 and np.isfinite(u).all()
    u[:] = -1.0  # a copy: the simulator's own is untouched
    assert (env.pending_utilisation() >= 0).all()
    idle = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    with pytest.raises(RuntimeError, match="without a pending decision"):
        idle.pending_utilisation()


def test_pending_pod_is_the_pod_the_next_step_places(env):
    _walk(env, np.zeros((1, 5), np.float32), 10)
    pod = env.pending_pod()
    sim = env._policy.sim
    assert sim.node[pod] == -1 and 0 <= pod < len(env.world.workload.name)
    env.step_logits(np.zeros(5, np.float32))
    assert sim.node[pod] >= 0 and env.pending_pod() != pod
    idle = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    with pytest.raises(RuntimeError, match="without a pending decision"):
        idle.pending_pod()


def test_a_branch_holds_its_action_as_the_episode_does():
    """With an action hold the branch's first action holds for the hold, as the episode's step would."""
    env = ClusterSchedulingEnv("tiny", "train", 2.0, "full", action_hold_s=300.0)
    try:
        env.reset(seed=5)
        rng = np.random.default_rng(3)
        _walk(env, rng.uniform(-5, 5, (3, 5)).astype(np.float32), 3)
        actions = rng.uniform(-5, 5, (2, 5)).astype(np.float32)
        branches = env.branches(actions, 900.0, workers=2)
        rewards, times = _walk(env, actions[:1], len(branches[0].rewards))
        np.testing.assert_array_equal(branches[0].rewards[: len(rewards)], rewards)
        assert np.diff(branches[0].times_s[:-1]).min() >= 300.0  # one charge per held action
    finally:
        env.close()


def _top_and_other(env, base):
    """The pending decision's unique best node under ``base``'s score and its worst node, or None when
    the best is tied."""
    from td3sched.policy.static_weights import product_score
    from td3sched.rl.actions import decode

    args = decode(base, "full")
    scores = product_score(env.pending_utilisation(), None, args.weights, args.tau)
    order = np.argsort(-scores, kind="stable")
    if len(order) < 2 or scores[order[0]] == scores[order[1]]:
        return None
    return int(order[0]), int(order[-1])


def test_a_pod_placed_by_hand_is_charged_as_its_branch_and_the_scores_own_choice_changes_nothing():
    base = np.array([5.0, 4.3, -5.0, 4.3, -5.0], np.float32)  # tiny's static best
    plain = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    placed = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    try:
        plain.reset(seed=7)
        placed.reset(seed=7)
        for _ in range(100):  # a decision with a unique best where the worst node has another future
            _walk(plain, base[None], 1)
            _walk(placed, base[None], 1)
            if (nodes := _top_and_other(placed, base)) is None:
                continue
            top, other = nodes
            by_score, to_top, to_other = placed.branches(np.repeat(base[None], 3, axis=0), 1800.0,
                                                         nodes=[-1, top, other])
            np.testing.assert_array_equal(by_score.rewards, to_top.rewards)  # the score's unique best is that node
            if by_score.discounted() != to_other.discounted():
                break
        else:
            pytest.fail("in 100 decisions, no pod placed by hand on another node changed what the cluster was charged")
        # the episode placing its pod by hand is charged what the branch placing it there was
        _, first, _, _, _ = placed.step_logits(base, node=other)
        rest, _ = _walk(placed, base[None], len(to_other.rewards) - 1)
        np.testing.assert_array_equal([first] + rest, to_other.rewards[: 1 + len(rest)])
        _, same, _, _, _ = plain.step_logits(base, node=top)  # placing by hand where the score would: no change
        np.testing.assert_array_equal([same] + _walk(plain, base[None], 20)[0], by_score.rewards[:21])
    finally:
        plain.close()
        placed.close()


def test_a_node_outside_the_decision_or_in_the_ceiling_mode_is_refused(env):
    k = len(env.pending_utilisation())
    for bad in (k, -1, 1.0, True):
        with pytest.raises(ValueError, match=f"node {bad!r}: expected an index into the pending decision's {k}"):
            env.step_logits(np.zeros(5, np.float32), node=bad)
    with pytest.raises(ValueError, match=r"node 99: .* \(or -1: the score's choice\)"):
        env.branches(np.zeros((2, 5), np.float32), 60.0, nodes=[-1, 99])
    with pytest.raises(ValueError, match="one index >= -1 per row of actions"):
        BranchRequest(np.zeros((2, 5), np.float32), 60.0, nodes=(0,))
    _, reward, _, _, _ = env.step_logits(np.zeros(5, np.float32), node=k - 1)  # the decision still waits
    assert np.isfinite(reward)
    ceiling = ClusterSchedulingEnv("tiny", "train", 2.0, "ceiling")
    try:
        ceiling.reset(seed=5)
        with pytest.raises(ValueError, match="not supported in the ceiling action mode"):
            ceiling.step_logits(np.zeros(6, np.float32), node=0)
    finally:
        ceiling.close()


def test_pending_scores_are_what_the_score_places_by_and_asking_changes_nothing():
    """``pending_scores``: the action's scores of the pending decision's nodes, the sibling spread included,
    with each node's siblings; the pod lands on their best, and an episode that asks at every decision is
    charged what one that never asks is."""
    base = np.array([5.0, 4.3, -5.0, 4.3, -5.0], np.float32)  # tiny's static best
    asking = ClusterSchedulingEnv("tiny", "train", 2.0, "full", sibling_spread=3.0)
    quiet = ClusterSchedulingEnv("tiny", "train", 2.0, "full", sibling_spread=3.0)
    try:
        asking.reset(seed=7)
        quiet.reset(seed=7)
        placed = {}
        policy = asking._policy
        bound = policy.bound
        policy.bound = lambda pod, node, cluster: (placed.__setitem__(pod.index, node), bound(pod, node, cluster))
        with_siblings = unique = 0
        for _ in range(150):
            scores, siblings = asking.pending_scores(base)
            u = asking.pending_utilisation()
            assert scores.shape == siblings.shape == (len(u),) and ((0 <= scores) & (scores <= 1)).all()
            with_siblings += int(siblings.any())
            if siblings.any():  # a node with a sibling scores below every node without one (spread 3)
                assert scores[siblings > 0].max() < scores[siblings == 0].max(initial=np.inf) or siblings.all()
            pod, nodes = asking.pending_pod(), policy.pending[1]
            ranked = np.sort(scores)
            _, r_ask, *_ = asking.step_logits(base)
            _, r_quiet, *_ = quiet.step_logits(base)
            assert r_ask == r_quiet
            if len(ranked) >= 2 and ranked[-1] > ranked[-2]:  # a unique best: that is where the pod went
                unique += 1
                assert placed[pod] == nodes[int(np.argmax(scores))]
        assert with_siblings > 0 and unique > 0, (with_siblings, unique)
        with pytest.raises(ValueError, match="expected"):
            asking.pending_scores(np.zeros(3, np.float32))
    finally:
        asking.close()
        quiet.close()
    idle = ClusterSchedulingEnv("tiny", "train", 2.0, "full")
    with pytest.raises(RuntimeError, match="without a pending decision"):
        idle.pending_scores(base)
