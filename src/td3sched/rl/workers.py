"""Parallel experience collection: copies of the training env in simulator processes, stepped in
lockstep with the one in the learner's process.

A held action (``--action-hold``) makes each step minutes of simulation and a gradient step a few
milliseconds, so a training run spends nearly all its time in the simulator: the learner waits on one
core while the other idles. ``learn(..., settings with env_workers=N)`` steps N copies of the env at
once, each drawing its own windows: copy 0 is the env the learner was given (in its process, drawing
exactly the windows a one-worker run draws), copies 1..N-1 run in ``EnvWorker`` processes (spawned,
as evaluate's workers are). Each loop iteration the learner chooses the N actions (in copy order,
from the same actor), sends the remote ones, steps its own copy, then receives the others, and takes
the N transitions' gradient steps in copy order: one gradient step per env step, as with one worker.

A run is deterministic for a given N, and a different run for another N (other windows); N is a
training setting, recorded in the checkpoint and the model card. Copy i > 0 draws its windows from
the child ``SeedSequence(seed, spawn_key=(i,))`` of the run's seed (``ClusterSchedulingEnv.reset``'s
``stream`` option) and builds the same world (the world seed is the run's seed).

Errors cross the pipe as text: a remote copy that fails raises ``EnvWorkerError`` naming the copy and
the simulator's error in the learner; a copy whose process dies (killed, out of memory) raises it with
the exit code. Workers ignore SIGINT: Ctrl-C is the learner's, which closes them.
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from typing import Any

import numpy as np

WORKER_START_TIMEOUT_S = 600.0
"""How long a new worker may take to build its env (a dlrm world takes about a minute) before the
learner gives up on it."""


class EnvWorkerError(RuntimeError):
    """A remote env copy failed or its process died: names the copy and why."""


def replay_episode(env, state: dict, actions) -> np.ndarray:
    """Restart ``state``'s episode on ``env`` (``ClusterSchedulingEnv.restore``) and replay ``actions``,
    its steps so far; the observation they reach (the simulator is deterministic)."""
    obs = env.unwrapped.restore(state)
    for action in actions:
        obs, _, terminated, truncated, _ = env.step_logits(action)
        if terminated or truncated:
            break
    return obs


def step_copy(env, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, float, np.ndarray | None]:
    """One step of a copy: (next observation, reward, terminated, truncated, elapsed_s, the first
    observation of the copy's next episode when this one ended, else None)."""
    obs, reward, terminated, truncated, info = env.step_logits(action)
    first = env.reset()[0] if terminated or truncated else None
    return obs, reward, terminated, truncated, info.get("elapsed_s", 0.0), first


def _serve(conn, settings_json: dict) -> None:
    """A worker process: build the env, then answer the learner's commands until ``close``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from td3sched.rl.train import TrainSettings

    try:
        env = TrainSettings.from_json(settings_json).make_env()
    except BaseException as exc:  # noqa: BLE001 (reported to the learner, which raises it)
        conn.send(("error", _describe(exc)))
        return
    conn.send(("ready", None))
    try:
        while True:
            try:
                command, *args = conn.recv()
            except EOFError:  # the learner went away
                return
            if command == "close":
                return
            try:
                if command == "reset":
                    seed, stream = args
                    reply = env.reset(seed=seed, options={"stream": stream})[0]
                elif command == "step":
                    reply = step_copy(env, args[0])
                elif command == "state":
                    reply = env.unwrapped.state_dict()
                elif command == "replay":
                    reply = replay_episode(env, *args)
                else:
                    raise ValueError(f"unknown command {command!r}")
            except BaseException as exc:  # noqa: BLE001
                conn.send(("error", _describe(exc)))
                continue
            conn.send(("ok", reply))
    finally:
        env.close()


def _describe(exc: BaseException) -> str:
    """The error first, then where the worker raised it."""
    return f"{type(exc).__name__}: {exc}\n(in the worker process) " + "".join(traceback.format_exception(exc)).rstrip()


class LocalCopy:
    """Copy 0: the learner's own env, behind the same calls as an ``EnvWorker`` (its step runs at
    ``receive_step``, after the remote copies have theirs sent)."""

    index = 0

    def __init__(self, env):
        self.env = env
        self._action: np.ndarray | None = None

    def send_step(self, action: np.ndarray) -> None:
        self._action = action

    def receive_step(self) -> tuple[np.ndarray, float, bool, bool, float, np.ndarray | None]:
        action, self._action = self._action, None
        return step_copy(self.env, action)

    def state_dict(self) -> dict:
        return self.env.unwrapped.state_dict()

    def replay(self, state: dict, actions) -> np.ndarray:
        return replay_episode(self.env, state, actions)

    def close(self) -> None:
        """The learner's env is its caller's to close."""


class EnvWorker:
    """One copy of the env in its own process: the env API the training loop uses (``reset``,
    ``step_logits``, ``state_dict``, ``replay``), with ``send_step``/``receive_step`` to overlap the
    copy's step with the learner's work."""

    def __init__(self, settings, index: int):
        self.index = index
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, settings.to_json()), daemon=True,
                                    name=f"td3sched-env-worker-{index}")
        self._process.start()
        child.close()
        self._pending = False

    def wait_ready(self, timeout_s: float = WORKER_START_TIMEOUT_S) -> None:
        """Wait until the copy's env is built (workers started together build theirs at once)."""
        if not self._conn.poll(timeout_s):
            raise EnvWorkerError(f"env worker {self.index}: no env after {timeout_s:g} s")
        self._receive()

    def _receive(self) -> Any:
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            raise EnvWorkerError(f"env worker {self.index} exited (code {self._process.exitcode}) without "
                                 "answering") from None
        if kind == "error":
            raise EnvWorkerError(f"env worker {self.index}: {payload}")
        return payload

    def _call(self, *command) -> Any:
        self._conn.send(command)
        return self._receive()

    def reset(self, seed: int, stream: int) -> np.ndarray:
        """Seed the copy (the world of ``seed``, the windows of ``stream``) and start its first episode."""
        return self._call("reset", seed, stream)

    def send_step(self, action: np.ndarray) -> None:
        self._conn.send(("step", np.asarray(action, dtype=np.float32)))
        self._pending = True

    def receive_step(self) -> tuple[np.ndarray, float, bool, bool, float, np.ndarray | None]:
        """``step_copy``'s answer for the step sent."""
        self._pending = False
        return self._receive()

    def state_dict(self) -> dict:
        return self._call("state")

    def replay(self, state: dict, actions) -> np.ndarray:
        return self._call("replay", state, np.asarray(actions, dtype=np.float32))

    def close(self) -> None:
        if self._process.is_alive():
            try:
                if not self._pending:
                    self._conn.send(("close",))
                    self._process.join(10)
            except (OSError, BrokenPipeError):
                pass
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(10)
        self._conn.close()
