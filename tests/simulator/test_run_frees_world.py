"""A finished run frees its world at once: nothing the caller keeps (the policy, its context, the
record) may hold the simulation in a reference cycle. The cycle collector never runs on account of
large arrays, so such a cycle kept every dlrm world (about 4 GB) of an evaluation worker alive and
the workers were killed for memory on multi-run grids."""

import gc

import pytest

from td3sched.policy import POLICIES, REFERENCE_POLICIES
from td3sched.run import run_simulation
from td3sched.simulator.engine import Simulation, World

# policies whose context readers or hooks could close over the simulation; td3 needs a model
NAMES = sorted(n for n in [*POLICIES, *REFERENCE_POLICIES] if n != "td3")


def _alive(cls) -> int:
    # by type, not isinstance: isinstance asks a weak proxy for its referent's class, and raises on a
    # dead one (numba keeps such proxies to compiled code)
    return sum(1 for o in gc.get_objects() if issubclass(type(o), cls))


@pytest.mark.parametrize("name", NAMES)
def test_a_finished_run_leaves_no_simulation_alive(name):
    gc.collect()
    before = (_alive(Simulation), _alive(World))
    gc.disable()  # only reference counting may free it, as between two runs of a busy worker
    try:
        record = run_simulation("tiny", name, 1, "test")
        alive = (_alive(Simulation), _alive(World))
    finally:
        gc.enable()
    assert record["metrics"]["decisions"] > 0
    assert alive == before, f"{name}: simulations and worlds alive after the run {alive}, before it {before}"


def test_a_td3_run_leaves_no_simulation_alive():
    # A first run in a process may compile the observation's kernels (a cold numba cache): the compiler's
    # caught exceptions keep the caller's frames, the simulation's among them, in cycles until the collector
    # runs. That happens once per process, so the run measured is the second.
    run_simulation("tiny", "td3:td3-dlrm", 1, "test")
    gc.collect()
    before = (_alive(Simulation), _alive(World))
    gc.disable()
    try:
        run_simulation("tiny", "td3:td3-dlrm", 1, "test")
        alive = (_alive(Simulation), _alive(World))
    finally:
        gc.enable()
    assert alive == before
