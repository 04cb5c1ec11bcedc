"""The Gymnasium env over the simulator on the shipped ``tiny`` scenario: episodes end to end, step
rewards that sum to the run's episode reward, the static-weights score, determinism, clean threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from td3sched.policy.static_weights import StaticWeights  # noqa: E402
from td3sched.rl.env import ENV_ID, ClusterSchedulingEnv  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

HOURS = 3.0


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("td3sched-env")]


def _episode(env, act):
    """Step ``env`` with ``act()`` to the end of its episode: (step rewards, last info)."""
    rewards = []
    while True:
        obs, reward, terminated, truncated, info = env.step(act())
        assert env.observation_space.contains(obs)
        rewards.append(reward)
        if terminated or truncated:
            return rewards, info


def test_registered_env_runs_episodes_whose_rewards_sum_to_the_episode_reward():
    env = gym.make(ENV_ID, scenario="tiny", span="train", episode_hours=HOURS)
    obs, info = env.reset(seed=5)
    assert env.observation_space.contains(obs)
    lo, hi = env.unwrapped.span_s
    for _ in range(2):
        window = env.unwrapped.episode
        assert lo <= window.start_s and window.end_s <= hi and window.end_s - window.start_s == HOURS * 3600
        rewards, last = _episode(env, env.action_space.sample)
        metrics = last["record"]["metrics"]
        assert len(rewards) > 10 and last["episode"]["l"] == len(rewards)
        assert sum(rewards) == pytest.approx(metrics["episode_reward"], rel=1e-12, abs=1e-12)
        assert last["episode"]["r"] == pytest.approx(metrics["episode_reward"], rel=1e-12)
        assert all(r <= 0 for r in rewards)
        env.reset()
    env.close()
    assert not _workers()


def test_the_decision_time_and_the_reward_scale_are_the_runs():
    """``decision_time_s`` is the pending decision's time (the next step's ``time_s`` follows it), and
    the rewards times ``max_nodes`` are the run's cost in node-hours."""
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    assert env.max_nodes is None
    env.reset(seed=3)
    assert env.max_nodes == 26.0  # tiny's node slots: its pools' max_count, 20 + 6
    lo, hi = env.episode.start_s, env.episode.end_s
    total, times = 0.0, [env.decision_time_s]
    while True:
        _, reward, terminated, truncated, info = env.step(np.zeros(5, np.float32))
        total += reward
        if terminated or truncated:
            break
        assert info["time_s"] == env.decision_time_s
        times.append(env.decision_time_s)
    assert lo <= times[0] and times[-1] <= hi and times == sorted(times) and len(times) > 10
    assert -total * env.max_nodes == pytest.approx(info["record"]["metrics"]["cost_node_hours"], rel=1e-9)
    env.close()


def test_a_constant_action_is_the_static_weights_run():
    """Logits 0 -> equal weights; seed mode -> tau 0: static-weights' defaults, the same run exactly."""
    env = ClusterSchedulingEnv("tiny", "train", HOURS, action_mode="seed")
    env.reset(seed=2)
    rewards, last = _episode(env, lambda: np.zeros(5, np.float32))
    ep = env.episode
    record = Simulation(env.world, StaticWeights(), ep.sim_seed, ep.start_s, ep.end_s).run()
    assert last["record"]["metrics"] == record["metrics"]
    assert last["record"]["series_hourly"] == record["series_hourly"]
    assert last["weights"].tolist() == [0.25] * 4 and last["tau"] == 0.0
    env.close()


def test_deterministic_given_the_seed():
    def run():
        env = ClusterSchedulingEnv("tiny", "train", HOURS)
        obs, _ = env.reset(seed=11)
        rng = np.random.default_rng(0)
        trace = [obs]
        for _ in range(150):
            obs, reward, _, truncated, _ = env.step(rng.uniform(-1, 1, 5))
            trace += [obs, np.array([reward])]
            if truncated:
                obs, _ = env.reset()
                trace.append(obs)
        env.close()
        return np.concatenate(trace)

    np.testing.assert_array_equal(run(), run())


def test_the_world_is_built_once_per_seed():
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    env.reset(seed=1)
    world = env.world
    env.reset()
    env.reset(seed=1)
    assert env.world is world
    env.reset(seed=2)
    assert env.world is not world and env.world_seed == 2
    env.close()


def test_abandoned_episodes_end_their_worker():
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    env.reset(seed=1)
    for _ in range(5):
        env.step(env.action_space.sample())
    assert len(_workers()) == 1
    env.reset()  # abandons the running episode
    assert len(_workers()) == 1
    env.close()
    assert not _workers()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros(5))


