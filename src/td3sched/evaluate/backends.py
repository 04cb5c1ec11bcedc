"""Where the grid's runs execute: local worker processes or Ray. Both give the same numbers.

A backend keeps at most ``capacity`` runs in flight (so "running" in the progress bar is true) and
calls ``started(task)`` / ``finished(task, outcome)`` in the calling thread. ``outcome`` is the
dict of ``grid.execute``: ``{"ok": True, "record": ...}`` or ``{"ok": False, "error": ...}``; a
worker that dies (killed process, lost Ray node) is turned into a failed outcome too.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from td3sched import ray_session
from td3sched.processes import spawn_pool, stop_pool
from td3sched.evaluate.grid import GridError, GridSpec, Task, execute, failure

Started = Callable[[Task], None]
Finished = Callable[[Task, dict], None]


def import_ray():
    """The ``ray`` module, or a GridError naming the extra that installs it."""
    try:
        return ray_session.import_ray()
    except ray_session.RayUnavailable as exc:
        raise GridError(str(exc)) from None


def check_ray_address(address: str | None, timeout_s: float = 5.0) -> None:
    """``ray_session.check_ray_address``, failing with a GridError."""
    try:
        ray_session.check_ray_address(address, timeout_s)
    except ray_session.RayUnavailable as exc:
        raise GridError(str(exc)) from None


class LocalBackend:
    """``workers`` local processes, spawned (no state forked from the parent's threads, such as the
    progress bar's). As with any spawned pool, a script that calls ``run_grid`` needs the usual
    ``if __name__ == "__main__":`` guard; the ``td3sched`` command has it. Workers ignore SIGINT;
    an interrupt (or any error) in the parent terminates them before it propagates."""

    name = "local"

    def __init__(self, workers: int):
        self.capacity = workers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, tasks: list[Task], started: Started, finished: Finished) -> None:
        pending = deque(tasks)
        size = max(1, min(self.capacity, len(tasks)))
        start = lambda: spawn_pool(size)  # noqa: E731
        pool = start()
        inflight: dict = {}
        try:
            while pending or inflight:
                while pending and len(inflight) < size:
                    task = pending[0]
                    try:
                        fut = pool.submit(execute, task)
                    except BrokenProcessPool:  # a worker died: start a fresh pool, go on
                        stop_pool(pool)
                        pool = start()
                        continue
                    pending.popleft()
                    inflight[fut] = task
                    started(task)
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    task = inflight.pop(fut)
                    try:
                        outcome = fut.result()
                    except Exception as exc:  # noqa: BLE001 - e.g. BrokenProcessPool: the run failed
                        outcome = failure(exc)
                    finished(task, outcome)
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown(wait=True)


class RayBackend:
    """Ray tasks (1 CPU each). Reuses a Ray already initialised in this process; otherwise starts a
    local instance with ``workers`` CPUs (address None or "local") or connects to ``address``, and
    shuts down what it started. At most as many runs are in flight as the cluster has CPUs."""

    name = "ray"

    def __init__(self, workers: int, address: str | None):
        self.workers = workers
        self.address = address
        self.capacity = workers

    def __enter__(self):
        self.session = ray_session.RaySession(self.address, self.workers)
        try:
            self.ray = ray = self.session.__enter__()
        except ray_session.RayUnavailable as exc:
            raise GridError(str(exc)) from exc
        self.capacity = max(1, int(ray.cluster_resources().get("CPU", self.workers)))
        return self

    def __exit__(self, *exc):
        self.session.__exit__(*exc)
        return False

    def run(self, tasks: list[Task], started: Started, finished: Finished) -> None:
        ray = self.ray
        remote = ray.remote(num_cpus=1, max_retries=0)(execute)
        pending = deque(tasks)
        inflight: dict = {}
        try:
            while pending or inflight:
                while pending and len(inflight) < self.capacity:
                    task = pending.popleft()
                    inflight[remote.remote(task)] = task
                    started(task)
                done, _ = ray.wait(list(inflight), num_returns=1)
                for ref in done:
                    task = inflight.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - worker crash, lost node ...
                        outcome = failure(exc)
                    finished(task, outcome)
        except BaseException:
            for ref in inflight:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
            raise


def make_backend(spec: GridSpec):
    if spec.ray is None:
        return LocalBackend(spec.workers)
    return RayBackend(spec.workers, spec.ray)
