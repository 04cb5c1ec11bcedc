"""A promotion in a process of its own, for tests/lifecycle/test_registry.py: registers a model folder
and promotes it; every os.replace, os.rename, os.symlink and os.fsync call is counted and appended to a
trace file, and at call number STEP (1-based; 0: none) the process writes the call's name to the marker
file and sleeps, waiting for the test's SIGKILL before that call happens."""

import os
import sys
import time
from pathlib import Path

from td3sched.lifecycle.registry import Registry

registry, folder, step, marker, trace = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
calls = {"n": 0}
real = {name: getattr(os, name) for name in ("replace", "rename", "symlink", "fsync")}


def counted(name):
    def call(*args, **kwargs):
        calls["n"] += 1
        with open(trace, "a") as f:
            f.write(f"{calls['n']} {name} {' '.join(str(a) for a in args if not isinstance(a, int))}\n")
        if calls["n"] == step:
            marker.write_text(name)
            time.sleep(120)
        return real[name](*args, **kwargs)
    return call


for name in real:
    setattr(os, name, counted(name))
reg = Registry(registry)
reg.promote(reg.register(folder), require_gate=False)
marker.write_text("done")
