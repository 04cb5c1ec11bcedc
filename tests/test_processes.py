"""A worker pool's processes end with their parent: a parent stopped by SIGTERM or SIGKILL runs no cleanup
of its own, and its workers must not go on running its jobs (real processes, Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

SCRIPT = """
import os, sys, time
from td3sched.processes import optional_pool, run_all

def job(path):
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(600)

if __name__ == "__main__":
    with optional_pool(2) as pool:
        run_all(job, [sys.argv[1]] * 2, pool)
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its new parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_workers_end_when_their_parent_is_killed(tmp_path, sig):
    script, pids_file = tmp_path / "parent.py", tmp_path / "pids"
    script.write_text(SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(pids_file)], cwd=tmp_path)
    workers: list[int] = []
    try:
        def both_started() -> bool:
            workers[:] = [int(x) for x in pids_file.read_text().split()] if pids_file.exists() else []
            return len(workers) == 2

        assert _wait(both_started, 120), "the two workers never started their jobs"
        parent.send_signal(sig)
        parent.wait(timeout=30)
        assert _wait(lambda: not any(_alive(pid) for pid in workers), 30), \
            f"workers {[pid for pid in workers if _alive(pid)]} still running after their parent's {sig.name}"
    finally:
        for pid in [parent.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.wait(timeout=30)
