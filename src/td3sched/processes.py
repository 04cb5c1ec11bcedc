"""Local worker processes: a spawned pool whose workers leave Ctrl-C to the parent, and a way to stop
one now. ``evaluate`` runs its grid in such a pool, ``rl.select`` its validation runs."""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor


def ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers itself), so a
    worker never prints a KeyboardInterrupt traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned processes (no state forked from the parent's threads, such as a progress
    bar's), each ignoring SIGINT."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=ignore_sigint)


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