def test_a_replayed_episode_reaches_the_same_state():
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    env.reset(seed=4)
    actions = [np.random.default_rng(i).uniform(-5, 5, 5).astype(np.float32) for i in range(40)]
    for a in actions:
        obs, *_ = env.step(a)
    state = env.state_dict()
    after = env.np_random.integers(1 << 30)
    replay = ClusterSchedulingEnv("tiny", "train", HOURS)
    replay.restore(state)
    for a in actions:
        again, *_ = replay.step(a)
    np.testing.assert_array_equal(again, obs)
    assert replay.np_random.integers(1 << 30) == after
    env.close()
    replay.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="episode_hours"):
        ClusterSchedulingEnv("tiny", episode_hours=0)
    with pytest.raises(ValueError, match="action mode 'tau'"):
        ClusterSchedulingEnv("tiny", action_mode="tau")
    with pytest.raises(ValueError, match="no span 'week'"):
        ClusterSchedulingEnv("tiny", span="week")
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    env.reset(seed=1)
    with pytest.raises(ValueError, match="finite"):
        env.step([0, 0, np.inf, 0, 0])
    env.step(np.zeros(5))  # the episode goes on after a refused action
    env.close()


def test_the_action_space_is_the_conventional_box_scaled_onto_the_pre_activations():
    """[-1, 1]^5 for any agent (Gymnasium's env checker asks for a symmetric, normalised box); ``step(a)`` is
    ``step_logits(LOGIT_LIMIT * a)``, the units td3sched's own TD3 acts in, so its training is unchanged."""
    import warnings

    from td3sched.rl.actions import LOGIT_LIMIT, action_to_weights

    from gymnasium.utils.env_checker import check_env

    env = ClusterSchedulingEnv("tiny", "train", 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert not [w for w in caught if "action" in str(w.message).lower()], [str(w.message) for w in caught]
    env.close()
    env = gym.make(ENV_ID, scenario="tiny", span="train", episode_hours=1.0)
    space = env.action_space
    assert space.shape == (5,) and space.dtype == np.float32
    assert np.all(space.low == -1.0) and np.all(space.high == 1.0)
    env.close()

    a, b = ClusterSchedulingEnv("tiny", "train", 1.0), ClusterSchedulingEnv("tiny", "train", 1.0)
    a.reset(seed=4)
    b.reset(seed=4)
    rng = np.random.default_rng(4)
    for _ in range(40):
        action = rng.uniform(-1, 1, 5).astype(np.float32)
        got_a, got_b = a.step(action), b.step_logits(LOGIT_LIMIT * action)
        assert np.array_equal(got_a[0], got_b[0]) and got_a[1] == got_b[1]
        weights, tau = action_to_weights(LOGIT_LIMIT * action)
        assert np.allclose(got_a[4]["weights"], weights) and got_a[4]["tau"] == pytest.approx(tau)
        if got_a[3]:
            break
    a.close()
    b.close()


def test_the_entry_point_registers_the_env_in_a_fresh_interpreter():
    """pyproject's gymnasium.envs entry point names a function that registers ENV_ID (Gymnasium 0.29
    calls it on import); and the module-qualified id works with any Gymnasium, importing nothing first."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    target = pyproject["project"]["entry-points"]["gymnasium.envs"]["td3sched"]
    module, func = target.split(":")
    code = (f"import importlib, gymnasium as gym; assert {ENV_ID!r} not in gym.registry; "
            f"getattr(importlib.import_module({module!r}), {func!r})(); "
            f"e = gym.make({ENV_ID!r}, scenario='tiny', episode_hours=1.0); print(e.action_space)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Box(-1.0, 1.0, (5,), float32)" in proc.stdout
    code = (f"import gymnasium as gym; e = gym.make('td3sched.envs:{ENV_ID}', scenario='tiny', episode_hours=1.0); "
            "print(type(e.unwrapped).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ClusterSchedulingEnv" in proc.stdout, proc.stderr


def _fresh(code: str, pythonpath: list[str]):
    """``code`` in a fresh interpreter with ``pythonpath`` first on its path."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.skipif(int(gym.__version__.split(".")[0]) < 1, reason="Gymnasium 0.x loads entry-point plugins")
def test_gymnasium_1_needs_the_module_in_the_id():
    """What the docs say of Gymnasium 1.x: the bare id is unknown to a fresh interpreter (1.0 dropped
    entry-point plugins), the module-qualified id works. Fails if a Gymnasium brings plugins back."""
    proc = _fresh(f"import gymnasium as gym; gym.make({ENV_ID!r})", [])
    assert proc.returncode != 0 and "Namespace td3sched not found" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def gymnasium_029(tmp_path_factory):
    """Gymnasium 0.29.1 in a folder of its own (pip, no dependencies: the installed Gymnasium's serve),
    and a td3sched dist-info there whose entry points are pyproject's: an installed td3sched as
    Gymnasium 0.29 finds it."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    folder = tmp_path_factory.mktemp("gymnasium-0.29")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder),
                           "gymnasium==0.29.1"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"pip could not install gymnasium==0.29.1 (no network?): {proc.stderr.strip()[-300:]}")
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    dist = folder / "td3sched-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: td3sched\nVersion: 0.0.0\n")
    points = pyproject["project"]["entry-points"]["gymnasium.envs"]
    (dist / "entry_points.txt").write_text("[gymnasium.envs]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return folder


def test_gymnasium_029_makes_the_env_by_its_bare_id_without_an_import(gymnasium_029):
    """Gymnasium 0.29 calls the entry point from inside ``import gymnasium``: the registration must
    not touch the half-imported package (it once raised there, breaking ``import gymnasium`` for every
    program in an environment with td3sched installed)."""
    import td3sched

    src = str(__import__("pathlib").Path(td3sched.__file__).resolve().parents[1])
    code = (f"import sys, gymnasium as gym; assert gym.__version__ == '0.29.1', gym.__version__; "
            f"assert 'td3sched' not in sys.modules or 'td3sched.envs' in sys.modules; "
            f"e = gym.make({ENV_ID!r}, scenario='tiny', episode_hours=1.0); e.reset(seed=1); "
            f"print(e.action_space, type(e.unwrapped).__name__); "
            f"print(type(gym.make('td3sched.envs:{ENV_ID}', scenario='tiny').unwrapped).__name__)")
    proc = _fresh(code, [str(gymnasium_029), src])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["Box(-1.0, 1.0, (5,), float32) ClusterSchedulingEnv", "ClusterSchedulingEnv"]


def test_each_step_says_how_long_its_transition_took_and_the_steps_cover_the_window():
    """info["elapsed_s"]: from the decision a step answers to the next one (to the window's end on the
    last step); the semi-MDP discount reads it."""
    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    env.reset(seed=5)
    elapsed, times = [], []
    while True:
        _, _, _, truncated, info = env.step(env.action_space.sample())
        elapsed.append(info["elapsed_s"])
        if truncated:
            break
        times.append(info["time_s"])
    window = env.episode
    assert all(e >= 0 for e in elapsed) and len(elapsed) > 10
    assert elapsed[1:-1] == pytest.approx(np.diff(times).tolist())
    assert times[0] - elapsed[0] >= window.start_s            # the first decision came after the start
    assert sum(elapsed) == pytest.approx(window.end_s - (times[0] - elapsed[0]))
    env.close()


def test_a_held_action_is_one_step_per_hold_charged_what_its_decisions_were_charged():
    """action_hold_s: the step's action scores every pod of the next hold_s seconds, the step's reward
    is their charges, and the next observation is the first decision after the hold. A constant action
    is the same run whatever the hold; a varying one is another run."""
    constant = np.array([1.0, 0.5, -5.0, 0.5, -5.0], np.float32)
    per_decision = ClusterSchedulingEnv("tiny", "train", HOURS)
    held = ClusterSchedulingEnv("tiny", "train", HOURS, action_hold_s=600.0)
    per_decision.reset(seed=4)
    held.reset(seed=4)
    rewards, last = _episode(per_decision, lambda: constant / 5)
    held_rewards, held_last = _episode(held, lambda: constant / 5)
    assert held_last["record"]["metrics"] == last["record"]["metrics"]
    assert sum(held_rewards) == pytest.approx(sum(rewards), rel=1e-12)
    assert 3 < len(held_rewards) < len(rewards) / 2
    # every step but the last spans at least the hold, and they cover the window as before
    held.reset(seed=4)
    elapsed, times = [], []
    rng = np.random.default_rng(0)
    while True:
        _, _, _, truncated, info = held.step(rng.uniform(-1, 1, 5))
        elapsed.append(info["elapsed_s"])
        if truncated:
            break
        times.append(info["time_s"])
    assert min(elapsed[1:-1]) >= 600.0 and np.diff(times).min() >= 600.0
    assert sum(elapsed) == pytest.approx(held.episode.end_s - (times[0] - elapsed[0]))
    per_decision.close()
    held.close()


def test_a_bad_action_hold_is_refused_by_name():
    for bad in (-1.0, float("nan"), float("inf"), "ten"):
        with pytest.raises(ValueError, match=f"action hold {bad!r}: expected a finite number"):
            ClusterSchedulingEnv("tiny", "train", HOURS, action_hold_s=bad)


def test_a_finished_episode_frees_its_simulation_without_the_cyclic_collector():
    """The simulation and its hand-off policy point at each other; the env breaks the cycle when the
    episode ends, so a long training does not keep every finished run (gigabytes each on dlrm) until
    the cyclic collector happens to run."""
    import gc
    import weakref

    env = ClusterSchedulingEnv("tiny", "train", HOURS)
    gc.collect()
    gc.disable()
    try:
        env.reset(seed=1)
        finished = weakref.ref(env._policy.sim)
        _episode(env, lambda: np.zeros(5, np.float32))
        env.reset()
        abandoned = weakref.ref(env._policy.sim)
        env.step(np.zeros(5))
        env.reset()  # abandons the running episode
        assert finished() is None and abandoned() is None
    finally:
        gc.enable()
        env.close()


def test_a_warmed_up_episode_starts_from_the_cluster_its_static_score_leaves():
    """warmup_hours with warmup_score: the warm-up's pods are placed by the static score without steps
    or rewards, so an episode whose steps take that same score is evaluate's warmed-up run exactly,
    and its step rewards still sum to the measured window's episode reward."""
    env = ClusterSchedulingEnv("tiny", "train", HOURS, action_mode="seed", warmup_hours=2.0,
                               warmup_score="static-weights:w=0.25/0.25/0.25/0.25:tau=0")
    _, info = env.reset(seed=2)
    ep = env.episode
    assert ep.start_s >= env.span_s[0] + 2 * 3600  # a whole warm-up inside the span
    rewards, last = _episode(env, lambda: np.zeros(5, np.float32))
    record = Simulation(env.world, StaticWeights(), ep.sim_seed, ep.start_s, ep.end_s, warmup_s=7200.0).run()
    assert last["record"]["metrics"] == record["metrics"] and record["runtime"]["warmup_s"] == 7200.0
    assert sum(rewards) == pytest.approx(record["metrics"]["episode_reward"], rel=1e-12)
    cold = Simulation(env.world, StaticWeights(), ep.sim_seed, ep.start_s, ep.end_s).run()
    assert cold["metrics"] != record["metrics"]  # the warm-up changed the window
    # another warm-up score places the warm-up's pods otherwise: the same steps give another run
    other = ClusterSchedulingEnv("tiny", "train", HOURS, action_mode="seed", warmup_hours=2.0,
                                 warmup_score="static-weights:w=0/1/0/0:tau=0")
    other.reset(options={"episode": info["episode_window"]})
    first_time = None
    while True:
        _, _, _, truncated, step_info = other.step(np.zeros(5, np.float32))
        first_time = step_info.get("time_s") if first_time is None else first_time
        if truncated:
            break
    assert first_time >= ep.start_s  # no step before the window: the warm-up took none
    assert step_info["record"]["metrics"] != record["metrics"]
    env.close()
    other.close()


def test_a_bad_warm_up_is_refused_by_name():
    score = "static-weights:w=1/0/0/0:tau=0.4"
    with pytest.raises(ValueError, match="a warm-up needs both"):
        ClusterSchedulingEnv("tiny", "train", HOURS, warmup_hours=2.0)
    with pytest.raises(ValueError, match="a warm-up needs both"):
        ClusterSchedulingEnv("tiny", "train", HOURS, warmup_score=score)
    with pytest.raises(ValueError, match="warm-up hours -1.0: expected a number"):
        ClusterSchedulingEnv("tiny", "train", HOURS, warmup_hours=-1.0, warmup_score=score)
    with pytest.raises(ValueError, match="expected a static-weights spec"):
        ClusterSchedulingEnv("tiny", "train", HOURS, warmup_hours=2.0, warmup_score="koord-loadaware")
    with pytest.raises(ValueError, match="a ceiling needs the action mode 'ceiling'"):
        ClusterSchedulingEnv("tiny", "train", HOURS, warmup_hours=2.0, warmup_score=score + ":ceiling=0.9")
    with pytest.raises(ValueError, match="fixes tau at 0"):
        ClusterSchedulingEnv("tiny", "train", HOURS, action_mode="seed", warmup_hours=2.0, warmup_score=score)
