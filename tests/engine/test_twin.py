"""The digital twin: the simulator driving the real engine over loopback gRPC and over the HTTP
extender places every pod where the same run through the engine in process places it, and gives the
same metrics, bit for bit; in process with exact scores, it is the simulator's own td3 policy."""

from __future__ import annotations

import pytest

from td3sched.engine.twin import EngineTwin
from td3sched.policy import make_policy
from td3sched.rl.onnx_actor import load_actor
from td3sched.scenario import load_scenario
from td3sched.simulator.engine import Simulation

from tests.engine.conftest import MODEL

DLRM_WINDOW_S = 10.0
"""The first seconds of dlrm's test span: the start of a fill burst (some 8,000 pods in its first
minute) over ~2,900 candidates each (the benchmark runs ten minutes)."""


def run_twin(world, start_s, end_s, door, like=None, seed=1):
    with EngineTwin(load_actor(MODEL), door, like, safety_cpu_util=world.config.safety_cpu_util) as twin:
        record = Simulation(world, twin, seed, start_s, end_s).run()
    assert twin.decisions > 0 and twin.placements
    return record["metrics"], twin.placements, twin.decisions


@pytest.fixture(scope="module")
def tiny():
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    return scenario.build(1), start, start + 2 * 3600


def test_in_process_engine_with_exact_scores_is_the_td3_policy(tiny):
    world, start, end = tiny
    metrics, placements, decisions = run_twin(world, start, end, "in-process")
    assert decisions > 20
    assert metrics == Simulation(world, make_policy(f"td3:{MODEL}"), 1, start, end).run()["metrics"]


@pytest.mark.parametrize("door", ["grpc", "extender"])
def test_served_engine_places_as_the_in_process_engine(tiny, door):
    world, start, end = tiny
    served = run_twin(world, start, end, door)
    local = run_twin(world, start, end, "in-process", like=door)
    assert served[2] > 20
    assert served[1] == local[1]  # every placement, in order
    assert served[0] == local[0]  # every metric, bit for bit


@pytest.mark.parametrize("door, levels", [("grpc", 100), ("extender", 10)])
def test_the_td3_policy_with_scores_as_served_is_the_served_engine(door, levels):
    """With ``simulator.served_score_levels`` at a front door's scale, the simulator's own td3 policy
    places as a kube-scheduler scoring by that front door would: the same run as the twin, bit for bit.
    ScoreNodes' rounding and its random ties change the run; the extender answers the best nodes alone at
    the top (``served_scores``), so a scheduler picks where the exact scores do."""
    scenario = load_scenario("tiny", [f"simulator.served_score_levels={levels}"])
    start, _ = scenario.span("test")
    world, end = scenario.build(1), start + 2 * 3600
    metrics, _, _ = run_twin(world, start, end, door)
    assert metrics == Simulation(world, make_policy(f"td3:{MODEL}"), 1, start, end).run()["metrics"]
    unrounded = Simulation(load_scenario("tiny").build(1), make_policy(f"td3:{MODEL}"), 1, start, end).run()
    assert (unrounded["metrics"] == metrics) == (door == "extender")


@pytest.fixture(scope="module")
def dlrm():
    from td3sched.trace.location import traces_dir

    try:
        traces_dir()
    except FileNotFoundError as exc:  # like every test that reads the real traces
        pytest.skip(f"real traces not available ({exc})")
    scenario = load_scenario("dlrm", ["batch.enabled=false"])
    start, _ = scenario.span("test")
    return scenario.build(1), start, start + DLRM_WINDOW_S


@pytest.mark.slow
@pytest.mark.parametrize("door", ["grpc", "extender"])
def test_served_engine_places_as_the_in_process_engine_on_a_dlrm_window(dlrm, door):
    world, start, end = dlrm
    served = run_twin(world, start, end, door)
    local = run_twin(world, start, end, "in-process", like=door)
    assert served[2] > 100
    assert served[1] == local[1] and served[0] == local[0]
