"""Parallel experience collection (``rl.workers``): env copies in their own processes, stepped in lockstep
with the learner's; a run with copies resumes exactly, each copy draws its own windows, and a copy's
failure reaches the learner naming the copy."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv  # noqa: E402
from td3sched.rl.td3 import TD3Config  # noqa: E402
from td3sched.rl.train import CHECKPOINT_FILE, TrainSettings, read_checkpoint, train  # noqa: E402
from td3sched.rl.workers import EnvWorker, EnvWorkerError  # noqa: E402

TWO = TrainSettings("tiny", seed=3, episode_hours=2.0, action_hold_s=600.0, env_workers=2)
SMALL = TD3Config(hidden=(32, 32), batch_size=32, buffer_size=5000, learning_starts=40, log_every=25)


def test_a_run_with_two_env_copies_resumes_exactly(tmp_path):
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    train(straight, 160, TWO, SMALL, checkpoint_every=40)
    train(broken, 120, TWO, SMALL, checkpoint_every=40)  # 20 ten-minute steps a copy: mid-episode
    train(broken, 160, TWO, SMALL, checkpoint_every=40, resume=True)

    a, b = read_checkpoint(straight / CHECKPOINT_FILE), read_checkpoint(broken / CHECKPOINT_FILE)
    for name in ("actor", "critic"):
        for key, value in a["agent"][name].items():
            assert torch.equal(value, b["agent"][name][key]), (name, key)
    assert torch.equal(a["agent"]["buffer"]["obs"], b["agent"]["buffer"]["obs"])
    assert a["envs"] == b["envs"] and len(a["envs"]) == 2
    assert a["loop"]["episodes"] == b["loop"]["episodes"] >= 4  # 2-hour windows of 12 steps, on two copies
    assert a["loop"]["recent_returns"] == b["loop"]["recent_returns"]
    card = json.loads((straight / "model.json").read_text())
    assert card["training"]["env_workers"] == 2 and card["training"]["steps"] == 160


def test_each_copy_draws_its_own_windows_and_copy_zero_the_seeds_own():
    env = ClusterSchedulingEnv("tiny", episode_hours=2.0)
    try:
        def windows(**options):
            env.reset(seed=3, options=options or None)
            drawn = [env.episode]
            for _ in range(3):
                env.reset()
                drawn.append(env.episode)
            return drawn

        own, zero, one, two = windows(), windows(stream=0), windows(stream=1), windows(stream=2)
        assert own == zero
        assert len({w.start_s for w in own + one + two}) > 8 and own != one != two
        assert windows(stream=1) == one  # a copy's draws are its seed's and its index's alone
        assert {w.world_seed for w in own + one + two} == {3}  # one world, other windows
        with pytest.raises(ValueError, match="stream -1: expected an integer >= 0"):
            env.reset(seed=3, options={"stream": -1})
        with pytest.raises(ValueError, match="stream 1 without a seed"):
            env.reset(options={"stream": 1})
    finally:
        env.close()


def test_a_copy_s_error_and_death_reach_the_learner_naming_the_copy():
    worker = EnvWorker(TWO, 1)
    try:
        worker.wait_ready()
        first = worker.reset(3, 1)
        assert first.shape == (35,)
        worker.send_step(np.zeros(3, dtype=np.float32))  # the action is 5 numbers wide
        with pytest.raises(EnvWorkerError, match=r"env worker 1: ValueError: action \[0.0, 0.0, 0.0\]: expected 5 finite"):
            worker.receive_step()
        worker.send_step(np.zeros(5, dtype=np.float32))  # still serving after an error
        obs, reward, terminated, truncated, elapsed_s, next_first = worker.receive_step()
        assert obs.shape == (35,) and np.isfinite(reward) and elapsed_s > 0 and not terminated
        os.kill(worker._process.pid, signal.SIGKILL)
        with pytest.raises(EnvWorkerError, match=r"env worker 1 exited \(code -9\)"):
            worker.state_dict()
    finally:
        worker.close()


def test_learn_refuses_steps_that_are_not_whole_iterations_and_branches(tmp_path):
    with pytest.raises(ValueError, match="multiples of the 2 env workers"):
        train(tmp_path / "a", 41, TWO, SMALL)
    with pytest.raises(ValueError, match="multiples of the 2 env workers"):
        train(tmp_path / "b", 40, TWO, SMALL, checkpoint_every=15)
    with pytest.raises(ValueError, match="expected 1 env worker, not 2"):
        train(tmp_path / "c", 40, TWO, TD3Config(**{**SMALL.to_json(), "branch_every": 10}))
    with pytest.raises(ValueError, match="env_workers 0: expected an integer >= 1"):
        TrainSettings("tiny", env_workers=0)


runner = CliRunner()


def test_train_command_takes_env_workers(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--scenario", "tiny", "--steps", "40", "--episode-hours", "2", "--learning-starts", "20",
            "--action-hold", "600", "--env-workers", "2", "--checkpoint-every", "20", "--out", str(out),
            "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 env workers" in " ".join(result.output.split())
    assert json.loads((out / "model.json").read_text())["training"]["env_workers"] == 2
    odd = runner.invoke(app, args[:4] + ["41"] + args[5:-3] + ["--out", str(tmp_path / "odd"), "--no-progress"])
    assert odd.exit_code == 2 and "multiples of the 2 env workers" in " ".join(odd.output.split())
    clash = runner.invoke(app, ["train", "--steps", "60", "--out", str(out), "--resume", "--env-workers", "1"])
    assert clash.exit_code == 2 and "'env_workers': (1, 2)" in " ".join(clash.output.split())
    alone = runner.invoke(app, ["train", "--steps", "40", "--out", str(tmp_path / "alone"), "--ray"])
    assert alone.exit_code == 2 and "--ray local: Ray runs the env copies 2..N of --env-workers N: expected " \
        "--env-workers 2 or more" in " ".join(alone.output.split())


def test_a_checkpoint_written_before_env_copies_resumes_as_one_copy(tmp_path):
    """Format 1 (one env: ``env``, its actions and observation unlisted) reads as a list of one copy."""
    settings = TrainSettings("tiny", seed=3, episode_hours=2.0)
    straight, old = tmp_path / "straight", tmp_path / "old"
    train(straight, 90, settings, SMALL, checkpoint_every=45)
    train(old, 45, settings, SMALL, checkpoint_every=45)
    state = read_checkpoint(old / CHECKPOINT_FILE)
    loop = state["loop"]
    state.update(format=1, env=state.pop("envs")[0], episode_actions=state["episode_actions"][0],
                 loop={**loop, "obs": loop["obs"][0], "episode_reward": loop["episode_reward"][0]})
    del state["settings"]["env_workers"]  # a setting added with the copies: 1 when absent
    torch.save(state, old / CHECKPOINT_FILE)
    train(old, 90, settings, SMALL, checkpoint_every=45, resume=True)
    a, b = read_checkpoint(straight / CHECKPOINT_FILE), read_checkpoint(old / CHECKPOINT_FILE)
    for key, value in a["agent"]["actor"].items():
        assert torch.equal(value, b["agent"]["actor"][key]), key
    assert a["envs"] == b["envs"] and b["format"] == 2


def test_copies_as_ray_actors_give_the_same_run(tmp_path):
    """``--ray``: copies 1..N-1 as Ray actors on a local instance the run starts and stops."""
    ray = pytest.importorskip("ray")
    processes, actors = tmp_path / "processes", tmp_path / "actors"
    train(processes, 60, TWO, SMALL)
    train(actors, 60, TWO, SMALL, ray_address="local")
    assert not ray.is_initialized()  # the run shut down the instance it started
    a, b = read_checkpoint(processes / CHECKPOINT_FILE), read_checkpoint(actors / CHECKPOINT_FILE)
    for key, value in a["agent"]["critic"].items():
        assert torch.equal(value, b["agent"]["critic"][key]), key
    assert a["envs"] == b["envs"] and a["loop"]["recent_returns"] == b["loop"]["recent_returns"]
    with pytest.raises(ValueError, match="expected 2 env workers or more, not 1"):
        train(tmp_path / "one", 60, TrainSettings("tiny", seed=3, episode_hours=2.0), SMALL, ray_address="local")


def test_a_ray_copy_s_error_and_death_reach_the_learner_naming_the_copy():
    pytest.importorskip("ray")
    from td3sched.ray_session import RaySession
    from td3sched.rl.workers import RayEnvWorker

    with RaySession("local", 1) as ray:
        worker = RayEnvWorker(TWO, 1)
        worker.wait_ready()
        assert worker.reset(3, 1).shape == (35,)
        worker.send_step(np.zeros(3, dtype=np.float32))
        with pytest.raises(EnvWorkerError, match=r"env worker 1 \(Ray actor\): ValueError: action \[0.0, 0.0, 0.0\]"):
            worker.receive_step()
        worker.send_step(np.zeros(5, dtype=np.float32))  # still serving after an error
        assert worker.receive_step()[0].shape == (35,)
        ray.kill(worker._actor)
        # ray.kill is asynchronous: a call the actor receives before the kill lands is still answered
        deadline = time.monotonic() + 60.0
        with pytest.raises(EnvWorkerError, match=r"env worker 1 \(Ray actor\) died"):
            while time.monotonic() < deadline:
                worker.state_dict()
        worker.close()


def test_a_worker_exits_when_the_learner_is_killed(tmp_path):
    """A learner killed with SIGKILL takes its workers with it at once, not at their next message: here
    the worker is building dlrm's world for its first episode (about a minute), and is gone well before
    it would have built it."""
    import subprocess
    import sys
    import time

    script = ("import threading, time\n"
              "from td3sched.rl.train import TrainSettings\n"
              "from td3sched.rl.workers import EnvWorker\n"
              "if __name__ == '__main__':\n"
              "    worker = EnvWorker(TrainSettings('dlrm', seed=3), 1)\n"
              "    worker.wait_ready()\n"
              "    threading.Thread(target=worker.reset, args=(3, 1), daemon=True).start()  # builds the world\n"
              "    time.sleep(1)\n"
              "    print(worker._process.pid, flush=True)\n"
              "    time.sleep(600)\n")
    path = tmp_path / "learner.py"
    path.write_text(script)
    learner = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(learner.stdout.readline())
        os.kill(pid, 0)  # the worker runs
        learner.kill()
        learner.wait()
        deadline = time.monotonic() + 10  # building the world takes 25 s or more
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.1)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"env worker {pid} outlived its learner by 10 s")
    finally:
        learner.kill()


def _running(pid: int) -> bool:
    """The process exists and has not exited (an exited one its new parent has not reaped yet is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
