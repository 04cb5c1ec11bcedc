"""A static-weights spec written as a model (``td3sched static-model``): it acts the spec whatever it
observes, through torch and through ONNX Runtime; within the action box it places as the spec itself,
run for run; its card says what it is and carries what the engine needs to serve it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from td3sched.cli import app  # noqa: E402
from td3sched.policy import make_policy  # noqa: E402
from td3sched.rl.actions import card_action_hold, decode, static_score_args  # noqa: E402
from td3sched.rl.card import CARD_FILE  # noqa: E402
from td3sched.rl.model import load_model  # noqa: E402
from td3sched.rl.observation import OBSERVATION_SIZE  # noqa: E402
from td3sched.rl.onnx_actor import load_actor  # noqa: E402
from td3sched.rl.static_model import spec_mode, write_static_model  # noqa: E402
from td3sched.shipped import SHIPPED_MODELS  # noqa: E402
from td3sched.scenario import load_scenario  # noqa: E402
from td3sched.simulator.engine import Simulation  # noqa: E402

BLEND = "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5:frag=0.25"
"""Within the box: every weight above 0, tau and the share inside (0, 1)."""


@pytest.fixture(scope="module")
def blend_model(tmp_path_factory):
    return write_static_model(BLEND, tmp_path_factory.mktemp("static") / "blend", "tiny", action_hold_s=600.0)


def test_it_acts_the_spec_whatever_it_observes(blend_model):
    spec = static_score_args(BLEND, "fragmentation")
    observations = np.random.default_rng(3).normal(0.0, 50.0, size=(64, OBSERVATION_SIZE)).astype(np.float32)
    observations[0] = 0.0
    for actor in (load_model(blend_model), load_actor(blend_model)):
        actions = np.stack([actor.act(o) for o in observations])
        np.testing.assert_array_equal(actions, np.repeat(actions[:1], len(actions), axis=0))
        args = decode(actions[0], "fragmentation")
        np.testing.assert_allclose(args.weights, spec.weights, atol=1e-6)
        assert args.tau == pytest.approx(spec.tau, abs=1e-6)
        assert args.fragmentation == pytest.approx(spec.fragmentation, abs=1e-6)


def test_its_card_says_it_is_static_and_carries_what_the_engine_needs(blend_model):
    card = json.loads((blend_model / CARD_FILE).read_text())
    assert card["training"] == {"static_spec": BLEND, "steps": 0}
    assert card["action_mode"] == "fragmentation" and card["scenario"] == "tiny"
    assert card_action_hold(card) == 600.0
    names, _ = load_scenario("tiny").typical_pods()
    assert load_actor(blend_model).typical_pods[0] == names


@pytest.mark.parametrize("spec", [BLEND, "static-weights:w=0.25/0.25/0.25/0.25:tau=0.3:req=0.5"])
def test_within_the_box_it_places_as_the_spec(spec, tmp_path):
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    world = scenario.build(1)
    folder = write_static_model(spec, tmp_path / "m", "tiny")
    model = Simulation(world, make_policy(f"td3:{folder}"), 1, start, start + 6 * 3600).run()["metrics"]
    static = Simulation(world, make_policy(spec), 1, start, start + 6 * 3600).run()["metrics"]
    assert model["decisions"] > 300
    assert model == static


def test_a_sibling_spread_is_fixed_by_the_card_and_places_as_the_spec(tmp_path):
    spec = "static-weights:w=0.4/0.3/0.2/0.1:tau=0.5:spread=3"
    folder = write_static_model(spec, tmp_path / "m", "tiny")
    assert json.loads((folder / CARD_FILE).read_text())["sibling_spread"] == 3.0
    assert load_actor(folder).sibling_spread == 3.0 and spec_mode(spec) == "full"
    scenario = load_scenario("tiny")
    start, _ = scenario.span("test")
    world = scenario.build(1)
    runs = {name: Simulation(world, make_policy(name), 1, start, start + 6 * 3600).run()["metrics"]
            for name in (f"td3:{folder}", spec, spec.replace(":spread=3", ""))}
    assert runs[f"td3:{folder}"] == runs[spec]
    assert runs[spec] != runs[spec.replace(":spread=3", "")]   # the spread places pods elsewhere on tiny


def test_a_weight_of_zero_comes_back_at_the_box_s_floor(tmp_path):
    folder = write_static_model("static-weights:w=1/0/0/0:tau=0.4", tmp_path / "m", "tiny")
    args = decode(load_actor(folder).act(np.zeros(OBSERVATION_SIZE, dtype=np.float32)), "full")
    assert args.weights[0] == pytest.approx(1.0, abs=2e-4) and 0 < args.weights[1] < 1e-4


@pytest.mark.parametrize("spec, mode", [
    ("static-weights:w=1/0/0/0:tau=0.4", "full"),
    ("static-weights:w=1/0/0/0:tau=0.4:frag=0.25", "fragmentation"),
    ("static-weights:w=1/0/0/0:tau=0.4:ceiling=0.8", "ceiling"),
    ("static-weights:w=0.5/0.5/0/0:req=1", "requests"),
    ("static-weights:w=0.5/0.5/0/0:req=1:bal=0.5", "balance"),
])
def test_the_mode_is_the_smallest_that_expresses_the_spec(spec, mode):
    assert spec_mode(spec) == mode


@pytest.mark.parametrize("spec, says", [
    ("static-weights:w=1/0/0/0:ceiling=0.8:frag=0.25", "ceiling and fragmentation together"),
    ("static-weights:w=1/0/0/0:req=0.5:frag=0.25", "requests and fragmentation together"),
    ("koord-loadaware", "expected a static-weights spec"),
    ("static-weights:w=2/0/0/0", "summing to 1"),
])
def test_a_spec_no_model_can_act_is_refused_by_name(spec, says, tmp_path):
    with pytest.raises(ValueError, match=says):
        write_static_model(spec, tmp_path / "m", "tiny")
    assert not (tmp_path / "m").exists()


def test_the_command_writes_a_model_and_refuses_to_overwrite_one(tmp_path):
    runner = CliRunner()
    out = tmp_path / "m"
    args = ["static-model", BLEND, "--scenario", "tiny", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "model.onnx").is_file() and load_actor(out).action_mode == "fragmentation"
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "holds a model already" in again.output
    bad = runner.invoke(app, ["static-model", BLEND, "--scenario", "nowhere", "--out", str(tmp_path / "n")])
    assert bad.exit_code == 2 and "unknown scenario 'nowhere'" in bad.output


SHIPPED_STATIC = sorted(SHIPPED_MODELS.glob("static-*"))


def test_the_blend_is_shipped_for_both_scenarios_and_with_the_sibling_spread_for_dlrm_small():
    assert [f.name for f in SHIPPED_STATIC] == ["static-blend-dlrm-small", "static-blend-openb",
                                               "static-spread-dlrm-small"]
    assert load_actor(SHIPPED_STATIC[2]).sibling_spread == 3.0


@pytest.mark.parametrize("folder", SHIPPED_STATIC, ids=[f.name for f in SHIPPED_STATIC])
def test_a_shipped_static_model_acts_its_card_s_spec_and_carries_typical_pods(folder):
    """models/static-<name>-<scenario>: the spec its card names, and typical pods for every pool (they
    need the scenario's traces to recompute; the engine's tests hold a card's to its scenario's)."""
    card = json.loads((folder / CARD_FILE).read_text())
    spec = card["training"]["static_spec"]
    assert folder.name.endswith("-" + card["scenario"])
    actor = load_actor(folder)
    args = decode(actor.act(np.zeros(OBSERVATION_SIZE, dtype=np.float32)), actor.action_mode)
    want = static_score_args(spec, actor.action_mode)
    np.testing.assert_allclose(args.weights, want.weights, atol=2e-4)
    assert (args.tau, args.fragmentation) == pytest.approx((want.tau, want.fragmentation), abs=1e-6)
    assert actor.sibling_spread == want.spread
    assert actor.action_mode == spec_mode(spec)
    names, typical = actor.typical_pods
    assert names and len(names) == len(typical.pools) and all(len(p) > 0 for p in typical.pools)
