"""The best-static search on the tiny scenario: its grid, windows and ladder, the stored result, and
resolving the policy names best-static / best-static-seed to it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from td3sched.cli import app
from td3sched.policy import make_policy
from td3sched.policy.static_weights import StaticWeights
from td3sched.scenario import ScenarioError, load_scenario
from td3sched.search.best_static import (
    CEILING_VALUES, SearchSettings, candidates, choose_step, ladder_evaluations, resolve_policy, rung_plan, search, simplex_grid, store,
    train_windows,
)
from td3sched.simulator.engine import Simulation


def test_simplex_grids():
    for step, size in ((0.2, 56), (0.25, 35), (0.5, 10)):
        grid = simplex_grid(step)
        assert grid.shape == (size, 4)
        assert np.allclose(grid.sum(axis=1), 1) and (grid >= 0).all()
        assert len(np.unique(grid, axis=0)) == size
        assert np.allclose(grid / step, np.round(grid / step))


def test_ladder_keeps_a_third_and_doubles_the_windows():
    # 35 simplex points x 6 tau values: 210 x 1 window, then 70 x 2, 24 x 4, 8 x 8.
    assert rung_plan(210, 3, 8) == [(210, 1), (70, 2), (24, 4), (8, 8)]
    assert ladder_evaluations(210, 3, 8) == 210 + 70 * 1 + 24 * 2 + 8 * 4
    assert rung_plan(10, 3, 8) == [(10, 1), (4, 2), (2, 4)]      # the next cut would leave one
    assert rung_plan(20, 3, 1) == [(20, 1)]


def test_grid_has_the_default_static_weights_as_anchor():
    taus = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert len(candidates(0.25, taus)) == 35 * 6                        # equal weights are on the 0.25 grid
    assert len(candidates(0.5, taus)) == 10 * 6 + 1                     # ... not on the 0.5 one
    assert candidates(0.5, taus)[-1].spec == "static-weights:w=0.25/0.25/0.25/0.25:tau=0"
    assert candidates(0.2, (0.4,))[-1].spec == "static-weights:w=0.25/0.25/0.25/0.25:tau=0.4"


def test_auto_step_is_the_finest_whose_ladder_fits():
    taus = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    evals = {s: ladder_evaluations(len(candidates(s, taus)), 3, 8) for s in (0.2, 0.25, 0.5)}
    # 2 workers, 1 s per evaluation: a budget of exactly the 0.25 ladder picks 0.25, one second less 0.5.
    assert choose_step(1.0, math.ceil(evals[0.25] / 2), 2, taus, 3, 8) == 0.25
    assert choose_step(1.0, math.ceil(evals[0.25] / 2) - 1, 2, taus, 3, 8) == 0.5
    assert choose_step(1.0, 1e9, 2, taus, 3, 8) == 0.2
    assert choose_step(1.0, 0.0, 2, taus, 3, 8) == 0.5


def test_windows_are_spread_over_the_span_and_distinct():
    day = 86400.0
    w = train_windows(0.0, 21 * day, 6 * 3600.0, 8)
    starts = [a / 3600 for a, _ in w]
    # van der Corput 0, 1/2, 1/4, 3/4, 1/8 ... of the 498 h of room, floored to the hour
    assert starts == [0, 249, 124, 373, 62, 311, 186, 435]
    assert all(b - a == 6 * 3600 and b <= 21 * day for a, b in w)
    with pytest.raises(ValueError, match="does not fit the train span"):
        train_windows(0.0, 3600.0, 7200.0, 1)


def test_settings_are_validated_and_keyed():
    with pytest.raises(ValueError, match="step"):
        SearchSettings("tiny", step="0.3")
    with pytest.raises(ValueError, match="tau"):
        SearchSettings("tiny", tau_values=(0.0, 1.5))
    a = SearchSettings("tiny", budget_min=12)
    assert a.key() == SearchSettings("tiny", budget_min=12.0).key()
    assert a.key() != SearchSettings("tiny", budget_min=8).key()          # the budget is part of the key
    assert a.key() != SearchSettings("tiny", budget_min=12, overrides=("nodes.pools.cpu.count=10",)).key()
    assert SearchSettings("tiny", tau_fixed=0).variant == "best-static-seed"
    assert SearchSettings("tiny", tau_fixed=0).tau_values == (0.0,)
    assert SearchSettings("tiny").resolved().window_h == 1.0             # 18 h / 24, clipped to >= 1 h


def test_small_search_on_tiny_stores_a_reproducible_winner(tmp_path):
    settings = SearchSettings("tiny", step="0.5", tau_values=(0.0, 1.0), window_h=3, max_windows=1, budget_min=1)
    result, path = search(settings, workers=1, models_dir=tmp_path)
    assert path == tmp_path / settings.file_name() and path.name.startswith("tiny-best-static-")
    stored = json.loads(path.read_text())
    assert stored["policy"] == result["policy"]
    # 10 simplex points x 2 tau values, plus the default equal weights at tau 0
    assert stored["search"]["rungs"] == [{"rung": 0, "candidates": 21, "windows": 1, "complete": True,
                                          "evaluated": 21, "best": result["policy"],
                                          "best_reward": result["reward"]}]
    assert len(stored["candidates"]) == 21
    assert result["reward"] == max(c["reward"] for c in stored["candidates"])
    assert stored["settings"]["budget_min"] == 1.0 and stored["code_version"] and stored["wall_s"] > 0
    # The stored reward is the episode reward of an independent run of the winner on the window.
    (window,) = stored["windows"]
    world = load_scenario("tiny").build(1)
    again = Simulation(world, make_policy(result["policy"]), 1, window["start_s"], window["end_s"]).run()
    assert again["metrics"]["episode_reward"] == pytest.approx(result["reward"], rel=1e-12)


def test_resolve_policy_reads_the_default_search(tmp_path):
    with pytest.raises(ValueError, match=r"run `td3sched search-static --scenario tiny` first"):
        resolve_policy("best-static", "tiny", [], models_dir=tmp_path)
    # The default settings; resolving ignores the budget, so a short one will do.
    result, _ = search(SearchSettings("tiny", budget_min=0.05), workers=1, models_dir=tmp_path)
    label, spec = resolve_policy("best-static", "tiny", [], models_dir=tmp_path)
    assert (label, spec) == ("best-static", result["policy"])
    assert isinstance(make_policy(spec), StaticWeights) and spec.startswith("static-weights:w=")
    # The seed variant (tau fixed at 0) is a separate search with its own command.
    with pytest.raises(ValueError, match=r"search-static --scenario tiny --tau-fixed 0` first"):
        resolve_policy("best-static-seed", "tiny", [], models_dir=tmp_path)
    with pytest.raises(ValueError, match=r"--scenario tiny --set nodes.pools.cpu.count=10` first"):
        resolve_policy("best-static", "tiny", ["nodes.pools.cpu.count=10"], models_dir=tmp_path)
    assert resolve_policy("k8s-default", "tiny", [], models_dir=tmp_path) == ("k8s-default", "k8s-default")
    with pytest.raises(ValueError, match="takes no arguments"):
        resolve_policy("best-static:x=1", "tiny", [], models_dir=tmp_path)


def test_resolve_prefers_the_largest_budget(tmp_path):
    for budget, spec in ((8, "static-weights:w=1,0,0,0;tau=0"), (12, "static-weights:w=0,1,0,0;tau=0.2")):
        settings = SearchSettings("tiny", budget_min=budget).resolved()
        store({"policy": spec, "settings": settings.as_dict(), "written_at": "2026-01-01T00:00:00+00:00"},
              settings, tmp_path)
    assert resolve_policy("best-static", "tiny", [], models_dir=tmp_path)[1] == "static-weights:w=0,1,0,0;tau=0.2"
    assert len(list(tmp_path.glob("tiny-best-static-*.json"))) == 2


def test_cli_search_static(tmp_path):
    res = CliRunner().invoke(app, ["search-static", "--scenario", "tiny", "--budget-min", "1", "--tau-fixed", "0",
                                   "--step", "0.5", "--window-h", "2", "--max-windows", "2", "--workers", "1",
                                   "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    (path,) = tmp_path.glob("tiny-best-static-seed-*.json")
    stored = json.loads(path.read_text())
    assert stored["tau"] == 0.0 and stored["settings"]["tau_fixed"] == 0.0
    assert [r["windows"] for r in stored["search"]["rungs"]] == [1, 2]


def test_the_users_results_come_before_the_shipped_ones(tmp_path, monkeypatch):
    """Without --out, search-static writes to $TD3SCHED_MODELS/best-static (else ./models/best-static)
    and best-static reads that folder before the results shipped in the package."""
    from td3sched.shipped import MODELS_ENV, SHIPPED_MODELS

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(MODELS_ENV, raising=False)
    shipped = resolve_policy("best-static", "dlrm", [])[1]  # shipped with the package, found from any folder
    assert any(SHIPPED_MODELS.joinpath("best-static").glob("dlrm-best-static-*.json"))
    settings = SearchSettings("dlrm", budget_min=0.01).resolved()  # a smaller budget than the shipped search's
    path = store({"policy": "static-weights:w=1/0/0/0:tau=1", "settings": settings.as_dict(),
                  "written_at": "2026-01-01T00:00:00+00:00"}, settings)
    assert path.parent.resolve() == tmp_path / "models" / "best-static"
    assert resolve_policy("best-static", "dlrm", [])[1] == "static-weights:w=1/0/0/0:tau=1" != shipped
    monkeypatch.setenv(MODELS_ENV, str(tmp_path / "elsewhere"))
    assert resolve_policy("best-static", "dlrm", [])[1] == shipped


def test_a_search_with_ceilings_tries_each_weights_and_tau_point_with_each_and_resolves_by_name(tmp_path):
    """best-static-ceiling: the grid x the ceilings; a binding ceiling changes the run (tiny's first
    train window at a ceiling of 0.3 leaves pods waiting), a ceiling that never binds ties with none,
    and the result is read back by its policy name from the search with the default ceilings."""
    settings = SearchSettings("tiny", step="0.5", tau_values=(0.0,), ceiling_values=(None, 0.3, 0.95), window_h=3,
                              max_windows=1, budget_min=2)
    assert settings.variant == "best-static-ceiling" and settings.ceiling_values == (None, 0.3, 0.95)
    assert SearchSettings("tiny").as_dict() == {k: v for k, v in SearchSettings("tiny").as_dict().items()
                                                if k != "ceiling_values"}  # old stored results still match
    result, path = search(settings, workers=1, models_dir=tmp_path)
    stored = json.loads(path.read_text())
    by_spec = {c["policy"]: c["reward"] for c in stored["candidates"]}
    assert len(by_spec) == 10 * 3 + 1  # 10 simplex points x 3 ceilings, plus the equal-weights anchor
    base = "static-weights:w=0.5/0.5/0/0:tau=0"
    assert by_spec[base + ":ceiling=0.95"] == by_spec[base]
    assert by_spec[base + ":ceiling=0.3"] != by_spec[base]
    with pytest.raises(ValueError, match=r"--scenario tiny --ceiling-values none,0.6,0.7,0.8,0.9` first"):
        resolve_policy("best-static-ceiling", "tiny", [], models_dir=tmp_path)
    default = SearchSettings("tiny", ceiling_values=CEILING_VALUES).resolved()
    store({"policy": result["policy"], "settings": default.as_dict(), "written_at": "2026-01-01T00:00:00+00:00"},
          default, tmp_path)
    assert resolve_policy("best-static-ceiling", "tiny", [], models_dir=tmp_path) == ("best-static-ceiling",
                                                                                      result["policy"])
    with pytest.raises(ValueError, match=r"ceiling=1.6: expected a CPU utilisation in \(0, 1.5\]"):
        SearchSettings("tiny", ceiling_values=(1.6,))


def test_a_warmed_up_search_starts_each_window_after_a_warm_up_under_the_candidate(tmp_path):
    """warmup_h: every window is run as evaluate runs a span (the candidate's own warm-up first), and
    starts a whole warm-up after the trace's beginning; the default (0) keeps the stored results' keys."""
    assert "warmup_h" not in SearchSettings("tiny").resolved().as_dict()
    assert SearchSettings("tiny", warmup_h=6).key() != SearchSettings("tiny").key()
    with pytest.raises(ValueError, match=r"warmup_h=-1.0: expected hours >= 0"):
        SearchSettings("tiny", warmup_h=-1)
    with pytest.raises(ValueError, match=r"warmup_h=30: the train span ends at 18 h"):
        search(SearchSettings("tiny", step="0.5", tau_values=(0.0,), window_h=3, max_windows=1, warmup_h=30,
                              budget_min=1), workers=1, models_dir=tmp_path)
    settings = SearchSettings("tiny", step="0.5", tau_values=(0.0,), window_h=3, max_windows=1, warmup_h=6,
                              budget_min=2)
    result, path = search(settings, workers=1, models_dir=tmp_path)
    stored = json.loads(path.read_text())
    assert stored["settings"]["warmup_h"] == 6.0
    (window,) = stored["windows"]
    assert window["start_s"] >= 6 * 3600
    world = load_scenario("tiny").build(1)
    warmed = Simulation(world, make_policy(result["policy"]), 1, window["start_s"], window["end_s"],
                        warmup_s=6 * 3600).run()
    cold = Simulation(world, make_policy(result["policy"]), 1, window["start_s"], window["end_s"]).run()
    assert result["reward"] == pytest.approx(warmed["metrics"]["episode_reward"], rel=1e-12)
    assert warmed["metrics"]["episode_reward"] != cold["metrics"]["episode_reward"]


def test_a_scenario_names_its_searchs_default_windows():
    """A scenario's ``search`` section sets the windows a search builds when the command line does not:
    openb's placements act over pods' 24-hour lives, so its windows are 6 hours after a 12-hour warm-up.
    An explicit value wins, and a ``--set`` meets the schema (and changes the stored result's key)."""
    openb = SearchSettings("openb").resolved()
    assert (openb.window_h, openb.warmup_h) == (6.0, 12.0) and openb.as_dict()["warmup_h"] == 12.0
    cold = SearchSettings("openb", warmup_h=0, window_h=1).resolved()
    assert (cold.window_h, cold.warmup_h) == (1.0, 0.0) and "warmup_h" not in cold.as_dict()
    assert SearchSettings("openb", ("search.warmup_h=3",)).resolved().warmup_h == 3.0
    assert SearchSettings("openb", ("search.warmup_h=3",)).key() != SearchSettings("openb").key()
    tiny = SearchSettings("tiny").resolved()  # no search section: the train span's 24th, no warm-up
    assert (tiny.window_h, tiny.warmup_h) == (1.0, 0.0)
    with pytest.raises(ScenarioError, match=r"search.warmup_h=-2: expected a number >= 0"):
        SearchSettings("openb", ("search.warmup_h=-2",)).resolved()


def test_a_span_with_fewer_hourly_starts_than_windows_ends_the_ladder_at_the_windows_there_are(tmp_path):
    """tiny's 18-hour train span after a 12-hour warm-up holds 3-hour windows at 3 distinct hourly starts
    (12, 13 and 14 h), not the 8 the ladder's last rung asks for: the ladder stops at 3 (it used to ask
    for window 3 and fail with an IndexError)."""
    assert len(train_windows(12 * 3600, 18 * 3600, 3 * 3600, 8)) == 3
    settings = SearchSettings("tiny", step="0.5", tau_values=(0.0,), window_h=3, warmup_h=12, budget_min=5)
    result, path = search(settings, workers=1, models_dir=tmp_path)
    stored = json.loads(path.read_text())
    assert len(stored["windows"]) == 3 and stored["settings"]["max_windows"] == 8
    assert [r["windows"] for r in stored["search"]["rungs"]][-1] == 3 and stored["search"]["stopped"] == "ladder complete"
    assert result["reward_per_window"] and len(result["reward_per_window"]) == 3
