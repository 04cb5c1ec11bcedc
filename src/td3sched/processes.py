"""Local worker processes: a spawned pool whose workers leave Ctrl-C to the parent, a way to stop one
now, and a map over one. ``evaluate`` runs its grid in such a pool, ``rl.select`` its validation runs,
``lifecycle.rehearsal`` and ``lifecycle.gate`` their simulations."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from td3sched.outputs import write_json_atomic


PR_SET_PDEATHSIG = 1
"""prctl(2): the signal the kernel sends a process when its parent dies (Linux)."""


def worker_init(parent: int) -> None:
    """Worker initializer. Ctrl-C is the parent's to handle (it stops the workers itself), so a worker
    never prints a KeyboardInterrupt traceback of its own. On Linux a worker also asks the kernel for
    SIGTERM when its parent dies: a parent stopped by SIGTERM or SIGKILL, which runs no cleanup of its
    own, takes its workers with it instead of leaving them running the rest of their runs. (The signal
    comes when the thread that started the worker ends: the pools here are always fed from the main
    thread.) A parent already gone before that (the worker was adopted) ends the worker at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned processes (no state forked from the parent's threads, such as a progress
    bar's), each ignoring SIGINT and ending with its parent (``worker_init``)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=worker_init, initargs=(os.getpid(),))


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: cancel the runs not started, terminate the workers running the others, and
    wait for the pool's manager thread to end.

    ``shutdown(wait=False)`` alone leaves the running calls and the manager thread alive: the
    interpreter then waits at exit for runs that may take minutes, and its exit hook races the
    thread closing its wake-up pipe ("Exception ignored ... Bad file descriptor"). The executor has
    no public way to stop a running call, hence its private ``_processes``.
    """
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    for process in workers:
        process.join()
    pool.shutdown(wait=True)  # the manager thread sees the workers gone and ends


def kept_path(keep, fn: Callable, job) -> Path:
    """The file of ``run_all``'s folder ``keep`` that holds ``fn(job)``: named by a hash of ``fn``'s name
    and the job (as JSON: a job of strings, numbers, paths and tuples of them)."""
    key = json.dumps([fn.__module__, fn.__qualname__, job], sort_keys=True, default=str)
    return Path(keep) / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def run_all(fn: Callable, jobs: list, pool: ProcessPoolExecutor | None = None,
            done: Callable[[int, object], None] | None = None, keep=None) -> list:
    """``[fn(job) for job in jobs]``, in the workers of ``pool`` when given (``fn`` and the jobs are
    pickled: a module-level function of plain arguments), else here; the results in the jobs' order.
    ``done(i, result)`` is told of each job as it finishes (for progress). A job that raises raises here.

    ``keep``: a folder where each result is written as JSON (atomically) the moment its job finishes,
    and read back instead of running a job whose result is there (``kept_path``): a map of hour-long
    runs, interrupted, goes on with the runs it lacks. Only for a deterministic ``fn`` whose results
    are JSON (a run record is), whose job names all it depends on; a result read back is JSON's (lists
    for tuples)."""
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
    results: list = [None] * len(jobs)
    todo = []
    for i, job in enumerate(jobs):
        path = kept_path(keep, fn, job) if keep is not None else None
        if path is not None and path.is_file():
            results[i] = json.loads(path.read_text())
            if done is not None:
                done(i, results[i])
        else:
            todo.append(i)

    def finished(i: int, result) -> None:
        if keep is not None:
            write_json_atomic(kept_path(keep, fn, jobs[i]), result)
        results[i] = result
        if done is not None:
            done(i, result)

    if pool is None:
        for i in todo:
            finished(i, fn(jobs[i]))
        return results
    futures = {pool.submit(fn, jobs[i]): i for i in todo}
    for future in as_completed(futures):
        finished(futures[future], future.result())
    return results


@contextmanager
def optional_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """A ``spawn_pool`` of ``workers`` for the block (None for one worker: run here), shut down after it,
    stopped at once (``stop_pool``) when the block raises or is interrupted."""
    if workers < 1:
        raise ValueError(f"workers={workers}: expected at least 1")
    if workers == 1:
        yield None
        return
    pool = spawn_pool(workers)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
