"""Ctrl-C during ``td3sched evaluate``: a real SIGINT to a real process. The command prints its one
clean message and exits 130 at once; no traceback follows it, and no worker is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

RUNNER = '''
import os, pathlib, time

def run(scenario, policy, seed, span, overrides):
    pathlib.Path(os.environ["MARKERS"], f"{seed}.pid").write_text(str(os.getpid()))
    time.sleep(600)  # far longer than any test waits: only termination ends it
'''

DRIVER = '''
import signal
import sys

if __name__ == "__main__":
    # Ctrl-C as a terminal delivers it: a test run started in the background by a non-interactive
    # shell inherits SIGINT ignored, and a command keeps an ignored SIGINT ignored (as it should)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from td3sched.evaluate import grid
    grid.DEFAULT_RUNNER = "slow_runner:run"
    from td3sched.cli import app
    sys.argv = ["td3sched", *sys.argv[1:]]
    app()
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups")
@pytest.mark.parametrize("whom", ["group", "parent"])
def test_ctrl_c_prints_one_message_and_leaves_no_worker(whom, tmp_path):
    """``group``: a terminal's Ctrl-C (every process of the foreground group); ``parent``: ``kill -INT``
    of the command alone, whose workers would otherwise finish their runs first."""
    (tmp_path / "slow_runner.py").write_text(textwrap.dedent(RUNNER))
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "MARKERS": str(markers),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), "evaluate", "--scenario", "tiny", "--seeds", "3",
         "--policies", "k8s-default", "--workers", "2", "--out", str(tmp_path / "grid")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(markers.glob("*.pid"))) < 2:  # both workers inside a run
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the runs never started"
            time.sleep(0.1)
        workers = [int(p.read_text()) for p in markers.glob("*.pid")]
        if whom == "group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)  # the runs would sleep 600 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted:" in stderr and "rerun the same command to resume" in " ".join(stderr.split())
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert not [pid for pid in workers if _alive(pid)], "a worker outlived the command"
    assert not list((tmp_path / "grid" / "runs").glob("*.json"))  # nothing finished, nothing claimed
