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
the exit code. Workers ignore SIGINT: Ctrl-C is the learner's, which closes them. As with any spawned
process, a script that trains with copies needs the ``if __name__ == "__main__":`` guard (the
``td3sched`` command has it; without it the copy fails to start and the learner says so).

With ``ray_address`` (``train --env-workers N --ray [ADDRESS]``, the convention of ``evaluate --ray``,
``ray_session``) copies 1..N-1 are Ray actors (``RayEnvWorker``) instead of local processes: the same
calls and the same steps, so the same run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

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


class CopyCommands:
    """A remote copy's side: its env and the commands the learner sends it, served alike by an
    ``EnvWorker`` process (``_serve``) and a Ray actor (``RayEnvWorker``)."""

    COMMANDS = ("ready", "reset", "step", "state", "replay")

    def __init__(self, settings_json: dict):
        from td3sched.rl.train import TrainSettings

        self.env = TrainSettings.from_json(settings_json).make_env()

    def ready(self) -> bool:
        return True

    def reset(self, seed: int, stream: int) -> np.ndarray:
        return self.env.reset(seed=seed, options={"stream": stream})[0]

    def step(self, action: np.ndarray):
        return step_copy(self.env, action)

    def state(self) -> dict:
        return self.env.unwrapped.state_dict()

    def replay(self, state: dict, actions) -> np.ndarray:
        return replay_episode(self.env, state, actions)

    def close(self) -> None:
        self.env.close()


def _serve(conn, settings_json: dict) -> None:
    """A worker process: build the env, then answer the learner's commands until ``close``. It exits as
    soon as the learner's process is gone (killed mid-step or mid-build), not at its next message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, daemon=True, name="td3sched-env-worker-parent").start()
    try:
        copy = CopyCommands(settings_json)
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
                if command not in CopyCommands.COMMANDS:
                    raise ValueError(f"unknown command {command!r}: expected one of {CopyCommands.COMMANDS}")
                reply = getattr(copy, command)(*args)
            except BaseException as exc:  # noqa: BLE001
                conn.send(("error", _describe(exc)))
                continue
            conn.send(("ok", reply))
    finally:
        copy.close()


def _exit_with_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


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

    def start_replay(self, state: dict, actions) -> Callable[[], np.ndarray]:
        """The replay runs when its answer is asked for: after the remote copies have theirs sent."""
        return lambda: replay_episode(self.env, state, actions)

    def close(self) -> None:
        """The learner's env is its caller's to close."""


class EnvWorker:
    """One copy of the env in its own process, behind the calls the training loop makes: ``start_reset``,
    ``send_step``/``receive_step``, ``state_dict``, ``start_replay``; each ``start_``/``send_`` call returns at
    once, so that the copies work at the same time as the learner's own."""

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

    def start_reset(self, seed: int, stream: int) -> Callable[[], np.ndarray]:
        """Seed the copy (the world of ``seed``, the windows of ``stream``) and start its first episode;
        the returned call waits for its first observation (copies build their worlds at once)."""
        self._conn.send(("reset", seed, stream))
        return self._receive

    def reset(self, seed: int, stream: int) -> np.ndarray:
        return self.start_reset(seed, stream)()

    def send_step(self, action: np.ndarray) -> None:
        self._conn.send(("step", np.asarray(action, dtype=np.float32)))
        self._pending = True

    def receive_step(self) -> tuple[np.ndarray, float, bool, bool, float, np.ndarray | None]:
        """``step_copy``'s answer for the step sent."""
        self._pending = False
        return self._receive()

    def state_dict(self) -> dict:
        return self._call("state")

    def start_replay(self, state: dict, actions) -> Callable[[], np.ndarray]:
        """``replay_episode`` in the copy; the returned call waits for the observation it reaches."""
        self._conn.send(("replay", state, np.asarray(actions, dtype=np.float32)))
        return self._receive

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


class RayEnvWorker:
    """Copy ``index`` as a Ray actor of one CPU (``train --env-workers N --ray``): ``EnvWorker``'s calls,
    on a Ray instance the caller has initialised (``ray_session.RaySession``). On a cluster, every node
    needs td3sched installed and the traces where ``$TD3SCHED_TRACES`` points."""

    def __init__(self, settings, index: int):
        import ray

        self.index = index
        self._ray = ray
        self._actor = ray.remote(num_cpus=1, max_restarts=0)(CopyCommands).remote(settings.to_json())
        self._pending = None

    def _get(self, ref, timeout_s: float | None = None):
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(ref, timeout=timeout_s)
        except exceptions.GetTimeoutError:
            raise EnvWorkerError(f"env worker {self.index} (Ray actor): no answer after {timeout_s:g} s") from None
        except exceptions.RayTaskError as exc:  # the env raised: name its error first
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            raise EnvWorkerError(f"env worker {self.index} (Ray actor): {type(cause).__name__}: {cause}") from None
        except exceptions.RayActorError as exc:
            raise EnvWorkerError(f"env worker {self.index} (Ray actor) died: {exc}") from None

    def wait_ready(self, timeout_s: float = WORKER_START_TIMEOUT_S) -> None:
        self._get(self._actor.ready.remote(), timeout_s)

    def start_reset(self, seed: int, stream: int) -> Callable[[], np.ndarray]:
        ref = self._actor.reset.remote(seed, stream)
        return lambda: self._get(ref)

    def reset(self, seed: int, stream: int) -> np.ndarray:
        return self.start_reset(seed, stream)()

    def send_step(self, action: np.ndarray) -> None:
        self._pending = self._actor.step.remote(np.asarray(action, dtype=np.float32))

    def receive_step(self) -> tuple[np.ndarray, float, bool, bool, float, np.ndarray | None]:
        ref, self._pending = self._pending, None
        return self._get(ref)

    def state_dict(self) -> dict:
        return self._get(self._actor.state.remote())

    def start_replay(self, state: dict, actions) -> Callable[[], np.ndarray]:
        ref = self._actor.replay.remote(state, np.asarray(actions, dtype=np.float32))
        return lambda: self._get(ref)

    def close(self) -> None:
        try:
            self._ray.kill(self._actor)
        except Exception:  # noqa: BLE001 - already gone, or Ray shut down: nothing left to stop
            pass


@contextmanager
def remote_copies(ray_address: str | None, count: int) -> Iterator[type]:
    """What makes the remote copies, ``make(settings, index)``: local processes (``EnvWorker``), or with
    ``ray_address`` Ray actors (``RayEnvWorker``) on the Ray instance of ``ray_session.RaySession``
    (``count`` CPUs if it starts a local one), held for the block."""
    if ray_address is None:
        yield EnvWorker
        return
    from td3sched.ray_session import RaySession

    with RaySession(ray_address, max(1, count)):
        yield RayEnvWorker
